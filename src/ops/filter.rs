//! `filter`: keep or drop tensors by name pattern. Moves descriptors only.

use regex::Regex;

use crate::artifact::TensorSet;
use crate::recipe::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec {
    name: "filter",
    version: 1,
    params: &[ParamSpec::optional("keep", ParamKind::StrList), ParamSpec::optional("drop", ParamKind::StrList)],
    from_input_only: false,
    is_sink: false,
    many_inputs: false,
};

/// Tensors whose name matches any `keep` pattern (all, when there are none)
/// and no `drop` pattern. Patterns are regexes found anywhere in the name.
#[derive(Debug, Clone)]
pub struct FilterOptions {
    pub keep: Vec<Regex>,
    pub drop: Vec<Regex>,
}

impl FilterOptions {
    pub fn from_params(p: &Params) -> Result<FilterOptions, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let mut compile = |name: &str| {
            let mut out = Vec::new();
            for (pattern, span) in p.str_list(name) {
                match Regex::new(pattern) {
                    Ok(re) => out.push(re),
                    Err(e) => problems.push(Diagnostic::new(format!("bad pattern: {e}"), span.clone())),
                }
            }
            out
        };
        let (keep, drop) = (compile("keep"), compile("drop"));
        if p.get("keep").is_none() && p.get("drop").is_none() {
            problems.push(p.error("keep", "`filter` needs `keep` or `drop` (lists of name patterns)"));
        }
        if problems.is_empty() { Ok(FilterOptions { keep, drop }) } else { Err(problems) }
    }

    pub fn keeps(&self, name: &str) -> bool {
        (self.keep.is_empty() || self.keep.iter().any(|re| re.is_match(name)))
            && !self.drop.iter().any(|re| re.is_match(name))
    }

    pub fn key_params(&self) -> serde_json::Value {
        let patterns = |list: &[Regex]| list.iter().map(|re| re.as_str().to_owned()).collect::<Vec<_>>();
        serde_json::json!({ "keep": patterns(&self.keep), "drop": patterns(&self.drop) })
    }
}

pub fn apply(input: &TensorSet, options: &FilterOptions) -> TensorSet {
    TensorSet {
        endian: input.endian,
        metadata: input.metadata.clone(),
        tensors: input.tensors.iter().filter(|t| options.keeps(&t.name)).cloned().collect(),
    }
}
