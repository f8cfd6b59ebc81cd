//! InternLM2: `InternLM2Model` in the converter. LLaMA's blocks under names
//! of their own; each block's Q/K/V fused KV group by KV group (the group's
//! queries, then its key and value), split into Q, K and V with LLaMA's
//! rope permutation; its own SentencePiece reading (added tokens appended
//! or put in place, `<|im_end|>` as the end of a chat's turn).

use serde_json::{Value as Json, json};

use super::{Conversion, Fused, Piece, Transform, Vocab};
use crate::artifact::{RowRange, RowTransform};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

const QKV: Fused = Fused { hf: "attention.wqkv", pieces: queries_keys_values };

pub const CONVERSION: Conversion = Conversion {
    family: "internlm2",
    classes: &[("InternLM2ForCausalLM", "internlm2")],
    config: Modelled {
        // How its own code is loaded and run, not what it computes.
        reads: &["auto_map", "attn_implementation"],
        defaults: || vec![("hidden_act", json!("silu")), ("bias", json!(false)), ("pretraining_tp", json!(1))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::Fused(&[QKV])],
    generated: &[],
    keys,
    vocab: Vocab::InternLm2,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, None)
}

/// Q (permuted over the heads), K (over the KV heads) and V out of the KV
/// groups' rows.
fn queries_keys_values(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let number = |key: &str| config.get(key).and_then(Json::as_u64).filter(|&n| n > 0).map(|n| n as usize);
    let (Some(heads), Some(kv), Some(width)) =
        (number("num_attention_heads"), number("num_key_value_heads"), number("hidden_size"))
    else {
        return Err(ConvertError::Config("no `num_attention_heads`, `num_key_value_heads` or `hidden_size`".into()));
    };
    if heads % kv != 0 || width % heads != 0 {
        return Err(ConvertError::Config(
            "`hidden_size`, `num_attention_heads` and `num_key_value_heads` do not divide".into(),
        ));
    }
    let (per_group, head_dim) = (heads / kv, width / heads);
    let group = (per_group + 2) * head_dim;
    let run = |start, len, permute| RowTransform {
        rows: Some(RowRange { group, start, len }),
        permute_heads: permute,
        ..RowTransform::default()
    };
    Ok(vec![
        Piece::rows("blk.{N}.attn_q", vec![run(0, per_group * head_dim, Some(heads))]),
        Piece::rows("blk.{N}.attn_k", vec![run(per_group * head_dim, head_dim, Some(kv))]),
        Piece::rows("blk.{N}.attn_v", vec![run((per_group + 1) * head_dim, head_dim, None)]),
    ])
}
