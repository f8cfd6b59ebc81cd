//! `rename`: tensors renamed, bytes and keys unchanged.

use crate::artifact::{HeaderEnd, TensorSet};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec::new("rename", 1, &[ParamSpec::required("tensors", ParamKind::StrMap)]);

/// `tensors = { "OLD" = "NEW", … }`, applied in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenameOptions {
    pub renames: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenameError {
    #[error("cannot rename `{0}`: no such tensor")]
    NoSuchTensor(String),
    #[error("cannot rename `{from}` to `{to}`: a tensor of that name exists")]
    TensorExists { from: String, to: String },
}

impl RenameOptions {
    pub fn from_params(p: &Params) -> Result<RenameOptions, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let mut renames = Vec::new();
        for (old, new, span) in p.str_map("tensors") {
            if new.is_empty() {
                problems.push(Diagnostic::new(format!("`{old}` cannot be renamed to an empty name"), span.clone()));
            }
            renames.push((old.to_owned(), new.to_owned()));
        }
        if problems.is_empty() { Ok(RenameOptions { renames }) } else { Err(problems) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "tensors": self.renames })
    }
}

pub fn apply(input: &TensorSet, options: &RenameOptions) -> Result<TensorSet, RenameError> {
    let mut out = TensorSet { header_end: HeaderEnd::Aligned, ..input.clone() };
    for (from, to) in &options.renames {
        if from == to {
            continue;
        }
        if out.tensors.iter().any(|t| &t.name == to) {
            return Err(RenameError::TensorExists { from: from.clone(), to: to.clone() });
        }
        let tensor = out.tensors.iter_mut().find(|t| &t.name == from);
        tensor.ok_or_else(|| RenameError::NoSuchTensor(from.clone()))?.name = to.clone();
    }
    Ok(out)
}
