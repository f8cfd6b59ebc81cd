//! `set-metadata` and `delete-metadata`: metadata edits, tensors untouched.
//!
//! The edits `gguf_new_metadata.py` makes, in its order: a new chat template
//! replaces every old template key and is appended; then each value is set —
//! a key keeps its place when it exists and is appended otherwise (values
//! are written `KEY=TYPE:VALUE` as on the command line, `edit --set`); then
//! the special tokens, each found in the vocabulary by its text or checked
//! against it by id. A set that would change an existing key's type is
//! refused unless `force_type` says so: llama.cpp reads a key of the wrong
//! type as missing, or fails.

use crate::artifact::{HeaderEnd, TensorSet};
use crate::model::{Array, ChatTemplate, Metadata, SpecialToken, TOKENS_KEY, Value};
use crate::ops::edit::parse_set;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, ParamValue, Params};

pub const SET_SPEC: OpSpec = OpSpec::new(
    "set-metadata",
    1,
    &[
        ParamSpec::optional("set", ParamKind::StrList),
        ParamSpec::optional("chat_template", ParamKind::Str),
        ParamSpec::optional("chat_templates", ParamKind::TableList),
        ParamSpec::optional("special_tokens", ParamKind::StrMap),
        ParamSpec::optional("special_token_ids", ParamKind::Table),
        ParamSpec::optional("force_type", ParamKind::Bool),
    ],
);

pub const DELETE_SPEC: OpSpec = OpSpec::new("delete-metadata", 1, &[ParamSpec::required("keys", ParamKind::StrList)]);

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SetMetadata {
    /// Replaces every `tokenizer.chat_template*` key.
    pub chat_template: Option<ChatTemplate>,
    pub values: Vec<(String, Value)>,
    pub special_tokens: Vec<(SpecialToken, TokenRef)>,
    /// Let a set change an existing key's type.
    pub force_type: bool,
}

