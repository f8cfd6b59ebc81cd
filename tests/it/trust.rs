//! The trust model end to end: whatever happens to the cache between runs
//! (a flipped byte, an edited or swapped entry, a blob replaced by a link, a
//! stat entry naming another file's hash), a run either writes the reference
//! bytes or fails clearly — never wrong bytes with exit 0. The modules below
//! hold one class each: where the tool may write (`writes`), tampered blobs
//! mid-export (`tamper`), locks and attestations (`provenance`), names on
//! the terminal and in outputs (`names`), and the smaller promises (`small`).

use crate::common;
mod names;
mod provenance;
mod small;
mod tamper;
mod writes;

use std::ffi::OsStr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

const RECIPE: &str = r#"
[input.tiny]
path = "tiny.gguf"

[step.q]
op = "quantize"
from = "tiny"
preset = ["Q8_0", "Q4_K_M"]

[step.out]
op = "export"
from = "q"
path = "out/tiny-{preset}.gguf"
"#;

const OUTPUTS: [&str; 2] = ["out/tiny-Q8_0.gguf", "out/tiny-Q4_K_M.gguf"];

struct Workspace {
    dir: tempfile::TempDir,
    reference: Vec<Vec<u8>>,
}

impl Workspace {
    /// A workspace whose cache holds one complete run, and that run's outputs.
    fn new() -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
        std::fs::write(dir.path().join("recipe.toml"), RECIPE).unwrap();
        let mut ws = Workspace { dir, reference: Vec::new() };
        let first = ws.run();
        assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
        ws.reference = OUTPUTS.iter().map(|o| std::fs::read(ws.path(o)).unwrap()).collect();
        ws
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A run whose cache keeps every encoded tensor as a blob of its own
    /// (`--link whole`): the blobs these tests tamper with. Ranges of
    /// exports are tampered with in tests/it/link_modes.rs.
    fn run(&self) -> Output {
        let recipe = self.path("recipe.toml");
        let cache = self.path("cache");
        common::quantforge(&[
            OsStr::new("run"),
            recipe.as_os_str(),
            OsStr::new("--json"),
            OsStr::new("--link"),
            OsStr::new("whole"),
            OsStr::new("--cache-dir"),
            cache.as_os_str(),
        ])
    }

    fn remove_outputs(&self) {
        for o in OUTPUTS {
            let _ = std::fs::remove_file(self.path(o));
        }
    }

    /// Reruns with the outputs gone, so they are assembled from the cache;
    /// asserts the trust property and returns the report when it succeeded.
    fn rerun_from_cache(&self, what: &str) -> Option<Value> {
        self.remove_outputs();
        let output = self.run();
        if !output.status.success() {
            for o in OUTPUTS {
                assert!(
                    !self.path(o).exists() || self.output_is_reference(o),
                    "{what}: a failed run left wrong bytes in {o}"
                );
            }
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!stderr.contains("panicked"), "{what}: {stderr}");
            return None;
        }
        for o in OUTPUTS {
            assert!(self.output_is_reference(o), "{what}: exit 0 with wrong bytes in {o}");
        }
        Some(serde_json::from_slice(&output.stdout).unwrap())
    }

    fn output_is_reference(&self, name: &str) -> bool {
        let i = OUTPUTS.iter().position(|o| *o == name).unwrap();
        std::fs::read(self.path(name)).is_ok_and(|b| b == self.reference[i])
    }

    /// Files under `cache/SUB`, two levels down, sorted.
    fn store_files(&self, sub: &str) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let Ok(shards) = std::fs::read_dir(self.path("cache").join(sub)) else { return files };
        for shard in shards {
            for file in std::fs::read_dir(shard.unwrap().path()).unwrap() {
                files.push(file.unwrap().path());
            }
        }
        files.sort();
        files
    }

    fn verify(&self) -> Output {
        let cache = self.path("cache");
        common::quantforge(&[OsStr::new("cache"), OsStr::new("verify"), OsStr::new("--cache-dir"), cache.as_os_str()])
    }
}

fn incidents(report: &Value) -> Vec<String> {
    report["cache_incidents"].as_array().map_or(Vec::new(), |a| a.iter().map(|i| i["what"].to_string()).collect())
}

