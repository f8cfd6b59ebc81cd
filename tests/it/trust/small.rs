//! The smaller promises: a non-file where a blob belongs is quarantined like
//! a bad blob (and `verify --repair` and `gc` clear it), output directories
//! are made, numeric flags refuse what is not a number of their kind,
//! errors name their flag or file, and what killed runs left behind is
//! swept by the next run.

use std::ffi::OsStr;
use std::path::Path;

use super::{OUTPUTS, Workspace, fails_with, incidents};
use crate::common;

#[test]
fn a_directory_link_or_fifo_where_a_blob_belongs_is_quarantined() {
    for kind in ["directory", "link", "fifo"] {
        let ws = Workspace::new();
        let blobs = ws.store_files("blobs");
        for blob in blobs.iter().step_by(3) {
            std::fs::remove_file(blob).unwrap();
            match kind {
                "directory" => {
                    std::fs::create_dir(blob).unwrap();
                    std::fs::write(blob.join("inside"), b"x").unwrap();
                }
                "link" => std::os::unix::fs::symlink("/etc/hostname", blob).unwrap(),
                _ => {
                    let c = std::ffi::CString::new(blob.as_os_str().as_encoded_bytes()).unwrap();
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
            }
        }
        let report = ws.rerun_from_cache(kind).unwrap_or_else(|| panic!("{kind}: the run failed"));
        assert!(!incidents(&report).is_empty(), "{kind}: not reported");
        // The next run needs nothing more; the cache checks clean.
        assert!(ws.rerun_from_cache(&format!("{kind}, again")).is_some());
        let verify = ws.verify();
        assert!(verify.status.success(), "{kind}: {}", String::from_utf8_lossy(&verify.stderr));
    }
    // Placed after a run and left to maintenance: `verify --repair`, then `gc`.
    let ws = Workspace::new();
    let blob = &ws.store_files("blobs")[0];
    std::fs::remove_file(blob).unwrap();
    std::fs::create_dir(blob).unwrap();
    std::fs::write(blob.join("inside"), b"x").unwrap();
    let cache = ws.path("cache");
    let run = |args: &[&str]| {
        let mut args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        args.extend([OsStr::new("--cache-dir"), cache.as_os_str()]);
        common::quantforge(&args)
    };
    assert!(run(&["cache", "verify", "--repair"]).status.success());
    assert!(!blob.exists(), "verify --repair left the directory");
    assert!(run(&["cache", "gc"]).status.success());
    assert_eq!(std::fs::read_dir(cache.join("quarantine")).unwrap().count(), 0, "gc left the quarantine");
    assert!(ws.rerun_from_cache("repaired").is_some());
}

#[test]
fn numeric_flags_refuse_what_is_not_their_kind_of_number() {
    let ws = Workspace::new();
    let (tiny, recipe) = (ws.path("tiny.gguf"), ws.path("recipe.toml"));
    let t = tiny.as_os_str();
    for bpw in ["nan", "NaN", "inf", "-inf", "-1", "0", "1e308", "32.5", "five"] {
        let flag = format!("--target-bpw={bpw}");
        let output = common::quantforge(&[OsStr::new("plan-quant"), t, OsStr::new(&flag)]);
        fails_with(&output, "--target-bpw");
    }
    for command in ["run", "plan", "work"] {
        let mut args = vec![OsStr::new(command), recipe.as_os_str(), OsStr::new("--jobs"), OsStr::new("0")];
        if command == "work" {
            args.extend(["--unit", "0-x"].map(OsStr::new));
        }
        let output = common::quantforge(&args);
        // `plan` takes no --jobs; the others refuse 0 as a recipe's `jobs` does.
        let needle = if command == "plan" { "--jobs" } else { "must be at least 1" };
        fails_with(&output, needle);
    }
    let out = ws.path("d.gguf");
    for command in ["dequantize", "convert"] {
        let args = [OsStr::new(command), t, out.as_os_str(), OsStr::new("--threads"), OsStr::new("0")];
        fails_with(&common::quantforge(&args), "must be at least 1");
    }
    std::fs::write(&recipe, "[recipe]\njobs = 0\n[input.tiny]\npath = \"tiny.gguf\"\n").unwrap();
    fails_with(&common::quantforge(&[OsStr::new("run"), recipe.as_os_str()]), "`jobs` must be a whole number");
    // llama-quantize's NTHREADS 0 is "all cores", as there.
    let q = ws.path("q.gguf");
    let output = common::quantforge(&[OsStr::new("quantize"), t, q.as_os_str(), OsStr::new("Q8_0"), OsStr::new("0")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn errors_name_their_flag_or_file() {
    let ws = Workspace::new();
    let d = ws.dir.path();
    let cases: [(&[&str], &str); 6] = [
        (&["plan-devices", "tiny.gguf", "--devices", "0"], "--devices: 0 devices"),
        (&["plan-devices", "tiny.gguf", "--devices", "2", "--split", "1"], "--devices, --split: 1 weights"),
        (&["unpack", "nope.pack", "u"], "nope.pack: no such file or directory"),
        (&["verify", OUTPUTS[0], "--attestation", "nope.json"], "nope.json: no such file or directory"),
        (&["quantize", "--tensor-type-file", "nope.txt", "tiny.gguf", "q.gguf", "Q8_0"], "--tensor-type-file nope.txt"),
        (&["assemble", "tiny.gguf", "tiny.gguf", "-o", "b.gguf"], "cannot assemble tiny.gguf, tiny.gguf"),
    ];
    for (args, needle) in cases {
        let output = common::quantforge_in(d, &args.iter().map(OsStr::new).collect::<Vec<_>>());
        fails_with(&output, needle);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("os error"), "{args:?}: {stderr}");
    }
    let output = common::quantforge_in(d, &["plan-quant", "tiny.gguf", "--target-size", "1"].map(OsStr::new));
    fails_with(&output, "cannot plan tiny.gguf: a budget of 1 bytes");
    // A write that fails names what it was writing (here: under a file).
    std::fs::write(ws.path("afile"), "x").unwrap();
    let plan = common::quantforge_in(d, &["plan", "recipe.toml", "--json"].map(OsStr::new));
    std::fs::write(ws.path("plan.json"), &plan.stdout).unwrap();
    let writes: [&[&str]; 3] = [
        &["plan-quant", "tiny.gguf", "--target-bpw", "5", "--svg", "afile/c.svg"],
        &["report", "plan.json", "-o", "afile/r.html"],
        &["attest", OUTPUTS[0], "--recipe", "recipe.toml", "-o", "afile/a.json"],
    ];
    for args in writes {
        let output = common::quantforge_in(d, &args.iter().map(OsStr::new).collect::<Vec<_>>());
        fails_with(&output, &format!("cannot write {}", args[args.len() - 1]));
    }
}

/// A pid no process has: a child's, after it is reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn touch(path: &Path) {
    std::fs::write(path, vec![0u8; 4096]).unwrap();
}

#[test]
fn what_killed_runs_left_is_swept_by_the_next_run() {
    let ws = Workspace::new();
    let (dead, alive) = (dead_pid(), std::process::id());
    let tag = quantforge::files::process_tag();
    let tagged = |pid: u32| tag.replacen(&format!("p{}@", std::process::id()), &format!("p{pid}@"), 1);
    let leftovers = [
        ws.path(&format!("cache/tmp/blob-{}-aB3dE9", tagged(dead))),
        ws.path(&format!("cache/tmp/entry-{}-Zz9y8x", tagged(dead))),
        ws.path(&format!("out/.quantforge-{dead}-xYz123.tmp")),
        ws.path(&format!(".quantforge-{dead}-verify.tmp")),
    ];
    let kept = [
        ws.path(&format!("cache/tmp/blob-{}-live01", tagged(alive))),
        ws.path(&format!("out/.quantforge-{alive}-live02.tmp")),
        // Another host's: its writer may be alive there.
        ws.path(&format!("cache/tmp/blob-p{dead}@another_host-xx1")),
    ];
    for file in leftovers.iter().chain(&kept).filter(|f| !f.ends_with(format!(".quantforge-{dead}-verify.tmp"))) {
        touch(file);
    }
    // A scratch directory of a killed `verify`, with a model in it.
    let scratch = &leftovers[3];
    std::fs::create_dir(scratch).unwrap();
    touch(&scratch.join("tiny-Q8_0.gguf"));
    // An up-to-date run writes no output, and still sweeps.
    let report = ws.run();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    for file in &leftovers {
        assert!(!file.exists(), "{} was left", file.display());
    }
    for file in &kept {
        assert!(file.exists(), "{} was removed", file.display());
    }
}
