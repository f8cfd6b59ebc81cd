//! PEFT LoRA adapters (issue 40): `convert-lora` writes the bytes
//! `convert_lora_to_gguf.py` writes, at every outtype, for a LLaMA 3
//! adapter over the attention projections (Q/K rows permuted) and a Qwen2
//! one over its MLP with per-module ranks; what the GGUF adapter cannot
//! hold is refused by name, and a recipe's `convert-lora` step is cached.
//! References: `tests/lora/make_references.sh` (the adapters are
//! `tests/lora/make_adapters.py`'s, committed).

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

const CASES: [(&str, &str); 2] = [("llama-attn", "tiny-llama-3-chat"), ("qwen2-mlp", "Qwen2.5-Tiny-Instruct")];
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
    let again = run();
    assert_eq!(again["totals"]["hit"], again["totals"]["nodes"], "{again}");
    assert_eq!(common::encoded(&again), 0, "{again}");
}
