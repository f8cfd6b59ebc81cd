//! Command-R and Cohere 2 (Command R7B): `CommandR2Model` and
//! `Cohere2Model` in the converter. A parallel block around one LayerNorm,
//! embeddings always tied, the logit scale and a rope scaling type of
//! "none"; Cohere 2's window (every fourth layer full, as llama.cpp
//! assumes), vocabulary size and partial rotary dimensions, and its biases,
//! which must all be zero (they are dropped).

use serde_json::{Value as Json, json};

use super::{Conversion, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, count_of, text_model_keys};
use crate::model::{Metadata, Value};

pub const COMMAND_R: Conversion = Conversion {
    family: "command-r",
    classes: &[("CohereForCausalLM", "command-r")],
    config: Modelled {
        reads: &["logit_scale", "layer_norm_eps", "use_qk_norm", "model_max_length"],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys: command_r_keys,
    vocab: Vocab::Bpe,
};

pub const COHERE2: Conversion = Conversion {
    family: "cohere2",
    classes: &[("Cohere2ForCausalLM", "cohere2")],
    config: Modelled {
        reads: &[
            "logit_scale",
            "layer_norm_eps",
            "sliding_window",
            "rotary_pct",
            "layer_types",
            "_sliding_window_pattern",
        ],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
        window: &[],
        pattern: Some(every_fourth_layer_full),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys: cohere2_keys,
    vocab: Vocab::Bpe,
};

/// The text-model keys with the context `model_max_length` gives when the
/// config has one (`CommandR2Model.__init__`), the logit scale, no scaling.
fn command_r_keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    if let Some(context) = hp.ckpt.config.get("model_max_length").filter(|v| !v.is_null()) {
        hp.put(keys, "context_length", Some(count_of("model_max_length", context)?));
    }
    hp.put(keys, "logit_scale", hp.f32(&["logit_scale"]));
    hp.put(keys, "rope.scaling.type", Some(Value::string("none")));
    Ok(())
}

/// `Cohere2Model.set_gguf_parameters` (its `head_dim` is always set).
fn cohere2_keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let head_dim = hp.u64(&["head_dim"]).or_else(|| hp.per_head());
    text_model_keys(hp, keys, head_dim)?;
    let required = |name: &'static str| -> Result<&Json, ConvertError> {
        hp.ckpt.config.get(name).filter(|v| !v.is_null()).ok_or_else(|| ConvertError::Config(format!("no `{name}`")))
    };
    hp.put(keys, "logit_scale", hp.f32(&["logit_scale"]));
    hp.put(keys, "attention.sliding_window", Some(count_of("sliding_window", required("sliding_window")?)?));
    hp.put(keys, "vocab_size", Some(count_of("vocab_size", required("vocab_size")?)?));
    let rotary = required("rotary_pct")?.as_f64().unwrap_or_default();
    let rotary = (rotary * hp.per_head().unwrap_or_default() as f64) as u64;
    hp.put(keys, "rope.dimension_count", Some(count_of("rotary dimensions", &json!(rotary))?));
    hp.put(keys, "rope.scaling.type", Some(Value::string("none")));
    Ok(())
}

/// llama.cpp's cohere2 slides in three layers of every four, the fourth full.
fn every_fourth_layer_full(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    if config.get("_sliding_window_pattern").is_some_and(|v| v.as_u64() != Some(4)) {
        return Some(("_sliding_window_pattern", config["_sliding_window_pattern"].clone()));
    }
    let types = config.get("layer_types").and_then(Json::as_array)?;
    let expected = |i: usize| if (i + 1).is_multiple_of(4) { "full_attention" } else { "sliding_attention" };
    let differs = types.iter().enumerate().any(|(i, t)| t.as_str() != Some(expected(i)));
    differs.then(|| ("layer_types", config["layer_types"].clone()))
}
