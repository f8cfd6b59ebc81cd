//! GPT-OSS: `GptOssModel` in the converter. Its experts as OpenAI
//! publishes them, MXFP4 (`convert::mxfp4`): each block's stacked
//! `gate_up_proj` codes and scales, a row an output feature, gate and up
//! interleaved row by row (split), and `down_proj`'s, repacked to ggml's
//! MXFP4 and written first (the file then says MXFP4_MOE). Or unquantized:
//! `gate_up_proj` `[experts, hidden, 2 × ff]` with gate and up interleaved
//! element by element (split and transposed into the gate and up `*_exps`),
//! `down_proj` `[experts, ff, hidden]` (transposed). Each with its bias;
//! attention sinks; sliding and full attention alternating.

use std::borrow::Cow;

use serde_json::{Value as Json, json};

use super::{Conversion, Fused, Mxfp4Split, Piece, Transform, Vocab};
use crate::artifact::{ElementStride, RowRange, RowTransform};
use crate::convert::OutType;
use crate::convert::config::{GPT_OSS_YARN, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::convert::mxfp4::is_mxfp4;
use crate::model::{Metadata, Value};
use crate::types::FileType;

const GATE_UP: Fused = Fused { hf: "mlp.experts.gate_up_proj", pieces: gate_and_up };
const GATE_UP_BIAS: Fused = Fused { hf: "mlp.experts.gate_up_proj_bias", pieces: gate_and_up_biases };
const DOWN: Fused = Fused { hf: "mlp.experts.down_proj", pieces: down };
const DOWN_BIAS: Fused = Fused { hf: "mlp.experts.down_proj_bias", pieces: down_biases };

/// The rows of each expert's MXFP4 gate-up codes that are gate (even) or up (odd).
const fn every_other_row(start: usize) -> Option<RowRange> {
    Some(RowRange { group: 2, start, len: 1 })
}
const MXFP4: &[Mxfp4Split] = &[
    Mxfp4Split { hf: "mlp.experts.down_proj", name: "blk.{N}.ffn_down_exps", rows: None },
    Mxfp4Split { hf: "mlp.experts.gate_up_proj", name: "blk.{N}.ffn_gate_exps", rows: every_other_row(0) },
    Mxfp4Split { hf: "mlp.experts.gate_up_proj", name: "blk.{N}.ffn_up_exps", rows: every_other_row(1) },
];

pub const CONVERSION: Conversion = Conversion {
    family: "gpt-oss",
    classes: &[("GptOssForCausalLM", "gpt-oss")],
    config: Modelled {
        // OpenAI's releases repeat two settings under their own names:
        // `experts_per_token` and `initial_context_length` (held equal to
        // what the conversion reads by `what_one_key_cannot_say`).
        reads: &[
            "num_local_experts",
            "num_experts_per_tok",
            "experts_per_token",
            "sliding_window",
            "layer_types",
            "initial_context_length",
        ],
        // llama.cpp's gpt-oss: biases on every attention projection, the
        // SwiGLU clamped at 7.
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(true)), ("swiglu_limit", json!(7.0))],
        window: &[],
        pattern: Some(what_one_key_cannot_say),
        rope_scalings: &[GPT_OSS_YARN],
    },
    dropped: &[],
    transforms: &[
        Transform::Rename(as_mapped),
        Transform::Fused(&[GATE_UP, GATE_UP_BIAS, DOWN, DOWN_BIAS]),
        Transform::Mxfp4(MXFP4),
    ],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// The converter's `filter_tensors` and names: the sinks as a weight; the
/// stacked experts' tensors, which carry no `.weight`/`.bias`, given one.
fn as_mapped(name: &str) -> Option<Cow<'_, str>> {
    Some(if name.ends_with(".self_attn.sinks") || name.ends_with("_proj") {
        Cow::Owned(format!("{name}.weight"))
    } else if name.ends_with("_proj_bias") {
        Cow::Owned(format!("{name}.bias"))
    } else {
        Cow::Borrowed(name)
    })
}

fn dims(config: &Json) -> Result<(usize, usize), ConvertError> {
    let number = |key: &str| {
        config
            .get(key)
            .and_then(Json::as_u64)
            .map(|n| n as usize)
            .ok_or_else(|| ConvertError::Config(format!("no `{key}`")))
    };
    Ok((number("hidden_size")?, number("intermediate_size")?))
}

/// Gate and up: the even and odd elements of each row, each expert's rows
/// then transposed.
fn gate_and_up(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let (hidden, _) = dims(config)?;
    let half = |start| RowTransform {
        elements: Some(ElementStride { step: 2, start }),
        transpose: Some(hidden),
        ..RowTransform::default()
    };
    Ok(vec![Piece::rows("blk.{N}.ffn_gate_exps", vec![half(0)]), Piece::rows("blk.{N}.ffn_up_exps", vec![half(1)])])
}

fn gate_and_up_biases(_: &Json) -> Result<Vec<Piece>, ConvertError> {
    let half = |start| RowTransform { elements: Some(ElementStride { step: 2, start }), ..RowTransform::default() };
    Ok(vec![Piece::rows("blk.{N}.ffn_gate_exps", vec![half(0)]), Piece::rows("blk.{N}.ffn_up_exps", vec![half(1)])])
}

/// Down: each expert's rows transposed.
fn down(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let (_, ff) = dims(config)?;
    let transposed = RowTransform { transpose: Some(ff), ..RowTransform::default() };
    Ok(vec![Piece::rows("blk.{N}.ffn_down_exps", vec![transposed])])
}

fn down_biases(_: &Json) -> Result<Vec<Piece>, ConvertError> {
    Ok(vec![Piece::rows("blk.{N}.ffn_down_exps", vec![RowTransform::default()])])
}

/// What llama.cpp's gpt-oss assumes and the file cannot say: sliding and
/// full attention alternating from the first layer; and the repeated
/// settings equal to those the conversion writes.
fn what_one_key_cannot_say(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let alternating = |types: &Vec<Json>| {
        types
            .iter()
            .enumerate()
            .all(|(i, t)| t.as_str() == Some(if i % 2 == 0 { "sliding_attention" } else { "full_attention" }))
    };
    let original_context = config.get("rope_scaling").and_then(|s| s.get("original_max_position_embeddings"));
    let repeats =
        [("experts_per_token", config.get("num_experts_per_tok")), ("initial_context_length", original_context)];
    if let Some(types) = config.get("layer_types").filter(|t| !t.as_array().is_some_and(alternating)) {
        return Some(("layer_types", types.clone()));
    }
    repeats.into_iter().find_map(|(key, of)| {
        let value = config.get(key)?;
        (Some(value) != of).then(|| (key, value.clone()))
    })
}

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    let window = hp.count(&["sliding_window"])?.ok_or_else(|| ConvertError::Config("no `sliding_window`".into()))?;
    hp.put(keys, "attention.sliding_window", Some(window));
    hp.put(keys, "expert_feed_forward_length", hp.count(&["intermediate_size"])?);
    // A float outtype of MXFP4 experts: the file is mostly MXFP4 (the key keeps its place).
    if is_mxfp4(&hp.ckpt.config) && hp.outtype != OutType::Q8_0 {
        keys.set("general.file_type", Value::U32(FileType::MXFP4_MOE.id()));
    }
    Ok(())
}
