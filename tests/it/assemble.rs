//! `assemble` and `unbundle` on the multimodal fixtures (`tests/data/multimodal`,
//! facts in `fixtures.json`): each file's role comes from its metadata, in
//! either argument order; fitting pairs bundle and every part comes back
//! exactly; the others fail as llama.cpp would refuse them, naming the facts.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use quantforge::arch::clip::{self, ClipError, PartRole};
use quantforge::artifact::TensorSet;
use quantforge::formats::{ModelFile, OpenOptions};
use quantforge::key::Key;
use quantforge::ops::assemble::{AssembleError, assemble, bundle_parts, unbundle};
use quantforge::ops::load;

#[derive(serde::Deserialize)]
struct Fixtures {
    files: BTreeMap<String, FileFacts>,
    pairs: Vec<Pair>,
}

#[derive(serde::Deserialize)]
struct FileFacts {
    role: Option<String>,
    projector_type: Option<String>,
    output_width: Option<u64>,
    width_tensor: Option<String>,
    embedding_input_length: Option<u64>,
}

#[derive(serde::Deserialize)]
struct Pair {
    name: String,
    lm: String,
    mmproj: Vec<String>,
    roles: BTreeMap<String, Option<String>>,
    lm_architecture: String,
    lm_embedding_input_length: u64,
    projector_type: Option<String>,
    expected_output_width: Option<u64>,
    width_tensor: Option<String>,
    expect_fit: bool,
    expected_error: Option<String>,
}

impl Pair {
    /// The files as listed (language model first) and reversed.
    fn orders(&self) -> [Vec<&str>; 2] {
        let listed: Vec<&str> =
            std::iter::once(self.lm.as_str()).chain(self.mmproj.iter().map(String::as_str)).collect();
        let reversed = listed.iter().rev().copied().collect();
        [listed, reversed]
    }
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/multimodal")
}

fn fixtures() -> Fixtures {
    serde_json::from_slice(&std::fs::read(data_dir().join("fixtures.json")).unwrap()).unwrap()
}

fn load(name: &str) -> TensorSet {
    let model = ModelFile::open(&data_dir().join(name), OpenOptions::default()).unwrap();
    load::apply(&model, Key::of_bytes(name.as_bytes()))
}

fn assemble_files(names: &[&str]) -> Result<TensorSet, AssembleError> {
    let sets: Vec<TensorSet> = names.iter().map(|name| load(name)).collect();
    assemble(&sets.iter().collect::<Vec<_>>())
}

fn role(name: &str) -> PartRole {
    PartRole::from_name(name).unwrap_or_else(|| panic!("fixtures.json names role `{name}`"))
}

fn assert_same(got: &TensorSet, want: &TensorSet, what: &str) {
    assert_eq!(got.endian, want.endian, "{what}");
    assert_eq!(got.metadata.iter().collect::<Vec<_>>(), want.metadata.iter().collect::<Vec<_>>(), "{what}");
    assert_eq!(got.tensors, want.tensors, "{what}");
}

#[test]
fn each_file_reads_as_fixtures_json_says() {
    for (name, facts) in fixtures().files {
        let set = load(&name);
        let infos = set.infos();
        match (&facts.role, clip::part_role(&set.metadata)) {
            (Some(expected), Ok(got)) => assert_eq!(got.name(), expected, "{name}"),
            (None, Err(err)) => assert_eq!(err, ClipError::NoEncoder, "{name}"),
            (expected, got) => panic!("{name}: role {expected:?}, got {got:?}"),
        }
        if let Some(width) = facts.embedding_input_length {
            assert_eq!(clip::language_input_width(&set.metadata).unwrap().width, width, "{name}");
        }
        let Some(encoder) = facts.role.as_deref().map(role).and_then(|r| r.encoders().first().copied()) else {
            continue;
        };
        match (&facts.projector_type, clip::projector_output_width(&set.metadata, &infos, encoder)) {
            (Some(projector_type), Ok(width)) => {
                assert_eq!(&width.projector_type, projector_type, "{name}");
                assert_eq!(Some(width.width), facts.output_width, "{name}");
                assert_eq!(Some(width.tensor), facts.width_tensor.as_deref(), "{name}");
            }
            (None, Err(err)) => assert!(matches!(err, ClipError::MissingProjectorType { .. }), "{name}: {err}"),
            (expected, got) => panic!("{name}: projector {expected:?}, got {got:?}"),
        }
    }
}

