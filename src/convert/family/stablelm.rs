//! StableLM (2): `StableLMModel` in the converter. Its keys in an order of
//! its own (partial rotary dimensions, no rope base), LayerNorms with
//! biases, optional Q/K/V biases. Per-head Q/K LayerNorms (`qk_layernorm`)
//! are refused: the pinned converter cannot write them either.

use serde_json::{Value as Json, json};

use super::{Conversion, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, file_type};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "stablelm",
    classes: &[("StableLmForCausalLM", "stablelm"), ("StableLMEpochForCausalLM", "stablelm")],
    config: Modelled {
        reads: &["partial_rotary_factor", "layer_norm_eps", "use_parallel_residual", "use_qkv_bias"],
        defaults: || {
            vec![("hidden_act", json!("silu")), ("qk_layernorm", json!(false)), ("hidden_dropout", json!(0.0))]
        },
        window: &[],
        pattern: Some(default_rope_base),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// The file has no rope base: llama.cpp's stablelm runs 10000.
fn default_rope_base(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    config.get("rope_theta").filter(|v| v.as_f64() != Some(10000.0)).map(|v| ("rope_theta", v.clone()))
}

/// `StableLMModel.set_gguf_parameters`.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let required = |name: &'static str| -> Result<&Json, ConvertError> {
        hp.ckpt.config.get(name).ok_or_else(|| ConvertError::Config(format!("no `{name}`")))
    };
    hp.put(keys, "context_length", Some(count_of("max_position_embeddings", required("max_position_embeddings")?)?));
    hp.put(keys, "embedding_length", Some(count_of("hidden_size", required("hidden_size")?)?));
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "feed_forward_length", Some(count_of("intermediate_size", required("intermediate_size")?)?));
    let fraction = hp.rope.get("partial_rotary_factor").and_then(Json::as_f64).unwrap_or_default();
    let rotary = (fraction * hp.per_head().unwrap_or_default() as f64) as u64;
    hp.put(keys, "rope.dimension_count", Some(count_of("rotary dimensions", &json!(rotary))?));
    hp.put(keys, "attention.head_count", Some(count_of("num_attention_heads", required("num_attention_heads")?)?));
    hp.put(keys, "attention.head_count_kv", Some(count_of("num_key_value_heads", required("num_key_value_heads")?)?));
    let parallel = hp.ckpt.config.get("use_parallel_residual").map_or(Some(true), Json::as_bool);
    hp.put(keys, "use_parallel_residual", parallel.map(Value::Bool));
    let eps =
        hp.f32(&["layer_norm_eps", "norm_eps"]).ok_or_else(|| ConvertError::Config("no `layer_norm_eps`".into()))?;
    hp.put(keys, "attention.layer_norm_epsilon", Some(eps));
    keys.set("general.file_type", file_type(hp.outtype));
    Ok(())
}
