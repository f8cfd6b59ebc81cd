//! GPT-2: `GPT2Model` in the converter. Its own keys (the context from
//! `n_ctx`, four times the width as feed-forward, nothing of the rope), and
//! its Conv1D weights, stored `[in, out]`, transposed. The attention-mask
//! buffers older checkpoints carry are left out, where the converter stops.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, count_of, file_type};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "gpt2",
    classes: &[("GPT2LMHeadModel", "gpt2")],
    config: Modelled {
        reads: &["n_ctx", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "layer_norm_epsilon"],
        // llama.cpp's gpt2: tanh-approximated GELU, attention scaled by
        // 1/√d alone; the summary head is not the language model's.
        defaults: || {
            vec![
                ("activation_function", json!("gelu_new")),
                ("scale_attn_weights", json!(true)),
                ("scale_attn_by_inverse_layer_idx", json!(false)),
                ("reorder_and_upcast_attn", json!(false)),
                ("add_cross_attention", json!(false)),
                ("summary_type", json!("cls_index")),
                ("summary_use_proj", json!(true)),
                ("summary_activation", Json::Null),
                ("summary_proj_to_labels", json!(true)),
                ("summary_first_dropout", json!(0.1)),
            ]
        },
        window: &[],
        pattern: Some(as_the_file_says),
        rope_scalings: &[],
    },
    // Causal-mask buffers older checkpoints saved (the converter stops at them).
    dropped: &[".attn.bias", ".attn.masked_bias"],
    transforms: &[Transform::Transpose(&[
        ".attn.c_attn.weight",
        ".attn.c_proj.weight",
        ".mlp.c_fc.weight",
        ".mlp.c_proj.weight",
    ])],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// What the file cannot say: a feed-forward width other than four times
/// the embedding (written so, whatever the config says), a context longer
/// than the position table.
fn as_the_file_says(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64);
    if let (Some(inner), Some(width)) = (number("n_inner"), number("n_embd"))
        && inner != 4 * width
    {
        return Some(("n_inner", config["n_inner"].clone()));
    }
    match (number("n_ctx"), number("n_positions")) {
        (Some(context), Some(positions)) if context > positions => Some(("n_ctx", config["n_ctx"].clone())),
        _ => None,
    }
}

/// `GPT2Model.set_gguf_parameters`.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let required = |key: &'static str| hp.u64(&[key]).ok_or_else(|| ConvertError::Config(format!("no `{key}`")));
    let width = required("n_embd")?;
    hp.put(keys, "block_count", Some(count_of("n_layer", &json!(required("n_layer")?))?));
    hp.put(keys, "context_length", Some(count_of("n_ctx", &json!(required("n_ctx")?))?));
    hp.put(keys, "embedding_length", Some(count_of("n_embd", &json!(width))?));
    hp.put(keys, "feed_forward_length", Some(count_of("4 × n_embd", &json!(4 * width))?));
    hp.put(keys, "attention.head_count", Some(count_of("n_head", &json!(required("n_head")?))?));
    let eps = hp.f32(&["layer_norm_epsilon"]).ok_or_else(|| ConvertError::Config("no `layer_norm_epsilon`".into()))?;
    hp.put(keys, "attention.layer_norm_epsilon", Some(eps));
    keys.set("general.file_type", file_type(hp.outtype));
    Ok(())
}
