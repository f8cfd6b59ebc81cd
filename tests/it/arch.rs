//! The architecture registry on a fixture of every family it knows
//! (`tests/data/arch`, written by `tests/arch/make_fixtures.py` and loaded by
//! llama.cpp's own loader when they were made; `fixtures.json` holds what
//! llama.cpp read from each), and on the real Gemma 3 270M.

use crate::common;

use std::collections::BTreeMap;

use quantforge::arch::hparams::{Hyperparameters, hyperparameters};
use quantforge::arch::registry::{DetectedBy, detect};
use quantforge::formats::{ModelFile, OpenOptions};
use serde_json::Value as Json;

fn fixtures() -> Vec<Json> {
    let path = common::repo().join("tests/data/arch/fixtures.json");
    let all: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all["fixtures"].as_array().unwrap().clone()
}

fn open(file: &str) -> ModelFile {
    ModelFile::open(&common::repo().join("tests/data/arch").join(file), OpenOptions::default()).unwrap()
}

fn detected_by(name: &str) -> DetectedBy {
    match name {
        "architecture" => DetectedBy::Architecture,
        "architecture+expert_count" => DetectedBy::ArchitectureAndExperts,
        "architecture+name" => DetectedBy::ArchitectureAndName,
        "clip.projector_type" => DetectedBy::ProjectorType,
        "fallback" => DetectedBy::Fallback,
        other => panic!("fixtures.json names an unknown rule {other}"),
    }
}

#[test]
fn every_family_is_detected() {
    for fixture in fixtures() {
        let file = fixture["file"].as_str().unwrap();
        let model = open(file);
        let detection = detect(&model.metadata, &model.tensors);
        assert_eq!(detection.family.id, fixture["family"].as_str().unwrap(), "{file}");
        assert_eq!(detection.by, detected_by(fixture["detected_by"].as_str().unwrap()), "{file}");
    }
}

/// The hyperparameters as fixtures.json spells them.
fn as_json(h: &Hyperparameters) -> BTreeMap<String, Json> {
    let Json::Object(map) = serde_json::to_value(h).unwrap() else { unreachable!() };
    map.into_iter().collect()
}

#[test]
fn hyperparameters_match_what_llama_cpp_read() {
    for fixture in fixtures().iter().filter(|f| f["kind"] == "language") {
        let file = fixture["file"].as_str().unwrap();
        let model = open(file);
        let result = hyperparameters(&model.metadata, &model.tensors);
        match fixture["error_key"].as_str() {
            Some(key) => {
                let error = result.expect_err(file);
                assert_eq!(error.key, key, "{file}: {error}");
            }
            None => {
                let ours = as_json(&result.unwrap_or_else(|e| panic!("{file}: {e}")).expect(file));
                let expected = fixture["hparams"].as_object().unwrap();
                for (name, value) in expected {
                    let got = ours.get(name).unwrap_or_else(|| panic!("{file}: no {name} in {ours:?}"));
                    let same = match (got.as_f64(), value.as_f64()) {
                        (Some(a), Some(b)) => a == b,
                        _ => got == value,
                    };
                    assert!(same, "{file}: {name} is {got}, llama.cpp read {value}");
                }
            }
        }
    }
}

#[test]
fn mmproj_files_have_no_language_hyperparameters() {
    for fixture in fixtures().iter().filter(|f| f["kind"] == "mmproj") {
        let file = fixture["file"].as_str().unwrap();
        let model = open(file);
        assert_eq!(hyperparameters(&model.metadata, &model.tensors).unwrap(), None, "{file}");
    }
}

#[test]
fn real_gemma_is_gemma3_with_its_shapes() {
    let Some(path) = common::gemma() else { return };
    let model = ModelFile::open(&path, OpenOptions::default()).unwrap();
    let detection = detect(&model.metadata, &model.tensors);
    assert_eq!((detection.family.id, detection.by), ("gemma3", DetectedBy::Architecture));
    let h = hyperparameters(&model.metadata, &model.tensors).unwrap().unwrap();
    assert_eq!(
        (h.embedding_length, h.block_count, h.head_count, h.head_count_kv, h.head_dim, h.vocab_size),
        (640, 18, 4, 1, 256, Some(262_144))
    );
    assert_eq!((h.context_length, h.feed_forward_length, h.rope_freq_base), (Some(32_768), Some(2048), Some(1e6)));
}
