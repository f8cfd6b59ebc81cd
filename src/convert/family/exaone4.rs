//! EXAONE 4: `Exaone4Model` in the converter. Post-norms after attention
//! and the feed-forward (no pre-norms), Q/K norms; LLaMA 3's `rope_freqs`
//! under "llama3" scaling; the vocabulary size; the sliding window and its
//! layer pattern when the config has one. llama.cpp slides only in the
//! 64-block model (the 32B), so a window on any other depth is refused.

use serde_json::{Value as Json, json};

use super::{Conversion, Generated, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{BLOCKS, Hparams, count_of, text_model_keys};
use crate::model::{Array, Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "exaone4",
    classes: &[("Exaone4ForCausalLM", "exaone4")],
    config: Modelled {
        reads: &["sliding_window", "sliding_window_pattern", "layer_types"],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: &[],
        pattern: Some(window_only_at_64_blocks),
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Bpe,
};

fn window_only_at_64_blocks(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let window = config.get("sliding_window").filter(|w| !w.is_null())?;
    let blocks = BLOCKS.iter().find_map(|k| config.get(*k));
    (blocks.and_then(Json::as_u64) != Some(64)).then(|| ("sliding_window", window.clone()))
}

/// `Exaone4Model.set_gguf_parameters`: the text model's keys, the
/// vocabulary size, then the window and which blocks slide.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    hp.put(keys, "vocab_size", hp.count(&["vocab_size"])?);
    let Some(window) = hp.value(&["sliding_window"]) else { return Ok(()) };
    hp.put(keys, "attention.sliding_window", Some(count_of("sliding_window", window)?));
    let blocks = hp.u64(BLOCKS).unwrap_or_default() as usize;
    let sliding: Vec<bool> = if let Some(types) = hp.value(&["layer_types"]).and_then(Json::as_array) {
        types.iter().map(|t| t.as_str() == Some("sliding_attention")).collect()
    } else {
        match hp.value(&["sliding_window_pattern"]) {
            // "LLLG": a letter a block, repeated.
            Some(Json::String(letters)) if !letters.is_empty() => {
                letters.chars().cycle().take(blocks).map(|c| c == 'L').collect()
            }
            Some(Json::Number(period)) => match period.as_u64() {
                Some(period) if period > 0 => (1..=blocks as u64).map(|i| i % period != 0).collect(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    };
    if sliding.len() == blocks {
        keys.set(&hp.key("attention.sliding_window_pattern"), Value::Array(Array::Bool(sliding)));
    }
    Ok(())
}
