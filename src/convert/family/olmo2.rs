//! OLMo 2: `Olmo2Model` in the converter. Post-norms around both halves
//! of a block and full-width Q/K norms; no rope permutation.

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "olmo2",
    classes: &[("Olmo2ForCausalLM", "olmo2")],
    config: Modelled {
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::Bpe { default_pre: "dbrx" },
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}
