//! `filter`: keep or drop tensors by name pattern. Moves descriptors only.

use regex::Regex;

use crate::artifact::{HeaderEnd, TensorSet};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec::new(
    "filter",
    1,
    &[ParamSpec::optional("include", ParamKind::StrList), ParamSpec::optional("exclude", ParamKind::StrList)],
);

/// Tensors whose name matches any `include` pattern (all, when there are
/// none) and no `exclude` pattern. Patterns are regexes found anywhere in the
/// name. (Not `keep`: that is every step's field for caching its result.)
#[derive(Debug, Clone)]
pub struct FilterOptions {
    pub include: Vec<Regex>,
    pub exclude: Vec<Regex>,
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
        let (include, exclude) = (compile("include"), compile("exclude"));
        if p.get("include").is_none() && p.get("exclude").is_none() {
            problems.push(p.error("include", "`filter` needs `include` or `exclude` (lists of name patterns)"));
        }
        if problems.is_empty() { Ok(FilterOptions { include, exclude }) } else { Err(problems) }
    }

    pub fn keeps(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|re| re.is_match(name)))
            && !self.exclude.iter().any(|re| re.is_match(name))
    }

    pub fn key_params(&self) -> serde_json::Value {
        let patterns = |list: &[Regex]| list.iter().map(|re| re.as_str().to_owned()).collect::<Vec<_>>();
        serde_json::json!({ "include": patterns(&self.include), "exclude": patterns(&self.exclude) })
    }
}

pub fn apply(input: &TensorSet, options: &FilterOptions) -> TensorSet {
    TensorSet {
        endian: input.endian,
        metadata: input.metadata.clone(),
        tensors: input.tensors.iter().filter(|t| options.keeps(&t.name)).cloned().collect(),
        header_end: HeaderEnd::Aligned,
        legacy: input.legacy.clone(),
    }
}
