//! The one-shot commands (`quantize`, `dequantize`, `edit`) as one-step
//! recipes on the engine: one code path for a command and a recipe.
//!
//! Without a cache directory they run on an ephemeral store, so a command
//! line leaves nothing behind but its output; with one (`--cache-dir` or
//! `QUANTFORGE_CACHE`) they share the recipe cache.

use std::path::{Path, PathBuf};

use super::report::{RunReport, Status};
use super::{Engine, RunError};
use crate::formats::OpenOptions;
use crate::ops::Op;
use crate::ops::export::{ExportFormat, SplitMode};
use crate::recipe::{MergeAdapter, OneShot, Recipe, Rung};
use crate::store::OpenError;
use crate::store::remote::{RemoteMode, RemoteUrl};

/// How a one-shot command runs.
#[derive(Debug, Clone, Default)]
pub struct OneShotSettings {
    pub cache_dir: Option<PathBuf>,
    /// A shared cache behind the local one.
    pub remote: Option<(RemoteUrl, RemoteMode)>,
    pub jobs: usize,
    pub open: OpenOptions,
    /// Progress bars on stderr.
    pub progress: bool,
    /// The most bytes of one tensor's rows held at once (`--max-buffer-size`).
    pub buffer_limit: Option<u64>,
    /// How the cache takes in what exports write (`--link`).
    pub link: Vec<crate::files::link::LinkMode>,
}

#[derive(Debug, thiserror::Error)]
pub enum OneShotError {
    #[error(transparent)]
    Store(#[from] OpenError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// The node that failed, and why.
    #[error("{0}")]
    Failed(String),
    /// The required remote cache failed during the run (its outputs are
    /// written, from the local cache).
    #[error("remote cache {location}: {failure}")]
    RemoteFailed { location: String, failure: String },
}

/// Runs `job` and returns the report, or the first node's failure.
pub fn run(job: OneShot<'_>, settings: &OneShotSettings) -> Result<RunReport, OneShotError> {
    run_recipe(&Recipe::one_shot(job), settings)
}

fn run_recipe(recipe: &Recipe, settings: &OneShotSettings) -> Result<RunReport, OneShotError> {
    let remote = settings.remote.as_ref().map(|(url, mode)| (url, *mode));
    let store = crate::store::open(settings.cache_dir.as_deref(), remote)?;
    let engine = Engine::new(store, settings.jobs)?
        .with_open_options(settings.open)
        .with_buffer_limit(settings.buffer_limit)
        .with_link(settings.link.clone());
    let report = engine.run(recipe, settings.progress)?;
    if let Some(failed) = report.nodes.iter().find(|n| n.status == Status::Failed) {
        return Err(OneShotError::Failed(failed.error.clone().unwrap_or_default()));
    }
    let lost = report.remote.as_ref().and_then(|t| Some((t.location.clone(), t.failure.clone()?)));
    match (lost, remote) {
        (Some((location, failure)), Some((_, RemoteMode::Required))) => {
            Err(OneShotError::RemoteFailed { location, failure })
        }
        _ => Ok(report),
    }
}

/// Runs a one-shot ladder: `job`'s input read once, each rung quantized
/// (or otherwise converted) and exported, in one run.
pub fn run_ladder(job: OneShot<'_>, rungs: Vec<Rung>, settings: &OneShotSettings) -> Result<RunReport, OneShotError> {
    run_recipe(&Recipe::one_shot_ladder(job, rungs), settings)
}

/// `assemble`: the parts (a language model and its mmproj files, in any
/// order) as one bundle file.
pub fn assemble_files(parts: &[&Path], output: &Path, settings: &OneShotSettings) -> Result<RunReport, OneShotError> {
    run_recipe(&Recipe::assemble(parts, output), settings)
}

/// `lora-merge`: the base with the adapters (each with its scale) merged
/// in, in order, as one file.
pub fn merge_lora_files(
    base: &Path,
    adapters: &[MergeAdapter<'_>],
    output: &Path,
    settings: &OneShotSettings,
) -> Result<RunReport, OneShotError> {
    run_recipe(&Recipe::lora_merge(base, adapters, output), settings)
}

/// A one-shot job that reads `input` and writes one file `output`.
pub fn job<'a>(name: &'a str, input: &'a Path, ops: Vec<(Op, Vec<usize>)>, output: &'a Path) -> OneShot<'a> {
    OneShot {
        name,
        input,
        extra_inputs: &[],
        read: Op::Load,
        read_uses: Vec::new(),
        ops,
        output,
        split: SplitMode::Whole,
        format: ExportFormat::Gguf,
        byte_order: None,
    }
}

/// `edit` as a recipe: load, the edits' ops, export in `byte_order` (by
/// default the input's, as gguf-py's scripts keep it).
pub fn edit_file(
    input: &Path,
    output: &Path,
    edits: crate::ops::edit::Edits,
    write_as: WriteAs,
    settings: &OneShotSettings,
) -> Result<RunReport, OneShotError> {
    let ops = edits.into_ops().into_iter().map(|op| (op, Vec::new())).collect();
    let WriteAs { format, byte_order } = write_as;
    run(OneShot { format, byte_order, ..job("edit", input, ops, output) }, settings)
}

/// The file an edit writes: GGUF in its input's byte order unless told.
#[derive(Debug, Clone, Copy)]
pub struct WriteAs {
    pub format: ExportFormat,
    pub byte_order: Option<crate::model::Endian>,
}

impl Default for WriteAs {
    fn default() -> WriteAs {
        WriteAs { format: ExportFormat::Gguf, byte_order: None }
    }
}
