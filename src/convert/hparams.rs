//! The architecture keys of a converted checkpoint (`{arch}.*`, with
//! `general.file_type` and `general.quantization_version`), in the order and
//! with the types `convert_hf_to_gguf.py` writes them: the common text-model
//! keys, then each family's own (reference: sec. 4–5 of
//! `docs/notes/convert-hf-reference.md`; rope scaling:
//! `docs/notes/rope-scaling-reference.md`).

use serde_json::Value as Json;

use super::checkpoint::Checkpoint;
use super::rope::{RopeError, RopeParameters, phi3_long_rope, phi3_rope_dims};
use super::tensors::{ConvertError, OutType};
use crate::model::{Metadata, Value};
use crate::quant::plan::QUANTIZATION_VERSION;

/// `general.file_type` of an outtype (llama's ftype numbers).
fn file_type(outtype: OutType) -> u32 {
    match outtype {
        OutType::F32 => 0,
        OutType::F16 => 1,
        OutType::Q8_0 => 7,
        OutType::BF16 => 32,
    }
}

/// The keys the converter writes while it makes a family's generated
/// tensors (`generate_extra_tensors`), which runs before it writes any key
/// but `general.architecture`: Phi-3's LongRoPE attention factor.
pub(super) fn generated_tensor_keys(ckpt: &Checkpoint, family: &str, arch: &str) -> Result<Metadata, ConvertError> {
    let mut keys = Metadata::new();
    if family == "phi3"
        && let Some(long_rope) = phi3_long_rope(ckpt)?
    {
        keys.set(&format!("{arch}.rope.scaling.attn_factor"), Value::F32(long_rope.attn_factor));
    }
    Ok(keys)
}

/// The config keys the converter reads each hyperparameter from, first found first.
const CONTEXT: &[&str] = &["max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length"];
const EMBEDDING: &[&str] = &["hidden_size", "n_embd", "dim"];
const FEED_FORWARD: &[&str] = &["intermediate_size", "n_inner", "hidden_dim"];
const HEADS: &[&str] = &["num_attention_heads", "n_head", "n_heads"];
const KV_HEADS: &[&str] = &["num_key_value_heads", "n_kv_heads"];

