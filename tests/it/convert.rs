//! HF → GGUF conversion against llama.cpp's `convert_hf_to_gguf.py` on
//! fifty-four tiny checkpoints (LLaMA 3, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3,
//! the rope-scaling ones: Phi-3 LongRoPE, LLaMA YaRN, Qwen3 YaRN; the
//! mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, Granite MoE,
//! ERNIE 4.5 MoE, GPT-OSS (stacked experts, gate and up interleaved; as
//! published, MXFP4 codes and scales repacked);
//! Gemma, Gemma 2, StarCoder 2, OLMo, OLMo 2, Granite, SmolLM3, GPT-NeoX,
//! Command-R, Cohere 2, Phi-2, StableLM, ERNIE 4.5, Falcon, GPT-2, GLM-4,
//! LFM2 (short convolutions between attention blocks), EXAONE 4 (64 blocks,
//! sliding and global), InternLM2 (Q/K/V fused by KV group), OLMo 3
//! (OLMo 2's layout, sliding), Arcee (a ReLU² MLP), Seed-OSS, and the
//! latent-attention mixtures DeepSeek-V2 and DeepSeek-V3 (and the FP8
//! releases of DeepSeek-V3 and Qwen3: float8 weights with block scales, some
//! in another shard than their weight), the multimodal Gemma 3, LLaVA with
//! Pixtral's encoder, Mistral 3, Qwen2-VL and Qwen2.5-VL (their language models, and
//! with `--mmproj` their vision towers), and the embedding
//! models BERT and DistilBERT (WordPiece, mean pooling), RoBERTa
//! (byte-level BPE, positions past the padding id), XLM-RoBERTa
//! (SentencePiece Unigram in fairseq's ids, CLS pooling), Nomic BERT
//! (fused Q/K/V, SwiGLU, rotary positions) and ModernBERT (a GLU pair,
//! local and global attention); made by
//! `tests/convert/make_checkpoints.py`, references by
//! `tests/convert/make_references.sh`, summarised in `tests/data/convert/*.json`):
//! every tensor's name, type, shape, place and bytes (sha256), in order, and
//! the architecture keys with their types and values, for `--outtype` f32,
//! f16, bf16 and q8_0.

use crate::common;

use std::process::Command;

use quantforge::convert::{Checkpoint, OutType, architecture_keys, conversion_of};
use quantforge::model::Value;
use serde_json::{Value as Json, json};

/// `summarize.py`'s summary of the GGUF at `path`.
fn summarize(python: &str, path: &std::path::Path) -> Json {
    let script = common::repo().join("tests/convert/summarize.py");
    let output = Command::new(python).arg(script).arg(path).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every reference converted by `quantforge convert` (the one path a
/// conversion takes, as a recipe's `convert` op takes it too), summarized
/// once for all the tests: (stem, ours, golden).
fn converted(python: &str) -> &'static [(String, Json, Json)] {
    static CONVERTED: std::sync::OnceLock<Vec<(String, Json, Json)>> = std::sync::OnceLock::new();
    CONVERTED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let checkpoints = common::repo().join("tests/data/convert/checkpoints");
        references()
            .into_iter()
            .map(|(stem, _, _, golden)| {
                let (model, outtype) = stem.rsplit_once('-').unwrap();
                let out = dir.path().join(format!("{stem}.gguf"));
                let os = std::ffi::OsStr::new;
                let input = checkpoints.join(model);
                run_convert(&input, &out, &[os("--outtype"), os(outtype)]);
                (stem, summarize(python, &out), golden)
            })
            .collect()
    })
}

/// Every reference: its stem, checkpoint, outtype and golden summary.
fn references() -> Vec<(String, Checkpoint, OutType, Json)> {
    let data = common::repo().join("tests/data/convert");
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else { continue };
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let (model, outtype) = stem.rsplit_once('-').unwrap();
        let outtype = OutType::from_name(outtype).unwrap();
        let checkpoint =
            Checkpoint::open(&data.join("checkpoints").join(model), std::sync::Arc::new(quantforge::convert::OnDisk))
                .unwrap();
        let golden: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        all.push((stem.to_owned(), checkpoint, outtype, golden));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(all.len(), 220);
    all
}

