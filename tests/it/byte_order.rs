//! Big-endian GGUF against gguf-py's `gguf_convert_endian.py` (the pinned
//! tree's, run unmodified): `edit --byte-order` writes its bytes both ways,
//! refuses what it refuses, and quantize, dequantize and merge read a
//! big-endian file as its little-endian twin (same output bytes).

use crate::common;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The converter script and a Python that runs it, or `None` (with a message).
fn converter() -> Option<(String, PathBuf)> {
    let script = common::reference("gguf-py/gguf/scripts/gguf_convert_endian.py")?;
    Some((common::python_with("numpy, tqdm", "numpy tqdm")?, script))
}

/// Runs the script on `path` in place, answering its prompt.
fn convert_endian(python: &str, script: &Path, path: &Path, order: &str) -> Output {
    let mut child = Command::new(python)
        .arg(script)
        .arg(path)
        .arg(order)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    child.stdin.take().unwrap().write_all(b"YES\n").unwrap();
    child.wait_with_output().unwrap()
}

/// A copy of `path` converted to `order` by the script.
fn converted_copy(python: &str, script: &Path, path: &Path, order: &str, to: &Path) -> PathBuf {
    std::fs::copy(path, to).unwrap();
    let out = convert_endian(python, script, to, order);
    assert!(out.status.success(), "gguf_convert_endian.py {order}: {}", String::from_utf8_lossy(&out.stderr));
    to.to_owned()
}

fn fixtures(python: &str, dir: &Path) {
    let gguf_py = common::reference("gguf-py").expect("the tree holds gguf-py");
    let out = Command::new(python)
        .arg(common::repo().join("tests/gguf_py/byte_order_fixtures.py"))
        .arg(gguf_py)
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "byte_order_fixtures.py: {}", String::from_utf8_lossy(&out.stderr));
}

fn assert_same_file(a: &Path, b: &Path) {
    assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "{} and {} differ", a.display(), b.display());
}

#[test]
fn edit_writes_either_byte_order_as_gguf_convert_endian_does() {
    let Some((python, script)) = converter() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fixtures(&python, d);
    for little in [d.join("types.gguf"), common::tiny_model()] {
        let stem = little.file_stem().unwrap().to_str().unwrap().to_owned();
        let big = converted_copy(&python, &script, &little, "big", &d.join(format!("{stem}-theirs-big.gguf")));
        let ours_big = d.join(format!("{stem}-ours-big.gguf"));
        common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"edit", &little, &ours_big, &"--byte-order", &"big"]);
        assert_same_file(&ours_big, &big);

        let ours_little = d.join(format!("{stem}-ours-little.gguf"));
        common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"edit", &big, &ours_little, &"--byte-order", &"little"]);
        assert_same_file(&ours_little, &little);

        // With no order asked for, an edit keeps the input's, as gguf-py's
        // scripts do; asked for the order it has, the bytes are the same.
        for order in [None, Some("big")] {
            let kept = d.join(format!("{stem}-kept-{order:?}.gguf"));
            match order {
                None => common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"edit", &big, &kept]),
                Some(order) => {
                    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"edit", &big, &kept, &"--byte-order", &order])
                }
            };
            assert_same_file(&kept, &big);
        }
    }
}

#[test]
fn a_type_without_a_big_endian_layout_is_refused_by_name() {
    let Some((python, script)) = converter() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fixtures(&python, d);
    let copy = d.join("theirs.gguf");
    std::fs::copy(d.join("q5_k.gguf"), &copy).unwrap();
    let theirs = convert_endian(&python, &script, &copy, "big");
    assert!(!theirs.status.success());
    assert!(String::from_utf8_lossy(&theirs.stderr).contains("Cannot handle type Q5_K for tensor 't.q5_k'"));

    let refusal = "tensor `t.q5_k` is Q5_K, which has no big-endian layout (gguf_convert_endian.py converts \
                   F32, F16, BF16, Q1_0, Q4_0, Q8_0, Q4_K, Q6_K, TQ2_0, MXFP4, NVFP4)";
    let out = d.join("ours.gguf");
    let err =
        common::quantforge_err::<&dyn AsRef<OsStr>>(&[&"edit", &d.join("q5_k.gguf"), &out, &"--byte-order", &"big"]);
    assert!(err.contains(refusal), "{err}");
    assert!(!out.exists());

    // A big-endian file with such a tensor (GGUFWriter writes one) reads,
    // and copies in its own order untouched; its Q5_K bytes are refused
    // wherever they would have to be understood.
    let big = d.join("q5_k_be.gguf");
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"inspect", &big]);
    let kept = d.join("kept.gguf");
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"edit", &big, &kept, &"--set", &"general.name=str:kept"]);
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[
        &"edit",
        &kept,
        &d.join("back.gguf"),
        &"--set",
        &"general.name=str:byte order fixture",
    ]);
    assert_same_file(&d.join("back.gguf"), &big);
    for args in [vec!["edit", "--byte-order", "little"], vec!["quantize", "--allow-requantize"], vec!["dequantize"]] {
        let mut all: Vec<&dyn AsRef<OsStr>> = args.iter().map(|a| a as &dyn AsRef<OsStr>).collect();
        all.push(&big);
        all.push(&out);
        if args[0] == "quantize" {
            all.push(&"Q8_0");
        }
        let err = common::quantforge_err::<&dyn AsRef<OsStr>>(&all);
        assert!(err.contains(refusal) && err.contains("q5_k_be.gguf"), "{args:?}: {err}");
        assert!(!out.exists());
    }
}

