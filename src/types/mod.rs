//! The type table: every ggml tensor type and every llama file type (ftype).
//!
//! This is the one home of block sizes, bytes per block and type ids. Every
//! other module asks [`GgmlType`] or [`FileType`]; none repeats a number that
//! lives here.

mod file_type;
mod ggml_type;

pub use file_type::FileType;
pub use ggml_type::{GgmlType, RemovedGgmlType};
