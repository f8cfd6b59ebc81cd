//! OLMo 2 and OLMo 3: `Olmo2Model` in the converter. Post-norms around
//! both halves of a block and full-width Q/K norms; no rope permutation.
//! OLMo 3's sliding window and the blocks that slide (`layer_types`, else
//! all but every fourth).

use serde_json::json;

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, text_model_keys};
use crate::model::{Array, Metadata, Value};

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
    vocab: Vocab::Bpe,
};

pub const OLMO3: Conversion = Conversion {
    family: "olmo2",
    classes: &[("Olmo3ForCausalLM", "olmo2")],
    config: Modelled {
        reads: &["sliding_window", "layer_types"],
        defaults: CONVERSION.config.defaults,
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    keys: olmo3_keys,
    ..CONVERSION
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))
}

/// OLMo 2's keys, then the window and a flag a block: `layer_types`, or
/// all but every fourth block sliding.
fn olmo3_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    keys(hp, out)?;
    let Some(window) = hp.ckpt.config.get("sliding_window") else { return Ok(()) };
    hp.put(out, "attention.sliding_window", Some(count_of("sliding_window", window)?));
    let sliding: Vec<bool> = match hp.ckpt.config.get("layer_types") {
        Some(types) => types
            .as_array()
            .ok_or_else(|| ConvertError::Config("`layer_types` is not a list".into()))?
            .iter()
            .map(|t| t.as_str() == Some("sliding_attention"))
            .collect(),
        None => {
            let blocks = hp.u64(BLOCKS).ok_or_else(|| ConvertError::Config("no `num_hidden_layers`".into()))?;
            (1..=blocks).map(|i| i % 4 != 0).collect()
        }
    };
    hp.put(out, "attention.sliding_window_pattern", Some(Value::Array(Array::Bool(sliding))));
    Ok(())
}
