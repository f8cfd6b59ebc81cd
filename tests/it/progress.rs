//! Progress that tells the truth (issue 44, item 10): an export's bar fits
//! an 80-column terminal on one line and moves by bytes; Ctrl-C says what
//! was kept and how to resume, and the rerun resumes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A slow enough job on the tiny model (IQ2_XS with its importance matrix:
/// seconds in a debug build) to draw bars and to be interrupted.
fn slow_quantize(dir: &Path) -> Vec<String> {
    let matrix = common::repo().join("tests/data/imatrix/tiny-llama.imatrix.gguf");
    let cache = dir.join("cache");
    let args = [
        "quantize".into(),
        common::tiny_model().display().to_string(),
        dir.join("out.gguf").display().to_string(),
        "IQ2_XS".into(),
        "--imatrix".into(),
        matrix.display().to_string(),
        "--cache-dir".into(),
        cache.display().to_string(),
    ];
    args.to_vec()
}

/// What a terminal shows of `raw`: escape sequences dropped, each line as
/// drawn between carriage returns and newlines.
fn drawn_lines(raw: &str) -> Vec<String> {
    let escape = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").unwrap();
    escape.replace_all(raw, "").split(['\r', '\n']).filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

#[test]
fn an_exports_bar_fits_80_columns_and_moves_by_bytes() {
    if Command::new("script").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI must have script(1) (util-linux)");
        return eprintln!("skipped: no script(1) to give the command a terminal");
    }
    let dir = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_quantforge");
    let command = format!("stty cols 80 rows 24; {binary} {}", slow_quantize(dir.path()).join(" "));
    let out = Command::new("script").args(["-qfec", &command, "/dev/null"]).output().unwrap();
    let raw = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{raw}");
    let bars: Vec<String> = drawn_lines(&raw).into_iter().filter(|l| l.starts_with("export out.gguf")).collect();
    assert!(bars.len() >= 2, "the bar was drawn as it moved: {raw}");
    for bar in &bars {
        assert!(bar.chars().count() <= 80, "wider than the terminal: {bar:?}");
    }
    // Bytes written of the total, the last drawing complete.
    let bytes = regex::Regex::new(r"(\d+(?:\.\d+)? [KMG]?i?B)/(\d+(?:\.\d+)? [KMG]?i?B) ").unwrap();
    let written: Vec<(String, String)> = bars
        .iter()
        .map(|b| {
            let c = bytes.captures(b).unwrap_or_else(|| panic!("no bytes in {b:?}"));
            (c[1].to_owned(), c[2].to_owned())
        })
        .collect();
    let distinct: std::collections::HashSet<&String> = written.iter().map(|(done, _)| done).collect();
    assert!(distinct.len() >= 3, "the bar advanced within the run: {bars:?}");
    let (done, total) = written.last().unwrap();
    assert_eq!(done, total, "{bars:?}");
}

fn tensor_entries(cache: &Path) -> usize {
    let dir: PathBuf = cache.join("actions/tensors");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|shard| std::fs::read_dir(shard.path()).map_or(0, |f| f.count()))
        .sum()
}

#[test]
fn ctrl_c_says_what_was_kept_and_the_rerun_resumes() {
    let dir = tempfile::tempdir().unwrap();
    // A ladder of six IQ types: over a second of work, interrupted within
    // milliseconds of its first tensor kept.
    let mut args = slow_quantize(dir.path());
    args[2] = dir.path().join("out-{preset}.gguf").display().to_string();
    args[3] = "IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ1_S,IQ1_M".into();
    let child = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(&args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Interrupted once some tensor is kept, long before the last.
    let started = Instant::now();
    while tensor_entries(&dir.path().join("cache")) == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "no tensor was kept within a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let said = regex::Regex::new(r"interrupted: (\d+) tensors finished in this run are kept in the cache \(").unwrap();
    let kept: u64 = said.captures(&stderr).unwrap_or_else(|| panic!("{stderr}"))[1].parse().unwrap();
    assert!(kept >= 1, "{stderr}");
    assert!(stderr.contains("run the same command again to resume"), "{stderr}");
    let outputs = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("out-"));
    assert_eq!(outputs.count(), 0, "no output half-written");

    let mut json = vec!["--json".to_owned()];
    json.extend(args);
    let json: Vec<&std::ffi::OsStr> = json.iter().map(std::ffi::OsStr::new).collect();
    let report: serde_json::Value =
        serde_json::from_str(&common::stdout_of_success(common::quantforge(&json))).unwrap();
    let reused = report["totals"]["tensors_reused"].as_u64().unwrap();
    assert!(reused >= kept, "the rerun took the {kept} kept tensors from the cache: {report:#}");
}
