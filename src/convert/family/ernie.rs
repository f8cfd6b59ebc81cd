//! ERNIE 4.5: `Ernie4_5Model` and `Ernie4_5MoeModel` in the converter.
//! The text model's keys (its `head_dim` always set), a SentencePiece
//! vocabulary with the space prefix `tokenizer_config.json` gives after
//! it. The MoE's experts stacked (gate, up, down) beside a shared expert
//! and the router's score-correction bias, after leading dense blocks; its
//! multi-token-prediction tensors left out.

use serde_json::{Value as Json, json};

use std::borrow::Cow;

use super::{Conversion, Experts, Transform, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, text_model_keys};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "ernie4_5",
    classes: &[("Ernie4_5ForCausalLM", "ernie4_5"), ("Ernie4_5_ForCausalLM", "ernie4_5")],
    config: Modelled {
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu")), ("use_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::Rename(as_model_names)],
    generated: &[],
    keys,
    vocab: Vocab::SentencePieceThenSpacePrefix,
};

const EXPERTS: Experts = Experts {
    pattern: "model.layers.{N}.mlp.experts.{E}.{W}.weight",
    projections: &[
        ("gate_proj", "blk.{N}.ffn_gate_exps"),
        ("up_proj", "blk.{N}.ffn_up_exps"),
        ("down_proj", "blk.{N}.ffn_down_exps"),
    ],
    count: &["moe_num_experts"],
};

pub const MOE: Conversion = Conversion {
    family: "ernie4_5-moe",
    classes: &[("Ernie4_5_MoeForCausalLM", "ernie4_5-moe")],
    config: Modelled {
        reads: &[
            "moe_num_experts",
            "moe_k",
            "moe_layer_interval",
            "moe_layer_start_index",
            "moe_layer_end_index",
            "moe_intermediate_size",
            "moe_num_shared_experts",
            "moe_norm_min",
        ],
        defaults: CONVERSION.config.defaults,
        window: &[],
        pattern: Some(experts_to_the_last_block),
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::StackExperts(&EXPERTS), Transform::Rename(without_next_token_prediction)],
    generated: &[],
    keys: moe_keys,
    vocab: Vocab::SentencePieceThenSpacePrefix,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}

/// `Ernie4_5Model.filter_tensors`: ERNIE's own prefix as `model.`.
fn as_model_names(name: &str) -> Option<Cow<'_, str>> {
    Some(if name.contains("ernie.") { Cow::Owned(name.replace("ernie.", "model.")) } else { Cow::Borrowed(name) })
}

/// `Ernie4_5MoeModel.filter_tensors`: the multi-token-prediction block and
/// its norms and projection left out, then as the dense model's.
fn without_next_token_prediction(name: &str) -> Option<Cow<'_, str>> {
    let prediction = ["model.mtp_block.", "model.mtp_emb_norm.", "model.mtp_hidden_norm.", "model.mtp_linear_proj."];
    if prediction.iter().any(|p| name.starts_with(p)) {
        return None;
    }
    as_model_names(name)
}

/// llama.cpp's ernie4_5-moe has experts from the leading dense blocks to the
/// last: trailing dense blocks (`moe_layer_end_index` short of it) are refused.
fn experts_to_the_last_block(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let end = config.get("moe_layer_end_index")?;
    let blocks = BLOCKS.iter().find_map(|k| config.get(*k)).and_then(Json::as_i64)?;
    match end.as_i64() {
        Some(-1) => None,
        Some(end) if end == blocks - 1 => None,
        _ => Some(("moe_layer_end_index", end.clone())),
    }
}

/// `Ernie4_5MoeModel.set_gguf_parameters`: the text model's keys, then the
/// experts', the dense blocks' and the shared expert's.
fn moe_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    keys(hp, out)?;
    let required = |name: &'static str| hp.count(&[name])?.ok_or_else(|| ConvertError::Config(format!("no `{name}`")));
    hp.put(out, "expert_count", Some(required("moe_num_experts")?));
    hp.put(out, "expert_used_count", Some(required("moe_k")?));
    hp.put(out, "interleave_moe_layer_step", Some(required("moe_layer_interval")?));
    hp.put(out, "leading_dense_block_count", Some(required("moe_layer_start_index")?));
    hp.put(out, "expert_feed_forward_length", hp.count(&["moe_intermediate_size"])?);
    if let Some(shared) = hp.count(&["moe_num_shared_experts"])? {
        let any = shared != Value::U32(0);
        hp.put(out, "expert_shared_count", Some(shared));
        if any && let (Some(width), Some(kv)) = (hp.u64(&["intermediate_size"]), hp.u64(&["num_key_value_heads"])) {
            let per = width.checked_div(kv).ok_or_else(|| ConvertError::Config("`num_key_value_heads` is 0".into()))?;
            let per = count_of("intermediate_size / num_key_value_heads", &json!(per))?;
            hp.put(out, "expert_shared_feed_forward_length", Some(per));
        }
    }
    Ok(())
}
