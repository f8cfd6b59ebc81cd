//! Differential tests against gguf-py: files written by `GGUFWriter`
//! (`gguf_py/make_fixtures.py`) read the same through our reader as through
//! `GGUFReader` (`gguf_py/dump.py`), and our round trip gives back their
//! bytes. Skipped, with a message, where gguf-py is not installed; CI
//! installs it.

use crate::common;

use std::path::Path;

use quantforge::exec::oneshot::{OneShotSettings, WriteAs, edit_file};
use quantforge::formats::{ModelFile, OpenOptions};
use quantforge::model::{Array, Value};
use quantforge::ops::edit::Edits;
use serde_json::{Value as Json, json};

/// Our value in the shape `dump.py` prints: f32 widened exactly to f64, as
/// numpy's `tolist()` does.
fn value_json(value: &Value) -> Json {
    match value {
        Value::F32(v) => json!(f64::from(*v)),
        Value::Array(a) => Json::Array((0..a.len()).filter_map(|i| a.get(i)).map(|v| value_json(&v)).collect()),
        other => quantforge::examine::inspect::scalar_json(other),
    }
}

fn our_view(model: &ModelFile) -> Json {
    let metadata: Vec<Json> = model
        .metadata
        .iter()
        .map(|(key, value)| {
            let mut entry = json!({ "key": key, "type": value.value_type().name() });
            match value {
                Value::Array(Array::Array(_)) => entry["element_type"] = json!("arr"),
                Value::Array(a) => {
                    entry["element_type"] = json!(a.element_type().name());
                    entry["value"] = value_json(value);
                }
                scalar => entry["value"] = value_json(scalar),
            }
            entry
        })
        .collect();
    let tensors: Vec<Json> = model
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ggml_type.id(),
                "shape": t.dims,
                "offset": t.file_offset,
                "bytes": t.n_bytes(),
            })
        })
        .collect();
    json!({
        "endian": model.endian,
        "alignment": model.alignment,
        "data_offset": model.data_offset,
        "metadata": metadata,
        "tensors": tensors,
    })
}

fn check_file(python: &str, path: &Path) {
    let theirs: Json = serde_json::from_str(&common::run_python(python, "tests/gguf_py/dump.py".as_ref(), &[path]))
        .expect("dump.py prints JSON");
    for use_mmap in [true, false] {
        let model = ModelFile::open(path, OpenOptions { use_mmap }).expect("gguf-py's file loads");
        assert_eq!(our_view(&model), theirs, "{} (mmap: {use_mmap})", path.display());
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.gguf");
    edit_file(path, &copy, Edits::default(), WriteAs::default(), &OneShotSettings::default()).unwrap();
    assert!(std::fs::read(path).unwrap() == std::fs::read(&copy).unwrap(), "round trip of {} differs", path.display());
}

#[test]
fn files_written_by_gguf_py_read_the_same_and_round_trip() {
    let Some(python) = common::python_with_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    common::run_python(&python, "tests/gguf_py/make_fixtures.py".as_ref(), &[dir.path()]);
    let mut n_files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        check_file(&python, &entry.unwrap().path());
        n_files += 1;
    }
    assert_eq!(n_files, 4);
}

#[test]
fn gguf_py_reads_what_we_write() {
    let Some(python) = common::python_with_gguf() else { return };
    let tiny = common::tiny_model();
    let theirs: Json =
        serde_json::from_str(&common::run_python(&python, "tests/gguf_py/dump.py".as_ref(), &[&tiny])).unwrap();
    let model = ModelFile::open(&tiny, OpenOptions::default()).unwrap();
    assert_eq!(our_view(&model), theirs);
}

#[test]
fn real_gemma_reads_the_same() {
    let Some(python) = common::python_with_gguf() else { return };
    let Some(gemma) = common::gemma() else { return };
    check_file(&python, &gemma);
}

/// `inspect --json --tensors` on the real model agrees with gguf-py on every
/// key (name, type, scalar value, array length and leading entries) and every
/// tensor (name, type, shape, offset, size).
#[test]
fn inspect_json_agrees_with_gguf_py_on_gemma() {
    let Some(python) = common::python_with_gguf() else { return };
    let Some(gemma) = common::gemma() else { return };
    let theirs: Json =
        serde_json::from_str(&common::run_python(&python, "tests/gguf_py/dump.py".as_ref(), &[&gemma])).unwrap();
    let output = common::quantforge(&["inspect".as_ref(), gemma.as_os_str(), "--json".as_ref(), "--tensors".as_ref()]);
    assert!(output.status.success());
    let ours: Json = serde_json::from_slice(&output.stdout).unwrap();

    let their_keys = theirs["metadata"].as_array().unwrap();
    let our_keys = ours["metadata"].as_array().unwrap();
    assert_eq!(our_keys.len(), their_keys.len());
    for (o, t) in our_keys.iter().zip(their_keys) {
        assert_eq!((&o["key"], &o["type"]), (&t["key"], &t["type"]));
        match t["value"].as_array() {
            Some(values) => {
                assert_eq!(o["len"].as_u64(), Some(values.len() as u64), "{}", t["key"]);
                let shown = o["value"].as_array().unwrap();
                for (a, b) in shown.iter().zip(values) {
                    match (a.as_f64(), b.as_f64()) {
                        (Some(x), Some(y)) if t["element_type"] == "f32" => assert_eq!(x as f32, y as f32),
                        _ => assert_eq!(a, b, "{}", t["key"]),
                    }
                }
            }
            None if t["type"] == "f32" => {
                assert_eq!(o["value"].as_f64().unwrap() as f32, t["value"].as_f64().unwrap() as f32)
            }
            None => assert_eq!(o["value"], t["value"], "{}", t["key"]),
        }
    }

    let their_tensors = theirs["tensors"].as_array().unwrap();
    let our_tensors = ours["tensors"].as_array().unwrap();
    assert_eq!(our_tensors.len(), their_tensors.len());
    for (o, t) in our_tensors.iter().zip(their_tensors) {
        let type_id = quantforge::types::GgmlType::from_name(o["type"].as_str().unwrap()).unwrap().id();
        assert_eq!(
            (&o["name"], json!(type_id), &o["shape"], &o["offset"], &o["bytes"]),
            (&t["name"], t["type"].clone(), &t["shape"], &t["offset"], &t["bytes"])
        );
    }
}
