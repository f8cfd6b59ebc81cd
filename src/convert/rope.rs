//! RoPE scaling as `convert_hf_to_gguf.py` reads it: the rope dict it
//! resolves from the config, and Phi-3's LongRoPE (its attention factor and
//! its long and short factors). Reference: `docs/notes/rope-scaling-reference.md`.

use serde_json::{Map, Value as Json};

use super::checkpoint::Checkpoint;
use super::config::shorten;
use crate::text::Name;

/// A rope setting the converter would fail on or write wrongly, naming the
/// config key.
#[derive(Debug, thiserror::Error)]
pub enum RopeError {
    #[error("config.json: `{}` is missing; {needed_by} needs it", Name(.key))]
    Missing { key: String, needed_by: &'static str },
    #[error("config.json: `{}` ({value}) is not {expected}", Name(.key))]
    Invalid { key: String, value: String, expected: &'static str },
    #[error(
        "config.json: `{dict}.long_factor` has {long} entries and `{dict}.short_factor` {short}; LongRoPE needs half \
         the {rope_dims} rotary dimensions in each"
    )]
    FactorCount { dict: &'static str, long: usize, short: usize, rope_dims: u64 },
}

/// The converter's `rope_parameters` (`TextModel.__init__`): the config's
/// `rope_parameters` if it has the key, else its `rope_scaling` (null: no
/// keys), with the top-level settings it lacks mirrored in. Per-layer-type
/// dicts (`full_attention`, `sliding_attention`) are not modelled:
/// `config::check_modelled` refuses them.
#[derive(Clone)]
pub(super) struct RopeParameters {
    /// The config key the dict came from, to name its keys.
    source: &'static str,
    dict: Map<String, Json>,
    /// The keys mirrored in from the top level, named there.
    mirrored: Vec<&'static str>,
}

/// The top-level keys the converter mirrors into the dict when it lacks
/// them, each with the keys it looks for in turn.
const MIRRORED: &[(&str, &[&str])] = &[
    ("rope_theta", &["global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"]),
    ("partial_rotary_factor", &["partial_rotary_factor", "rope_pct", "rope_percent"]),
    ("original_max_position_embeddings", &["original_max_position_embeddings"]),
];

impl RopeParameters {
    pub(super) fn resolve(ckpt: &Checkpoint) -> RopeParameters {
        let source = if ckpt.config.get("rope_parameters").is_some() { "rope_parameters" } else { "rope_scaling" };
        let mut dict = ckpt.config.get(source).and_then(Json::as_object).cloned().unwrap_or_default();
        // The legacy spelling `type` names the kind when `rope_type` is absent.
        if !dict.contains_key("rope_type")
            && let Some(kind) = dict.get("type").filter(|v| !v.is_null()).cloned()
        {
            dict.insert("rope_type".into(), kind);
        }
        let mut mirrored = Vec::new();
        for &(key, top_level) in MIRRORED {
            if !dict.contains_key(key)
                && let Some(value) = ckpt.hparam(top_level).filter(|v| !v.is_null())
            {
                dict.insert(key.into(), value.clone());
                mirrored.push(key);
            }
        }
        RopeParameters { source, dict, mirrored }
    }

    /// A value of the dict; null counts as absent, as `dict.get` reads it.
    pub(super) fn get(&self, key: &str) -> Option<&Json> {
        self.dict.get(key).filter(|v| !v.is_null())
    }

    /// Whether the dict has `key`, even as null.
    pub(super) fn has(&self, key: &str) -> bool {
        self.dict.contains_key(key)
    }

    /// The scaling kind (`rope_type`, or the legacy `type`).
    pub(super) fn kind(&self) -> Option<&str> {
        self.get("rope_type").and_then(Json::as_str)
    }

    /// `key` as a number (Python's float), if set.
    fn f64(&self, key: &str) -> Result<Option<f64>, RopeError> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| self.invalid(key, v, "a number"))).transpose()
    }

    /// `key` as an f32, if set: JSON decimal → f64 → f32, both correctly
    /// rounded, as `struct.pack('<f', float)` stores it.
    pub(super) fn f32(&self, key: &str) -> Result<Option<f32>, RopeError> {
        Ok(self.f64(key)?.map(|x| x as f32))
    }

    /// `key` as an f32, which `needed_by` needs.
    pub(super) fn required_f32(&self, key: &str, needed_by: &'static str) -> Result<f32, RopeError> {
        self.f32(key)?.ok_or_else(|| self.missing(key, needed_by))
    }

    /// `key` as a u32 (`struct.pack('<I')` takes nothing else), which `needed_by` needs.
    pub(super) fn required_u32(&self, key: &str, needed_by: &'static str) -> Result<u32, RopeError> {
        let value = self.get(key).ok_or_else(|| self.missing(key, needed_by))?;
        value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| self.invalid(key, value, "an integer below 2^32"))
    }

    /// `key` as a list of f32s (each number correctly rounded, as
    /// `torch.tensor(list, dtype=float32)` makes them).
    fn f32_list(&self, key: &str, needed_by: &'static str) -> Result<Vec<f32>, RopeError> {
        let value = self.get(key).ok_or_else(|| self.missing(key, needed_by))?;
        let numbers = value.as_array().and_then(|items| items.iter().map(|v| v.as_f64().map(|x| x as f32)).collect());
        numbers.ok_or_else(|| self.invalid(key, value, "a list of numbers"))
    }

    /// The config key a dict key stands for: the top-level one the
    /// converter mirrored in, else the dict's own.
    fn name(&self, key: &str) -> String {
        if self.mirrored.contains(&key) { key.to_owned() } else { format!("{}.{key}", self.source) }
    }

    fn missing(&self, key: &str, needed_by: &'static str) -> RopeError {
        RopeError::Missing { key: self.name(key), needed_by }
    }

    fn invalid(&self, key: &str, value: &Json, expected: &'static str) -> RopeError {
        RopeError::Invalid { key: self.name(key), value: shorten(value), expected }
    }
}

