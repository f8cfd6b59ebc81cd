//! Work units, CI matrices and the Slurm executor, against the real S3
//! server (`scripts/s3-server.sh start`) and a real single-node Slurm
//! cluster (`scripts/slurm-cluster.sh start`); `.ci/run` starts both.
//!
//! Without them, the tests skip with a message (in CI they fail).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{encoded, files_in, repo, s3_env, unique_url};
use quantforge::files::{Replaces, WriteGuard};
use quantforge::formats::{AtomicOutput, gguf};
use quantforge::model::Endian;
use quantforge::synth::{self, LlamaConfig};

/// One test at a time on the cluster's two CPUs: a test's timing (a task
/// cancelled while it runs) must not depend on another test's jobs.
static CLUSTER: Mutex<()> = Mutex::new(());

/// True when the test cluster answers; otherwise says how to start it.
/// Asked a few times: a controller busy with the last test's jobs may let
/// `sinfo` time out once.
fn slurm_up() -> bool {
    let answers = || {
        Command::new("bash")
            .arg(repo().join("scripts/slurm-cluster.sh"))
            .arg("status")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let up = (0..5).any(|attempt| {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        answers()
    });
    if !up {
        assert!(std::env::var_os("CI").is_none(), "CI must start the Slurm cluster (scripts/slurm-cluster.sh start)");
        eprintln!("skipped: no Slurm cluster; start one with scripts/slurm-cluster.sh start");
    }
    up
}

/// A two-stage recipe: the model decoded to f32 and kept (stage 0), then
/// a ladder quantized from it (stage 1).
const STAGED: &str = r#"
[recipe]
name = "staged"

[input.model]
path = "model.gguf"

[step.base]
op = "dequantize"
from = "model"
type = "f32"
keep = true

[step.q]
op = "quantize"
from = "base"
preset = ["Q8_0", "Q4_K_M", "Q3_K_S"]

[step.out]
op = "export"
from = "q"
path = "out/model-{preset}.gguf"
"#;

/// Estimated work per unit: small enough that the model makes many units.
const UNIT_SIZE: &str = "0.004s";

/// A project directory: the staged recipe over a synthetic model.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let config = LlamaConfig { n_layer: 4, name: "quantforge slurm test".into(), ..LlamaConfig::tiny() };
        let mut model = synth::llama(&config);
        let (metadata, tensors) = (model.metadata.clone(), model.tensors.clone());
        let mut out = AtomicOutput::create(
            &WriteGuard::default().check(&dir.path().join("model.gguf"), Replaces::AnyFile).unwrap(),
        )
        .unwrap();
        gguf::write_gguf(out.writer(), Endian::Little, &metadata, &tensors, &mut model).unwrap();
        out.commit().unwrap();
        std::fs::write(dir.path().join("staged.toml"), STAGED).unwrap();
        Project { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `quantforge ARGS RECIPE` with a cache of its own and the remote.
    fn command(&self, env: &[(String, String)], url: Option<&str>, cache: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.arg(args[0]).arg(self.path("staged.toml")).args(&args[1..]);
        command.arg("--cache-dir").arg(self.path(cache));
        if let Some(url) = url {
            command.arg("--cache-url").arg(url);
        }
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    fn outputs(&self) -> Vec<(String, Vec<u8>)> {
        files_in(&self.path("out"))
    }

    /// What a plain local run writes: the reference for every other way.
    fn local_outputs(&self) -> Vec<(String, Vec<u8>)> {
        let reference = Project::new();
        succeeded(&reference.command(&[], None, "cache", &["run"]).output().unwrap());
        let outputs = reference.outputs();
        assert_eq!(outputs.len(), 3);
        outputs
    }

    fn pending_units(&self, env: &[(String, String)], url: &str, cache: &str) -> serde_json::Value {
        let mut plan = self.command(env, Some(url), cache, &["plan", "--units", "--unit-size", UNIT_SIZE, "--json"]);
        json(&plan.output().unwrap())
    }
}

fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(out: &Output) -> serde_json::Value {
    succeeded(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The controller's records of a job: (task index, state) per task.
fn task_states(job: &str) -> Vec<(Option<u64>, String)> {
    let out = Command::new("scontrol").args(["show", "job", "--oneliner", job]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let field =
                |name: &str| line.split_whitespace().find_map(|f| f.strip_prefix(name)).unwrap_or_default().to_owned();
            (field("ArrayTaskId=").parse().ok(), field("JobState="))
        })
        .collect()
}

fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn job_ids(run: &serde_json::Value) -> Vec<(String, usize)> {
    run["submission"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["job_id"].as_str().unwrap().to_owned(), j["tasks"].as_array().unwrap().len()))
        .collect()
}

#[test]
fn units_are_stable_cut_in_stages_and_refused_when_stale() {
    let project = Project::new();
    let plan = |size: &str| {
        json(
            &project.command(&[], None, "cache", &["plan", "--units", "--unit-size", size, "--json"]).output().unwrap(),
        )
    };
    let units = plan(UNIT_SIZE);
    let list = units["units"].as_array().unwrap();
    assert!(list.len() >= 8, "{units:#}");
    assert_eq!(units["stages"], 2);
    assert_eq!(units["exports"].as_array().unwrap().len(), 3);
    assert_eq!(plan(UNIT_SIZE), units, "the same recipe and inputs cut the same units");
    let stages: Vec<u64> = list.iter().map(|u| u["stage"].as_u64().unwrap()).collect();
    assert!(stages.windows(2).all(|w| w[0] <= w[1]) && stages.contains(&0) && stages.contains(&1), "{stages:?}");

    // A unit planned at another size, or before an input changed, is refused by name.
    let url = format!("file://{}", project.path("remote").display());
    let id = list[1]["id"].as_str().unwrap();
    let work = |size: &str| {
        project.command(&[], Some(&url), "work-cache", &["work", "--unit", id, "--unit-size", size]).output().unwrap()
    };
    let out = work("1s");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("unit `{id}`")) && stderr.contains("--unit-size"), "{stderr}");
    succeeded(&work(UNIT_SIZE));
    // Without a shared cache, work has nowhere to put its results.
    let out = project.command(&[], None, "cache", &["work", "--unit", id]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cache-url"));
}

/// Four matrix jobs with caches of their own meet in the bucket; the final
/// run encodes nothing and writes what a local run writes.
#[test]
fn a_ci_matrix_of_work_jobs_equals_a_local_run() {
    let Some(env) = s3_env() else { return };
    let url = unique_url(&env, "matrix");
    let project = Project::new();
    let matrix = json(
        &project
            .command(&env, Some(&url), "planner", &["plan", "--units", "--unit-size", UNIT_SIZE, "--matrix", "4"])
            .output()
            .unwrap(),
    );
    let jobs = matrix["include"].as_array().unwrap();
    assert_eq!(jobs.len(), 4, "{matrix:#}");
    let workers: Vec<_> = jobs
        .iter()
        .map(|job| {
            let index = job["index"].as_u64().unwrap();
            let units: Vec<&str> = job["units"].as_array().unwrap().iter().map(|u| u.as_str().unwrap()).collect();
            let cache = format!("job-{index}");
            let unit_list = units.join(",");
            let args = ["work", "--unit", unit_list.as_str(), "--unit-size", UNIT_SIZE];
            project
                .command(&env, Some(&url), &cache, &args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in workers {
        succeeded(&worker.wait_with_output().unwrap());
    }
    assert_eq!(project.pending_units(&env, &url, "check")["units"], serde_json::json!([]));
    let report = json(&project.command(&env, Some(&url), "final", &["run", "--json"]).output().unwrap());
    assert_eq!(encoded(&report), 0, "{report:#}");
    assert_eq!(project.outputs(), project.local_outputs());
}

/// The ladder through Slurm equals a local run, each unit its own task.
#[test]
fn a_recipe_through_slurm_equals_a_local_run() {
    let Some(env) = s3_env() else { return };
    if !slurm_up() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let url = unique_url(&env, "slurm");
    let project = Project::new();
    let args = ["run", "--executor", "slurm", "--wait", "--json", "--unit-size", UNIT_SIZE, "--cpus-per-task", "1"];
    let run = json(&project.command(&env, Some(&url), "cache", &args).output().unwrap());
    let units = run["plan"]["units"].as_array().unwrap().len();
    assert!(units >= 8, "{run:#}");
    let jobs = job_ids(&run);
    assert_eq!(jobs.len(), 3, "two stages of units and the exports: {run:#}");
    assert_eq!(jobs.iter().map(|(_, n)| n).sum::<usize>(), units + 3);
    for (job, tasks) in &jobs {
        let states = task_states(job);
        assert_eq!(states.len(), *tasks, "one controller record per task: {states:?}");
        assert!(states.iter().all(|(task, state)| task.is_some() && state == "COMPLETED"), "{states:?}");
    }
    assert_eq!(project.outputs(), project.local_outputs());
    // Nothing is left, so nothing is submitted.
    let again = project.command(&env, Some(&url), "cache", &args[..args.len() - 2]).output().unwrap();
    succeeded(&again);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing submitted"));
}

/// The README's quickstart through Slurm writes what it writes locally.
#[test]
fn the_quickstart_through_slurm_equals_a_local_run() {
    let Some(env) = s3_env() else { return };
    if !slurm_up() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let url = unique_url(&env, "quickstart");
    // The recipe names its model as `../tests/data/tiny-llama.gguf`.
    let tree = |dir: &Path| {
        std::fs::create_dir_all(dir.join("recipes")).unwrap();
        std::fs::create_dir_all(dir.join("tests/data")).unwrap();
        std::fs::copy(repo().join("recipes/quickstart.toml"), dir.join("recipes/quickstart.toml")).unwrap();
        std::fs::copy(common::tiny_model(), dir.join("tests/data/tiny-llama.gguf")).unwrap();
        dir.join("recipes/quickstart.toml")
    };
    let outputs = |dir: &Path| files_in(&dir.join("recipes/out"));
    let (local, distributed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let quantforge = |recipe: &Path, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.arg("run").arg(recipe).args(args).arg("--cache-dir").arg(recipe.with_file_name("cache"));
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command.output().unwrap()
    };
    succeeded(&quantforge(&tree(local.path()), &[]));
    let args = ["--executor", "slurm", "--wait", "--json", "--cpus-per-task", "1", "--cache-url", &url];
    let run = json(&quantforge(&tree(distributed.path()), &args));
    for (job, tasks) in job_ids(&run) {
        let states = task_states(&job);
        assert_eq!(states.len(), tasks, "one controller record per task: {states:?}");
        assert!(states.iter().all(|(_, state)| state == "COMPLETED"), "{states:?}");
    }
    let written = outputs(distributed.path());
    assert_eq!(written.len(), 3);
    assert_eq!(written, outputs(local.path()));
}

/// A cancelled array, resubmitted, computes only the units still missing.
#[test]
fn a_cancelled_run_resumes_with_the_missing_units_only() {
    let Some(env) = s3_env() else { return };
    if !slurm_up() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let url = unique_url(&env, "scancel");
    let project = Project::new();
    let submit = ["run", "--executor", "slurm", "--json", "--unit-size", UNIT_SIZE, "--cpus-per-task", "1"];
    let first = json(
        &project
            .command(&env, Some(&url), "cache", &[&submit[..], &["--max-parallel", "1"]].concat())
            .output()
            .unwrap(),
    );
    let total = first["plan"]["units"].as_array().unwrap().len();
    let jobs = job_ids(&first);
    let (stage0, _) = &jobs[0];
    until("a first unit to finish", Duration::from_secs(120), || {
        task_states(stage0).iter().any(|(_, state)| state == "COMPLETED")
    });
    let ids: Vec<&str> = jobs.iter().map(|(id, _)| id.as_str()).collect();
    succeeded(&Command::new("scancel").args(&ids).output().unwrap());
    until("the cancelled jobs to leave the queue", Duration::from_secs(60), || {
        let out = Command::new("squeue").args(["--noheader", "--jobs", &ids.join(",")]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().is_empty()
    });
    let missing = project.pending_units(&env, &url, "cache")["units"].as_array().unwrap().len();
    assert!(0 < missing && missing < total, "{missing} of {total} units missing after the cancel");
    assert!(project.outputs().is_empty(), "nothing exported by a cancelled run");

    let second =
        json(&project.command(&env, Some(&url), "cache", &[&submit[..], &["--wait"]].concat()).output().unwrap());
    assert_eq!(second["plan"]["units"].as_array().unwrap().len(), missing, "only the missing units are resubmitted");
    assert_eq!(project.outputs(), project.local_outputs());
}

/// A unit that cannot read its input fails the run, naming the task, its
/// log and the cause; no export is written.
#[test]
fn a_failing_unit_fails_the_run_by_name() {
    let Some(env) = s3_env() else { return };
    if !slurm_up() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let url = unique_url(&env, "failing");
    let project = Project::new();
    // The tasks start ten seconds after submission (a loaded CI machine may
    // take a few to print the line this waits for); by then the input is gone.
    let args = [
        "run",
        "--executor",
        "slurm",
        "--wait",
        "--unit-size",
        UNIT_SIZE,
        "--cpus-per-task",
        "1",
        "--sbatch-arg=--begin=now+10",
    ];
    let mut child = project
        .command(&env, Some(&url), "cache", &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 && !line.contains("scripts and logs") {}
    std::fs::remove_file(project.path("model.gguf")).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Slurm task(s) failed; nothing was exported"), "{stderr}");
    assert!(stderr.contains("unit 0-") && stderr.contains("FAILED"), "{stderr}");
    assert!(stderr.contains("input `model`") && stderr.contains("no such file"), "{stderr}");
    let log = stderr.lines().find_map(|l| l.trim().strip_prefix("log: ")).expect("a log path");
    assert!(Path::new(log).exists(), "{log}");
    assert!(project.outputs().is_empty());
}