#[test]
fn fitting_pairs_bundle_in_either_order_and_every_part_comes_back_exactly() {
    let fixtures = fixtures();
    let fitting: Vec<&Pair> = fixtures.pairs.iter().filter(|pair| pair.expect_fit).collect();
    assert_eq!(fitting.len(), 5);
    for pair in fitting {
        let [listed, reversed] = pair.orders();
        let bundle = assemble_files(&listed).unwrap_or_else(|e| panic!("{}: {e}", pair.name));
        let expected_parts: Vec<PartRole> =
            listed.iter().map(|file| role(pair.roles[*file].as_deref().unwrap())).collect();
        assert_eq!(bundle_parts(&bundle.metadata).unwrap(), expected_parts, "{}", pair.name);
        let other = assemble_files(&reversed).unwrap();
        assert_same(&other, &bundle, &format!("{}: the order of the arguments", pair.name));
        assert_eq!(bundle.tensors.len(), listed.iter().map(|file| load(file).tensors.len()).sum::<usize>());

        // Through a manifest, whose metadata is a GGUF header, as a cached node's would be.
        let decoded = TensorSet::decode(&bundle.encode().unwrap(), &pair.name).unwrap();
        for (file, role_name) in &pair.roles {
            let original = load(file);
            let part = role(role_name.as_deref().unwrap());
            assert_same(&unbundle(&bundle, part).unwrap(), &original, &format!("{}: {file}", pair.name));
            assert_same(&unbundle(&decoded, part).unwrap(), &original, &format!("{}: {file} (manifest)", pair.name));
        }
    }
}

#[test]
fn mismatched_pairs_name_both_widths() {
    let fixtures = fixtures();
    let mismatched: Vec<&Pair> =
        fixtures.pairs.iter().filter(|pair| !pair.expect_fit && pair.expected_error.is_none()).collect();
    assert_eq!(mismatched.len(), 2);
    for pair in mismatched {
        for order in pair.orders() {
            let Err(AssembleError::WidthMismatch { projector, language, .. }) = assemble_files(&order) else {
                panic!("{}: expected a width mismatch", pair.name);
            };
            assert_eq!(Some(&projector.projector_type), pair.projector_type.as_ref(), "{}", pair.name);
            assert_eq!(Some(projector.tensor), pair.width_tensor.as_deref(), "{}", pair.name);
            assert_eq!(Some(projector.width), pair.expected_output_width, "{}", pair.name);
            assert_eq!(
                (language.architecture.as_str(), language.width),
                (pair.lm_architecture.as_str(), pair.lm_embedding_input_length)
            );
        }
    }
    let message = |name: &str| {
        let pair = fixtures.pairs.iter().find(|pair| pair.name == name).unwrap();
        assemble_files(&pair.orders()[0]).unwrap_err().to_string()
    };
    assert_eq!(
        message("mismatch-qwen2.5-vl"),
        "the vision projector (qwen2.5vl_merger, mm.2.bias) outputs 96 values per token, \
         but the language model (qwen2vl) takes 64 (qwen2vl.embedding_length)"
    );
    // The naive width (mm.2.bias ne[0] = 64) would pass; the deepstack layer doubles it.
    assert_eq!(
        message("mismatch-qwen3-vl-mmproj-on-qwen2.5-vl-lm"),
        "the vision projector (qwen3vl_merger, mm.2.bias × (1 + 1 deepstack layer)) outputs 128 values per token, \
         but the language model (qwen2vl) takes 64 (qwen2vl.embedding_length)"
    );
}

#[test]
fn broken_mmproj_files_fail_with_their_own_errors() {
    let fixtures = fixtures();
    // The file's role, when it has one, labels the part.
    let expected = [
        (
            "broken-no-projector-type",
            " (vision)",
            "missing clip.projector_type (and clip.vision.projector_type): the file names no projector",
        ),
        ("broken-no-encoder", "", "no encoder: neither clip.has_vision_encoder nor clip.has_audio_encoder is true"),
    ];
    for (name, role, problem) in expected {
        let pair = fixtures.pairs.iter().find(|pair| pair.name == name).unwrap();
        assert!(pair.expected_error.is_some() && !pair.expect_fit, "{name}");
        for order in pair.orders() {
            let number = order.iter().position(|file| *file == pair.mmproj[0]).unwrap() + 1;
            let err = assemble_files(&order).unwrap_err();
            assert_eq!(err.to_string(), format!("part {number}{role}: {problem}"), "{name}");
        }
    }
}

