//! `--json`: each command's result as one JSON document on stdout, the
//! JSON Schema of every such document (`quantforge schema NAME`, committed
//! under `docs/schemas/`), and a failure in the same form.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::Serialize;

use crate::examine::diff::DiffReport;
use crate::examine::inspect::InspectReport;
use crate::exec::report::{FileReport, RunReport, Totals};
use crate::exec::units::{UnitPlan, WorkReport};
use crate::params::RecipeError;
use crate::quant::budget::BudgetPlan;
use crate::quant::plan::Fallbacks;
use crate::slurm::Submission;
use crate::store::remote::{RemoteGcReport, RemoteUsage, RemoteVerifyReport, TransferReport};
use crate::store::{GcReport, StoreUsage, VerifyReport};

/// Set once the command has printed its document: a failure after it (a
/// run with failed nodes, a corrupt cache) is then said on stderr only,
/// so stdout still holds one document.
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Prints `value` as the command's one JSON document.
pub(super) fn print(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    PRINTED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether the command printed its document.
pub(super) fn printed() -> bool {
    PRINTED.load(Ordering::Relaxed)
}

/// What a command that writes model files wrote (`quantize`, `convert`,
/// `dequantize`, `edit`, `split`, `merge`, `assemble`, `unbundle`).
#[derive(Serialize, JsonSchema)]
pub(super) struct Written {
    /// The command.
    pub command: String,
    /// Each file written, or found already made in the cache: one, or a split's shards.
    pub files: Vec<FileReport>,
    /// Their bytes in all.
    pub bytes: u64,
    /// Tensors encoded, reused from the cache or copied unchanged; bytes read and written.
    pub totals: Totals,
    pub wall_ms: f64,
    /// What moved to and from the remote cache, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<TransferReport>,
    /// The tensors the quantization wrote in fallback types, if any.
    #[serde(skip_serializing_if = "Fallbacks::is_empty")]
    pub fallbacks: Fallbacks,
}

impl Written {
    pub(super) fn of(command: &str, report: &RunReport) -> Written {
        Written {
            command: command.to_owned(),
            files: report.files().cloned().collect(),
            bytes: report.output_bytes(),
            totals: report.totals.clone(),
            wall_ms: report.wall_ms,
            remote: report.remote.clone(),
            // A one-shot command quantizes once at most.
            fallbacks: report.nodes.iter().map(|n| &n.fallbacks).find(|f| !f.is_empty()).cloned().unwrap_or_default(),
        }
    }
}

/// `plan`: the run report of a dry run, and how the recipe's lock would change.
#[derive(Serialize, JsonSchema)]
pub(super) struct Plan {
    #[serde(flatten)]
    pub report: RunReport,
    /// Inputs whose bytes no longer match the recipe's lock file; null without one.
    pub lock_drift: Option<Vec<String>>,
}

/// `run --executor slurm`: what was left to compute and the jobs submitted for it.
#[derive(Serialize, JsonSchema)]
pub(super) struct Submitted {
    pub plan: UnitPlan,
    pub submission: Submission,
}

/// `plan --units --matrix N`: a CI matrix (GitHub Actions' `strategy.matrix`).
#[derive(Serialize, JsonSchema)]
pub(super) struct Matrix {
    pub include: Vec<MatrixJob>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct MatrixJob {
    pub index: usize,
    /// Unit ids for `quantforge work --unit`.
    pub units: Vec<String>,
}

/// `quantize --dry-run`: the type each tensor would get.
#[derive(Serialize, JsonSchema)]
pub(super) struct QuantizePlan {
    /// The preset's llama ftype: `id`, `name` (`Q4_K_M`), `description`.
    pub file_type: FileTypeName,
    /// The output file's bytes.
    pub file_size: u64,
    /// Tensors whose type fell back because their rows do not fit the chosen type's blocks.
    pub fallbacks: usize,
    pub tensors: Vec<PlannedTensor>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct FileTypeName {
    pub id: u32,
    pub name: String,
    pub description: String,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct PlannedTensor {
    pub name: String,
    /// ggml order: the row length first.
    pub shape: Vec<u64>,
    /// The input's type.
    pub from: String,
    /// The output's type.
    #[serde(rename = "type")]
    pub ggml_type: String,
    /// The type chosen before a row-length fallback, when one happened.
    pub fallback_from: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// `split --dry-run`: the shards that would be written.
#[derive(Serialize, JsonSchema)]
pub(super) struct SplitPlan {
    pub files: Vec<FileReport>,
}

/// `cache ls`: one cached node result or export, most recently used first.
#[derive(Serialize, JsonSchema)]
pub(super) struct CacheEntry {
    /// `node` or `export`.
    pub kind: &'static str,
    pub key: String,
    /// Seconds since it was last written or used.
    pub age_seconds: u64,
    /// The result's bytes, when the entry says.
    pub bytes: Option<u64>,
    /// The recipe and node that made it.
    pub recipe: Option<String>,
    pub id: Option<String>,
    /// For an export, the file it wrote.
    pub path: Option<String>,
    /// Its recipe's node was built since under another key (never said of
    /// a remote's entries).
    pub superseded: bool,
}

/// `cache dir`.
#[derive(Serialize, JsonSchema)]
pub(super) struct CacheDir {
    pub path: PathBuf,
}

/// `cache push` and `cache pull`: how many of the recipe's entries, and what moved.
#[derive(Serialize, JsonSchema)]
pub(super) struct Transferred {
    /// Entries the recipe's outputs are made of.
    pub entries: usize,
    pub transfers: TransferReport,
}

/// `verify`: each file (one, or a split's shards) was made again and every byte is equal.
#[derive(Serialize, JsonSchema)]
pub(super) struct Verified {
    pub files: Vec<VerifiedFile>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct VerifiedFile {
    pub path: PathBuf,
    pub bytes: u64,
}

/// `pack`: the pack written and what it holds.
#[derive(Serialize, JsonSchema)]
pub(super) struct Packed {
    pub output: PathBuf,
    pub bytes: u64,
    /// The bytes of the ladder's files, which the pack makes again.
    pub ladder_bytes: u64,
    pub files: Vec<PackEntry>,
}

/// A file a pack holds (`unpack --list`), and how it is made.
#[derive(Serialize, JsonSchema)]
pub(super) struct PackEntry {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// `base`, `imatrix` (both held whole) or `ladder`.
    pub role: &'static str,
    /// A ladder file's derivation from the base (`quantize [FLAGS] TYPE`), when one makes it.
    pub derivation: Option<String>,
    /// Bytes of it the pack stores because no derivation makes them.
    pub stored_bytes: u64,
}

/// `unpack`: the files made, each checked against its sha256.
#[derive(Serialize, JsonSchema)]
pub(super) struct Unpacked {
    pub directory: PathBuf,
    pub files: Vec<PackEntry>,
}

/// How a command failed, on stdout under `--json` (exit status 1).
#[derive(Serialize, JsonSchema)]
pub(super) struct Failure {
    pub error: ErrorReport,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct ErrorReport {
    /// The message as the terminal shows it.
    pub message: String,
    /// Where loading a model failed, when that is what failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<crate::formats::LoadStage>,
    /// A recipe's problems, each at its place.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct Problem {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    pub message: String,
    /// A likely fix (`did you mean …?`).
    pub hint: Option<String>,
}

impl Failure {
    pub(super) fn of(error: &anyhow::Error, message: String) -> Failure {
        let problems = error
            .chain()
            .filter_map(|cause| cause.downcast_ref::<RecipeError>())
            .flat_map(|e| {
                e.problems.iter().map(|p| Problem {
                    file: e.file.clone(),
                    line: p.line,
                    column: p.column,
                    message: p.message.clone(),
                    hint: p.hint.clone(),
                })
            })
            .collect();
        let stage = error.chain().find_map(|cause| cause.downcast_ref::<crate::formats::FormatError>()?.stage);
        Failure { error: ErrorReport { message, stage, problems } }
    }
}

/// The schema of what `T` serializes to: a field is required unless it is
/// skipped when empty.
fn schema<T: JsonSchema>() -> Schema {
    SchemaSettings::draft2020_12().for_serialize().into_generator().into_root_schema_for::<T>()
}

/// Every document `--json` prints, by the name `quantforge schema` takes,
/// with the commands that print it.
pub(super) fn schemas() -> Vec<(&'static str, &'static str, Schema)> {
    vec![
        ("run", "run", schema::<RunReport>()),
        ("plan", "plan", schema::<Plan>()),
        ("units", "plan --units", schema::<UnitPlan>()),
        ("matrix", "plan --units --matrix N", schema::<Matrix>()),
        ("work", "work", schema::<WorkReport>()),
        ("submitted", "run --executor slurm", schema::<Submitted>()),
        ("inspect", "inspect", schema::<InspectReport>()),
        ("diff", "diff", schema::<DiffReport>()),
        ("plan-quant", "plan-quant, quantize --dry-run --target-size", schema::<BudgetPlan>()),
        ("written", "quantize, convert, dequantize, edit, split, merge, assemble, unbundle", schema::<Written>()),
        ("quantize-plan", "quantize --dry-run", schema::<QuantizePlan>()),
        ("split-plan", "split --dry-run", schema::<SplitPlan>()),
        ("plan-devices", "plan-devices", schema::<crate::arch::split::DevicePlan>()),
        ("verify", "verify", schema::<Verified>()),
        ("pack", "pack", schema::<Packed>()),
        ("pack-list", "unpack --list", schema::<Vec<PackEntry>>()),
        ("unpack", "unpack", schema::<Unpacked>()),
        ("cache-ls", "cache ls [--remote]", schema::<Vec<CacheEntry>>()),
        ("cache-du", "cache du", schema::<StoreUsage>()),
        ("cache-du-remote", "cache du --remote", schema::<RemoteUsage>()),
        ("cache-gc", "cache gc", schema::<GcReport>()),
        ("cache-gc-remote", "cache gc --remote", schema::<RemoteGcReport>()),
        ("cache-verify", "cache verify", schema::<VerifyReport>()),
        ("cache-verify-remote", "cache verify --remote", schema::<RemoteVerifyReport>()),
        ("cache-dir", "cache dir", schema::<CacheDir>()),
        ("cache-transfer", "cache push, cache pull", schema::<Transferred>()),
        ("error", "any command that fails", schema::<Failure>()),
    ]
}
