//! PyTorch checkpoints (`formats::torch`) against torch itself: fixtures
//! made by `tests/torch/make_fixtures.py` with torch (the zip format and
//! the legacy one before it), every tensor's bytes
//! equal to what `torch.load(weights_only=True)` gives (views, offsets,
//! broadcasts, shared storages, every dtype), and the malicious checkpoints
//! refused without their payloads running.

use crate::common;

use std::path::{Path, PathBuf};

use quantforge::formats::{ContainerFormat, ModelFile, OpenOptions};
use quantforge::model::Value;
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    common::repo().join("tests/data/torch")
}

fn expected() -> Json {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

/// Every tensor of `file` as torch reads it, mapped or not.
fn check_tensors(file: &str, expected: &Json) {
    for use_mmap in [true, false] {
        let model = ModelFile::open(&fixtures().join(file), OpenOptions { use_mmap }).unwrap();
        assert_eq!(model.format, ContainerFormat::PyTorch);
        assert_eq!(model.metadata.len(), expected["metadata"].as_object().unwrap().len(), "{file}");
        common::check_tensors(&model, expected["tensors"].as_array().unwrap(), &format!("{file} (mmap {use_mmap})"));
    }
}

#[test]
fn every_tensor_equals_torch_load() {
    check_tensors("state.pt", &expected()["state.pt"]);
}

/// The format before PyTorch 1.6: pickles one after another, then storages.
#[test]
fn the_legacy_format_reads_as_torch_load_reads_it() {
    check_tensors("legacy.pt", &expected()["legacy.pt"]);
}

#[test]
fn an_archive_saved_through_a_file_object_with_nested_dicts_and_scalars() {
    let expected = expected();
    check_tensors("archive.pt", &expected["archive.pt"]);
    let model = ModelFile::open(&fixtures().join("archive.pt"), OpenOptions::default()).unwrap();
    let metadata = expected["archive.pt"]["metadata"].as_object().unwrap();
    assert_eq!(model.metadata.len(), metadata.len());
    for (key, want) in metadata {
        let value = model.metadata.get(key).unwrap_or_else(|| panic!("{key} missing"));
        let matches = match (value, want) {
            (Value::I64(v), Json::Number(n)) => n.as_i64() == Some(*v),
            (Value::F64(v), Json::Number(n)) => n.as_f64() == Some(*v),
            (Value::Bool(v), Json::Bool(b)) => v == b,
            (Value::String(v), Json::String(s)) => v.as_str() == Some(s.as_str()),
            _ => false,
        };
        assert!(matches, "{key}: {value:?} is not {want}");
    }
}

/// Views share their storage's bytes: the row and the tied weights are read
/// in place, not copied out of the file.
#[test]
fn contiguous_views_and_tied_weights_map_onto_their_storage() {
    let model = ModelFile::open(&fixtures().join("state.pt"), OpenOptions::default()).unwrap();
    let find = |name: &str| model.tensors.iter().find(|t| t.name == name).unwrap();
    let (matrix, row) = (find("matrix"), find("row"));
    assert_eq!(row.file_offset, matrix.file_offset + 2 * 6 * 4, "row 2 of a 4×6 f32 matrix");
    assert_eq!(find("tied.a").file_offset, find("tied.b").file_offset);
    assert!(matches!(find("f16").layout, quantforge::model::StoredLayout::Native));
    assert!(matches!(find("transposed").layout, quantforge::model::StoredLayout::Placed(_)));
}

#[test]
fn malicious_checkpoints_are_refused_and_nothing_runs() {
    let expected = expected();
    for name in expected["evil"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let payload = Path::new("/tmp").join(format!("quantforge-pwned-{name}"));
        let _ = std::fs::remove_file(&payload);
        let path = fixtures().join(format!("evil-{name}.pt"));
        let error = ModelFile::open(&path, OpenOptions::default()).unwrap_err().to_string();
        assert!(error.contains("data.pkl byte"), "{name}: {error}");
        let out = common::quantforge(&["inspect".as_ref(), path.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().filter(|l| l.starts_with("error")).count(), 1, "{name}: {stderr}");
        assert!(!payload.exists(), "{name}: the payload ran");
    }
}

#[test]
fn refusals_name_the_global_and_where_it_is() {
    let error = |name: &str| {
        ModelFile::open(&fixtures().join(format!("evil-{name}.pt")), OpenOptions::default()).unwrap_err().to_string()
    };
    expect_test::expect![[r#"
        [
            "global `posix.system` is not one a state dict uses; quantforge never runs code from a pickle",
            "global `__builtin__.eval` is not one a state dict uses; quantforge never runs code from a pickle",
            "global `os.system` is not one a state dict uses; quantforge never runs code from a pickle",
            "global `torch.load` is not one a state dict uses; quantforge never runs code from a pickle",
            "the pickle refers to the same objects far more often than a state dict does",
            "`x` holds a tuple; a checkpoint is read as tensors, mappings of them, and scalar values",
            "`x` holds a list; a checkpoint is read as tensors, mappings of them, and scalar values",
            "BINUNICODE declares 4294967295 bytes, but only 1 are left",
            "`w`: storage `0` declares 1099511627776 elements of F32, more than its 16 bytes",
        ]
    "#]]
    .assert_debug_eq(
        &["system", "eval", "stack", "torch-load", "memo-bomb", "deep", "cycle", "huge-string", "huge-storage"]
            .map(|name| error(name).split_once(": ").map(|(_, m)| m.to_owned()).unwrap())
            .map(|m| m.split_once(": ").map(|(_, m)| m.to_owned()).unwrap())
            .map(|m| m.split_once(": ").map(|(_, m)| m.to_owned()).unwrap()),
    );
    assert!(error("system").contains("at byte 233: data.pkl byte 169:"), "{}", error("system"));
}

/// Every tensor of a checkpoint exported to GGUF and to SafeTensors through
/// a recipe comes back with its name, type and bytes.
#[test]
fn recipes_export_a_checkpoint_with_names_and_types_preserved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures().join("state.pt"), dir.path().join("state.pt")).unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(
        &recipe,
        r#"
[input.state]
path = "state.pt"

[step.gguf]
op = "export"
from = "state"
path = "out/state.gguf"

[step.safetensors]
op = "export"
from = "state"
path = "out/state.safetensors"
format = "safetensors"
"#,
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let out = common::quantforge(&["run".as_ref(), recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let source = ModelFile::open(&dir.path().join("state.pt"), OpenOptions::default()).unwrap();
    for exported in ["out/state.gguf", "out/state.safetensors"] {
        let model = ModelFile::open(&dir.path().join(exported), OpenOptions::default()).unwrap();
        let mut by_name: Vec<_> = model.tensors.iter().collect();
        by_name.sort_by(|a, b| a.name.cmp(&b.name));
        let mut want: Vec<_> = source.tensors.iter().collect();
        want.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(by_name.len(), want.len(), "{exported}");
        for (got, want) in by_name.iter().zip(&want) {
            assert_eq!((&got.name, got.ggml_type, &got.dims), (&want.name, want.ggml_type, &want.dims), "{exported}");
            assert!(
                model.tensor_data(got).unwrap() == source.tensor_data(want).unwrap(),
                "{exported}: {} differs",
                got.name
            );
        }
    }
}
