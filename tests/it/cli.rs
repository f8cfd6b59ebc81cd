//! The command line end to end: inspect (text, JSON, tensor table, both
//! access modes) and edit (edits, round trip, refusals), on the tiny model
//! shipped in the repo.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use expect_test::expect;
use quantforge::files::{Replaces, WriteGuard};
use quantforge::formats::{AtomicOutput, ModelFile, OpenOptions, gguf};
use quantforge::model::{Endian, Value};
use quantforge::synth::{self, LlamaConfig};
use serde_json::Value as Json;

fn inspect_json(path: &Path, extra: &[&str]) -> Json {
    let mut args: Vec<&OsStr> = vec!["inspect".as_ref(), path.as_os_str(), "--json".as_ref()];
    args.extend(extra.iter().map(OsStr::new));
    serde_json::from_str(&common::quantforge_ok::<&OsStr>(&args)).expect("inspect --json prints JSON")
}

/// `make-tiny-model --help` says what it takes and writes nothing; an
/// argument it does not take is refused.
#[test]
fn make_tiny_model_helps_without_writing() {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples/make-tiny-model");
    if !example.exists() {
        eprintln!("skipped: {} is not built (cargo test builds it)", example.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let help = std::process::Command::new(&example).arg("--help").current_dir(dir.path()).output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--wide") && text.contains("--layers"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "--help wrote something");
    let odd = std::process::Command::new(&example).arg("--wdie").current_dir(dir.path()).output().unwrap();
    assert!(!odd.status.success());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn tiny_model_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let mut model = synth::llama(&LlamaConfig::tiny());
    let (metadata, tensors) = (model.metadata.clone(), model.tensors.clone());
    let mut out = AtomicOutput::create(&WriteGuard::default().check(&path, Replaces::AnyFile).unwrap()).unwrap();
    gguf::write_gguf(out.writer(), Endian::Little, &metadata, &tensors, &mut model).unwrap();
    out.commit().unwrap();
    assert!(
        std::fs::read(&path).unwrap() == std::fs::read(common::tiny_model()).unwrap(),
        "tests/data/tiny-llama.gguf differs from what `cargo run --example make-tiny-model` writes"
    );
}

#[test]
fn inspect_text_summary() {
    let output = common::quantforge(&["inspect".as_ref(), common::tiny_model().as_os_str()]);
    let (stdout, stderr) = (String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap());
    assert!(stderr.contains(": mmap, "), "{stderr}");
    let body: String = stdout.lines().skip(1).map(|l| format!("{l}\n")).collect();
    expect![[r#"
        format        GGUF v3, little-endian, alignment 32, data at byte 13920
        architecture  llama
        family        LLaMA 1/2/3 (llama; by general.architecture)
        hparams       2 blocks, width 256, 4 heads (2 KV) of 64, context 256, vocab 512, rope base 10000
        file type     F16 (id 1)
        tensors       21 tensors, 1443072 elements, 2.8 MiB, 16.01 bits per weight

        metadata (21 keys)
          general.architecture                    str             "llama"
          general.name                            str             "quantforge tiny llama"
          general.file_type                       u32             1
          llama.vocab_size                        u32             512
          llama.context_length                    u32             256
          llama.embedding_length                  u32             256
          llama.block_count                       u32             2
          llama.feed_forward_length               u32             512
          llama.rope.dimension_count              u32             64
          llama.rope.freq_base                    f32             10000.0
          llama.attention.head_count              u32             4
          llama.attention.head_count_kv           u32             2
          llama.attention.layer_norm_rms_epsilon  f32             0.00001
          tokenizer.ggml.model                    str             "llama"
          tokenizer.ggml.tokens                   arr[str; 512]   ["<unk>","<s>","</s>","<0x00>","<0x01>","<0x02>","<0x03>","<0x04>", ...]
          tokenizer.ggml.scores                   arr[f32; 512]   [0.0,-1.0,-2.0,-3.0,-4.0,-5.0,-6.0,-7.0, ...]
          tokenizer.ggml.token_type               arr[i32; 512]   [2,3,3,6,6,6,6,6, ...]
          tokenizer.ggml.bos_token_id             u32             1
          tokenizer.ggml.eos_token_id             u32             2
          tokenizer.ggml.unknown_token_id         u32             0
          general.quantization_version            u32             2

        types
          F32          5 tensors          1280 elements     5.0 KiB
          F16         16 tensors       1441792 elements     2.8 MiB
    "#]]
    .assert_eq(&body);
}

#[test]
fn inspect_json_fields() {
    let tiny = common::tiny_model();
    let report = inspect_json(&tiny, &["--tensors"]);
    assert_eq!(report["schema"], 1);
    assert_eq!(report["format"], "GGUF");
    assert_eq!(report["version"], 3);
    assert_eq!(report["endian"], "little");
    assert_eq!(report["alignment"], 32);
    assert_eq!(report["architecture"], "llama");
    assert_eq!(report["file_type"]["name"], "F16");
    assert_eq!(report["load"]["mode"], "mmap");
    assert_eq!(report["tensor_count"], 21);
    assert_eq!(report["element_count"], 1443072);
    let tokens = report["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens["type"], "arr");
    assert_eq!(tokens["element_type"], "str");
    assert_eq!(tokens["len"], 512);
    assert_eq!(tokens["truncated"], true);
    assert_eq!(tokens["value"].as_array().unwrap().len(), 8);
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 21);
    assert_eq!(tensors[0]["name"], "token_embd.weight");
    assert_eq!(tensors[0]["shape"], serde_json::json!([256, 512]));
    assert_eq!(tensors[0]["offset"], report["data_offset"]);
    assert_eq!(tensors[0]["bytes"], 256 * 512 * 2);
    let bytes_by_type: u64 = report["types"].as_array().unwrap().iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
    assert_eq!(Some(bytes_by_type), report["tensor_bytes"].as_u64());

    let without_mmap = inspect_json(&tiny, &["--no-mmap"]);
    assert_eq!(without_mmap["load"]["mode"], "read");
    assert!(without_mmap.get("tensors").is_none());
}

#[test]
fn inspect_reads_headers_only() {
    // A sparse file whose single tensor claims 64 GiB: inspect must not read it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.gguf");
    let mut g = common::RawGguf::default();
    g.kv_str("general.architecture", "llama");
    g.tensor(b"huge.weight", &[1 << 16, 1 << 18], 0, 0);
    std::fs::write(&path, g.bytes()).unwrap();
    let file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.set_len(g.bytes().len() as u64 + (1 << 36)).unwrap();
    let report = inspect_json(&path, &["--no-mmap"]);
    assert_eq!(report["tensor_bytes"], 1u64 << 36);
    assert!(report["load"]["bytes_parsed"].as_u64().unwrap() < 4096);
}

#[test]
fn edit_without_changes_is_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.gguf");
    let tiny = common::tiny_model();
    for mmap_flag in [None, Some("--no-mmap")] {
        let mut args: Vec<&OsStr> = vec!["edit".as_ref(), tiny.as_os_str(), out.as_os_str()];
        args.extend(mmap_flag.map(OsStr::new));
        common::quantforge_ok::<&OsStr>(&args);
        assert!(std::fs::read(&out).unwrap() == std::fs::read(common::tiny_model()).unwrap());
    }
}

#[test]
fn edit_sets_deletes_and_renames() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("edited.gguf");
    let tiny = common::tiny_model();
    let args = [
        "edit",
        tiny.to_str().unwrap(),
        out.to_str().unwrap(),
        "--set",
        "general.name=str:renamed",
        "--set",
        "llama.context_length=u32:4096",
        "--set",
        "test.flag=bool:true",
        "--set",
        "test.ratio=f64:0.25",
        "--delete",
        "tokenizer.ggml.scores",
        "--rename-tensor",
        "output.weight=lm_head.weight",
    ];
    common::quantforge_ok::<&OsStr>(&args.map(OsStr::new));
    let model = ModelFile::open(&out, OpenOptions::default()).unwrap();
    let m = &model.metadata;
    assert_eq!(m.get_str("general.name"), Some("renamed"));
    assert_eq!(m.get("llama.context_length"), Some(&Value::U32(4096)));
    assert_eq!(m.get("test.flag"), Some(&Value::Bool(true)));
    assert_eq!(m.get("test.ratio"), Some(&Value::F64(0.25)));
    assert!(!m.contains_key("tokenizer.ggml.scores"));
    // Set keeps an existing key's position; new keys go last.
    let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
    assert_eq!(keys[1], "general.name");
    assert_eq!(keys[keys.len() - 2..], ["test.flag", "test.ratio"]);
    assert_eq!(model.tensors.last().unwrap().name, "lm_head.weight");

    let original = ModelFile::open(&common::tiny_model(), OpenOptions::default()).unwrap();
    for (a, b) in original.tensors.iter().zip(&model.tensors) {
        assert_eq!(original.tensor_data(a).unwrap(), model.tensor_data(b).unwrap());
    }
}

#[test]
fn edit_refuses_to_change_a_keys_type_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("edited.gguf");
    let tiny = common::tiny_model();
    let edit = |extra: &[&str]| {
        let mut args =
            vec!["edit", tiny.to_str().unwrap(), out.to_str().unwrap(), "--set", "llama.context_length=u64:4096"];
        args.extend_from_slice(extra);
        common::quantforge(&args.iter().map(OsStr::new).collect::<Vec<_>>())
    };
    let refused = edit(&[]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("cannot set `llama.context_length` as u64: it is u32 in the input")
            && err.contains("edit --force-type"),
        "{err}"
    );
    assert!(!out.exists());

    common::quantforge_ok::<&OsStr>(&[
        OsStr::new("edit"),
        tiny.as_os_str(),
        out.as_os_str(),
        OsStr::new("--set"),
        OsStr::new("llama.context_length=u64:4096"),
        OsStr::new("--force-type"),
    ]);
    let model = ModelFile::open(&out, OpenOptions::default()).unwrap();
    assert_eq!(model.metadata.get("llama.context_length"), Some(&Value::U64(4096)));
}

#[test]
fn edit_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.gguf");
    std::fs::copy(common::tiny_model(), &copy).unwrap();
    let out = dir.path().join("out.gguf");
    let cases: [(&[&str], &str); 6] = [
        (&[copy.to_str().unwrap()], "is an input of the run; refusing to overwrite it"),
        (&[out.to_str().unwrap(), "--delete", "no.such.key"], "no such metadata key"),
        (&[out.to_str().unwrap(), "--rename-tensor", "nope=x"], "cannot rename `nope`: no such tensor"),
        (
            &[out.to_str().unwrap(), "--rename-tensor", "output.weight=token_embd.weight"],
            "a tensor of that name exists",
        ),
        (&[out.to_str().unwrap(), "--set", "general.alignment=u32:48"], "must be a u32 power of two"),
        (&[out.to_str().unwrap(), "--set", "x=u8:300"], "`300` is not a valid u8 value"),
    ];
    for (tail, message) in cases {
        let mut args: Vec<&OsStr> = vec!["edit".as_ref(), copy.as_os_str()];
        args.extend(tail.iter().map(OsStr::new));
        let output = common::quantforge(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{tail:?} should fail");
        assert!(stderr.contains(message), "{tail:?}: {stderr}");
        assert!(!out.exists());
    }
}

/// `quantize --help` lists every type llama-quantize's usage lists, in its
/// order, with its file type numbers and descriptions (COPY last, without a
/// number).
#[test]
fn quantize_help_lists_the_types() {
    let help = common::quantforge_ok::<&OsStr>(&[OsStr::new("quantize"), OsStr::new("--help")]);
    for line in [
        "  40  or  Q1_0      :  1.125 bpw quantization",
        "  12  or  Q3_K      : alias for Q3_K_M",
        "  15  or  Q4_K_M    :  4.58G, +0.1754 ppl @ Llama-3-8B",
        "          COPY      : only copy tensors, no quantizing",
    ] {
        assert!(help.contains(line), "{line:?} not in:\n{help}");
    }
    let Some(llama) = common::reference("build/bin/llama-quantize") else { return };
    let usage = std::process::Command::new(llama).output().unwrap();
    // (number, name, description) of each listed type, spacing aside.
    let entries = |text: &str| -> Vec<(String, String, String)> {
        text.lines()
            .filter_map(|line| {
                let (head, description) = line.split_once(" : ")?;
                let words: Vec<&str> = head.split_whitespace().collect();
                let (number, name) = match words[..] {
                    [number, "or", name] => (number, name),
                    [name] => ("", name),
                    _ => return None,
                };
                Some((number.to_owned(), name.to_owned(), description.trim().to_owned()))
            })
            .collect()
    };
    let theirs = entries(&String::from_utf8_lossy(&usage.stdout));
    assert!(theirs.len() > 30, "llama-quantize's usage lists its types");
    assert_eq!(entries(&help), theirs);
}

fn quantize_fails(args: &[&OsStr], message: &str) {
    let mut cli = vec![OsStr::new("quantize")];
    cli.extend_from_slice(args);
    let output = common::quantforge(&cli);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{args:?} should fail");
    assert!(stderr.contains(message), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn quantize_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let (q4, out) = (dir.path().join("q4.gguf"), dir.path().join("out.gguf"));
    quantize_fails(&[tiny.as_os_str(), out.as_os_str(), "Q9_Z".as_ref()], "valid types are Q1_0, Q2_0, Q4_0, Q4_1");
    quantize_fails(&[tiny.as_os_str(), out.as_os_str(), "Q4_K_N".as_ref()], "did you mean `Q4_K_S`?");
    quantize_fails(&[tiny.as_os_str(), out.as_os_str()], "missing TYPE: give a preset (Q4_K_M, …) or --target-size");
    quantize_fails(&[tiny.as_os_str(), "Q8_0".as_ref(), "two".as_ref()], "invalid NTHREADS `two`");
    let output = common::quantforge(&["quantize".as_ref(), tiny.as_os_str(), q4.as_os_str(), "Q4_K_M".as_ref()]);
    assert!(output.status.success());
    quantize_fails(&[q4.as_os_str(), out.as_os_str(), "Q8_0".as_ref()], "requantizing from type Q6_K is disabled");
    quantize_fails(&[tiny.as_os_str(), out.as_os_str(), "Q2_K_S".as_ref()], "needs an importance matrix");
    quantize_fails(
        &[tiny.as_os_str(), tiny.as_os_str(), "Q8_0".as_ref()],
        "is an input of the run; refusing to overwrite it",
    );

    // A weight that is NaN: llama-quantize refuses to write it, and so do we.
    let mut g = common::RawGguf::default();
    g.kv_str("general.architecture", "llama").kv_u32("llama.block_count", 1);
    g.tensor(b"blk.0.ffn_up.weight", &[32, 2], 0, 0);
    g.data = (0..64).flat_map(|i| if i == 37 { f32::NAN } else { i as f32 / 64.0 }.to_le_bytes()).collect();
    let nan = common::write_temp(dir.path(), "nan.gguf", &g.bytes());
    quantize_fails(&[nan.as_os_str(), out.as_os_str(), "Q8_0".as_ref()], "`blk.0.ffn_up.weight` row 1 holds NaN");
    assert!(!out.exists());
}

#[test]
fn diff_reports_per_tensor_error() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let q8 = dir.path().join("q8.gguf");
    common::quantforge_ok::<&OsStr>(&["quantize".as_ref(), tiny.as_os_str(), q8.as_os_str(), "Q8_0".as_ref()]);
    let stdout =
        common::quantforge_ok::<&OsStr>(&["diff".as_ref(), tiny.as_os_str(), q8.as_os_str(), "--json".as_ref()]);
    let report: Json = serde_json::from_str(&stdout).unwrap();
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 21);
    let norm = tensors.iter().find(|t| t["name"] == "output_norm.weight").unwrap();
    assert_eq!((norm["mae"].as_f64(), norm["cosine"].as_f64()), (Some(0.0), Some(1.0)));
    let q = tensors.iter().find(|t| t["name"] == "blk.0.attn_q.weight").unwrap();
    assert_eq!(q["type_b"], "Q8_0");
    let (rmse, cosine) = (q["rmse"].as_f64().unwrap(), q["cosine"].as_f64().unwrap());
    assert!(rmse > 0.0 && rmse < 1e-3 && cosine > 0.9999, "{q}");
    assert_eq!(report["total"]["elements"], 1443072);
}

