//! PEFT LoRA adapters (issue 40): `convert-lora` writes the bytes
//! `convert_lora_to_gguf.py` writes, at every outtype, for a LLaMA 3
//! adapter over the attention projections (Q/K rows permuted), a Qwen2
//! one over its MLP with per-module ranks, adapters on fused projections
//! (GPT-NeoX, Falcon), on experts (Mixtral, Qwen3-MoE) and on the token
//! embedding; what the GGUF adapter cannot hold is refused by name, and a
//! recipe's `convert-lora` step is cached. `lora-merge` writes the bytes
//! `llama-export-lora` writes.
//! References: `tests/lora/make_references.sh` (the adapters are
//! `tests/lora/make_adapters.py`'s, committed).

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;

const CASES: [(&str, &str); 7] = [
    ("llama-attn", "tiny-llama-3-chat"),
    ("qwen2-mlp", "Qwen2.5-Tiny-Instruct"),
    ("neox-qkv", "pythia-tiny-deduped"),
    ("falcon-qkv", "falcon-tiny"),
    ("mixtral-experts", "Mixtral-Tiny-4x8"),
    ("qwen3moe-experts", "Qwen3-MoE-Tiny"),
    ("llama-embed", "tiny-llama-3-chat"),
];
const OUTTYPES: [&str; 4] = ["f32", "f16", "bf16", "q8_0"];

fn adapter(name: &str) -> PathBuf {
    common::repo().join("tests/data/lora/adapters").join(name)
}

fn base(name: &str) -> PathBuf {
    common::repo().join("tests/data/convert/checkpoints").join(name)
}

fn convert_lora(adapter: &Path, base: &Path, out: &Path, outtype: &str) -> std::process::Output {
    common::quantforge_with(&[&"convert-lora", &adapter, &out, &"--base", &base, &"--outtype", &outtype])
}

#[test]
fn convert_lora_writes_the_bytes_convert_lora_to_gguf_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (name, base_name) in CASES {
        for outtype in OUTTYPES {
            let out = dir.path().join(format!("{name}-{outtype}.gguf"));
            common::stdout_of_success(convert_lora(&adapter(name), &base(base_name), &out, outtype));
            let golden_path = common::repo().join(format!("tests/data/lora/{name}-{outtype}.json"));
            let golden: Value = serde_json::from_slice(&std::fs::read(golden_path).unwrap()).unwrap();
            let ours = common::sha256_hex(&std::fs::read(&out).unwrap());
            assert_eq!(ours, golden["file"]["sha256"].as_str().unwrap(), "{name} at {outtype}");
        }
    }
}

#[test]
fn what_a_gguf_adapter_cannot_hold_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let qwen = base("Qwen2.5-Tiny-Instruct");
    let refused = |adapter: &Path| {
        let result = convert_lora(adapter, &qwen, &out, "f16");
        assert!(!result.status.success());
        assert!(!out.exists(), "nothing is written");
        String::from_utf8(result.stderr).unwrap()
    };
    // A per-module alpha: one alpha a file, so the converter's file scales it wrong.
    let err = refused(&adapter("qwen2-alpha"));
    assert!(err.contains("alpha_pattern") && err.contains("v_proj") && err.contains("one alpha"), "{err}");

    // Settings edited into a copy of a good adapter.
    let edited = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(adapter("qwen2-mlp")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
        let path = copy.path().join("adapter_config.json");
        let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(config.as_object_mut().unwrap());
        std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
        copy
    };
    for (key, value, says) in [
        ("use_dora", Value::Bool(true), "DoRA"),
        ("use_rslora", Value::Bool(true), "alpha/sqrt(r)"),
        ("modules_to_save", serde_json::json!(["lm_head"]), "fully trained modules"),
        ("bias", Value::from("all"), "trained biases"),
        ("fan_in_fan_out", Value::Bool(true), "llama.cpp cannot apply"),
        ("a_setting_from_the_future", Value::from(1), "not a setting this converter models"),
    ] {
        let copy = edited(&|config| {
            config.insert(key.to_owned(), value.clone());
        });
        let err = refused(copy.path());
        assert!(err.contains(key) && err.contains(says) && err.contains("adapter_config.json"), "{key}: {err}");
    }
    // A rank the tensors do not have: the tensor and both shapes named.
    let copy = edited(&|config| {
        config["rank_pattern"]["down_proj"] = Value::from(2);
    });
    let err = refused(copy.path());
    assert!(err.contains("model.layers.0.mlp.down_proj.weight") && err.contains("rank for it is 2"), "{err}");
    // Another architecture's base: the first pair has no name in it.
    let result = convert_lora(&adapter("qwen2-mlp"), &base("gpt2-tiny"), &out, "f16");
    let err = String::from_utf8(result.stderr).unwrap();
    assert!(!result.status.success() && err.contains("no GGUF name in the gpt2 conversion"), "{err}");
}