#[test]
fn a_flipped_byte_in_any_blob_is_caught_quarantined_and_recomputed() {
    let ws = Workspace::new();
    let blobs = ws.store_files("blobs");
    assert!(blobs.len() > 10, "the run cached its tensors and manifests");
    for blob in &blobs {
        common::flip_byte(blob, 17);
    }
    let report = ws.rerun_from_cache("every blob flipped").expect("the run recomputes what was corrupt");
    assert!(incidents(&report).len() >= blobs.len() / 2, "{:?}", incidents(&report));
    assert!(ws.verify().status.success(), "the recomputed blobs replace the quarantined ones");
    // Reported once: the next run finds nothing wrong.
    let report = ws.rerun_from_cache("after repair").unwrap();
    assert!(incidents(&report).is_empty(), "{:?}", incidents(&report));
}

#[test]
fn edited_and_swapped_entries_are_refused() {
    let ws = Workspace::new();
    let entries = ws.store_files("actions/tensors");
    assert!(entries.len() >= 2);
    // Two tensor entries with their payloads swapped, each keeping its header.
    let (a, b) = (std::fs::read(&entries[0]).unwrap(), std::fs::read(&entries[1]).unwrap());
    let split = |bytes: &[u8]| {
        let nl = bytes.iter().position(|&c| c == b'\n').unwrap() + 1;
        (bytes[..nl].to_vec(), bytes[nl..].to_vec())
    };
    let ((head_a, body_a), (head_b, body_b)) = (split(&a), split(&b));
    std::fs::write(&entries[0], [head_a, body_b].concat()).unwrap();
    std::fs::write(&entries[1], [head_b, body_a].concat()).unwrap();
    // A node entry edited in place.
    let node = &ws.store_files("actions/nodes")[0];
    let text = std::fs::read_to_string(node).unwrap().replace("\"tensors\":", "\"tensors\": ");
    std::fs::write(node, text).unwrap();
    let verify = ws.verify();
    assert!(!verify.status.success(), "verify sees the swapped and edited entries");
    let report = ws.rerun_from_cache("swapped entries").unwrap();
    let seen = incidents(&report);
    assert!(seen.iter().filter(|w| w.contains("tensors entry")).count() >= 2, "{seen:?}");
}

#[test]
fn a_stat_entry_naming_another_file_is_refused() {
    let ws = Workspace::new();
    for entry in ws.store_files("actions/stat") {
        let text = std::fs::read_to_string(&entry).unwrap();
        let (head, hash) = text.split_once('\n').unwrap();
        let other = blake3::hash(b"another model").to_hex().to_string();
        assert_eq!(hash.len(), other.len());
        std::fs::write(&entry, format!("{head}\n{other}")).unwrap();
    }
    let report = ws.rerun_from_cache("stat entry edited").unwrap();
    assert_eq!(report["inputs"][0]["rehashed"], true, "the input was hashed again");
}

#[test]
fn a_blob_that_is_a_link_is_never_followed() {
    let ws = Workspace::new();
    for (i, blob) in ws.store_files("blobs").into_iter().enumerate() {
        // A readable file of exactly the blob's size, full of a marker.
        let secret = ws.path(&format!("secret-{i}"));
        std::fs::write(&secret, vec![b'S'; std::fs::metadata(&blob).unwrap().len() as usize]).unwrap();
        std::fs::remove_file(&blob).unwrap();
        std::os::unix::fs::symlink(&secret, &blob).unwrap();
    }
    let verify = ws.verify();
    assert!(String::from_utf8_lossy(&verify.stdout).contains("not a regular file"));
    ws.rerun_from_cache("blobs replaced by links").unwrap();
    for o in OUTPUTS {
        let bytes = std::fs::read(ws.path(o)).unwrap();
        assert!(!bytes.windows(64).any(|w| w.iter().all(|&c| c == b'S')), "{o} holds the linked file's bytes");
    }
}

#[test]
fn verify_repair_quarantines_and_gc_empties_the_quarantine() {
    let ws = Workspace::new();
    let blobs = ws.store_files("blobs");
    common::flip_byte(&blobs[0], 3);
    let cache = ws.path("cache");
    let repair = common::quantforge(&[
        OsStr::new("cache"),
        OsStr::new("verify"),
        OsStr::new("--repair"),
        OsStr::new("--cache-dir"),
        cache.as_os_str(),
    ]);
    assert!(repair.status.success(), "{}", String::from_utf8_lossy(&repair.stderr));
    assert!(ws.verify().status.success(), "clean after --repair");
    assert!(std::fs::read_dir(cache.join("quarantine")).unwrap().count() >= 1);
    let gc = common::quantforge(&[OsStr::new("cache"), OsStr::new("gc"), OsStr::new("--cache-dir"), cache.as_os_str()]);
    assert!(gc.status.success());
    assert_eq!(std::fs::read_dir(cache.join("quarantine")).unwrap().count(), 0);
    ws.rerun_from_cache("after repair and gc").unwrap();
}

