//! Legacy GGML containers: `ggml` (unversioned), `ggmf` v1 and `ggjt` v1–v3.
//!
//! These pre-GGUF files carry seven LLaMA hyperparameters, a vocabulary and
//! tensors, and nothing else. They are read into the same model as a GGUF
//! file, with the metadata llama.cpp's `convert_llama_ggml_to_gguf.py`
//! writes (architecture `llama`, GGUF key and tensor names) except
//! `general.name`, which that script takes from the file name: a path never
//! changes what a model is.
//!
//! Block layouts changed twice before GGUF: GGJT v2 stopped interleaving the
//! 4-bit quants of Q4_0/Q4_1/Q5_0/Q5_1, and GGJT v3 narrowed the Q4_0/Q4_1/
//! Q8_0 scales from f32 to f16. Older tensors are repacked into the current
//! layout when their bytes are read; the f32 → f16 narrowing of scales is the
//! one lossy step (round to nearest even), and inspect says when it applies.
//!
//! What a GGUF model cannot say about the file it was read from — `n_mult`,
//! `n_rot`, vocabulary texts the GGUF rewrites beyond recovery — travels
//! beside it as a [`LegacyHeader`], so [`writer`] gives a GGJT v3 file read
//! in back byte for byte.

mod writer;

pub use writer::{GGJT_TYPES, GgjtError, GgjtLayout, layout as ggjt_layout};

use std::borrow::Cow;

use half::f16;

use super::bytes::{ByteReader, Field};
use super::error::{ErrorKind, Result};
use crate::model::{
    Array, Endian, LegacyBlockLayout, Metadata, StoredLayout, StringArray, TOKENS_KEY, TensorInfo, Value,
    element_count, tensor_bytes,
};
use crate::types::{FileType, GgmlType};

/// The magics, as the little-endian `u32` the files start with.
pub const MAGIC_GGML: u32 = 0x6767_6d6c;
pub const MAGIC_GGMF: u32 = 0x6767_6d66;
pub const MAGIC_GGJT: u32 = 0x6767_6a74;

/// GGJT aligns tensor data to 32 bytes from the start of the file.
const GGJT_ALIGNMENT: u64 = 32;

/// Defaults `convert_llama_ggml_to_gguf.py` uses for facts the files lack.
const DEFAULT_CONTEXT_LENGTH: u32 = 2048;
const DEFAULT_RMS_EPS: f32 = 5.0e-6;

/// Which of the three legacy containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LegacyVariant {
    Ggml,
    Ggmf,
    Ggjt,
}

impl LegacyVariant {
    pub fn name(self) -> &'static str {
        match self {
            LegacyVariant::Ggml => "GGML",
            LegacyVariant::Ggmf => "GGMF",
            LegacyVariant::Ggjt => "GGJT",
        }
    }

    pub fn from_magic(magic: u32) -> Option<LegacyVariant> {
        match magic {
            MAGIC_GGML => Some(LegacyVariant::Ggml),
            MAGIC_GGMF => Some(LegacyVariant::Ggmf),
            MAGIC_GGJT => Some(LegacyVariant::Ggjt),
            _ => None,
        }
    }
}

impl LegacyBlockLayout {
    /// The layout of `ty` in a file of this variant and version, or `None`
    /// when it is the current one.
    fn of(variant: LegacyVariant, version: u32, ty: GgmlType) -> Option<LegacyBlockLayout> {
        let before_v2 = variant != LegacyVariant::Ggjt || version < 2;
        let before_v3 = variant != LegacyVariant::Ggjt || version < 3;
        let f32_scales = before_v3 && matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0);
        let interleaved_nibbles =
            before_v2 && matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1);
        (f32_scales || interleaved_nibbles).then_some(LegacyBlockLayout { f32_scales, interleaved_nibbles })
    }

    /// Bytes of one stored block of `ty`.
    fn block_bytes(self, ty: GgmlType) -> u64 {
        // Each f32 scale is two bytes wider than its f16 successor.
        ty.type_size() + if self.f32_scales { 2 * n_scales(ty) as u64 } else { 0 }
    }

    /// Converts stored blocks of `ty` to the current layout.
    pub fn repack(self, ty: GgmlType, stored: &[u8]) -> Vec<u8> {
        let old_size = self.block_bytes(ty) as usize;
        let scale_width = if self.f32_scales { 4 } else { 2 };
        let mut out = Vec::with_capacity(stored.len() / old_size * ty.type_size() as usize);
        for block in stored.chunks_exact(old_size) {
            let (scales, quants) = block.split_at(scale_width * n_scales(ty));
            if self.f32_scales {
                out.extend(narrow_scales(scales));
            } else {
                out.extend_from_slice(scales);
            }
            if self.interleaved_nibbles {
                // Q5's high bits (`qh`) come before the 16 nibble bytes and
                // were always indexed by element.
                let (high_bits, nibbles) = quants.split_at(quants.len() - 16);
                out.extend_from_slice(high_bits);
                out.extend_from_slice(&deinterleave(nibbles));
            } else {
                out.extend_from_slice(quants);
            }
        }
        out
    }
}

