//! A language model's hyperparameters, read from its `ARCH.*` metadata and
//! checked against its tensor shapes, as llama.cpp's loader would find them
//! wrong: a head count that does not divide the width, KV heads that do not
//! divide the heads, blocks or experts the tensors contradict, attention
//! projections of the wrong size, a RoPE section that does not fit a head.

use std::collections::BTreeSet;

use super::registry::{NormEpsilon, block_of, detect};
use crate::model::{Metadata, TensorInfo, Value};
use crate::text::Name;

/// The hyperparameters every decoder-only architecture has, plus the
/// optional ones reports show.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Hyperparameters {
    pub architecture: String,
    pub embedding_length: u64,
    pub block_count: u64,
    pub head_count: u64,
    pub head_count_kv: u64,
    /// `ARCH.attention.key_length`, else the width over the heads.
    pub head_dim: u64,
    pub vocab_size: Option<u64>,
    pub context_length: Option<u64>,
    pub feed_forward_length: Option<u64>,
    pub rope_freq_base: Option<f64>,
    pub norm_epsilon: Option<f64>,
    pub expert_count: Option<u64>,
    pub expert_used_count: Option<u64>,
}

/// A hyperparameter that is missing, or that the other keys or the tensors
/// contradict; `key` names the metadata key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct HparamError {
    pub key: String,
    pub problem: String,
}

/// A count key's value (`None` when absent), as llama.cpp's `get_key` reads it.
pub fn count(metadata: &Metadata, key: &str) -> Result<Option<u64>, HparamError> {
    match metadata.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| HparamError {
            key: key.to_owned(),
            problem: format!("expected a non-negative integer, found {v} ({})", v.value_type().name()),
        }),
    }
}

/// llama.cpp's `LLAMA_MAX_LAYERS`: a block count past it is refused before
/// anything is sized by it.
pub const MAX_LAYERS: u64 = 512;

/// A block count key (`ARCH.block_count`), at most [`MAX_LAYERS`].
pub fn block_count(metadata: &Metadata, key: &str) -> Result<Option<u64>, HparamError> {
    match count(metadata, key)? {
        Some(n) if n > MAX_LAYERS => Err(HparamError {
            key: key.to_owned(),
            problem: format!("is {n}, more than llama.cpp's {MAX_LAYERS} layers"),
        }),
        n => Ok(n),
    }
}

/// A per-layer count key, as llama.cpp's `get_key_or_arr` reads it: one
/// value for every layer, or an array of exactly one entry per layer
/// (`block_count` as [`block_count`] bounds it).
pub fn per_layer_counts(metadata: &Metadata, key: &str, block_count: u64) -> Result<Option<Vec<u64>>, HparamError> {
    let err = |problem: String| HparamError { key: key.to_owned(), problem };
    match metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(values)) => {
            if values.len() as u64 != block_count {
                return Err(err(format!("has {} entries for {block_count} blocks", values.len())));
            }
            let values = (0..values.len()).map(|i| values.get(i).and_then(|v| v.as_u64()));
            values
                .collect::<Option<Vec<u64>>>()
                .map(Some)
                .ok_or_else(|| err("holds an entry that is not a non-negative integer".into()))
        }
        Some(_) => {
            let n = count(metadata, key)?;
            let layers = usize::try_from(block_count).map_err(|_| err(format!("{block_count} blocks are too many")))?;
            Ok(n.map(|n| vec![n; layers]))
        }
    }
}

