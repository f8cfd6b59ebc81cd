//! Qwen2-VL and Qwen2.5-VL: `Qwen2VLModel` (the language model) and
//! `Qwen2VLVisionModel` (the tower, `--mmproj`) in the converter. The
//! language model is Qwen2's under an architecture of its own, with
//! multi-section rope (`mrope_section`: rotary dimensions for time, height
//! and width). The tower's fused Q/K/V is split, its Conv3D patch
//! embedding written as one Conv2D kernel a frame, its settings read under
//! its own names (`depth`, `num_heads`, Qwen2-VL's `embed_dim`); Qwen2.5-VL
//! adds a gated SiLU feed-forward and window attention between
//! full-attention blocks.

use serde_json::{Map, Value as Json, json};

use super::{Conversion, qwen2};
use crate::arch::clip::{QWEN2VL_NAMES, vision_key};
use crate::convert::config::{MROPE, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::mmproj::{Layout, Split, Vision, VisionHparams, patch_embedding_type};
use crate::model::{Metadata, Value};

/// Qwen2's conversion, its rope in sections.
pub const CONVERSION: Conversion = Conversion {
    family: "qwen2vl",
    classes: &[("Qwen2VLForConditionalGeneration", "qwen2vl"), ("Qwen2_5_VLForConditionalGeneration", "qwen2vl")],
    config: Modelled { rope_scalings: &[MROPE], ..qwen2::CONVERSION.config },
    ..qwen2::CONVERSION
};

/// The vision tokens' ids, which the tokenizer holds too.
const TOKEN_IDS: &[&str] =
    &["image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "vision_token_id"];

/// The tower's tensors and how they are written, the same in both.
const SPLITS: &[Split] = &[
    Split::Rows { fused: ".attn.qkv.", parts: &[".attn.q.", ".attn.k.", ".attn.v."] },
    Split::Frames { hf: "visual.patch_embed.proj.weight", names: &["v.patch_embd.weight", "v.patch_embd.weight.1"] },
];

pub const QWEN2_VL: Vision = Vision {
    classes: &["Qwen2VLForConditionalGeneration"],
    projector: "qwen2vl_merger",
    encoders: &["qwen2_vl"],
    unnamed_encoder: "qwen2_vl",
    top_level: TOKEN_IDS,
    modelled: &["depth", "embed_dim", "hidden_size", "num_heads", "mlp_ratio", "patch_size", "image_size"],
    defaults: || {
        let mut defaults = fixed_by_llama_cpp();
        defaults.push(("hidden_act", json!("quick_gelu")));
        defaults
    },
    read_config,
    prefixes: &["visual."],
    skipped: &[],
    names: &[QWEN2VL_NAMES],
    plus_one: &[],
    permuted: &[],
    embedding_rows: &[],
    splits: SPLITS,
    forced: patch_embedding_type,
    keys: qwen2_vl_keys,
    layout: Layout::Mmproj,
};

pub const QWEN2_5_VL: Vision = Vision {
    classes: &["Qwen2_5_VLForConditionalGeneration"],
    projector: "qwen2.5vl_merger",
    encoders: &["qwen2_5_vl"],
    unnamed_encoder: "qwen2_5_vl",
    modelled: &[
        "depth",
        "hidden_size",
        "intermediate_size",
        "out_hidden_size",
        "num_heads",
        "patch_size",
        "image_size",
        "fullatt_block_indexes",
        // Video only: llama.cpp takes images.
        "tokens_per_second",
        // Published beside `patch_size`; transformers reads neither it nor anything from it.
        "spatial_patch_size",
    ],
    defaults: || {
        let mut defaults = fixed_by_llama_cpp();
        // llama.cpp's windows are 112 pixels whatever the config says.
        defaults.extend([("hidden_act", json!("silu")), ("window_size", json!(112))]);
        defaults
    },
    keys: qwen2_5_vl_keys,
    ..QWEN2_VL
};

/// Settings llama.cpp's Qwen-VL graphs assume, at the values they assume.
fn fixed_by_llama_cpp() -> Vec<(&'static str, Json)> {
    vec![
        ("spatial_merge_size", json!(2)),
        ("temporal_patch_size", json!(2)),
        ("in_chans", json!(3)),
        ("in_channels", json!(3)),
    ]
}

/// `Qwen2VLVisionModel.__init__`'s renames: the image size llama.cpp
/// assumes when the config has none, the depth and heads under the common
/// names; Qwen2-VL's `embed_dim` is the encoder's width and its
/// `hidden_size` (the merger's output) the feed-forward length written.
fn read_config(config: &mut Map<String, Json>) {
    config.entry("image_size").or_insert(json!(560));
    let num_heads = config.get("num_heads").cloned().unwrap_or(Json::Null);
    config.insert("num_attention_heads".into(), num_heads);
    let depth = config.get("depth").cloned().unwrap_or(Json::Null);
    config.insert("num_hidden_layers".into(), depth);
    if let Some(embed_dim) = config.get("embed_dim").cloned() {
        let merged = config.get("hidden_size").cloned().unwrap_or(Json::Null);
        config.insert("intermediate_size".into(), merged);
        config.insert("hidden_size".into(), embed_dim);
    }
}

/// The class's projector belongs to its `model_type`, as the converter picks it.
fn check_model_type(hp: &VisionHparams<'_>, expected: &str) -> Result<(), ConvertError> {
    match hp.top_level("model_type").and_then(Json::as_str) {
        Some(model_type) if model_type == expected => Ok(()),
        other => Err(ConvertError::Config(format!(
            "`model_type` is {}, where the class's tower is {expected}'s",
            other.map_or("unset".to_owned(), |t| format!("`{t}`"))
        ))),
    }
}

/// The tower's layer-norm epsilon: the language model's, from the top level.
fn epsilon(hp: &VisionHparams<'_>, keys: &mut Metadata) {
    let eps = hp.top_level("rms_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6);
    keys.set(&vision_key("attention.layer_norm_epsilon"), Value::F32(eps as f32));
}

fn qwen2_vl_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    check_model_type(hp, "qwen2_vl")?;
    epsilon(hp, keys);
    Ok(())
}

fn qwen2_5_vl_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    check_model_type(hp, "qwen2_5_vl")?;
    keys.set("clip.use_silu", Value::Bool(true));
    keys.set(&vision_key("n_wa_pattern"), Value::U32(window_pattern(hp)?));
    epsilon(hp, keys);
    Ok(())
}

/// Every how many blocks one attends to the whole image: the full-attention
/// blocks must be the last of each period, every one of them (llama.cpp
/// makes every period's last block full).
fn window_pattern(hp: &VisionHparams<'_>) -> Result<u32, ConvertError> {
    let invalid = |blocks: &Json| {
        ConvertError::Config(format!(
            "`vision_config.fullatt_block_indexes` ({blocks}) is not a period of blocks, the one pattern llama.cpp runs"
        ))
    };
    let blocks = hp.find(&["fullatt_block_indexes"])?;
    let indexes: Vec<u64> =
        blocks.as_array().and_then(|b| b.iter().map(Json::as_u64).collect()).ok_or_else(|| invalid(blocks))?;
    let period = indexes.first().map(|first| first + 1).ok_or_else(|| invalid(blocks))?;
    let depth = hp.u64(&["depth"])?;
    let every_period: Vec<u64> = (period - 1..depth).step_by(period as usize).collect();
    if indexes != every_period {
        return Err(invalid(blocks));
    }
    u32::try_from(period).map_err(|_| invalid(blocks))
}