/// Hyperparameters of the real Gemma model and of every language model the
/// multimodal fixtures imitate hold together, as llama.cpp would read them.
#[test]
fn inspect_reports_validated_hyperparameters() {
    let json = |path: &std::path::Path| -> serde_json::Value {
        let stdout = common::quantforge_ok::<&OsStr>(&["inspect".as_ref(), "--json".as_ref(), path.as_os_str()]);
        serde_json::from_str(&stdout).unwrap()
    };
    let fixtures = common::repo().join("tests/data/multimodal");
    for lm in ["qwen2.5-vl-lm.gguf", "qwen3-vl-lm.gguf", "smolvlm-lm.gguf", "minicpm-v-2.6-lm.gguf", "ultravox-lm.gguf"]
    {
        let report = json(&fixtures.join(lm));
        assert!(report["hyperparameter_error"].is_null(), "{lm}: {}", report["hyperparameter_error"]);
        assert!(report["hyperparameters"]["block_count"].as_u64().unwrap() >= 1, "{lm}");
    }
    assert!(
        json(&fixtures.join("qwen2.5-vl-mmproj.gguf"))["hyperparameters"].is_null(),
        "an mmproj is not a language model"
    );
    let Some(gemma) = common::gemma() else { return };
    let h = &json(&gemma)["hyperparameters"];
    assert_eq!(h["architecture"], "gemma3");
    let numbers: Vec<u64> =
        ["block_count", "embedding_length", "head_count", "head_count_kv", "head_dim", "vocab_size"]
            .iter()
            .map(|k| h[k].as_u64().unwrap())
            .collect();
    assert_eq!(numbers, [18, 640, 4, 1, 256, 262144]);
}