/// The hyperparameters of a language model; `None` for a file that is not
/// one (no `general.architecture`, or an mmproj's `clip`).
pub fn hyperparameters(metadata: &Metadata, tensors: &[TensorInfo]) -> Result<Option<Hyperparameters>, HparamError> {
    let Some(arch) = metadata.get_str("general.architecture") else { return Ok(None) };
    if arch == "clip" {
        return Ok(None);
    }
    let key = |name: &str| format!("{arch}.{name}");
    let err = |name: &str, problem: String| HparamError { key: key(name), problem };
    let number = |name: &str| count(metadata, &key(name));
    let float = |name: &str| match metadata.get(&key(name)) {
        Some(Value::F32(v)) => Some(f64::from(*v)),
        Some(Value::F64(v)) => Some(*v),
        _ => None,
    };
    let required = |name: &str| number(name)?.ok_or_else(|| err(name, "missing".into()));

    let embedding_length = required("embedding_length")?;
    let block_count =
        block_count(metadata, &key("block_count"))?.ok_or_else(|| err("block_count", "missing".into()))?;
    // Head counts and FFN widths may be per-layer arrays (OpenELM, LFM2):
    // llama.cpp reads layer 0 where it asks without a layer, as reported here.
    let per_layer = |name: &str| per_layer_counts(metadata, &key(name), block_count);
    let first = |layers: &Option<Vec<u64>>| layers.as_ref().and_then(|l| l.first().copied());
    let heads = per_layer("attention.head_count")?.ok_or_else(|| err("attention.head_count", "missing".into()))?;
    let head_count = heads.first().copied().ok_or_else(|| err("block_count", "is 0".into()))?;
    if heads.contains(&0) {
        return Err(err("attention.head_count", "is 0".into()));
    }
    let kv_heads = per_layer("attention.head_count_kv")?.unwrap_or_else(|| heads.clone());
    // Zero KV heads mark a layer without attention (LFM2's convolution layers).
    if let Some((h, kv)) = heads.iter().zip(&kv_heads).find(|&(h, &kv)| kv != 0 && h % kv != 0) {
        return Err(err(
            "attention.head_count_kv",
            format!("{kv} does not divide {} = {h}", key("attention.head_count")),
        ));
    }
    let head_count_kv = kv_heads[0];
    let head_dim = match number("attention.key_length")? {
        Some(length) => length,
        None if embedding_length % head_count == 0 => embedding_length / head_count,
        None => {
            return Err(err(
                "attention.head_count",
                format!("{head_count} does not divide {} = {embedding_length}", key("embedding_length")),
            ));
        }
    };

    let tensor = |name: &str| tensors.iter().find(|t| t.name == name);
    if let Some(embd) = tensor("token_embd.weight")
        && embd.dims.first() != Some(&embedding_length)
    {
        return Err(err(
            "embedding_length",
            format!("is {embedding_length}, but token_embd.weight is {:?} (ggml order)", embd.dims),
        ));
    }
    let vocab_size = tensor("token_embd.weight").and_then(|t| t.dims.get(1).copied());
    let blocks: BTreeSet<u64> = tensors.iter().filter_map(|t| block_of(&t.name)).collect();
    if let Some(&last) = blocks.last()
        && (last >= block_count || blocks.len() as u64 != block_count)
    {
        return Err(err(
            "block_count",
            format!("is {block_count}, but the tensors name {} blocks, up to blk.{last}", blocks.len()),
        ));
    }
    if let Some(q) = tensor("blk.0.attn_q.weight") {
        let expected = [embedding_length, head_count * head_dim];
        if q.dims[..] != expected[..] {
            return Err(err(
                "attention.head_count",
                format!("{head_count} heads of {head_dim} need blk.0.attn_q.weight {expected:?}, it is {:?}", q.dims),
            ));
        }
    }
    if let Some(k) = tensor("blk.0.attn_k.weight") {
        let expected = [embedding_length, head_count_kv * head_dim];
        if k.dims[..] != expected[..] {
            return Err(err(
                "attention.head_count_kv",
                format!(
                    "{head_count_kv} KV heads of {head_dim} need blk.0.attn_k.weight {expected:?}, it is {:?}",
                    k.dims
                ),
            ));
        }
    }
    let expert_count = number("expert_count")?.filter(|&n| n > 0);
    if let Some(experts) = expert_count {
        // The router maps the width to one logit per expert; expert stacks hold one matrix per expert.
        let contradiction = tensors.iter().find(|t| {
            let axis = if t.name.ends_with(".ffn_gate_inp.weight") {
                1
            } else if t.name.ends_with("_exps.weight") {
                2
            } else {
                return false;
            };
            t.dims.get(axis) != Some(&experts)
        });
        if let Some(t) = contradiction {
            return Err(err("expert_count", format!("is {experts}, but {} is {:?}", Name(&t.name), t.dims)));
        }
    }
    let expert_used_count = first(&per_layer("expert_used_count")?);
    if let Some(used) = expert_used_count
        && used > expert_count.unwrap_or(0)
    {
        return Err(err(
            "expert_used_count",
            format!("is {used}, more than the {} experts", expert_count.unwrap_or(0)),
        ));
    }
    if let Some(Value::Array(sections)) = metadata.get(&key("rope.dimension_sections")) {
        let total: u64 = (0..sections.len()).filter_map(|i| sections.get(i)).filter_map(|v| v.as_u64()).sum();
        if total * 2 > head_dim {
            return Err(err(
                "rope.dimension_sections",
                format!("sum to {total} rotated pairs, more than a {head_dim}-wide head holds"),
            ));
        }
    }
    // The family's own epsilon key first (Nemotron files carry both).
    let epsilon = detect(metadata, tensors).family.layout.norm_epsilon;
    let fallback = match epsilon {
        NormEpsilon::Rms => NormEpsilon::Layer,
        NormEpsilon::Layer => NormEpsilon::Rms,
    };
    Ok(Some(Hyperparameters {
        architecture: arch.to_owned(),
        embedding_length,
        block_count,
        head_count,
        head_count_kv,
        head_dim,
        vocab_size,
        context_length: number("context_length")?,
        feed_forward_length: first(&per_layer("feed_forward_length")?),
        rope_freq_base: float("rope.freq_base"),
        norm_epsilon: float(epsilon.key_suffix()).or_else(|| float(fallback.key_suffix())),
        expert_count,
        expert_used_count,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    fn model(keys: &[(&str, u32)], tensors: &[(&str, &[u64])]) -> (Metadata, Vec<TensorInfo>) {
        let mut metadata = Metadata::new();
        metadata.set("general.architecture", Value::string("llama"));
        for (k, v) in keys {
            metadata.set(&format!("llama.{k}"), Value::U32(*v));
        }
        let tensors = tensors.iter().map(|(n, d)| TensorInfo::new(*n, d.to_vec(), GgmlType::F32)).collect();
        (metadata, tensors)
    }

    /// Keys changed from [`BASE`], tensors, the error's start.
    type Case = (&'static [(&'static str, u32)], &'static [(&'static str, &'static [u64])], &'static str);

    const BASE: [(&str, u32); 4] =
        [("embedding_length", 64), ("block_count", 2), ("attention.head_count", 4), ("attention.head_count_kv", 2)];

    #[test]
    fn consistent_models_pass() {
        let (m, t) = model(
            &BASE,
            &[
                ("token_embd.weight", &[64, 100]),
                ("blk.0.attn_q.weight", &[64, 64]),
                ("blk.1.attn_k.weight", &[64, 32]),
            ],
        );
        let h = hyperparameters(&m, &t).unwrap().unwrap();
        assert_eq!((h.head_dim, h.head_count_kv, h.vocab_size), (16, 2, Some(100)));
    }

    #[test]
    fn contradictions_name_their_key() {
        let cases: [Case; 6] = [
            (
                &[("attention.head_count", 5), ("attention.head_count_kv", 5)],
                &[],
                "llama.attention.head_count: 5 does not divide",
            ),
            (&[("attention.head_count_kv", 3)], &[], "llama.attention.head_count_kv: 3 does not divide"),
            (&[], &[("token_embd.weight", &[32, 100])], "llama.embedding_length: is 64, but token_embd.weight"),
            (&[], &[("blk.2.attn_norm.weight", &[64])], "llama.block_count: is 2, but the tensors name"),
            (
                &[],
                &[("blk.0.attn_q.weight", &[64, 32]), ("blk.1.attn_norm.weight", &[64])],
                "llama.attention.head_count: 4 heads of 16 need",
            ),
            (&[("block_count", 0)], &[("blk.0.x", &[1])], "llama.block_count: is 0"),
        ];
        for (keys, tensors, expected) in cases {
            let mut all: Vec<(&str, u32)> = BASE.to_vec();
            for (k, v) in keys {
                all.retain(|(bk, _)| bk != k);
                all.push((k, *v));
            }
            let (m, t) = model(&all, tensors);
            let e = hyperparameters(&m, &t).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{e}");
        }
        let (m, t) = model(&BASE[..2], &[]);
        assert_eq!(hyperparameters(&m, &t).unwrap_err().to_string(), "llama.attention.head_count: missing");
    }
}
