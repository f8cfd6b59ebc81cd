//! Exports that do not double the disk (issue 44, item 6): a cold ladder
//! writes each encoded byte once, into the exports that hold it; `--link
//! reflink,hardlink,copy`. With `copy` the cache keeps no second copy of an
//! export's encoded tensors and finds them in the export, checked; with
//! `reflink` (a loop-mounted XFS, as root) the cache holds a clone sharing
//! the export's blocks and puts a deleted or edited export back without
//! encoding; with `hardlink` the export is the cache's file, read-only, and
//! never as root.

use crate::common;

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The presets of `common::LADDER`.
const PRESETS: [&str; 3] = ["Q8_0", "Q4_K_M", "Q3_K_S"];

/// A project (the tiny model and the ladder recipe) in `dir`.
fn project(dir: &Path) -> PathBuf {
    std::fs::copy(common::tiny_model(), dir.join("tiny.gguf")).unwrap();
    std::fs::write(dir.join("quantforge.toml"), "").unwrap();
    let recipe = dir.join("ladder.toml");
    std::fs::write(&recipe, common::LADDER).unwrap();
    recipe
}

fn output(dir: &Path, preset: &str) -> PathBuf {
    dir.join(format!("out/tiny-{preset}.gguf"))
}

fn outputs(dir: &Path) -> Vec<Vec<u8>> {
    PRESETS.iter().map(|p| std::fs::read(output(dir, p)).unwrap()).collect()
}

/// `quantforge run ladder.toml --json --link MODES` in `dir`, through
/// `wrapper` (a command that runs the rest as another user) if given.
fn run_as(wrapper: &[&str], dir: &Path, link: &str) -> Value {
    let binary = env!("CARGO_BIN_EXE_quantforge");
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    let out = command.args(["run", "ladder.toml", "--json", "--link", link]).current_dir(dir).output().unwrap();
    serde_json::from_str(&common::stdout_of_success(out)).unwrap()
}

fn run(dir: &Path, link: &str) -> Value {
    run_as(&[], dir, link)
}

fn totals(report: &Value, field: &str) -> u64 {
    report["totals"][field].as_u64().unwrap()
}

/// Each export file's report, in the recipe's order.
fn files(report: &Value) -> Vec<&Value> {
    report["nodes"].as_array().unwrap().iter().flat_map(|n| n["files"].as_array().into_iter().flatten()).collect()
}

/// The bytes of every file in the cache's blob directory.
fn blob_bytes(cache: &Path) -> u64 {
    fn walk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let meta = e.metadata().unwrap();
                if meta.is_dir() { walk(&e.path()) } else { meta.len() }
            })
            .sum()
    }
    walk(&cache.join("blobs"))
}

fn cache_verify(dir: &Path) -> String {
    common::stdout_of_success(common::quantforge_in(dir, &[OsStr::new("cache"), OsStr::new("verify")]))
}

/// Flips one byte in the middle of `path`, in place (as an editor that
/// writes into the file would), keeping its length.
fn edit_in_place(path: &Path) {
    use std::os::unix::fs::FileExt;
    let len = std::fs::metadata(path).unwrap().len();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, len / 2).unwrap();
    file.write_all_at(&[byte[0] ^ 0xff], len / 2).unwrap();
}

