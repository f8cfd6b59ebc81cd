//! `split` and `merge` end to end: shards byte-identical to llama-gguf-split
//! for the same options, merges that give back the original file (or
//! llama-gguf-split `--merge`'s output with `--keep-split-keys`), and clear
//! errors for missing, duplicated, foreign, truncated and misnamed shards.

use crate::common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use quantforge::formats::{ModelFile, OpenOptions};
use quantforge::ops::split::{self, SplitError, SplitLimit, SplitOptions};

/// The shard files of `prefix`, in name order.
fn shards(prefix: &Path) -> Vec<PathBuf> {
    let dir = prefix.parent().unwrap();
    let stem = format!("{}-", prefix.file_name().unwrap().to_str().unwrap());
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&stem))
        .collect();
    files.sort();
    files
}

fn assert_same_file(a: &Path, b: &Path) {
    let (x, y) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    assert!(x == y, "{} and {} differ ({} and {} bytes)", a.display(), b.display(), x.len(), y.len());
}

/// Splits `model` with llama-gguf-split and with quantforge (`ours` are our
/// flags for llama's `theirs`), compares every shard byte for byte, then
/// checks both kinds of merge. Returns the number of shards.
fn compare_with_reference(reference: &Path, model: &Path, theirs: &[&str], ours: &[&str]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let ref_prefix = dir.path().join("ref");
    let our_prefix = dir.path().join("ours");

    let status = Command::new(reference)
        .arg("--split")
        .args(theirs)
        .arg(model)
        .arg(&ref_prefix)
        .output()
        .expect("llama-gguf-split runs");
    assert!(status.status.success(), "llama-gguf-split {theirs:?}: {}", String::from_utf8_lossy(&status.stderr));

    let mut args: Vec<&OsStr> = vec!["split".as_ref(), model.as_os_str(), our_prefix.as_os_str()];
    args.extend(ours.iter().map(OsStr::new));
    common::quantforge_ok(&args);

    let (theirs_files, ours_files) = (shards(&ref_prefix), shards(&our_prefix));
    assert_eq!(theirs_files.len(), ours_files.len(), "shard count for {ours:?}");
    assert!(theirs_files.len() > 1, "{ours:?} should split the model");
    for (t, o) in theirs_files.iter().zip(&ours_files) {
        assert_eq!(
            t.file_name().unwrap().to_str().unwrap().strip_prefix("ref"),
            o.file_name().unwrap().to_str().unwrap().strip_prefix("ours")
        );
        assert_same_file(t, o);
    }

    // Merging from any shard, ours or theirs, gives back the original.
    let last = ours_files.last().unwrap();
    let merged = dir.path().join("merged.gguf");
    common::quantforge_ok(&["merge".as_ref(), last.as_os_str(), merged.as_os_str()]);
    assert_same_file(&merged, model);
    let merged_theirs = dir.path().join("merged-theirs.gguf");
    common::quantforge_ok(&["merge".as_ref(), theirs_files[0].as_os_str(), merged_theirs.as_os_str()]);
    assert_same_file(&merged_theirs, model);

    // With --keep-split-keys: llama-gguf-split --merge's bytes.
    let ref_merged = dir.path().join("ref-merged.gguf");
    let status = Command::new(reference).arg("--merge").arg(&theirs_files[0]).arg(&ref_merged).output().unwrap();
    assert!(status.status.success(), "llama-gguf-split --merge: {}", String::from_utf8_lossy(&status.stderr));
    let kept = dir.path().join("kept.gguf");
    common::quantforge_ok(&[
        "merge".as_ref(),
        ours_files[1].as_os_str(),
        kept.as_os_str(),
        "--keep-split-keys".as_ref(),
    ]);
    assert_same_file(&kept, &ref_merged);
    ours_files.len()
}

#[test]
fn tiny_model_matches_llama_gguf_split() {
    let Some(reference) = common::reference("build/bin/llama-gguf-split") else { return };
    let model = common::tiny_model();
    // Its own flag names are taken too, and no limit is its 128 tensors a shard.
    let cases: [(&[&str], &[&str], usize); 6] = [
        (&["--split-max-tensors", "8"], &["--max-tensors", "8"], 3),
        (&["--split-max-size", "1M"], &["--split-max-size", "1M"], 4),
        (&["--split-max-tensors", "10"], &["--split-max-tensors", "10"], 3),
        (&["--split-max-size", "1M"], &["--max-size", "1M"], 4),
        (
            &["--split-max-tensors", "8", "--no-tensor-first-split"],
            &["--max-tensors", "8", "--no-tensor-first-split"],
            4,
        ),
        (&["--split-max-size", "1M", "--no-tensor-first-split"], &["--max-size", "1M", "--no-tensor-first-split"], 5),
    ];
    for (theirs, ours, n_shards) in cases {
        assert_eq!(compare_with_reference(&reference, &model, theirs, ours), n_shards, "{ours:?}");
    }
}

