//! `set-metadata` and `delete-metadata`: metadata edits, tensors untouched.
//!
//! A set key keeps its place when it exists and is appended otherwise; values
//! are written `KEY=TYPE:VALUE` as on the command line (`edit --set`).

use crate::artifact::{HeaderEnd, TensorSet};
use crate::model::Value;
use crate::ops::edit::parse_set;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SET_SPEC: OpSpec = OpSpec::new("set-metadata", 1, &[ParamSpec::required("set", ParamKind::StrList)]);

pub const DELETE_SPEC: OpSpec = OpSpec::new("delete-metadata", 1, &[ParamSpec::required("keys", ParamKind::StrList)]);

#[derive(Debug, Clone, PartialEq)]
pub struct SetMetadata {
    pub values: Vec<(String, Value)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteMetadata {
    pub keys: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot delete `{0}`: no such metadata key")]
pub struct NoSuchKey(pub String);

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
        if problems.is_empty() { Ok(SetMetadata { values }) } else { Err(problems) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        let values: Vec<String> =
            self.values.iter().map(|(k, v)| format!("{k}={}:{v:?}", v.value_type().name())).collect();
        serde_json::json!({ "set": values })
    }

    pub fn apply(&self, input: &TensorSet) -> TensorSet {
        let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
        for (key, value) in &self.values {
            out.metadata.set(key, value.clone());
        }
        out
    }
}

impl DeleteMetadata {
    pub fn from_params(p: &Params) -> Result<DeleteMetadata, Vec<Diagnostic>> {
        Ok(DeleteMetadata { keys: p.str_list("keys").into_iter().map(|(k, _)| k.to_owned()).collect() })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "keys": self.keys })
    }

    pub fn apply(&self, input: &TensorSet) -> Result<TensorSet, NoSuchKey> {
        let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
        for key in &self.keys {
            if !out.metadata.remove(key) {
                return Err(NoSuchKey(key.clone()));
            }
        }
        Ok(out)
    }
}
