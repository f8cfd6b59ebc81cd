//! SafeTensors: reading single files into the crate's model, writing them
//! byte for byte as the reference implementation does, and reading the index
//! of a sharded checkpoint.
//!
//! The layout: an 8-byte little-endian header length N, N bytes of UTF-8
//! JSON (tensor name → `{"dtype", "shape", "data_offsets": [begin, end]}`,
//! plus an optional `"__metadata__"` of string → string), then the data
//! section, which the tensors must cover exactly (offsets are relative to
//! it). Numbers are little-endian, arrays row-major.
//!
//! How a file becomes a model:
//! - tensors come in the order of their data, as the reference iterates them;
//! - shapes are written outermost dimension first, ggml's `dims[0]` is the
//!   innermost (the row), so dims are the shape reversed; a scalar (shape
//!   `[]`) becomes `[1]`;
//! - dtypes ggml has are read in place; the others are converted exactly
//!   when read ([`ElementConversion`]): FP8 to F16 (E8M0 to F32), U8 to I16,
//!   U16 to I32, U32 to I64, BOOL to I8; U64, C64 and the sub-byte floats are
//!   refused by name;
//! - `__metadata__` entries become string values under [`METADATA_PREFIX`],
//!   in file order, and nothing else is added (an empty `__metadata__` reads
//!   as none);
//! - names must be unique and at most 4 dimensions (ggml's limit) are read.

mod dtype;
mod index;
mod json;
mod reader;
mod writer;

pub use crate::model::ElementConversion;
pub use dtype::Dtype;
pub use index::{CheckpointIndex, parse_index, read_index};
pub(crate) use reader::read_header;
pub use reader::{SafeTensorsHeader, read_header_bytes};
pub use writer::{
    SafeTensorsEntry, SafeTensorsLayout, WriteError, header_bytes, safetensors_metadata, write_safetensors,
};

/// The largest header the reference reads or writes (its `MAX_HEADER_SIZE`).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Where `__metadata__` entries go in [`crate::model::Metadata`]:
/// `{"format": "pt"}` reads as `safetensors.metadata.format = "pt"`.
pub const METADATA_PREFIX: &str = "safetensors.metadata.";

const METADATA_KEY: &str = "__metadata__";

/// The header length that starts a file.
const LENGTH_BYTES: u64 = 8;
