//! Which `config.json` keys each family's conversion models. A checkpoint
//! with any other key at a value other than its default is refused, naming
//! the key: a setting the GGUF file would silently lose (YaRN's `mscale`,
//! a sliding window the converter does not write, another activation)
//! makes a model that loads and computes the wrong thing.
//!
//! The lists follow what `convert_hf_to_gguf.py` reads for each family
//! (`docs/notes/convert-hf-reference.md`, and for `rope_scaling`
//! `docs/notes/rope-scaling-reference.md`): a key it reads is modelled with
//! any value; a key it ignores is allowed at the value that makes ignoring
//! it right.

use serde_json::{Value as Json, json};

use super::checkpoint::Checkpoint;
use super::error::ConvertError;
use super::family::Conversion;

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
    "attn_pdrop",
    "embd_pdrop",
    "resid_pdrop",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "tie_word_embeddings",
    // Training only: dropout, router losses.
    "attention_probs_dropout_prob",
    "hidden_dropout_prob",
    "classifier_dropout",
    "dropout",
    "qa_dropout",
    "seq_classif_dropout",
    // The tying of a masked-LM head the converter leaves out (DistilBERT's).
    "tie_weights_",
    "embedding_dropout",
    "residual_dropout",
    "output_router_logits",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "aux_loss_alpha",
    "seq_aux",
    // Parallelism only: how many devices share the experts.
    "ep_size",
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
    // Not `rope_parameters`: the converter prefers it to `rope_scaling`,
    // but transformers 4.57 ignores it, so the file would disagree with the model.
    "rope_scaling",
    "head_dim",
    // An FP8 checkpoint's: checked whole by `fp8::Fp8::of`.
    "quantization_config",
];

/// Per family: the keys its conversion also reads, and keys it ignores with
/// the values at which ignoring them is right.
pub struct Modelled {
    pub reads: &'static [&'static str],
    pub defaults: fn() -> Vec<(&'static str, Json)>,
    /// Sliding-window settings the conversion does not write: ignored while
    /// the window is off, refused when it is on.
    pub window: &'static [&'static str],
    /// The `rope_scaling` kinds the conversion writes (besides none).
    pub rope_scalings: &'static [RopeScaling],
    /// A check of what one key alone cannot say (a layer pattern llama.cpp
    /// assumes): the key and value it refuses, if any.
    pub pattern: Option<PatternCheck>,
}

/// A family's check of a whole config: the key and value it refuses.
pub type PatternCheck = fn(&serde_json::Map<String, Json>) -> Option<(&'static str, Json)>;

/// A `rope_scaling` kind: the values of its type key, the keys of the dict
/// the conversion reads (any value), and keys only one side reads, allowed
/// at the value at which the file and the Hugging Face model agree.
pub struct RopeScaling {
    kinds: &'static [&'static str],
    reads: &'static [&'static str],
    defaults: fn() -> Vec<(&'static str, Json)>,
}

pub const LINEAR: RopeScaling =
    RopeScaling { kinds: &["linear"], reads: &["rope_type", "type", "factor"], defaults: Vec::new };

pub const LLAMA3: RopeScaling = RopeScaling {
    kinds: &["llama3"],
    reads: &["rope_type", "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"],
    defaults: Vec::new,
};

/// Transformers also reads `mscale`, `mscale_all_dim` and `truncate`, which
/// the file cannot carry; the converter also writes `extrapolation_factor`
/// and `attn_factor`, which transformers ignores.
pub const YARN: RopeScaling = RopeScaling {
    kinds: &["yarn"],
    reads: &[
        "rope_type",
        "type",
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
    ],
    defaults: || [yarn_agreeing(), vec![("truncate", json!(true))]].concat(),
};

/// YaRN keys only one side reads, at the values where the file and the
/// Hugging Face model agree (`truncate` aside).
fn yarn_agreeing() -> Vec<(&'static str, Json)> {
    vec![
        ("mscale", Json::Null),
        ("mscale_all_dim", Json::Null),
        ("extrapolation_factor", json!(1.0)),
        ("attn_factor", Json::Null),
    ]
}

