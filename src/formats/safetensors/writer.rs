//! Writing SafeTensors files byte for byte as the reference implementation
//! writes them (the `safetensors` crate's `serialize`, which Python's
//! `safetensors.numpy.save_file` and `safetensors.torch.save_file` both end
//! in, so the two agree):
//!
//! - tensors sorted by dtype, widest first (the reverse of the reference's
//!   `Dtype` order, so each tensor is naturally aligned), then by name,
//!   compared as bytes;
//! - the JSON header compact, as serde_json writes it: `__metadata__` first
//!   (only when there is metadata, even empty), then each tensor in data
//!   order as `{"dtype":…,"shape":[…],"data_offsets":[begin,end]}`;
//! - the header padded with spaces to a multiple of 8 bytes;
//! - the tensors' bytes back to back, with no padding between them.
//!
//! One thing cannot be matched: the reference keeps `__metadata__` in a hash
//! map, so Python writes more than one entry in a different order in each
//! process. Entries are written in the order given, so a file read and
//! written back keeps its order.

use std::collections::HashSet;
use std::io::{self, Write};

use crate::formats::output::CountingWriter;
use crate::text::Name;

use super::super::gguf::TensorDataSource;
use super::dtype::Dtype;
use super::{LENGTH_BYTES, MAX_HEADER_LEN, METADATA_KEY, METADATA_PREFIX};
use crate::model::{Metadata, TensorInfo, Value, element_count};
use crate::types::GgmlType;

/// A tensor to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeTensorsEntry {
    pub name: String,
    pub dtype: Dtype,
    /// Outermost dimension first (the reverse of ggml's `dims`).
    pub shape: Vec<u64>,
}

impl SafeTensorsEntry {
    /// The entry for a ggml tensor: its type if SafeTensors has it, its
    /// dimensions reversed.
    pub fn from_tensor(tensor: &TensorInfo) -> Result<SafeTensorsEntry, WriteError> {
        let dtype = Dtype::from_ggml(tensor.ggml_type)
            .ok_or_else(|| WriteError::UnsupportedType { tensor: tensor.name.clone(), ty: tensor.ggml_type })?;
        Ok(SafeTensorsEntry { name: tensor.name.clone(), dtype, shape: tensor.dims.iter().rev().copied().collect() })
    }

    fn n_bytes(&self) -> Result<u64, WriteError> {
        element_count(&self.shape)
            .and_then(|n| n.checked_mul(self.dtype.bits()))
            .filter(|bits| bits % 8 == 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| WriteError::BadSize {
                tensor: self.name.clone(),
                dtype: self.dtype,
                shape: self.shape.clone(),
            })
    }
}

/// Where every byte of a file goes, known before any tensor is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeTensorsLayout {
    /// Everything before the tensor data: the 8-byte length, the JSON and
    /// its padding.
    pub header: Vec<u8>,
    /// Indices of the entries in the order their bytes are written.
    pub order: Vec<usize>,
    /// Each entry's `[begin, end)` in the data section, by entry index.
    pub data_offsets: Vec<(u64, u64)>,
    pub file_len: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "tensor `{tensor}` has type {ty}, which SafeTensors cannot hold (it holds F64, F32, F16, BF16, I64, I32, I16 and I8)"
    )]
    UnsupportedType { tensor: String, ty: GgmlType },
    #[error("tensor `{}` of dtype {dtype} and shape {shape:?} has no size in whole bytes below 2^64", Name(.tensor))]
    BadSize { tensor: String, dtype: Dtype, shape: Vec<u64> },
    #[error("duplicate tensor name `{0}`")]
    DuplicateTensor(String),
    #[error("a tensor cannot be named `__metadata__`: SafeTensors keeps that key for metadata")]
    ReservedName,
    #[error("duplicate metadata key `{0}`")]
    DuplicateMetadataKey(String),
    #[error("metadata key `{0}` is not a UTF-8 string, which SafeTensors metadata must be")]
    NonStringMetadata(String),
    #[error("the header would be {len} bytes; SafeTensors readers refuse headers over {MAX_HEADER_LEN}")]
    HeaderTooLarge { len: u64 },
    #[error("tensor `{}`: wrote {written} bytes, expected {expected}", Name(.tensor))]
    WrongLength { tensor: String, written: u64, expected: u64 },
    #[error("{}", crate::files::IoText(.0))]
    Io(#[from] io::Error),
}