/// Scales per block: the delta, plus the minimum for the `_1` types.
fn n_scales(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => 2,
        _ => 1,
    }
}

fn narrow_scales(f32_scales: &[u8]) -> impl Iterator<Item = u8> + '_ {
    f32_scales.chunks_exact(4).flat_map(|c| {
        let value = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        f16::from_f32(value).to_le_bytes()
    })
}

/// Old order: byte `i` holds elements `2i` (low) and `2i+1` (high).
/// New order: byte `j` holds elements `j` (low) and `j+16` (high).
fn deinterleave(nibbles: &[u8]) -> [u8; 16] {
    let mut values = [0u8; 32];
    for (i, &byte) in nibbles.iter().enumerate() {
        values[2 * i] = byte & 0x0f;
        values[2 * i + 1] = byte >> 4;
    }
    let mut out = [0u8; 16];
    for (j, byte) in out.iter_mut().enumerate() {
        *byte = values[j] | (values[j + 16] << 4);
    }
    out
}

/// Everything a legacy file holds, in GGUF terms.
pub struct LegacyModel {
    pub variant: LegacyVariant,
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    /// Bytes before the first tensor.
    pub header_len: u64,
    pub legacy: LegacyHeader,
}

/// The facts of a legacy file its GGUF metadata does not keep, each with
/// what it was derived against: a writer uses them only while those still
/// hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LegacyHeader {
    /// Rounds the feed-forward width (old llama.cpp computed it from this).
    pub n_mult: u32,
    pub n_rot: u32,
    /// `embedding_length`, `head_count` and `feed_forward_length` as read.
    pub n_embd: u32,
    pub n_head: u32,
    pub n_ff: u32,
    /// Token texts that the GGUF vocabulary does not give back (the first
    /// three, which it renames; a text that held `▁`), by id.
    pub token_texts: Vec<(u32, Vec<u8>)>,
}

struct Hyperparameters {
    n_vocab: u32,
    n_embd: u32,
    n_mult: u32,
    n_head: u32,
    n_layer: u32,
    n_rot: u32,
    ftype: u32,
}

/// Reads a legacy file held in memory; `path` names it in errors.
pub fn read_bytes(bytes: &[u8], path: &std::path::Path) -> Result<LegacyModel> {
    read(&mut ByteReader::over_bytes(bytes, path))
}