#[test]
fn gemma_matches_llama_gguf_split() {
    let Some(reference) = common::reference("build/bin/llama-gguf-split") else { return };
    let Some(model) = common::gemma() else { return };
    compare_with_reference(&reference, &model, &["--split-max-size", "100M"], &["--max-size", "100M"]);
    compare_with_reference(&reference, &model, &["--split-max-tensors", "32"], &["--max-tensors", "32"]);
    assert_eq!(compare_with_reference(&reference, &model, &[], &[]), 2, "236 tensors, 128 a shard");
}

#[test]
fn dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("plan");
    let model = common::tiny_model();
    let stdout = common::quantforge_ok(&[
        "split".as_ref(),
        model.as_os_str(),
        prefix.as_os_str(),
        "--max-tensors".as_ref(),
        "8".as_ref(),
        "--dry-run".as_ref(),
    ]);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(stdout.contains("plan-00003-of-00003.gguf: 5 tensors"), "{stdout}");
    assert!(shards(&prefix).is_empty());
}

#[test]
fn plan_keys_and_limits() {
    let model = ModelFile::open(&common::tiny_model(), OpenOptions::default()).unwrap();
    let options = SplitOptions { limit: SplitLimit::MaxTensors(8), no_tensor_first_split: true };
    let plans = split::plan_split(&model.metadata, &model.tensors, options).unwrap();
    let sizes: Vec<usize> = plans.iter().map(|p| p.tensors.len()).collect();
    assert_eq!(sizes, [0, 8, 8, 5]);
    // The first shard carries the model's metadata, the others only split keys.
    assert_eq!(plans[0].metadata.len(), model.metadata.len() + 3);
    let keys: Vec<&str> = plans[2].metadata.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [split::SPLIT_NO, split::SPLIT_TENSORS_COUNT, split::SPLIT_COUNT]);

    // A tensor is never cut: a limit below one tensor leaves a shard empty.
    let tiny_limit = SplitOptions { limit: SplitLimit::MaxSize(1), no_tensor_first_split: false };
    let err = split::plan_split(&model.metadata, &model.tensors, tiny_limit).unwrap_err();
    assert!(matches!(err, SplitError::TensorTooLarge { shard: 1, max: 1, .. }), "{err}");

    // One size syntax for `split --max-size` and a recipe's `max_size`: llama-gguf-split's
    // decimal M and G, and the rest.
    let size = quantforge::formats::parse_size;
    assert_eq!(size("100M"), Ok(100_000_000));
    assert_eq!(size("2G"), Ok(2_000_000_000));
    assert_eq!(size("1.5GB"), Ok(1_500_000_000));
    assert_eq!(size("1MiB"), Ok(1 << 20));
    assert_eq!(size("4096"), Ok(4096));
    for bad in ["", "-1G", "12X", "G"] {
        assert!(size(bad).is_err(), "{bad}");
    }
    assert_eq!(
        quantforge::formats::parse_shard_path(Path::new("a/b-00002-of-00003.gguf")),
        Some((PathBuf::from("a/b"), 1, 3))
    );
    assert_eq!(quantforge::formats::parse_shard_path(Path::new("b-00004-of-00003.gguf")), None);
    assert_eq!(quantforge::formats::parse_shard_path(Path::new("b.gguf")), None);
}

/// A split of the tiny model into three shards of 8, 8 and 5 tensors.
fn split_tiny(dir: &Path, name: &str, max_tensors: &str) -> Vec<PathBuf> {
    let prefix = dir.join(name);
    let model = common::tiny_model();
    common::quantforge_ok(&[
        "split".as_ref(),
        model.as_os_str(),
        prefix.as_os_str(),
        "--max-tensors".as_ref(),
        max_tensors.as_ref(),
    ]);
    shards(&prefix)
}

fn merge_err(shard: &Path, dir: &Path) -> String {
    let out = dir.join("merged.gguf");
    let stderr = common::quantforge_err(&["merge".as_ref(), shard.as_os_str(), out.as_os_str()]);
    assert!(!out.exists(), "a failed merge must not leave {}", out.display());
    stderr
}

