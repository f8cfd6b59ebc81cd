//! OLMoE: `OlmoeModel` in the converter. Experts stacked as Qwen's (down,
//! gate, up), full-width Q/K norms, and an RMS epsilon the converter
//! writes as 1e-5 whatever the config says.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "olmoe",
    classes: &[("OlmoeForCausalLM", "olmoe")],
    config: Modelled {
        reads: &["num_experts", "num_experts_per_tok"],
        defaults: || {
            vec![
                ("hidden_act", json!("silu")),
                ("attention_bias", json!(false)),
                // llama.cpp's olmoe neither clamps Q/K/V nor renormalizes the experts' weights.
                ("clip_qkv", Json::Null),
                ("norm_topk_prob", json!(false)),
            ]
        },
        window: &[],
        pattern: Some(epsilon_as_written),
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[Transform::StackExperts(&super::qwen_moe::EXPERTS)],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

/// The file says 1e-5 whatever the config says (`OlmoeModel.set_gguf_parameters`):
/// a model normalized with another epsilon would not be the one converted.
fn epsilon_as_written(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let eps = config.get("rms_norm_eps")?;
    (eps.as_f64() != Some(1e-5)).then(|| ("rms_norm_eps", eps.clone()))
}

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    // Overwritten in place: the key keeps its place.
    hp.put(keys, "attention.layer_norm_rms_epsilon", Some(Value::F32(1e-5)));
    Ok(())
}