#[test]
fn with_copy_the_cache_keeps_no_second_copy_and_checks_what_it_finds_in_the_exports() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let first = run(dir.path(), "copy");
    assert!(totals(&first, "tensors_encoded") > 0);
    assert!(files(&first).iter().all(|f| f["link"] == "copy"), "{first:#}");
    let written = outputs(dir.path());
    let exported: u64 = written.iter().map(|b| b.len() as u64).sum();
    // What is left in the cache is node manifests, never the tensors.
    let kept = blob_bytes(&dir.path().join("cache"));
    assert!(kept * 20 < exported, "the cache keeps {kept} bytes beside {exported} exported");
    assert!(cache_verify(dir.path()).contains("checked"));

    let again = run(dir.path(), "copy");
    assert_eq!(totals(&again, "hit"), totals(&again, "nodes"), "{again:#}");

    // Deleted: what only that export held is encoded again, what another
    // export holds (the tensors the presets share) is copied from there.
    std::fs::remove_file(output(dir.path(), "Q3_K_S")).unwrap();
    let rebuilt = run(dir.path(), "copy");
    assert!(totals(&rebuilt, "tensors_encoded") > 0, "{rebuilt:#}");
    assert!(totals(&rebuilt, "tensors_reused") > 0, "{rebuilt:#}");
    assert_eq!(outputs(dir.path()), written);

    // Edited in place: the tensor the edit hit no longer matches, is
    // dropped and encoded again; the rest are checked and copied.
    edit_in_place(&output(dir.path(), "Q8_0"));
    let repaired = run(dir.path(), "copy");
    assert_eq!(repaired["nodes"].as_array().unwrap().iter().filter(|n| n["status"] == "ran").count(), 1);
    assert!(totals(&repaired, "tensors_encoded") >= 1, "{repaired:#}");
    assert_eq!(outputs(dir.path()), written);

    // Collected and checked: nothing a recipe needs goes.
    common::stdout_of_success(common::quantforge_in(dir.path(), &[OsStr::new("cache"), OsStr::new("gc")]));
    let verified = cache_verify(dir.path());
    assert!(!verified.contains("broken") && !verified.contains("corrupt"), "{verified}");
    let after_gc = run(dir.path(), "copy");
    assert_eq!(totals(&after_gc, "hit"), totals(&after_gc, "nodes"), "{after_gc:#}");
}

#[test]
fn a_cold_ladder_writes_each_encoded_byte_once() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    // The kernel's count of the bytes the run handed to write calls (file
    // to file copies included), added to the shell's when it reaps the run.
    let script = format!("{} run ladder.toml -q --link copy && cat /proc/$$/io", env!("CARGO_BIN_EXE_quantforge"));
    let out = Command::new("sh").args(["-c", &script]).current_dir(dir.path()).output().unwrap();
    let io = common::stdout_of_success(out);
    let written: u64 = io
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap_or_else(|| panic!("no wchar in {io}"))
        .parse()
        .unwrap();
    let exported: u64 = outputs(dir.path()).iter().map(|b| b.len() as u64).sum();
    assert!(written >= exported, "the kernel counts what was written here ({written} bytes, {exported} exported)");
    // Each tensor went straight into the exports that hold it, no blob on
    // the way: what else was written (the cache's entries, the lock) is
    // small beside them.
    assert!(written - exported < exported / 10, "{written} bytes written for {exported} exported");
}

/// A loop-mounted XFS (reflinks), unmounted and removed when dropped.
struct Xfs {
    image: tempfile::TempDir,
    mount: PathBuf,
}

impl Xfs {
    fn mount() -> Result<Xfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot mount a file system".into());
        }
        let image = tempfile::tempdir().map_err(|e| e.to_string())?;
        let file = image.path().join("xfs.img");
        let mount = image.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        let sh = |cmd: &mut Command| match cmd.output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr))),
            Err(e) => Err(format!("{cmd:?}: {e}")),
        };
        sh(Command::new("truncate").arg("-s").arg("320M").arg(&file))?;
        sh(Command::new("mkfs.xfs").arg("-q").arg(&file))?;
        sh(Command::new("mount").arg("-o").arg("loop").arg(&file).arg(&mount))?;
        Ok(Xfs { image, mount })
    }
}

impl Drop for Xfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = &self.image;
    }
}

