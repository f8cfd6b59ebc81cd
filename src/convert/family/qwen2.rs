//! Qwen2 and Qwen2.5: `Qwen2Model` in the converter. Q/K/V biases; a
//! sliding window only where `use_sliding_window` turns it on (refused).

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, QWEN_WINDOW, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "qwen2",
    classes: &[("Qwen2ForCausalLM", "qwen2"), ("Qwen2Model", "qwen2")],
    config: Modelled {
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: QWEN_WINDOW,
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::SentencePieceOrBpe,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}
