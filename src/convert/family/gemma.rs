//! Gemma and Gemma 2: `GemmaModel` and `Gemma2Model` in the converter.
//! Keys in an order of their own (no rope keys), norm weights stored as
//! offsets from one, embeddings always tied (`lm_head` is dropped); Gemma's
//! fill-in-the-middle end-of-turn token; Gemma 2's soft-caps and window.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, RMS_EPSILON, count_of, file_type};
use crate::model::Metadata;

pub const GEMMA: Conversion = Conversion {
    family: "gemma",
    classes: &[("GemmaForCausalLM", "gemma")],
    config: Modelled {
        reads: &[],
        defaults: || {
            vec![
                ("hidden_act", json!("gelu_pytorch_tanh")),
                ("hidden_activation", json!("gelu_pytorch_tanh")),
                ("attention_bias", json!(false)),
            ]
        },
        window: &[],
        pattern: None,
        rope_scalings: &[],
    },
    dropped: &["lm_head.weight"],
    transforms: &[Transform::NormPlusOne],
    generated: &[],
    keys: gemma_keys,
    vocab: Vocab::Gemma { end_of_turn: Some(107) },
};

pub const GEMMA2: Conversion = Conversion {
    family: "gemma2",
    classes: &[("Gemma2ForCausalLM", "gemma2")],
    config: Modelled {
        reads: &[
            "attn_logit_softcapping",
            "final_logit_softcapping",
            "sliding_window",
            "layer_types",
            "query_pre_attn_scalar",
        ],
        defaults: || vec![("hidden_activation", json!("gelu_pytorch_tanh")), ("attention_bias", json!(false))],
        window: &[],
        pattern: Some(gemma2_layers),
        rope_scalings: &[],
    },
    dropped: &["lm_head.weight"],
    transforms: &[Transform::NormPlusOne],
    generated: &[],
    keys: gemma2_keys,
    vocab: Vocab::Gemma { end_of_turn: None },
};

/// `GemmaModel.set_gguf_parameters`: every key required, in its own order.
fn gemma_keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let required = |name: &str| -> Result<&Json, ConvertError> {
        hp.ckpt.config.get(name).ok_or_else(|| ConvertError::Config(format!("no `{name}`")))
    };
    let count = |name: &str| -> Result<_, ConvertError> { count_of(name, required(name)?) };
    hp.put(keys, "context_length", Some(count("max_position_embeddings")?));
    hp.put(keys, "embedding_length", Some(count("hidden_size")?));
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "feed_forward_length", Some(count("intermediate_size")?));
    hp.put(keys, "attention.head_count", Some(count("num_attention_heads")?));
    let kv =
        if hp.ckpt.config.get("num_key_value_heads").is_some() { "num_key_value_heads" } else { "num_attention_heads" };
    hp.put(keys, "attention.head_count_kv", Some(count(kv)?));
    let eps = hp.f32(RMS_EPSILON).ok_or_else(|| ConvertError::Config("no `rms_norm_eps`".into()))?;
    hp.put(keys, "attention.layer_norm_rms_epsilon", Some(eps));
    hp.put(keys, "attention.key_length", Some(count("head_dim")?));
    hp.put(keys, "attention.value_length", Some(count("head_dim")?));
    keys.set("general.file_type", file_type(hp.outtype));
    Ok(())
}

/// Gemma's keys, then the soft-caps and the window (`Gemma2Model.set_gguf_parameters`).
fn gemma2_keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    gemma_keys(hp, keys)?;
    for name in ["attn_logit_softcapping", "final_logit_softcapping"] {
        let value = hp.f32(&[name]).ok_or_else(|| ConvertError::Config(format!("no `{name}`")))?;
        hp.put(keys, name, Some(value));
    }
    let window = hp.count(&["sliding_window"])?.ok_or_else(|| ConvertError::Config("no `sliding_window`".into()))?;
    hp.put(keys, "attention.sliding_window", Some(window));
    Ok(())
}

/// What llama.cpp's gemma2 assumes and the file cannot say: sliding and
/// full attention alternating from the first layer, and queries scaled by
/// the head size (by the width of a head for the 27B's 46 layers).
fn gemma2_layers(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64);
    if let Some(types) = config.get("layer_types").and_then(Json::as_array) {
        let alternating = types
            .iter()
            .enumerate()
            .all(|(i, t)| t.as_str() == Some(if i % 2 == 0 { "sliding_attention" } else { "full_attention" }));
        if !alternating {
            return Some(("layer_types", config["layer_types"].clone()));
        }
    }
    let scalar = number("query_pre_attn_scalar")?;
    let per_head = number("hidden_size").zip(number("num_attention_heads")).and_then(|(h, n)| h.checked_div(n));
    let expected = match number("num_hidden_layers") {
        Some(46) => per_head,
        _ => number("head_dim"),
    };
    (Some(scalar) != expected).then(|| ("query_pre_attn_scalar", config["query_pre_attn_scalar"].clone()))
}
