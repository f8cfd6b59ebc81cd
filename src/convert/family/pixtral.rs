//! Pixtral's vision tower, in LLaVA (`LlavaForConditionalGeneration` with a
//! Pixtral encoder, as Pixtral 12B is published) and in Mistral 3
//! (`Mistral3ForConditionalGeneration`, Mistral Small 3.1):
//! `LlavaVisionModel` in the converter (`--mmproj`). A Pixtral encoder (2-D
//! rope, a gated feed-forward) whose Q/K rows are permuted as LLaMA's,
//! LLaVA's two-layer projector (Mistral 3's after an RMS norm and a merger
//! of neighbouring patches), and the language model's embedding of
//! `[IMG_BREAK]`, which llama.cpp reads from the projector file. The
//! language models are LLaMA's conversion (`family::llama`).
//!
//! One difference from the converter, on purpose: it drops every tensor of
//! the language model before its Pixtral code can take the `[IMG_BREAK]`
//! row (`MmprojModel.filter_tensors`), so its file lacks
//! `v.token_embd.img_break` and llama.cpp refuses to load it (llama.cpp
//! issue 24235). This one writes the row, where the converter's
//! `LlavaVisionModel` means it to be: first, where the embedding comes in
//! the checkpoint's order. Every other byte is the converter's.

use serde_json::{Value as Json, json};

use crate::arch::clip::{
    IMAGE_BREAK_EMBEDDING, LLAVA_PROJECTOR_NAMES, MISTRAL3_PROJECTOR_NAMES, PIXTRAL_NAMES, vision_key,
};
use crate::convert::error::ConvertError;
use crate::convert::hparams::count_of;
use crate::convert::mmproj::{EmbeddingRow, Layout, Vision, VisionHparams, patch_embedding_type};
use crate::model::{Metadata, Value};

pub const LLAVA: Vision = Vision {
    classes: &["LlavaForConditionalGeneration"],
    top_level: super::llava::LLAVA_SETTINGS,
    names: &[PIXTRAL_NAMES, LLAVA_PROJECTOR_NAMES],
    keys: llava_keys,
    ..PIXTRAL
};

pub const MISTRAL3: Vision = Vision {
    classes: &["Mistral3ForConditionalGeneration"],
    top_level: &[
        "image_token_index",
        "projector_hidden_act",
        "multimodal_projector_bias",
        "vision_feature_layer",
        "spatial_merge_size",
    ],
    names: &[PIXTRAL_NAMES, MISTRAL3_PROJECTOR_NAMES],
    keys: mistral3_keys,
    ..PIXTRAL
};

/// What both take from Pixtral's encoder.
const PIXTRAL: Vision = Vision {
    classes: &[],
    projector: "pixtral",
    encoders: &["pixtral"],
    unnamed_encoder: "clip_vision_model",
    top_level: &[],
    modelled: &[
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "image_size",
        "patch_size",
        "hidden_act",
        "head_dim",
        "layer_norm_eps",
    ],
    // llama.cpp's Pixtral graph rotates with a base of 10000 whatever the file says.
    defaults: || vec![("rope_theta", json!(10000.0)), ("num_channels", json!(3))],
    read_config: |_| {},
    prefixes: &[
        "multi_modal_projector.",
        "vision_tower.",
        "vision_encoder.",
        "vision_language_adapter.",
        "patch_merger.",
        "pre_mm_projector_norm",
    ],
    skipped: &[],
    names: &[],
    plus_one: &[],
    permuted: &["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias"],
    splits: &[],
    embedding_rows: &[EmbeddingRow { token: "[IMG_BREAK]", name: IMAGE_BREAK_EMBEDDING }],
    forced: patch_embedding_type,
    keys: |_, _| Ok(()),
    layout: Layout::Mmproj,
};

/// LLaVA's settings held to what llama.cpp computes (every patch of the
/// last layer, through a GELU projector), each with `LlavaConfig`'s default.
fn llava_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let computed = [
        ("projector_hidden_act", json!("gelu"), json!("gelu")),
        ("vision_feature_layer", json!(-2), json!(-1)),
        ("vision_feature_select_strategy", json!("default"), json!("full")),
    ];
    pixtral_keys(hp, keys, &computed)
}

/// Mistral 3's, with `Mistral3Config`'s defaults; the merger's size written.
fn mistral3_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let computed =
        [("projector_hidden_act", json!("gelu"), json!("gelu")), ("vision_feature_layer", json!(-1), json!(-1))];
    pixtral_keys(hp, keys, &computed)?;
    let merge =
        hp.top_level("spatial_merge_size").map_or(Ok(Value::U32(2)), |size| count_of("spatial_merge_size", size))?;
    keys.set(&vision_key("spatial_merge_size"), merge);
    Ok(())
}

/// Pixtral's keys, once each `(key, default, computed)` of the model's
/// config is found at the value llama.cpp computes with.
fn pixtral_keys(
    hp: &VisionHparams<'_>,
    keys: &mut Metadata,
    computed: &[(&'static str, Json, Json)],
) -> Result<(), ConvertError> {
    hp.hold("pixtral vision tower", computed)?;
    let (width, heads) = (hp.u64(&["hidden_size"])?, hp.u64(&["num_attention_heads"])?);
    if let Some(head_dim) = hp.get("head_dim")
        && Some(head_dim) != width.checked_div(heads).map(Json::from).as_ref()
    {
        return Err(ConvertError::Config(format!(
            "`vision_config.head_dim` ({head_dim}) is not `hidden_size` / `num_attention_heads`, which llama.cpp uses"
        )));
    }
    // Pixtral's config leaves it out; transformers' Pixtral code has it fixed.
    let eps = hp.get("layer_norm_eps").and_then(Json::as_f64).unwrap_or(1e-5);
    keys.set(&vision_key("attention.layer_norm_epsilon"), Value::F32(eps as f32));
    match hp.get("hidden_act").and_then(Json::as_str) {
        Some("silu") => keys.set("clip.use_silu", Value::Bool(true)),
        Some("gelu") => keys.set("clip.use_gelu", Value::Bool(true)),
        other => {
            return Err(ConvertError::Config(format!(
                "`vision_config.hidden_act` ({}) is neither silu nor gelu, the two llama.cpp's Pixtral runs",
                other.unwrap_or("unset")
            )));
        }
    }
    Ok(())
}
