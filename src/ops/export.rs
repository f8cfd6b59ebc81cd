//! `export`: the one op with an effect: a tensor set written as a file.
//!
//! The path is a template (`out/model-{preset}.gguf`) filled from the fan-out
//! values of the nodes upstream, relative to the recipe's directory and never
//! outside it. The path is not part of the cache key: the same bytes exported
//! to another place are the same result.

use std::path::PathBuf;

use crate::recipe::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec {
    name: "export",
    version: 1,
    params: &[ParamSpec::required("path", ParamKind::Str), ParamSpec::optional("format", ParamKind::Str)],
    from_input_only: false,
    is_sink: true,
};

pub const FORMATS: [&str; 1] = ["gguf"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Where the file goes, already resolved.
    pub path: PathBuf,
}

impl ExportOptions {
    /// Checks everything but the path, which the recipe resolves (it knows
    /// the fan-out values and the output directory).
    pub fn check_params(p: &Params) -> Result<(), Vec<Diagnostic>> {
        match p.str("format") {
            Some((format, _)) if !FORMATS.contains(&format) => {
                Err(vec![p.error("format", format!("cannot export as `{format}`")).suggest(format, FORMATS)])
            }
            _ => Ok(()),
        }
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "format": "gguf" })
    }
}
