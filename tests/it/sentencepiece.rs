//! The SentencePiece reader against the `sentencepiece` package's own
//! reading of the same models (`tests/convert/sentencepiece_golden.py`): every
//! piece's text, score (bit for bit) and type, and the trainer settings.

use crate::common;

use quantforge::formats::sentencepiece::SentencePieceModel;
use serde_json::Value as Json;

#[test]
fn pieces_match_the_sentencepiece_package() {
    let dir = common::repo().join("tests/data/convert/sentencepiece");
    let mut models: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "model"))
        .collect();
    models.sort();
    assert_eq!(models.len(), 4);
    for path in models {
        let ours = SentencePieceModel::load(&path).unwrap();
        let golden: Json =
            serde_json::from_str(&std::fs::read_to_string(path.with_extension("json")).unwrap()).unwrap();
        let pieces = golden["pieces"].as_array().unwrap();
        assert_eq!(ours.pieces.len(), pieces.len(), "{}", path.display());
        for (i, (p, g)) in ours.pieces.iter().zip(pieces).enumerate() {
            assert_eq!(p.piece, g["piece"].as_str().unwrap(), "{} piece {i}", path.display());
            assert_eq!(u64::from(p.score.to_bits()), g["score_bits"].as_u64().unwrap(), "{} piece {i}", path.display());
            assert_eq!(serde_json::to_value(p.kind).unwrap(), g["type"], "{} piece {i}", path.display());
        }
        assert_eq!(serde_json::to_value(&ours.trainer).unwrap(), golden["trainer"], "{}", path.display());
    }
}

#[test]
fn a_truncated_model_is_an_error_with_the_offset() {
    let path = common::repo().join("tests/data/convert/sentencepiece/tiny-llama-3-chat.model");
    let bytes = std::fs::read(&path).unwrap();
    for cut in [1, 2, 100, bytes.len() / 2, bytes.len() - 1] {
        let error = SentencePieceModel::parse(&bytes[..cut]);
        assert!(error.is_err(), "cut at {cut} parsed");
    }
    let dir = tempfile::tempdir().unwrap();
    let broken = common::write_temp(dir.path(), "tokenizer.model", &bytes[..100]);
    let message = SentencePieceModel::load(&broken).unwrap_err().to_string();
    assert!(message.contains("tokenizer.model: at byte"), "{message}");
}
