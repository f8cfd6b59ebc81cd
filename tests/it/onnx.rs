//! ONNX models (`formats::onnx`) against the `onnx` package: fixtures made
//! by `tests/onnx/make_fixtures.py`, every tensor's bytes equal to what
//! `onnx.numpy_helper.to_array` gives (raw_data, every typed field, Constant
//! nodes, external data in one file per tensor and at offsets in a shared
//! file), the model's description as metadata, and bad external data
//! refused with the tensor's name and the numbers.

use crate::common;

use std::path::{Path, PathBuf};

use quantforge::formats::{ContainerFormat, ModelFile, OpenOptions};
use quantforge::model::Value;
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    common::repo().join("tests/data/onnx")
}

fn expected() -> Json {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

fn check_model(file: &str, expected: &Json) {
    for use_mmap in [true, false] {
        let model = ModelFile::open(&fixtures().join(file), OpenOptions { use_mmap }).unwrap();
        assert_eq!(model.format, ContainerFormat::Onnx);
        common::check_tensors(&model, expected["tensors"].as_array().unwrap(), &format!("{file} (mmap {use_mmap})"));
        let metadata = expected["metadata"].as_object().unwrap();
        assert_eq!(model.metadata.len(), metadata.len(), "{file}");
        for (key, want) in metadata {
            let value = model.metadata.get(key).unwrap_or_else(|| panic!("{file}: {key} missing"));
            let matches = match (value, want) {
                (Value::I64(v), Json::Number(n)) => n.as_i64() == Some(*v),
                (Value::String(v), Json::String(s)) => v.as_str() == Some(s.as_str()),
                _ => false,
            };
            assert!(matches, "{file} {key}: {value:?} is not {want}");
        }
    }
}

#[test]
fn raw_and_typed_initializers_and_constants_equal_to_array() {
    check_model("model.onnx", &expected()["model.onnx"]);
}

#[test]
fn external_data_in_files_of_their_own_and_at_offsets_in_one_file() {
    let expected = expected();
    check_model("external/model.onnx", &expected["external/model.onnx"]);
    check_model("external/shared.onnx", &expected["external/shared.onnx"]);
}

/// An If's branches hold weights of their own: read with the graph's, in
/// the order the file holds them.
#[test]
fn subgraph_initializers_and_constants_are_read() {
    check_model("subgraph.onnx", &expected()["subgraph.onnx"]);
}

fn refusal(path: &Path) -> String {
    let error = ModelFile::open(path, OpenOptions::default()).unwrap_err().to_string();
    let out = common::quantforge(&["inspect".as_ref(), path.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.starts_with("error")).count(), 1, "{stderr}");
    error.split_once("tensor `").map(|(_, rest)| format!("tensor `{rest}")).unwrap_or(error)
}

#[test]
fn bad_external_data_is_refused_with_the_tensor_and_the_numbers() {
    let dir = fixtures().join("external");
    expect_test::expect![[r#"
        [
            "tensor `raw.float`: external data file `no-such.weights`: no such file or directory",
            "tensor `raw.float`: external data bytes 752..812 are past the end of `shared.weights` (760 bytes)",
            "tensor `raw.float`: external data location `../model.onnx` leaves the model's directory; refused",
            "tensor `raw.float`: external data location `/etc/hostname` leaves the model's directory; refused",
            "tensor `raw.float`: external data of 12 bytes; FLOAT of shape [3, 5] needs 60",
        ]
    "#]]
    .assert_debug_eq(
        &["missing", "past-end", "dotdot", "absolute", "length"]
            .map(|name| refusal(&dir.join(format!("bad-{name}.onnx"))).replace(&format!("{}/", dir.display()), "")),
    );
}

/// A symlink beside the model that points out of its directory is refused,
/// as a `..` would be; one that stays inside is followed.
#[test]
fn external_data_behind_a_symlink_out_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(fixtures().join("external/shared.onnx"), model.join("shared.onnx")).unwrap();
    std::fs::copy(fixtures().join("external/shared.weights"), dir.path().join("outside.weights")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.weights"), model.join("shared.weights")).unwrap();
    let error = refusal(&model.join("shared.onnx"));
    assert!(error.contains("resolves outside the model's directory; refused"), "{error}");

    std::fs::remove_file(model.join("shared.weights")).unwrap();
    std::fs::rename(dir.path().join("outside.weights"), model.join("real.weights")).unwrap();
    std::os::unix::fs::symlink("real.weights", model.join("shared.weights")).unwrap();
    ModelFile::open(&model.join("shared.onnx"), OpenOptions::default()).unwrap();
}

/// Every tensor of a model (external data included) exported to GGUF and to
/// SafeTensors through a recipe comes back with its name, type and bytes.
#[test]
fn recipes_export_a_model_with_names_and_types_preserved() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    let model = fixtures().join("external/shared.onnx");
    std::fs::write(
        &recipe,
        format!(
            r#"
[input.model]
path = "{}"

[step.gguf]
op = "export"
from = "model"
path = "out/model.gguf"

[step.safetensors]
op = "export"
from = "model"
path = "out/model.safetensors"
format = "safetensors"
"#,
            model.display()
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let out = common::quantforge(&["run".as_ref(), recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let source = ModelFile::open(&model, OpenOptions::default()).unwrap();
    for exported in ["out/model.gguf", "out/model.safetensors"] {
        let model = ModelFile::open(&dir.path().join(exported), OpenOptions::default()).unwrap();
        let mut got: Vec<_> = model.tensors.iter().collect();
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let mut want: Vec<_> = source.tensors.iter().collect();
        want.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(got.len(), want.len(), "{exported}");
        for (got, want) in got.iter().zip(&want) {
            assert_eq!((&got.name, got.ggml_type, &got.dims), (&want.name, want.ggml_type, &want.dims), "{exported}");
            assert!(model.tensor_data(got).unwrap() == source.tensor_data(want).unwrap(), "{exported}: {}", got.name);
        }
    }
}

/// External data 5 GB into its file, past 2^31 and 2^32 (where models over
/// 2 GB keep their weights): a sparse file, made here as the fixture script
/// made it.
#[test]
fn external_data_past_four_gigabytes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures().join("external/far.onnx"), dir.path().join("far.onnx")).unwrap();
    let weights = std::fs::File::create(dir.path().join("far.weights")).unwrap();
    let values: Vec<u8> = (0..15).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    std::os::unix::fs::FileExt::write_all_at(&weights, &values, 5_000_000_000).unwrap();
    let expected = &expected()["external/far.onnx"];
    for use_mmap in [true, false] {
        let model = ModelFile::open(&dir.path().join("far.onnx"), OpenOptions { use_mmap }).unwrap();
        let tensor = &model.tensors[0];
        assert_eq!(tensor.file_offset, 5_000_000_000);
        let data = model.tensor_data(tensor).unwrap();
        assert_eq!(common::sha256_hex(&data), expected["tensors"][0]["sha256"].as_str().unwrap());
    }
}