#[test]
fn big_endian_inputs_give_the_bytes_of_their_little_endian_twins() {
    let Some((python, script)) = converter() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let little = common::tiny_model();
    let big = converted_copy(&python, &script, &little, "big", &d.join("big.gguf"));
    let jobs: [&[&str]; 3] = [
        &["quantize", "IN", "OUT", "Q4_K_M"],
        &["quantize", "IN", "OUT", "Q6_K"],
        &["dequantize", "IN", "OUT", "--type", "f32"],
    ];
    for job in jobs {
        let outputs = [&little, &big].map(|input| {
            let out = d.join(format!("{}-{}.gguf", job.join("-"), input.file_stem().unwrap().to_str().unwrap()));
            let args: Vec<&OsStr> = job
                .iter()
                .map(|a| match *a {
                    "IN" => input.as_os_str(),
                    "OUT" => out.as_os_str(),
                    a => OsStr::new(a),
                })
                .collect();
            common::stdout_of_success(common::quantforge(&args));
            out
        });
        assert_same_file(&outputs[0], &outputs[1]);
    }

    // Shards converted one by one merge into the little-endian file, by
    // `merge` and by `gguf-split --merge`.
    let shards: Vec<PathBuf> = {
        common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"split", &little, &d.join("tiny"), &"--max-tensors", &"8"]);
        (1..=3).map(|i| d.join(format!("tiny-{i:05}-of-00003.gguf"))).collect()
    };
    for shard in &shards {
        convert_endian(&python, &script, shard, "big");
    }
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"merge", &shards[0], &d.join("merged.gguf")]);
    assert_same_file(&d.join("merged.gguf"), &little);
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[
        &"gguf-split",
        &"--merge",
        &shards[0],
        &d.join("merged-like-llama.gguf"),
    ]);
    let kept_keys = d.join("merged-little-shards.gguf");
    for shard in &shards {
        convert_endian(&python, &script, shard, "little");
    }
    common::quantforge_ok::<&dyn AsRef<OsStr>>(&[&"gguf-split", &"--merge", &shards[0], &kept_keys]);
    assert_same_file(&d.join("merged-like-llama.gguf"), &kept_keys);
}

#[test]
fn a_recipe_export_writes_big_endian_and_a_rerun_costs_nothing() {
    let Some((python, script)) = converter() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recipe = d.join("recipe.toml");
    let model = common::tiny_model();
    std::fs::write(
        &recipe,
        format!(
            r#"
[recipe]
name = "byte-order"

[input.model]
path = "{}"

[step.q8]
op = "quantize"
from = "model"
preset = "Q8_0"

[step.little]
op = "export"
from = "q8"
path = "little.gguf"

[step.big]
op = "export"
from = "q8"
path = "big.gguf"
byte_order = "big"
"#,
            model.display()
        ),
    )
    .unwrap();
    let cache = d.join("cache");
    let first = common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &cache, &"--json"]);
    let first: serde_json::Value = serde_json::from_str(&common::stdout_of_success(first)).unwrap();
    // Both files report the tensors they hold, whatever their byte order.
    let counts: Vec<u64> = first["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["files"].as_array().into_iter().flatten())
        .map(|f| f["tensors"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2, "{first}");
    assert!(counts[0] > 0 && counts[0] == counts[1], "{first}");
    let theirs = converted_copy(&python, &script, &d.join("little.gguf"), "big", &d.join("theirs.gguf"));
    assert_same_file(&d.join("big.gguf"), &theirs);

    let rerun = common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &cache, &"--json"]);
    let report: serde_json::Value = serde_json::from_str(&common::stdout_of_success(rerun)).unwrap();
    assert_eq!(common::encoded(&report), 0, "{report}");

    std::fs::write(&recipe, std::fs::read_to_string(&recipe).unwrap().replace(r#""big""#, r#""bigg""#)).unwrap();
    let err = common::quantforge_err::<&dyn AsRef<OsStr>>(&[&"run", &recipe, &"--cache-dir", &cache]);
    assert!(err.contains("`bigg` is not a byte order") && err.contains("did you mean `big`?"), "{err}");
}
