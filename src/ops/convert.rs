//! `convert`: a Hugging Face checkpoint directory (a recipe input) as a
//! tensor set, as `convert_hf_to_gguf.py` would write it, or quantized
//! straight to a preset. The tensors are computed one at a time and kept as
//! blobs of the store.

use std::path::Path;

use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::convert::{Checkpoint, ConvertError, OutType, convert, convert_quantized};
use crate::model::Endian;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::quant::plan::parse_preset;
use crate::store::{Store, StoreError};
use crate::types::FileType;

pub const SPEC: OpSpec = OpSpec::new(
    "convert",
    1,
    &[ParamSpec::optional("outtype", ParamKind::Str).fanning_out(), ParamSpec::optional("pre", ParamKind::Str)],
)
.reading_an_input();

/// What the checkpoint becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `convert_hf_to_gguf.py --outtype`.
    Float(OutType),
    /// A quantization preset, from the checkpoint's own values.
    Preset(FileType),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertOptions {
    pub target: Target,
    /// The BPE pre-tokenizer name (default: the family's usual one).
    pub pre: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertOpError {
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ConvertOptions {
    pub fn from_params(p: &Params) -> Result<ConvertOptions, Vec<Diagnostic>> {
        let target = match p.str("outtype") {
            None => Target::Float(OutType::F16),
            Some((name, _)) => match OutType::from_name(name) {
                Some(outtype) => Target::Float(outtype),
                None => Target::Preset(parse_preset(name).map_err(|e| vec![p.error("outtype", e)])?),
            },
        };
        Ok(ConvertOptions { target, pre: p.str("pre").map(|(s, _)| s.to_owned()) })
    }

    pub fn key_params(&self) -> serde_json::Value {
        let outtype = match self.target {
            Target::Float(t) => format!("{t:?}"),
            Target::Preset(f) => f.name().to_owned(),
        };
        serde_json::json!({ "outtype": outtype, "pre": self.pre })
    }
}

/// The converted checkpoint in `dir`, its tensors stored as blobs.
pub fn apply(dir: &Path, options: &ConvertOptions, store: &dyn Store) -> Result<TensorSet, ConvertOpError> {
    let checkpoint = Checkpoint::open(dir).map_err(ConvertError::from)?;
    let pre = options.pre.as_deref();
    let (metadata, converted) = match options.target {
        Target::Float(outtype) => convert(&checkpoint, outtype, pre)?,
        Target::Preset(ftype) => convert_quantized(&checkpoint, ftype, pre)?,
    };
    let tensors = converted
        .into_iter()
        .map(|t| {
            let hash = store.put_blob(&t.data(&checkpoint)?)?;
            Ok(Tensor {
                name: t.info.name,
                dims: t.info.dims,
                ggml_type: t.info.ggml_type,
                key: hash,
                data: TensorData::Blob { hash },
            })
        })
        .collect::<Result<Vec<_>, ConvertOpError>>()?;
    Ok(TensorSet { endian: Endian::Little, metadata, tensors })
}
