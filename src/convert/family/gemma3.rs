//! Gemma 3 (text): `Gemma3Model` in the converter. Norm weights stored as
//! offsets from one, the embedding padded past `vocab_size` and cut back,
//! a local rope base and a sliding window in a period of six layers.

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::{LINEAR, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "gemma3",
    classes: &[("Gemma3ForCausalLM", "gemma3")],
    config: Modelled {
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
        pattern: None,
        rope_scalings: &[LINEAR],
    },
    dropped: &[],
    transforms: &[Transform::NormPlusOne, Transform::CutEmbeddingToVocab],
    generated: &[],
    keys,
    vocab: Vocab::Gemma { end_of_turn: None },
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    let softcap = hp.value(&["final_logit_softcapping"]).filter(|v| v.as_f64().is_some_and(|x| x != 0.0));
    hp.put(keys, "final_logit_softcapping", softcap.and_then(crate::convert::hparams::f32_of));
    if hp.u64(&["sliding_window_pattern"]) != Some(1) {
        hp.put(keys, "attention.sliding_window", hp.count(&["sliding_window"])?);
    }
    Ok(())
}
