//! Hugging Face checkpoint → GGUF, as llama.cpp's `convert_hf_to_gguf.py`
//! writes it (`docs/notes/convert-hf-reference.md` is the reference).
//!
//! This module owns the tensor side: which files and tensors, in which
//! order, under which GGUF names (the registry's HF ↔ GGUF tables), with
//! which family transforms (LLaMA's Q/K row permutation, Gemma's norm +1
//! and vocabulary cut, LLaMA 3's generated `rope_freqs`, Phi-3's LongRoPE
//! factors) and which output type per tensor; the naming, architecture and
//! tokenizer keys; the whole file ([`convert`]).

mod checkpoint;
mod config;
mod error;
pub mod family;
mod files;
mod fp8;
mod hparams;
mod lora;
pub mod mmproj;
pub mod model_card;
pub mod mxfp4;
mod naming;
mod pre_tokenizer;
mod rope;
mod tensors;
mod vocab;

pub use checkpoint::{Checkpoint, CheckpointError, checkpoint_weights};
pub use error::ConvertError;
pub use files::{CheckpointFiles, OnDisk, TEXT_LIMIT, files_read};
pub use fp8::{Fp8, ScaleAt, WeightScale};
pub use hparams::architecture_keys;
pub use lora::{Adapter, AdapterConfig, convert_lora};
pub use mxfp4::Mxfp4Part;
pub use naming::MetadataOverride;
pub use pre_tokenizer::{check_hash, check_hash_of, known_name};
pub use rope::RopeError;
pub use tensors::{
    CheckpointPart, ConvertedTensor, OutType, Values, checkpoint_rows, checkpoint_rows_as_stored, conversion_of,
    convert_tensors, selected_dims,
};
pub use vocab::tokenizer_keys;

use crate::model::{Metadata, TensorInfo, Value};
use crate::quant::plan::{self as quantize, QuantizeOptions};
use crate::types::FileType;

/// What a conversion writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The whole model.
    Model,
    /// The converter's `--vocab-only`: the metadata alone, without the
    /// tensors and what it writes only while it makes them (generated
    /// tensors' keys; a size label counted from the tensors).
    VocabOnly,
    /// The converter's `--mmproj`: a multimodal model's vision tower as
    /// llama.cpp's projector file ([`mmproj`]).
    Mmproj,
}

/// A whole conversion: the metadata in the converter's key order and the
/// tensors in its tensor order. `pre` names a BPE vocabulary's pre-tokenizer.
pub fn convert(
    ckpt: &Checkpoint,
    outtype: OutType,
    pre: Option<&str>,
    scope: Scope,
) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    let (conversion, arch) = conversion_of(ckpt)?;
    if scope == Scope::Mmproj {
        return mmproj::convert_mmproj(ckpt, outtype);
    }
    config::check_modelled(ckpt, conversion)?;
    let tensors = match scope {
        Scope::VocabOnly => Vec::new(),
        _ => convert_tensors(ckpt, outtype)?,
    };
    let counts = naming::ParameterCounts::of(tensors.iter().map(|t| &t.info));
    // Keys in the converter's order: writing one again keeps its first
    // place and takes the new value, as its dict does (and `Metadata::set`).
    let mut metadata = Metadata::new();
    metadata.set("general.architecture", Value::string(arch));
    if scope == Scope::Model {
        // The converter writes these while it makes the tensors, before anything else.
        metadata.append_prefixed("", &hparams::generated_tensor_keys(ckpt, conversion, arch)?);
    }
    naming::general_keys(&naming::NamingSource::of_model(ckpt, &counts), &counts, ckpt, &mut metadata)?;
    metadata.append_prefixed("", &hparams::parameter_keys(ckpt, conversion, arch, outtype)?);
    tokenizer_keys(ckpt, conversion.vocab, pre, &mut metadata)?;
    Ok((metadata, tensors))
}

/// A conversion quantized to preset `ftype` straight from the checkpoint's
/// values (in f32, no F16 file in between), with llama-quantize's plan: its
/// mixture, tensor order and metadata.
pub fn convert_quantized(
    ckpt: &Checkpoint,
    ftype: FileType,
    pre: Option<&str>,
) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    let (metadata, tensors) = convert(ckpt, OutType::F32, pre, Scope::Model)?;
    let plan =
        quantize::plan(&metadata, &infos(&tensors), &QuantizeOptions::new(ftype), None).map_err(|e| match e {
            quantize::QuantizeError::Requantize { tensor, from } => {
                ConvertError::Requantize { tensor, from, preset: ftype.name() }
            }
            other => other.into(),
        })?;
    let quantized = plan.tensors.iter().map(|planned| tensors[planned.input_idx].stored_as(planned.info.clone()));
    Ok((plan.metadata, quantized.collect()))
}

/// Writes a conversion of `ckpt` as a GGUF file, one tensor computed at a
/// time.
pub fn infos(tensors: &[ConvertedTensor]) -> Vec<TensorInfo> {
    tensors.iter().map(|t| t.info.clone()).collect()
}
