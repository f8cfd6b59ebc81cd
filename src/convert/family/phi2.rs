//! Phi-2: `Phi2Model` in the converter. Its keys in an order of its own
//! (the feed-forward width as four times the embedding, no rope base, and
//! `add_bos_token` false among them), a parallel block around one
//! LayerNorm, biases everywhere, the output with a bias.

use serde_json::{Value as Json, json};

use super::{Conversion, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, file_type};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "phi2",
    classes: &[("PhiForCausalLM", "phi2")],
    config: Modelled {
        reads: &["partial_rotary_factor", "layer_norm_eps"],
        defaults: || vec![("hidden_act", json!("gelu_new")), ("qk_layernorm", json!(false))],
        window: &[],
        pattern: Some(as_llama_cpp_computes),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// What the file cannot say: a feed-forward width of four times the
/// embedding (the converter writes that, whatever the config says) and
/// llama.cpp's rope base of 10000.
fn as_llama_cpp_computes(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64);
    if let (Some(ff), Some(width)) = (number("intermediate_size"), number("hidden_size"))
        && ff != 4 * width
    {
        return Some(("intermediate_size", config["intermediate_size"].clone()));
    }
    config.get("rope_theta").filter(|v| v.as_f64() != Some(10000.0)).map(|v| ("rope_theta", v.clone()))
}

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let width = hp.u64(&["hidden_size", "n_embd"]).ok_or_else(|| ConvertError::Config("no `hidden_size`".into()))?;
    let heads = hp
        .u64(&["num_attention_heads", "n_head"])
        .ok_or_else(|| ConvertError::Config("no `num_attention_heads`".into()))?;
    hp.put(keys, "context_length", hp.count(&["n_positions", "max_position_embeddings"])?);
    hp.put(keys, "embedding_length", Some(count_of("hidden_size", &json!(width))?));
    hp.put(keys, "feed_forward_length", Some(count_of("4 × hidden_size", &json!(4 * width))?));
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "attention.head_count", Some(count_of("num_attention_heads", &json!(heads))?));
    hp.put(keys, "attention.head_count_kv", Some(count_of("num_attention_heads", &json!(heads))?));
    hp.put(keys, "attention.layer_norm_epsilon", hp.f32(&["layer_norm_epsilon", "layer_norm_eps"]));
    let fraction = hp.rope.get("partial_rotary_factor").and_then(Json::as_f64).unwrap_or(0.5);
    let rotary = (fraction * width as f64) as u64 / heads.max(1);
    hp.put(keys, "rope.dimension_count", Some(count_of("rotary dimensions", &json!(rotary))?));
    keys.set("general.file_type", file_type(hp.outtype));
    // Written here, among the architecture keys; the vocabulary may set it again in place.
    keys.set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    Ok(())
}
