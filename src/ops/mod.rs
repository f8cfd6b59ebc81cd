//! Operations. The recipe ops (`load`, `merge-shards`, `convert`,
//! `convert-lora`, `lora-merge`, `dequantize`, `imatrix`, `quantize`,
//! `evaluate`, `filter`,
//! `rename`, `set-metadata`, `delete-metadata`, `assemble`, `unbundle`,
//! `export`) are each a pure function of their input tensor sets and
//! parameters, one file each, with the [`OpSpec`] that says what a recipe
//! may pass them; `imatrix` and `evaluate` are results of an external
//! tool (its identity part of the step's key). `split` and
//! `device_shards` plan and write the shards an export makes, `edit` reads
//! the edits that `edit` and the metadata ops share. None touches a file
//! but through the store, the formats and the export's writer, and none
//! parses arguments or prints.

pub mod assemble;
pub mod convert;
pub mod dequantize;
pub mod device_shards;
pub mod edit;
pub mod evaluate;
pub mod export;
pub mod filter;
pub mod imatrix;
pub mod load;
pub mod lora_merge;
pub mod metadata;
pub mod quantize;
pub mod rename;
pub mod split;

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

/// Declares [`OpKind`] and its table from one list, so no op can be in
/// the enum and missing from the table (or the other way round).
macro_rules! op_kinds {
    ($($kind:ident => $spec:path,)*) => {
        /// Which op a node runs, without its parameters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum OpKind {
            $($kind,)*
        }

        impl OpKind {
            /// Every op, in the order the docs list them.
            pub const ALL: &[OpKind] = &[$(OpKind::$kind,)*];

            pub fn spec(self) -> &'static OpSpec {
                match self {
                    $(OpKind::$kind => &$spec,)*
                }
            }
        }
    };
}

op_kinds! {
    Load => load::SPEC,
    MergeShards => load::MERGE_SPEC,
    Convert => convert::SPEC,
    ConvertLora => convert::LORA_SPEC,
    LoraMerge => lora_merge::SPEC,
    Dequantize => dequantize::SPEC,
    Imatrix => imatrix::SPEC,
    Quantize => quantize::SPEC,
    Evaluate => evaluate::SPEC,
    KldBase => evaluate::BASE_SPEC,
    Filter => filter::SPEC,
    Rename => rename::SPEC,
    SetMetadata => metadata::SET_SPEC,
    DeleteMetadata => metadata::DELETE_SPEC,
    Assemble => assemble::ASSEMBLE_SPEC,
    Unbundle => assemble::UNBUNDLE_SPEC,
    Export => export::SPEC,
}

impl OpKind {
    /// Whether only the recipe's parser adds it (the base logits an
    /// `evaluate` step compares against); a recipe cannot name it.
    pub fn is_hidden(self) -> bool {
        self == OpKind::KldBase
    }
}

/// The ops a recipe may name, in the order the docs list them.
pub fn recipe_specs() -> impl Iterator<Item = &'static OpSpec> {
    OpKind::ALL.iter().filter(|kind| !kind.is_hidden()).map(|kind| kind.spec())
}

/// The op a recipe names `name`.
pub fn spec(name: &str) -> Option<&'static OpSpec> {
    recipe_specs().find(|s| s.name == name)
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
        let unknown = || vec![Diagnostic::new(format!("unknown op `{}`", spec.name), params.span.clone())];
        let kind = OpKind::ALL.iter().copied().find(|k| !k.is_hidden() && k.spec().name == spec.name);
        Ok(match kind.ok_or_else(unknown)? {
            OpKind::Load => Op::Load,
            OpKind::MergeShards => Op::MergeShards(MergeOptions::from_params(params)?),
            OpKind::Convert => Op::Convert(Box::new(ConvertOptions::from_params(params)?)),
            OpKind::ConvertLora => Op::ConvertLora(ConvertLoraOptions::from_params(params)?),
            OpKind::LoraMerge => Op::LoraMerge(LoraMergeOptions::from_params(params)?),
            OpKind::Dequantize => Op::Dequantize(DequantizeOptions::from_params(params)?),
            OpKind::Imatrix => Op::Imatrix(ImatrixOptions::from_params(params)?),
            OpKind::Evaluate => Op::Evaluate(EvaluateOptions::from_params(params)?),
            OpKind::KldBase => return Err(unknown()),
            OpKind::Quantize => Op::Quantize(Box::new(QuantizeOptions::from_params(params)?)),
            OpKind::Filter => Op::Filter(FilterOptions::from_params(params)?),
            OpKind::Rename => Op::Rename(RenameOptions::from_params(params)?),
            OpKind::SetMetadata => Op::SetMetadata(SetMetadata::from_params(params)?),
            OpKind::DeleteMetadata => Op::DeleteMetadata(DeleteMetadata::from_params(params)?),
            OpKind::Assemble => Op::Assemble,
            OpKind::Unbundle => Op::Unbundle(UnbundleOptions::from_params(params)?),
            OpKind::Export => {
                let path = export.ok_or_else(|| vec![params.error("path", "`export` needs a `path`")])?;
                Op::Export(ExportOptions::from_params(params, path)?)
            }
        })
    }

    pub fn kind(&self) -> OpKind {
        match self {
            Op::Load => OpKind::Load,
            Op::MergeShards(_) => OpKind::MergeShards,
            Op::Convert(_) => OpKind::Convert,
            Op::ConvertLora(_) => OpKind::ConvertLora,
            Op::LoraMerge(_) => OpKind::LoraMerge,
            Op::Dequantize(_) => OpKind::Dequantize,
            Op::Imatrix(_) => OpKind::Imatrix,
            Op::Evaluate(_) => OpKind::Evaluate,
            Op::KldBase(_) => OpKind::KldBase,
            Op::Quantize(_) => OpKind::Quantize,
            Op::Filter(_) => OpKind::Filter,
            Op::Rename(_) => OpKind::Rename,
            Op::SetMetadata(_) => OpKind::SetMetadata,
            Op::DeleteMetadata(_) => OpKind::DeleteMetadata,
            Op::Assemble => OpKind::Assemble,
            Op::Unbundle(_) => OpKind::Unbundle,
            Op::Export(_) => OpKind::Export,
        }
    }

    pub fn spec(&self) -> &'static OpSpec {
        self.kind().spec()
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