/// Choices drawn from the shared deterministic noise.
struct Choices(std::vec::IntoIter<u8>);

impl Choices {
    fn below(&mut self, n: usize) -> usize {
        let bytes: Vec<u8> = self.0.by_ref().take(4).collect();
        u32::from_le_bytes(bytes.try_into().unwrap()) as usize % n
    }
}

#[test]
fn random_corruption_of_store_files_never_yields_wrong_bytes() {
    let ws = Workspace::new();
    let mut rng = Choices(common::noise(0x5eed, 1 << 16).into_iter());
    for round in 0..24 {
        let mut files = ws.store_files("blobs");
        for kind in ["tensors", "nodes", "exports", "stat"] {
            files.extend(ws.store_files(&format!("actions/{kind}")));
        }
        let mut done = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let file = &files[rng.below(files.len())];
            if !file.exists() {
                continue;
            }
            let len = std::fs::metadata(file).map_or(0, |m| m.len()) as usize;
            let what = match rng.below(4) {
                0 => {
                    common::flip_byte(file, rng.below(len.max(1)));
                    "flip"
                }
                1 => {
                    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
                    f.set_len((len / 2) as u64).unwrap();
                    "truncate"
                }
                2 => {
                    let other = &files[rng.below(files.len())];
                    if other != file && other.exists() {
                        std::fs::copy(other, file).unwrap();
                    }
                    "replace with another store file"
                }
                _ => {
                    std::fs::remove_file(file).unwrap();
                    "remove"
                }
            };
            done.push(format!("{what} {}", file.display()));
        }
        ws.rerun_from_cache(&format!("round {round}: {done:?}"));
    }
}

/// A workspace with the tiny model and `recipe`, run once; the run's output.
fn run_recipe(dir: &Path, recipe: &str) -> Output {
    if !dir.join("tiny.gguf").exists() {
        std::fs::copy(common::tiny_model(), dir.join("tiny.gguf")).unwrap();
    }
    let path = dir.join("recipe.toml");
    std::fs::write(&path, recipe).unwrap();
    let cache = dir.join("cache");
    common::quantforge(&[OsStr::new("run"), path.as_os_str(), OsStr::new("--cache-dir"), cache.as_os_str()])
}

fn export_to(paths: &[&str]) -> String {
    let mut recipe = String::from("[input.tiny]\npath = \"tiny.gguf\"\n");
    for (i, path) in paths.iter().enumerate() {
        recipe += &format!("\n[step.out{i}]\nop = \"export\"\nfrom = \"tiny\"\npath = \"{path}\"\n");
    }
    recipe
}

fn fails_with(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "expected a failure mentioning {needle:?}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

#[test]
fn an_export_never_writes_through_a_link_out_of_the_recipe_directory() {
    let outside = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
    let output = run_recipe(ws.path(), &export_to(&["out/model.gguf"]));
    fails_with(&output, "outside the recipe's directory");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "nothing written outside");
}

#[test]
fn an_export_never_overwrites_the_cache_the_recipe_or_an_input() {
    let ws = tempfile::tempdir().unwrap();
    assert!(run_recipe(ws.path(), &export_to(&["copy.gguf"])).status.success());
    fails_with(&run_recipe(ws.path(), &export_to(&["cache/CACHEDIR.TAG"])), "is inside the cache");
    fails_with(&run_recipe(ws.path(), &export_to(&["recipe.toml"])), "the recipe itself");
    fails_with(&run_recipe(ws.path(), &export_to(&["tiny.gguf"])), "is an input of the run; refusing to overwrite it");
}

