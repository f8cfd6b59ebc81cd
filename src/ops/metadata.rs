//! `set-metadata` and `delete-metadata`: metadata edits, tensors untouched.
//!
//! A set key keeps its place when it exists and is appended otherwise; values
//! are written `KEY=TYPE:VALUE` as on the command line (`edit --set`). A set
//! that would change an existing key's type is refused unless `force_type`
//! says so: llama.cpp reads a key of the wrong type as missing, or fails.

use crate::artifact::{HeaderEnd, TensorSet};
use crate::model::{Array, Value};
use crate::ops::edit::parse_set;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SET_SPEC: OpSpec = OpSpec::new(
    "set-metadata",
    1,
    &[ParamSpec::required("set", ParamKind::StrList), ParamSpec::optional("force_type", ParamKind::Bool)],
);

pub const DELETE_SPEC: OpSpec = OpSpec::new("delete-metadata", 1, &[ParamSpec::required("keys", ParamKind::StrList)]);

#[derive(Debug, Clone, PartialEq)]
pub struct SetMetadata {
    pub values: Vec<(String, Value)>,
    /// Let a set change an existing key's type.
    pub force_type: bool,
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
        let mut values = Vec::new();
        for (text, span) in p.str_list("set") {
            match parse_set(text) {
                Ok(kv) => values.push(kv),
                Err(e) => problems.push(
                    Diagnostic::new(e, span.clone())
                        .with_hint(r#"set = ["general.name=str:my-model", "llama.context_length=u32:4096"]"#),
                ),
            }
        }
        if problems.is_empty() { Ok(SetMetadata { values, force_type: p.bool("force_type") }) } else { Err(problems) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        let values: Vec<String> =
            self.values.iter().map(|(k, v)| format!("{k}={}:{v:?}", v.value_type().name())).collect();
        let mut key = serde_json::json!({ "set": values });
        // Only when set: the keys of existing recipes stay as they were.
        if self.force_type {
            key["force_type"] = serde_json::json!(true);
        }
        key
    }

    pub fn apply(&self, input: &TensorSet) -> Result<TensorSet, MetadataError> {
        let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
        for (key, value) in &self.values {
            if let Some(old) = out.metadata.get(key)
                && !self.force_type
                && type_label(old) != type_label(value)
            {
                let (from, to) = (type_label(old), type_label(value));
                return Err(MetadataError::TypeChange { key: key.clone(), from, to });
            }
            out.metadata.set(key, value.clone());
        }
        Ok(out)
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
        TensorSet { endian: Endian::Little, metadata, tensors: Vec::new(), header_end: HeaderEnd::Aligned }
    }

    #[test]
    fn a_set_keeps_a_keys_type_unless_forced() {
        let input = set_of(&[("n", Value::U32(1)), ("ids", Value::Array(Array::U32(vec![1])))]);
        let set = |key: &str, value: Value, force_type| SetMetadata { values: vec![(key.into(), value)], force_type };
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
