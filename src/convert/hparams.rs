//! The architecture keys of a converted checkpoint (`{arch}.*`, with
//! `general.file_type` and `general.quantization_version`), in the order and
//! with the types `convert_hf_to_gguf.py` writes them: [`Hparams`] reads
//! them from `config.json` as the converter does, [`text_model_keys`] writes
//! the keys every text model shares (`TextModel.set_gguf_parameters`), and
//! each family (`convert::family`) adds its own (reference: sec. 4–5 of
//! `docs/notes/convert-hf-reference.md`; rope scaling:
//! `docs/notes/rope-scaling-reference.md`).

use serde_json::Value as Json;

use super::checkpoint::Checkpoint;
use super::error::ConvertError;
use super::family::{Conversion, Generated};
use super::rope::{RopeError, RopeParameters, phi3_long_rope};
use super::tensors::OutType;
use crate::model::{Metadata, Value};
use crate::quant::plan::QUANTIZATION_VERSION;

/// The config keys the converter reads each hyperparameter from, first found first.
pub const CONTEXT: &[&str] = &["max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length"];
pub const EMBEDDING: &[&str] = &["hidden_size", "n_embd", "dim"];
pub const FEED_FORWARD: &[&str] =
    &["prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"];
pub const HEADS: &[&str] = &["num_attention_heads", "n_head", "n_heads"];
pub const KV_HEADS: &[&str] = &["num_key_value_heads", "n_kv_heads"];
pub const BLOCKS: &[&str] = &["n_layers", "num_hidden_layers", "n_layer", "num_layers"];
/// The sliding-window layers' rope base, first found first.
const LOCAL_ROPE_BASE: &[&str] =
    &["local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta", "rope_local_base_freq"];
pub const RMS_EPSILON: &[&str] = &["rms_norm_eps", "norm_eps"];
pub const LAYER_EPSILON: &[&str] = &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"];
pub const EXPERTS: &[&str] = &["num_local_experts", "num_experts", "n_routed_experts"];
pub const EXPERTS_USED: &[&str] = &["num_experts_per_tok", "num_experts_per_token", "top_k_experts"];
const GATING: &[&str] = &[
    "score_function",
    "scoring_func",
    "score_func",
    "moe_router_activation",
    "moe_router_activation_func",
    "expert_selection_fn",
];

/// A checkpoint's hyperparameters as the converter reads them, for one
/// conversion to `arch` at `outtype`.
pub struct Hparams<'a> {
    pub(super) ckpt: &'a Checkpoint,
    pub(super) arch: &'a str,
    pub(super) outtype: OutType,
    pub(super) rope: RopeParameters,
    /// Values a family sets before the converter reads the config
    /// (DeepSeek's single KV head), read in place of the config's.
    pub(super) overrides: Vec<(&'static str, Json)>,
}

impl<'a> Hparams<'a> {
    /// The same hyperparameters with `key` read as `value`.
    pub fn with(&self, key: &'static str, value: Json) -> Hparams<'a> {
        let mut overrides = self.overrides.clone();
        overrides.retain(|(k, _)| *k != key);
        overrides.push((key, value));
        Hparams { rope: self.rope.clone(), overrides, ..*self }
    }

    /// The config's `key`, or what the family set it to.
    fn config(&self, key: &str) -> Option<&Json> {
        let set = self.overrides.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        set.or_else(|| self.ckpt.config.get(key))
    }

    /// The first of `names` the config has, unless it is null.
    pub fn value(&self, names: &[&str]) -> Option<&Json> {
        names.iter().find_map(|k| self.config(k)).filter(|v| !v.is_null())
    }

    pub fn u64(&self, names: &[&str]) -> Option<u64> {
        self.value(names).and_then(Json::as_u64)
    }

    /// A count as the converter's `struct.pack('<I', …)` writes it: a u32,
    /// anything else in the config refused by name, never truncated.
    pub fn count(&self, names: &[&str]) -> Result<Option<Value>, ConvertError> {
        let found = names.iter().find_map(|k| self.config(k).map(|v| (*k, v)));
        found.filter(|(_, v)| !v.is_null()).map(|(k, v)| count_of(k, v)).transpose()
    }

    /// A decimal as the converter writes it: JSON's f64 (correctly rounded), then f32.
    pub fn f32(&self, names: &[&str]) -> Option<Value> {
        self.value(names).and_then(f32_of)
    }

    /// `{arch}.{name}`.
    pub fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.arch)
    }

    /// Sets `{arch}.{name}` when there is a value.
    pub fn put(&self, keys: &mut Metadata, name: &str, value: Option<Value>) {
        if let Some(value) = value {
            keys.set(&self.key(name), value);
        }
    }

    /// `hidden_size / num_attention_heads`, when both are there.
    pub fn per_head(&self) -> Option<u64> {
        self.u64(EMBEDDING)?.checked_div(self.u64(HEADS)?)
    }

    /// The `architectures` class the checkpoint names.
    pub fn class(&self) -> &str {
        self.ckpt.config["architectures"][0].as_str().unwrap_or_default()
    }
}

/// Multi-section rope's sections (time, height, width, extra), as the
/// converter writes them: padded with zeros to four, cut at four.
fn dimension_sections(sections: &Json) -> Result<Value, ConvertError> {
    let invalid = || {
        ConvertError::Config(format!("`mrope_section` ({}) is not a list of counts", super::config::shorten(sections)))
    };
    let counts = sections.as_array().ok_or_else(invalid)?;
    let mut four: Vec<i32> = counts
        .iter()
        .map(|v| v.as_i64().and_then(|n| i32::try_from(n).ok()))
        .collect::<Option<_>>()
        .ok_or_else(invalid)?;
    four.resize(4.max(four.len()), 0);
    four.truncate(4);
    Ok(Value::Array(crate::model::Array::I32(four)))
}