#[test]
fn exports_that_resolve_to_one_file_are_refused_before_anything_runs() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("out")).unwrap();
    std::os::unix::fs::symlink("out", ws.path().join("alias")).unwrap();
    fails_with(&run_recipe(ws.path(), &export_to(&["out/a.gguf", "alias/a.gguf"])), "writes there too");
    let split = "[input.tiny]\npath = \"tiny.gguf\"\n\n[step.s]\nop = \"export\"\nfrom = \"tiny\"\npath = \"out/m.gguf\"\n\
                 split = { max_tensors = 8 }\n\n[step.p]\nop = \"export\"\nfrom = \"tiny\"\npath = \"out/m-00002-of-00003.gguf\"\n";
    fails_with(&run_recipe(ws.path(), split), "writes there too");
    assert_eq!(std::fs::read_dir(ws.path().join("out")).unwrap().count(), 0, "nothing ran");
}

#[test]
fn special_files_are_never_replaced_or_read() {
    let ws = tempfile::tempdir().unwrap();
    let fifo = ws.path().join("fifo.gguf");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // As an export's destination: refused, still a FIFO.
    fails_with(&run_recipe(ws.path(), &export_to(&["fifo.gguf"])), "is a FIFO");
    let tiny = common::tiny_model();
    let output = common::quantforge(&[OsStr::new("quantize"), tiny.as_os_str(), fifo.as_os_str(), OsStr::new("Q8_0")]);
    fails_with(&output, "is a FIFO");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // As an input: refused at once instead of blocking.
    let recipe =
        "[input.tiny]\npath = \"fifo.gguf\"\n\n[step.o]\nop = \"export\"\nfrom = \"tiny\"\npath = \"o.gguf\"\n";
    fails_with(&run_recipe(ws.path(), recipe), "is a FIFO, not a regular file");
    let out = ws.path().join("o.gguf");
    let output =
        common::quantforge(&[OsStr::new("quantize"), OsStr::new("/dev/zero"), out.as_os_str(), OsStr::new("Q8_0")]);
    fails_with(&output, "not a regular file");
}

/// Runs the ladder in the background and, after `delay`, does `meddle` to
/// its input; returns how the run ended.
fn meddle_during_run(ws: &Workspace, delay_ms: u64, meddle: impl FnOnce(&Path)) -> std::process::ExitStatus {
    let recipe = ws.path("recipe.toml");
    let cache = ws.path("cache");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args([OsStr::new("run"), recipe.as_os_str(), OsStr::new("--jobs"), OsStr::new("1")])
        .args([OsStr::new("--cache-dir"), cache.as_os_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(delay_ms));
    meddle(&ws.path("tiny.gguf"));
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr) + String::from_utf8_lossy(&output.stdout);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if !output.status.success() {
        // Depending on when the change lands: found by the pin, by the
        // SIGBUS handler, while hashing, or — when it landed before the file
        // was hashed, so the run saw only the shorter file — by the parser.
        let clear = [
            "changed during the run",
            "truncated",
            "changed while it was being hashed",
            "ends early",
            "unknown file format",
            "lies outside the file",
            // After the exports, while the lock's sha256s were computed.
            "changed since the run read it",
        ];
        assert!(clear.iter().any(|c| stderr.contains(c)), "{stderr}");
    }
    output.status
}

#[test]
fn an_input_changed_during_a_run_never_poisons_the_cache() {
    use std::os::unix::process::ExitStatusExt;
    let original = std::fs::read(common::tiny_model()).unwrap();
    for delay_ms in [20, 80, 200] {
        // Rewritten in place and restored: the same bytes, a new ctime.
        let ws = Workspace::new();
        std::fs::remove_dir_all(ws.path("cache")).unwrap();
        ws.remove_outputs();
        meddle_during_run(&ws, delay_ms, |input| {
            let mut garbage = original.clone();
            garbage[original.len() / 2..].iter_mut().for_each(|b| *b = !*b);
            std::fs::write(input, &garbage).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
            std::fs::write(input, &original).unwrap();
        });
        ws.rerun_from_cache(&format!("rewritten at {delay_ms} ms")).expect("the rerun succeeds");
        // Replaced by a shorter file (`cp` truncates first): a clear error, never a signal.
        let ws = Workspace::new();
        std::fs::remove_dir_all(ws.path("cache")).unwrap();
        ws.remove_outputs();
        let status = meddle_during_run(&ws, delay_ms, |input| {
            std::fs::write(input, &original[..original.len() / 3]).unwrap();
        });
        assert_eq!(status.signal(), None, "killed by a signal");
        std::fs::write(ws.path("tiny.gguf"), &original).unwrap();
        ws.rerun_from_cache(&format!("truncated at {delay_ms} ms")).expect("the rerun succeeds");
    }
}

