//! The headline: `quantforge quantize` writes the same bytes as
//! llama-quantize (the reference build from scripts/fetch-references.sh
//! --build) for every preset, with and without an importance matrix, and
//! with its flags. Skipped, with a message, where the reference build is
//! absent; CI builds it.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const PRESETS: &[&str] = &[
    "Q2_K",
    "Q2_K_S",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "IQ4_NL",
    "IQ4_XS",
    "IQ1_S",
    "IQ1_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ2_M",
    "IQ3_XXS",
    "IQ3_XS",
    "IQ3_S",
    "IQ3_M",
    "TQ1_0",
    "TQ2_0",
    "MXFP4_MOE",
    "Q1_0",
    "Q2_0",
    "F16",
    "BF16",
    "F32",
    "COPY",
];

/// Runs both tools with `flags` on `input` for `preset`; returns a
/// description of the difference, if any.
fn compare(llama: &Path, dir: &Path, input: &Path, preset: &str, flags: &[&str]) -> Option<String> {
    let ours = dir.join("ours.gguf");
    let theirs = dir.join("theirs.gguf");
    let _ = std::fs::remove_file(&ours);
    let _ = std::fs::remove_file(&theirs);
    let mut args: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
    args.extend([input.as_os_str(), theirs.as_os_str(), OsStr::new(preset), OsStr::new("2")]);
    let reference = Command::new(llama).args(&args).output().unwrap();
    args[flags.len() + 1] = ours.as_os_str();
    let mut cli: Vec<&OsStr> = vec![OsStr::new("quantize")];
    cli.extend(args);
    let output = common::quantforge(&cli);
    if !reference.status.success() {
        // llama-quantize refuses (e.g. Q2_K_S without an imatrix): so must we.
        let theirs = String::from_utf8_lossy(&reference.stderr);
        let stderr = String::from_utf8_lossy(&output.stderr);
        return match (output.status.success(), theirs.contains("requires an imatrix")) {
            (false, true) if stderr.contains("needs an importance matrix") => None,
            _ => Some(format!("{preset} {flags:?}: llama-quantize failed ({theirs}), quantforge said: {stderr}")),
        };
    }
    if !output.status.success() {
        return Some(format!("{preset} {flags:?}: quantforge failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    let (a, b) = (std::fs::read(&ours).unwrap(), std::fs::read(&theirs).unwrap());
    if a == b {
        return None;
    }
    let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    Some(format!("{preset} {flags:?}: files differ from byte {first} (sizes {} and {})", a.len(), b.len()))
}

fn check_all(input: &Path, presets: &[&str], flag_sets: &[&[&str]]) {
    let Some(llama) = common::llama_quantize() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for flags in flag_sets {
        for preset in presets {
            failures.extend(compare(&llama, dir.path(), input, preset, flags));
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

fn imatrix(format: &str) -> String {
    common::repo().join(format!("tests/data/imatrix/tiny-llama.imatrix.{format}")).display().to_string()
}

/// Every architecture fixture (language models and mmproj files), whose
/// families trip different rules: experts, fused projections, per-layer head
/// counts, `clip` files without language hyperparameters. Not Q2_K on mmproj
/// files: its `attn_v` rule asks layer 0's head counts of a model with no
/// layers, where llama-quantize aborts (quantforge reads no grouping there).
#[test]
fn every_architecture_fixture() {
    let dir = common::repo().join("tests/data/arch");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".gguf") && !name.starts_with("broken-") && !name.starts_with("unknown-")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 26, "{files:?}");
    for file in files {
        let mmproj = file.to_string_lossy().ends_with("-mmproj.gguf");
        let presets: &[&str] = if mmproj { &["Q4_K_M", "Q8_0"] } else { &["Q4_K_M", "Q2_K", "Q8_0"] };
        check_all(&file, presets, &[&[]]);
    }
}

#[test]
fn tiny_model_every_preset() {
    check_all(&common::tiny_model(), PRESETS, &[&[]]);
}

#[test]
fn tiny_model_every_preset_with_imatrix() {
    let (gguf, dat) = (imatrix("gguf"), imatrix("dat"));
    check_all(&common::tiny_model(), PRESETS, &[&["--imatrix", &gguf], &["--imatrix", &dat]]);
}

#[test]
fn tiny_model_flags() {
    let gguf = imatrix("gguf");
    let flag_sets: &[&[&str]] = &[
        &["--pure"],
        &["--leave-output-tensor"],
        &["--output-tensor-type", "q8_0", "--token-embedding-type", "q4_k"],
        &["--tensor-type", "attn_v=q8_0", "--tensor-type", "ffn_down=q5_k"],
        &["--override-kv", "general.name=str:renamed", "--override-kv", "llama.context_length=int:-4096"],
        &["--imatrix", &gguf, "--include-weights", "attn"],
        &["--imatrix", &gguf, "--exclude-weights", "ffn_down"],
    ];
    check_all(&common::tiny_model(), &["Q4_K_M", "Q3_K_S", "IQ4_XS"], flag_sets);
}

/// `--tensor-type-file`: its entries, spread over lines and spaces, read as
/// llama-quantize reads them.
#[test]
fn tiny_model_tensor_type_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("types.txt");
    std::fs::write(&file, "attn_v=q8_0\n  ffn_down=q5_k attn_q=IQ4_XS\n\n").unwrap();
    let file = file.display().to_string();
    check_all(&common::tiny_model(), &["Q4_K_M", "IQ3_S"], &[&["--tensor-type-file", &file]]);
}

/// `--prune-layers`: the tensors of the layers given go, the later layers
/// take new numbers, `block_count` is the count kept; with an importance
/// matrix found by the old names.
#[test]
fn tiny_model_prune_layers() {
    let gguf = imatrix("gguf");
    let flag_sets: &[&[&str]] =
        &[&["--prune-layers", "0"], &["--prune-layers", "1,1"], &["--prune-layers", "0", "--imatrix", &gguf]];
    check_all(&common::tiny_model(), &["Q4_K_M", "IQ2_XS"], flag_sets);
}

/// `COPY` of a file without `general.file_type` writes the file type
/// llama.cpp's loader guesses (F16, flagged as guessed: 1025), as llama-quantize does.
#[test]
fn copy_of_a_file_without_a_file_type() {
    let dir = tempfile::tempdir().unwrap();
    let unlabelled = dir.path().join("unlabelled.gguf");
    common::stdout_of_success(common::quantforge_with(&[
        &"edit",
        &common::tiny_model(),
        &unlabelled,
        &"--delete",
        &"general.file_type",
    ]));
    check_all(&unlabelled, &["COPY"], &[&[]]);
}

/// `quantize IN TYPE [NTHREADS]`: the output is named as llama-quantize
/// names it, beside the input, with the same bytes: by the type's entry in
/// its list, so an alias keeps its name and a number takes the first
/// entry's (12 is `Q3_K`, listed before `Q3_K_M`).
#[test]
fn tiny_model_output_named_after_the_type() {
    let Some(llama) = common::llama_quantize() else { return };
    for (typed, name) in [("q5_k_m", "Q5_K_M"), ("Q4_K", "Q4_K"), ("12", "Q3_K"), ("41", "Q2_0")] {
        let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for dir in [&ours, &theirs] {
            std::fs::copy(common::tiny_model(), dir.path().join("model.gguf")).unwrap();
        }
        let status = Command::new(&llama).arg(theirs.path().join("model.gguf")).args([typed, "2"]).output().unwrap();
        assert!(status.status.success());
        common::stdout_of_success(common::quantforge(&[
            OsStr::new("quantize"),
            ours.path().join("model.gguf").as_os_str(),
            OsStr::new(typed),
            OsStr::new("2"),
        ]));
        let name = format!("ggml-model-{name}.gguf");
        let read = |dir: &tempfile::TempDir| std::fs::read(dir.path().join(&name)).unwrap();
        assert!(read(&ours) == read(&theirs), "{typed}: {name} differs");
    }
}

/// Gemma 3 270M: its F16 version made by our `dequantize` equals
/// llama-quantize's own conversion, and a few presets from it (with and
/// without a real importance matrix) are byte-identical. Every preset from
/// F16, BF16 and F32 is checked by scripts/verify-gemma.sh.
#[test]
fn gemma_presets() {
    let (Some(llama), Some(gemma)) = (common::llama_quantize(), common::gemma()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("gemma-f16.gguf");
    let output = common::quantforge(&["dequantize".as_ref(), gemma.as_os_str(), f16.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let reference = dir.path().join("reference-f16.gguf");
    let status = Command::new(&llama)
        .args(["--allow-requantize".as_ref(), gemma.as_os_str(), reference.as_os_str(), "F16".as_ref()])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    assert!(std::fs::read(&f16).unwrap() == std::fs::read(&reference).unwrap(), "F16 versions differ");
    std::fs::remove_file(&reference).unwrap();

    let imatrix = common::repo().join("tests/data/imatrix/gemma-3-270m.imatrix.gguf").display().to_string();
    let mut failures = Vec::new();
    let prune = ["--imatrix", imatrix.as_str(), "--prune-layers", "0,5,12"];
    for (preset, flags) in [
        ("Q4_K_M", vec![]),
        ("Q8_0", vec![]),
        ("Q4_K_M", vec!["--imatrix", imatrix.as_str()]),
        ("IQ3_S", vec!["--imatrix", imatrix.as_str()]),
        // Slabs of under a hundred rows instead of 1,638: the same bytes.
        ("Q1_0", vec!["--max-buffer-size", "1"]),
        ("Q2_0", vec!["--imatrix", imatrix.as_str()]),
        // Eighteen layers, renumbered past ten; the matrix found by the layers' old names.
        ("Q4_K_M", prune.to_vec()),
    ] {
        failures.extend(compare(&llama, dir.path(), &f16, preset, &flags));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `(tensor, columns, block, wanted, written)` of each fallback a run
/// warned about, and its closing `N of M` count, from text in either tool's
/// words.
type Warned = (Vec<(String, u64, u64, String, String)>, Option<(u64, u64)>);

fn warned(stderr: &str) -> Warned {
    let mut fallbacks = Vec::new();
    let mut count = None;
    for line in stderr.lines() {
        let line = line.trim_start_matches("warning: ");
        // `NAME - [ncols] C [columns] not divisible by B (required for type T) -> falling back to U`
        if let Some((name, rest)) = line.split_once(" - ")
            && let Some((numbers, rest)) = rest.split_once("(required for type")
            && let Some((wanted, written)) = rest.split_once(") -> falling back to")
        {
            let numbers: Vec<u64> = numbers.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            // llama.cpp names types in ggml's case (`q4_K`).
            let (wanted, written) = (wanted.trim().to_uppercase(), written.trim().to_uppercase());
            fallbacks.push((name.trim().to_owned(), numbers[0], numbers[1], wanted, written));
        }
        let counted = line.rsplit("WARNING: ").next().unwrap_or(line);
        if let Some((counts, _)) = counted.split_once(" tensor(s) required fallback quantization")
            && let Some((n, of)) = counts.split_once(" of ")
        {
            count = Some((n.trim().parse().unwrap(), of.trim().parse().unwrap()));
        }
    }
    (fallbacks, count)
}

/// A quantization whose rows do not fit the type's blocks says, tensor by
/// tensor, what llama-quantize says — on the first run and on a run that
/// takes the result from the cache — and `--json` carries the same.
#[test]
fn fallbacks_are_said_as_llama_quantize_says_them() {
    let Some(llama) = common::llama_quantize() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = common::repo().join("tests/data/arch/gemma3.gguf");
    let theirs = Command::new(&llama).arg(&input).arg(d.join("theirs.gguf")).arg("Q4_K_M").output().unwrap();
    assert!(theirs.status.success(), "{}", String::from_utf8_lossy(&theirs.stderr));
    let expected = warned(&String::from_utf8_lossy(&theirs.stderr));
    assert!(!expected.0.is_empty() && expected.1.is_some(), "the fixture falls back in llama-quantize");

    let cache = d.join("cache");
    for run in ["first", "cached"] {
        let ours =
            common::quantforge_with(&[&"quantize", &"--cache-dir", &cache, &input, &d.join("ours.gguf"), &"Q4_K_M"]);
        assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
        assert_eq!(warned(&String::from_utf8_lossy(&ours.stderr)), expected, "{run} run");
    }
    let json = common::quantforge_with(&[&"--json", &"quantize", &input, &d.join("json.gguf"), &"Q4_K_M"]);
    let report: serde_json::Value = serde_json::from_str(&common::stdout_of_success(json)).unwrap();
    let fallbacks = &report["fallbacks"];
    let from_json: Vec<_> = fallbacks["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap().to_owned();
            let (wanted, written) = (text("wanted").to_uppercase(), text("written").to_uppercase());
            (text("tensor"), f["columns"].as_u64().unwrap(), f["block"].as_u64().unwrap(), wanted, written)
        })
        .collect();
    let count = (fallbacks["tensors"].as_array().unwrap().len() as u64, fallbacks["of"].as_u64().unwrap());
    assert_eq!((from_json, Some(count)), expected);

    // A recipe says it per quantization, naming the step's node.
    let recipe = d.join("ladder.toml");
    let text = format!(
        "[input.m]\npath = {:?}\n\n[step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = [\"Q4_K_M\", \"Q8_0\"]\n\n\
         [step.out]\nop = \"export\"\nfrom = \"q\"\npath = \"out-{{preset}}.gguf\"\n",
        input.display().to_string()
    );
    std::fs::write(&recipe, text).unwrap();
    for run in ["first", "cached"] {
        let out = common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &cache]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let q4: String =
            stderr.lines().filter_map(|l| l.strip_prefix("warning: q[preset=Q4_K_M]: ")).collect::<Vec<_>>().join("\n");
        assert_eq!(warned(&q4), expected, "{run} recipe run: {stderr}");
        assert!(!stderr.contains("q[preset=Q8_0]"), "Q8_0's blocks of 32 fit: {stderr}");
    }
}
