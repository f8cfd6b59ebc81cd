//! StarCoder 2: `StarCoder2Model` in the converter (the text model's keys
//! only). LayerNorms with biases, biased projections, a GELU MLP.

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "starcoder2",
    classes: &[("Starcoder2ForCausalLM", "starcoder2")],
    config: Modelled {
        reads: &["norm_epsilon"],
        // llama.cpp's starcoder2 needs every bias.
        defaults: || vec![("hidden_act", json!("gelu_pytorch_tanh")), ("use_bias", json!(true))],
        window: &["sliding_window"],
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
