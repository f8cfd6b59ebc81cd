//! Tensor descriptors: name, shape, type and where the bytes are.

use crate::types::GgmlType;

/// Byte order of a file's numbers (and of its tensor data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endian {
    Little,
    Big,
}

/// How a tensor's bytes are laid out in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredLayout {
    /// Exactly ggml's current block layout for the tensor's type.
    Native,
    /// A pre-GGJTv3 block layout that must be repacked on read (see
    /// `formats::ggml_legacy`).
    LegacyBlocks(crate::formats::LegacyBlockLayout),
    /// Elements of a type ggml lacks, converted exactly to the tensor's type
    /// on read (see `formats::safetensors`).
    Converted(crate::formats::ElementConversion),
}

/// One tensor of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the row length (`ne[0]`).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Absolute offset of the tensor's bytes in its file.
    pub file_offset: u64,
    /// Bytes the tensor occupies in its file (differs from [`TensorInfo::n_bytes`]
    /// only for legacy block layouts and converted elements).
    pub stored_len: u64,
    pub layout: StoredLayout,
}

impl TensorInfo {
    /// A tensor not yet placed in a file: offset 0, current ggml layout.
    pub fn new(name: impl Into<String>, dims: Vec<u64>, ggml_type: GgmlType) -> TensorInfo {
        let stored_len = tensor_bytes(ggml_type, &dims).unwrap_or(0);
        TensorInfo { name: name.into(), dims, ggml_type, file_offset: 0, stored_len, layout: StoredLayout::Native }
    }

    pub fn n_elements(&self) -> u64 {
        // Readers reject shapes whose product overflows.
        element_count(&self.dims).unwrap_or(u64::MAX)
    }

    /// Bytes of the tensor in ggml's current layout for its type.
    pub fn n_bytes(&self) -> u64 {
        tensor_bytes(self.ggml_type, &self.dims).unwrap_or(u64::MAX)
    }
}

/// Product of `dims` if it fits in an `i64`, as ggml requires.
pub fn element_count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= i64::MAX as u64)
}

/// Bytes of a tensor of `ty` and `dims`, or `None` when a row is not a whole
/// number of blocks or the size overflows.
pub fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> Option<u64> {
    let (&row, rest) = dims.split_first()?;
    let n_rows = element_count(rest)?;
    ty.row_size(row)?.checked_mul(n_rows)
}
