//! Hugging Face checkpoint → GGUF, as llama.cpp's `convert_hf_to_gguf.py`
//! writes it (`docs/notes/convert-hf-reference.md` is the reference).
//!
//! This module owns the tensor side: which files and tensors, in which
//! order, under which GGUF names (the registry's HF ↔ GGUF tables), with
//! which family transforms (LLaMA's Q/K row permutation, Gemma's norm +1
//! and vocabulary cut, LLaMA 3's generated `rope_freqs`) and which output
//! type per tensor; the architecture keys; the tokenizer keys. The
//! `general.*` naming keys (from the model card and directory name) are not
//! converted yet.

mod checkpoint;
mod hparams;
mod tensors;
mod vocab;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use hparams::architecture_keys;
pub use tensors::{ConvertError, ConvertedTensor, OutType, convert_tensors, family_of};
pub use vocab::tokenizer_keys;

use crate::model::Value;

/// Keys in insertion order; writing a key again keeps its first place and
/// takes the new value, as the converter's dict does.
#[derive(Default)]
pub struct Keys(Vec<(String, Value)>);

impl Keys {
    pub fn set(&mut self, key: String, value: Value) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn into_vec(self) -> Vec<(String, Value)> {
        self.0
    }
}
