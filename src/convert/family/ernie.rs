//! ERNIE 4.5 (dense): `Ernie4_5Model` in the converter. The text model's
//! keys (its `head_dim` always set), a SentencePiece vocabulary with the
//! space prefix `tokenizer_config.json` gives after it.

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "ernie4_5",
    classes: &[("Ernie4_5ForCausalLM", "ernie4_5"), ("Ernie4_5_ForCausalLM", "ernie4_5")],
    config: Modelled {
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu")), ("use_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::SentencePieceThenSpacePrefix,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}
