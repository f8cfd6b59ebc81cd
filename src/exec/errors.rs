//! What a run can fail with: a recipe-level `RunError`, a step's `NodeError`.

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `input` says which, and where the recipe declares it ([`input_label`]).
    #[error("{input}{}: {}", path.display(), crate::files::IoText(source))]
    Input { input: String, path: PathBuf, source: std::io::Error },
    #[error("{input}{}: no such file; `{fetch}` fetches it (the recipe's `fetch`)", path.display())]
    Missing { input: String, path: PathBuf, fetch: String },
    #[error("{input}{} has blake3 {actual}, but the recipe pins {expected}", path.display())]
    PinMismatch { input: String, path: PathBuf, expected: Key, actual: Key },
    #[error("{input}{source}")]
    Split { input: String, source: Box<SplitError> },
    #[error("{input}{source}")]
    Resolve { input: String, source: Box<FormatError> },
    #[error("cannot start the workers: {0}")]
    Workers(String),
    #[error(transparent)]
    Output(#[from] outputs::OutputError),
    #[error("step `{node}`: {source}")]
    Backend { node: String, source: crate::backend::BackendError },
    #[error("step `{node}`: {source}")]
    Step { node: String, source: Box<NodeError> },
    #[error("unit `{id}`: {why}")]
    Unit { id: String, why: String },
    #[error("no step, export or output path `{target}` in the recipe (its steps: {steps})")]
    UnknownTarget { target: String, steps: String },
    #[error("step `{node}`: {source}")]
    Tool { node: String, source: crate::tools::ToolError },
}

/// Why one node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Quantize(#[from] crate::quant::plan::QuantizeError),
    #[error(transparent)]
    Imatrix(#[from] crate::quant::imatrix::ImatrixError),
    #[error(transparent)]
    Budget(#[from] budget::BudgetError),
    #[error(transparent)]
    Convert(#[from] ops::convert::ConvertOpError),
    /// Boxed: its shape variant names three shapes.
    #[error(transparent)]
    LoraMerge(Box<ops::lora_merge::LoraMergeError>),
    #[error(transparent)]
    Rename(#[from] ops::rename::RenameError),
    #[error(transparent)]
    Metadata(#[from] ops::metadata::MetadataError),
    #[error(transparent)]
    Materialize(#[from] MaterializeError),
    #[error(transparent)]
    Manifest(#[from] crate::artifact::ManifestError),
    #[error(transparent)]
    Output(#[from] outputs::OutputError),
    #[error("writing {}: {}", path.display(), crate::files::IoText(source))]
    Write { path: PathBuf, source: std::io::Error },
    #[error("input `{0}` failed")]
    Upstream(String),
    #[error(transparent)]
    Split(#[from] SplitError),
    #[error(transparent)]
    SafeTensors(crate::formats::safetensors::WriteError),
    #[error(transparent)]
    Ggjt(crate::formats::ggml_legacy::GgjtError),
    #[error(transparent)]
    Load(#[from] ops::load::LoadError),
    #[error(transparent)]
    Assemble(#[from] ops::assemble::AssembleError),
    #[error("cannot write big-endian: {0}")]
    ByteOrder(#[from] crate::formats::gguf::NoBigEndianLayout),
    /// Boxed: it carries the command line and the tool's last lines.
    #[error(transparent)]
    Tool(Box<crate::tools::RunFailure>),
    /// What binding a recipe gives a node was not there (a bug, not the input's fault).
    #[error("step `{node}` has no {what}")]
    Unbound { node: String, what: &'static str },
    /// A dry run (`plan`, `plan --units`) met a step a tool computes that
    /// is not cached yet.
    #[error("{tool} computes it only when the recipe runs: run the recipe with this step as its target first")]
    NotPlanned { tool: &'static str },
}

impl From<ops::lora_merge::LoraMergeError> for NodeError {
    fn from(e: ops::lora_merge::LoraMergeError) -> NodeError {
        NodeError::LoraMerge(Box::new(e))
    }
}
