//! Feeds arbitrary bytes to the SentencePiece (`tokenizer.model`) reader:
//! it must return a model or an error, never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::sentencepiece::SentencePieceModel;

fuzz_target!(|data: &[u8]| {
    let _ = SentencePieceModel::parse(data);
});
