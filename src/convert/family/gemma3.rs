//! Gemma 3: `Gemma3Model` in the converter, the language model (of
//! `Gemma3ForCausalLM`, and of `Gemma3ForConditionalGeneration` inside its
//! `text_config`). Norm weights stored as offsets from one, the embedding
//! padded past `vocab_size` and cut back, a local rope base and a sliding
//! window in a period of six layers. And `Gemma3VisionModel`, the vision
//! tower of `Gemma3ForConditionalGeneration` (`--mmproj`): a SigLIP
//! encoder and a projector that pools its patches into
//! `mm_tokens_per_image` tokens of the language model's width.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::arch::clip::{GEMMA3_PROJECTOR_NAMES, SIGLIP_NAMES, vision_key};
use crate::convert::config::{LINEAR, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::convert::mmproj::{Layout, Vision, VisionHparams, patch_embedding_type};
use crate::convert::tensors::OutType;
use crate::model::{Metadata, Value};
use crate::types::GgmlType;

pub const CONVERSION: Conversion = Conversion {
    family: "gemma3",
    classes: &[("Gemma3ForCausalLM", "gemma3"), ("Gemma3ForConditionalGeneration", "gemma3")],
    config: Modelled {
        reads: &[
            "sliding_window",
            "_sliding_window_pattern",
            "sliding_window_pattern",
            "layer_types",
            "rope_local_base_freq",
            "final_logit_softcapping",
            "query_pre_attn_scalar",
        ],
        defaults: || {
            vec![
                ("hidden_activation", json!("gelu_pytorch_tanh")),
                ("attention_bias", json!(false)),
                ("attn_logit_softcapping", Json::Null),
                ("use_bidirectional_attention", json!(false)),
            ]
        },
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR],
    },
    dropped: &[],
    transforms: &[Transform::NormPlusOne, Transform::CutEmbeddingToVocab],
    generated: &[],
    keys,
    vocab: Vocab::Gemma { end_of_turn: None },
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    let softcap = hp.value(&["final_logit_softcapping"]).filter(|v| v.as_f64().is_some_and(|x| x != 0.0));
    hp.put(keys, "final_logit_softcapping", softcap.and_then(crate::convert::hparams::f32_of));
    if hp.u64(&["sliding_window_pattern"]) != Some(1) {
        hp.put(keys, "attention.sliding_window", hp.count(&["sliding_window"])?);
    }
    Ok(())
}

pub const VISION: Vision = Vision {
    classes: &["Gemma3ForConditionalGeneration"],
    projector: "gemma3",
    encoders: &["siglip_vision_model"],
    unnamed_encoder: "siglip_vision_model",
    // The image tokens' ids are the tokenizer's too; the tokens an image
    // becomes are checked against the image processor's.
    top_level: &["mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"],
    modelled: &[
        "hidden_size",
        "image_size",
        "intermediate_size",
        "layer_norm_eps",
        "num_attention_heads",
        "num_hidden_layers",
        "patch_size",
        // The pooling head is left out whether or not the model has one.
        "vision_use_head",
    ],
    defaults: || vec![("hidden_act", json!("gelu_pytorch_tanh")), ("num_channels", json!(3))],
    read_config: |_| {},
    prefixes: &["multi_modal_projector.", "vision_tower.", "multimodal_projector.", "vision_model."],
    skipped: &["vision_model.head."],
    names: &[SIGLIP_NAMES, GEMMA3_PROJECTOR_NAMES],
    plus_one: &["soft_emb_norm.weight"],
    permuted: &[],
    splits: &[],
    embedding_rows: &[],
    forced: vision_type,
    keys: vision_keys,
    layout: Layout::Mmproj,
};

/// `Gemma3VisionModel.tensor_force_quant`: the input projection F16, the
/// embeddings F32, whatever the outtype (llama.cpp issue 13025).
fn vision_type(hf: &str, gguf: &str, outtype: OutType) -> Option<GgmlType> {
    if hf.contains("input_projection") {
        Some(GgmlType::F16)
    } else if hf.contains(".embeddings.") {
        Some(GgmlType::F32)
    } else {
        patch_embedding_type(hf, gguf, outtype)
    }
}

/// Tokens an image becomes when the image processor does not say (transformers' default).
const IMAGE_SEQ_LENGTH: u64 = 256;

fn vision_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let eps = hp.get("layer_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6);
    keys.set(&vision_key("attention.layer_norm_epsilon"), Value::F32(eps as f32));
    keys.set("clip.use_gelu", Value::Bool(true));
    let seq_length = match hp.processor.get("image_seq_length") {
        None => IMAGE_SEQ_LENGTH,
        Some(value) => value.as_u64().ok_or_else(|| {
            ConvertError::Config(format!("the image processor's `image_seq_length` ({value}) is not a count"))
        })?,
    };
    // The model pools to `mm_tokens_per_image`; llama.cpp pools to what the
    // image processor's count makes of the patches: they must agree.
    if let Some(tokens) = hp.top_level("mm_tokens_per_image")
        && tokens.as_u64() != Some(seq_length)
    {
        return Err(ConvertError::Config(format!(
            "`mm_tokens_per_image` ({tokens}) is not the image processor's `image_seq_length` ({seq_length}): \
             llama.cpp would pool an image to the latter"
        )));
    }
    let per_side = (seq_length as f64).sqrt() as u64;
    let patches_per_side = hp
        .u64(&["image_size"])?
        .checked_div(hp.u64(&["patch_size"])?)
        .ok_or_else(|| ConvertError::Config("`vision_config`'s `patch_size` is 0".into()))?;
    let scale = patches_per_side.checked_div(per_side).ok_or_else(|| {
        ConvertError::Config(format!("the image processor's `image_seq_length` ({seq_length}) is below one token"))
    })?;
    // Written only when it is not llama.cpp's default, 4.
    if scale > 0 && scale != 4 {
        let scale = u32::try_from(scale).map_err(|_| ConvertError::Config(format!("projector scale {scale}")))?;
        keys.set(&vision_key("projector.scale_factor"), Value::U32(scale));
    }
    Ok(())
}