/// Tensors copied unchanged go out in runs, one copy per run, taking the
/// bytes between tensors along only when they are the zeros we would write:
/// whatever padding a file holds, ours is zero.
#[test]
fn copies_write_zero_padding_whatever_the_input_holds() {
    let file = |padding: [u8; 2]| {
        let mut g = common::RawGguf::default();
        g.kv_str("general.architecture", "llama");
        // 12, 20 and 32 bytes of F32 at 0, 32 and 64: padding after the first two.
        g.tensor(b"a", &[3], 0, 0).tensor(b"b", &[5], 0, 32).tensor(b"c", &[8], 0, 64);
        g.data = [common::noise(1, 12), vec![padding[0]; 20], common::noise(2, 20), vec![padding[1]; 12]].concat();
        g.data.extend(common::noise(3, 32));
        g.bytes()
    };
    let dir = tempfile::tempdir().unwrap();
    let clean = common::write_temp(dir.path(), "clean.gguf", &file([0, 0]));
    for (name, padding) in [("clean", [0, 0]), ("first", [0xaa, 0]), ("second", [0, 0x55]), ("both", [1, 2])] {
        let input = common::write_temp(dir.path(), &format!("{name}-in.gguf"), &file(padding));
        for access in [&[][..], &["--no-mmap"][..]] {
            let output = dir.path().join(format!("{name}-out.gguf"));
            let mut args: Vec<&OsStr> = vec!["edit".as_ref(), input.as_os_str(), output.as_os_str()];
            args.extend(access.iter().map(OsStr::new));
            common::quantforge_ok::<&OsStr>(&args);
            assert!(std::fs::read(&output).unwrap() == std::fs::read(&clean).unwrap(), "{name} {access:?}");
        }
    }
}

