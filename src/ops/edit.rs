//! `edit`: metadata and tensor-name edits, as the recipe ops that do them
//! (`delete-metadata`, `set-metadata`, `rename`).
//!
//! Tensor bytes are copied, never decoded. With no edits the output is the
//! input's round trip: byte-identical for any file llama.cpp or gguf-py wrote.

use super::Op;
use super::metadata::{DeleteMetadata, SetMetadata};
use super::rename::RenameOptions;
use crate::formats::gguf;
use crate::model::{Value, ValueType};

/// The edits, applied in this order: deletions, then settings, then renames.
#[derive(Debug, Clone, Default)]
pub struct Edits {
    pub set: Vec<(String, Value)>,
    pub delete: Vec<String>,
    pub rename_tensors: Vec<(String, String)>,
    /// Let `set` change an existing key's type.
    pub force_type: bool,
}

impl Edits {
    /// The ops that make these edits, in order; none when there are no edits.
    pub fn into_ops(self) -> Vec<Op> {
        let mut ops = Vec::new();
        if !self.delete.is_empty() {
            ops.push(Op::DeleteMetadata(DeleteMetadata { keys: self.delete }));
        }
        if !self.set.is_empty() {
            ops.push(Op::SetMetadata(SetMetadata { values: self.set, force_type: self.force_type }));
        }
        if !self.rename_tensors.is_empty() {
            ops.push(Op::Rename(RenameOptions { renames: self.rename_tensors }));
        }
        ops
    }
}

/// Parses `KEY=TYPE:VALUE`, e.g. `general.name=str:tiny` or `llama.context_length=u32:4096`.
pub fn parse_set(text: &str) -> Result<(String, Value), String> {
    let (key, typed) = text.split_once('=').ok_or_else(|| format!("`{text}` is not KEY=TYPE:VALUE"))?;
    let (ty, value) = typed.split_once(':').ok_or_else(|| format!("`{text}` is not KEY=TYPE:VALUE"))?;
    let value_type = ValueType::from_name(ty).ok_or_else(|| {
        let names: Vec<&str> = ValueType::ALL.iter().filter(|t| **t != ValueType::Array).map(|t| t.name()).collect();
        format!("unknown type `{ty}` in `{text}` (expected one of {})", names.join(", "))
    })?;
    if key.is_empty() {
        return Err(format!("`{text}` has an empty key"));
    }
    let value = Value::parse(value_type, value)?;
    if key == gguf::ALIGNMENT_KEY && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
        return Err(format!("cannot set `{key}`: must be a u32 power of two"));
    }
    Ok((key.to_owned(), value))
}

/// Parses `OLD=NEW`.
pub fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((old, new)) if !old.is_empty() && !new.is_empty() => Ok((old.to_owned(), new.to_owned())),
        _ => Err(format!("`{text}` is not OLD=NEW")),
    }
}
