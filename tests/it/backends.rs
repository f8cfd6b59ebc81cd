//! Backends chosen per node: every backend writes the same bytes, the run
//! report names the one that ran, and a backend this machine cannot provide
//! fails the run when it is planned, whatever the cache holds.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use quantforge::codecs::simd::Level;
use serde_json::Value;

fn recipe(backend: &str) -> String {
    format!(
        r#"
[input.tiny]
path = "tiny.gguf"

[step.q]
op = "quantize"
from = "tiny"
preset = ["Q8_0", "Q4_K_M", "IQ4_XS", "Q3_K_S"]
backend = "{backend}"

[step.out]
op = "export"
from = "q"
path = "out/tiny-{{preset}}.gguf"
"#
    )
}

/// Runs `recipe(backend)` in `dir` with its own cache; the report, or the
/// failure's stderr.
fn run(dir: &Path, backend: &str) -> Result<Value, String> {
    if !dir.join("tiny.gguf").exists() {
        std::fs::copy(common::tiny_model(), dir.join("tiny.gguf")).unwrap();
    }
    let path = dir.join("recipe.toml");
    std::fs::write(&path, recipe(backend)).unwrap();
    common::try_run_json(&path, &dir.join("cache"), &[])
}

fn backends_of(report: &Value, op: &str) -> Vec<String> {
    let nodes = report["nodes"].as_array().unwrap();
    nodes.iter().filter(|n| n["op"] == op).map(|n| n["backend"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn every_cpu_level_writes_the_same_files_and_the_report_names_it() {
    let levels: Vec<Level> = Level::ALL.into_iter().filter(|l| l.is_supported()).collect();
    let mut files: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for level in levels {
        let name = format!("cpu-{}", level.name());
        let dir = tempfile::tempdir().unwrap();
        let report = run(dir.path(), &name).unwrap();
        assert!(backends_of(&report, "quantize").iter().all(|b| *b == name), "{report:#}");
        assert!(backends_of(&report, "export").iter().all(|b| *b == name), "{report:#}");
        let bytes = ["Q8_0", "Q4_K_M", "IQ4_XS", "Q3_K_S"]
            .iter()
            .map(|p| std::fs::read(dir.path().join(format!("out/tiny-{p}.gguf"))).unwrap())
            .collect();
        files.push((name, bytes));
    }
    for (name, bytes) in &files[1..] {
        assert!(*bytes == files[0].1, "{name} wrote other bytes than {}", files[0].0);
    }
}

#[test]
fn an_unavailable_backend_fails_the_run_before_any_work_even_when_cached() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), "auto").unwrap();
    // Everything is cached now; asking for CUDA still fails, naming it.
    let message = run(dir.path(), "cuda").unwrap_err();
    assert!(message.contains("step `q`: backend `cuda` is not available"), "{message}");
    if let Some(missing) = Level::ALL.into_iter().find(|l| !l.is_supported()) {
        let message = run(dir.path(), &format!("cpu-{}", missing.name())).unwrap_err();
        assert!(message.contains("this CPU runs"), "{message}");
    }
    // Auto records what it chose.
    let report = run(dir.path(), "auto").unwrap();
    assert!(backends_of(&report, "quantize").iter().all(|b| b.starts_with("cpu-")), "{report:#}");
}

/// `--backend` (or `QUANTFORGE_BACKEND`) is what `auto` steps and one-shot
/// commands run on; a backend this machine lacks is refused naming why.
#[test]
fn the_command_lines_backend_is_what_auto_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
    let path = dir.path().join("recipe.toml");
    std::fs::write(&path, recipe("auto")).unwrap();
    let cache = dir.path().join("cache");
    let run = |backend: &str| {
        common::quantforge(&[
            OsStr::new("--backend"),
            OsStr::new(backend),
            OsStr::new("run"),
            path.as_os_str(),
            OsStr::new("--json"),
            OsStr::new("--cache-dir"),
            cache.as_os_str(),
            OsStr::new("--force"),
        ])
    };
    let output = run("cpu-scalar");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(backends_of(&report, "quantize").iter().all(|b| b == "cpu-scalar"), "{report:#}");
    if quantforge::backend::cuda::devices().is_err() {
        let tiny = dir.path().join("tiny.gguf");
        let output = common::quantforge(&[
            OsStr::new("--backend"),
            OsStr::new("cuda"),
            OsStr::new("quantize"),
            tiny.as_os_str(),
            dir.path().join("q.gguf").as_os_str(),
            OsStr::new("Q8_0"),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains("backend `cuda` is not available: no CUDA driver"),
            "{stderr}"
        );
    }
}
