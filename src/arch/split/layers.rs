//! Each layer's hyperparameters as llama.cpp's loader derives them for the
//! split planner: head counts, FFN widths and head sizes per layer (arrays
//! or one value for all), and which layers slide or recur
//! ([`LayerKinds`], the registry's fact per family).

use super::SplitError;
use crate::arch::hparams::{count, per_layer_counts};
use crate::arch::registry::{LayerKinds, WindowRule};
use crate::model::{Metadata, Value};

/// A language model's per-layer shape, indexed by layer.
#[derive(Debug, Clone)]
pub struct Layers {
    pub n_head: Vec<u64>,
    pub n_head_kv: Vec<u64>,
    pub n_ff: Vec<u64>,
    pub n_ff_exp: Vec<u64>,
    pub is_swa: Vec<bool>,
    pub is_recr: Vec<bool>,
    head_k: HeadSize,
    head_v: HeadSize,
}

/// A head size, which sliding-window layers may have their own of.
#[derive(Debug, Clone, Copy)]
struct HeadSize {
    full: u64,
    swa: u64,
}

impl Layers {
    /// Reads `arch`'s keys from `metadata`; `kinds` is the family's.
    pub fn read(metadata: &Metadata, arch: &str, kinds: LayerKinds) -> Result<Layers, SplitError> {
        let key = |name: &str| format!("{arch}.{name}");
        let scalar = |name: &str| count(metadata, &key(name)).map_err(SplitError::from);
        let n_layer = scalar("block_count")?.ok_or_else(|| SplitError::metadata(key("block_count"), "is missing"))?;
        let per_layer = |name: &str| per_layer_counts(metadata, &key(name), n_layer).map_err(SplitError::from);
        let n_layer = usize::try_from(n_layer).map_err(|_| SplitError::metadata(key("block_count"), "is too large"))?;
        let n_head = per_layer("attention.head_count")?.unwrap_or_else(|| vec![0; n_layer]);
        let n_head_kv = per_layer("attention.head_count_kv")?.unwrap_or_else(|| n_head.clone());
        let n_ff = per_layer("feed_forward_length")?.unwrap_or_else(|| vec![0; n_layer]);
        let n_ff_exp = per_layer("expert_feed_forward_length")?.unwrap_or_else(|| vec![0; n_layer]);
        if let Some((il, (h, kv))) =
            n_head.iter().zip(&n_head_kv).enumerate().find(|(_, (h, kv))| **kv != 0 && **h % **kv != 0)
        {
            return Err(SplitError::metadata(
                key("attention.head_count_kv"),
                format!("{kv} does not divide {} = {h} (layer {il})", key("attention.head_count")),
            ));
        }
        let n_embd =
            scalar("embedding_length")?.ok_or_else(|| SplitError::metadata(key("embedding_length"), "is missing"))?;

        // A model without attention heads has no head sizes.
        let (head_k, head_v) = match n_head.first().and_then(|&h| n_embd.checked_div(h)) {
            Some(width) => {
                (scalar("attention.key_length")?.unwrap_or(width), scalar("attention.value_length")?.unwrap_or(width))
            }
            None => (0, 0),
        };
        let head_k = HeadSize { full: head_k, swa: scalar("attention.key_length_swa")?.unwrap_or(head_k) };
        let head_v = HeadSize { full: head_v, swa: scalar("attention.value_length_swa")?.unwrap_or(head_v) };

        let window = scalar("attention.sliding_window")?;
        let mut is_swa = vec![false; n_layer];
        let mut is_recr = vec![false; n_layer];
        match kinds {
            LayerKinds::Uniform => {}
            LayerKinds::SlidingWindow { period, dense_first, when } => {
                let applies = match when {
                    WindowRule::Always => true,
                    WindowRule::Positive => window.is_some_and(|w| w > 0),
                    WindowRule::UnlessZero => window != Some(0),
                };
                if applies {
                    is_swa =
                        swa_pattern(metadata, &key("attention.sliding_window_pattern"), period, dense_first, n_layer)?;
                }
            }
            LayerKinds::RecurrentWithoutKvHeads => {
                for (recr, &kv) in is_recr.iter_mut().zip(&n_head_kv) {
                    *recr = kv == 0;
                }
                if window.is_some_and(|w| w > 0) {
                    for (swa, &recr) in is_swa.iter_mut().zip(&is_recr) {
                        *swa = !recr;
                    }
                }
            }
        }
        Ok(Layers { n_head, n_head_kv, n_ff, n_ff_exp, is_swa, is_recr, head_k, head_v })
    }

    pub fn n_layer(&self) -> usize {
        self.n_head.len()
    }

    /// llama.cpp's `n_gqa(il)`: heads per KV head, 0 without KV heads.
    pub fn n_gqa(&self, il: usize) -> u64 {
        match self.n_head_kv[il] {
            0 => 0,
            kv => self.n_head[il] / kv,
        }
    }

    pub fn n_embd_head_k(&self, il: usize) -> u64 {
        if self.is_swa[il] { self.head_k.swa } else { self.head_k.full }
    }

    pub fn n_embd_head_v(&self, il: usize) -> u64 {
        if self.is_swa[il] { self.head_v.swa } else { self.head_v.full }
    }

    pub fn n_embd_k_gqa(&self, il: usize) -> u64 {
        self.n_embd_head_k(il) * self.n_head_kv[il]
    }

    pub fn n_embd_v_gqa(&self, il: usize) -> u64 {
        self.n_embd_head_v(il) * self.n_head_kv[il]
    }
}

/// `load_swa_pattern`: a flag per layer from the file, or a period (the
/// file's, else the family's) expanded as `set_swa_pattern` does.
fn swa_pattern(
    metadata: &Metadata,
    key: &str,
    period: u32,
    dense_first: bool,
    n_layer: usize,
) -> Result<Vec<bool>, SplitError> {
    let period = match metadata.get(key) {
        Some(Value::Array(flags)) => {
            if flags.len() != n_layer {
                return Err(SplitError::metadata(key, format!("has {} entries for {n_layer} layers", flags.len())));
            }
            return (0..n_layer)
                .map(|i| match flags.get(i) {
                    Some(Value::Bool(b)) => Some(b),
                    Some(v) => v.as_u64().map(|n| n != 0),
                    None => None,
                })
                .collect::<Option<Vec<bool>>>()
                .ok_or_else(|| SplitError::metadata(key, "holds an entry that is not a flag"));
        }
        Some(v) => v.as_u64().ok_or_else(|| SplitError::metadata(key, "is not a period"))?,
        None => u64::from(period),
    };
    Ok((0..n_layer as u64)
        .map(|il| match (period, dense_first) {
            (0, _) => true,
            (p, true) => il % p != 0,
            (p, false) => il % p < p - 1,
        })
        .collect())
}