#[test]
fn a_bundle_has_one_language_model_and_one_part_per_role() {
    let err = assemble_files(&["qwen2.5-vl-lm.gguf", "qwen2.5-vl-mmproj.gguf", "mismatch-qwen2.5-vl-mmproj.gguf"]);
    assert_eq!(err.unwrap_err().to_string(), "two vision parts: part 2 and part 3");
    let err = assemble_files(&["qwen2.5-vl-mmproj.gguf", "ultravox-mmproj.gguf"]);
    assert_eq!(err.unwrap_err(), AssembleError::NoLanguageModel { count: 2 });
    let err = assemble_files(&["smolvlm-lm.gguf", "ultravox-lm.gguf", "smolvlm-mmproj.gguf"]);
    assert_eq!(err.unwrap_err().to_string(), "two language parts: part 1 and part 2");
    let err = assemble_files(&["smolvlm-lm.gguf"]);
    assert_eq!(err.unwrap_err(), AssembleError::NoProjector { number: 1 });
}

#[test]
fn a_bundle_is_not_a_part_of_another() {
    let bundle = assemble_files(&["ultravox-lm.gguf", "ultravox-mmproj.gguf"]).unwrap();
    let mmproj = load("smolvlm-mmproj.gguf");
    let err = assemble(&[&mmproj, &bundle]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "part 2 is already a bundle: `assemble` takes a language model and its mmproj files (`unbundle` gives them back)"
    );
    let err = unbundle(&bundle, PartRole::Vision).unwrap_err();
    assert_eq!(err.to_string(), "the bundle has no vision part (it holds language, audio)");
    let err = unbundle(&mmproj, PartRole::Vision).unwrap_err();
    assert_eq!(err.to_string(), "not a bundle: general.type is `mmproj`, not `bundle`");
}

