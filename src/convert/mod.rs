//! Hugging Face checkpoint → GGUF, as llama.cpp's `convert_hf_to_gguf.py`
//! writes it (`docs/notes/convert-hf-reference.md` is the reference).
//!
//! This module owns the tensor side: which files and tensors, in which
//! order, under which GGUF names (the registry's HF ↔ GGUF tables), with
//! which family transforms (LLaMA's Q/K row permutation, Gemma's norm +1
//! and vocabulary cut, LLaMA 3's generated `rope_freqs`) and which output
//! type per tensor; the naming, architecture and tokenizer keys; the whole
//! file ([`convert`]).

mod checkpoint;
mod hparams;
mod naming;
mod tensors;
mod vocab;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use hparams::architecture_keys;
pub use tensors::{ConvertError, ConvertedTensor, OutType, convert_tensors, family_of};
pub use vocab::tokenizer_keys;

use crate::model::{Metadata, TensorInfo};

/// A whole conversion: the metadata in the converter's key order and the
/// tensors in its tensor order. `pre` names a BPE vocabulary's pre-tokenizer.
pub fn convert(
    ckpt: &Checkpoint,
    outtype: OutType,
    pre: Option<&str>,
) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    let (family, arch) = family_of(ckpt)?;
    let tensors = convert_tensors(ckpt, outtype)?;
    let total_params = tensors.iter().map(|t| t.info.n_elements()).sum();
    let mut keys = Keys::default();
    keys.set("general.architecture".into(), Value::string(arch));
    naming::general_keys(ckpt, total_params, &mut keys);
    for (k, v) in architecture_keys(ckpt, family.id, arch, outtype).into_vec() {
        keys.set(k, v);
    }
    tokenizer_keys(ckpt, family.id, pre, &mut keys)?;
    let mut metadata = Metadata::new();
    for (k, v) in keys.into_vec() {
        metadata.set(&k, v);
    }
    Ok((metadata, tensors))
}

/// The tensor descriptors of a conversion, in order.
pub fn infos(tensors: &[ConvertedTensor]) -> Vec<TensorInfo> {
    tensors.iter().map(|t| t.info.clone()).collect()
}

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
