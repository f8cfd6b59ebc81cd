//! Granite MoE: `GraniteMoeModel` in the converter, Granite's keys and
//! LLaMA's layout with experts stored already stacked: each block's
//! `input_linear` (gate and up side by side per expert) split into the
//! gate and up `*_exps`.

use serde_json::{Value as Json, json};

use super::{Conversion, Fused, Generated, Piece, Transform, Vocab};
use crate::artifact::{RowRange, RowTransform};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::Hparams;
use crate::model::Metadata;

const EXPERT_INPUT: Fused = Fused { hf: "block_sparse_moe.input_linear", pieces: gate_and_up };

pub const CONVERSION: Conversion = Conversion {
    family: "granitemoe",
    classes: &[("GraniteMoeForCausalLM", "granitemoe")],
    config: Modelled {
        reads: &[
            "attention_multiplier",
            "embedding_multiplier",
            "residual_multiplier",
            "logits_scaling",
            "num_local_experts",
            "num_experts_per_tok",
        ],
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("attention_bias", json!(false)),
                ("position_embedding_type", json!("rope")),
            ]
        },
        window: &[],
        pattern: None,
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk, Transform::Fused(&[EXPERT_INPUT])],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

/// Each expert's `2 × intermediate_size` rows: the gate's first, then the up's.
fn gate_and_up(config: &Json) -> Result<Vec<Piece>, ConvertError> {
    let ff = config
        .get("intermediate_size")
        .and_then(Json::as_u64)
        .ok_or_else(|| ConvertError::Config("no `intermediate_size`".into()))? as usize;
    let half =
        |start| RowTransform { rows: Some(RowRange { group: 2 * ff, start, len: ff }), ..RowTransform::default() };
    Ok(vec![Piece::rows("blk.{N}.ffn_gate_exps", vec![half(0)]), Piece::rows("blk.{N}.ffn_up_exps", vec![half(ff)])])
}

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    super::granite::granite_keys(hp, keys)?;
    let shared = hp.value(&["shared_intermediate_size"]).filter(|v| v.as_u64().is_some_and(|n| n != 0));
    hp.put(
        keys,
        "expert_shared_feed_forward_length",
        shared.map(|_| hp.count(&["shared_intermediate_size"])).transpose()?.flatten(),
    );
    Ok(())
}
