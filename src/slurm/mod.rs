//! Hands a recipe's work to Slurm: one job array per stage of work units,
//! each task a `quantforge work` of one unit, and one array of exports, each
//! task an ordinary `quantforge run` of one export assembled from the shared
//! cache; every array `afterok` the one before. Slurm schedules; this module
//! only writes the task scripts, submits, follows and reports.
//!
//! Requests come from the units' estimates: CPUs a task's slabs can use,
//! capped by the largest node of the partition, and memory for that many
//! slabs in flight on top of the process's own.

mod queue;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::exec::units::{UnitPlan, UnitSize};
use crate::store::fingerprint::Pin;

pub use queue::{Failure, follow};

/// What to ask Slurm for, beyond what the units' estimates decide.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time: Option<String>,
    pub cpus_per_task: Option<u32>,
    pub mem_mb: Option<u64>,
    /// Tasks of one array running at once (`--array=…%K`).
    pub max_parallel: Option<usize>,
    /// Passed to every `sbatch` as they are, after ours.
    pub sbatch_args: Vec<String>,
}

/// How a task runs quantforge: the same binary, recipe, caches and unit
/// size as the submitting run, all as absolute paths.
#[derive(Debug, Clone)]
pub struct Worker {
    pub binary: PathBuf,
    pub recipe: PathBuf,
    pub cache_dir: PathBuf,
    pub cache_url: String,
    pub unit_size: UnitSize,
    /// The input pins file the tasks read.
    pub pins: Option<PathBuf>,
}

/// A submitted array and what each of its tasks does.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ArrayJob {
    pub job_id: String,
    /// `units stage N` or `exports`.
    pub what: String,
    /// Unit IDs or export ids, by array index.
    pub tasks: Vec<String>,
    /// Where task `i`'s output goes: `%a` replaced by `i`.
    pub log_pattern: PathBuf,
    pub cpus: u32,
    pub mem_mb: u64,
}

impl ArrayJob {
    pub fn log(&self, task: usize) -> PathBuf {
        let pattern = self.log_pattern.to_string_lossy();
        PathBuf::from(pattern.replace("%A", &self.job_id).replace("%a", &task.to_string()))
    }
}

/// Everything one `run --executor slurm` submitted, in dependency order.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct Submission {
    pub dir: PathBuf,
    pub jobs: Vec<ArrayJob>,
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run `{command}` ({}); is Slurm installed and this a submit host?", crate::files::IoText(source))]
    Spawn { command: String, source: std::io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("`{command}` printed `{output}`, not a job id")]
    JobId { command: String, output: String },
    #[error("writing {}: {}", path.display(), crate::files::IoText(source))]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{}", failures_text(.0))]
    Failed(Vec<Failure>),
}

fn failures_text(failures: &[Failure]) -> String {
    let mut text = format!("{} Slurm task(s) failed; nothing was exported", failures.len());
    for f in failures {
        let _ = write!(text, "\n  task {} ({}) {}: {}\n    log: {}", f.task, f.what, f.state, f.cause, f.log.display());
    }
    text
}

/// Memory a work process needs besides its slabs: the binary, the
/// manifests and the store's buffers (measured: about 60 MiB on Gemma's
/// ladder; doubled for larger manifests).
const PROCESS_MB: u64 = 128;

/// CPUs a task asks for by default: a unit's slabs parallelize over rows,
/// and beyond four cores the serial parts (binding inputs, cache lookups)
/// leave cores idle.
const DEFAULT_CPUS: u32 = 4;

