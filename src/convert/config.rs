//! Which `config.json` keys each family's conversion models. A checkpoint
//! with any other key at a value other than its default is refused, naming
//! the key: a setting the GGUF file would silently lose (YaRN or LongRoPE
//! scaling, a sliding window the converter does not write, another
//! activation) makes a model that loads and computes the wrong thing.
//!
//! The lists follow what `convert_hf_to_gguf.py` reads for each family
//! (`docs/notes/convert-hf-reference.md`): a key it reads is modelled with
//! any value; a key it ignores is allowed at the value that makes ignoring
//! it right.

use serde_json::{Value as Json, json};

use super::checkpoint::Checkpoint;
use super::tensors::ConvertError;

/// Keys that never change what the file must say: bookkeeping, training
/// settings, token ids the tokenizer files give anyway.
const BOOKKEEPING: &[&str] = &[
    "_name_or_path",
    "architectures",
    "model_type",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "tie_word_embeddings",
];

/// Keys every family's conversion reads.
const COMMON: &[&str] = &[
    "vocab_size",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "head_dim",
];

/// Per family: the keys its conversion also reads, and keys it ignores with
/// the values at which ignoring them is right.
struct Modelled {
    family: &'static str,
    reads: &'static [&'static str],
    defaults: fn() -> Vec<(&'static str, Json)>,
    /// Sliding-window settings the conversion does not write: ignored while
    /// the window is off, refused when it is on.
    window: &'static [&'static str],
    /// The `rope_scaling` types the conversion writes (besides none).
    rope_types: &'static [&'static str],
}

const QWEN_WINDOW: &[&str] = &["use_sliding_window", "sliding_window", "max_window_layers", "layer_types"];

const FAMILIES: &[Modelled] = &[
    Modelled {
        family: "llama",
        reads: &[],
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("mlp_bias", json!(false)),
                ("attention_bias", json!(false)),
                ("pretraining_tp", json!(1)),
            ]
        },
        window: &["sliding_window"],
        rope_types: &["llama3", "linear"],
    },
    Modelled {
        family: "qwen2",
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: QWEN_WINDOW,
        rope_types: &["linear"],
    },
    Modelled {
        family: "qwen3",
        reads: &[],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
        window: QWEN_WINDOW,
        rope_types: &["linear"],
    },
    Modelled {
        family: "phi3",
        reads: &["original_max_position_embeddings", "partial_rotary_factor", "sliding_window"],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: &[],
        rope_types: &[],
    },
    Modelled {
        family: "gemma3",
        reads: &[
            "sliding_window",
            "_sliding_window_pattern",
            "sliding_window_pattern",
            "layer_types",
            "rope_local_base_freq",
            "final_logit_softcapping",
            "query_pre_attn_scalar",
        ],
        defaults: || {
            vec![
                ("hidden_activation", json!("gelu_pytorch_tanh")),
                ("attention_bias", json!(false)),
                ("attn_logit_softcapping", Json::Null),
                ("use_bidirectional_attention", json!(false)),
            ]
        },
        window: &[],
        rope_types: &["linear"],
    },
];

/// Refuses a checkpoint whose config sets what `family`'s conversion does
/// not model.
pub fn check_modelled(ckpt: &Checkpoint, family: &str) -> Result<(), ConvertError> {
    let Some(modelled) = FAMILIES.iter().find(|m| m.family == family) else { return Ok(()) };
    let Some(config) = ckpt.config.as_object() else { return Ok(()) };
    let defaults = (modelled.defaults)();
    let unmodelled = |key: &str, value: &Json| ConvertError::Unmodelled {
        family: family.to_owned(),
        key: key.to_owned(),
        value: shorten(value),
    };
    // A window the family's conversion does not write: name the key that
    // turns it on, not the window settings that follow from it.
    if window_is_on(config) && !modelled.window.is_empty() {
        let key = if config.contains_key("use_sliding_window") { "use_sliding_window" } else { "sliding_window" };
        return Err(unmodelled(key, &config[key]));
    }
    for (key, value) in config {
        let known = BOOKKEEPING.contains(&key.as_str())
            || COMMON.contains(&key.as_str())
            || modelled.reads.contains(&key.as_str())
            || modelled.window.contains(&key.as_str());
        if known {
            continue;
        }
        match defaults.iter().find(|(k, _)| k == key) {
            Some((_, default)) if default == value || value.is_null() => continue,
            _ => {}
        }
        return Err(unmodelled(key, value));
    }
    if let Some(scaling) = config.get("rope_scaling").filter(|v| !v.is_null()) {
        let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(Json::as_str).unwrap_or("?");
        if !modelled.rope_types.contains(&kind) {
            return Err(ConvertError::Unmodelled {
                family: family.to_owned(),
                key: format!("rope_scaling.rope_type = \"{kind}\""),
                value: shorten(scaling),
            });
        }
    }
    Ok(())
}

/// Whether the config turns a sliding window on (Qwen's flag; a window
/// size on its own means one for the other families).
fn window_is_on(config: &serde_json::Map<String, Json>) -> bool {
    match config.get("use_sliding_window") {
        Some(flag) => flag.as_bool() == Some(true),
        None => config.get("sliding_window").is_some_and(|v| !v.is_null()),
    }
}

fn shorten(value: &Json) -> String {
    crate::text::shorten(&value.to_string(), 80).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keys_matter_only_with_the_window_on() {
        let off = json!({"use_sliding_window": false, "sliding_window": 4096});
        assert!(!window_is_on(off.as_object().unwrap()));
        let on = json!({"use_sliding_window": true, "sliding_window": 4096});
        assert!(window_is_on(on.as_object().unwrap()));
        let mistral = json!({"sliding_window": 4096});
        assert!(window_is_on(mistral.as_object().unwrap()));
    }
}
