//! DeepSeek-V2 and DeepSeek-V3: `DeepseekV2Model` in the converter.
//! Multi-head latent attention, written as llama.cpp computes it (one KV
//! head of the compressed width; each block's `kv_b_proj` split into the
//! key part, transposed a head at a time, and the value part), routed
//! experts stacked (down, gate, up) beside shared ones, the router's score
//! bias (V3), and the multi-token-prediction blocks left out.
//!
//! The converter reads the config through `DeepseekV2Config` or
//! `DeepseekV3Config`, which fill in what `config.json` lacks (the head
//! size always): the keys the conversion reads take those defaults here.

use serde_json::{Value as Json, json};

use super::{Conversion, Experts, Fused, Piece, Transform, Vocab};
use crate::artifact::{RowRange, RowTransform};
use crate::convert::config::{DEEPSEEK_YARN, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, f32_of, text_model_keys};
use crate::model::{Metadata, Value};

const EXPERTS: Experts = Experts {
    pattern: "model.layers.{N}.mlp.experts.{E}.{W}.weight",
    projections: &[
        ("down_proj", "blk.{N}.ffn_down_exps"),
        ("gate_proj", "blk.{N}.ffn_gate_exps"),
        ("up_proj", "blk.{N}.ffn_up_exps"),
    ],
    count: &["n_routed_experts"],
};

const KV_B: Fused = Fused { hf: "self_attn.kv_b_proj", pieces: key_and_value_parts };

const READS: &[&str] = &[
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "qk_head_dim",
    "v_head_dim",
    "moe_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "routed_scaling_factor",
    "first_k_dense_replace",
    "norm_topk_prob",
    "n_group",
    "topk_group",
    "topk_method",
    "scoring_func",
    "num_nextn_predict_layers",
];

fn ignored_at() -> Vec<(&'static str, Json)> {
    vec![
        ("hidden_act", json!("silu")),
        ("attention_bias", json!(false)),
        ("mlp_bias", json!(false)),
        ("pretraining_tp", json!(1)),
        ("moe_layer_freq", json!(1)),
        // llama.cpp's deepseek2 rotates interleaved pairs, as DeepSeek's weights are laid out.
        ("rope_interleave", json!(true)),
    ]
}

