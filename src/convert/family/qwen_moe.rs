//! Qwen2-MoE (Qwen1.5-MoE) and Qwen3-MoE: `Qwen2MoeModel` and
//! `Qwen3MoeModel` in the converter. Each block's experts stacked (down,
//! gate, up, in that order), the router kept F32; Qwen2-MoE's shared
//! expert and its gate, Qwen3-MoE's Q/K norms.

use serde_json::json;

use super::{Conversion, Experts, Transform, Vocab};
use crate::convert::config::{LINEAR, Modelled, QWEN_WINDOW, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub(super) const EXPERTS: Experts = Experts {
    pattern: "model.layers.{N}.mlp.experts.{E}.{W}.weight",
    projections: &[
        ("down_proj", "blk.{N}.ffn_down_exps"),
        ("gate_proj", "blk.{N}.ffn_gate_exps"),
        ("up_proj", "blk.{N}.ffn_up_exps"),
    ],
    count: &["num_local_experts", "num_experts"],
};

/// Every block a mixture of experts: llama.cpp has no dense layers in these.
const EVERY_BLOCK: &[&str] = &["decoder_sparse_step", "mlp_only_layers"];

pub const QWEN2_MOE: Conversion = Conversion {
    family: "qwen2moe",
    classes: &[("Qwen2MoeForCausalLM", "qwen2moe")],
    config: Modelled {
        reads: &["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"],
        // llama.cpp's qwen2moe does not renormalize the chosen experts' weights.
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("norm_topk_prob", json!(false)),
                ("qkv_bias", json!(true)),
                (EVERY_BLOCK[0], json!(1)),
                (EVERY_BLOCK[1], json!([])),
            ]
        },
        window: QWEN_WINDOW,
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::StackExperts(&EXPERTS)],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

pub const QWEN3_MOE: Conversion = Conversion {
    family: "qwen3moe",
    classes: &[("Qwen3MoeForCausalLM", "qwen3moe")],
    config: Modelled {
        reads: &["num_experts", "num_experts_per_tok", "moe_intermediate_size"],
        // llama.cpp's qwen3moe always renormalizes the chosen experts' weights.
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("attention_bias", json!(false)),
                ("norm_topk_prob", json!(true)),
                (EVERY_BLOCK[0], json!(1)),
                (EVERY_BLOCK[1], json!([])),
            ]
        },
        window: QWEN_WINDOW,
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::StackExperts(&EXPERTS)],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// The text-model keys, then the experts' widths (`Qwen2MoeModel.set_gguf_parameters`).
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    hp.put(keys, "expert_feed_forward_length", hp.count(&["moe_intermediate_size"])?);
    hp.put(keys, "expert_shared_feed_forward_length", hp.count(&["shared_expert_intermediate_size"])?);
    Ok(())
}
