//! Arcee (AFM): `ArceeModel` in the converter, LLaMA's conversion under an
//! architecture of its own: an MLP of up and down projections (ReLU²),
//! and the pooling a sentence-transformers checkpoint declares.

use serde_json::json;

use super::llama::llama_keys;
use super::{Conversion, Generated, Transform, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::Hparams;
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "arcee",
    classes: &[("ArceeForCausalLM", "arcee")],
    config: Modelled {
        reads: &[],
        defaults: || {
            vec![
                ("hidden_act", json!("relu2")),
                ("mlp_bias", json!(false)),
                ("attention_bias", json!(false)),
                ("pretraining_tp", json!(1)),
            ]
        },
        window: &["sliding_window"],
        pattern: None,
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    llama_keys(hp, keys, hp.u64(&["head_dim"]).or_else(|| hp.per_head()))?;
    hp.put(keys, "pooling_type", super::bert::pooling_type(hp.ckpt)?);
    Ok(())
}
