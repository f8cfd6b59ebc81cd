//! Tensor descriptors: name, shape, type and where the bytes are. The
//! layouts a stored tensor can have are data here; `formats` knows how to
//! read each (their methods live with the readers).

use std::sync::Arc;

use crate::types::GgmlType;

/// Byte order of a file's numbers (and of its tensor data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Endian {
    Little,
    Big,
}

/// How a tensor's bytes are laid out in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredLayout {
    /// Exactly ggml's current block layout for the tensor's type.
    Native,
    /// A pre-GGJTv3 block layout that must be repacked on read (see
    /// `formats::ggml_legacy`).
    LegacyBlocks(LegacyBlockLayout),
    /// Elements of a type ggml lacks, converted exactly to the tensor's type
    /// on read (see `formats::safetensors`).
    Converted(ElementConversion),
    /// Elements a container keeps other than as one run of its own file,
    /// gathered on read (see [`Placement`]).
    Placed(Arc<Placement>),
}

/// Where a tensor's elements are when they are not one run of its file, and
/// what they are converted by once gathered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub elements: PlacedElements,
    /// `None` when the gathered elements are already of the tensor's type.
    pub conversion: Option<ElementConversion>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacedElements {
    /// A strided view of a storage, as PyTorch saves views: the element at
    /// ggml index `(i0, i1, …)` is `element_size` bytes at `file_offset +
    /// Σ i_k · strides[k] · element_size`; `stored_len` reaches the farthest.
    Strided { strides: Vec<u64>, element_size: u64 },
    /// `stored_len` bytes at `file_offset` of the container's external file
    /// number `file` (ONNX external data).
    External { file: usize },
    /// Elements the reader decoded from the container's own encoding (ONNX's
    /// typed fields), already of the tensor's type.
    Decoded(Arc<[u8]>),
}

/// How a legacy tensor's blocks differ from ggml's current layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyBlockLayout {
    /// Q4_0/Q4_1/Q8_0 scales (and the Q4_1 minimum) stored as f32.
    pub f32_scales: bool,
    /// Q4_0/Q4_1/Q5_0/Q5_1 quants stored as pairs of neighbours per byte.
    pub interleaved_nibbles: bool,
}

/// An exact element-by-element conversion from a dtype ggml lacks to one it
/// has, or from big-endian data to ggml's, applied when the tensor's bytes
/// are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementConversion {
    /// OCP FP8 E4M3 ("fn": no infinities; S.1111.111 is NaN) to f16.
    F8E4M3ToF16,
    /// OCP FP8 E5M2 (IEEE-like: infinities and NaNs) to f16.
    F8E5M2ToF16,
    /// E4M3 with bias 8, no infinities, no negative zero: 0x80 is NaN.
    F8E4M3FnuzToF16,
    /// E5M2 with bias 16, no infinities, no negative zero: 0x80 is NaN.
    F8E5M2FnuzToF16,
    /// OCP E8M0 scale (unsigned powers of two 2^-127..2^127; 0xFF is NaN) to f32.
    F8E8M0ToF32,
    U8ToI16,
    /// BOOL bytes to 0/1. Any non-zero byte is true, as numpy and torch read
    /// it, so a stray byte cannot make a file unreadable.
    BoolToI8,
    U16ToI32,
    U32ToI64,
    /// Big-endian blocks of this type to little-endian ones (see
    /// `formats::gguf::ByteSwap`); a type with no big-endian layout is
    /// refused when its bytes are asked for.
    FromBigEndian(GgmlType),
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