/// Under a terminal a one-shot command shows its progress from the first
/// tensor; `-q` silences it, and a pipe never sees it.
#[test]
fn progress_shows_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let under_terminal = |extra: &str, output: &str| {
        let log = dir.path().join(format!("{output}.log"));
        let command = format!(
            "{} quantize {extra} {} {} Q4_K_M",
            env!("CARGO_BIN_EXE_quantforge"),
            common::tiny_model().display(),
            dir.path().join(output).display()
        );
        // `script` runs the command on a pseudo-terminal and records what it drew.
        let status = std::process::Command::new("script").args(["-qec", &command]).arg(&log).status().unwrap();
        assert!(status.success(), "{command}");
        String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned()
    };
    let shown = under_terminal("", "a.gguf");
    assert!(shown.contains("export a.gguf") && shown.contains("MiB"), "{shown}");
    let quiet = under_terminal("-q", "b.gguf");
    assert!(!quiet.contains("export b.gguf"), "{quiet}");
    assert!(!quiet.contains("wrote "), "-q prints nothing but errors: {quiet}");

    let out = dir.path().join("c.gguf");
    let piped = common::quantforge(&[
        "quantize".as_ref(),
        common::tiny_model().as_os_str(),
        out.as_os_str(),
        "Q4_K_M".as_ref(),
    ]);
    assert!(piped.status.success());
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("export c.gguf"));
}

