//! `dequantize`: every tensor decoded to F32, F16 or BF16, as
//! `llama-quantize --allow-requantize IN OUT F16` would (1-D tensors stay
//! F32, as in converted models).

use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::quant::plan::QuantizeOptions;
use crate::types::FileType;

pub const SPEC: OpSpec = OpSpec::new("dequantize", 1, &[ParamSpec::optional("type", ParamKind::Str).fanning_out()]);

/// The float types a model can be decoded to.
pub const FLOAT_TYPES: [&str; 3] = ["f32", "f16", "bf16"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DequantizeOptions {
    pub ftype: FileType,
}

impl DequantizeOptions {
    /// `type = "f32" | "f16" | "bf16"`, F32 when left out: a dequantize step is
    /// usually the start of a fused chain whose intermediate is exact.
    pub fn from_params(p: &Params) -> Result<DequantizeOptions, Vec<Diagnostic>> {
        let name = p.str("type").map_or("f32", |(s, _)| s);
        DequantizeOptions::from_name(name)
            .ok_or_else(|| vec![p.error("type", format!("cannot dequantize to `{name}`")).suggest(name, FLOAT_TYPES)])
    }

    pub fn from_name(name: &str) -> Option<DequantizeOptions> {
        let lower = name.to_ascii_lowercase();
        FLOAT_TYPES
            .contains(&lower.as_str())
            .then(|| FileType::from_name(&lower))
            .flatten()
            .map(|ftype| DequantizeOptions { ftype })
    }

    /// Dequantizing is quantizing to a float preset with requantization allowed.
    pub fn quantize_options(&self) -> QuantizeOptions {
        QuantizeOptions { allow_requantize: true, ..QuantizeOptions::new(self.ftype) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "type": self.ftype.name() })
    }
}