#[test]
fn a_recipe_converts_an_adapter_once() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("lora.toml");
    std::fs::write(
        &recipe,
        format!(
            r#"
[input.adapter]
path = "{}"

[input.base]
path = "{}"

[step.gguf]
op = "convert-lora"
from = "adapter"
base = "base"
outtype = "q8_0"

[step.out]
op = "export"
from = "gguf"
path = "adapter.gguf"
"#,
            adapter("llama-attn").display(),
            base("tiny-llama-3-chat").display()
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let run = || -> Value {
        let out = common::quantforge_with(&[&"--json", &"run", &recipe, &"--cache-dir", &cache]);
        serde_json::from_str(&common::stdout_of_success(out)).unwrap()
    };
    let first = run();
    let golden: Value =
        serde_json::from_slice(&std::fs::read(common::repo().join("tests/data/lora/llama-attn-q8_0.json")).unwrap())
            .unwrap();
    let written = std::fs::read(dir.path().join("adapter.gguf")).unwrap();
    assert_eq!(common::sha256_hex(&written), golden["file"]["sha256"].as_str().unwrap());
    assert!(common::encoded(&first) > 0, "{first}");
    // The base is read for its config alone: its weights are not hashed.
    let base_files: Vec<&str> = first["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|input| input["name"] == "base")
        .map(|input| input["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect())
        .unwrap();
    assert!(base_files.len() == 1 && base_files[0].ends_with("config.json"), "{base_files:?}");
    let again = run();
    assert_eq!(again["totals"]["hit"], again["totals"]["nodes"], "{again}");
    assert_eq!(common::encoded(&again), 0, "{again}");
}

/// GGUF files of the fixtures in `dir`: `base-{f32,f16,bf16,q8_0}.gguf` (the
/// LLaMA checkpoint converted, Q8_0 quantized from F32), `qwen-f16.gguf`,
/// `mixtral-f16.gguf`, `neox-f16.gguf`, and the adapters
/// `llama-lora-{f16,f32}.gguf`, `qwen-lora-{f16,f32}.gguf`,
/// `{mixtral,neox,embed}-lora-f16.gguf`.
fn merge_fixtures(dir: &Path) {
    let llama = base("tiny-llama-3-chat");
    let qwen = base("Qwen2.5-Tiny-Instruct");
    let convert = |checkpoint: &Path, out: &str, outtype: &str, pre: &str| {
        let out = dir.join(out);
        common::stdout_of_success(common::quantforge_with(&[
            &"convert",
            &checkpoint,
            &out,
            &"--outtype",
            &outtype,
            &"--pre",
            &pre,
        ]));
    };
    for outtype in ["f32", "f16", "bf16"] {
        convert(&llama, &format!("base-{outtype}.gguf"), outtype, "llama-bpe");
    }
    convert(&qwen, "qwen-f16.gguf", "f16", "qwen2");
    convert(&base("Mixtral-Tiny-4x8"), "mixtral-f16.gguf", "f16", "llama-bpe");
    convert(&base("pythia-tiny-deduped"), "neox-f16.gguf", "f16", "olmo");
    for (name, adapter_name, base_name) in [
        ("mixtral", "mixtral-experts", "Mixtral-Tiny-4x8"),
        ("neox", "neox-qkv", "pythia-tiny-deduped"),
        ("embed", "llama-embed", "tiny-llama-3-chat"),
    ] {
        let out = dir.join(format!("{name}-lora-f16.gguf"));
        common::stdout_of_success(convert_lora(&adapter(adapter_name), &base(base_name), &out, "f16"));
    }
    let (f32_base, q8_base) = (dir.join("base-f32.gguf"), dir.join("base-q8_0.gguf"));
    common::stdout_of_success(common::quantforge_with(&[&"quantize", &f32_base, &q8_base, &"Q8_0"]));
    for outtype in ["f16", "f32"] {
        let out = dir.join(format!("llama-lora-{outtype}.gguf"));
        common::stdout_of_success(convert_lora(&adapter("llama-attn"), &llama, &out, outtype));
        let out = dir.join(format!("qwen-lora-{outtype}.gguf"));
        common::stdout_of_success(convert_lora(&adapter("qwen2-mlp"), &qwen, &out, outtype));
    }
}

#[test]
fn lora_merge_writes_the_bytes_llama_export_lora_writes() {
    let Some(export_lora) = common::reference("build/bin/llama-export-lora") else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    merge_fixtures(d);
    let peft = adapter("llama-attn");
    let peft_base = base("tiny-llama-3-chat");
    let (peft, peft_base) = (peft.to_str().unwrap(), peft_base.to_str().unwrap());
    // Base and adapter types; the Qwen adapter's ranks 4, 8 and 16 take
    // both of ggml's dot-product orders; two adapters, one scaled, in
    // either order on the command line; a PEFT directory, converted on
    // the way as convert_lora_to_gguf.py converts it by default (f32);
    // stacks of experts (a pair per expert), a fused projection, the token
    // embedding (its A transposed).
    let cases: [(&str, &[&str], &[&str]); 11] = [
        ("base-f32.gguf", &["--lora", "llama-lora-f16.gguf"], &["--lora", "llama-lora-f16.gguf"]),
        ("base-f16.gguf", &["--lora", "llama-lora-f32.gguf"], &["--lora", "llama-lora-f32.gguf"]),
        ("base-bf16.gguf", &["--lora", "llama-lora-f16.gguf"], &["--lora", "llama-lora-f16.gguf"]),
        ("base-q8_0.gguf", &["--lora", "llama-lora-f32.gguf"], &["--lora", "llama-lora-f32.gguf"]),
        ("qwen-f16.gguf", &["--lora-scaled", "qwen-lora-f16.gguf:0.5"], &["--lora-scaled", "qwen-lora-f16.gguf:0.5"]),
        (
            "qwen-f16.gguf",
            &["--lora", "qwen-lora-f16.gguf", "--lora-scaled", "qwen-lora-f32.gguf:-1.25"],
            &["--lora", "qwen-lora-f16.gguf", "--lora-scaled", "qwen-lora-f32.gguf:-1.25"],
        ),
        (
            "qwen-f16.gguf",
            &["--lora-scaled", "qwen-lora-f32.gguf:-1.25", "--lora", "qwen-lora-f16.gguf"],
            &["--lora-scaled", "qwen-lora-f32.gguf:-1.25", "--lora", "qwen-lora-f16.gguf"],
        ),
        ("base-f16.gguf", &["--lora", "llama-lora-f32.gguf"], &["--lora", peft, "--lora-base", peft_base]),
        ("mixtral-f16.gguf", &["--lora", "mixtral-lora-f16.gguf"], &["--lora", "mixtral-lora-f16.gguf"]),
        ("neox-f16.gguf", &["--lora", "neox-lora-f16.gguf"], &["--lora", "neox-lora-f16.gguf"]),
        ("base-q8_0.gguf", &["--lora", "embed-lora-f16.gguf"], &["--lora", "embed-lora-f16.gguf"]),
    ];
    for (n, (base, theirs_args, ours_args)) in cases.iter().enumerate() {
        let (theirs, ours) = (format!("theirs-{n}.gguf"), format!("ours-{n}.gguf"));
        let reference = std::process::Command::new(&export_lora)
            .args(["-m", base])
            .args(*theirs_args)
            .args(["-o", &theirs])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
        let mut args: Vec<&OsStr> = vec![OsStr::new("lora-merge"), OsStr::new(base), OsStr::new(&ours)];
        args.extend(ours_args.iter().map(OsStr::new));
        common::stdout_of_success(common::quantforge_in(d, &args));
        assert!(
            std::fs::read(d.join(&ours)).unwrap() == std::fs::read(d.join(&theirs)).unwrap(),
            "case {n}: {base} {ours_args:?}"
        );
    }
    // The order is in the bytes: the two orders above differ.
    assert!(std::fs::read(d.join("ours-5.gguf")).unwrap() != std::fs::read(d.join("ours-6.gguf")).unwrap());
}

#[test]
fn lora_merge_refuses_what_it_cannot_merge_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    merge_fixtures(d);
    let refused = |args: &[&str]| {
        let mut full = vec![OsStr::new("lora-merge")];
        full.extend(args.iter().map(OsStr::new));
        let out = common::quantforge_in(d, &full);
        assert!(!out.status.success() && !d.join("out.gguf").exists(), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let err = refused(&["qwen-f16.gguf", "out.gguf", "--lora", "llama-lora-f16.gguf"]);
    assert!(err.contains("an adapter for `llama`, where the base is `qwen2`"), "{err}");
    let err = refused(&["base-f16.gguf", "out.gguf", "--lora", "base-f32.gguf"]);
    assert!(err.contains("not a LoRA adapter"), "{err}");
    let err = refused(&["base-f16.gguf", "out.gguf", "--lora-scaled", "llama-lora-f16.gguf"]);
    assert!(err.contains("FILE:SCALE"), "{err}");
    // A PEFT adapter whose base_model_name_or_path is nowhere here.
    let peft = adapter("llama-attn");
    let err = refused(&["base-f16.gguf", "out.gguf", "--lora", peft.to_str().unwrap()]);
    assert!(err.contains("its base model `tiny-llama-3-chat`") && err.contains("--lora-base DIR"), "{err}");
    // A Q8_0 adapter: llama-export-lora refuses it too.
    let q8 = d.join("llama-lora-q8_0.gguf");
    common::stdout_of_success(convert_lora(&adapter("llama-attn"), &base("tiny-llama-3-chat"), &q8, "q8_0"));
    let err = refused(&["base-f16.gguf", "out.gguf", "--lora", "llama-lora-q8_0.gguf"]);
    assert!(err.contains("blk.0.attn_k.weight.lora_a") && err.contains("quantized adapters are not merged"), "{err}");
    // An adapter pair for a tensor the base lacks is named.
    let filter = d.join("no-q.toml");
    let text = "[input.m]\npath = \"base-f16.gguf\"\n\n[step.f]\nop = \"filter\"\nfrom = \"m\"\n\
                exclude = [\"attn_q\"]\n\n[step.out]\nop = \"export\"\nfrom = \"f\"\npath = \"no-q.gguf\"\n";
    std::fs::write(&filter, text).unwrap();
    common::stdout_of_success(common::quantforge_with(&[&"run", &filter]));
    let err = refused(&["no-q.gguf", "out.gguf", "--lora", "llama-lora-f16.gguf"]);
    assert!(err.contains("`blk.0.attn_q.weight` has no tensor of that name in the base model"), "{err}");
}

#[test]
fn after_an_adapter_change_a_recipe_re_encodes_only_what_it_targets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recipe = d.join("merged.toml");
    let write = |scale: &str| {
        let text = format!(
            r#"
[input.hf]
path = "{}"

[input.adapter]
path = "{}"

[step.base]
op = "convert"
from = "hf"
outtype = "f32"
pre = "llama-bpe"

[step.lora]
op = "convert-lora"
from = "adapter"
base = "hf"
outtype = "f16"

[step.merged]
op = "lora-merge"
from = ["base", "lora"]
scale = {{ lora = {scale} }}

[step.q]
op = "quantize"
from = "merged"
preset = "Q8_0"

[step.out]
op = "export"
from = "q"
path = "merged-q8_0.gguf"
"#,
            base("tiny-llama-3-chat").display(),
            adapter("llama-attn").display()
        );
        std::fs::write(&recipe, text).unwrap();
    };
    let cache = d.join("cache");
    let run = || -> Value {
        let out = common::quantforge_with(&[&"--json", &"run", &recipe, &"--cache-dir", &cache]);
        serde_json::from_str(&common::stdout_of_success(out)).unwrap()
    };
    write("1.0");
    let cold = run();
    write("0.5");
    let changed = run();
    // The adapter targets q, k, v and o of both blocks: eight tensors.
    let quantized = |report: &Value| common::encoded(report);
    assert!(quantized(&cold) > 8, "{cold}");
    assert_eq!(quantized(&changed), 8, "{changed}");

    // The same bytes as the one-shot commands.
    merge_fixtures(d);
    let (merged, one_shot) = (d.join("merged.gguf"), d.join("one-shot.gguf"));
    common::stdout_of_success(common::quantforge_with(&[
        &"lora-merge",
        &d.join("base-f32.gguf"),
        &merged,
        &"--lora-scaled",
        &format!("{}:0.5", d.join("llama-lora-f16.gguf").display()),
    ]));
    common::stdout_of_success(common::quantforge_with(&[&"quantize", &merged, &one_shot, &"Q8_0"]));
    assert!(std::fs::read(&one_shot).unwrap() == std::fs::read(d.join("merged-q8_0.gguf")).unwrap());
}