#[test]
fn version_completions_and_manual() {
    let version = common::quantforge_ok::<&OsStr>(&["--version".as_ref()]);
    let script = std::fs::read_to_string(common::repo().join("scripts/fetch-references.sh")).unwrap();
    let pinned = script.lines().find_map(|l| l.strip_prefix("version=")).unwrap();
    assert!(version.contains(&format!("llama-cpp-python {pinned} ")), "--version and the references agree: {version}");
    assert!(version.contains("codec version ") && version.contains("cache key scheme "), "{version}");
    let bash = common::quantforge_ok::<&OsStr>(&["completions".as_ref(), "bash".as_ref()]);
    assert!(bash.contains("_quantforge()") && bash.contains("--cache-dir"), "{bash}");
    let man = common::quantforge_ok::<&OsStr>(&["man".as_ref()]);
    assert!(man.starts_with(".ie") || man.contains(".TH quantforge"), "{man}");
    assert!(man.contains("quantize"), "{man}");
    // Every page a page lists is written, and printed by its command's name.
    let dir = tempfile::tempdir().unwrap();
    common::quantforge_ok::<&OsStr>(&["man".as_ref(), "--dir".as_ref(), dir.path().as_os_str()]);
    let mut listed = 0;
    for page in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(page.unwrap().path()).unwrap();
        for reference in text.split_whitespace().filter(|w| w.starts_with("quantforge\\-") && w.ends_with("(1)")) {
            let file = reference.trim_end_matches("(1)").replace("\\-", "-") + ".1";
            assert!(dir.path().join(&file).is_file(), "{reference} is listed but {file} is not written");
            listed += 1;
        }
    }
    assert!(listed > 30, "{listed} pages listed");
    let gc = common::quantforge_ok::<&OsStr>(&["man".as_ref(), "cache".as_ref(), "gc".as_ref()]);
    assert!(gc.contains(".TH quantforge-cache-gc 1"), "{gc}");
    let help = common::quantforge_ok::<&OsStr>(&["--help".as_ref()]);
    for variable in
        ["QUANTFORGE_CACHE", "QUANTFORGE_CACHE_URL", "QUANTFORGE_SIMD", "AWS_ENDPOINT_URL", "XDG_CACHE_HOME"]
    {
        assert!(help.contains(variable), "--help names {variable}: {help}");
    }
}

