//! LLaMA 1/2/3 (and Mistral's checkpoints, which the converter writes as
//! LLaMA): `LlamaModel` in the converter. Q/K rows permuted to ggml's
//! interleaved rope, LLaMA 3's `rope_freqs` generated under "llama3" rope
//! scaling.

use serde_json::json;

use super::{Conversion, Generated, Transform, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, count_of, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "llama",
    classes: &[
        ("LlamaForCausalLM", "llama"),
        ("LLaMAForCausalLM", "llama"),
        ("LlamaModel", "llama"),
        // Mistral's checkpoints convert as LLaMA (no sliding window is kept).
        ("MistralForCausalLM", "llama"),
        // LLaVA's language model (Pixtral's is Mistral's), inside its `text_config`.
        ("LlavaForConditionalGeneration", "llama"),
        // Mistral Small 3.1's (`Mistral3Model`), LLaMA's under an architecture of its own.
        ("Mistral3ForConditionalGeneration", "mistral3"),
    ],
    config: Modelled {
        reads: &[],
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("mlp_bias", json!(false)),
                ("attention_bias", json!(false)),
                ("pretraining_tp", json!(1)),
            ]
        },
        window: &["sliding_window"],
        pattern: None,
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    // LlamaConfig always fills head_dim in; MistralConfig does not.
    let head_dim = hp.u64(&["head_dim"]).or_else(|| match hp.class() {
        "MistralForCausalLM" => None,
        _ => hp.per_head(),
    });
    llama_keys(hp, keys, head_dim)
}

/// `LlamaModel.set_gguf_parameters`, which the families built on it share:
/// the text-model keys (key and value lengths from `head_dim`), then
/// `vocab_size` and the rotary dimensions (`head_dim`, else the width of
/// a head).
pub(super) fn llama_keys(hp: &Hparams<'_>, keys: &mut Metadata, head_dim: Option<u64>) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, head_dim)?;
    hp.put(keys, "vocab_size", hp.count(&["vocab_size"])?);
    let rotary = head_dim.or_else(|| hp.per_head());
    hp.put(keys, "rope.dimension_count", rotary.map(|d| count_of("head_dim", &json!(d))).transpose()?);
    Ok(())
}
