//! Hugging Face checkpoint → GGUF, as llama.cpp's `convert_hf_to_gguf.py`
//! writes it (`docs/notes/convert-hf-reference.md` is the reference).
//!
//! This module owns the tensor side: which files and tensors, in which
//! order, under which GGUF names (the registry's HF ↔ GGUF tables), with
//! which family transforms (LLaMA's Q/K row permutation, Gemma's norm +1
//! and vocabulary cut, LLaMA 3's generated `rope_freqs`) and which output
//! type per tensor; and the architecture keys. The `general.*` naming keys
//! and the tokenizer are not converted yet.

mod checkpoint;
mod hparams;
mod tensors;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use hparams::{Keys, architecture_keys};
pub use tensors::{ConvertError, ConvertedTensor, OutType, convert_tensors, family_of};
