//! Phi-3 and Phi-4 mini: `Phi3MiniModel` in the converter. Fused QKV and
//! gate-up projections, a partial rotary dimension, LongRoPE factors
//! generated as tensors; its keys in an order of its own.

use serde_json::json;

use super::{Conversion, Generated, Vocab};
use crate::convert::config::{LONGROPE, Modelled};
use crate::convert::error::ConvertError;
use crate::convert::hparams::{
    BLOCKS, EMBEDDING, FEED_FORWARD, HEADS, Hparams, KV_HEADS, RMS_EPSILON, count_of, f32_of, file_type,
};
use crate::convert::rope::phi3_rope_dims;
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "phi3",
    classes: &[("Phi3ForCausalLM", "phi3")],
    config: Modelled {
        reads: &["original_max_position_embeddings", "partial_rotary_factor", "sliding_window"],
        defaults: || vec![("hidden_act", json!("silu"))],
        window: &[],
        pattern: None,
        rope_scalings: &[LONGROPE],
    },
    dropped: &[],
    transforms: &[],
    generated: &[Generated::LongRopeFactors],
    keys,
    vocab: Vocab::Phi3,
};

fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    hp.put(keys, "context_length", hp.count(&["n_positions", "max_position_embeddings"])?);
    let original = hp.rope.get("original_max_position_embeddings");
    let original = original.map(|v| count_of("original_max_position_embeddings", v)).transpose()?;
    hp.put(keys, "rope.scaling.original_context_length", original);
    hp.put(keys, "embedding_length", hp.count(EMBEDDING)?);
    hp.put(keys, "feed_forward_length", hp.count(FEED_FORWARD)?);
    hp.put(keys, "block_count", hp.count(BLOCKS)?);
    hp.put(keys, "attention.head_count", hp.count(HEADS)?);
    hp.put(keys, "attention.head_count_kv", hp.count(KV_HEADS)?);
    hp.put(keys, "attention.layer_norm_rms_epsilon", hp.f32(RMS_EPSILON));
    let rotary = phi3_rope_dims(hp.ckpt, &hp.rope)?;
    hp.put(keys, "rope.dimension_count", Some(count_of("rope dimensions", &json!(rotary))?));
    hp.put(keys, "rope.freq_base", hp.rope.get("rope_theta").and_then(f32_of));
    keys.set("general.file_type", file_type(hp.outtype));
    let window = hp.count(&["sliding_window"])?.unwrap_or(Value::U32(0));
    hp.put(keys, "attention.sliding_window", Some(window));
    Ok(())
}