pub fn read(r: &mut ByteReader<'_>) -> Result<LegacyModel> {
    r.endian = Endian::Little;
    let magic = r.u32(Field::Static("magic"))?;
    let Some(variant) = LegacyVariant::from_magic(magic) else {
        return Err(r.error_at(0, ErrorKind::Invalid(format!("bad GGML magic {magic:#010x}"))));
    };
    let version = match variant {
        LegacyVariant::Ggml => 1,
        LegacyVariant::Ggmf | LegacyVariant::Ggjt => {
            let offset = r.pos();
            let version = r.u32(Field::Static("version"))?;
            let supported = if variant == LegacyVariant::Ggmf { 1..=1 } else { 1..=3 };
            if !supported.contains(&version) {
                return Err(r.error_at(
                    offset,
                    ErrorKind::UnsupportedVersion {
                        format: variant.name(),
                        version,
                        supported: if variant == LegacyVariant::Ggmf { "1" } else { "1, 2, 3" },
                    },
                ));
            }
            version
        }
    };

    let hp_offset = r.pos();
    let what = Field::Static("the hyperparameters");
    let n_vocab = r.u32(what)?;
    let n_embd = r.u32(what)?;
    let n_mult = r.u32(what)?;
    let n_head = r.u32(what)?;
    let n_layer = r.u32(what)?;
    let n_rot = r.u32(what)?;
    let ftype = r.u32(what)?;
    let hp = Hyperparameters { n_vocab, n_embd, n_mult, n_head, n_layer, n_rot, ftype };
    if hp.n_head == 0 {
        return Err(r.error_at(hp_offset, ErrorKind::Invalid("n_head is 0".into())));
    }

    let has_scores = variant != LegacyVariant::Ggml;
    let vocab = read_vocab(r, hp.n_vocab, has_scores)?;
    let header_len = r.pos();
    let tensors = read_tensors(r, variant, version)?;
    let token_texts = vocab
        .iter()
        .enumerate()
        .filter(|(id, entry)| legacy_token_text(*id, &gguf_token_text(*id, &entry.text).0) != entry.text)
        .map(|(id, entry)| (id as u32, entry.text.clone()))
        .collect();
    let n_ff = feed_forward_length(&hp, &tensors);
    let legacy = LegacyHeader { n_mult, n_rot, n_embd, n_head, n_ff, token_texts };
    let metadata = build_metadata(variant, version, &hp, vocab, &tensors);
    Ok(LegacyModel { variant, version, metadata, tensors, header_len, legacy })
}

struct VocabEntry {
    text: Vec<u8>,
    score: f32,
}

fn read_vocab(r: &mut ByteReader<'_>, n_vocab: u32, has_scores: bool) -> Result<Vec<VocabEntry>> {
    let what = Field::Static("the vocabulary");
    r.check_count(u64::from(n_vocab), if has_scores { 8 } else { 4 }, what)?;
    let mut vocab = Vec::with_capacity(n_vocab as usize);
    for _ in 0..n_vocab {
        let len = r.u32(what)?;
        let text = r.bytes(u64::from(len), what)?;
        let score = if has_scores { r.f32(what)? } else { 0.0 };
        vocab.push(VocabEntry { text, score });
    }
    Ok(vocab)
}

fn read_tensors(r: &mut ByteReader<'_>, variant: LegacyVariant, version: u32) -> Result<Vec<TensorInfo>> {
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while r.remaining() > 0 {
        let info_offset = r.pos();
        let what = Field::Static("a tensor header");
        let n_dims = r.u32(what)?;
        let name_len = r.u32(what)?;
        let type_id = r.u32(what)?;
        if n_dims == 0 || u64::from(n_dims) > super::gguf::MAX_DIMS {
            return Err(r.error_at(
                info_offset,
                ErrorKind::BadDimensionCount {
                    tensor: format!("#{}", tensors.len()),
                    n_dims: u64::from(n_dims),
                    max: super::gguf::MAX_DIMS,
                },
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(u64::from(r.u32(what)?));
        }
        let name = r.bytes(u64::from(name_len), what)?;
        let name = String::from_utf8(name).map_err(|e| {
            r.error_at(
                info_offset,
                ErrorKind::InvalidUtf8 { what: format!("tensor name {:?}", String::from_utf8_lossy(e.as_bytes())) },
            )
        })?;
        let name = gguf_tensor_name(&name);
        if !seen.insert(name.clone()) {
            return Err(r.error_at(info_offset, ErrorKind::DuplicateTensor { tensor: name }));
        }
        let ggml_type = super::resolve_tensor_type(type_id, &name).map_err(|kind| r.error_at(info_offset, kind))?;
        if element_count(&dims).is_none() {
            return Err(r.error_at(info_offset, ErrorKind::ElementCountOverflow { tensor: name, shape: dims }));
        }
        let block = ggml_type.block_size();
        if dims[0] % block != 0 {
            return Err(r.error_at(
                info_offset,
                ErrorKind::RowNotBlockMultiple { tensor: name, row: dims[0], ty: ggml_type, block },
            ));
        }
        if variant == LegacyVariant::Ggjt {
            let pad = r.pos().next_multiple_of(GGJT_ALIGNMENT) - r.pos();
            r.skip(pad, Field::Tensor(&name))?;
        }
        let legacy = LegacyBlockLayout::of(variant, version, ggml_type);
        let n_bytes = tensor_bytes(ggml_type, &dims);
        let stored_len = match legacy {
            None => n_bytes,
            Some(layout) => n_bytes.map(|_| element_count(&dims).unwrap_or(0) / block * layout.block_bytes(ggml_type)),
        };
        let Some(stored_len) = stored_len else {
            return Err(r.error_at(info_offset, ErrorKind::ElementCountOverflow { tensor: name, shape: dims }));
        };
        let file_offset = r.pos();
        r.skip(stored_len, Field::Tensor(&name))?;
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            file_offset,
            stored_len,
            layout: legacy.map_or(StoredLayout::Native, StoredLayout::LegacyBlocks),
        });
    }
    Ok(tensors)
}

