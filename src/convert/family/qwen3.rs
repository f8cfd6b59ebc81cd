//! Qwen3: `Qwen3Model` in the converter. Q/K norms; `head_dim` may differ
//! from `hidden_size / heads` (Qwen3Config defaults it to 128).

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, QWEN_WINDOW, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "qwen3",
    classes: &[("Qwen3ForCausalLM", "qwen3"), ("Qwen3Model", "qwen3")],
    config: Modelled {
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
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
    text_model_keys(hp, keys, Some(hp.u64(&["head_dim"]).unwrap_or(128)))
}