/// Every architecture key in the converter's order, the generated tensors'
/// keys first.
pub fn architecture_keys(
    ckpt: &Checkpoint,
    family: &str,
    arch: &str,
    outtype: OutType,
) -> Result<Metadata, ConvertError> {
    let mut keys = generated_tensor_keys(ckpt, family, arch)?;
    let rope = RopeParameters::resolve(ckpt);
    let hp = |names: &[&str]| ckpt.hparam(names).filter(|v| !v.is_null());
    // Counts are written as u32, as the converter's struct.pack('<I', …)
    // writes them: anything else in the config is refused by name, as it is
    // there, never truncated or dropped.
    let count_of = |name: &str, v: &Json| {
        v.as_u64().and_then(|n| u32::try_from(n).ok()).map(Value::U32).ok_or_else(|| {
            ConvertError::Config(format!("`{name}` ({}) is not a whole number below 2^32", super::config::shorten(v)))
        })
    };
    let hp_count = |names: &[&str]| -> Result<Option<Value>, ConvertError> {
        let found = names.iter().find_map(|k| ckpt.config.get(*k).map(|v| (*k, v)));
        found.filter(|(_, v)| !v.is_null()).map(|(k, v)| count_of(k, v)).transpose()
    };
    let derived_count = |name: &str, n: u64| count_of(name, &Json::from(n));
    // JSON decimals become f64 (correctly rounded), then f32, as Python's struct.pack does.
    let f32_of = |v: &Json| v.as_f64().map(|x| Value::F32(x as f32));
    let key = |name: &str| format!("{arch}.{name}");
    let put = |keys: &mut Metadata, name: &str, value: Option<Value>| {
        if let Some(value) = value {
            keys.set(&key(name), value);
        }
    };
    let block_count = hp_count(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?;
    let embedding = hp(EMBEDDING);
    let heads = hp(HEADS);
    let rms_eps = hp(&["rms_norm_eps", "norm_eps"]).and_then(f32_of);
    let rope_theta = rope.get("rope_theta").and_then(f32_of);
    let head_dim = hp(&["head_dim"]).and_then(Json::as_u64).or_else(|| match family {
        // LlamaConfig always fills head_dim in; Qwen3Config defaults it to 128.
        "llama" if ckpt.config["architectures"][0] != "MistralForCausalLM" => {
            embedding?.as_u64()?.checked_div(heads?.as_u64()?)
        }
        "qwen3" => Some(128),
        _ => None,
    });

    if family == "phi3" {
        put(&mut keys, "context_length", hp_count(&["n_positions", "max_position_embeddings"])?);
        put(
            &mut keys,
            "rope.scaling.original_context_length",
            rope.get("original_max_position_embeddings")
                .map(|v| count_of("original_max_position_embeddings", v))
                .transpose()?,
        );
        put(&mut keys, "embedding_length", hp_count(EMBEDDING)?);
        put(&mut keys, "feed_forward_length", hp_count(FEED_FORWARD)?);
        put(&mut keys, "block_count", block_count);
        put(&mut keys, "attention.head_count", hp_count(HEADS)?);
        put(&mut keys, "attention.head_count_kv", hp_count(KV_HEADS)?);
        put(&mut keys, "attention.layer_norm_rms_epsilon", rms_eps);
        put(&mut keys, "rope.dimension_count", Some(derived_count("rope dimensions", phi3_rope_dims(ckpt, &rope)?)?));
        put(&mut keys, "rope.freq_base", rope_theta);
        keys.set("general.file_type", Value::U32(file_type(outtype)));
        let window = hp_count(&["sliding_window"])?.unwrap_or(Value::U32(0));
        put(&mut keys, "attention.sliding_window", Some(window));
    } else {
        put(&mut keys, "block_count", block_count);
        put(&mut keys, "context_length", hp_count(CONTEXT)?);
        put(&mut keys, "embedding_length", hp_count(EMBEDDING)?);
        put(&mut keys, "feed_forward_length", hp_count(FEED_FORWARD)?);
        put(&mut keys, "attention.head_count", hp_count(HEADS)?);
        put(&mut keys, "attention.head_count_kv", hp_count(KV_HEADS)?);
        for (name, value) in rope_scaling_keys(&rope)? {
            keys.set(&key(name), value);
        }
        put(&mut keys, "rope.freq_base", rope_theta);
        put(&mut keys, "rope.freq_base_swa", hp(&["rope_local_base_freq"]).and_then(f32_of));
        put(&mut keys, "attention.layer_norm_rms_epsilon", rms_eps);
        let head_dim = head_dim.map(|d| derived_count("head_dim", d)).transpose()?;
        put(&mut keys, "attention.key_length", head_dim.clone());
        put(&mut keys, "attention.value_length", head_dim.clone());
        keys.set("general.file_type", Value::U32(file_type(outtype)));
        match family {
            "llama" => {
                put(&mut keys, "vocab_size", hp_count(&["vocab_size"])?);
                let per_head = || embedding?.as_u64()?.checked_div(heads?.as_u64()?);
                let rot = head_dim.or(per_head().map(|d| derived_count("head_dim", d)).transpose()?);
                put(&mut keys, "rope.dimension_count", rot);
            }
            "gemma3" => {
                let softcap = hp(&["final_logit_softcapping"]).filter(|v| v.as_f64().is_some_and(|x| x != 0.0));
                put(&mut keys, "final_logit_softcapping", softcap.and_then(f32_of));
                if hp(&["sliding_window_pattern"]).and_then(Json::as_u64) != Some(1) {
                    put(&mut keys, "attention.sliding_window", hp_count(&["sliding_window"])?);
                }
            }
            _ => {}
        }
    }
    keys.set("general.quantization_version", Value::U32(QUANTIZATION_VERSION));
    Ok(keys)
}

/// The rope-scaling keys of the text-model families, in the converter's
/// order (`TextModel.set_gguf_parameters`), after `{arch}.`. Kinds that
/// write no key here: llama3 (a tensor instead); the rest
/// `config::check_modelled` refuses.
fn rope_scaling_keys(rope: &RopeParameters) -> Result<Vec<(&'static str, Value)>, RopeError> {
    let mut keys = Vec::new();
    match rope.kind() {
        Some("linear") => {
            keys.push(("rope.scaling.type", Value::string("linear")));
            keys.push(("rope.scaling.factor", Value::F32(rope.required_f32("factor", "linear scaling")?)));
        }
        Some("yarn") => {
            keys.push(("rope.scaling.type", Value::string("yarn")));
            keys.push(("rope.scaling.factor", Value::F32(rope.required_f32("factor", "YaRN scaling")?)));
            let original = rope.required_u32("original_max_position_embeddings", "YaRN scaling")?;
            keys.push(("rope.scaling.original_context_length", Value::U32(original)));
            // `attention_factor` wins whenever the dict has it, even as null.
            let attn = if rope.has("attention_factor") { "attention_factor" } else { "attn_factor" };
            let optional = [
                ("rope.scaling.yarn_ext_factor", "extrapolation_factor"),
                ("rope.scaling.yarn_attn_factor", attn),
                ("rope.scaling.yarn_beta_fast", "beta_fast"),
                ("rope.scaling.yarn_beta_slow", "beta_slow"),
            ];
            for (name, config_key) in optional {
                if let Some(value) = rope.f32(config_key)? {
                    keys.push((name, Value::F32(value)));
                }
            }
        }
        _ => {}
    }
    Ok(keys)
}