/// `v` as a u32 count, or an error naming `name`.
pub fn count_of(name: &str, v: &Json) -> Result<Value, ConvertError> {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).map(Value::U32).ok_or_else(|| {
        ConvertError::Config(format!("`{name}` ({}) is not a whole number below 2^32", super::config::shorten(v)))
    })
}

pub fn f32_of(v: &Json) -> Option<Value> {
    v.as_f64().map(|x| Value::F32(x as f32))
}

/// `general.file_type` of an outtype (llama's ftype numbers).
pub fn file_type(outtype: OutType) -> Value {
    Value::U32(match outtype {
        OutType::F32 => 0,
        OutType::F16 => 1,
        OutType::Q8_0 => 7,
        OutType::BF16 => 32,
    })
}

/// The keys the converter writes while it makes a family's generated
/// tensors (`generate_extra_tensors`), which runs before it writes any key
/// but `general.architecture`: Phi-3's LongRoPE attention factor.
pub(super) fn generated_tensor_keys(
    ckpt: &Checkpoint,
    conversion: &Conversion,
    arch: &str,
) -> Result<Metadata, ConvertError> {
    let mut keys = Metadata::new();
    if conversion.generates(Generated::LongRopeFactors)
        && let Some(long_rope) = phi3_long_rope(ckpt)?
    {
        keys.set(&format!("{arch}.rope.scaling.attn_factor"), Value::F32(long_rope.attn_factor));
    }
    Ok(keys)
}

/// Every architecture key in the converter's order, the generated tensors'
/// keys first.
pub fn architecture_keys(
    ckpt: &Checkpoint,
    conversion: &Conversion,
    arch: &str,
    outtype: OutType,
) -> Result<Metadata, ConvertError> {
    let mut keys = generated_tensor_keys(ckpt, conversion, arch)?;
    keys.append_prefixed("", &parameter_keys(ckpt, conversion, arch, outtype)?);
    Ok(keys)
}

/// The keys of `set_gguf_parameters` and the quantization version, without
/// those the converter writes only while it makes the tensors (all that
/// `--vocab-only` writes of the architecture).
pub(super) fn parameter_keys(
    ckpt: &Checkpoint,
    conversion: &Conversion,
    arch: &str,
    outtype: OutType,
) -> Result<Metadata, ConvertError> {
    let mut keys = Metadata::new();
    let hp = Hparams { ckpt, arch, outtype, rope: RopeParameters::resolve(ckpt), overrides: Vec::new() };
    (conversion.keys)(&hp, &mut keys)?;
    keys.set("general.quantization_version", Value::U32(QUANTIZATION_VERSION));
    Ok(keys)
}

/// The keys of `TextModel.set_gguf_parameters`, through
/// `general.file_type`; `head_dim` gives the key and value lengths when the
/// family knows it.
pub fn text_model_keys(hp: &Hparams<'_>, keys: &mut Metadata, head_dim: Option<u64>) -> Result<(), ConvertError> {
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "context_length", hp.count(CONTEXT)?);
    hp.put(keys, "embedding_length", hp.count(EMBEDDING)?);
    hp.put(keys, "feed_forward_length", hp.count(FEED_FORWARD)?);
    hp.put(keys, "attention.head_count", hp.count(HEADS)?);
    hp.put(keys, "attention.head_count_kv", hp.count(KV_HEADS)?);
    if hp.ckpt.config.get("is_causal") == Some(&Json::Bool(false)) {
        hp.put(keys, "attention.causal", Some(Value::Bool(false)));
    }
    for (name, value) in rope_scaling_keys(&hp.rope)? {
        keys.set(&hp.key(name), value);
    }
    if let Some(sections) = hp.rope.get("mrope_section") {
        keys.set(&hp.key("rope.dimension_sections"), dimension_sections(sections)?);
    }
    hp.put(keys, "rope.freq_base", hp.rope.get("rope_theta").and_then(f32_of));
    hp.put(keys, "rope.freq_base_swa", hp.f32(LOCAL_ROPE_BASE));
    hp.put(keys, "attention.layer_norm_rms_epsilon", hp.f32(RMS_EPSILON));
    hp.put(keys, "attention.layer_norm_epsilon", hp.f32(LAYER_EPSILON));
    hp.put(keys, "expert_count", hp.count(EXPERTS)?);
    hp.put(keys, "expert_used_count", hp.count(EXPERTS_USED)?);
    hp.put(keys, "expert_group_count", hp.count(&["n_group"])?);
    hp.put(keys, "expert_group_used_count", hp.count(&["topk_group"])?);
    if let Some(gating) = hp.value(GATING) {
        let id = match gating.as_str() {
            Some("softmax") => 1,
            Some("sigmoid") => 2,
            Some("sqrtsoftplus") => 4,
            _ => {
                let shown = super::config::shorten(gating);
                return Err(ConvertError::Config(format!("unknown expert gating function {shown}")));
            }
        };
        hp.put(keys, "expert_gating_func", Some(Value::U32(id)));
    }
    let head_dim = head_dim.map(|d| count_of("head_dim", &Json::from(d))).transpose()?;
    hp.put(keys, "attention.key_length", head_dim.clone());
    hp.put(keys, "attention.value_length", head_dim);
    keys.set("general.file_type", file_type(hp.outtype));
    Ok(())
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