/// Legacy LLaMA tensor names and their GGUF names (both ways); `N` is the
/// layer number.
const TENSOR_NAMES: &[(&str, &str)] = &[
    ("tok_embeddings", "token_embd"),
    ("norm", "output_norm"),
    ("output", "output"),
    ("rope.freqs", "rope_freqs"),
    ("layers.N.attention.wq", "blk.N.attn_q"),
    ("layers.N.attention.wk", "blk.N.attn_k"),
    ("layers.N.attention.wv", "blk.N.attn_v"),
    ("layers.N.attention.wo", "blk.N.attn_output"),
    ("layers.N.attention_norm", "blk.N.attn_norm"),
    ("layers.N.feed_forward.w1", "blk.N.ffn_gate"),
    ("layers.N.feed_forward.w2", "blk.N.ffn_down"),
    ("layers.N.feed_forward.w3", "blk.N.ffn_up"),
    ("layers.N.ffn_norm", "blk.N.ffn_norm"),
];

/// The GGUF name of a legacy tensor; unknown names are kept as they are.
fn gguf_tensor_name(legacy: &str) -> String {
    renamed(legacy, "layers.", |(old, new)| (old, new))
}

/// The legacy name of a GGUF tensor; unknown names are kept as they are.
fn legacy_tensor_name(gguf: &str) -> String {
    renamed(gguf, "blk.", |(old, new)| (new, old))
}

/// `name` renamed by the [`TENSOR_NAMES`] row whose `from` side (as `sides`
/// orders a row) matches it, the layer number (after `layer_prefix`) and a
/// `.weight`/`.bias` suffix carried over.
fn renamed(
    name: &str,
    layer_prefix: &str,
    sides: fn((&'static str, &'static str)) -> (&'static str, &'static str),
) -> String {
    let (base, suffix) = match name.rsplit_once('.') {
        Some((base, suffix @ ("weight" | "bias"))) => (base, Some(suffix)),
        _ => (name, None),
    };
    let (pattern, layer) = match base.strip_prefix(layer_prefix).and_then(|rest| rest.split_once('.')) {
        Some((n, rest)) if n.parse::<u32>().is_ok() => (format!("{layer_prefix}N.{rest}"), Some(n)),
        _ => (base.to_owned(), None),
    };
    let Some((_, to)) = TENSOR_NAMES.iter().map(|&row| sides(row)).find(|(from, _)| *from == pattern) else {
        return name.to_owned();
    };
    let mut renamed = match layer {
        Some(n) => to.replacen('N', n, 1),
        None => to.to_owned(),
    };
    if let Some(suffix) = suffix {
        renamed.push('.');
        renamed.push_str(suffix);
    }
    renamed
}

/// The name `convert_llama_ggml_to_gguf.py` gives a legacy ftype.
fn ftype_label(ftype: u32) -> String {
    if ftype == 0 {
        return "ALL_F32".into();
    }
    match FileType::from_id(ftype).map(FileType::name).or_else(|| FileType::removed_name(ftype)) {
        Some(name) => format!("MOSTLY_{name}"),
        None => format!("ftype {ftype}"),
    }
}

/// Layer 0's feed-forward width, or what `n_mult` makes of the embedding
/// width for a file without one.
fn feed_forward_length(hp: &Hyperparameters, tensors: &[TensorInfo]) -> u32 {
    tensors
        .iter()
        .find(|t| t.name == "blk.0.ffn_gate.weight")
        .and_then(|t| t.dims.get(1).copied())
        .and_then(|d| u32::try_from(d).ok())
        .unwrap_or_else(|| llama_n_ff(hp.n_embd, hp.n_mult))
}

