//! Falcon: `FalconModel` in the converter. Its keys in an order of its own
//! (a context of 2048 and four times the width as feed-forward, whatever
//! the config says; the "jploski" tensor layout), and each block's fused
//! Q/K/V, stored KV group by KV group (the group's queries, then its key
//! and value), reordered into all queries, then all keys, then all values.

use serde_json::{Value as Json, json};

use super::{Conversion, Fused, Piece, Transform, Vocab};
use crate::artifact::{RowRange, RowTransform};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, file_type};
use crate::model::{Metadata, Value};

const QKV: Fused = Fused { hf: "self_attention.query_key_value", pieces: queries_keys_values };

pub const CONVERSION: Conversion = Conversion {
    family: "falcon",
    classes: &[("FalconForCausalLM", "falcon"), ("RWForCausalLM", "falcon")],
    config: Modelled {
        reads: &[
            "num_kv_heads",
            "n_head_kv",
            "layer_norm_epsilon",
            "multi_query",
            "new_decoder_architecture",
            "ffn_hidden_size",
        ],
        // llama.cpp's falcon: rotary embeddings, a parallel block, no biases, GELU.
        defaults: || {
            vec![
                ("alibi", json!(false)),
                ("parallel_attn", json!(true)),
                ("bias", json!(false)),
                ("activation", json!("gelu")),
                ("hidden_dropout", json!(0.0)),
                ("num_ln_in_parallel_attn", Json::Null),
            ]
        },
        window: &[],
        pattern: Some(as_the_file_says),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Fused(&[QKV])],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

fn heads(config: &Json) -> Result<(usize, usize, usize), ConvertError> {
    let number = |keys: &[&str]| keys.iter().find_map(|k| config.get(*k).and_then(Json::as_u64));
    let heads = number(&["num_attention_heads", "n_head"]).filter(|&n| n > 0);
    let kv = number(&["num_kv_heads", "n_head_kv"]).unwrap_or(1).max(1);
    match (heads, number(&["hidden_size"])) {
        (Some(heads), Some(width)) if width % heads == 0 && heads % kv == 0 => {
            Ok((heads as usize, kv as usize, (width / heads) as usize))
        }
        _ => Err(ConvertError::Config("`hidden_size`, `num_attention_heads` and `num_kv_heads` do not divide".into())),
    }
}

/// Each KV group holds its queries, then one key and one value head.
fn queries_keys_values(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let (heads, kv, head_dim) = heads(config)?;
    let per_group = heads / kv;
    let group = (per_group + 2) * head_dim;
    let run = |start, len| RowTransform { rows: Some(RowRange { group, start, len }), ..RowTransform::default() };
    let runs = vec![
        run(0, per_group * head_dim),
        run(per_group * head_dim, head_dim),
        run((per_group + 1) * head_dim, head_dim),
    ];
    Ok(vec![Piece::rows("blk.{N}.attn_qkv", runs)])
}

/// What the file cannot say: a feed-forward width of four times the
/// embedding (written so, whatever the config says), the rope base.
fn as_the_file_says(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64);
    if let (Some(ff), Some(width)) = (number("ffn_hidden_size"), number("hidden_size"))
        && ff != 4 * width
    {
        return Some(("ffn_hidden_size", config["ffn_hidden_size"].clone()));
    }
    // No rope base is written: llama.cpp's falcon runs 10000.
    config.get("rope_theta").filter(|v| v.as_f64() != Some(10000.0)).map(|v| ("rope_theta", v.clone()))
}

/// `FalconModel.set_gguf_parameters`.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let (heads, kv, _) = heads(&hp.ckpt.config)?;
    let width = hp.u64(&["hidden_size"]).ok_or_else(|| ConvertError::Config("no `hidden_size`".into()))?;
    hp.put(keys, "context_length", Some(Value::U32(2048)));
    hp.put(keys, "tensor_data_layout", Some(Value::string("jploski")));
    hp.put(keys, "embedding_length", Some(count_of("hidden_size", &json!(width))?));
    hp.put(keys, "feed_forward_length", Some(count_of("4 × hidden_size", &json!(4 * width))?));
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "attention.head_count", Some(count_of("num_attention_heads", &json!(heads))?));
    hp.put(keys, "attention.head_count_kv", Some(count_of("num_kv_heads", &json!(kv))?));
    let eps = hp.f32(&["layer_norm_epsilon"]).ok_or_else(|| ConvertError::Config("no `layer_norm_epsilon`".into()))?;
    hp.put(keys, "attention.layer_norm_epsilon", Some(eps));
    keys.set("general.file_type", file_type(hp.outtype));
    Ok(())
}
