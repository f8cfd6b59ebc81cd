//! `edit`: metadata and tensor-name edits, as the recipe ops that do them
//! (`delete-metadata`, `set-metadata`, `rename`).
//!
//! Tensor bytes are copied, never decoded. With no edits the output is the
//! input's round trip: byte-identical for any file llama.cpp or gguf-py wrote.

use super::Op;
use super::metadata::{DeleteMetadata, SetMetadata, TokenRef};
use super::rename::RenameOptions;
use crate::formats::gguf;
use crate::model::{ChatTemplate, SpecialToken, Value, parse_typed_value};

/// The edits, applied in this order: deletions, then settings (the chat
/// template, the values, the special tokens), then renames.
#[derive(Debug, Clone, Default)]
pub struct Edits {
    pub chat_template: Option<ChatTemplate>,
    pub set: Vec<(String, Value)>,
    pub special_tokens: Vec<(SpecialToken, TokenRef)>,
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
        if !self.set.is_empty() || self.chat_template.is_some() || !self.special_tokens.is_empty() {
            ops.push(Op::SetMetadata(SetMetadata {
                chat_template: self.chat_template,
                values: self.set,
                special_tokens: self.special_tokens,
                force_type: self.force_type,
            }));
        }
        if !self.rename_tensors.is_empty() {
            ops.push(Op::Rename(RenameOptions { renames: self.rename_tensors }));
        }
        ops
    }
}

/// Parses `KEY=TYPE:VALUE`, e.g. `general.name=str:tiny`,
/// `llama.context_length=u32:4096` or `general.tags=arr[str]:a,b` (the
/// written form `model::parse_typed_value` reads).
pub fn parse_set(text: &str) -> Result<(String, Value), String> {
    let (key, typed) = text.split_once('=').ok_or_else(|| format!("`{text}` is not KEY=TYPE:VALUE"))?;
    if key.is_empty() {
        return Err(format!("`{text}` has an empty key"));
    }
    let value = parse_typed_value(typed).map_err(|e| format!("cannot set `{key}`: {e}"))?;
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