/// Through recipes: every fitting pair assembled into a bundle file, the
/// bundle loaded back and unbundled, gives every original file back byte
/// for byte.
#[test]
fn bundle_files_unbundle_to_the_original_files() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/multimodal");
    let dir = tempfile::tempdir().unwrap();
    for (lm, mmproj, part) in [
        ("qwen2.5-vl-lm.gguf", "qwen2.5-vl-mmproj.gguf", "vision"),
        ("smolvlm-lm.gguf", "smolvlm-mmproj.gguf", "vision"),
        ("minicpm-v-2.6-lm.gguf", "minicpm-v-2.6-mmproj.gguf", "vision"),
        ("ultravox-lm.gguf", "ultravox-mmproj.gguf", "audio"),
    ] {
        let recipe = dir.path().join("bundle.toml");
        std::fs::write(
            &recipe,
            format!(
                r#"
[input.lm]
path = "{lm}"
[input.mmproj]
path = "{mmproj}"
[step.vlm]
op = "assemble"
from = ["mmproj", "lm"]
[step.out]
op = "export"
from = "vlm"
path = "{out}/bundle.gguf"
"#,
                lm = data.join(lm).display(),
                mmproj = data.join(mmproj).display(),
                out = "out",
            ),
        )
        .unwrap();
        let run = |recipe: &Path| {
            let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
                .args([
                    "run".as_ref(),
                    recipe.as_os_str(),
                    "--cache-dir".as_ref(),
                    dir.path().join("cache").as_os_str(),
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        run(&recipe);
        let back = dir.path().join("unbundle.toml");
        std::fs::write(
            &back,
            format!(
                r#"
[input.bundle]
path = "out/bundle.gguf"
[step.part]
op = "unbundle"
from = "bundle"
part = ["language", "{part}"]
[step.out]
op = "export"
from = "part"
path = "out/{{part}}.gguf"
"#
            ),
        )
        .unwrap();
        run(&back);
        let same = |ours: &str, original: &str| {
            let (a, b) = (std::fs::read(dir.path().join(ours)).unwrap(), std::fs::read(data.join(original)).unwrap());
            assert!(a == b, "{ours} differs from {original}");
        };
        same("out/language.gguf", lm);
        same(&format!("out/{part}.gguf"), mmproj);
    }
}

/// The one-shot commands: `assemble` then `unbundle` give the parts back,
/// and a mismatch fails with both widths and writes nothing.
#[test]
fn assemble_and_unbundle_commands() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/multimodal");
    let dir = tempfile::tempdir().unwrap();
    let quantforge =
        |args: &[&std::ffi::OsStr]| Command::new(env!("CARGO_BIN_EXE_quantforge")).args(args).output().unwrap();
    let bundle = dir.path().join("bundle.gguf");
    let out = quantforge(&[
        "assemble".as_ref(),
        data.join("ultravox-mmproj.gguf").as_os_str(),
        data.join("ultravox-lm.gguf").as_os_str(),
        "-o".as_ref(),
        bundle.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (part, original) in [("language", "ultravox-lm.gguf"), ("audio", "ultravox-mmproj.gguf")] {
        let back = dir.path().join(format!("{part}.gguf"));
        let out = quantforge(&["unbundle".as_ref(), bundle.as_os_str(), part.as_ref(), back.as_os_str()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::read(&back).unwrap() == std::fs::read(data.join(original)).unwrap(), "{part}");
    }
    // A bundle is not quantized whole: the message names the command that takes a part out.
    let quantized = dir.path().join("q.gguf");
    let out = quantforge(&["quantize".as_ref(), bundle.as_os_str(), quantized.as_os_str(), "Q8_0".as_ref()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("is a bundle of 2 parts: `quantforge unbundle"), "{stderr}");
    assert!(!quantized.exists());
    let refused = dir.path().join("refused.gguf");
    let out = quantforge(&[
        "assemble".as_ref(),
        data.join("qwen2.5-vl-lm.gguf").as_os_str(),
        data.join("mismatch-qwen2.5-vl-mmproj.gguf").as_os_str(),
        "-o".as_ref(),
        refused.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("outputs 96 values per token") && stderr.contains("takes 64"), "{stderr}");
    assert!(!refused.exists());
}

/// `inspect` of a bundle shows each part as a model of its own: the
/// language part's hyperparameters, not "INVALID" for the bundle's.
#[test]
fn inspect_shows_each_parts_hyperparameters() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.gguf");
    let data = common::repo().join("tests/data/multimodal");
    let (lm, mmproj) = (data.join("smolvlm-lm.gguf"), data.join("smolvlm-mmproj.gguf"));
    common::stdout_of_success(common::quantforge_with(&[&"assemble", &lm, &mmproj, &"-o", &bundle]));
    let text = common::stdout_of_success(common::quantforge_with(&[&"inspect", &bundle]));
    assert!(!text.contains("INVALID"), "{text}");
    assert!(text.contains("part          language: llama (SmolVLM2), 20 tensors, "), "{text}");
    assert!(text.contains("  hparams     2 blocks, width 48, 3 heads (1 KV) of 16, context 256"), "{text}");
    assert!(text.contains("part          vision: clip (SmolVLM2), 38 tensors, "), "{text}");
    let json = common::stdout_of_success(common::quantforge_with(&[&"--json", &"inspect", &bundle]));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(report.get("hyperparameters").is_none() && report.get("hyperparameter_error").is_none());
    let parts = report["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(
        (parts[0]["role"].as_str(), parts[0]["hyperparameters"]["block_count"].as_u64()),
        (Some("language"), Some(2))
    );
    assert_eq!(parts[1]["role"], "vision");
    assert_eq!(parts[1]["family"]["id"], "smolvlm2");
    let lm_alone = common::stdout_of_success(common::quantforge_with(&[&"--json", &"inspect", &lm]));
    let lm_alone: serde_json::Value = serde_json::from_str(&lm_alone).unwrap();
    assert_eq!(parts[0]["hyperparameters"], lm_alone["hyperparameters"]);
    assert_eq!(parts[0]["tensor_bytes"], lm_alone["tensor_bytes"]);
}
