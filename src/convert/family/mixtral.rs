//! Mixtral: `LlamaModel` in the converter, written as LLaMA. Each block's
//! experts (w1, w2, w3 per expert) stacked into gate, down and up
//! `*_exps` tensors; the router kept F32.

use serde_json::json;

use super::llama::llama_keys;
use super::{Conversion, Experts, Generated, Transform, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::Hparams;
use crate::model::Metadata;

const EXPERTS: Experts = Experts {
    pattern: "model.layers.{N}.block_sparse_moe.experts.{E}.{W}.weight",
    projections: &[("w1", "blk.{N}.ffn_gate_exps"), ("w2", "blk.{N}.ffn_down_exps"), ("w3", "blk.{N}.ffn_up_exps")],
    count: &["num_local_experts"],
};

pub const CONVERSION: Conversion = Conversion {
    family: "mixtral",
    classes: &[("MixtralForCausalLM", "llama")],
    config: Modelled {
        reads: &["num_local_experts", "num_experts_per_tok"],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: &["sliding_window"],
        pattern: None,
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk, Transform::StackExperts(&EXPERTS)],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    // MixtralConfig leaves head_dim unset.
    llama_keys(hp, keys, hp.u64(&["head_dim"]))
}
