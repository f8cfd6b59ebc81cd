//! Operations. The recipe ops (`load`, `merge-shards`, `convert`,
//! `convert-lora`, `lora-merge`, `dequantize`, `imatrix`, `quantize`,
//! `evaluate`, `filter`,
//! `rename`, `set-metadata`, `delete-metadata`, `assemble`, `unbundle`,
//! `export`) are each a pure function of their input tensor sets and
//! parameters, one file each, with the [`OpSpec`] that says what a recipe
//! may pass them; `imatrix` and `evaluate` are results of an external
//! tool (its identity part of the step's key). The one-shot
//! operations (`inspect`, `diff`, `split`, `edit`'s parsing) take files and
//! return reports. None parses arguments or prints.

pub mod assemble;
pub mod convert;
pub mod dequantize;
pub mod device_shards;
pub mod diff;
pub mod edit;
pub mod evaluate;
pub mod export;
pub mod filter;
pub mod imatrix;
pub mod inspect;
pub mod load;
pub mod lora_merge;
pub mod metadata;
pub mod quantize;
pub mod rename;
pub mod split;
pub mod verify;

use std::path::PathBuf;

use crate::params::{Diagnostic, OpSpec, Params};

use crate::quant::plan::QuantizeOptions;
use assemble::UnbundleOptions;
use convert::{ConvertLoraOptions, ConvertOptions};
use dequantize::DequantizeOptions;
use evaluate::EvaluateOptions;
use export::ExportOptions;
use filter::FilterOptions;
use imatrix::ImatrixOptions;
use load::MergeOptions;
use lora_merge::LoraMergeOptions;
use metadata::{DeleteMetadata, SetMetadata};
use rename::RenameOptions;

/// Every recipe op, in the order the docs list them.
pub const SPECS: [OpSpec; 16] = [
    load::SPEC,
    load::MERGE_SPEC,
    convert::SPEC,
    convert::LORA_SPEC,
    lora_merge::SPEC,
    dequantize::SPEC,
    imatrix::SPEC,
    quantize::SPEC,
    evaluate::SPEC,
    filter::SPEC,
    rename::SPEC,
    metadata::SET_SPEC,
    metadata::DELETE_SPEC,
    assemble::ASSEMBLE_SPEC,
    assemble::UNBUNDLE_SPEC,
    export::SPEC,
];

pub fn spec(name: &str) -> Option<&'static OpSpec> {
    SPECS.iter().find(|s| s.name == name)
}

/// A recipe op with its parameters read and checked.
#[derive(Debug, Clone)]
pub enum Op {
    Load,
    MergeShards(MergeOptions),
    Convert(Box<ConvertOptions>),
    ConvertLora(ConvertLoraOptions),
    LoraMerge(LoraMergeOptions),
    Dequantize(DequantizeOptions),
    Imatrix(ImatrixOptions),
    Quantize(Box<QuantizeOptions>),
    Evaluate(EvaluateOptions),
    /// The base's logits an `evaluate` step compares against: a hidden
    /// node the recipe's parser adds.
    KldBase(EvaluateOptions),
    Filter(FilterOptions),
    Rename(RenameOptions),
    SetMetadata(SetMetadata),
    DeleteMetadata(DeleteMetadata),
    Assemble,
    Unbundle(UnbundleOptions),
    Export(ExportOptions),
}

