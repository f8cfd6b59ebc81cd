//! GLM-4 (0414): `Glm4Model` in the converter. LLaMA's names with
//! post-norms after attention and the feed-forward, the gate and up
//! projections kept fused as `ffn_up`, Q/K/V biases, rope over part of each
//! head (half unless the config says otherwise) in the checkpoint's own
//! layout; a byte-level BPE vocabulary whose end, end-of-turn, unknown and
//! beginning ids default to its added `<|endoftext|>` and `<|user|>`.

use serde_json::{Value as Json, json};

use super::{Conversion, Vocab};
use crate::convert::config::{LINEAR, Modelled, YARN};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, count_of, text_model_keys};
use crate::model::Metadata;

pub const CONVERSION: Conversion = Conversion {
    family: "glm4",
    classes: &[("Glm4ForCausalLM", "glm4")],
    config: Modelled {
        reads: &["partial_rotary_factor", "attention_bias"],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: &[],
        pattern: None,
        rope_scalings: &[LINEAR, YARN],
    },
    dropped: &[],
    transforms: &[],
    generated: &[],
    keys,
    vocab: Vocab::Glm4,
};

/// `Glm4Model.set_gguf_parameters`: the text model's keys, then the rotary
/// dimensions, after `general.file_type`.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, hp.u64(&["head_dim"]))?;
    let head = hp.u64(&["head_dim"]).or(hp.per_head()).unwrap_or_default();
    let fraction = hp.rope.get("partial_rotary_factor").and_then(Json::as_f64).unwrap_or(0.5);
    let rotary = (head as f64 * fraction) as u64;
    hp.put(keys, "rope.dimension_count", Some(count_of("rotary dimensions", &json!(rotary))?));
    Ok(())
}