#[test]
fn tokenizer_keys_equal_convert_hf_to_gguf() {
    let Some(python) = common::python_with_gguf() else { return };
    let mut failures = Vec::new();
    for (stem, ours, golden) in converted(&python) {
        let pick = |summary: &Json| -> Vec<Json> {
            summary["metadata"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["key"].as_str().unwrap().starts_with("tokenizer."))
                .cloned()
                .collect()
        };
        let (ours, theirs) = (pick(ours), pick(golden));
        if ours != theirs {
            let keys = |v: &[Json]| v.iter().map(|m| m["key"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
            failures.push(format!("{stem}: ours {:?}\n  reference {:?}", keys(&ours), keys(&theirs)));
            for (a, b) in ours.iter().zip(&theirs) {
                if a != b {
                    failures.push(format!("  {a}\n  {b}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The pre-tokenizer check hash (`get_vocab_base_pre`) of every BPE and
/// WordPiece fixture, and of every variant of one that transformers encodes
/// differently (a class that rebuilds the post-processor, the class found
/// from `model_type`, `add_prefix_space`, BERT's normalizer flags), is the
/// one transformers gives the converter (`tests/data/convert/pre_tokenizers/check_hashes.json`,
/// made by `tests/convert/pre_hashes.py`); an unknown one is refused with the
/// hash and the `--pre` hint, a known one names its pre-tokenizer.
#[test]
fn pre_tokenizer_check_hashes_equal_the_converters() {
    let data = common::repo().join("tests/data/convert");
    let expected: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("pre_tokenizers/check_hashes.json")).unwrap()).unwrap();
    let config_of = |dir: &std::path::Path| -> Json {
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
    };
    let mut failures = Vec::new();
    let mut check = |what: &str, dir: &std::path::Path, want: &Json| {
        let hash = quantforge::convert::check_hash(&quantforge::convert::OnDisk, dir, &config_of(dir))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if hash != want["hash"] {
            failures.push(format!("{what} ({}): {hash}, transformers {}", want["class"], want["hash"]));
        }
        assert_eq!(quantforge::convert::known_name(&hash).map(Json::from).unwrap_or(Json::Null), want["pre"], "{what}");
    };
    let checkpoints = expected["checkpoints"].as_object().unwrap();
    assert_eq!(checkpoints.len(), 40);
    for (name, want) in checkpoints {
        check(name, &data.join("checkpoints").join(name), want);
    }
    let variants = expected["variants"].as_object().unwrap();
    assert_eq!(variants.len(), 12);
    let dir = tempfile::tempdir().unwrap();
    for (name, want) in variants {
        let source = data.join("checkpoints").join(want["fixture"].as_str().unwrap());
        let variant = dir.path().join(name);
        std::fs::create_dir(&variant).unwrap();
        for file in ["tokenizer.json", "special_tokens_map.json"] {
            if source.join(file).is_file() {
                std::fs::copy(source.join(file), variant.join(file)).unwrap();
            }
        }
        let mut tokenizer_config: Json =
            serde_json::from_str(&std::fs::read_to_string(source.join("tokenizer_config.json")).unwrap()).unwrap();
        for (key, value) in want["set"].as_object().unwrap() {
            tokenizer_config[key] = value.clone();
        }
        for key in want["remove"].as_array().unwrap() {
            tokenizer_config.as_object_mut().unwrap().remove(key.as_str().unwrap());
        }
        std::fs::write(variant.join("tokenizer_config.json"), tokenizer_config.to_string()).unwrap();
        let mut config = config_of(&source);
        for (key, value) in want["config"].as_object().unwrap() {
            config[key] = value.clone();
        }
        std::fs::write(variant.join("config.json"), config.to_string()).unwrap();
        check(name, &variant, want);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let qwen = data.join("checkpoints/Qwen2.5-Tiny-Instruct");
    let out = dir.path().join("unknown.gguf");
    let output = common::quantforge(&[std::ffi::OsStr::new("convert"), qwen.as_os_str(), out.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && !out.exists());
    let hash = checkpoints["Qwen2.5-Tiny-Instruct"]["hash"].as_str().unwrap();
    assert!(stderr.contains("pre-tokenizer was not recognized") && stderr.contains(hash), "{stderr}");
    assert!(stderr.contains("--pre NAME"), "{stderr}");
}

#[test]
fn tensors_equal_convert_hf_to_gguf() {
    let Some(python) = common::python_with_gguf() else { return };
    let mut failures = Vec::new();
    for (stem, ours, golden) in converted(&python) {
        let ours = &ours["tensors"];
        let theirs = &golden["tensors"];
        if ours.as_array().map(Vec::len) != theirs.as_array().map(Vec::len) {
            failures.push(format!(
                "{stem}: {} tensors, reference {}",
                ours.as_array().unwrap().len(),
                theirs.as_array().unwrap().len()
            ));
        }
        for (a, b) in ours.as_array().unwrap().iter().zip(theirs.as_array().unwrap()) {
            if a != b {
                failures.push(format!("{stem}: ours {a}\n  reference {b}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// `(key, type, value)` as `summarize.py` spells scalars (an array: its
/// first values, all of a short one).
fn scalar(key: &str, value: &Value) -> (String, String, Json) {
    let (ty, v) = match value {
        Value::U32(v) => ("u32", json!(v)),
        Value::Array(quantforge::model::Array::I32(v)) => ("arr", json!(v[..v.len().min(8)])),
        Value::Array(quantforge::model::Array::Bool(v)) => ("arr", json!(v[..v.len().min(8)])),
        Value::F32(v) => ("f32", json!(f64::from(*v))),
        Value::Bool(v) => ("bool", json!(v)),
        Value::String(s) => ("str", json!(String::from_utf8_lossy(s.as_bytes()))),
        other => panic!("{key}: unexpected {other:?}"),
    };
    (key.to_owned(), ty.to_owned(), v)
}

#[test]
fn architecture_keys_equal_convert_hf_to_gguf() {
    for (stem, checkpoint, outtype, golden) in references() {
        let (conversion, arch) = conversion_of(&checkpoint).unwrap();
        let prefix = format!("{arch}.");
        // Phi-2 writes a tokenizer key among its architecture keys; the file's are compared elsewhere.
        let ours: Vec<_> = architecture_keys(&checkpoint, conversion, arch, outtype)
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix) || k.starts_with("general."))
            .map(|(k, v)| scalar(k, v))
            .collect();
        let theirs: Vec<_> = golden["metadata"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                let k = m["key"].as_str().unwrap();
                k.starts_with(&prefix) || k == "general.file_type" || k == "general.quantization_version"
            })
            .map(|m| {
                let value = if m["type"] == "arr" { &m["head"] } else { &m["value"] };
                (m["key"].as_str().unwrap().to_owned(), m["type"].as_str().unwrap().to_owned(), value.clone())
            })
            .collect();
        assert_eq!(ours, theirs, "{stem}");
    }
}

/// The whole file: every byte (its sha256 and size), metadata key for key.
#[test]
fn whole_files_equal_convert_hf_to_gguf() {
    let Some(python) = common::python_with_gguf() else { return };
    let mut failures = Vec::new();
    for (stem, ours, golden) in converted(&python) {
        if ours["metadata"] != golden["metadata"] {
            let (a, b) = (ours["metadata"].as_array().unwrap(), golden["metadata"].as_array().unwrap());
            for (x, y) in a.iter().zip(b) {
                if x != y {
                    failures.push(format!("{stem}: ours {x}\n  reference {y}"));
                    break;
                }
            }
            if a.len() != b.len() {
                failures.push(format!("{stem}: {} keys, reference {}", a.len(), b.len()));
            }
        }
        for field in ["size", "sha256"] {
            if ours["file"][field] != golden["file"][field] {
                failures.push(format!("{stem}: file {field} {} vs {}", ours["file"][field], golden["file"][field]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--vocab-only` (`tests/data/convert/vocab-only/`, one checkpoint of each
/// vocabulary kind and of generated tensors' keys): the converter's metadata
/// without a tensor, ending where the metadata does; in a recipe too; never
/// quantized.
#[test]
fn vocabularies_alone_equal_convert_hf_to_gguf_vocab_only() {
    let Some(python) = common::python_with_gguf() else { return };
    let data = common::repo().join("tests/data/convert");
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    let mut checked = 0;
    for entry in std::fs::read_dir(data.join("vocab-only")).unwrap() {
        let golden_path = entry.unwrap().path();
        let stem = golden_path.file_stem().unwrap().to_str().unwrap();
        let (model, outtype) = stem.rsplit_once('-').unwrap();
        let input = data.join("checkpoints").join(model);
        let out = dir.path().join(format!("{stem}.gguf"));
        run_convert(&input, &out, &[os("--outtype"), os(outtype), os("--vocab-only")]);
        let golden: Json = serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
        let ours = summarize(&python, &out);
        assert_eq!(ours["metadata"], golden["metadata"], "{stem}");
        assert_eq!(ours["tensors"], json!([]), "{stem}");
        assert_eq!(ours["file"], golden["file"], "{stem}");
        checked += 1;
    }
    assert_eq!(checked, 5);
    // The recipe op writes the same file; a preset has nothing to quantize.
    let input = data.join("checkpoints/gemma-3-tiny-it");
    let recipe = format!(
        "[input.hf]\npath = {:?}\n[step.v]\nop = \"convert\"\nfrom = \"hf\"\nouttype = \"f16\"\nvocab_only = true\n\
         [step.out]\nop = \"export\"\nfrom = \"v\"\npath = \"vocab.gguf\"\n",
        input.display().to_string()
    );
    std::fs::write(dir.path().join("vocab.toml"), recipe).unwrap();
    let output = common::quantforge_in(dir.path(), &[os("run"), os("vocab.toml")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("vocab-only/gemma-3-tiny-it-f16.json")).unwrap())
            .unwrap();
    assert_eq!(summarize(&python, &dir.path().join("vocab.gguf"))["file"], golden["file"]);
    let quantized = dir.path().join("q.gguf");
    let output = common::quantforge(&[
        os("convert"),
        input.as_os_str(),
        quantized.as_os_str(),
        os("--outtype"),
        os("Q4_K_M"),
        os("--vocab-only"),
    ]);
    assert!(!output.status.success() && !quantized.exists());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("a vocabulary alone has no tensors to quantize to Q4_K_M")
    );
}

/// The files in `dir`, sorted, as the split goldens list them.
fn files_written(dir: &std::path::Path) -> Json {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let summary = files.iter().map(|path| {
        let bytes = std::fs::read(path).unwrap();
        json!({
            "name": path.file_name().unwrap().to_str().unwrap(),
            "size": bytes.len(),
            "sha256": common::sha256_hex(&bytes),
        })
    });
    Json::Array(summary.collect())
}

/// `--split-max-tensors`, `--split-max-size` (unpadded sizes, either limit
/// or both), `--no-tensor-first-split`, a model that fits one shard, an
/// output named without `.gguf` (`tests/data/convert/splits/`): every shard
/// the converter writes, named as it names them, byte for byte; a recipe's
/// export with `split = { …, like = "convert" }` writes the same shards.
#[test]
fn splits_equal_convert_hf_to_gguf_split() {
    let data = common::repo().join("tests/data/convert");
    let os = std::ffi::OsStr::new;
    let mut checked = 0;
    for entry in std::fs::read_dir(data.join("splits")).unwrap() {
        let golden: Json = serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = data.join("checkpoints").join(golden["checkpoint"].as_str().unwrap());
        let out = dir.path().join(golden["outfile"].as_str().unwrap());
        let args: Vec<&std::ffi::OsStr> =
            golden["args"].as_array().unwrap().iter().map(|a| os(a.as_str().unwrap())).collect();
        run_convert(&input, &out, &args);
        assert_eq!(files_written(dir.path()), golden["files"], "{args:?}");
        checked += 1;
    }
    assert_eq!(checked, 6);

    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("splits/both-limits.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let recipe = format!(
        "[input.hf]\npath = {:?}\n[step.c]\nop = \"convert\"\nfrom = \"hf\"\nouttype = \"bf16\"\npre = {:?}\n\
         [step.out]\nop = \"export\"\nfrom = \"c\"\npath = \"out/tiny.gguf\"\n\
         split = {{ max_size = \"30K\", max_tensors = 7, like = \"convert\" }}\n",
        data.join("checkpoints/Qwen3-MoE-Tiny").display().to_string(),
        common::fixture_pre_name(&data.join("checkpoints/Qwen3-MoE-Tiny")).unwrap()
    );
    std::fs::write(dir.path().join("split.toml"), recipe).unwrap();
    let output = common::quantforge_in(dir.path(), &[os("run"), os("split.toml")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(files_written(&dir.path().join("out")), golden["files"]);
}

/// SmolLM3-Tiny beside a model card (`tests/data/convert/cards/README.md`:
/// a licence list, base models as ids, URLs and a table, a dataset, tags,
/// languages, and a nested `model-index` whose names are not the model's),
/// converted as it is, with `--metadata` (`cards/metadata.json`) and with
/// `--model-name` too: byte-identical to the converter's each time.
#[test]
fn model_cards_and_metadata_files_name_the_model_as_the_converter_does() {
    let Some(python) = common::python_with_gguf() else { return };
    let data = common::repo().join("tests/data/convert");
    let cards = data.join("cards");
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("SmolLM3-Tiny");
    copy_dir(&data.join("checkpoints/SmolLM3-Tiny"), &checkpoint);
    std::fs::copy(cards.join("README.md"), checkpoint.join("README.md")).unwrap();
    let os = std::ffi::OsStr::new;
    let metadata = cards.join("metadata.json");
    let cases: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        ("card", vec![]),
        ("override", vec![os("--metadata"), metadata.as_os_str()]),
        (
            "override-named",
            vec![
                os("--metadata"),
                metadata.as_os_str(),
                os("--model-name"),
                os("Named On The Line"),
                os("--vocab-only"),
            ],
        ),
    ];
    for (case, extra) in cases {
        let out = dir.path().join(format!("{case}.gguf"));
        let mut args = vec![os("--outtype"), os("f16")];
        args.extend(extra);
        run_convert(&checkpoint, &out, &args);
        let golden: Json =
            serde_json::from_str(&std::fs::read_to_string(cards.join(format!("{case}-f16.json"))).unwrap()).unwrap();
        let ours = summarize(&python, &out);
        assert_eq!(ours["metadata"], golden["metadata"], "{case}");
        assert_eq!(ours["file"], golden["file"], "{case}");
    }
    // A recipe names the file as an input; a new file is a new conversion.
    let recipe = format!(
        "[input.hf]\npath = {:?}\n[input.meta]\npath = {:?}\n\
         [step.c]\nop = \"convert\"\nfrom = \"hf\"\nouttype = \"f16\"\nmetadata = \"meta\"\npre = {:?}\n\
         [step.out]\nop = \"export\"\nfrom = \"c\"\npath = \"r.gguf\"\n",
        checkpoint.display().to_string(),
        dir.path().join("meta.json").display().to_string(),
        common::fixture_pre_name(&checkpoint).unwrap()
    );
    std::fs::copy(&metadata, dir.path().join("meta.json")).unwrap();
    std::fs::write(dir.path().join("r.toml"), recipe).unwrap();
    let run = || {
        let output = common::quantforge_in(dir.path(), &[os("run"), os("r.toml")]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        summarize(&python, &dir.path().join("r.gguf"))
    };
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(cards.join("override-f16.json")).unwrap()).unwrap();
    assert_eq!(run()["file"], golden["file"]);
    std::fs::write(dir.path().join("meta.json"), r#"{"general.name": "Renamed"}"#).unwrap();
    let renamed = run();
    let name = renamed["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "general.name").unwrap().clone();
    assert_eq!(name["value"], "Renamed");
}

/// What the converter would drop unsaid or stop on is refused, naming the
/// file and the key: a key it does not take, `general.license` (which it
/// takes from the card alone), values of the wrong type, a card that does
/// not parse or whose name is not a string.
#[test]
fn metadata_it_cannot_write_is_refused_by_name() {
    let data = common::repo().join("tests/data/convert");
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("SmolLM3-Tiny");
    copy_dir(&data.join("checkpoints/SmolLM3-Tiny"), &checkpoint);
    let os = std::ffi::OsStr::new;
    let out = dir.path().join("out.gguf");
    let convert = |extra: &[&std::ffi::OsStr]| {
        convert_refused(&checkpoint, &out, &[&[os("--outtype"), os("f16")], extra].concat())
    };
    let file = dir.path().join("meta.json");
    for (json, needle) in [
        (r#"{"general.nmae": "x"}"#, "`general.nmae` is not a key the converter takes from a metadata file"),
        (r#"{"general.license": "mit"}"#, "`general.license` is not taken from a metadata file"),
        (
            r#"{"general.sampling.top_k": "40"}"#,
            "`general.sampling.top_k` is \"40\", where general.sampling.top_k takes a 32-bit integer",
        ),
        (r#"{"general.sampling.top_k": 4294967296}"#, "takes a 32-bit integer"),
        (r#"{"general.author": 7}"#, "`general.author` is 7, where general.author takes a string"),
        (r#"{"general.tags": ["a", 1]}"#, "takes a list of strings"),
        (
            r#"{"general.base_models": ["org/name"]}"#,
            "`general.base_models[0]` is \"org/name\", where general.base_models takes a table",
        ),
        (r#"["general.name"]"#, "not a JSON object"),
        ("{", "metadata file"),
    ] {
        std::fs::write(&file, json).unwrap();
        let stderr = convert(&[os("--metadata"), file.as_os_str()]);
        assert!(stderr.contains(needle) && stderr.contains("meta.json"), "{json}: {stderr}");
    }
    for (card, needle) in [
        (
            "---\nversion: 1.0\n---\n",
            "README.md's front matter: `general.version` is 1.0, where general.version takes a string",
        ),
        ("---\nname: [unclosed\n---\n", "README.md: its front matter"),
    ] {
        std::fs::write(checkpoint.join("README.md"), card).unwrap();
        let stderr = convert(&[]);
        assert!(stderr.contains(needle), "{card}: {stderr}");
    }
}

/// Copies checkpoint directory `from` (its subdirectories too) into `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        match path.is_dir() {
            true => copy_dir(&path, &target),
            false => drop(std::fs::copy(&path, &target).unwrap()),
        }
    }
}

/// `quantforge convert INPUT OUT EXTRA…`, naming a fixture's pre-tokenizer
/// as its reference was made ([`common::fixture_pre`]).
fn run_convert(input: &std::path::Path, out: &std::path::Path, extra: &[&std::ffi::OsStr]) {
    let pre = common::fixture_pre(input);
    let mut args = vec![std::ffi::OsStr::new("convert"), input.as_os_str(), out.as_os_str()];
    args.extend(pre.iter().map(|a| a.as_os_str()));
    args.extend_from_slice(extra);
    run_quantforge(&args);
}

/// [`run_convert`] of a conversion that must be refused before it writes
/// `out`: what it says.
fn convert_refused(input: &std::path::Path, out: &std::path::Path, extra: &[&std::ffi::OsStr]) -> String {
    let pre = common::fixture_pre(input);
    let mut args = vec![std::ffi::OsStr::new("convert"), input.as_os_str(), out.as_os_str()];
    args.extend(pre.iter().map(|a| a.as_os_str()));
    args.extend_from_slice(extra);
    let stderr = common::quantforge_err(&args);
    assert!(!out.exists(), "a refused conversion wrote {}", out.display());
    stderr
}

/// A recipe `NAME.toml` in `dir` converting `checkpoint` (its fixture's
/// pre-tokenizer named) at `outtype` (TOML: one or a list) and exporting
/// the result to `path`.
fn convert_recipe(
    dir: &std::path::Path,
    name: &str,
    checkpoint: &std::path::Path,
    outtype: &str,
    path: &str,
) -> std::path::PathBuf {
    let recipe = dir.join(format!("{name}.toml"));
    let pre = common::fixture_pre_name(checkpoint).map(|name| format!("pre = {name:?}\n")).unwrap_or_default();
    std::fs::write(
        &recipe,
        format!(
            "[recipe]\nname = {name:?}\n\n[input.hf]\npath = {:?}\n\n[step.gguf]\nop = \"convert\"\nfrom = \"hf\"\n\
             outtype = {outtype}\n{pre}\n[step.out]\nop = \"export\"\nfrom = \"gguf\"\npath = {path:?}\n",
            checkpoint.to_str().unwrap(),
        ),
    )
    .unwrap();
    recipe
}

fn run_quantforge(args: &[&std::ffi::OsStr]) {
    let output = common::quantforge(args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn the_command_writes_the_reference_and_quantizes_without_an_f16_file() {
    let Some(python) = common::python_with_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = common::repo().join("tests/data/convert");
    let checkpoint = data.join("checkpoints/Qwen2.5-Tiny-Instruct");
    let os = std::ffi::OsStr::new;
    let f16 = dir.path().join("f16.gguf");
    run_convert(&checkpoint, &f16, &[os("--outtype"), os("f16")]);
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("Qwen2.5-Tiny-Instruct-f16.json")).unwrap()).unwrap();
    let script = common::repo().join("tests/convert/summarize.py");
    let summary = Command::new(&python).arg(script).arg(&f16).output().unwrap();
    let summary: Json = serde_json::from_slice(&summary.stdout).unwrap();
    assert_eq!(summary["file"]["sha256"], golden["file"]["sha256"]);

    // A preset quantizes the checkpoint's own values: the same bytes as quantizing the F32 conversion.
    let (direct, f32, via) = (dir.path().join("direct.gguf"), dir.path().join("f32.gguf"), dir.path().join("via.gguf"));
    run_convert(&checkpoint, &direct, &[os("--outtype"), os("Q4_K_M")]);
    run_convert(&checkpoint, &f32, &[os("--outtype"), os("f32")]);
    run_quantforge(&[os("quantize"), f32.as_os_str(), via.as_os_str(), os("Q4_K_M")]);
    assert!(std::fs::read(&direct).unwrap() == std::fs::read(&via).unwrap());
}

/// MXFP4 experts stay as published: the MXFP4_MOE preset writes what
/// llama-quantize makes of the F16 conversion, and a preset that would
/// quantize them again is refused as llama-quantize refuses it, with what
/// to do instead.
#[test]
fn mxfp4_experts_are_kept_under_a_preset_and_never_quantized_again() {
    let Some(llama_quantize) = common::llama_quantize() else { return };
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = common::repo().join("tests/data/convert/checkpoints/gpt-oss-tiny-mxfp4");
    let os = std::ffi::OsStr::new;
    let (direct, f16, theirs) =
        (dir.path().join("direct.gguf"), dir.path().join("f16.gguf"), dir.path().join("theirs.gguf"));
    run_convert(&checkpoint, &direct, &[os("--outtype"), os("MXFP4_MOE")]);
    run_convert(&checkpoint, &f16, &[os("--outtype"), os("f16")]);
    let status = Command::new(llama_quantize).arg(&f16).arg(&theirs).arg("MXFP4_MOE").output().unwrap().status;
    assert!(status.success());
    assert!(std::fs::read(&direct).unwrap() == std::fs::read(&theirs).unwrap());

    let stderr = convert_refused(&checkpoint, &dir.path().join("q4.gguf"), &[os("--outtype"), os("Q4_K_M")]);
    assert!(stderr.contains("`blk.0.ffn_down_exps.weight` is published MXFP4, which Q4_K_M would quantize again"));
    assert!(stderr.contains("quantforge quantize --allow-requantize"), "{stderr}");
}

/// An MXFP4 weight's codes without its scales (or the other way round)
/// is refused, naming both tensors, before anything is written.
#[test]
fn mxfp4_codes_without_their_scales_are_refused_by_name() {
    let Some(python) = common::python_with("json, struct", "python3") else { return };
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("gpt-oss-tiny-mxfp4");
    copy_dir(&common::repo().join("tests/data/convert/checkpoints/gpt-oss-tiny-mxfp4"), &checkpoint);
    let weights = checkpoint.join("model.safetensors");
    // The file rewritten without the tensor: the others' bytes laid out again, in order.
    let drop = r#"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
del header["model.layers.1.mlp.experts.down_proj_scales"]
out, offset = b"", 0
for name, entry in header.items():
    if name == "__metadata__":
        continue
    start, end = entry["data_offsets"]
    entry["data_offsets"] = [offset, offset + end - start]
    out += body[start:end]
    offset += end - start
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + out)
"#;
    let status = Command::new(&python).args(["-c", drop]).arg(&weights).status().unwrap();
    assert!(status.success());
    let stderr = convert_refused(&checkpoint, &dir.path().join("out.gguf"), &[]);
    assert!(
        stderr.contains(
            "MXFP4 `model.layers.1.mlp.experts.down_proj_blocks` has no `model.layers.1.mlp.experts.down_proj_scales`"
        ),
        "{stderr}"
    );
}

#[test]
fn the_recipe_op_writes_what_the_command_writes() {
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    // GPT-OSS's MXFP4 experts are repacked, not encoded: cached all the same.
    for (model, outtypes) in [("gemma-3-tiny-it", ["bf16", "Q4_K_M"]), ("gpt-oss-tiny-mxfp4", ["f16", "MXFP4_MOE"])] {
        let checkpoint = common::repo().join("tests/data/convert/checkpoints").join(model);
        let recipe = convert_recipe(
            dir.path(),
            model,
            &checkpoint,
            &format!("{outtypes:?}"),
            &format!("{model}-{{outtype}}.gguf"),
        );
        let cache = dir.path().join("cache");
        let run = || common::run_json(&recipe, &cache, &[]);
        run();
        for outtype in outtypes {
            let by_command = dir.path().join(format!("command-{model}-{outtype}.gguf"));
            run_convert(&checkpoint, &by_command, &[os("--outtype"), os(outtype)]);
            let by_recipe = std::fs::read(dir.path().join(format!("{model}-{outtype}.gguf"))).unwrap();
            assert!(by_recipe == std::fs::read(&by_command).unwrap(), "{model} {outtype}");
        }
        let again = run();
        let statuses: Vec<&str> =
            again["nodes"].as_array().unwrap().iter().map(|n| n["status"].as_str().unwrap()).collect();
        assert!(statuses.iter().all(|s| *s != "ran"), "{model}: {statuses:?}");
    }
}

/// The files a conversion reads below the checkpoint directory (a pooling
/// module's settings, named chat templates) are in its input's key: editing
/// one converts again, and writes what the edit says.
#[test]
fn files_below_the_checkpoint_directory_are_in_the_key() {
    let data = common::repo().join("tests/data/convert/checkpoints");
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    let cases = [
        ("bge-tiny-en", "1_Pooling/config.json", r#"{"pooling_mode_cls_token": true}"#),
        ("tiny-llama-3-chat", "additional_chat_templates/rag.jinja", "{{ documents }}"),
    ];
    for (model, file, text) in cases {
        let checkpoint = dir.path().join(model);
        copy_dir(&data.join(model), &checkpoint);
        let recipe = convert_recipe(dir.path(), model, &checkpoint, "\"f16\"", &format!("{model}.gguf"));
        let cache = dir.path().join("cache");
        let run = || {
            let report = common::run_json(&recipe, &cache, &[]);
            let convert = report["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "gguf").unwrap().clone();
            (
                convert["status"].as_str().unwrap().to_owned(),
                std::fs::read(dir.path().join(format!("{model}.gguf"))).unwrap(),
            )
        };
        let (_, before) = run();
        let path = checkpoint.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let (status, after) = run();
        assert_eq!(status, "ran", "{model}: editing {file} converts again");
        assert_ne!(before, after, "{model}: editing {file} changes the file");
        let by_command = dir.path().join(format!("{model}-command.gguf"));
        run_convert(&checkpoint, &by_command, &[os("--outtype"), os("f16")]);
        assert!(after == std::fs::read(&by_command).unwrap(), "{model}: the recipe writes what the command writes");
    }
}

/// A setting the conversion does not model refuses the checkpoint, naming
/// it, instead of writing a model that loads and computes something else;
/// so does a rope setting the converter itself would fail on.
/// With no `--outtype`, as the converter's default `auto`: bf16 for a bf16
/// checkpoint, f16 for an f16 or f32 one (checked against the converter
/// run without `--outtype` when these goldens were made).
#[test]
fn the_default_outtype_is_the_converters_auto() {
    let data = common::repo().join("tests/data/convert");
    let dir = tempfile::tempdir().unwrap();
    for (model, as_type) in [
        ("Mixtral-Tiny-4x8", "bf16"),
        ("gemma-2-tiny-it", "f16"),
        ("starcoder2-tiny", "f16"),
        ("DeepSeek-V3-Tiny-FP8", "bf16"),
        ("qwen3-FP8", "f16"),
    ] {
        let out = dir.path().join(format!("{model}.gguf"));
        let input = data.join("checkpoints").join(model);
        run_convert(&input, &out, &[]);
        let golden: Json =
            serde_json::from_str(&std::fs::read_to_string(data.join(format!("{model}-{as_type}.json"))).unwrap())
                .unwrap();
        let sha256 = common::sha256_hex(&std::fs::read(&out).unwrap());
        assert_eq!(sha256, golden["file"]["sha256"].as_str().unwrap(), "{model}: auto is not {as_type}");
    }
}

/// `--outtype auto` of a multimodal checkpoint counts only the tensors the
/// file is written from, as the converter (which sees its class's tensors
/// alone) does: a tower stored f32 beside a bf16 language model is written
/// F16 with `--mmproj`, the language model bf16. A tower written as
/// another converter writes it takes that converter's default: LLaVA-1.5's
/// bf16 CLIP tower is written f16, as llama.cpp's legacy scripts write it.
#[test]
fn auto_counts_only_the_tensors_a_multimodal_conversion_writes() {
    let data = common::repo().join("tests/data/convert");
    let dir = tempfile::tempdir().unwrap();
    let mixed = dir.path().join("gemma-3-tiny-vl-it");
    copy_dir(&data.join("checkpoints/gemma-3-tiny-vl-it"), &mixed);
    widen_to_f32(&mixed.join("model.safetensors"), |name| !name.starts_with("language_model."));
    for (extra, golden) in
        [(&["--mmproj"][..], "mmproj/gemma-3-tiny-vl-it-f16.json"), (&[], "gemma-3-tiny-vl-it-bf16.json")]
    {
        let out = dir.path().join("out.gguf");
        let extra: Vec<&std::ffi::OsStr> = extra.iter().map(std::ffi::OsStr::new).collect();
        run_convert(&mixed, &out, &extra);
        let golden: Json = serde_json::from_str(&std::fs::read_to_string(data.join(golden)).unwrap()).unwrap();
        let sha256 = common::sha256_hex(&std::fs::read(&out).unwrap());
        assert_eq!(sha256, golden["file"]["sha256"].as_str().unwrap(), "{extra:?}");
    }
    let out = dir.path().join("llava.gguf");
    run_convert(&data.join("checkpoints/llava-1.5-tiny-hf"), &out, &[std::ffi::OsStr::new("--mmproj")]);
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("mmproj/llava-1.5-tiny-hf-f16.json")).unwrap())
            .unwrap();
    assert_eq!(common::sha256_hex(&std::fs::read(&out).unwrap()), golden["file"]["sha256"].as_str().unwrap());
}

/// Rewrites the bf16 tensors of SafeTensors file `path` that `widened`
/// names as f32 (the same values).
fn widen_to_f32(path: &std::path::Path, widened: impl Fn(&str) -> bool) {
    let bytes = std::fs::read(path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Json> = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let body = &bytes[8 + header_len..];
    let mut entries: Vec<(String, Json)> = header.into_iter().filter(|(name, _)| name != "__metadata__").collect();
    entries.sort_by_key(|(_, entry)| entry["data_offsets"][0].as_u64().unwrap());
    let (mut new_header, mut new_body) = (serde_json::Map::new(), Vec::new());
    for (name, mut entry) in entries {
        let [begin, end] = [0, 1].map(|i| entry["data_offsets"][i].as_u64().unwrap() as usize);
        let start = new_body.len();
        if entry["dtype"] == "BF16" && widened(&name) {
            for pair in body[begin..end].chunks_exact(2) {
                new_body.extend_from_slice(&[0, 0, pair[0], pair[1]]);
            }
            entry["dtype"] = json!("F32");
        } else {
            new_body.extend_from_slice(&body[begin..end]);
        }
        entry["data_offsets"] = json!([start, new_body.len()]);
        new_header.insert(name, entry);
    }
    let header = serde_json::to_vec(&new_header).unwrap();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(&new_body);
    std::fs::write(path, file).unwrap();
}

/// docs/ARCHITECTURES.md's table lists exactly the classes the converter
/// takes, with the architecture each is written as, in the registry's order.
#[test]
fn the_architectures_page_lists_every_supported_class() {
    let page = std::fs::read_to_string(common::repo().join("docs/ARCHITECTURES.md")).unwrap();
    let (text, towers) = page.split_once("\n## Vision towers").expect("a section on vision towers");
    let table = |section: &str| -> Vec<(String, String)> {
        section
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = |cell: &str| cell.strip_prefix('`')?.strip_suffix('`').map(str::to_owned);
                Some((code(cells.get(1)?)?, code(cells.get(2)?)?))
            })
            .collect()
    };
    let supported: Vec<(String, String)> = quantforge::convert::family::supported_classes()
        .map(|(class, arch)| (class.to_owned(), arch.to_owned()))
        .collect();
    assert_eq!(table(text), supported, "docs/ARCHITECTURES.md and src/convert/family/ disagree");
    let with_towers: Vec<(String, String)> = quantforge::convert::mmproj::VISIONS
        .iter()
        .flat_map(|vision| vision.classes.iter().map(|class| (class.to_string(), vision.projector.to_owned())))
        .collect();
    assert_eq!(table(towers), with_towers, "docs/ARCHITECTURES.md and the vision towers disagree");
    let printed = common::stdout_of_success(common::quantforge_with(&[&"convert", &"--print-supported-models"]));
    let (text, towers) = printed.split_once("MMPROJ models:\n").expect("an MMPROJ section");
    for (class, arch) in &supported {
        assert!(text.contains(&format!("  - {class} ({arch})\n")), "{class} not printed:\n{printed}");
    }
    for (class, _) in &with_towers {
        assert!(towers.contains(&format!("  - {class} (clip)\n")), "{class}'s tower not printed:\n{printed}");
    }
}

/// Tensors the converter means to write into a projector file and drops
/// (`src/convert/family/pixtral.rs` says why): by fixture, each written
/// first, from the language model's embedding row of a token.
const BEYOND_THE_CONVERTER: &[(&str, &str, u64)] = &[
    ("pixtral-tiny", "v.token_embd.img_break", 402),
    ("Mistral-Small-3.1-Tiny-Instruct", "v.token_embd.img_break", 402),
];

/// Every `--mmproj` reference (`tests/data/convert/mmproj/`): the vision
/// tower's file, byte for byte; where the converter drops a tensor it means
/// to write, every other tensor and key byte for byte, and that tensor the
/// language model's embedding row, as the (byte-identical) text conversion
/// writes it at f32.
#[test]
fn vision_towers_equal_convert_hf_to_gguf_mmproj() {
    let Some(python) = common::python_with_gguf() else { return };
    let data = common::repo().join("tests/data/convert");
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    let mut checked = 0;
    for entry in std::fs::read_dir(data.join("mmproj")).unwrap() {
        let golden_path = entry.unwrap().path();
        let stem = golden_path.file_stem().unwrap().to_str().unwrap();
        let (model, outtype) = stem.rsplit_once('-').unwrap();
        let input = data.join("checkpoints").join(model);
        let out = dir.path().join(format!("{stem}.gguf"));
        run_convert(&input, &out, &[os("--outtype"), os(outtype), os("--mmproj")]);
        let golden: Json = serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
        let ours = summarize(&python, &out);
        assert_eq!(ours["metadata"], golden["metadata"], "{stem}");
        checked += 1;
        let Some(&(_, extra, token)) = BEYOND_THE_CONVERTER.iter().find(|(fixture, _, _)| *fixture == model) else {
            assert_eq!(ours["tensors"], golden["tensors"], "{stem}");
            assert_eq!(ours["file"], golden["file"], "{stem}");
            continue;
        };
        let placeless = |tensors: &[Json]| -> Vec<Json> {
            tensors.iter().map(|t| json!([t["name"], t["type"], t["shape"], t["sha256"]])).collect()
        };
        let (first, rest) = ours["tensors"].as_array().unwrap().split_first().unwrap();
        assert_eq!(placeless(rest), placeless(golden["tensors"].as_array().unwrap()), "{stem}");
        assert_eq!((first["name"].as_str(), first["type"].as_str()), (Some(extra), Some("F32")), "{stem}");
        let text = dir.path().join(format!("{model}-text-f32.gguf"));
        if !text.exists() {
            run_convert(&input, &text, &[os("--outtype"), os("f32")]);
        }
        let row_of = |path: &std::path::Path, name: &str, row: u64| {
            let file = quantforge::formats::ModelFile::open(path, Default::default()).unwrap();
            let info = file.tensors.iter().find(|t| t.name == name).unwrap();
            let width = info.dims[0] as usize * 4;
            file.tensor_data(info).unwrap()[width * row as usize..][..width].to_vec()
        };
        assert!(row_of(&out, extra, 0) == row_of(&text, "token_embd.weight", token), "{stem}: not row {token}");
    }
    assert_eq!(checked, 22);
}

/// The two files of each multimodal checkpoint are a pair llama.cpp loads:
/// `assemble` (which checks the projector's output width against the
/// language model's input) takes them as they are written; a recipe's
/// `mmproj = true` writes what `--mmproj` writes.
#[test]
fn a_multimodal_checkpoint_converts_to_a_pair_assemble_takes() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = common::repo().join("tests/data/convert/checkpoints");
    let multimodal = [
        ("gemma-3-tiny-vl-it", "gemma3"),
        ("pixtral-tiny", "llama"),
        ("Mistral-Small-3.1-Tiny-Instruct", "mistral3"),
        ("Qwen2-VL-Tiny-Instruct", "qwen2vl"),
        ("Qwen2.5-VL-Tiny-Instruct", "qwen2vl"),
        ("llava-1.5-tiny-hf", "llama"),
    ];
    for (model, architecture) in multimodal {
        let input = checkpoints.join(model);
        let at = |name: &str| dir.path().join(format!("{model}-{name}.gguf"));
        let (lm, mmproj, bundle) = (at("lm"), at("mmproj"), at("bundle"));
        run_convert(&input, &lm, &[]);
        run_convert(&input, &mmproj, &[std::ffi::OsStr::new("--mmproj")]);
        let assembled =
            common::stdout_of_success(common::quantforge_with(&[&"assemble", &lm, &mmproj, &"-o", &bundle]));
        assert!(bundle.is_file(), "{model}: {assembled}");
        let shown = common::stdout_of_success(common::quantforge_with(&[&"inspect", &bundle]));
        assert!(shown.contains(architecture) && shown.contains("vision"), "{model}: {shown}");
    }
    let input = checkpoints.join("gemma-3-tiny-vl-it");
    let recipe = dir.path().join("tower.toml");
    std::fs::write(
        &recipe,
        format!(
            "[recipe]\nname = \"tower\"\n\n[input.hf]\npath = {:?}\n\n[step.tower]\nop = \"convert\"\nfrom = \"hf\"\n\
             mmproj = true\n\n[step.out]\nop = \"export\"\nfrom = \"tower\"\npath = \"by-recipe.gguf\"\n",
            input.to_str().unwrap(),
        ),
    )
    .unwrap();
    common::run_json(&recipe, &dir.path().join("cache"), &[]);
    let by_command = std::fs::read(dir.path().join("gemma-3-tiny-vl-it-mmproj.gguf")).unwrap();
    assert!(std::fs::read(dir.path().join("by-recipe.gguf")).unwrap() == by_command);
}

/// What `--mmproj` refuses: a class without a tower, a preset, a tower
/// setting llama.cpp would compute otherwise (an activation, the features
/// LLaVA takes), an image processor that disagrees with the model, a
/// missing image processor; and the text
/// conversion still refuses a top-level key no one models.
#[test]
fn vision_towers_are_refused_where_the_file_would_be_wrong() {
    let checkpoints = common::repo().join("tests/data/convert/checkpoints");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let os = std::ffi::OsStr::new;
    let mmproj = [os("--mmproj")];
    let err = convert_refused(&checkpoints.join("gemma-3-tiny-it"), &out, &mmproj);
    assert!(
        err.contains("`Gemma3ForCausalLM` has no vision tower") && err.contains("Gemma3ForConditionalGeneration"),
        "{err}"
    );
    let vl = checkpoints.join("gemma-3-tiny-vl-it");
    let err = convert_refused(&vl, &out, &[os("--mmproj"), os("--outtype"), os("Q4_K_M")]);
    assert!(err.contains("a projector file is converted to a float outtype"), "{err}");
    // A copy `name` of fixture `from` with its config edited.
    let edited = |from: &str, name: &str, edit: &dyn Fn(&mut Json)| {
        let copy = dir.path().join(name);
        copy_dir(&checkpoints.join(from), &copy);
        let mut config: Json =
            serde_json::from_str(&std::fs::read_to_string(copy.join("config.json")).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(copy.join("config.json"), config.to_string()).unwrap();
        copy
    };
    let gemma = "gemma-3-tiny-vl-it";
    let gelu = edited(gemma, "gelu", &|c| c["vision_config"]["hidden_act"] = json!("gelu"));
    let err = convert_refused(&gelu, &out, &mmproj);
    assert!(err.contains("`vision_config.hidden_act` (\"gelu\")") && err.contains("does not model"), "{err}");
    let tokens = edited(gemma, "tokens", &|c| c["mm_tokens_per_image"] = json!(16));
    let err = convert_refused(&tokens, &out, &mmproj);
    assert!(err.contains("`mm_tokens_per_image` (16) is not the image processor's `image_seq_length` (4)"), "{err}");
    let unknown = edited(gemma, "unknown", &|c| c["image_crop_mode"] = json!("center"));
    let err = convert_refused(&unknown, &out, &[]);
    assert!(err.contains("`image_crop_mode` (\"center\")") && err.contains("does not model"), "{err}");
    let layer = edited("pixtral-tiny", "layer", &|c| c["vision_feature_layer"] = json!(-2));
    let err = convert_refused(&layer, &out, &mmproj);
    assert!(err.contains("`vision_feature_layer` (-2)") && err.contains("does not model"), "{err}");
    // An encoder neither of LLaVA's towers is.
    let siglip = edited("pixtral-tiny", "siglip", &|c| c["vision_config"]["model_type"] = json!("siglip_vision_model"));
    let err = convert_refused(&siglip, &out, &mmproj);
    assert!(
        err.contains("with a `siglip_vision_model` vision encoder")
            && err.contains("pixtral, clip_vision_model encoders only"),
        "{err}"
    );
    // LLaVA-1.5's CLIP tower: what llama.cpp's `mlp` projector computes, and
    // the outtypes the legacy converter writes.
    let llava = "llava-1.5-tiny-hf";
    for (name, key, value) in [
        ("last-layer", "vision_feature_layer", json!(-1)),
        ("full", "vision_feature_select_strategy", json!("full")),
        ("no-bias", "multimodal_projector_bias", json!(false)),
    ] {
        let copy = edited(llava, name, &|c| c[key] = value.clone());
        let err = convert_refused(&copy, &out, &mmproj);
        assert!(err.contains(&format!("`{key}` ({value})")) && err.contains("llava vision tower"), "{err}");
    }
    let one_block = edited(llava, "one-block", &|c| c["vision_config"]["num_hidden_layers"] = json!(1));
    let err = convert_refused(&one_block, &out, &mmproj);
    assert!(err.contains("LLaVA reads the block before the last"), "{err}");
    for outtype in ["bf16", "q8_0"] {
        let err = convert_refused(&checkpoints.join(llava), &out, &[os("--mmproj"), os("--outtype"), os(outtype)]);
        assert!(err.contains("takes --outtype f16 or f32 only"), "{err}");
    }
    for (name, key, value, says) in [
        ("periods", "fullatt_block_indexes", json!([1]), "is not a period of blocks"),
        ("windows", "window_size", json!(64), "`vision_config.window_size` (64)"),
    ] {
        let copy = edited("Qwen2.5-VL-Tiny-Instruct", name, &|c| c["vision_config"][key] = value.clone());
        let err = convert_refused(&copy, &out, &mmproj);
        assert!(err.contains(says), "{err}");
    }
    let no_processor = edited(gemma, "no-processor", &|_| {});
    std::fs::remove_file(no_processor.join("preprocessor_config.json")).unwrap();
    let err = convert_refused(&no_processor, &out, &mmproj);
    assert!(err.contains("has no `image_mean`"), "{err}");
}

#[test]
fn unmodelled_settings_are_refused_by_name() {
    let checkpoints = common::repo().join("tests/data/convert/checkpoints");
    let unmodelled = "does not model";
    let not_a_count = "not a whole number below 2^32";
    let cases: [(&str, &str, Json, &str, &str); 45] = [
        (
            "tiny-llama-3-chat",
            "rope_scaling",
            json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "mscale": 1.0}),
            "`rope_scaling.mscale` (1.0)",
            unmodelled,
        ),
        (
            "qwen3",
            "rope_scaling",
            json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "truncate": false}),
            "`rope_scaling.truncate` (false)",
            unmodelled,
        ),
        (
            "Qwen2.5-Tiny-Instruct",
            "rope_scaling",
            json!({"rope_type": "yarn", "factor": 4.0}),
            "`rope_scaling.original_max_position_embeddings` is missing",
            "YaRN scaling needs it",
        ),
        (
            "qwen3",
            "rope_scaling",
            json!({"rope_type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}),
            "`rope_scaling.rope_type = \"longrope\"`",
            unmodelled,
        ),
        (
            "Phi-3-mini-4k-instruct",
            "rope_scaling",
            json!({"type": "longrope", "long_factor": vec![1.0; 7], "short_factor": vec![1.0; 8]}),
            "`rope_scaling.long_factor` has 7 entries and `rope_scaling.short_factor` 8",
            "half the 16 rotary dimensions",
        ),
        (
            "tiny-llama-3-chat",
            "rope_parameters",
            json!({"rope_type": "linear", "factor": 2.0}),
            "`rope_parameters`",
            unmodelled,
        ),
        ("tiny-llama-3-chat", "hidden_act", json!("gelu"), "`hidden_act` (\"gelu\")", unmodelled),
        ("Mistral-Tiny-180K-v0.3", "sliding_window", json!(4096), "`sliding_window` (4096)", unmodelled),
        ("Qwen2.5-Tiny-Instruct", "use_sliding_window", json!(true), "`use_sliding_window` (true)", unmodelled),
        ("Qwen2.5-Tiny-Instruct", "hidden_size", json!(64.5), "`hidden_size` (64.5)", not_a_count),
        ("tiny-llama-3-chat", "max_position_embeddings", json!(1u64 << 33), "`max_position_embeddings`", not_a_count),
        // What llama.cpp's MoE graphs assume of the routing.
        ("Qwen3-MoE-Tiny", "norm_topk_prob", json!(false), "`norm_topk_prob` (false)", unmodelled),
        ("Qwen1.5-MoE-Tiny", "norm_topk_prob", json!(true), "`norm_topk_prob` (true)", unmodelled),
        ("Qwen1.5-MoE-Tiny", "decoder_sparse_step", json!(2), "`decoder_sparse_step` (2)", unmodelled),
        ("OLMoE-Tiny-0924", "rms_norm_eps", json!(1e-6), "`rms_norm_eps` (1e-6)", unmodelled),
        ("OLMoE-Tiny-0924", "clip_qkv", json!(8.0), "`clip_qkv` (8.0)", unmodelled),
        // Layer patterns llama.cpp assumes and the file cannot say.
        (
            "gemma-2-tiny-it",
            "layer_types",
            json!(["full_attention", "sliding_attention"]),
            "`layer_types` ([\"full_attention\",\"sliding_attention\"])",
            unmodelled,
        ),
        ("gemma-2-tiny-it", "query_pre_attn_scalar", json!(16), "`query_pre_attn_scalar` (16)", unmodelled),
        ("SmolLM3-Tiny", "no_rope_layers", json!([1, 0]), "`no_rope_layers` ([1,0])", unmodelled),
        // DeepSeek routing llama.cpp's deepseek2 graph does not compute, YaRN's two scales apart.
        ("DeepSeek-V3-Tiny", "scoring_func", json!("softmax"), "`scoring_func` (\"softmax\")", unmodelled),
        // Quantized checkpoints other than FP8 ones, and FP8 settings the converter does not read.
        (
            "qwen3-FP8",
            "quantization_config",
            json!({"quant_method": "gptq", "bits": 4}),
            "`quantization_config.quant_method` (\"gptq\")",
            unmodelled,
        ),
        (
            "qwen3-FP8",
            "quantization_config",
            json!({"quant_method": "fp8", "weight_block_size": [32, 48], "kv_cache_scheme": "fp8"}),
            "`quantization_config.kv_cache_scheme` (\"fp8\")",
            unmodelled,
        ),
        ("DeepSeek-V3-Tiny", "topk_method", json!("greedy"), "`topk_method` (\"greedy\")", unmodelled),
        ("DeepSeek-V2-Lite-Tiny", "n_group", json!(2), "`n_group` (2)", unmodelled),
        ("DeepSeek-V2-Lite-Tiny", "norm_topk_prob", json!(true), "`norm_topk_prob` (true)", unmodelled),
        (
            "DeepSeek-V2-Lite-Tiny",
            "rope_scaling",
            json!({"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.707}),
            "`rope_scaling.mscale` (1.0)",
            unmodelled,
        ),
        // BERT as llama.cpp's graph computes it: GELU, absolute positions, no classifier head.
        ("bge-tiny-en", "hidden_act", json!("relu"), "`hidden_act` (\"relu\")", unmodelled),
        ("bge-tiny-en", "position_embedding_type", json!("relative_key"), "`position_embedding_type`", unmodelled),
        ("bge-tiny-en", "id2label", json!({"0": "NEG", "1": "POS"}), "`id2label`", unmodelled),
        (
            "stsb-roberta-tiny",
            "pad_token_id",
            json!(200),
            "`pad_token_id` + 1 (201) is past the 130",
            "position embeddings",
        ),
        // GPT-2's file always says four times the width.
        ("gpt2-tiny", "n_inner", json!(100), "`n_inner` (100)", unmodelled),
        // LFM2: a bias llama.cpp's short convolution has no tensor for; a feed-forward
        // width transformers and the converter round differently.
        ("LFM2-Tiny", "conv_bias", json!(true), "`conv_bias` (true)", unmodelled),
        (
            "LFM2-Tiny",
            "block_ffn_dim_multiplier",
            Json::Null,
            "`block_ffn_dim_multiplier`",
            "leaves the width unrounded",
        ),
        // llama.cpp slides EXAONE 4's window only at 64 blocks.
        ("EXAONE-4.0-Tiny", "num_hidden_layers", json!(30), "`sliding_window` (16)", unmodelled),
        // Nomic BERT: dynamic NTK scaling llama.cpp does not run; positions the converter does not know.
        (
            "nomic-embed-text-tiny-v1.5",
            "rotary_scaling_factor",
            json!(2.0),
            "`rotary_scaling_factor` (2.0)",
            unmodelled,
        ),
        ("nomic-embed-text-tiny-v1.5", "n_positions", json!(4096), "n_positions = 4096", "unrecognized positions"),
        // InternLM2's chat models scale rope dynamically, which the file cannot say.
        (
            "internlm2-chat-tiny",
            "rope_scaling",
            json!({"type": "dynamic", "factor": 2.0}),
            "`rope_scaling.rope_type = \"dynamic\"`",
            unmodelled,
        ),
        // ModernBERT's GLU runs GELU or SiLU in llama.cpp.
        ("ModernBERT-tiny", "hidden_activation", json!("relu"), "`hidden_activation` (\"relu\")", unmodelled),
        // GPT-OSS: llama.cpp alternates sliding and full attention from the first block;
        // OpenAI's repeated settings must agree; MXFP4 is GPT-OSS's alone, with its two keys.
        (
            "gpt-oss-tiny",
            "layer_types",
            json!(["full_attention", "sliding_attention"]),
            "`layer_types` ([\"full_attention\",\"sliding_attention\"])",
            unmodelled,
        ),
        ("gpt-oss-tiny", "experts_per_token", json!(4), "`experts_per_token` (4)", unmodelled),
        ("gpt-oss-tiny", "initial_context_length", json!(8192), "`initial_context_length` (8192)", unmodelled),
        (
            "tiny-llama-3-chat",
            "quantization_config",
            json!({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}),
            "`quantization_config.quant_method` (\"mxfp4\")",
            unmodelled,
        ),
        (
            "gpt-oss-tiny-mxfp4",
            "quantization_config",
            json!({"quant_method": "mxfp4", "block_size": 32}),
            "`quantization_config.block_size` (32)",
            unmodelled,
        ),
        // Experts the config promises and the checkpoint lacks; a class misspelled.
        ("Mixtral-Tiny-4x8", "num_local_experts", json!(5), "block 0 has 12 expert tensors", "not all of its experts"),
        (
            "Mixtral-Tiny-4x8",
            "architectures",
            json!(["MixtralForCausaLM"]),
            "`MixtralForCausaLM` checkpoints are not supported",
            "the nearest supported: MixtralForCausalLM",
        ),
    ];
    for (model, key, value, named, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(model);
        copy_dir(&checkpoints.join(model), &copy);
        let mut config: Json =
            serde_json::from_str(&std::fs::read_to_string(copy.join("config.json")).unwrap()).unwrap();
        config[key] = value;
        std::fs::write(copy.join("config.json"), config.to_string()).unwrap();
        let stderr = convert_refused(&copy, &dir.path().join("out.gguf"), &[]);
        assert!(stderr.contains(named) && stderr.contains(why), "{model} with {key}: {stderr}");
    }
}

/// OpenAI's GPT-OSS releases repeat two settings under their own names
/// (`experts_per_token`, `initial_context_length`); where they agree with
/// the ones the converter reads, the file is the fixture's, byte for byte.
#[test]
fn gpt_oss_configs_as_released_convert_as_the_fixture() {
    let fixture = common::repo().join("tests/data/convert/checkpoints/gpt-oss-tiny");
    let dir = tempfile::tempdir().unwrap();
    let released = dir.path().join("released").join("gpt-oss-tiny");
    copy_dir(&fixture, &released);
    let mut config: Json =
        serde_json::from_str(&std::fs::read_to_string(released.join("config.json")).unwrap()).unwrap();
    config["experts_per_token"] = config["num_experts_per_tok"].clone();
    config["initial_context_length"] = config["rope_scaling"]["original_max_position_embeddings"].clone();
    std::fs::write(released.join("config.json"), config.to_string()).unwrap();
    let os = std::ffi::OsStr::new;
    let (ours, theirs) = (dir.path().join("released.gguf"), dir.path().join("fixture.gguf"));
    run_convert(&released, &ours, &[os("--outtype"), os("f16")]);
    run_convert(&fixture, &theirs, &[os("--outtype"), os("f16")]);
    assert!(std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap());
}

/// A Hugging Face Hub cache (`models--ORG--NAME` with `refs/main`, and
/// `snapshots/REV` of links into `blobs/`) converts as a clone named NAME
/// would: the repository's name, never the revision hash, names the model.
#[test]
fn a_hub_cache_snapshot_converts_as_its_repository() {
    let dir = tempfile::tempdir().unwrap();
    let original = common::repo().join("tests/data/convert/checkpoints/Qwen2.5-Tiny-Instruct");
    let repository = dir.path().join("hub/models--acme--Qwen2.5-Tiny-Instruct");
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let snapshot = repository.join("snapshots").join(rev);
    std::fs::create_dir_all(repository.join("blobs")).unwrap();
    std::fs::create_dir_all(repository.join("refs")).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(repository.join("refs/main"), rev).unwrap();
    for (i, entry) in std::fs::read_dir(&original).unwrap().enumerate() {
        let path = entry.unwrap().path();
        let blob = format!("blob{i}");
        std::fs::copy(&path, repository.join("blobs").join(&blob)).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snapshot.join(path.file_name().unwrap())).unwrap();
    }
    let os = std::ffi::OsStr::new;
    let pre = common::fixture_pre(&original);
    let convert = |input: &std::path::Path, out: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        let mut args = vec![os("convert"), input.as_os_str(), out.as_os_str()];
        args.extend(pre.iter().map(|a| a.as_os_str()));
        args.extend(extra.iter().map(|a| os(a)));
        run_quantforge(&args);
        std::fs::read(out).unwrap()
    };
    let reference = convert(&original, "clone.gguf", &[]);
    assert!(convert(&repository, "repository.gguf", &[]) == reference, "models--ORG--NAME reads refs/main");
    assert!(convert(&snapshot, "snapshot.gguf", &[]) == reference, "a snapshot is named after its repository");
    let renamed = convert(&snapshot, "renamed.gguf", &["--model-name", "Renamed-Model"]);
    assert!(renamed.windows(13).any(|w| w == b"Renamed-Model"), "--model-name names it");
    assert!(!renamed.windows(rev.len()).any(|w| w == rev.as_bytes()));
}

/// The six tiny checkpoints re-saved by transformers as `pytorch_model.bin`
/// (two of them sharded, with `pytorch_model.bin.index.json`; made by
/// `tests/convert/make_bin_checkpoints.py`), beside their other files:
/// `quantforge convert` writes, for every outtype, the bytes
/// `convert_hf_to_gguf.py` writes from them.
#[test]
fn bin_checkpoints_convert_as_convert_hf_to_gguf_converts_them() {
    let data = common::repo().join("tests/data/convert");
    let expected: Json = serde_json::from_slice(&std::fs::read(data.join("bin/expected.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, outtypes) in expected.as_object().unwrap() {
        // The directory's name is the model's name in the output.
        let checkpoint = dir.path().join(name);
        std::fs::create_dir(&checkpoint).unwrap();
        for source in [data.join("checkpoints").join(name), data.join("bin").join(name)] {
            for entry in std::fs::read_dir(source).unwrap() {
                let path = entry.unwrap().path();
                let file = path.file_name().unwrap().to_str().unwrap();
                if !(file.starts_with("model") && (file.ends_with(".safetensors") || file.ends_with(".index.json"))) {
                    std::os::unix::fs::symlink(&path, checkpoint.join(file)).unwrap();
                }
            }
        }
        for (outtype, sha256) in outtypes.as_object().unwrap() {
            let out = dir.path().join(format!("{name}-{outtype}.gguf"));
            let os = std::ffi::OsStr::new;
            run_convert(&checkpoint, &out, &[os("--outtype"), os(outtype)]);
            let ours: String = common::sha256_hex(&std::fs::read(&out).unwrap());
            if ours != sha256.as_str().unwrap() {
                failures.push(format!("{name} {outtype}"));
            }
        }
    }
    assert!(failures.is_empty(), "differ from convert_hf_to_gguf.py: {failures:?}");
}

/// What the converter writes as the checkpoint stores it (bf16 to bf16, no
/// permutation) is copied file to file, not decoded, and permuted Q/K rows
/// are moved as bytes; a tensor holding a NaN is still refused, either way,
/// as every conversion refuses one.
#[test]
fn unchanged_tensors_are_copied_and_a_nan_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let source = common::repo().join("tests/data/convert/checkpoints/Llama-Tiny-YaRN");
    let nan_in = [
        ("plain", None),
        ("nan", Some("model.layers.0.mlp.down_proj.weight")),
        ("nan-permuted", Some("model.layers.0.self_attn.q_proj.weight")),
    ];
    for (name, patched) in nan_in {
        let copy = dir.path().join(name);
        std::fs::create_dir(&copy).unwrap();
        for entry in std::fs::read_dir(&source).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
        if let Some(tensor) = patched {
            let path = copy.join("model.safetensors");
            let mut bytes = std::fs::read(&path).unwrap();
            let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let header: Json = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
            let start = header[tensor]["data_offsets"][0].as_u64().unwrap() as usize;
            let at = 8 + header_len + start;
            bytes[at..at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes());
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let convert = |name: &str, outtype: &str| {
        let out = dir.path().join(format!("{name}.{outtype}.gguf"));
        let args: [&dyn AsRef<std::ffi::OsStr>; 6] =
            [&"--json", &"convert", &dir.path().join(name), &out, &"--outtype", &outtype];
        common::quantforge_with(&args)
    };
    let report: Json = serde_json::from_str(&common::stdout_of_success(convert("plain", "bf16"))).unwrap();
    // Embeddings, output, v, o and the MLP of two layers; q and k are permuted, norms widened to f32.
    assert_eq!(report["totals"]["tensors_copied"], 12, "{report}");
    // bf16 copies the stored bytes; f16 and q8_0 convert from them, not from an f32 copy.
    for outtype in ["bf16", "f16", "q8_0"] {
        for (name, tensor) in [("nan", "blk.0.ffn_down.weight"), ("nan-permuted", "blk.0.attn_q.weight")] {
            let refused = convert(name, outtype);
            assert_eq!(refused.status.code(), Some(1), "{outtype}");
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert!(stderr.contains(&format!("tensor `{tensor}` row 0 holds NaN")), "{outtype}: {stderr}");
        }
    }
}

/// A real checkpoint, all-MiniLM-L6-v2 as sentence-transformers publishes it
/// (`scripts/fetch-minilm.sh`): its tokenizer is one the converter knows by
/// its check hash, so no `--pre` is given, and every outtype is the
/// converter's file byte for byte (`tests/data/convert/real/`).
#[test]
fn a_real_checkpoint_converts_byte_for_byte_with_its_pre_tokenizer_told_by_hash() {
    let Some(weights) = common::minilm() else { return };
    let checkpoint = weights.parent().unwrap();
    let data = common::repo().join("tests/data/convert/real");
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    for outtype in ["f16", "bf16", "f32", "q8_0"] {
        let golden: Json = serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("all-MiniLM-L6-v2-{outtype}.json"))).unwrap(),
        )
        .unwrap();
        let out = dir.path().join(format!("{outtype}.gguf"));
        run_quantforge(&[os("convert"), checkpoint.as_os_str(), out.as_os_str(), os("--outtype"), os(outtype)]);
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(common::sha256_hex(&bytes), golden["file"]["sha256"].as_str().unwrap(), "{outtype}");
    }
}

/// Chat templates in every form gguf-py's `SpecialVocab` reads
/// (`tests/data/convert/chat-templates/cases.json`, built as
/// `tests/convert/chat_template_cases.py` builds them): a list of named
/// ones (names cleaned, unnamed and empty ones as it drops them, with and
/// without a default), a null over `chat_template.jinja`, the file with
/// `additional_chat_templates/`, and `chat_template.json`'s list — each the
/// converter's `--vocab-only` file byte for byte. A template of another
/// type, which the converter drops with a warning, is refused by name.
#[test]
fn chat_templates_in_every_form_equal_the_converters() {
    let data = common::repo().join("tests/data/convert");
    let cases: Json =
        serde_json::from_str(&std::fs::read_to_string(data.join("chat-templates/cases.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    let build = |name: &str, case: &Json| {
        let target = dir.path().join(name);
        copy_dir(&data.join("checkpoints").join(case["checkpoint"].as_str().unwrap()), &target);
        let path = target.join("tokenizer_config.json");
        let mut config: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (key, value) in case["set"].as_object().unwrap() {
            config[key] = value.clone();
        }
        for key in case["remove"].as_array().unwrap() {
            config.as_object_mut().unwrap().remove(key.as_str().unwrap());
        }
        std::fs::write(&path, config.to_string()).unwrap();
        for file in case["delete"].as_array().unwrap() {
            std::fs::remove_file(target.join(file.as_str().unwrap())).unwrap();
        }
        for (file, text) in case["files"].as_object().unwrap() {
            let path = target.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text.as_str().unwrap()).unwrap();
        }
        target
    };
    let cases = cases.as_object().unwrap();
    assert_eq!(cases.len(), 6);
    for (name, case) in cases {
        let checkpoint = build(name, case);
        let out = dir.path().join(format!("{name}.gguf"));
        run_convert(&checkpoint, &out, &[os("--outtype"), os("f16"), os("--vocab-only")]);
        let golden: Json = serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("chat-templates/{name}-f16.json"))).unwrap(),
        )
        .unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(common::sha256_hex(&bytes), golden["file"]["sha256"].as_str().unwrap(), "{name}");
    }
    let odd = build(
        "odd",
        &json!({"checkpoint": "tiny-llama-3-chat", "set": {"chat_template": 7}, "remove": [], "delete": [], "files": {}}),
    );
    let out = dir.path().join("odd.gguf");
    let output = common::quantforge(&[os("convert"), odd.as_os_str(), out.as_os_str(), os("--vocab-only")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("tokenizer_config.json: `chat_template` is 7"), "{stderr}");
}

/// A Hugging Face repo id (`ORG/NAME`, `@REVISION` too) where no such path
/// is names the repository's snapshot in the local Hub cache, found as
/// huggingface_hub finds it (`HF_HUB_CACHE`, else `HF_HOME/hub`): in
/// `convert`, `inspect` (which also says what the checkpoint's
/// `config.json` converts as) and a recipe's inputs; a revision the cache
/// lacks is an error naming it.
#[test]
fn a_repo_id_reads_the_hugging_face_cache() {
    let dir = tempfile::tempdir().unwrap();
    let original = common::repo().join("tests/data/convert/checkpoints/Qwen2.5-Tiny-Instruct");
    let hub = dir.path().join("home/hub");
    let repository = hub.join("models--acme--Qwen2.5-Tiny-Instruct");
    let (main, tagged) = ("1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222");
    for rev in [main, tagged] {
        copy_dir(&original, &repository.join("snapshots").join(rev));
    }
    std::fs::create_dir_all(repository.join("refs")).unwrap();
    std::fs::write(repository.join("refs/main"), main).unwrap();
    std::fs::write(repository.join("refs/v1"), tagged).unwrap();
    let pre = common::fixture_pre(&original);
    let quantforge = |args: &[&str], env: (&str, &std::path::Path)| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.current_dir(dir.path()).args(args).args(&pre);
        command.env_remove("HF_HUB_CACHE").env_remove("HUGGINGFACE_HUB_CACHE").env_remove("HF_HOME");
        command.env(env.0, env.1).output().unwrap()
    };
    let by_cache = ("HF_HUB_CACHE", hub.as_path());
    let by_home = ("HF_HOME", hub.parent().unwrap());
    let reference = dir.path().join("reference.gguf");
    run_convert(&original, &reference, &[]);
    let reference = std::fs::read(reference).unwrap();
    for (spec, env) in [
        ("acme/Qwen2.5-Tiny-Instruct", by_cache),
        ("acme/Qwen2.5-Tiny-Instruct", by_home),
        ("acme/Qwen2.5-Tiny-Instruct@v1", by_cache),
        (&format!("acme/Qwen2.5-Tiny-Instruct@{tagged}") as &str, by_cache),
    ] {
        let output = quantforge(&["convert", spec, "out.gguf"], env);
        assert!(output.status.success(), "{spec}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(std::fs::read(dir.path().join("out.gguf")).unwrap() == reference, "{spec}");
        std::fs::remove_file(dir.path().join("out.gguf")).unwrap();
    }
    for (spec, needle) in [
        ("acme/Qwen2.5-Tiny-Instruct@v2", "has `acme/Qwen2.5-Tiny-Instruct`"),
        ("acme/Other@main", "has no `acme/Other`"),
        ("acme/Qwen2.5-Tiny-Instruct@../main", "is not a revision"),
    ] {
        let output = quantforge(&["convert", spec, "out.gguf"], by_cache);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(needle), "{spec}: {stderr}");
    }

    let mut inspect = Command::new(env!("CARGO_BIN_EXE_quantforge"));
    inspect.current_dir(dir.path()).args(["inspect", "--json", "acme/Qwen2.5-Tiny-Instruct"]).env("HF_HUB_CACHE", &hub);
    let report: Json = serde_json::from_slice(&inspect.output().unwrap().stdout).unwrap();
    assert_eq!(
        report["checkpoint"],
        json!({"class": "Qwen2ForCausalLM", "model_type": "qwen2", "converts_as": "qwen2"})
    );

    let recipe = format!(
        "[input.hf]\npath = \"acme/Qwen2.5-Tiny-Instruct\"\n[step.c]\nop = \"convert\"\nfrom = \"hf\"\npre = {:?}\n\
         [step.out]\nop = \"export\"\nfrom = \"c\"\npath = \"recipe.gguf\"\n",
        common::fixture_pre_name(&original).unwrap()
    );
    std::fs::write(dir.path().join("hub.toml"), recipe).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_quantforge"));
    run.current_dir(dir.path()).args(["run", "hub.toml"]).env("HF_HUB_CACHE", &hub);
    let output = run.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(std::fs::read(dir.path().join("recipe.gguf")).unwrap() == reference);
}