/// Phi-3's LongRoPE: the attention factor (`{arch}.rope.scaling.attn_factor`)
/// and the per-frequency factors for long and short contexts.
pub(super) struct LongRope {
    pub attn_factor: f32,
    pub long: Vec<f32>,
    pub short: Vec<f32>,
}

const LONGROPE: &str = "LongRoPE scaling";

/// Phi-3's LongRoPE (`Phi3MiniModel.generate_extra_tensors`), or `None`
/// when the config sets no rope scaling. The kind (`su`, `yarn` or
/// `longrope`, all LongRoPE once transformers' `Phi3Config` has read them)
/// is checked by `config::check_modelled`.
pub(super) fn phi3_long_rope(ckpt: &Checkpoint) -> Result<Option<LongRope>, RopeError> {
    let rope = RopeParameters::resolve(ckpt);
    if rope.kind().is_none() {
        return Ok(None);
    }
    let original = rope.required_u32("original_max_position_embeddings", LONGROPE)?;
    let positions = hparam(ckpt, &["n_positions", "max_position_embeddings"], LONGROPE)?;
    let positions =
        positions.as_f64().ok_or_else(|| invalid_hparam("max_position_embeddings", positions, "a number"))?;
    let attn_factor = long_rope_attn_factor(positions, original)
        .ok_or_else(|| rope.invalid("original_max_position_embeddings", &Json::from(original), "above 1"))?;
    let long = rope.f32_list("long_factor", LONGROPE)?;
    let short = rope.f32_list("short_factor", LONGROPE)?;
    let rope_dims = phi3_rope_dims(ckpt, &rope)?;
    // The converter compares with rope_dims / 2 as a float: an odd count never matches.
    if long.len() != short.len() || (long.len() * 2) as u64 != rope_dims {
        return Err(RopeError::FactorCount { dict: rope.source, long: long.len(), short: short.len(), rope_dims });
    }
    Ok(Some(LongRope { attn_factor, long, short }))
}

/// `sqrt(1 + ln(s) / ln(original))` for the context scale
/// `s = positions / original` above 1, else 1; in f64, then rounded to f32
/// as the key stores it. `None` where the converter divides by zero.
fn long_rope_attn_factor(positions: f64, original: u32) -> Option<f32> {
    if original == 0 {
        return None;
    }
    let scale = positions / f64::from(original);
    if scale <= 1.0 {
        return Some(1.0);
    }
    if original == 1 {
        return None;
    }
    Some((1.0 + scale.ln() / f64::from(original).ln()).sqrt() as f32)
}

/// Phi-3's rotary dimension count:
/// `int(partial_rotary_factor · hidden_size) // num_attention_heads`.
pub(super) fn phi3_rope_dims(ckpt: &Checkpoint, rope: &RopeParameters) -> Result<u64, RopeError> {
    const NEEDED_BY: &str = "the rotary dimension count";
    let count = |keys: &[&str]| {
        let value = hparam(ckpt, keys, NEEDED_BY)?;
        value.as_u64().ok_or_else(|| invalid_hparam(keys[0], value, "an integer"))
    };
    let hidden = count(&["hidden_size", "n_embd"])?;
    let heads = count(&["num_attention_heads", "n_head"])?;
    let partial = rope.f64("partial_rotary_factor")?.unwrap_or(1.0);
    let rotated = (partial * hidden as f64) as u64;
    rotated.checked_div(heads).ok_or_else(|| invalid_hparam("num_attention_heads", &Json::from(0), "positive"))
}

/// The first of `keys` the config has (`find_hparam`), which `needed_by` needs.
fn hparam<'c>(ckpt: &'c Checkpoint, keys: &[&str], needed_by: &'static str) -> Result<&'c Json, RopeError> {
    ckpt.hparam(keys).filter(|v| !v.is_null()).ok_or_else(|| RopeError::Missing { key: keys[0].into(), needed_by })
}