#[test]
fn absurd_names_and_recipes_neither_panic_nor_flood_the_terminal() {
    let ws = tempfile::tempdir().unwrap();
    // A step name of 65,536 characters, and a recipe name that would clear the screen.
    let long = "s".repeat(65_536);
    let recipe = format!(
        "[recipe]\nname = \"evil\\u001b[2J\"\n[input.tiny]\npath = \"tiny.gguf\"\n\n[step.{long}]\nop = \"export\"\n\
         from = \"tiny\"\npath = \"a.gguf\"\n"
    );
    let output = run_recipe(ws.path(), &recipe);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!stdout.contains('\u{1b}'), "a raw escape reached the terminal: {stdout:?}");
    assert!(stdout.lines().all(|l| l.chars().count() < 200), "{stdout}");
    // 5,000 bad presets on one long line: each problem past column 65,535.
    let presets = vec!["\"NOPE\""; 5000].join(", ");
    let recipe = format!(
        "[input.tiny]\npath = \"tiny.gguf\"\n[step.q]\nop = \"quantize\"\nfrom = \"tiny\"\n\
         preset = [{}{presets}]\n[step.o]\nop = \"export\"\nfrom = \"q\"\npath = \"o-{{preset}}.gguf\"\n",
        "\"Q8_0\", ".repeat(12_000)
    );
    let output = run_recipe(ws.path(), &recipe);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.len() < 64 << 10, "{} bytes of diagnostics", stderr.len());
    assert!(stderr.contains("more problems"), "{stderr}");
}

#[test]
fn small_things_say_what_they_mean() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    // Store files follow the umask, so a group-shared cache works for everyone.
    let blob = &ws.store_files("blobs")[0];
    let mode = std::fs::metadata(blob).unwrap().permissions().mode();
    assert_ne!(mode & 0o044, 0, "blob mode {mode:o} keeps the group and others out");
    // A read-only command never creates a cache.
    let typo = ws.path("no-such-cache");
    let output =
        common::quantforge(&[OsStr::new("cache"), OsStr::new("verify"), OsStr::new("--cache-dir"), typo.as_os_str()]);
    fails_with(&output, "no cache here");
    assert!(!typo.exists());
    // A directory where a model file belongs.
    let out = ws.path("o.gguf");
    let output =
        common::quantforge(&[OsStr::new("quantize"), ws.path("out").as_os_str(), out.as_os_str(), OsStr::new("Q8_0")]);
    fails_with(&output, "is a directory; only `convert` reads a checkpoint directory");
}

/// A read-only bind mount of a directory, unmounted when dropped; `None`
/// (with a message) where mounting is not allowed.
struct ReadOnlyMount(PathBuf);

impl ReadOnlyMount {
    fn new(source: &Path, target: &Path) -> Option<ReadOnlyMount> {
        std::fs::create_dir_all(target).unwrap();
        let mount =
            |args: &[&OsStr]| std::process::Command::new("mount").args(args).output().is_ok_and(|o| o.status.success());
        if !mount(&[OsStr::new("--bind"), source.as_os_str(), target.as_os_str()]) {
            eprintln!("skipped: cannot bind-mount here (needs root); a read-only cache is not tested");
            return None;
        }
        let guard = ReadOnlyMount(target.to_owned());
        assert!(mount(&[OsStr::new("-o"), OsStr::new("remount,bind,ro"), target.as_os_str()]));
        Some(guard)
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).output();
    }
}

#[test]
fn a_read_only_cache_can_be_listed_verified_and_used_by_an_up_to_date_run() {
    let ws = Workspace::new();
    let Some(mount) = ReadOnlyMount::new(&ws.path("cache"), &ws.path("ro-cache")) else { return };
    let ro = mount.0.as_os_str();
    assert!(std::fs::write(ws.path("ro-cache/probe"), b"x").is_err(), "the mount is read-only");
    for args in [&["cache", "verify"][..], &["cache", "ls"], &["cache", "du"]] {
        let mut args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        args.extend([OsStr::new("--cache-dir"), ro]);
        let out = common::quantforge(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let recipe = ws.path("recipe.toml");
    let out = common::quantforge(&[
        OsStr::new("run"),
        recipe.as_os_str(),
        OsStr::new("--json"),
        OsStr::new("--cache-dir"),
        ro,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["totals"]["ran"], 0, "{report:#}");
    for o in OUTPUTS {
        assert!(ws.output_is_reference(o));
    }
}