/// Submits `plan`: its stages' units, then its exports. The tasks take the
/// inputs' hashes from `pins` while the files' stats match them, instead of
/// each reading every input again.
pub fn submit(
    plan: &UnitPlan,
    pins: &[Pin],
    worker: &Worker,
    request: &Request,
    dir: &Path,
) -> Result<Submission, SlurmError> {
    std::fs::create_dir_all(dir).map_err(|source| SlurmError::Write { path: dir.to_owned(), source })?;
    let pins_path = dir.join("inputs.json");
    let json =
        serde_json::to_vec_pretty(pins).map_err(|e| SlurmError::Write { path: pins_path.clone(), source: e.into() })?;
    std::fs::write(&pins_path, json).map_err(|source| SlurmError::Write { path: pins_path.clone(), source })?;
    let worker = &Worker { pins: Some(pins_path), ..worker.clone() };
    let (node_cpus, node_mb) = largest_node(request.partition.as_deref())?;
    let cpus = request.cpus_per_task.unwrap_or_else(|| DEFAULT_CPUS.min(node_cpus.max(1)));
    let mut jobs: Vec<ArrayJob> = Vec::new();
    for stage in 0..plan.stages {
        let units: Vec<_> = plan.units.iter().filter(|u| u.stage == stage).collect();
        if units.is_empty() {
            continue;
        }
        let slab = units.iter().map(|u| u.slab_bytes).max().unwrap_or(0);
        // Two slabs per thread: one encoding while the previous is written.
        let needed = PROCESS_MB + (2 * slab * u64::from(cpus)).div_ceil(1 << 20);
        let array = Array {
            name: format!("stage{stage}"),
            what: format!("units stage {stage}"),
            tasks: units.iter().map(|u| u.id.clone()).collect(),
            command: work_command(worker, cpus),
            cpus,
            mem_mb: request.mem_mb.unwrap_or_else(|| needed.min(node_mb.max(PROCESS_MB))),
        };
        jobs.push(submit_array(dir, &plan.recipe, array, request, jobs.last())?);
    }
    if !plan.exports.is_empty() {
        let array = Array {
            name: "exports".into(),
            what: "exports".into(),
            tasks: plan.exports.iter().map(|e| e.id.clone()).collect(),
            command: export_command(worker, cpus),
            cpus,
            mem_mb: request.mem_mb.unwrap_or(jobs.iter().map(|j| j.mem_mb).max().unwrap_or(2 * PROCESS_MB)),
        };
        jobs.push(submit_array(dir, &plan.recipe, array, request, jobs.last())?);
    }
    Ok(Submission { dir: dir.to_owned(), jobs })
}

/// Cancels every job of `submission` still in the queue.
pub fn cancel(submission: &Submission) -> Result<(), SlurmError> {
    let ids: Vec<&str> = submission.jobs.iter().map(|j| j.job_id.as_str()).collect();
    if ids.is_empty() {
        return Ok(());
    }
    output(Command::new("scancel").args(ids)).map(drop)
}

fn work_command(worker: &Worker, cpus: u32) -> String {
    let size = format!("--unit-size {}s", worker.unit_size.seconds);
    format!(
        "{} work {} --unit \"$task\" {size}{}",
        quote_path(&worker.binary),
        quote_path(&worker.recipe),
        common_args(worker, cpus)
    )
}

fn export_command(worker: &Worker, cpus: u32) -> String {
    format!("{} run {} \"$task\"{}", quote_path(&worker.binary), quote_path(&worker.recipe), common_args(worker, cpus))
}

/// The caches, the pins and the threads, as every task takes them.
fn common_args(worker: &Worker, cpus: u32) -> String {
    let mut args = format!(
        " --cache-dir {} --cache-url {} --remote-required --jobs {cpus}",
        quote_path(&worker.cache_dir),
        quote(&worker.cache_url)
    );
    if let Some(pins) = &worker.pins {
        let _ = write!(args, " --input-pins {}", quote_path(pins));
    }
    args
}

fn quote_path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

/// An array before it is submitted.
struct Array {
    /// Names its script, its logs and (after the recipe's) the Slurm job.
    name: String,
    what: String,
    tasks: Vec<String>,
    /// The task's command line, with `$task` its entry.
    command: String,
    cpus: u32,
    mem_mb: u64,
}

