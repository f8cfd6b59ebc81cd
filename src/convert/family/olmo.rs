//! OLMo (1): `OlmoModel` in the converter. LayerNorms without weights (no
//! norm tensors at all), Q/K weights permuted as LLaMA's, and a norm
//! epsilon the converter writes as 1e-5, as OLMo's LayerNorm has it.

use serde_json::json;

use super::{Conversion, Transform, Vocab};
use crate::convert::config::{LINEAR, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, f32_of, text_model_keys};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "olmo",
    classes: &[("OlmoForCausalLM", "olmo"), ("OLMoForCausalLM", "olmo")],
    config: Modelled {
        reads: &["clip_qkv"],
        defaults: || vec![("hidden_act", json!("silu")), ("attention_bias", json!(false))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR],
    },
    dropped: &[],
    transforms: &[Transform::PermuteQk],
    generated: &[],
    keys,
    vocab: Vocab::Bpe,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    hp.put(keys, "attention.layer_norm_epsilon", Some(Value::F32(1e-5)));
    hp.put(keys, "attention.clamp_kqv", hp.ckpt.config.get("clip_qkv").filter(|v| !v.is_null()).and_then(f32_of));
    Ok(())
}
