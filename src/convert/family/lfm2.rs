//! LFM2: `LFM2Model` in the converter. Short-convolution blocks between
//! attention ones (`layer_types`): each block's KV head count written as
//! an array, 0 for a convolution; the convolution's `[channels, 1, width]`
//! kernel written 2-D; the final norm under the embedding norm's name; the
//! feed-forward width as the block's own rule computes it.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, KV_HEADS, count_of, text_model_keys};
use crate::model::{Array, Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "lfm2",
    classes: &[("Lfm2ForCausalLM", "lfm2"), ("LFM2ForCausalLM", "lfm2")],
    config: Modelled {
        reads: &[
            "layer_types",
            "full_attn_idxs",
            "conv_L_cache",
            "norm_eps",
            "block_ff_dim",
            "block_auto_adjust_ff_dim",
            "block_ffn_dim_multiplier",
            "block_multiple_of",
            // Initialisation only.
            "block_mlp_init_scale",
            "block_out_init_scale",
            "block_use_xavier_init",
            "conv_use_xavier_init",
        ],
        defaults: || {
            vec![
                ("conv_bias", json!(false)),
                ("block_use_swiglu", json!(true)),
                ("use_pos_enc", json!(true)),
                ("tie_embedding", json!(true)),
            ]
        },
        window: &[],
        pattern: None,
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Squeeze(&[".conv.conv.weight"])],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// `LFM2Model.set_gguf_parameters`: the text model's keys with the KV head
/// count a block, then the vocabulary size, the convolution's cache length,
/// the norm epsilon and the feed-forward width (the last two rewritten in
/// place).
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    let kv_heads = hp.u64(KV_HEADS).ok_or_else(|| ConvertError::Config("no `num_key_value_heads`".into()))?;
    let kv_heads =
        i32::try_from(kv_heads).map_err(|_| ConvertError::Config("`num_key_value_heads` is too large".into()))?;
    let per_block = layer_types(hp)?.iter().map(|kind| if kind == "conv" { 0 } else { kv_heads }).collect();
    keys.set(&hp.key("attention.head_count_kv"), Value::Array(Array::I32(per_block)));
    hp.put(keys, "vocab_size", hp.count(&["vocab_size"])?);
    let required = |name: &'static str| hp.value(&[name]).ok_or_else(|| ConvertError::Config(format!("no `{name}`")));
    hp.put(keys, "shortconv.l_cache", Some(count_of("conv_L_cache", required("conv_L_cache")?)?));
    hp.put(keys, "attention.layer_norm_rms_epsilon", hp.f32(&["norm_eps"]));
    hp.put(keys, "feed_forward_length", Some(count_of("feed-forward width", &json!(feed_forward(hp)?))?));
    Ok(())
}

/// Each block's kind, as `Lfm2Config` makes it: `layer_types`, or from
/// `full_attn_idxs` (every block attention without either).
fn layer_types(hp: &Hparams<'_>) -> Result<Vec<String>, ConvertError> {
    if let Some(types) = hp.value(&["layer_types"]) {
        let types = types.as_array().ok_or_else(|| ConvertError::Config("`layer_types` is not a list".into()))?;
        return types
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| ConvertError::Config("`layer_types` holds a value that is not a name".into()));
    }
    let blocks = hp.u64(BLOCKS).ok_or_else(|| ConvertError::Config("no `num_hidden_layers`".into()))?;
    let attention: Option<Vec<u64>> =
        hp.value(&["full_attn_idxs"]).and_then(Json::as_array).map(|ids| ids.iter().filter_map(Json::as_u64).collect());
    let is_attention = |i: u64| attention.as_ref().is_none_or(|ids| ids.contains(&i));
    Ok((0..blocks).map(|i| if is_attention(i) { "full_attention" } else { "conv" }.to_owned()).collect())
}

/// `LFM2Model._add_feed_forward_length`: two thirds of `block_ff_dim`
/// (`intermediate_size`), times the multiplier, rounded up to a multiple,
/// when the block adjusts it. Transformers rounds only with a multiplier:
/// without one where rounding changes the width the file would not fit the
/// weights, and the config is refused.
fn feed_forward(hp: &Hparams<'_>) -> Result<u64, ConvertError> {
    let width = hp
        .u64(&["block_ff_dim", "intermediate_size"])
        .ok_or_else(|| ConvertError::Config("no `block_ff_dim` or `intermediate_size`".into()))?;
    if hp.ckpt.config.get("block_auto_adjust_ff_dim") != Some(&Json::Bool(true)) {
        return Ok(width);
    }
    let two_thirds = (2.0 * width as f64 / 3.0) as u64;
    let multiplier = hp.value(&["block_ffn_dim_multiplier"]).and_then(Json::as_f64);
    let scaled = multiplier.map_or(two_thirds, |m| (m * two_thirds as f64) as u64);
    let multiple = hp.u64(&["block_multiple_of"]).filter(|&m| m > 0).ok_or_else(|| {
        ConvertError::Config("`block_auto_adjust_ff_dim` without a positive `block_multiple_of`".into())
    })?;
    let rounded = scaled.div_ceil(multiple) * multiple;
    if multiplier.is_none() && rounded != scaled {
        return Err(ConvertError::Unmodelled {
            family: "lfm2".into(),
            key: "block_ffn_dim_multiplier".into(),
            value: "null: transformers leaves the width unrounded, the converter rounds it".into(),
        });
    }
    Ok(rounded)
}