fn build_metadata(
    variant: LegacyVariant,
    version: u32,
    hp: &Hyperparameters,
    vocab: Vec<VocabEntry>,
    tensors: &[TensorInfo],
) -> Metadata {
    let n_ff = feed_forward_length(hp, tensors);
    let mut m = Metadata::new();
    m.set("general.architecture", Value::string("llama"));
    m.set(
        "general.description",
        Value::string(&format!("converted from legacy {}v{version} {} format", variant.name(), ftype_label(hp.ftype))),
    );
    m.set("general.file_type", Value::U32(hp.ftype));
    m.set("llama.context_length", Value::U32(DEFAULT_CONTEXT_LENGTH));
    m.set("llama.embedding_length", Value::U32(hp.n_embd));
    m.set("llama.block_count", Value::U32(hp.n_layer));
    m.set("llama.feed_forward_length", Value::U32(n_ff));
    m.set("llama.rope.dimension_count", Value::U32(hp.n_embd / hp.n_head));
    m.set("llama.attention.head_count", Value::U32(hp.n_head));
    m.set("llama.attention.head_count_kv", Value::U32(hp.n_head));
    m.set("llama.attention.layer_norm_rms_epsilon", Value::F32(DEFAULT_RMS_EPS));
    m.set("tokenizer.ggml.model", Value::string("llama"));
    m.set("tokenizer.ggml.pre", Value::string("default"));
    let (tokens, scores, types) = gguf_vocab(vocab);
    m.set(TOKENS_KEY, Value::Array(Array::String(tokens)));
    m.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    m.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    m.set("tokenizer.ggml.unknown_token_id", Value::U32(0));
    m.set("tokenizer.ggml.bos_token_id", Value::U32(1));
    m.set("tokenizer.ggml.eos_token_id", Value::U32(2));
    m
}

/// LLaMA's feed-forward width from `n_mult`, for files without layer 0's FFN.
/// Computed in u64: a hostile header's `n_embd` must not overflow it.
fn llama_n_ff(n_embd: u32, n_mult: u32) -> u32 {
    let n_mult = u64::from(n_mult.max(1));
    let n_ff = (2 * (4 * u64::from(n_embd)) / 3).div_ceil(n_mult) * n_mult;
    u32::try_from(n_ff).unwrap_or(u32::MAX)
}

/// llama.cpp token types.
const TOKEN_NORMAL: i32 = 1;
const TOKEN_UNKNOWN: i32 = 2;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_BYTE: i32 = 6;

/// SentencePiece's word-boundary marker, which legacy files stored as a space.
const SPM_SPACE: &str = "\u{2581}";

/// The vocabulary as `convert_llama_ggml_to_gguf.py` rewrites it: the first
/// three ids are `<unk>`, `<s>`, `</s>`; single bytes at ids 3–258 become
/// `<0xXX>` byte tokens; spaces become SentencePiece's marker.
fn gguf_vocab(vocab: Vec<VocabEntry>) -> (StringArray, Vec<f32>, Vec<i32>) {
    let mut tokens = StringArray::with_capacity(vocab.len());
    let mut scores = Vec::with_capacity(vocab.len());
    let mut types = Vec::with_capacity(vocab.len());
    for (id, entry) in vocab.into_iter().enumerate() {
        let (text, ty) = gguf_token_text(id, &entry.text);
        tokens.push(&text);
        scores.push(entry.score);
        types.push(ty);
    }
    (tokens, scores, types)
}

/// Token `id`'s GGUF text and type.
fn gguf_token_text(id: usize, text: &[u8]) -> (Cow<'static, [u8]>, i32) {
    match id {
        0 => (Cow::Borrowed(b"<unk>"), TOKEN_UNKNOWN),
        1 => (Cow::Borrowed(b"<s>"), TOKEN_CONTROL),
        2 => (Cow::Borrowed(b"</s>"), TOKEN_CONTROL),
        _ if text.is_empty() => (Cow::Borrowed(b""), TOKEN_CONTROL),
        3..=258 if text.len() == 1 => (Cow::Owned(format!("<0x{:02X}>", text[0]).into_bytes()), TOKEN_BYTE),
        _ => (Cow::Owned(replaced(text, b" ", SPM_SPACE.as_bytes())), TOKEN_NORMAL),
    }
}