#[test]
fn merge_rejects_bad_sets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let set = split_tiny(d, "missing", "8");
    fs::remove_file(&set[1]).unwrap();
    let err = merge_err(&set[0], d);
    assert!(err.contains("missing-00002-of-00003.gguf: shard 2 of 3 is missing"), "{err}");

    let set = split_tiny(d, "dup", "8");
    fs::copy(&set[0], &set[1]).unwrap();
    let err = merge_err(&set[2], d);
    assert!(err.contains("dup-00002-of-00003.gguf: `split.no` should be 1, found 0"), "{err}");

    // Shard 2 of a split with 10 tensors a shard: same count, same model,
    // but its tensors overlap shard 3's.
    let set = split_tiny(d, "foreign", "8");
    let other = split_tiny(d, "other", "10");
    assert_eq!(other.len(), 3);
    fs::copy(&other[1], &set[1]).unwrap();
    let err = merge_err(&set[0], d);
    assert!(err.contains("foreign-00003-of-00003.gguf: tensor `"), "{err}");
    assert!(err.contains("is also in") && err.contains("foreign-00002-of-00003.gguf"), "{err}");

    // Not a shard at all under a shard's name.
    let set = split_tiny(d, "plain", "8");
    fs::copy(common::tiny_model(), &set[2]).unwrap();
    let err = merge_err(&set[0], d);
    assert!(err.contains("plain-00003-of-00003.gguf: not a shard: metadata key `split.no` is missing"), "{err}");

    let set = split_tiny(d, "cut", "8");
    let bytes = fs::read(&set[2]).unwrap();
    fs::write(&set[2], &bytes[..bytes.len() - 100]).unwrap();
    let err = merge_err(&set[0], d);
    assert!(err.contains("cut-00003-of-00003.gguf"), "{err}");

    let err = merge_err(&common::tiny_model(), d);
    assert!(err.contains("not a shard name"), "{err}");
}

/// Without a limit, llama-gguf-split's 128 tensors a shard (the tiny
/// model's 26 make one); both limits, or a bad one, are refused.
#[test]
fn split_takes_one_limit_or_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("x");
    let model = common::tiny_model();
    let plan = common::quantforge_ok(&[
        "--json".as_ref(),
        "split".as_ref(),
        model.as_os_str(),
        prefix.as_os_str(),
        "--dry-run".as_ref(),
    ]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["files"].as_array().map(Vec::len), Some(1), "{plan}");
    let both = ["--max-size", "1M", "--max-tensors", "8"];
    let mut args: Vec<&OsStr> = vec!["split".as_ref(), model.as_os_str(), prefix.as_os_str()];
    args.extend(both.iter().map(OsStr::new));
    assert!(common::quantforge_err(&args).contains("cannot be used with"));
    let err = common::quantforge_err(&[
        "split".as_ref(),
        model.as_os_str(),
        prefix.as_os_str(),
        "--max-size".as_ref(),
        "10X".as_ref(),
    ]);
    assert!(err.contains("unknown size unit `x`"), "{err}");
    let err = common::quantforge_err(&[
        "split".as_ref(),
        model.as_os_str(),
        prefix.as_os_str(),
        "--max-size".as_ref(),
        "1k".as_ref(),
    ]);
    assert!(
        err.contains("`token_embd.weight` takes 262144 bytes (padded), more than the 1000")
            && err.contains("the smallest size that works is 262144 (256.0 KiB)"),
        "{err}"
    );
    assert!(shards(&prefix).is_empty());
}

/// Any shard of a split stands for the whole model: quantizing from the
/// third shard equals quantizing the unsplit file.
#[test]
fn any_shard_loads_the_whole_model() {
    let dir = tempfile::tempdir().unwrap();
    let set = split_tiny(dir.path(), "tiny", "8");
    let (from_shard, from_file) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    common::quantforge_ok(&["quantize".as_ref(), set[2].as_os_str(), from_shard.as_os_str(), "Q4_K_M".as_ref()]);
    common::quantforge_ok(&[
        "quantize".as_ref(),
        common::tiny_model().as_os_str(),
        from_file.as_os_str(),
        "Q4_K_M".as_ref(),
    ]);
    assert_same_file(&from_shard, &from_file);
}