/// A special token named by its text (the first id holding it) or its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRef {
    Text(String),
    Id(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteMetadata {
    pub keys: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("cannot delete `{0}`: no such metadata key")]
    NoSuchKey(String),
    #[error(
        "cannot set `{key}` as {to}: it is {from} in the input (a reader expecting {from} would miss it); \
         force_type = true (edit --force-type) changes its type"
    )]
    TypeChange { key: String, from: String, to: String },
    #[error("cannot set the {kind} token: the input has no vocabulary (`{TOKENS_KEY}`)")]
    NoVocabulary { kind: &'static str },
    #[error("cannot set the {kind} token: no token is `{token}` in the vocabulary")]
    NoSuchToken { kind: &'static str, token: String },
    #[error("cannot set the {kind} token to id {id}: the vocabulary has {len} tokens")]
    TokenIdOutOfRange { kind: &'static str, id: u32, len: usize },
}

/// A value's GGUF type as `--set` writes it: `u32`, `arr[str]`, `arr[arr[i32]]`.
fn type_label(value: &Value) -> String {
    match value {
        Value::Array(array) => array_label(array),
        other => other.value_type().name().to_owned(),
    }
}

fn array_label(array: &Array) -> String {
    match array {
        Array::Array(inner) => format!("arr[{}]", inner.first().map_or_else(|| "arr".to_owned(), array_label)),
        _ => format!("arr[{}]", array.element_type()),
    }
}

impl SetMetadata {
    pub fn from_params(p: &Params) -> Result<SetMetadata, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let mut set = SetMetadata { force_type: p.bool("force_type"), ..SetMetadata::default() };
        for (text, span) in p.str_list("set") {
            match parse_set(text) {
                Ok(kv) => set.values.push(kv),
                Err(e) => problems.push(
                    Diagnostic::new(e, span.clone())
                        .with_hint(r#"set = ["general.name=str:my-model", "llama.context_length=u32:4096"]"#),
                ),
            }
        }
        set.chat_template = match (p.str("chat_template"), p.get("chat_templates")) {
            (Some(_), Some(_)) => {
                problems.push(p.error("chat_templates", "give chat_template or chat_templates, not both"));
                None
            }
            (Some((template, _)), None) => Some(ChatTemplate::One(template.to_owned())),
            (None, Some(_)) => Some(ChatTemplate::Named(named_templates(p, &mut problems))),
            (None, None) => None,
        };
        let mut special = |kind: &str, by: Option<TokenRef>, diagnostic: &dyn Fn(String) -> Diagnostic| {
            let kinds = SpecialToken::ALL.map(SpecialToken::kind);
            match (SpecialToken::from_kind(kind), by) {
                (Some(token), Some(by)) => set.special_tokens.push((token, by)),
                (None, _) => problems.push(diagnostic(format!("unknown special token `{kind}`")).suggest(kind, kinds)),
                (Some(_), None) => problems.push(diagnostic(format!("the {kind} token's id must be a u32"))),
            }
        };
        for (kind, text, span) in p.str_map("special_tokens") {
            special(kind, Some(TokenRef::Text(text.to_owned())), &|m| Diagnostic::new(m, span.clone()));
        }
        for (kind, param) in p.table("special_token_ids") {
            let id = match param.value {
                ParamValue::Int(id) => u32::try_from(id).ok().map(TokenRef::Id),
                _ => None,
            };
            special(kind, id, &|m| Diagnostic::new(m, param.span.clone()));
        }
        if set.values.is_empty() && set.chat_template.is_none() && set.special_tokens.is_empty() && problems.is_empty()
        {
            problems.push(Diagnostic::new(
                "set-metadata sets nothing: give set, chat_template, chat_templates, special_tokens or special_token_ids",
                p.span.clone(),
            ));
        }
        if problems.is_empty() { Ok(set) } else { Err(problems) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        let values: Vec<String> =
            self.values.iter().map(|(k, v)| format!("{k}={}:{v:?}", v.value_type().name())).collect();
        let mut key = serde_json::json!({ "set": values });
        // Each only when given: the keys of existing recipes stay as they were.
        match &self.chat_template {
            Some(ChatTemplate::One(template)) => key["chat_template"] = serde_json::json!(template),
            Some(ChatTemplate::Named(named)) => key["chat_templates"] = serde_json::json!(named),
            None => {}
        }
        if !self.special_tokens.is_empty() {
            let tokens: Vec<serde_json::Value> = self
                .special_tokens
                .iter()
                .map(|(token, by)| match by {
                    TokenRef::Text(text) => serde_json::json!([token.kind(), "text", text]),
                    TokenRef::Id(id) => serde_json::json!([token.kind(), "id", id]),
                })
                .collect();
            key["special_tokens"] = serde_json::json!(tokens);
        }
        if self.force_type {
            key["force_type"] = serde_json::json!(true);
        }
        key
    }

    pub fn apply(&self, input: &TensorSet) -> Result<TensorSet, MetadataError> {
        let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
        if let Some(template) = &self.chat_template {
            template.replace_in(&mut out.metadata);
        }
        for (key, value) in &self.values {
            self.set(&mut out.metadata, key, value.clone())?;
        }
        for (token, by) in &self.special_tokens {
            let id = token_id(&input.metadata, *token, by)?;
            self.set(&mut out.metadata, token.key(), Value::U32(id))?;
        }
        Ok(out)
    }

    fn set(&self, metadata: &mut Metadata, key: &str, value: Value) -> Result<(), MetadataError> {
        if let Some(old) = metadata.get(key)
            && !self.force_type
            && type_label(old) != type_label(&value)
        {
            let (from, to) = (type_label(old), type_label(&value));
            return Err(MetadataError::TypeChange { key: key.to_owned(), from, to });
        }
        metadata.set(key, value);
        Ok(())
    }
}

/// `chat_templates = [{ name = "rag", template = "…" }, …]`.
fn named_templates(p: &Params, problems: &mut Vec<Diagnostic>) -> Vec<(String, String)> {
    let mut named = Vec::new();
    for (fields, span) in p.table_list("chat_templates") {
        let (mut name, mut template) = (None, None);
        for (field, value) in fields {
            match field {
                "name" => name = Some(value),
                "template" => template = Some(value),
                other => problems.push(
                    Diagnostic::new(format!("unknown field `{other}` in a chat template"), span.clone())
                        .suggest(other, ["name", "template"]),
                ),
            }
        }
        match (name, template) {
            (Some(name), Some(template)) => named.push((name.to_owned(), template.to_owned())),
            _ => problems.push(Diagnostic::new("a chat template needs a name and a template", span.clone())),
        }
    }
    named
}

/// The id `by` names in `metadata`'s vocabulary: a text's first id, as
/// `gguf_new_metadata.py --special-token` takes it, or an id it holds.
fn token_id(metadata: &Metadata, token: SpecialToken, by: &TokenRef) -> Result<u32, MetadataError> {
    let kind = token.kind();
    let Some(Value::Array(Array::String(tokens))) = metadata.get(TOKENS_KEY) else {
        return Err(MetadataError::NoVocabulary { kind });
    };
    match by {
        TokenRef::Text(text) => tokens
            .iter()
            .position(|t| t == text.as_bytes())
            .map(|id| id as u32)
            .ok_or_else(|| MetadataError::NoSuchToken { kind, token: text.clone() }),
        TokenRef::Id(id) if (*id as usize) < tokens.len() => Ok(*id),
        TokenRef::Id(id) => Err(MetadataError::TokenIdOutOfRange { kind, id: *id, len: tokens.len() }),
    }
}

impl DeleteMetadata {
    pub fn from_params(p: &Params) -> Result<DeleteMetadata, Vec<Diagnostic>> {
        Ok(DeleteMetadata { keys: p.str_list("keys").into_iter().map(|(k, _)| k.to_owned()).collect() })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "keys": self.keys })
    }

    pub fn apply(&self, input: &TensorSet) -> Result<TensorSet, MetadataError> {
        let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
        for key in &self.keys {
            if !out.metadata.remove(key) {
                return Err(MetadataError::NoSuchKey(key.clone()));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Endian, Metadata};

    fn set_of(entries: &[(&str, Value)]) -> TensorSet {
        let mut metadata = Metadata::new();
        for (key, value) in entries {
            metadata.set(key, value.clone());
        }
        TensorSet {
            endian: Endian::Little,
            metadata,
            tensors: Vec::new(),
            header_end: HeaderEnd::Aligned,
            legacy: None,
        }
    }

    #[test]
    fn a_set_keeps_a_keys_type_unless_forced() {
        let input = set_of(&[("n", Value::U32(1)), ("ids", Value::Array(Array::U32(vec![1])))]);
        let set = |key: &str, value: Value, force_type| SetMetadata {
            values: vec![(key.into(), value)],
            force_type,
            ..SetMetadata::default()
        };
        assert!(set("n", Value::U32(2), false).apply(&input).is_ok());
        assert!(set("new", Value::I8(2), false).apply(&input).is_ok());
        let err = set("n", Value::I32(2), false).apply(&input).unwrap_err();
        assert_eq!(err, MetadataError::TypeChange { key: "n".into(), from: "u32".into(), to: "i32".into() });
        let err = set("ids", Value::Array(Array::I32(vec![1])), false).apply(&input).unwrap_err();
        assert!(err.to_string().starts_with("cannot set `ids` as arr[i32]: it is arr[u32] in the input"), "{err}");
        let forced = set("n", Value::I32(2), true).apply(&input).unwrap();
        assert_eq!(forced.metadata.get("n"), Some(&Value::I32(2)));
    }

    #[test]
    fn nested_arrays_are_labelled_by_their_first_element() {
        let nested = Value::Array(Array::Array(vec![Array::I32(vec![1]), Array::I32(vec![])]));
        assert_eq!(type_label(&nested), "arr[arr[i32]]");
        assert_eq!(type_label(&Value::Array(Array::Array(Vec::new()))), "arr[arr]");
    }
}