/// The `__metadata__` entries of a model read from SafeTensors: its string
/// values under [`METADATA_PREFIX`], prefix removed, in order. Other keys are
/// not SafeTensors metadata and are left out.
pub fn safetensors_metadata(metadata: &Metadata) -> Result<Vec<(String, String)>, WriteError> {
    metadata
        .iter()
        .filter_map(|(key, value)| Some((key.strip_prefix(METADATA_PREFIX)?, value)))
        .map(|(key, value)| match value {
            Value::String(s) => match s.as_str() {
                Some(text) => Ok((key.to_owned(), text.to_owned())),
                None => Err(WriteError::NonStringMetadata(format!("{METADATA_PREFIX}{key}"))),
            },
            _ => Err(WriteError::NonStringMetadata(format!("{METADATA_PREFIX}{key}"))),
        })
        .collect()
}

/// The header and layout [`write_safetensors`] writes for these tensors and
/// metadata (`None`: no `__metadata__` key at all).
pub fn header_bytes(
    tensors: &[SafeTensorsEntry],
    metadata: Option<&[(String, String)]>,
) -> Result<SafeTensorsLayout, WriteError> {
    let mut names = HashSet::new();
    for tensor in tensors {
        if tensor.name == METADATA_KEY {
            return Err(WriteError::ReservedName);
        }
        if !names.insert(tensor.name.as_str()) {
            return Err(WriteError::DuplicateTensor(tensor.name.clone()));
        }
    }
    let sizes = tensors.iter().map(SafeTensorsEntry::n_bytes).collect::<Result<Vec<u64>, _>>()?;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tensors[a], &tensors[b]);
        b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name))
    });

    let mut json = String::from("{");
    if let Some(metadata) = metadata {
        let mut keys = HashSet::new();
        json.push_str("\"__metadata__\":{");
        for (i, (key, value)) in metadata.iter().enumerate() {
            if !keys.insert(key.as_str()) {
                return Err(WriteError::DuplicateMetadataKey(key.clone()));
            }
            if i > 0 {
                json.push(',');
            }
            push_json_string(&mut json, key);
            json.push(':');
            push_json_string(&mut json, value);
        }
        json.push('}');
        if !tensors.is_empty() {
            json.push(',');
        }
    }
    let mut data_offsets = vec![(0, 0); tensors.len()];
    let mut next = 0u64;
    for (position, &index) in order.iter().enumerate() {
        let (tensor, size) = (&tensors[index], sizes[index]);
        let end = next.checked_add(size).ok_or_else(|| WriteError::BadSize {
            tensor: tensor.name.clone(),
            dtype: tensor.dtype,
            shape: tensor.shape.clone(),
        })?;
        data_offsets[index] = (next, end);
        if position > 0 {
            json.push(',');
        }
        push_json_string(&mut json, &tensor.name);
        json.push_str(":{\"dtype\":");
        push_json_string(&mut json, tensor.dtype.name());
        json.push_str(",\"shape\":[");
        json.push_str(&tensor.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
        json.push_str(&format!("],\"data_offsets\":[{next},{end}]}}"));
        next = end;
    }
    json.push('}');
    let padded_len = json.len().next_multiple_of(LENGTH_BYTES as usize);
    let header_len = padded_len as u64;
    if header_len > MAX_HEADER_LEN {
        return Err(WriteError::HeaderTooLarge { len: header_len });
    }
    let mut header = Vec::with_capacity(LENGTH_BYTES as usize + padded_len);
    header.extend_from_slice(&header_len.to_le_bytes());
    header.extend_from_slice(json.as_bytes());
    header.resize(LENGTH_BYTES as usize + padded_len, b' ');
    let file_len = LENGTH_BYTES + header_len + next;
    Ok(SafeTensorsLayout { header, order, data_offsets, file_len })
}

/// Writes a complete file: the header, then each tensor's bytes from `data`
/// (asked for by entry index, in data order).
pub fn write_safetensors(
    out: &mut dyn Write,
    tensors: &[SafeTensorsEntry],
    metadata: Option<&[(String, String)]>,
    data: &mut dyn TensorDataSource,
) -> Result<SafeTensorsLayout, WriteError> {
    let layout = header_bytes(tensors, metadata)?;
    out.write_all(&layout.header)?;
    for &index in &layout.order {
        let mut counted = CountingWriter::new(&mut *out);
        data.write_tensor(index, &mut counted)?;
        let (begin, end) = layout.data_offsets[index];
        if counted.count != end - begin {
            return Err(WriteError::WrongLength {
                tensor: tensors[index].name.clone(),
                written: counted.count,
                expected: end - begin,
            });
        }
    }
    Ok(layout)
}

