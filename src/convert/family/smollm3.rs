//! SmolLM3: `SmolLM3Model` in the converter, LLaMA's conversion under an
//! architecture of its own. llama.cpp leaves out the rotary embedding in
//! every fourth layer, which the file does not say: a config whose no-rope
//! layers differ from that is refused.

use serde_json::{Value as Json, json};

use super::llama::llama_keys;
use super::{Conversion, Generated, Transform, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::Hparams;
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "smollm3",
    classes: &[("SmolLM3ForCausalLM", "smollm3")],
    config: Modelled {
        reads: &["no_rope_layers", "no_rope_layer_interval", "layer_types"],
        defaults: || vec![("hidden_act", json!("silu")), ("mlp_bias", json!(false)), ("attention_bias", json!(false))],
        window: &["use_sliding_window", "sliding_window"],
        pattern: Some(no_rope_every_fourth),
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    llama_keys(hp, keys, hp.u64(&["head_dim"]))
}

/// llama.cpp's smollm3 has no rope in layers 4, 8, …, full attention in every layer.
fn no_rope_every_fourth(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    if config.get("no_rope_layer_interval").is_some_and(|v| v.as_u64() != Some(4)) {
        return Some(("no_rope_layer_interval", config["no_rope_layer_interval"].clone()));
    }
    if let Some(layers) = config.get("no_rope_layers").and_then(Json::as_array) {
        let expected = |i: usize| u64::from(!(i + 1).is_multiple_of(4));
        if layers.iter().enumerate().any(|(i, v)| v.as_u64() != Some(expected(i))) {
            return Some(("no_rope_layers", config["no_rope_layers"].clone()));
        }
    }
    let types = config.get("layer_types").and_then(Json::as_array);
    types
        .filter(|t| t.iter().any(|t| t.as_str() != Some("full_attention")))
        .map(|_| ("layer_types", config["layer_types"].clone()))
}
