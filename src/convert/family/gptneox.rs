//! GPT-NeoX (Pythia): `GPTNeoXModel` in the converter. Its keys in an order
//! of its own — no KV head count, no rope base and no `general.file_type`
//! at all — and each block's Q/K/V, stored head by head, reordered into
//! all Q rows, then all K, then all V.

use serde_json::{Value as Json, json};

use super::{Conversion, Fused, Piece, Transform, Vocab};
use crate::artifact::{RowRange, RowTransform};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of};
use crate::model::{Metadata, Value};

const QKV: Fused = Fused { hf: "attention.query_key_value", pieces: qkv_by_projection };

pub const CONVERSION: Conversion = Conversion {
    family: "gptneox",
    classes: &[("GPTNeoXForCausalLM", "gptneox")],
    config: Modelled {
        reads: &["rotary_pct", "partial_rotary_factor", "use_parallel_residual", "layer_norm_eps", "rotary_emb_base"],
        defaults: || {
            vec![
                ("hidden_act", json!("gelu")),
                ("attention_bias", json!(true)),
                ("hidden_dropout", json!(0.0)),
                ("classifier_dropout", json!(0.1)),
            ]
        },
        window: &[],
        pattern: Some(default_rope_base),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Fused(&[QKV])],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// The rows of head `h` are its Q, K and V (`head_dim` each): every
/// head's Q first, then the K, then the V.
fn qkv_by_projection(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let head_dim = per_head(config)?;
    let run = |part: usize| RowTransform {
        rows: Some(RowRange { group: 3 * head_dim, start: part * head_dim, len: head_dim }),
        ..RowTransform::default()
    };
    Ok(vec![Piece::rows("blk.{N}.attn_qkv", vec![run(0), run(1), run(2)])])
}

fn per_head(config: &Json) -> Result<usize, ConvertError> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64);
    let heads = number("num_attention_heads").filter(|&n| n > 0);
    match (number("hidden_size"), heads) {
        (Some(width), Some(heads)) if width % heads == 0 => Ok((width / heads) as usize),
        _ => Err(ConvertError::Config("`hidden_size` is not a multiple of `num_attention_heads`".into())),
    }
}

/// The file has no rope base: llama.cpp's gptneox runs 10000.
fn default_rope_base(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    ["rope_theta", "rotary_emb_base"]
        .into_iter()
        .find_map(|key| config.get(key).filter(|v| v.as_f64() != Some(10000.0)).map(|v| (key, v.clone())))
}

/// `GPTNeoXModel.set_gguf_parameters`.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    let required = |name: &'static str| -> Result<&Json, ConvertError> {
        hp.ckpt.config.get(name).ok_or_else(|| ConvertError::Config(format!("no `{name}`")))
    };
    hp.put(keys, "context_length", Some(count_of("max_position_embeddings", required("max_position_embeddings")?)?));
    hp.put(keys, "embedding_length", Some(count_of("hidden_size", required("hidden_size")?)?));
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "feed_forward_length", Some(count_of("intermediate_size", required("intermediate_size")?)?));
    let rotary = required("rotary_pct")?.as_f64().unwrap_or_default();
    let rotary = (rotary * per_head(&hp.ckpt.config)? as f64) as u64;
    hp.put(keys, "rope.dimension_count", Some(count_of("rotary dimensions", &json!(rotary))?));
    hp.put(keys, "attention.head_count", Some(count_of("num_attention_heads", required("num_attention_heads")?)?));
    let parallel = hp.ckpt.config.get("use_parallel_residual").and_then(Json::as_bool).unwrap_or(true);
    hp.put(keys, "use_parallel_residual", Some(Value::Bool(parallel)));
    hp.put(keys, "attention.layer_norm_epsilon", hp.f32(&["layer_norm_eps"]));
    Ok(())
}