fn invalid_hparam(key: &str, value: &Json, expected: &'static str) -> RopeError {
    RopeError::Invalid { key: key.into(), value: shorten(value), expected }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checkpoint(config: Json) -> Checkpoint {
        Checkpoint {
            dir: Default::default(),
            files: std::sync::Arc::new(crate::convert::OnDisk),
            repository: None,
            model_name: None,
            metadata_override: None,
            file_config: config.clone(),
            config,
            shards: Vec::new(),
        }
    }

    fn phi3(rope_scaling: Json) -> Checkpoint {
        checkpoint(json!({
            "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096, "rope_scaling": rope_scaling,
        }))
    }

    #[test]
    fn the_dict_is_resolved_as_the_converter_resolves_it() {
        let kind = |config: Json| RopeParameters::resolve(&checkpoint(config)).kind().map(str::to_owned);
        // rope_parameters wins even as null; rope_type wins over the legacy type.
        assert_eq!(kind(json!({"rope_parameters": null, "rope_scaling": {"rope_type": "linear"}})), None);
        assert_eq!(kind(json!({"rope_scaling": {"type": "yarn", "rope_type": "linear"}})).as_deref(), Some("linear"));
        assert_eq!(kind(json!({"rope_scaling": {"type": "yarn"}})).as_deref(), Some("yarn"));
        // Top-level settings fill in only what the dict lacks.
        let theta = |config: Json| RopeParameters::resolve(&checkpoint(config)).get("rope_theta").cloned();
        assert_eq!(theta(json!({"rope_scaling": null, "rope_theta": 5.0})), Some(json!(5.0)));
        assert_eq!(theta(json!({"rope_scaling": {"rope_theta": 7.0}, "rope_theta": 5.0})), Some(json!(7.0)));
    }

    #[test]
    fn the_attention_factor_is_the_converters_f64_rounded_once() {
        // sec. 1.2 of docs/notes/rope-scaling-reference.md
        let bits = |positions: f64| long_rope_attn_factor(positions, 4096).map(f32::to_bits);
        assert_eq!(bits(131072.0), Some(0x3f98_59b9));
        assert_eq!(bits(32768.0), Some(0x3f8f_1bbd));
        assert_eq!(bits(8192.0), Some(0x3f85_3a04));
        assert_eq!(bits(4096.0), Some(1f32.to_bits()));
        // Where Python divides by zero.
        assert_eq!(long_rope_attn_factor(4096.0, 1), None);
        assert_eq!(long_rope_attn_factor(4096.0, 0), None);
    }

    #[test]
    fn long_rope_factors_round_each_number_to_f32() {
        let long = json!([1.0, 1.0000000596046448, 1.0000001788139343, 40, 1.0, 1.0, 1.0, 1.0]);
        let scaling = json!({"type": "longrope", "long_factor": long, "short_factor": vec![1; 8]});
        let rope = phi3_long_rope(&phi3(scaling)).unwrap().unwrap();
        assert_eq!(rope.attn_factor.to_bits(), 0x3f98_59b9);
        // 1 + 2^-24 ties to even (1.0); 1 + 3·2^-24 ties up.
        assert_eq!(rope.long[..4], [1.0, 1.0, 1.0 + 2f32.powi(-22), 40.0]);
        assert_eq!(rope.short, [1.0; 8]);
        assert!(phi3_long_rope(&phi3(Json::Null)).unwrap().is_none());
    }

    #[test]
    fn long_rope_settings_the_converter_fails_on_are_errors_naming_the_key() {
        let message = |scaling: Json| phi3_long_rope(&phi3(scaling)).err().map(|e| e.to_string()).unwrap();
        let short_missing = message(json!({"type": "longrope", "long_factor": vec![1; 8]}));
        assert!(short_missing.contains("`rope_scaling.short_factor` is missing"), "{short_missing}");
        let not_numbers = message(json!({"type": "longrope", "long_factor": vec!["1"; 8], "short_factor": vec![1; 8]}));
        assert!(
            not_numbers.contains("`rope_scaling.long_factor` ([\"1\",")
                && not_numbers.contains("not a list of numbers")
        );
        let lengths = message(json!({"type": "longrope", "long_factor": vec![1; 8], "short_factor": vec![1; 7]}));
        assert!(lengths.contains("`rope_scaling.long_factor` has 8 entries and `rope_scaling.short_factor` 7"));
        let mut odd = phi3(json!({"type": "longrope", "long_factor": vec![1; 7], "short_factor": vec![1; 7]}));
        odd.config["hidden_size"] = json!(60);
        let odd = phi3_long_rope(&odd).err().unwrap().to_string();
        assert!(odd.contains("half the 15 rotary dimensions"), "{odd}");
        let mut no_original = phi3(json!({"type": "longrope", "long_factor": vec![1; 8], "short_factor": vec![1; 8]}));
        no_original.config.as_object_mut().unwrap().remove("original_max_position_embeddings");
        let no_original = phi3_long_rope(&no_original).err().unwrap().to_string();
        assert!(no_original.contains("`rope_scaling.original_max_position_embeddings` is missing"), "{no_original}");
    }
}
