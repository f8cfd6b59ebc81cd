//! No flag writes over a user's file: every path a command writes (an
//! export, `--report`, `-o`, a lock, an attestation, a pack or what it
//! unpacks, device shards, a chart) is refused when it is an input, the
//! recipe, its lock, inside the cache, another output, a special file, a
//! link, or (for the files that are not models) a file of another kind —
//! and the file that was there is left byte for byte as it was.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::{Workspace, fails_with, run_recipe};
use crate::common;

/// Every file under `dir` (links and FIFOs by what they are), with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_dir() {
                stack.push(path);
            } else {
                let bytes = kind.is_file().then(|| std::fs::read(&path).unwrap());
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The paths a careless flag could name: what the recipe reads, writes and
/// keeps, and things that are not regular files.
fn bad_targets(ws: &Workspace, outside: &Path) -> Vec<(PathBuf, &'static str)> {
    std::fs::write(ws.path("notes.txt"), "the user's notes\n").unwrap();
    std::fs::write(outside.join("elsewhere.html"), "<!DOCTYPE html>\n").unwrap();
    std::os::unix::fs::symlink(outside.join("elsewhere.html"), ws.path("link.html")).unwrap();
    mkfifo(&ws.path("fifo.html"));
    std::fs::create_dir_all(ws.path("a-directory.html")).unwrap();
    vec![
        (ws.path("tiny.gguf"), "is an input of the run"),
        (ws.path("recipe.toml"), "is the recipe itself"),
        (ws.path("recipe.lock"), "is the recipe's lock file"),
        (ws.path("cache/CACHEDIR.TAG"), "is inside the cache"),
        (ws.path("cache/new.html"), "is inside the cache"),
        (ws.path("out/tiny-Q8_0.gguf"), "is written by export `out[preset=Q8_0]`"),
        (ws.path("notes.txt"), "exists and is not an HTML page"),
        (ws.path("link.html"), "is a symbolic link"),
        (ws.path("fifo.html"), "is a FIFO"),
        (ws.path("a-directory.html"), "is a directory"),
    ]
}

#[test]
fn a_report_page_never_replaces_what_is_not_its_own() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let targets = bad_targets(&ws, outside.path());
    let (before, outside_before) = (snapshot(ws.dir.path()), snapshot(outside.path()));
    let recipe = ws.path("recipe.toml");
    let cache = ws.path("cache");
    for command in ["run", "plan"] {
        for (target, problem) in &targets {
            let output = common::quantforge(&[
                OsStr::new(command),
                recipe.as_os_str(),
                OsStr::new("--report"),
                target.as_os_str(),
                OsStr::new("--cache-dir"),
                cache.as_os_str(),
            ]);
            fails_with(&output, problem);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("report"), "{command} --report {}: {stderr}", target.display());
        }
    }
    // `run`'s cache entries may be touched; the files are as they were.
    let unchanged = |a: &[(PathBuf, Option<Vec<u8>>)], b: &[(PathBuf, Option<Vec<u8>>)]| {
        let outside_cache = |(p, _): &&(PathBuf, Option<Vec<u8>>)| !p.starts_with(&cache);
        a.iter().filter(outside_cache).eq(b.iter().filter(outside_cache))
    };
    assert!(unchanged(&before, &snapshot(ws.dir.path())), "a refused report changed a file");
    assert_eq!(outside_before, snapshot(outside.path()), "a link was followed");
    // A new page, and a page over the page: both fine.
    let page = ws.path("report.html");
    for _ in 0..2 {
        let output = common::quantforge(&[
            OsStr::new("run"),
            recipe.as_os_str(),
            OsStr::new("--report"),
            page.as_os_str(),
            OsStr::new("--cache-dir"),
            cache.as_os_str(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    assert!(std::fs::read(&page).unwrap().starts_with(b"<!DOCTYPE html>"));
}

#[test]
fn an_export_never_lands_on_the_lock_or_another_exports_attestation() {
    let ws = tempfile::tempdir().unwrap();
    let tiny = "[input.tiny]\npath = \"tiny.gguf\"\n";
    // Once with a lock on disk and once before the first run wrote one.
    for lock_exists in [false, true] {
        if lock_exists {
            let first = run_recipe(
                ws.path(),
                &format!("{tiny}[step.o]\nop = \"export\"\nfrom = \"tiny\"\npath = \"o.gguf\"\n"),
            );
            assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
        }
        let lock_before = std::fs::read(ws.path().join("recipe.lock")).ok();
        for path in ["recipe.lock", "./recipe.lock"] {
            let recipe = format!("{tiny}[step.o]\nop = \"export\"\nfrom = \"tiny\"\npath = \"{path}\"\n");
            fails_with(&run_recipe(ws.path(), &recipe), "is the recipe's lock file; refusing to overwrite it");
            assert_eq!(std::fs::read(ws.path().join("recipe.lock")).ok(), lock_before, "{path}");
        }
    }
    let attested = format!(
        "{tiny}[step.a]\nop = \"export\"\nfrom = \"tiny\"\npath = \"a.gguf\"\nattest = true\n\n\
         [step.b]\nop = \"export\"\nfrom = \"tiny\"\npath = \"a.gguf.intoto.json\"\n"
    );
    fails_with(&run_recipe(ws.path(), &attested), "writes there too");
    assert!(!ws.path().join("a.gguf").exists(), "nothing ran");
}

#[test]
fn a_lock_replaces_only_a_lock() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("recipe.lock"), b"GGUF\x03\0\0\0 the user's model named like a lock").unwrap();
    let output = run_recipe(ws.path(), &super::export_to(&["o.gguf"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the exports are written: {stderr}");
    assert!(stderr.contains("is not a quantforge lock file; refusing to replace it"), "{stderr}");
    assert!(std::fs::read(ws.path().join("recipe.lock")).unwrap().starts_with(b"GGUF"));
    // A lock of ours is replaced as before.
    std::fs::remove_file(ws.path().join("recipe.lock")).unwrap();
    assert!(run_recipe(ws.path(), &super::export_to(&["o.gguf", "p.gguf"])).status.success());
    assert!(run_recipe(ws.path(), &super::export_to(&["o.gguf"])).status.success());
    let lock = std::fs::read_to_string(ws.path().join("recipe.lock")).unwrap();
    assert!(lock.starts_with("# Written by `quantforge run`") && !lock.contains("p.gguf"), "{lock}");
}

/// Runs `args` (in `dir`), which must fail with `problem`, leaving every
/// file in `dir` as it was.
fn refused(dir: &Path, args: &[&dyn AsRef<OsStr>], problem: &str) {
    let before = snapshot(dir);
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let output = common::quantforge_in(dir, &args);
    fails_with(&output, problem);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(before, snapshot(dir), "{args:?} changed a file");
}

#[test]
fn command_line_outputs_never_replace_their_inputs() {
    let ws = Workspace::new();
    let d = ws.dir.path();
    let q8 = "out/tiny-Q8_0.gguf";
    std::fs::hard_link(ws.path("tiny.gguf"), ws.path("hard-link.gguf")).unwrap();
    std::os::unix::fs::symlink("tiny.gguf", ws.path("soft-link.gguf")).unwrap();
    let input = "is an input of the run; refusing to overwrite it";
    // One-shot commands: the input under its own name, a hard link, `..`.
    refused(d, &[&"quantize", &"tiny.gguf", &"tiny.gguf", &"Q8_0"], input);
    refused(d, &[&"quantize", &"tiny.gguf", &"hard-link.gguf", &"Q8_0"], input);
    refused(d, &[&"quantize", &"tiny.gguf", &"out/../tiny.gguf", &"Q8_0"], input);
    refused(d, &[&"edit", &"tiny.gguf", &"hard-link.gguf"], input);
    // Files a command reads besides its model: a --tensor-type-file, under any name.
    std::fs::write(ws.path("types.txt"), "output.weight=q8_0\n").unwrap();
    std::fs::hard_link(ws.path("types.txt"), ws.path("types-link.txt")).unwrap();
    for target in ["types.txt", "types-link.txt", "out/../types.txt"] {
        let args: [&dyn AsRef<OsStr>; 6] =
            [&"quantize", &"--tensor-type-file", &"types.txt", &"tiny.gguf", &target, &"Q8_0"];
        refused(d, &args, "is a --tensor-type-file");
    }
    refused(d, &[&"dequantize", &q8, &"soft-link.gguf"], "is a symbolic link");
    // `report -o`: never a document it reads, never a file that is not a page.
    let document = common::quantforge_in(d, &[OsStr::new("plan"), OsStr::new("recipe.toml"), OsStr::new("--json")]);
    std::fs::write(ws.path("plan.json"), &document.stdout).unwrap();
    refused(d, &[&"report", &"plan.json", &"-o", &"plan.json"], "one of the documents the page is drawn from");
    refused(d, &[&"report", &"plan.json", &"-o", &"tiny.gguf"], "exists and is not an HTML page");
    // `attest -o`: not the recipe, its lock, an input or an export.
    for (target, problem) in [
        ("recipe.toml", "is the recipe itself"),
        ("recipe.lock", "is the recipe's lock file"),
        ("tiny.gguf", "is an input of the run"),
        ("out/tiny-Q4_K_M.gguf", "is written by export"),
        ("notes.txt", "exists and is not a JSON document"),
    ] {
        std::fs::write(ws.path("notes.txt"), "notes\n").unwrap();
        refused(d, &[&"attest", &q8, &"--recipe", &"recipe.toml", &"-o", &target], problem);
    }
    // `pack -o`: none of the files it packs; `unpack`: never the pack itself.
    for (target, problem) in
        [("tiny.gguf", "is the base model"), (q8, "is a file of the ladder"), ("hard-link.gguf", "is the base model")]
    {
        refused(d, &[&"pack", &"--base", &"tiny.gguf", &q8, &"-o", &target], problem);
    }
    std::fs::create_dir(ws.path("u")).unwrap();
    let packed = common::quantforge_in(d, &["pack", "--base", "tiny.gguf", q8, "-o", "u/tiny.gguf"].map(OsStr::new));
    assert!(packed.status.success(), "{}", String::from_utf8_lossy(&packed.stderr));
    refused(d, &[&"unpack", &"u/tiny.gguf", &"u"], "is the pack being unpacked");
    // Device shards: never the model they cut, nor a shard they merge.
    std::fs::hard_link(ws.path("tiny.gguf"), ws.path("cut-dev0-of-1.gguf")).unwrap();
    refused(d, &[&"shard-devices", &"tiny.gguf", &"cut", &"--devices", &"1"], "is the model being sharded");
    std::fs::remove_file(ws.path("cut-dev0-of-1.gguf")).unwrap();
    let sharded = common::quantforge_in(d, &["shard-devices", "tiny.gguf", "dev", "--devices", "2"].map(OsStr::new));
    assert!(sharded.status.success(), "{}", String::from_utf8_lossy(&sharded.stderr));
    // Its prefix may name directories that do not exist yet.
    for prefix in ["new/dev", "new/deeper/still/dev"] {
        let made = common::quantforge_in(d, &["shard-devices", "tiny.gguf", prefix, "--devices", "2"].map(OsStr::new));
        assert!(made.status.success(), "{prefix}: {}", String::from_utf8_lossy(&made.stderr));
        for j in 0..2 {
            let shard = ws.path(&format!("{prefix}-dev{j}-of-2.gguf"));
            assert_eq!(
                std::fs::read(&shard).unwrap(),
                std::fs::read(ws.path(&format!("dev-dev{j}-of-2.gguf"))).unwrap()
            );
        }
    }
    refused(d, &[&"merge", &"dev-dev0-of-2.gguf", &"dev-dev1-of-2.gguf"], "is one of the shards being merged");
    // A chart: never the model it is drawn from.
    refused(
        d,
        &[&"plan-quant", &"tiny.gguf", &"--target-bpw", &"5", &"--svg", &"tiny.gguf"],
        "the model being planned",
    );
    refused(d, &[&"plan-quant", &"tiny.gguf", &"--target-bpw", &"5", &"--svg", &"notes.txt"], "is not an SVG chart");
}