/// GPT-OSS's YaRN, published with `truncate: false` (transformers then
/// leaves the correction range unrounded, where llama.cpp rounds it for
/// every model): the converter writes it all the same, and so does this
/// conversion, or GPT-OSS would not convert at all.
pub const GPT_OSS_YARN: RopeScaling = RopeScaling {
    kinds: &["yarn"],
    reads: &[
        "rope_type",
        "type",
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "truncate",
    ],
    defaults: yarn_agreeing,
};

/// DeepSeek's YaRN: the attention scale of `mscale_all_dim` (written as
/// the log multiplier), which llama.cpp reproduces only while it equals
/// `mscale` (the rotation then unscaled, as transformers computes it).
pub const DEEPSEEK_YARN: RopeScaling = RopeScaling {
    kinds: &["yarn"],
    reads: &[
        "rope_type",
        "type",
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
    ],
    defaults: || {
        vec![
            ("truncate", json!(true)),
            ("extrapolation_factor", json!(1.0)),
            ("attn_factor", Json::Null),
            ("attention_factor", Json::Null),
        ]
    },
};

/// Qwen2-VL's multi-section rope: no scaling (`mrope`, which transformers
/// rewrites to `default`), the rotary dimensions in sections for time,
/// height and width.
pub const MROPE: RopeScaling =
    RopeScaling { kinds: &["mrope", "default"], reads: &["type", "rope_type", "mrope_section"], defaults: Vec::new };

/// Phi-3's LongRoPE in the one shape `Phi3Config` accepts: exactly `type`
/// (`su` and `yarn` are old names it rewrites to `longrope`), `long_factor`
/// and `short_factor`.
pub const LONGROPE: RopeScaling = RopeScaling {
    kinds: &["su", "yarn", "longrope"],
    reads: &["type", "long_factor", "short_factor"],
    defaults: Vec::new,
};

/// Qwen's sliding-window settings, off unless `use_sliding_window`.
pub const QWEN_WINDOW: &[&str] = &["use_sliding_window", "sliding_window", "max_window_layers", "layer_types"];

/// The first key of `config` that is neither bookkeeping nor `modelled`,
/// nor unset or at its value in `defaults`: what the conversion would lose.
pub(super) fn first_unmodelled<'c>(
    config: &'c serde_json::Map<String, Json>,
    modelled: impl Fn(&str) -> bool,
    defaults: &[(&str, Json)],
) -> Option<(&'c str, &'c Json)> {
    config.iter().map(|(key, value)| (key.as_str(), value)).find(|&(key, value)| {
        let at_default =
            || defaults.iter().any(|(k, default)| *k == key && (same_value(default, value) || value.is_null()));
        !(BOOKKEEPING.contains(&key) || modelled(key) || at_default())
    })
}

/// Refuses a checkpoint whose config sets what `conversion` does not model.
pub fn check_modelled(ckpt: &Checkpoint, conversion: &Conversion) -> Result<(), ConvertError> {
    let (modelled, family) = (&conversion.config, conversion.family);
    super::fp8::Fp8::of(&ckpt.config)?;
    if super::mxfp4::is_mxfp4(&ckpt.config) && conversion.mxfp4_splits().is_empty() {
        return Err(unmodelled(family, "quantization_config.quant_method", &json!("mxfp4")));
    }
    let Some(config) = ckpt.config.as_object() else { return Ok(()) };
    let defaults = (modelled.defaults)();
    // A window the family's conversion does not write: name the key that
    // turns it on, not the window settings that follow from it.
    if window_is_on(config) && !modelled.window.is_empty() {
        let key = if config.contains_key("use_sliding_window") { "use_sliding_window" } else { "sliding_window" };
        return Err(unmodelled(family, key, &config[key]));
    }
    if let Some((key, value)) = modelled.pattern.and_then(|check| check(config)) {
        return Err(unmodelled(family, key, &value));
    }
    // A multimodal model's tower and its settings are its mmproj conversion's.
    let tower = super::mmproj::tower_of(ckpt);
    let towers = |key: &str| {
        tower.is_some_and(|tower| ["text_config", "vision_config"].contains(&key) || tower.top_level.contains(&key))
    };
    let known = |key: &str| {
        towers(key) || COMMON.contains(&key) || modelled.reads.contains(&key) || modelled.window.contains(&key)
    };
    if let Some((key, value)) = first_unmodelled(config, known, &defaults) {
        return Err(unmodelled(family, key, value));
    }
    match config.get("rope_scaling").filter(|v| !v.is_null()) {
        Some(scaling) => check_rope_scaling(family, modelled, scaling),
        None => Ok(()),
    }
}

