//! A language model's hyperparameters, read from its `ARCH.*` metadata and
//! checked against its tensor shapes, as llama.cpp's loader would find them
//! wrong: a head count that does not divide the width, KV heads that do not
//! divide the heads, blocks or experts the tensors contradict, attention
//! projections of the wrong size, a RoPE section that does not fit a head.

use std::collections::BTreeSet;

use super::registry::{NormEpsilon, block_of, detect};
use crate::model::{KeyError, Metadata, TensorInfo, Value};
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

/// llama.cpp's `LLAMA_MAX_LAYERS`: a block count past it is refused before
/// anything is sized by it.
pub const MAX_LAYERS: u64 = 512;

/// A block count key (`ARCH.block_count`), at most [`MAX_LAYERS`], as a
/// length layers can be counted in.
pub fn block_count(metadata: &Metadata, key: &str) -> Result<Option<usize>, KeyError> {
    match metadata.count::<u64>(key)? {
        Some(n) if n > MAX_LAYERS => {
            Err(KeyError::new(key, format!("is {n}, more than llama.cpp's {MAX_LAYERS} layers")))
        }
        n => Ok(n.map(|n| n as usize)),
    }
}

/// The hyperparameters of a language model; `None` for a file that is not
/// one (no `general.architecture`, or an mmproj's `clip`).
pub fn hyperparameters(metadata: &Metadata, tensors: &[TensorInfo]) -> Result<Option<Hyperparameters>, KeyError> {
    let Some(arch) = metadata.string("general.architecture")? else { return Ok(None) };
    if arch == "clip" {
        return Ok(None);
    }
    let key = |name: &str| format!("{arch}.{name}");
    let err = |name: &str, problem: String| KeyError { key: key(name), problem };
    let number = |name: &str| metadata.count::<u64>(&key(name));
    let float = |name: &str| metadata.float(&key(name));
    let required = |name: &str| number(name)?.ok_or_else(|| KeyError::missing(&key(name)));

    let embedding_length = required("embedding_length")?;
    let n_layer = block_count(metadata, &key("block_count"))?.ok_or_else(|| KeyError::missing(&key("block_count")))?;
    let block_count = n_layer as u64;
    // Head counts and FFN widths may be per-layer arrays (OpenELM, LFM2):
    // llama.cpp reads layer 0 where it asks without a layer, as reported here.
    let per_layer = |name: &str| metadata.per_layer::<u64>(&key(name), n_layer);
    let first = |layers: &Option<Vec<u64>>| layers.as_ref().and_then(|l| l.first().copied());
    let heads = per_layer("attention.head_count")?.ok_or_else(|| KeyError::missing(&key("attention.head_count")))?;
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

    let vocab_size = tensors.iter().find(|t| t.name == "token_embd.weight").and_then(|t| t.dims.get(1).copied());
    let expert_count = number("expert_count")?.filter(|&n| n > 0);
    let shape = Shape { embedding_length, block_count, head_count, head_count_kv, head_dim, expert_count };
    check_tensors(&shape, tensors, &key)?;
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
        let total = (0..sections.len()).filter_map(|i| sections.get(i)?.as_u64()).fold(0, u64::saturating_add);
        if total.saturating_mul(2) > head_dim {
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
        rope_freq_base: float("rope.freq_base")?,
        norm_epsilon: float(epsilon.key_suffix())?.or(float(fallback.key_suffix())?),
        expert_count,
        expert_used_count,
    }))
}

/// The counts the tensors' shapes must agree with.
struct Shape {
    embedding_length: u64,
    block_count: u64,
    head_count: u64,
    head_count_kv: u64,
    head_dim: u64,
    expert_count: Option<u64>,
}

/// The tensors' shapes against the counts: the embedding width, the blocks
/// named, layer 0's attention projections and the expert stacks; an error
/// names the key (`key` gives its full name) the tensors contradict.
fn check_tensors(shape: &Shape, tensors: &[TensorInfo], key: &dyn Fn(&str) -> String) -> Result<(), KeyError> {
    let &Shape { embedding_length, block_count, head_count, head_count_kv, head_dim, expert_count } = shape;
    let err = |name: &str, problem: String| KeyError { key: key(name), problem };
    let tensor = |name: &str| tensors.iter().find(|t| t.name == name);
    if let Some(embd) = tensor("token_embd.weight")
        && embd.dims.first() != Some(&embedding_length)
    {
        return Err(err(
            "embedding_length",
            format!("is {embedding_length}, but token_embd.weight is {:?} (ggml order)", embd.dims),
        ));
    }
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
    Ok(())
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
