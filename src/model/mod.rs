//! The in-memory model: ordered metadata plus tensor descriptors.
//!
//! Pure data, no I/O. Every container format reads into these types and the
//! GGUF writer writes from them, so a GGJT file and a GGUF file look the same
//! to everything downstream.

mod metadata;
mod slice;
mod tensor;

pub use metadata::{Array, GgufString, Metadata, StringArray, Value, ValueType};
pub use slice::AxisCut;
pub use tensor::{
    ElementConversion, Endian, LegacyBlockLayout, PlacedElements, Placement, StoredLayout, TensorInfo, element_count,
    tensor_bytes,
};