/// Refuses a `rope_scaling` of a kind the family's conversion does not
/// write, or with a key it does not model.
fn check_rope_scaling(family: &str, modelled: &Modelled, scaling: &Json) -> Result<(), ConvertError> {
    let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(Json::as_str).unwrap_or("?");
    let Some(rope) = modelled.rope_scalings.iter().find(|r| r.kinds.contains(&kind)) else {
        return Err(unmodelled(family, &format!("rope_scaling.rope_type = \"{kind}\""), scaling));
    };
    let defaults = (rope.defaults)();
    for (key, value) in scaling.as_object().into_iter().flatten() {
        let at_default = || defaults.iter().any(|(k, default)| k == key && same_value(default, value));
        if !rope.reads.contains(&key.as_str()) && !at_default() {
            return Err(unmodelled(family, &format!("rope_scaling.{key}"), value));
        }
    }
    Ok(())
}

/// Equal JSON values, numbers by value (`1` is `1.0`).
fn same_value(a: &Json, b: &Json) -> bool {
    a == b || a.as_f64().is_some_and(|x| b.as_f64() == Some(x))
}

fn unmodelled(family: &str, key: &str, value: &Json) -> ConvertError {
    ConvertError::Unmodelled { family: family.to_owned(), key: key.to_owned(), value: shorten(value) }
}

/// Whether the config turns a sliding window on (Qwen's flag; a window
/// size on its own means one for the other families).
fn window_is_on(config: &serde_json::Map<String, Json>) -> bool {
    match config.get("use_sliding_window") {
        Some(flag) => flag.as_bool() == Some(true),
        None => config.get("sliding_window").is_some_and(|v| !v.is_null()),
    }
}

pub(super) fn shorten(value: &Json) -> String {
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

    #[test]
    fn rope_scaling_is_checked_key_by_key() {
        let refused = |family: &str, scaling: &Json| {
            let conversion = super::super::family::CONVERSIONS.iter().find(|c| c.family == family).unwrap();
            check_rope_scaling(family, &conversion.config, scaling).err().map(|e| e.to_string()).unwrap_or_default()
        };
        let yarn =
            json!({"rope_type": "yarn", "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192});
        assert_eq!(refused("llama", &yarn), "");
        assert!(refused("gemma3", &yarn).contains("`rope_scaling.rope_type = \"yarn\"`"));
        // Keys only one side reads: at the value where both agree, else refused by name.
        let with = |key: &str, value: Json| {
            let mut scaling = yarn.clone();
            scaling[key] = value;
            refused("qwen3", &scaling)
        };
        assert_eq!(with("truncate", json!(true)), "");
        assert_eq!(with("extrapolation_factor", json!(1)), "");
        assert_eq!(with("mscale", Json::Null), "");
        assert!(with("mscale", json!(1.0)).contains("`rope_scaling.mscale` (1.0)"));
        assert!(with("mscale_all_dim", json!(0.0)).contains("`rope_scaling.mscale_all_dim` (0.0)"));
        assert!(with("truncate", json!(false)).contains("`rope_scaling.truncate` (false)"));
        assert!(with("extrapolation_factor", json!(2.0)).contains("`rope_scaling.extrapolation_factor` (2.0)"));
        assert!(with("attn_factor", json!(0.8)).contains("`rope_scaling.attn_factor` (0.8)"));
        // LongRoPE: Phi-3's, in the shape Phi3Config accepts, and nobody else's.
        let longrope = json!({"type": "su", "long_factor": [1.0], "short_factor": [1.0]});
        assert_eq!(refused("phi3", &longrope), "");
        assert!(refused("llama", &longrope).contains("`rope_scaling.rope_type = \"su\"`"));
        let spelled = json!({"rope_type": "longrope", "long_factor": [1.0], "short_factor": [1.0]});
        assert!(refused("phi3", &spelled).contains("`rope_scaling.rope_type` (\"longrope\")"));
    }
}
