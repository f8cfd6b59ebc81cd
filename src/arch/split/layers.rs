//! Each layer's hyperparameters as llama.cpp's loader derives them for the
//! split planner: head counts, FFN widths and head sizes per layer (arrays
//! or one value for all), and which layers slide or recur
//! ([`LayerKinds`], the registry's fact per family).

use super::SplitError;
use crate::arch::hparams::block_count;
use crate::arch::registry::{LayerKinds, WindowRule};
use crate::model::{Array, KeyError, Metadata, Value};

/// A language model's per-layer shape, indexed by layer.
#[derive(Debug, Clone)]
pub struct Layers {
    pub n_head: Vec<u64>,
    pub n_head_kv: Vec<u64>,
    pub n_ff: Vec<u64>,
    pub n_ff_exp: Vec<u64>,
    pub is_swa: Vec<bool>,
    pub is_recr: Vec<bool>,
    pub ssm: Ssm,
    head_k: HeadSize,
    head_v: HeadSize,
}

/// The linear-attention (gated delta net) shape, `ARCH.ssm.*`: 0 where the
/// file has no such key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ssm {
    /// `ssm.state_size`: the key and value head size.
    pub d_state: u64,
    /// `ssm.group_count`: key heads.
    pub n_group: u64,
    /// `ssm.time_step_rank`: value heads.
    pub dt_rank: u64,
    /// `ssm.conv_kernel`.
    pub d_conv: u64,
}

impl Ssm {
    pub fn key_dim(&self) -> u64 {
        self.d_state.saturating_mul(self.n_group)
    }

    pub fn value_dim(&self) -> u64 {
        self.d_state.saturating_mul(self.dt_rank)
    }
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
        let scalar = |name: &str| metadata.count::<u64>(&key(name));
        let n_layer =
            block_count(metadata, &key("block_count"))?.ok_or_else(|| KeyError::missing(&key("block_count")))?;
        let per_layer = |name: &str| metadata.per_layer::<u64>(&key(name), n_layer);
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
        let n_embd = scalar("embedding_length")?.ok_or_else(|| KeyError::missing(&key("embedding_length")))?;

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
            LayerKinds::LinearAttention => is_recr = linear_attention_layers(metadata, arch, n_layer)?,
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
        let ssm_key = |name: &str| scalar(&format!("ssm.{name}")).map(Option::unwrap_or_default);
        let ssm = Ssm {
            d_state: ssm_key("state_size")?,
            n_group: ssm_key("group_count")?,
            dt_rank: ssm_key("time_step_rank")?,
            d_conv: ssm_key("conv_kernel")?,
        };
        Ok(Layers { n_head, n_head_kv, n_ff, n_ff_exp, is_swa, is_recr, ssm, head_k, head_v })
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
        self.n_embd_head_k(il).saturating_mul(self.n_head_kv[il])
    }

    pub fn n_embd_v_gqa(&self, il: usize) -> u64 {
        self.n_embd_head_v(il).saturating_mul(self.n_head_kv[il])
    }
}

/// A flag per layer, as an array key holds them (booleans or integers).
fn layer_flags(key: &str, flags: &Array, n_layer: usize) -> Result<Vec<bool>, SplitError> {
    if flags.len() != n_layer {
        return Err(SplitError::metadata(key, format!("has {} entries for {n_layer} layers", flags.len())));
    }
    (0..n_layer)
        .map(|i| match flags.get(i) {
            Some(Value::Bool(b)) => Some(b),
            Some(v) => v.as_u64().map(|n| n != 0),
            None => None,
        })
        .collect::<Option<Vec<bool>>>()
        .ok_or_else(|| SplitError::metadata(key, "holds an entry that is not a flag"))
}

