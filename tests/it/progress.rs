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

/// Two slow exports of different sources (IQ2_XS of the tiny model, and of
/// a Q8_0 file made from it), one at a time: the first is complete, its
/// tensors kept, while the second still encodes. (A ladder's exports fill
/// each other as they encode, so they finish together.)
const TWO_SLOW_EXPORTS: &str = r#"
[recipe]
name = "slow"
jobs = 1

[input.tiny]
path = "TINY"

[input.q8]
path = "Q8"

[input.matrix]
path = "MATRIX"

[step.direct]
op = "quantize"
from = "tiny"
preset = "IQ2_XS"
imatrix = "matrix"

[step.requantized]
op = "quantize"
from = "q8"
preset = "IQ2_XS"
imatrix = "matrix"
allow_requantize = true

[step.a]
op = "export"
from = "direct"
path = "out-a.gguf"

[step.b]
op = "export"
from = "requantized"
path = "out-b.gguf"
"#;

#[test]
fn ctrl_c_says_what_was_kept_and_the_rerun_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = common::repo().join("tests/data/imatrix/tiny-llama.imatrix.gguf");
    let q8 = dir.path().join("q8.gguf");
    let os = std::ffi::OsStr::new;
    common::stdout_of_success(common::quantforge(&[
        os("quantize"),
        common::tiny_model().as_os_str(),
        q8.as_os_str(),
        os("Q8_0"),
    ]));
    let text = TWO_SLOW_EXPORTS
        .replace("TINY", &common::tiny_model().display().to_string())
        .replace("Q8", &q8.display().to_string())
        .replace("MATRIX", &matrix.display().to_string());
    let recipe = dir.path().join("slow.toml");
    std::fs::write(&recipe, text).unwrap();
    let run = |cache: &str| -> serde_json::Value {
        let cache = dir.path().join(cache);
        let args = [os("run"), os("--json"), recipe.as_os_str(), os("--cache-dir"), cache.as_os_str()];
        serde_json::from_str(&common::stdout_of_success(common::quantforge(&args))).unwrap()
    };
    let outputs = || -> Vec<(PathBuf, Vec<u8>)> {
        let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("out-"))
            .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
            .collect();
        found.sort();
        found
    };
    let encoded_cold = run("cold-cache")["totals"]["tensors_encoded"].as_u64().unwrap();
    let made = outputs();
    assert_eq!(made.len(), 2);
    for (path, _) in &made {
        std::fs::remove_file(path).unwrap();
    }

    let child = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args([std::ffi::OsStr::new("run"), recipe.as_os_str()])
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
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
    // What is there is whole (nothing half-written); the rest comes with
    // the rerun, which encodes none of what was kept.
    let interrupted = outputs();
    assert!(interrupted.len() < made.len(), "interrupted before the last output: {stderr}");
    assert!(interrupted.iter().all(|file| made.contains(file)), "an output was half-written");
    let resumed = run("cache");
    assert_eq!(outputs(), made);
    let encoded = resumed["totals"]["tensors_encoded"].as_u64().unwrap();
    assert!(encoded + kept <= encoded_cold, "the rerun took the {kept} kept tensors from the cache: {resumed:#}");
}