/// `quantize --keep-split` writes shards like the input's, byte-identical to
/// llama-quantize `--keep-split`.
#[test]
fn keep_split_matches_llama_quantize() {
    let Some(llama) = common::reference("build/bin/llama-quantize") else { return };
    let dir = tempfile::tempdir().unwrap();
    let set = split_tiny(dir.path(), "tiny", "8");
    for preset in ["Q8_0", "Q4_K_M"] {
        let theirs = dir.path().join(format!("theirs-{preset}.gguf"));
        let ours = dir.path().join(format!("ours-{preset}.gguf"));
        let status = Command::new(&llama).arg("--keep-split").arg(&set[0]).arg(&theirs).arg(preset).output().unwrap();
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        common::quantforge_ok(&[
            "quantize".as_ref(),
            "--keep-split".as_ref(),
            set[1].as_os_str(),
            ours.as_os_str(),
            preset.as_ref(),
        ]);
        let (theirs, ours) =
            (shards(&dir.path().join(format!("theirs-{preset}"))), shards(&dir.path().join(format!("ours-{preset}"))));
        assert_eq!(theirs.len(), 3, "{theirs:?}");
        assert_eq!(ours.len(), 3, "{ours:?}");
        for (t, o) in theirs.iter().zip(&ours) {
            assert_same_file(t, o);
        }
    }
}