impl Op {
    /// Reads the parameters of a node of op `spec`. An export's path comes
    /// resolved from the recipe.
    pub fn from_params(spec: &OpSpec, params: &Params, export: Option<PathBuf>) -> Result<Op, Vec<Diagnostic>> {
        Ok(match spec.name {
            "load" => Op::Load,
            "merge-shards" => Op::MergeShards(MergeOptions::from_params(params)?),
            "convert" => Op::Convert(Box::new(ConvertOptions::from_params(params)?)),
            "convert-lora" => Op::ConvertLora(ConvertLoraOptions::from_params(params)?),
            "lora-merge" => Op::LoraMerge(LoraMergeOptions::from_params(params)?),
            "dequantize" => Op::Dequantize(DequantizeOptions::from_params(params)?),
            "imatrix" => Op::Imatrix(ImatrixOptions::from_params(params)?),
            "evaluate" => Op::Evaluate(EvaluateOptions::from_params(params)?),
            "quantize" => Op::Quantize(Box::new(QuantizeOptions::from_params(params)?)),
            "filter" => Op::Filter(FilterOptions::from_params(params)?),
            "rename" => Op::Rename(RenameOptions::from_params(params)?),
            "set-metadata" => Op::SetMetadata(SetMetadata::from_params(params)?),
            "delete-metadata" => Op::DeleteMetadata(DeleteMetadata::from_params(params)?),
            "assemble" => Op::Assemble,
            "unbundle" => Op::Unbundle(UnbundleOptions::from_params(params)?),
            "export" => {
                let path = export.ok_or_else(|| vec![params.error("path", "`export` needs a `path`")])?;
                Op::Export(ExportOptions::from_params(params, path)?)
            }
            other => return Err(vec![Diagnostic::new(format!("unknown op `{other}`"), params.span.clone())]),
        })
    }

    pub fn spec(&self) -> &'static OpSpec {
        match self {
            Op::Load => &load::SPEC,
            Op::MergeShards(_) => &load::MERGE_SPEC,
            Op::Convert(_) => &convert::SPEC,
            Op::ConvertLora(_) => &convert::LORA_SPEC,
            Op::LoraMerge(_) => &lora_merge::SPEC,
            Op::Dequantize(_) => &dequantize::SPEC,
            Op::Imatrix(_) => &imatrix::SPEC,
            Op::Evaluate(_) => &evaluate::SPEC,
            Op::KldBase(_) => &evaluate::BASE_SPEC,
            Op::Quantize(_) => &quantize::SPEC,
            Op::Filter(_) => &filter::SPEC,
            Op::Rename(_) => &rename::SPEC,
            Op::SetMetadata(_) => &metadata::SET_SPEC,
            Op::DeleteMetadata(_) => &metadata::DELETE_SPEC,
            Op::Assemble => &assemble::ASSEMBLE_SPEC,
            Op::Unbundle(_) => &assemble::UNBUNDLE_SPEC,
            Op::Export(_) => &export::SPEC,
        }
    }

    pub fn name(&self) -> &'static str {
        self.spec().name
    }

    /// The parameters as they enter the cache key: normalized, and only
    /// those that change the result.
    pub fn key_params(&self) -> serde_json::Value {
        match self {
            Op::Load => serde_json::json!({}),
            Op::MergeShards(o) => o.key_params(),
            Op::Convert(o) => o.key_params(),
            Op::ConvertLora(o) => o.key_params(),
            Op::LoraMerge(o) => o.key_params(),
            Op::Dequantize(o) => o.key_params(),
            Op::Imatrix(o) => o.key_params(),
            Op::Evaluate(o) | Op::KldBase(o) => o.key_params(),
            Op::Quantize(o) => o.key_params(),
            Op::Filter(o) => o.key_params(),
            Op::Rename(o) => o.key_params(),
            Op::SetMetadata(o) => o.key_params(),
            Op::DeleteMetadata(o) => o.key_params(),
            Op::Assemble => serde_json::json!({}),
            Op::Unbundle(o) => o.key_params(),
            Op::Export(o) => o.key_params(),
        }
    }

    /// The external tool the op runs, whose identity is part of its key.
    pub fn tool(&self) -> Option<crate::tools::Tool> {
        match self {
            Op::Imatrix(_) => Some(crate::tools::Tool::Imatrix),
            Op::Evaluate(_) | Op::KldBase(_) => Some(crate::tools::Tool::Perplexity),
            _ => None,
        }
    }

    /// Whether the op encodes tensors (so a codec change changes its result).
    pub fn converts(&self) -> bool {
        matches!(self, Op::Dequantize(_) | Op::Quantize(_) | Op::Convert(_) | Op::ConvertLora(_) | Op::LoraMerge(_))
    }
}
