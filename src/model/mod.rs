//! The in-memory model: ordered metadata plus tensor descriptors.
//!
//! Pure data, no I/O. Every container format reads into these types and the
//! GGUF writer writes from them, so a GGJT file and a GGUF file look the same
//! to everything downstream.

mod key_reader;
mod metadata;
mod slice;
mod tensor;
mod tokenizer_keys;
mod written_value;

pub use key_reader::KeyError;
pub use metadata::{Array, GgufString, MAX_ARRAY_NESTING, Metadata, StringArray, Value, ValueType};
pub use slice::AxisCut;
pub use tensor::{
    ElementConversion, Endian, LegacyBlockLayout, PlacedElements, Placement, StoredLayout, TensorInfo, element_count,
    tensor_bytes,
};
pub use tokenizer_keys::{ChatTemplate, SpecialToken, TOKENS_KEY};
pub use written_value::parse_typed_value;