/// `quantize --keep-split` names the shards it wrote, not the path it was
/// given: on stderr, and under `--json` each with its size.
#[test]
fn keep_split_reports_the_shards_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let set = split_tiny(dir.path(), "tiny", "8");
    let out = dir.path().join("q.gguf");
    let output = common::quantforge(&[
        "quantize".as_ref(),
        "--keep-split".as_ref(),
        set[0].as_os_str(),
        out.as_os_str(),
        "Q8_0".as_ref(),
    ]);
    assert!(output.status.success());
    let written = shards(&dir.path().join("q"));
    assert_eq!(written.len(), 3);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    assert!(stderr.starts_with(&format!("wrote {}: ", names.join(", "))), "{stderr}");
    assert!(!out.exists());

    let json = common::quantforge_ok(&[
        "quantize".as_ref(),
        "--json".as_ref(),
        "--keep-split".as_ref(),
        set[0].as_os_str(),
        out.as_os_str(),
        "Q8_0".as_ref(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{json}");
    for (file, path) in files.iter().zip(&written) {
        assert_eq!(file["path"].as_str().unwrap(), path.to_str().unwrap());
        assert_eq!(file["bytes"].as_u64().unwrap(), fs::metadata(path).unwrap().len());
    }
    let total: u64 = written.iter().map(|p| fs::metadata(p).unwrap().len()).sum();
    assert_eq!(report["bytes"].as_u64().unwrap(), total);
}

/// Splitting and merging as recipe steps: an export with `split` writes the
/// same shards as the command, and `merge-shards` gives the original back.
#[test]
fn recipe_split_and_merge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set = split_tiny(d, "cmd", "8");
    fs::copy(common::tiny_model(), d.join("tiny.gguf")).unwrap();
    let recipe = d.join("r.toml");
    fs::write(
        &recipe,
        r#"
[input.tiny]
path = "tiny.gguf"

[input.shards]
path = "cmd-00002-of-00003.gguf"

[step.split]
op = "export"
from = "tiny"
path = "out/rec.gguf"
split = { max_tensors = 8 }

[step.merged]
op = "merge-shards"
from = "shards"

[step.whole]
op = "export"
from = "merged"
path = "out/merged.gguf"

[step.kept]
op = "merge-shards"
from = "shards"
keep_split_keys = true

[step.whole-kept]
op = "export"
from = "kept"
path = "out/merged-kept.gguf"
"#,
    )
    .unwrap();
    let cache = d.join("cache");
    common::quantforge_ok(&["run".as_ref(), recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str()]);
    let ours = shards(&d.join("out/rec"));
    assert_eq!(ours.len(), 3);
    for (a, b) in set.iter().zip(&ours) {
        assert_same_file(a, b);
    }
    assert_same_file(&d.join("out/merged.gguf"), &common::tiny_model());
    let merged = ModelFile::open(&d.join("out/merged-kept.gguf"), OpenOptions::default()).unwrap();
    assert_eq!(merged.metadata.get(split::SPLIT_COUNT).and_then(|v| v.as_u64()), Some(0));
    // Nothing changed: all hits, even for the split export's three files.
    let again = common::quantforge_ok(&[
        "run".as_ref(),
        recipe.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_os_str(),
        "--json".as_ref(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(report["totals"]["ran"], 0, "{report}");
}

/// `inspect` on any shard describes the whole split.
#[test]
fn inspect_any_shard_shows_the_whole_model() {
    let dir = tempfile::tempdir().unwrap();
    let set = split_tiny(dir.path(), "tiny", "8");
    let whole: serde_json::Value = serde_json::from_str(&common::quantforge_ok(&[
        "inspect".as_ref(),
        "--json".as_ref(),
        common::tiny_model().as_os_str(),
    ]))
    .unwrap();
    let split: serde_json::Value =
        serde_json::from_str(&common::quantforge_ok(&["inspect".as_ref(), "--json".as_ref(), set[1].as_os_str()]))
            .unwrap();
    assert_eq!(split["split"].as_array().unwrap().len(), 3);
    for field in ["tensor_count", "element_count", "tensor_bytes", "types", "metadata", "architecture"] {
        assert_eq!(split[field], whole[field], "{field}");
    }
}

/// Counts read as English: a shard of one tensor is "1 tensor".
#[test]
fn one_tensor_is_singular() {
    let dir = tempfile::tempdir().unwrap();
    let set = split_tiny(dir.path(), "tiny", "20");
    let output = common::quantforge(&["inspect".as_ref(), set[0].as_os_str()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(", 1 tensor,") || text.contains("  1 tensor,"), "{text}");
    assert!(!text.contains(" 1 tensors"), "{text}");
}

/// `quantforge gguf-split` takes llama-gguf-split's command lines as they
/// are: the same shards and merged file, `--delete-splits` removing the
/// shards, and for each misuse the same exit status and message.
#[test]
fn gguf_split_is_a_drop_in_for_llama_gguf_split() {
    let Some(reference) = common::reference("build/bin/llama-gguf-split") else { return };
    let model = common::tiny_model();
    let dir = tempfile::tempdir().unwrap();
    // Both tools on the same arguments: (llama-gguf-split's output, ours).
    let both = |args: &[&OsStr]| {
        let mut ours: Vec<&OsStr> = vec!["gguf-split".as_ref()];
        ours.extend(args);
        (Command::new(&reference).args(args).output().unwrap(), common::quantforge(&ours))
    };
    let (ref_prefix, our_prefix) = (dir.path().join("ref"), dir.path().join("ours"));
    let split: [&OsStr; 3] = ["--split_max_tensors".as_ref(), "8".as_ref(), model.as_os_str()];
    let theirs = Command::new(&reference).args(split).arg(&ref_prefix).output().unwrap();
    assert!(theirs.status.success());
    common::quantforge_ok(&[&["gguf-split".as_ref()], &split[..], &[our_prefix.as_os_str()]].concat());
    let (theirs_files, ours_files) = (shards(&ref_prefix), shards(&our_prefix));
    assert_eq!(ours_files.len(), 3);
    for (t, o) in theirs_files.iter().zip(&ours_files) {
        assert_same_file(t, o);
    }

    let (ref_merged, our_merged) = (dir.path().join("ref-merged.gguf"), dir.path().join("merged.gguf"));
    let status = Command::new(&reference).arg("--merge").arg(&theirs_files[0]).arg(&ref_merged).output().unwrap();
    assert!(status.status.success());
    common::quantforge_ok(&[
        "gguf-split".as_ref(),
        "--delete-splits".as_ref(),
        "--merge".as_ref(),
        ours_files[0].as_os_str(),
        our_merged.as_os_str(),
    ]);
    assert_same_file(&our_merged, &ref_merged);
    assert!(ours_files.iter().all(|shard| !shard.exists()), "--delete-splits deletes the shards");

    // Misuse: llama-gguf-split's exit status, and its message.
    let model = model.as_os_str();
    let exists = our_merged.as_os_str();
    let misuses: [(&[&OsStr], &str); 7] = [
        (&["--split".as_ref(), "--merge".as_ref(), model, "x".as_ref()], "either --split or --merge"),
        (&["--split-max-size".as_ref(), "2K".as_ref(), model, "x".as_ref()], "supported units are M (megabytes)"),
        (&["--split-max-size".as_ref(), "0G".as_ref(), model, "x".as_ref()], "size must be a positive value"),
        (&["--frobnicate".as_ref(), model, "x".as_ref()], "unknown argument: --frobnicate"),
        (&[model], "bad arguments"),
        (&["--split-max-tensors".as_ref()], "invalid parameter for argument: --split-max-tensors"),
        (&["--merge".as_ref(), model, exists], "already exists"),
    ];
    for (args, message) in misuses {
        let (theirs, ours) = both(args);
        assert_eq!(ours.status.code(), theirs.status.code(), "{args:?}");
        for (who, output) in [("llama-gguf-split", &theirs), ("quantforge", &ours)] {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains(message), "{who} {args:?}: {stderr}");
        }
    }
    let (theirs, ours) = both(&["--help".as_ref()]);
    assert_eq!((ours.status.code(), theirs.status.code()), (Some(0), Some(0)));
    assert!(String::from_utf8_lossy(&ours.stdout).contains("--split-max-size N(M|G) max size per split"));
}