/// Token `id`'s legacy text from its GGUF text, as llama.cpp's GGJT-era
/// `convert.py` wrote a SentencePiece vocabulary: the unknown token ` ⁇ `,
/// control tokens empty, byte tokens their byte, `▁` a space.
fn legacy_token_text(id: usize, text: &[u8]) -> Vec<u8> {
    match (id, byte_token(text)) {
        (0, _) => " \u{2047} ".as_bytes().to_vec(),
        (1 | 2, _) => Vec::new(),
        (3..=258, Some(byte)) => vec![byte],
        _ => replaced(text, SPM_SPACE.as_bytes(), b" "),
    }
}

/// The byte of a `<0xXX>` token.
fn byte_token(text: &[u8]) -> Option<u8> {
    let hex = text.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    (hex.len() == 2 && hex.iter().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c)))
        .then(|| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok())
        .flatten()
}

/// `text` with every `from` replaced by `to`.
fn replaced(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if rest.starts_with(from) {
            out.extend_from_slice(to);
            rest = &rest[from.len()..];
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_names_map_to_gguf_names() {
        assert_eq!(gguf_tensor_name("tok_embeddings.weight"), "token_embd.weight");
        assert_eq!(gguf_tensor_name("layers.11.attention.wq.weight"), "blk.11.attn_q.weight");
        assert_eq!(gguf_tensor_name("layers.0.feed_forward.w2.weight"), "blk.0.ffn_down.weight");
        assert_eq!(gguf_tensor_name("norm.weight"), "output_norm.weight");
        assert_eq!(gguf_tensor_name("something.else"), "something.else");
    }

    #[test]
    fn layouts_by_version() {
        let of = LegacyBlockLayout::of;
        assert_eq!(of(LegacyVariant::Ggjt, 3, GgmlType::Q4_0), None);
        assert_eq!(
            of(LegacyVariant::Ggjt, 2, GgmlType::Q4_0),
            Some(LegacyBlockLayout { f32_scales: true, interleaved_nibbles: false })
        );
        assert_eq!(
            of(LegacyVariant::Ggmf, 1, GgmlType::Q5_1),
            Some(LegacyBlockLayout { f32_scales: false, interleaved_nibbles: true })
        );
        assert_eq!(of(LegacyVariant::Ggml, 1, GgmlType::F16), None);
        for (ty, bytes) in [(GgmlType::Q4_0, 20), (GgmlType::Q4_1, 24), (GgmlType::Q8_0, 36), (GgmlType::Q5_0, 22)] {
            let layout = of(LegacyVariant::Ggjt, 1, ty).unwrap();
            assert_eq!(layout.block_bytes(ty), bytes, "{ty}");
        }
    }

    #[test]
    fn repack_q4_0_v1_block() {
        // Elements e[k] = k % 16; old order packs (e[2i], e[2i+1]) per byte.
        let mut old = 0.5f32.to_le_bytes().to_vec();
        old.extend((0..16u8).map(|i| ((2 * i) % 16) | (((2 * i + 1) % 16) << 4)));
        let layout = LegacyBlockLayout { f32_scales: true, interleaved_nibbles: true };
        let new = layout.repack(GgmlType::Q4_0, &old);
        assert_eq!(new.len(), 18);
        assert_eq!(&new[..2], &f16::from_f32(0.5).to_le_bytes());
        for j in 0..16u8 {
            assert_eq!(new[2 + j as usize], (j % 16) | (((j + 16) % 16) << 4));
        }
    }

    #[test]
    fn repack_q4_1_v2_keeps_quants_and_narrows_both_scales() {
        let mut old = 0.25f32.to_le_bytes().to_vec();
        old.extend_from_slice(&(-1.5f32).to_le_bytes());
        old.extend(0..16u8);
        let layout = LegacyBlockLayout { f32_scales: true, interleaved_nibbles: false };
        let new = layout.repack(GgmlType::Q4_1, &old);
        assert_eq!(&new[..2], &f16::from_f32(0.25).to_le_bytes());
        assert_eq!(&new[2..4], &f16::from_f32(-1.5).to_le_bytes());
        assert_eq!(&new[4..], &(0..16u8).collect::<Vec<_>>()[..]);
    }
}