/// Writes the task script of one array of `recipe` and submits it, after `after`.
fn submit_array(
    dir: &Path,
    recipe: &str,
    array: Array,
    request: &Request,
    after: Option<&ArrayJob>,
) -> Result<ArrayJob, SlurmError> {
    let Array { name, what, tasks, command, cpus, mem_mb } = array;
    let mut script = String::from(
        "#!/bin/bash\n# Written by quantforge run --executor slurm: one task per entry.\nset -eu\ntasks=(\n",
    );
    for task in &tasks {
        let _ = writeln!(script, "  {}", quote(task));
    }
    let _ = writeln!(script, ")\ntask=${{tasks[$SLURM_ARRAY_TASK_ID]}}\nexec {command}");
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).map_err(|source| SlurmError::Write { path: path.clone(), source })?;
    let log_pattern = dir.join(format!("{name}-%A_%a.log"));
    let mut sbatch = Command::new("sbatch");
    let mut range = format!("0-{}", tasks.len() - 1);
    if let Some(k) = request.max_parallel {
        let _ = write!(range, "%{k}");
    }
    sbatch
        .arg("--parsable")
        .arg(format!("--array={range}"))
        .arg(format!("--job-name=quantforge-{}-{name}", safe_name(recipe)))
        .arg(format!("--output={}", log_pattern.display()))
        .arg(format!("--cpus-per-task={cpus}"))
        .arg(format!("--mem={mem_mb}M"));
    for (flag, value) in [("partition", &request.partition), ("account", &request.account), ("time", &request.time)] {
        if let Some(value) = value {
            sbatch.arg(format!("--{flag}={value}"));
        }
    }
    if let Some(after) = after {
        sbatch.arg(format!("--dependency=afterok:{}", after.job_id)).arg("--kill-on-invalid-dep=yes");
    }
    sbatch.args(&request.sbatch_args).arg(&path);
    let printed = output(&mut sbatch)?;
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let job_id = printed.trim().split(';').next().unwrap_or_default().to_owned();
    if job_id.is_empty() || !job_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::JobId { command: describe(&sbatch), output: printed.trim().to_owned() });
    }
    Ok(ArrayJob { job_id, what, tasks, log_pattern, cpus, mem_mb })
}

/// The most CPUs and memory (MiB) of any node in `partition` (all when
/// `None`): a request above them would never start.
fn largest_node(partition: Option<&str>) -> Result<(u32, u64), SlurmError> {
    let mut sinfo = Command::new("sinfo");
    sinfo.args(["--noheader", "--format=%c %m"]);
    if let Some(p) = partition {
        sinfo.arg(format!("--partition={p}"));
    }
    let text = output(&mut sinfo)?;
    let mut largest = (0u32, 0u64);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        // A range such as `16+` is read as its lower bound.
        let number = |f: Option<&str>| f.map(|t| t.trim_end_matches('+')).and_then(|t| t.parse::<u64>().ok());
        if let (Some(cpus), Some(mb)) = (number(fields.next()), number(fields.next())) {
            largest = (largest.0.max(cpus as u32), largest.1.max(mb));
        }
    }
    Ok(largest)
}

/// Runs a Slurm command; its stdout on success.
fn output(command: &mut Command) -> Result<String, SlurmError> {
    let out = command.output().map_err(|source| SlurmError::Spawn { command: describe(command), source })?;
    if !out.status.success() {
        return Err(SlurmError::Command {
            command: describe(command),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Where one submission's scripts and logs go: `CACHE_DIR/slurm/RECIPE-MILLIS`.
pub fn submission_dir(cache_dir: &Path, recipe: &str) -> PathBuf {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    cache_dir.join("slurm").join(format!("{}-{stamp}", safe_name(recipe)))
}

/// `recipe` as part of a file or job name: letters, digits, `-`, `_` and `.` only.
fn safe_name(recipe: &str) -> String {
    recipe.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// `text` as one bash word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_log_names_its_job_and_task() {
        let job = ArrayJob {
            job_id: "42".into(),
            what: String::new(),
            tasks: vec![],
            log_pattern: "/runs/stage0-%A_%a.log".into(),
            cpus: 1,
            mem_mb: 1,
        };
        assert_eq!(job.log(3), Path::new("/runs/stage0-42_3.log"));
    }
}
