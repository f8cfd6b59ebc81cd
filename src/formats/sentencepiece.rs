//! SentencePiece model files (`tokenizer.model`): a protobuf `ModelProto`,
//! read with a minimal wire-format reader — the pieces (text, score, type)
//! and the trainer and normalizer settings a GGUF conversion needs. Fields we do not read
//! are skipped by their wire type; anything malformed is an error naming the
//! byte offset.

use std::path::{Path, PathBuf};

/// What a piece is, as `sentencepiece_model.proto` numbers it (and as
/// GGUF's `tokenizer.ggml.token_type` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl PieceType {
    fn from_proto(value: u64) -> Option<PieceType> {
        Some(match value {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }

    /// The number GGUF stores in `tokenizer.ggml.token_type`.
    pub fn id(self) -> i32 {
        self as i32 + 1
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Piece {
    pub piece: String,
    pub score: f32,
    #[serde(rename = "type")]
    pub kind: PieceType,
}

/// The trainer settings conversion reads (proto defaults where absent).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainerSpec {
    /// 1 unigram, 2 BPE, 3 word, 4 char.
    pub model_type: u64,
    pub vocab_size: i64,
    pub byte_fallback: bool,
    pub unk_id: i64,
    pub bos_id: i64,
    pub eos_id: i64,
    pub pad_id: i64,
}

impl Default for TrainerSpec {
    fn default() -> TrainerSpec {
        TrainerSpec {
            model_type: 1,
            vocab_size: 8000,
            byte_fallback: false,
            unk_id: 0,
            bos_id: 1,
            eos_id: 2,
            pad_id: -1,
        }
    }
}

/// The normalizer settings a T5-style (Unigram) vocabulary carries into
/// GGUF (proto defaults where absent).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NormalizerSpec {
    /// The compiled normalization rules, empty when none.
    #[serde(skip)]
    pub precompiled_charsmap: Vec<u8>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
}

impl Default for NormalizerSpec {
    fn default() -> NormalizerSpec {
        NormalizerSpec { precompiled_charsmap: Vec::new(), add_dummy_prefix: true, remove_extra_whitespaces: true }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SentencePieceModel {
    pub pieces: Vec<Piece>,
    pub trainer: TrainerSpec,
    pub normalizer: NormalizerSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: at byte {offset}: {problem}", path.display())]
pub struct SentencePieceError {
    pub path: PathBuf,
    pub offset: usize,
    pub problem: String,
}

impl SentencePieceModel {
    pub fn load(path: &Path) -> Result<SentencePieceModel, SentencePieceError> {
        let bytes = std::fs::read(path).map_err(|e| SentencePieceError {
            path: path.to_owned(),
            offset: 0,
            problem: e.to_string(),
        })?;
        SentencePieceModel::parse(&bytes).map_err(|(offset, problem)| SentencePieceError {
            path: path.to_owned(),
            offset,
            problem,
        })
    }

    /// Parses a `ModelProto`; errors are (byte offset, problem).
    pub fn parse(bytes: &[u8]) -> Result<SentencePieceModel, (usize, String)> {
        let mut model = SentencePieceModel {
            pieces: Vec::new(),
            trainer: TrainerSpec::default(),
            normalizer: NormalizerSpec::default(),
        };
        let mut reader = Reader { bytes, at: 0, base: 0 };
        while let Some((field, value)) = reader.field()? {
            match (field, value) {
                (1, Value::Bytes(inner, base)) => model.pieces.push(parse_piece(inner, base)?),
                (2, Value::Bytes(inner, base)) => parse_trainer(inner, base, &mut model.trainer)?,
                (3, Value::Bytes(inner, base)) => parse_normalizer(inner, base, &mut model.normalizer)?,
                _ => {}
            }
        }
        Ok(model)
    }
}

fn parse_normalizer(bytes: &[u8], base: usize, spec: &mut NormalizerSpec) -> Result<(), (usize, String)> {
    let mut reader = Reader { bytes, at: 0, base };
    while let Some((field, value)) = reader.field()? {
        match (field, value) {
            (2, Value::Bytes(charsmap, _)) => spec.precompiled_charsmap = charsmap.to_vec(),
            (3, Value::Varint(v, _)) => spec.add_dummy_prefix = v != 0,
            (4, Value::Varint(v, _)) => spec.remove_extra_whitespaces = v != 0,
            _ => {}
        }
    }
    Ok(())
}

fn parse_piece(bytes: &[u8], base: usize) -> Result<Piece, (usize, String)> {
    let mut piece = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut reader = Reader { bytes, at: 0, base };
    while let Some((field, value)) = reader.field()? {
        match (field, value) {
            (1, Value::Bytes(text, at)) => {
                piece.piece = std::str::from_utf8(text)
                    .map_err(|e| (at + e.valid_up_to(), "a piece is not UTF-8".to_owned()))?
                    .to_owned();
            }
            (2, Value::Fixed32(bits)) => piece.score = f32::from_bits(bits),
            (3, Value::Varint(kind, at)) => {
                piece.kind = PieceType::from_proto(kind).ok_or_else(|| (at, format!("unknown piece type {kind}")))?;
            }
            _ => {}
        }
    }
    Ok(piece)
}

fn parse_trainer(bytes: &[u8], base: usize, spec: &mut TrainerSpec) -> Result<(), (usize, String)> {
    let mut reader = Reader { bytes, at: 0, base };
    // int32 fields are varints of the value sign-extended to 64 bits.
    let int32 = |v: u64| v as i64 as i32 as i64;
    while let Some((field, value)) = reader.field()? {
        if let Value::Varint(v, _) = value {
            match field {
                3 => spec.model_type = v,
                4 => spec.vocab_size = int32(v),
                35 => spec.byte_fallback = v != 0,
                40 => spec.unk_id = int32(v),
                41 => spec.bos_id = int32(v),
                42 => spec.eos_id = int32(v),
                43 => spec.pad_id = int32(v),
                _ => {}
            }
        }
    }
    Ok(())
}

enum Value<'a> {
    /// The value and the offset it started at.
    Varint(u64, usize),
    Fixed32(u32),
    Fixed64,
    /// The bytes and the absolute offset of the first.
    Bytes(&'a [u8], usize),
}

/// Protobuf wire format over one message's bytes; `base` is the message's
/// absolute offset in the file, for error positions.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, at: usize, problem: impl Into<String>) -> (usize, String) {
        (self.base + at, problem.into())
    }

    fn varint(&mut self) -> Result<u64, (usize, String)> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(self.error(start, "the file ends inside a varint"));
            };
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error(start, "a varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], (usize, String)> {
        let start = self.at;
        let end = start.checked_add(n).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(
                self.error(start, format!("{what} of {n} bytes runs past the end ({} left)", self.bytes.len() - start))
            );
        };
        self.at = end;
        Ok(&self.bytes[start..end])
    }

    /// The next field number and value, or `None` at the end of the message.
    fn field(&mut self) -> Result<Option<(u64, Value<'a>)>, (usize, String)> {
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let start = self.at;
        let key = self.varint()?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(self.error(start, "field number 0"));
        }
        let value = match wire {
            0 => {
                let at = self.base + self.at;
                Value::Varint(self.varint()?, at)
            }
            1 => {
                self.take(8, "a 64-bit field")?;
                Value::Fixed64
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| self.error(start, format!("a length of {len}")))?;
                let at = self.base + self.at;
                Value::Bytes(self.take(len, "a length-delimited field")?, at)
            }
            5 => {
                let b = self.take(4, "a 32-bit field")?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            other => {
                return Err(
                    self.error(start, format!("wire type {other} (field {field}) is not one protobuf uses here"))
                );
            }
        };
        Ok(Some((field, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn piece(text: &str, score: f32, kind: u64) -> Vec<u8> {
        let mut p = vec![0x0a];
        varint(text.len() as u64, &mut p);
        p.extend(text.as_bytes());
        p.push(0x15);
        p.extend(score.to_le_bytes());
        p.push(0x18);
        varint(kind, &mut p);
        let mut m = vec![0x0a];
        varint(p.len() as u64, &mut m);
        m.extend(p);
        m
    }

    #[test]
    fn reads_pieces_and_skips_unknown_fields() {
        let mut bytes = piece("<unk>", 0.0, 2);
        bytes.extend(piece("▁the", -3.5, 1));
        // An unknown fixed64 field (number 9) and a trainer spec with model_type 2 and pad_id -1.
        bytes.extend([0x49, 1, 2, 3, 4, 5, 6, 7, 8]);
        let mut trainer = vec![0x18, 2, 0xd8, 0x02];
        varint(u64::MAX, &mut trainer);
        bytes.push(0x12);
        varint(trainer.len() as u64, &mut bytes);
        bytes.extend(trainer);
        let m = SentencePieceModel::parse(&bytes).unwrap();
        assert_eq!(m.pieces.len(), 2);
        assert_eq!(
            (m.pieces[1].piece.as_str(), m.pieces[1].score, m.pieces[1].kind),
            ("▁the", -3.5, PieceType::Normal)
        );
        assert_eq!((m.trainer.model_type, m.trainer.pad_id, m.trainer.bos_id), (2, -1, 1));
        assert_eq!(m.normalizer, NormalizerSpec::default());
    }

    #[test]
    fn reads_the_normalizer_spec() {
        // name "nmt_nfkc", a charsmap of three bytes, add_dummy_prefix false; remove_extra_whitespaces absent.
        let mut spec = vec![0x0a, 8];
        spec.extend(b"nmt_nfkc");
        spec.extend([0x12, 3, 0xde, 0xad, 0x01, 0x18, 0]);
        let mut bytes = vec![0x1a];
        varint(spec.len() as u64, &mut bytes);
        bytes.extend(spec);
        let m = SentencePieceModel::parse(&bytes).unwrap();
        assert_eq!(
            m.normalizer,
            NormalizerSpec {
                precompiled_charsmap: vec![0xde, 0xad, 0x01],
                add_dummy_prefix: false,
                remove_extra_whitespaces: true
            }
        );
    }

    #[test]
    fn malformed_input_names_the_offset() {
        let bytes = piece("abc", 1.0, 1);
        for cut in 1..bytes.len() {
            let (offset, problem) = SentencePieceModel::parse(&bytes[..cut]).unwrap_err();
            assert!(offset <= cut, "cut {cut}: {offset} {problem}");
        }
        assert_eq!(
            SentencePieceModel::parse(&[0x0b]).unwrap_err().1,
            "wire type 3 (field 1) is not one protobuf uses here"
        );
        assert_eq!(
            SentencePieceModel::parse(&[0x0a, 0x02, 0x18, 0x09]).unwrap_err(),
            (3, "unknown piece type 9".to_owned())
        );
    }
}