pub const DEEPSEEK_V2: Conversion = Conversion {
    family: "deepseek2",
    classes: &[("DeepseekV2ForCausalLM", "deepseek2")],
    config: Modelled {
        reads: READS,
        defaults: ignored_at,
        window: &[],
        pattern: Some(v2_routing),
        rope_scalings: &[DEEPSEEK_YARN],
    },
    dropped: &[],
    transforms: &[Transform::StackExperts(&EXPERTS), Transform::Fused(&[KV_B]), Transform::DropNextTokenBlocks],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// V3: V2's conversion with V3's router and pre-tokenizer.
pub const DEEPSEEK_V3: Conversion = Conversion {
    classes: &[("DeepseekV3ForCausalLM", "deepseek2")],
    config: Modelled { pattern: Some(v3_routing), ..DEEPSEEK_V2.config },
    vocab: Vocab::Bpe,
    ..DEEPSEEK_V2
};

/// What the config class gives `key` when `config.json` lacks it.
fn class_default(config: &serde_json::Map<String, Json>, key: &str) -> Option<Json> {
    let v3 = config.get("architectures").and_then(|a| a[0].as_str()) == Some("DeepseekV3ForCausalLM");
    let pick = |v2: Json, v3_value: Json| if v3 { v3_value } else { v2 };
    Some(match key {
        "head_dim" => setting(config, "qk_rope_head_dim")?,
        "num_key_value_heads" => setting(config, "num_attention_heads")?,
        "kv_lora_rank" => json!(512),
        "q_lora_rank" => json!(1536),
        "qk_rope_head_dim" => json!(64),
        "qk_nope_head_dim" | "v_head_dim" => json!(128),
        "n_routed_experts" => pick(json!(64), json!(256)),
        "n_shared_experts" => pick(json!(2), json!(1)),
        "routed_scaling_factor" => pick(json!(1.0), json!(2.5)),
        "first_k_dense_replace" => pick(json!(0), json!(3)),
        "norm_topk_prob" => pick(json!(false), json!(true)),
        "n_group" => pick(Json::Null, json!(8)),
        "topk_group" => pick(Json::Null, json!(4)),
        "moe_intermediate_size" => pick(json!(1407), json!(2048)),
        "rms_norm_eps" => json!(1e-6),
        _ => return None,
    })
}

/// `key` as the converter reads it: from `config.json`, else the class's default.
fn setting(config: &serde_json::Map<String, Json>, key: &str) -> Option<Json> {
    config.get(key).cloned().or_else(|| class_default(config, key))
}

fn setting_u64(config: &Json, key: &'static str) -> Result<u64, ConvertError> {
    let config = config.as_object().ok_or_else(|| ConvertError::Config("config.json is not an object".into()))?;
    setting(config, key).and_then(|v| v.as_u64()).ok_or_else(|| ConvertError::Config(format!("no `{key}`")))
}

/// `kv_b_proj` holds, head by head, the key's rope-free part and the
/// value: the key part is written transposed a head at a time
/// (`attn_k_b`, `[nope, kv_lora_rank, heads]`), the value part as it is
/// (`attn_v_b`, `[kv_lora_rank, v_head_dim, heads]`).
fn key_and_value_parts(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let heads = setting_u64(config, "num_key_value_heads")?;
    let (nope, value) = (setting_u64(config, "qk_nope_head_dim")?, setting_u64(config, "v_head_dim")?);
    let group = (nope + value) as usize;
    let run = |start: u64, len: u64, transpose: Option<usize>| RowTransform {
        rows: Some(RowRange { group, start: start as usize, len: len as usize }),
        transpose,
        ..RowTransform::default()
    };
    Ok(vec![
        Piece { name: "blk.{N}.attn_k_b", runs: vec![run(0, nope, Some(nope as usize))], slices: Some(heads) },
        Piece { name: "blk.{N}.attn_v_b", runs: vec![run(nope, value, None)], slices: Some(heads) },
    ])
}

/// V2's router, as transformers computes it: softmax scores, scaled, never
/// renormalized, chosen without groups (llama.cpp's grouped choice is
/// V3's).
fn v2_routing(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let value = |key: &'static str| (key, setting(config, key).unwrap_or(Json::Null));
    if let Some(gating) = config.get("scoring_func").filter(|v| v.as_str() != Some("softmax")) {
        return Some(("scoring_func", gating.clone()));
    }
    if setting(config, "norm_topk_prob") == Some(json!(true)) {
        return Some(value("norm_topk_prob"));
    }
    match setting(config, "n_group").and_then(|v| v.as_u64()) {
        Some(groups) if groups > 1 => Some(value("n_group")),
        _ => yarn_scales(config),
    }
}

/// V3's router: sigmoid scores with a bias for the choice, grouped; the
/// file must say sigmoid (llama.cpp's deepseek2 assumes softmax otherwise).
fn v3_routing(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    match config.get("scoring_func") {
        Some(Json::String(gating)) if gating == "sigmoid" => {}
        other => return Some(("scoring_func", other.cloned().unwrap_or(Json::Null))),
    }
    if let Some(method) = config.get("topk_method").filter(|v| v.as_str() != Some("noaux_tc")) {
        return Some(("topk_method", method.clone()));
    }
    yarn_scales(config)
}

/// YaRN's two scales, which llama.cpp computes right only when equal.
fn yarn_scales(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let scaling = config.get("rope_scaling").filter(|v| !v.is_null())?;
    let (mscale, all) =
        (scaling.get("mscale").and_then(Json::as_f64), scaling.get("mscale_all_dim").and_then(Json::as_f64));
    match (mscale, all) {
        (Some(a), Some(b)) if a == b => None,
        _ => Some(("rope_scaling.mscale", scaling.get("mscale").cloned().unwrap_or(Json::Null))),
    }
}

/// `DeepseekV2Model.set_gguf_parameters`: the text-model keys with one KV
/// head, then the latent attention's widths and the experts'.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let config =
        hp.ckpt.config.as_object().ok_or_else(|| ConvertError::Config("config.json is not an object".into()))?;
    let mut hp = hp.with("num_key_value_heads", json!(1));
    for key in ["head_dim", "rms_norm_eps", "n_group", "topk_group"] {
        if !config.contains_key(key)
            && let Some(value) = class_default(config, key)
        {
            hp = hp.with(key, value);
        }
    }
    text_model_keys(&hp, keys, hp.u64(&["head_dim"]))?;
    let number = |key: &'static str| setting(config, key).filter(|v| !v.is_null());
    let count = |key: &'static str| number(key).map(|v| count_of(key, &v)).transpose();
    let has_experts = number("n_routed_experts").is_some();
    let leading_dense = match number("first_k_dense_replace") {
        Some(v) => Some(count_of("first_k_dense_replace", &v)?),
        None if has_experts => Some(Value::U32(0)),
        None => hp.count(BLOCKS)?,
    };
    hp.put(keys, "leading_dense_block_count", leading_dense);
    hp.put(keys, "vocab_size", hp.count(&["vocab_size"])?);
    hp.put(keys, "attention.q_lora_rank", count("q_lora_rank")?);
    let kv_lora = number("kv_lora_rank").and_then(|v| v.as_u64()).unwrap_or(512);
    let required = |key: &'static str| {
        number(key).and_then(|v| v.as_u64()).ok_or_else(|| ConvertError::Config(format!("no `{key}`")))
    };
    let (rope, nope, value) = (required("qk_rope_head_dim")?, required("qk_nope_head_dim")?, required("v_head_dim")?);
    hp.put(keys, "attention.kv_lora_rank", Some(count_of("kv_lora_rank", &json!(kv_lora))?));
    hp.put(keys, "attention.key_length", Some(count_of("kv_lora_rank + qk_rope_head_dim", &json!(kv_lora + rope))?));
    hp.put(keys, "attention.value_length", Some(count_of("kv_lora_rank", &json!(kv_lora))?));
    hp.put(
        keys,
        "attention.key_length_mla",
        Some(count_of("qk_nope_head_dim + qk_rope_head_dim", &json!(nope + rope))?),
    );
    hp.put(keys, "attention.value_length_mla", Some(count_of("v_head_dim", &json!(value))?));
    let expert_width = hp.count(&["moe_intermediate_size", "intermediate_size"])?;
    let expert_width = expert_width.ok_or_else(|| ConvertError::Config("no `moe_intermediate_size`".into()))?;
    hp.put(keys, "expert_feed_forward_length", Some(expert_width));
    hp.put(keys, "expert_count", count("n_routed_experts")?);
    hp.put(keys, "expert_shared_count", Some(count("n_shared_experts")?.unwrap_or(Value::U32(0))));
    hp.put(keys, "expert_weights_scale", number("routed_scaling_factor").as_ref().and_then(f32_of));
    if number("norm_topk_prob") == Some(json!(true)) {
        hp.put(keys, "expert_weights_norm", Some(Value::Bool(true)));
    }
    hp.put(keys, "rope.dimension_count", Some(count_of("qk_rope_head_dim", &json!(rope))?));
    if let Some(all_dims) = hp.rope.get("mscale_all_dim").and_then(Json::as_f64) {
        hp.put(keys, "rope.scaling.yarn_log_multiplier", Some(Value::F32((0.1 * all_dims) as f32)));
    }
    Ok(())
}