/// A JSON string as serde_json's compact writer escapes it: `"`, `\` and
/// control characters only, with the short escapes where JSON has them.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_exactly_as_serde_json() {
        let every_char: String = (0..=0x10ffff).filter_map(char::from_u32).collect();
        let mut ours = String::new();
        push_json_string(&mut ours, &every_char);
        assert_eq!(ours, serde_json::to_string(&every_char).unwrap());
    }

    fn entry(name: &str, dtype: Dtype, shape: &[u64]) -> SafeTensorsEntry {
        SafeTensorsEntry { name: name.into(), dtype, shape: shape.to_vec() }
    }

    #[test]
    fn layout_sorts_by_dtype_then_name_and_pads_with_spaces() {
        let tensors = [
            entry("b", Dtype::I8, &[3]),
            entry("a", Dtype::F32, &[2]),
            entry("c", Dtype::F64, &[]),
            entry("B", Dtype::F32, &[1, 1]),
        ];
        let meta = [("format".to_string(), "pt".to_string())];
        let layout = header_bytes(&tensors, Some(&meta)).unwrap();
        assert_eq!(layout.order, [2, 3, 1, 0]);
        assert_eq!(layout.data_offsets, [(20, 23), (12, 20), (0, 8), (8, 12)]);
        let json = r#"{"__metadata__":{"format":"pt"},"c":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"B":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},"b":{"dtype":"I8","shape":[3],"data_offsets":[20,23]}}"#;
        let padded = json.len().next_multiple_of(8);
        assert_eq!(&layout.header[..8], &(padded as u64).to_le_bytes());
        assert_eq!(&layout.header[8..8 + json.len()], json.as_bytes());
        assert!(layout.header[8 + json.len()..].iter().all(|&b| b == b' '));
        assert_eq!(layout.file_len, 8 + padded as u64 + 23);
    }

    #[test]
    fn empty_files() {
        assert_eq!(header_bytes(&[], None).unwrap().header, b"\x08\0\0\0\0\0\0\0{}      ");
        assert_eq!(header_bytes(&[], Some(&[])).unwrap().header, b"\x18\0\0\0\0\0\0\0{\"__metadata__\":{}}     ");
    }

    #[test]
    fn refusals() {
        let q4 = TensorInfo::new("blk.0.w", vec![32, 2], GgmlType::Q4_0);
        assert_eq!(
            SafeTensorsEntry::from_tensor(&q4).unwrap_err().to_string(),
            "tensor `blk.0.w` has type Q4_0, which SafeTensors cannot hold (it holds F64, F32, F16, BF16, I64, I32, I16 and I8)"
        );
        let f16 = TensorInfo::new("w", vec![3, 2], GgmlType::F16);
        assert_eq!(SafeTensorsEntry::from_tensor(&f16).unwrap(), entry("w", Dtype::F16, &[2, 3]));
        let message = |tensors: &[SafeTensorsEntry], meta: Option<&[(String, String)]>| {
            header_bytes(tensors, meta).unwrap_err().to_string()
        };
        assert_eq!(
            message(&[entry("a", Dtype::I8, &[1]), entry("a", Dtype::F32, &[1])], None),
            "duplicate tensor name `a`"
        );
        assert_eq!(
            message(&[entry("__metadata__", Dtype::I8, &[1])], None),
            "a tensor cannot be named `__metadata__`: SafeTensors keeps that key for metadata"
        );
        let twice = [("k".to_string(), "1".to_string()), ("k".to_string(), "2".to_string())];
        assert_eq!(message(&[], Some(&twice)), "duplicate metadata key `k`");
        assert_eq!(
            message(&[entry("f4", Dtype::F4, &[3])], None),
            "tensor `f4` of dtype F4 and shape [3] has no size in whole bytes below 2^64"
        );
        assert_eq!(
            message(&[entry("big", Dtype::F64, &[1 << 62, 4])], None),
            "tensor `big` of dtype F64 and shape [4611686018427387904, 4] has no size in whole bytes below 2^64"
        );
    }
}
