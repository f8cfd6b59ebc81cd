//! Granite (3.x dense): `GraniteModel` in the converter, LLaMA's layout
//! and keys (without `head_dim`, which it drops) plus its four
//! multipliers.

use serde_json::json;

use super::llama::llama_keys;
use super::{Conversion, Generated, Transform, Vocab};
use crate::convert::config::{LINEAR, LLAMA3, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::Hparams;
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "granite",
    classes: &[("GraniteForCausalLM", "granite")],
    config: Modelled {
        reads: &["attention_multiplier", "embedding_multiplier", "residual_multiplier", "logits_scaling"],
        defaults: || vec![("hidden_act", json!("silu")), ("mlp_bias", json!(false)), ("attention_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[LLAMA3, LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk],
    generated: &[Generated::Llama3RopeFreqs],
    keys,
    vocab: Vocab::Llama,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    granite_keys(hp, keys)
}

/// `GraniteModel.set_gguf_parameters`, which Granite MoE extends: LLaMA's
/// keys without `head_dim`, then each multiplier that is set.
pub(super) fn granite_keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    llama_keys(hp, keys, None)?;
    // Each only when set and not zero, as the converter's `if x := …` tests.
    let multipliers = [
        ("attention.scale", "attention_multiplier"),
        ("embedding_scale", "embedding_multiplier"),
        ("residual_scale", "residual_multiplier"),
        ("logit_scale", "logits_scaling"),
    ];
    for (name, config_key) in multipliers {
        let value = hp.value(&[config_key]).filter(|v| v.as_f64().is_some_and(|x| x != 0.0));
        hp.put(keys, name, value.and_then(crate::convert::hparams::f32_of));
    }
    Ok(())
}