/// `inspect` of a Hugging Face checkpoint directory or its index shows the
/// whole checkpoint; a directory without weights says so.
#[test]
fn inspect_reads_a_checkpoint_directory_and_its_index() {
    let checkpoints = common::repo().join("tests/data/convert/checkpoints");
    let sharded = checkpoints.join("Mistral-Tiny-180K-v0.3");
    let by_dir = inspect_json(&sharded, &[]);
    let by_index = inspect_json(&sharded.join("model.safetensors.index.json"), &[]);
    assert_eq!(by_dir["split"].as_array().unwrap().len(), 6, "{by_dir:#}");
    assert_eq!(by_dir["tensor_count"], by_index["tensor_count"]);
    let single = inspect_json(&checkpoints.join("Qwen2.5-Tiny-Instruct"), &[]);
    assert_eq!(single["tensor_count"], 26);
    let empty = tempfile::tempdir().unwrap();
    let out = common::quantforge(&["inspect".as_ref(), empty.path().as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("without model*.safetensors"));
}

/// Logs: warnings by default, `-q` none, `-v` each node's outcome, `-vv`
/// file, cache and remote events; `RUST_LOG` when no flag says.
#[test]
fn log_levels_follow_the_flags_and_rust_log() {
    let (project, recipe) = common::quickstart_project();
    let stderr_of = |args: &[&str], env: Option<(&str, &str)>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.args(args).env_remove("RUST_LOG").current_dir(project.path());
        if let Some((key, value)) = env {
            command.env(key, value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stderr).unwrap()
    };
    let recipe = recipe.to_str().unwrap();
    let quiet_run = stderr_of(&["run", recipe], None);
    assert!(!quiet_run.contains("info:") && !quiet_run.contains("debug:"), "{quiet_run}");
    let verbose = stderr_of(&["-v", "run", recipe, "--force"], None);
    assert!(verbose.contains("info: publish[preset=Q8_0]: ran in "), "{verbose}");
    assert!(!verbose.contains("debug:"), "{verbose}");
    let debug = stderr_of(&["run", recipe, "--force", "-vv"], None);
    assert!(debug.contains("debug: loaded ") && debug.contains("debug: publish[preset=Q8_0]: started"), "{debug}");
    let from_env = stderr_of(&["run", recipe, "--force"], Some(("RUST_LOG", "quantforge=debug")));
    assert!(from_env.contains("debug: loaded "), "{from_env}");

    let tiny = common::tiny_model();
    let out = project.path().join("t.gguf");
    let args = ["quantize", "--threads", "100000", tiny.to_str().unwrap(), out.to_str().unwrap(), "Q8_0"];
    let warned = stderr_of(&args, None);
    assert!(warned.contains("warning: 100000 worker threads asked; using "), "{warned}");
    // -q prints nothing but errors: no warning, no `wrote` line, for any
    // command that writes.
    let silenced = stderr_of(&[&["-q"], &args[..]].concat(), None);
    assert_eq!(silenced, "");
    let edited = project.path().join("e.gguf");
    assert_eq!(stderr_of(&["-q", "edit", tiny.to_str().unwrap(), edited.to_str().unwrap()], None), "");
    assert_eq!(stderr_of(&["-q", "inspect", tiny.to_str().unwrap()], None), "");
}

/// A one-shot command's refusal names the file, not the step the command
/// runs inside; a remote cache without credentials says which variables
/// give them, not where the S3 client looked last.
#[test]
fn messages_name_what_the_user_wrote() {
    let tiny = common::tiny_model();
    let out = common::quantforge_with(&[&"edit", &tiny, &"/dev/full"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/dev/full: is a character device"), "{stderr}");
    assert!(!stderr.contains("export `"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quantforge"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
        command.env_remove(key);
    }
    let out = command
        .args(["quantize", "--cache-url", "s3://quantforge-no-such-bucket/x"])
        .arg(&tiny)
        .arg(dir.path().join("q.gguf"))
        .arg("Q8_0")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "{stderr}");
    assert!(!stderr.contains("169.254") && !stderr.contains("x: s3://"), "{stderr}");
}

/// Quantizing a Hugging Face checkpoint (its directory or a SafeTensors
/// file) says to convert it, instead of a missing metadata key.
#[test]
fn quantizing_a_checkpoint_says_to_convert_it() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = common::repo().join("tests/data/convert/checkpoints/qwen3");
    let out = dir.path().join("q.gguf");
    for (input, needle) in [
        (checkpoint.clone(), "only `convert` reads a checkpoint directory"),
        (checkpoint.join("model-00001-of-00005.safetensors"), "`quantforge convert CHECKPOINT-DIR OUT.gguf"),
    ] {
        let output = common::quantforge(&["quantize".as_ref(), input.as_os_str(), out.as_os_str(), "Q8_0".as_ref()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(needle), "{stderr}");
        assert!(!out.exists());
    }
}

/// A reader that stops early (`| head`) ends a command quietly.
#[test]
fn a_closed_pipe_ends_completions_quietly() {
    use std::os::fd::FromRawFd;
    // A pipe whose reading end is closed before the command starts: its first write fails.
    let mut ends = [0; 2];
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    unsafe { libc::close(ends[0]) };
    let closed = unsafe { std::fs::File::from_raw_fd(ends[1]) };
    for args in [&["completions", "zsh"][..], &["man"], &["schema", "inspect"]] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_quantforge"))
            .args(args)
            .stdout(closed.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        assert!(output.status.code().is_some(), "{args:?}: killed by a signal: {}", output.status);
    }
}

/// An input the recipe says how to fetch (`fetch = "…"`) names that command
/// when its file is missing.
#[test]
fn a_missing_input_names_its_fetch_command() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = "[input.m]\npath = \"models/absent.gguf\"\nfetch = \"./scripts/fetch-models.sh\"\n\
                  [step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = \"Q8_0\"\n\
                  [step.out]\nop = \"export\"\nfrom = \"q\"\npath = \"out.gguf\"\n";
    std::fs::write(dir.path().join("r.toml"), recipe).unwrap();
    let output = common::quantforge_in(dir.path(), &["run".as_ref(), "r.toml".as_ref()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    let expected = "r.toml:2:8: input `m`: ./models/absent.gguf: no such file; \
                    `./scripts/fetch-models.sh` fetches it (the recipe's `fetch`)";
    assert!(stderr.contains(expected), "{stderr}");
}

/// `quantize IN OUT TYPE,TYPE,…` is a ladder in one run: each file the bytes
/// of its own `quantize`, each tensor decoded once for every rung, and the
/// same files as a recipe's fan-out.
#[test]
fn quantize_writes_a_ladder_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = d.join("tiny.gguf");
    std::fs::copy(common::tiny_model(), &tiny).unwrap();
    let presets = ["Q4_K_M", "Q6_K", "Q8_0"];
    let template = d.join("ladder/m-{preset}.gguf");
    let out = common::quantforge_with(&[&"--json", &"quantize", &tiny, &template, &presets.join(",")]);
    let report: Json = serde_json::from_str(&common::stdout_of_success(out)).unwrap();
    let totals = &report["totals"];
    assert!(totals["tensors_decoded"].as_u64().unwrap() < totals["tensors_encoded"].as_u64().unwrap(), "{report}");
    assert_eq!(report["files"].as_array().unwrap().len(), 3, "{report}");
    let left: Vec<_> = std::fs::read_dir(d.join("ladder")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 3, "the scratch cache is gone: {left:?}");

    let recipe = d.join("ladder.toml");
    std::fs::write(&recipe, common::LADDER.replace(r#"["Q8_0", "Q4_K_M", "Q3_K_S"]"#, r#"["Q4_K_M", "Q6_K", "Q8_0"]"#))
        .unwrap();
    common::stdout_of_success(common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &d.join("cache")]));
    for preset in presets {
        let single = d.join(format!("single-{preset}.gguf"));
        common::stdout_of_success(common::quantforge_with(&[&"quantize", &tiny, &single, &preset]));
        let ladder = std::fs::read(d.join(format!("ladder/m-{preset}.gguf"))).unwrap();
        assert!(ladder == std::fs::read(&single).unwrap(), "{preset}: the ladder's file is not quantize's");
        assert!(
            ladder == std::fs::read(d.join(format!("out/tiny-{preset}.gguf"))).unwrap(),
            "{preset}: not the recipe's"
        );
    }

    // Without OUT, llama-quantize's names beside the input; NTHREADS after.
    common::stdout_of_success(common::quantforge_with(&[&"quantize", &tiny, &"Q8_0,q4_0", &"2"]));
    for name in ["Q8_0", "Q4_0"] {
        assert!(d.join(format!("ggml-model-{name}.gguf")).exists(), "{name}");
    }

    let out = d.join("x.gguf");
    quantize_fails(&[tiny.as_os_str(), out.as_os_str(), "Q8_0,Q6_K".as_ref()], "put {preset} in OUT");
    quantize_fails(&[tiny.as_os_str(), template.as_os_str(), "Q8_0,Q8_0".as_ref()], "Q8_0 is listed twice");
    quantize_fails(&[tiny.as_os_str(), template.as_os_str(), "Q8_0,Q6K".as_ref()], "did you mean `Q6_K`?");
    quantize_fails(
        &["--dry-run".as_ref(), tiny.as_os_str(), template.as_os_str(), "Q8_0,Q6_K".as_ref()],
        "give one TYPE",
    );
}
