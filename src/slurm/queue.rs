//! Following submitted arrays to their end through the controller's records
//! (`scontrol show job`: Slurm's accounting store is optional, so `sacct`
//! is not relied on), with a progress bar, and naming what failed.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{ArrayJob, SlurmError, Submission, cancel, describe};

/// A task that ended without completing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    /// `ARRAYJOB_INDEX`, as squeue and scancel name it.
    pub task: String,
    /// The unit or export it ran.
    pub what: String,
    pub state: String,
    /// The error the task printed, or its exit code when it printed none.
    pub cause: String,
    pub log: PathBuf,
}

/// One record of `scontrol show job --oneliner`.
#[derive(Debug, PartialEq)]
struct TaskRecord {
    /// `None` for the record that stands for an array's pending tasks.
    task: Option<usize>,
    state: String,
    reason: String,
    exit_code: String,
}

/// Waits until every task of `submission` has ended. Any failure cancels
/// what is left (the exports after it could not run) and is returned with
/// its task, cause and log.
pub fn follow(submission: &Submission, progress: bool, poll: Duration) -> Result<(), SlurmError> {
    let total: usize = submission.jobs.iter().map(|j| j.tasks.len()).sum();
    let bar = ProgressBar::with_draw_target(
        Some(total as u64),
        if progress { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() },
    );
    bar.set_style(
        ProgressStyle::with_template("slurm {bar:30} {pos}/{len} tasks {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    loop {
        let (mut done, mut running, mut waiting) = (0, 0, 0);
        let mut failures = Vec::new();
        for job in &submission.jobs {
            let Some(records) = records(&job.job_id)? else {
                // The controller has forgotten the job: it ended long ago.
                // The caller asks the cache what was done.
                done += job.tasks.len();
                continue;
            };
            for record in records {
                match record.state.as_str() {
                    "COMPLETED" => done += 1,
                    "RUNNING" | "COMPLETING" | "CONFIGURING" => running += 1,
                    "PENDING" | "REQUEUED" | "RESIZING" | "SUSPENDED" | "REQUEUE_HOLD" | "REQUEUE_FED" => waiting += 1,
                    // Cancelled because a task it waited for failed: that
                    // task is the one to report.
                    _ if record.reason == "DependencyNeverSatisfied" => {}
                    _ => failures.push(failure(job, &record)),
                }
            }
        }
        bar.set_position(done as u64);
        bar.set_message(format!("({running} running, {waiting} waiting)"));
        if !failures.is_empty() {
            bar.abandon();
            cancel(submission)?;
            return Err(SlurmError::Failed(failures));
        }
        if running + waiting == 0 {
            bar.finish();
            return Ok(());
        }
        std::thread::sleep(poll);
    }
}

/// The controller's records of job `id`, or `None` when it no longer knows it.
fn records(id: &str) -> Result<Option<Vec<TaskRecord>>, SlurmError> {
    let mut command = Command::new("scontrol");
    command.args(["show", "job", "--oneliner", id]);
    let out = command.output().map_err(|source| SlurmError::Spawn { command: describe(&command), source })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("Invalid job id") {
            return Ok(None);
        }
        return Err(SlurmError::Command {
            command: describe(&command),
            status: out.status.to_string(),
            stderr: stderr.trim().to_owned(),
        });
    }
    Ok(Some(parse_records(&String::from_utf8_lossy(&out.stdout))))
}

fn parse_records(text: &str) -> Vec<TaskRecord> {
    text.lines()
        .filter(|line| line.contains("JobState="))
        .map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|f| f.strip_prefix(name).and_then(|f| f.strip_prefix('=')))
                    .unwrap_or_default()
                    .to_owned()
            };
            TaskRecord {
                task: field("ArrayTaskId").parse().ok(),
                state: field("JobState"),
                reason: field("Reason"),
                exit_code: field("ExitCode"),
            }
        })
        .collect()
}

fn failure(job: &ArrayJob, record: &TaskRecord) -> Failure {
    let index = record.task.unwrap_or_default();
    let log = job.log(index);
    let what = job.tasks.get(index).map_or_else(String::new, |t| format!("{} {t}", kind(job)));
    let cause = last_error(&log).unwrap_or_else(|| match record.state.as_str() {
        "CANCELLED" => "cancelled".into(),
        "TIMEOUT" => "it ran out of its --time".into(),
        "OUT_OF_MEMORY" => format!("it ran out of its {} MiB (give --mem)", job.mem_mb),
        _ => format!("exit code {}", record.exit_code),
    });
    Failure { task: format!("{}_{index}", job.job_id), what, state: record.state.clone(), cause, log }
}

fn kind(job: &ArrayJob) -> &'static str {
    if job.what == "exports" { "export" } else { "unit" }
}

/// The last `error:` line a task wrote to its log.
fn last_error(log: &Path) -> Option<String> {
    const TAIL: u64 = 64 << 10;
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines().rev().find_map(|l| l.strip_prefix("error: ")).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_from_scontrol_lines() {
        let text = "JobId=7 ArrayJobId=5 ArrayTaskId=2-3%2 JobName=quantforge-stage0 JobState=PENDING \
                    Reason=Resources ExitCode=0:0\n\
                    JobId=6 ArrayJobId=5 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n\
                    JobId=5 ArrayJobId=5 ArrayTaskId=0 JobState=COMPLETED Reason=None ExitCode=0:0\n";
        let records = parse_records(text);
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].task, None);
        assert_eq!(records[0].state, "PENDING");
        assert_eq!(
            records[1],
            TaskRecord {
                task: Some(1),
                state: "FAILED".into(),
                reason: "NonZeroExitCode".into(),
                exit_code: "1:0".into()
            }
        );
    }

    #[test]
    fn a_failure_says_what_the_task_printed() {
        let dir = tempfile::tempdir().unwrap();
        let job = ArrayJob {
            job_id: "9".into(),
            what: "units stage 0".into(),
            tasks: vec!["0-aaaa".into(), "1-bbbb".into()],
            log_pattern: dir.path().join("stage0-%A_%a.log"),
            cpus: 1,
            mem_mb: 100,
        };
        std::fs::write(dir.path().join("stage0-9_1.log"), "starting\nerror: input `model`: gone\n").unwrap();
        let record = |state: &str| TaskRecord {
            task: Some(1),
            state: state.into(),
            reason: "NonZeroExitCode".into(),
            exit_code: "1:0".into(),
        };
        let f = failure(&job, &record("FAILED"));
        assert_eq!((f.task.as_str(), f.what.as_str(), f.cause.as_str()), ("9_1", "unit 1-bbbb", "input `model`: gone"));
        std::fs::remove_file(dir.path().join("stage0-9_1.log")).unwrap();
        assert_eq!(failure(&job, &record("OUT_OF_MEMORY")).cause, "it ran out of its 100 MiB (give --mem)");
    }
}
