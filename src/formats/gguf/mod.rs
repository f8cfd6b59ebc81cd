//! GGUF: reading versions 1–3 in either byte order, writing version 3.
//!
//! The layout: magic `GGUF`, version, tensor count, metadata count, metadata,
//! tensor infos, padding to `general.alignment`, tensor data (each tensor
//! padded to the alignment). Version 1 used 32-bit counts, lengths and
//! dimensions where later versions use 64-bit ones.

mod byte_order;
mod reader;
mod writer;

pub use byte_order::{ByteSwap, NoBigEndianLayout, check_big_endian};

pub use reader::{GgufHeader, read_header, read_header_bytes};
pub use writer::{GgufLayout, TensorDataSource, file_len, header_len, layout, write_gguf, write_header, write_padding};

/// The file magic, as bytes on disk.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// `general.alignment` when the key is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

pub const ALIGNMENT_KEY: &str = "general.alignment";

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u64 = 4;

/// The longest tensor name llama.cpp reads: ggml's `GGML_MAX_NAME` (64)
/// less the terminating NUL. A longer one is never written (reading stays
/// tolerant: a long name in a file we are given is read and shown bounded).
pub const MAX_TENSOR_NAME_BYTES: usize = 63;

/// The version this crate writes.
pub const WRITE_VERSION: u32 = 3;

/// Rounds `n` up to a multiple of `alignment` (a power of two).
pub fn align_up(n: u64, alignment: u64) -> u64 {
    n.next_multiple_of(alignment)
}
