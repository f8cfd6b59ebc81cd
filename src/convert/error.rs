//! Why a conversion failed: the one error type of `convert`, naming the
//! config key, tensor or file at fault.

use crate::codecs::CodecError;
use crate::text::Name;

use super::checkpoint::CheckpointError;
use super::rope::RopeError;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("config.json: {0}")]
    Config(String),
    #[error("`{architecture}` checkpoints are not supported{}", nearest_hint(.nearest))]
    Architecture { architecture: String, nearest: Vec<&'static str> },
    #[error(
        "`{class}` has no vision tower this converter writes as an mmproj file (--mmproj takes {})",
        .supported.join(", ")
    )]
    NoVisionTower { class: String, supported: Vec<&'static str> },
    #[error("tensor `{}` has no GGUF name in the {family} conversion", Name(.tensor))]
    Unmapped { tensor: String, family: &'static str },
    #[error(
        "config.json sets `{key}` ({value}), which the {family} conversion does not model; refusing to write a \
         model that would silently lose it"
    )]
    Unmodelled { family: String, key: String, value: String },
    #[error("metadata file {file}: {problem}")]
    MetadataFile { file: String, problem: String },
    #[error("{}: its front matter: {problem}", .path.display())]
    ModelCard { path: std::path::PathBuf, problem: String },
    /// A naming or sampling value (from the model card, `generation_config.json`
    /// or the metadata override file) that is not of the type its key takes.
    #[error("{source_name}: `{field}` is {value}, where {key} takes {expected}")]
    MetadataValue { source_name: String, field: String, value: String, key: String, expected: &'static str },
    #[error("{}: {problem}", .path.display())]
    Tokenizer { path: std::path::PathBuf, problem: String },
    #[error(
        "{}: the BPE pre-tokenizer was not recognized (check hash {hash}, which convert_hf_to_gguf.py does not \
         know either); if the vocabulary is a known one retrained or edited, name its pre-tokenizer with \
         `--pre NAME` (a recipe's convert step: `pre = \"NAME\"`)",
        .dir.display()
    )]
    UnknownPreTokenizer { dir: std::path::PathBuf, hash: String },
    /// A PEFT adapter's `adapter_config.json` or layout.
    #[error("{}: {problem}", .path.display())]
    Adapter { path: std::path::PathBuf, problem: String },
    #[error("adapter tensor `{}`: {problem}", Name(.tensor))]
    AdapterTensor { tensor: String, problem: String },
    #[error(transparent)]
    Rope(#[from] RopeError),
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Codec { tensor: String, source: CodecError },
    #[error(transparent)]
    Format(#[from] crate::formats::FormatError),
    #[error(transparent)]
    Quantize(#[from] crate::quant::plan::QuantizeError),
    /// A preset that would quantize again a tensor the checkpoint publishes
    /// quantized, which llama-quantize refuses without `--allow-requantize`.
    #[error(
        "tensor `{}` is published {from}, which {preset} would quantize again; convert to MXFP4_MOE or a float type, \
         then `quantforge quantize --allow-requantize` for another preset",
        Name(.tensor)
    )]
    Requantize { tensor: String, from: crate::types::GgmlType, preset: &'static str },
}

fn nearest_hint(nearest: &[&str]) -> String {
    match nearest {
        [] => " (`quantforge convert --print-supported-models` lists those that are)".to_owned(),
        names => format!(
            "; the nearest supported: {} (`quantforge convert --print-supported-models` lists all)",
            names.join(", ")
        ),
    }
}