/// Qwen3-Next's and Qwen3.5's recurrent layers: the file's flags, else
/// all but every `full_attention_interval`-th of the trunk's layers (the
/// multi-token-prediction layers after it are full attention).
fn linear_attention_layers(metadata: &Metadata, arch: &str, n_layer: usize) -> Result<Vec<bool>, SplitError> {
    let flags_key = format!("{arch}.attention.recurrent_layers");
    match metadata.get(&flags_key) {
        Some(Value::Array(flags)) => return layer_flags(&flags_key, flags, n_layer),
        Some(Value::Bool(b)) => return Ok(vec![*b; n_layer]),
        Some(v) => {
            let flag = v.as_u64().ok_or_else(|| SplitError::metadata(&flags_key, "is not a flag per layer"))?;
            return Ok(vec![flag != 0; n_layer]);
        }
        None => {}
    }
    let interval_key = format!("{arch}.full_attention_interval");
    let interval = metadata.count::<u64>(&interval_key)?.unwrap_or(4);
    if interval == 0 {
        return Err(SplitError::metadata(interval_key, "is 0: no layer would be full attention"));
    }
    let mtp_key = format!("{arch}.nextn_predict_layers");
    let trunk = (n_layer as u64).saturating_sub(metadata.count::<u64>(&mtp_key)?.unwrap_or(0));
    Ok((0..n_layer as u64).map(|i| i < trunk && (i + 1) % interval != 0).collect())
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
        Some(Value::Array(flags)) => return layer_flags(key, flags, n_layer),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen(extra: &[(&str, Value)]) -> Result<Layers, SplitError> {
        let mut m = Metadata::default();
        for (k, v) in [("block_count", 8), ("embedding_length", 64), ("attention.head_count", 4)] {
            m.set(&format!("qwen35.{k}"), Value::U32(v));
        }
        for (k, v) in extra {
            m.set(&format!("qwen35.{k}"), v.clone());
        }
        Layers::read(&m, "qwen35", LayerKinds::LinearAttention)
    }

    #[test]
    fn linear_attention_layers_come_from_the_flags_or_the_interval() {
        let recurrent = |l: Layers| l.is_recr.iter().map(|&r| u8::from(r)).collect::<Vec<_>>();
        assert_eq!(recurrent(qwen(&[]).unwrap()), [1, 1, 1, 0, 1, 1, 1, 0]);
        assert_eq!(recurrent(qwen(&[("full_attention_interval", Value::U32(2))]).unwrap()), [1, 0, 1, 0, 1, 0, 1, 0]);
        // The multi-token-prediction layers after the trunk are full attention.
        assert_eq!(recurrent(qwen(&[("nextn_predict_layers", Value::U32(2))]).unwrap()), [1, 1, 1, 0, 1, 1, 0, 0]);
        let flags = Array::Bool(vec![true, false, false, true, true, false, false, true]);
        assert_eq!(
            recurrent(qwen(&[("attention.recurrent_layers", Value::Array(flags))]).unwrap()),
            [1, 0, 0, 1, 1, 0, 0, 1]
        );
        let short = Array::Bool(vec![true]);
        let err = qwen(&[("attention.recurrent_layers", Value::Array(short))]).unwrap_err().to_string();
        assert_eq!(err, "qwen35.attention.recurrent_layers: has 1 entries for 8 layers");
        let err = qwen(&[("full_attention_interval", Value::U32(0))]).unwrap_err().to_string();
        assert!(err.starts_with("qwen35.full_attention_interval: is 0"), "{err}");
        // Found by fuzzing: a block count sized vectors before anything checked it.
        let err = qwen(&[("block_count", Value::U64(1 << 33))]).unwrap_err().to_string();
        assert!(err.starts_with("qwen35.block_count: is 8589934592, more than llama.cpp's 512"), "{err}");
        let ssm = qwen(&[("ssm.state_size", Value::U32(128)), ("ssm.group_count", Value::U32(16))]).unwrap().ssm;
        assert_eq!((ssm.key_dim(), ssm.value_dim()), (2048, 0));
    }
}