/// Whether FIEMAP says every extent of `path` is shared with another file.
fn blocks_shared(path: &Path) -> bool {
    let out = Command::new("filefrag").arg("-v").arg(path).output().expect("filefrag (e2fsprogs) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let extents: Vec<&str> =
        text.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
    !extents.is_empty() && extents.iter().all(|l| l.contains("shared"))
}

#[test]
fn with_reflink_the_cache_shares_the_exports_blocks_and_puts_back_what_was_deleted_or_edited() {
    let xfs = match Xfs::mount() {
        Ok(xfs) => xfs,
        Err(why) if std::env::var_os("CI").is_none() => return eprintln!("skipped: {why}"),
        Err(why) => panic!("CI must be able to mount a loop XFS (apt-get install xfsprogs): {why}"),
    };
    let dir = xfs.mount.join("project");
    std::fs::create_dir(&dir).unwrap();
    project(&dir);
    let first = run(&dir, "reflink,hardlink,copy");
    assert!(files(&first).iter().all(|f| f["link"] == "reflink"), "{first:#}");
    let written = outputs(&dir);
    let exported: u64 = written.iter().map(|b| b.len() as u64).sum();
    for preset in PRESETS {
        assert!(blocks_shared(&output(&dir, preset)), "{preset}'s blocks are not shared with the cache");
    }
    // The cache's blobs are the exports' clones (and small manifests).
    let kept = blob_bytes(&dir.join("cache"));
    assert!(kept >= exported && kept < exported + exported / 20, "{kept} bytes of blobs for {exported} exported");

    // Deleted and edited: put back from the cache, nothing encoded.
    std::fs::remove_file(output(&dir, "Q3_K_S")).unwrap();
    edit_in_place(&output(&dir, "Q4_K_M"));
    // An edit of a reflinked export never reaches the cache's clone.
    let verified = cache_verify(&dir);
    assert!(!verified.contains("corrupt") && !verified.contains("broken"), "{verified}");
    let restored = run(&dir, "reflink,hardlink,copy");
    assert_eq!(totals(&restored, "tensors_encoded"), 0, "{restored:#}");
    assert_eq!(totals(&restored, "tensors_reused"), 0, "{restored:#}");
    let put_back: Vec<&Value> = files(&restored).into_iter().filter(|f| f["restored"] == true).collect();
    assert_eq!(put_back.len(), 2, "{restored:#}");
    assert_eq!(outputs(&dir), written);
    assert!(blocks_shared(&output(&dir, "Q3_K_S")));
}

#[test]
fn hard_links_are_made_read_only_and_never_as_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    project(dir.path());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // Root writes through any mode: a hard link could change the cache.
        let report = run(dir.path(), "hardlink,copy");
        assert!(files(&report).iter().all(|f| f["link"] == "copy"), "{report:#}");
        std::fs::remove_dir_all(dir.path().join("cache")).unwrap();
        std::fs::remove_dir_all(dir.path().join("out")).unwrap();
    }
    // As an unprivileged user (nobody, when the tests run as root).
    let nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
    let wrapper: &[&str] = if root { &nobody } else { &[] };
    for file in ["tiny.gguf", "ladder.toml", "quantforge.toml"] {
        std::fs::set_permissions(dir.path().join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let report = run_as(wrapper, dir.path(), "hardlink,copy");
    assert!(files(&report).iter().all(|f| f["link"] == "hardlink"), "{report:#}");
    let written = outputs(dir.path());
    for preset in PRESETS {
        let meta = std::fs::metadata(output(dir.path(), preset)).unwrap();
        assert_eq!(meta.nlink(), 2, "{preset}: the export and the cache's blob are one file");
        assert_eq!(meta.mode() & 0o222, 0, "{preset}: a hard-linked export is read-only");
    }
    std::fs::remove_file(output(dir.path(), "Q8_0")).unwrap();
    let restored = run_as(wrapper, dir.path(), "hardlink,copy");
    assert_eq!(totals(&restored, "tensors_encoded"), 0, "{restored:#}");
    assert_eq!(outputs(dir.path()), written);
    assert_eq!(std::fs::metadata(output(dir.path(), "Q8_0")).unwrap().nlink(), 2);
}
