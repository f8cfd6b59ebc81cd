//! Seed-OSS: `SeedOssModel` in the converter, the text model's conversion
//! as it is: LLaMA's names with Q/K/V biases and `head_dim` apart from the
//! heads' width, no rope permutation.

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "seed_oss",
    classes: &[("SeedOssForCausalLM", "seed_oss")],
    config: Modelled {
        reads: &["attention_bias"],
        // llama.cpp's seed_oss: no output-projection or MLP biases.
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("attention_out_bias", json!(false)),
                ("mlp_bias", json!(false)),
                ("pretraining_tp", json!(1)),
            ]
        },
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}
