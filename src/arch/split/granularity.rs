//! Stage 4, granularity: the unit each segment's cut must be a multiple
//! of — whole heads (Q, K and V in lockstep, V at its own head size), whole
//! quantization blocks of the tensor the split follows, and a performance
//! block of 128 where that does not starve a device.

use super::SplitError;
use super::classify::Part;
use super::policy::has_qgate_split;
use super::segments::{Place, Segment};

/// What a granularity is computed from: where the tensor lies, and the
/// block and device count its cuts answer to.
pub struct Unit<'a> {
    pub at: &'a Place<'a>,
    /// The block size of the tensor the split follows (its `Reference`).
    pub block: u64,
    pub devices: u64,
    /// The tensor's `ne[1]` (the attention gate's per-head form has one row per head).
    pub rows: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `std::lcm`: 0 when either is 0. Widths come from metadata, so products
/// saturate: a granularity past any real extent leaves the whole segment
/// to one device, or a mismatch refuses the tensor — never an overflow.
fn lcm(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 { 0 } else { (a / gcd(a, b)).saturating_mul(b) }
}

/// The granularity of each of `segments`.
pub fn granularity(u: &Unit<'_>, segments: &[Segment]) -> Result<Vec<u64>, SplitError> {
    let one = |g: u64| -> Result<Vec<u64>, SplitError> {
        match segments.len() {
            1 => Ok(vec![g]),
            n => Err(SplitError::tensor(u.at.name, format!("has {n} segments where its class allows one"))),
        }
    };
    let div = |a: u64, b: u64, what: &str| {
        a.checked_div(b).ok_or_else(|| SplitError::tensor(u.at.name, format!("cannot be split: {what} is 0")))
    };
    let (layers, il) = (u.at.layers, u.at.il);
    if layers.is_recr[il] {
        // Linear attention: whole heads of the mixer's state, in blocks of 128.
        let head_dim = layers.ssm.d_state;
        let granularity_qkv = lcm(lcm(u.block, 128), head_dim);
        let per_head = || div(granularity_qkv, head_dim, "ssm.state_size, the mixer's head size,");
        let all = |g: u64| Ok(vec![g; segments.len()]);
        match u.at.part {
            Part::AttnQkv | Part::AttnGate | Part::SsmConv1d | Part::SsmOut => return all(granularity_qkv),
            Part::SsmDt | Part::SsmA | Part::SsmAlphaBeta => return all(per_head()?),
            Part::SsmBetaAlpha => return all(per_head()?.saturating_mul(2)),
            _ => {}
        }
    } else {
        let n_gqa = layers.n_gqa(il);
        let head_k = layers.n_embd_head_k(il);
        let head_v = layers.n_embd_head_v(il);
        let n_embd_q = n_gqa.saturating_mul(head_k);
        // Head sizes like 80: raise the block toward 128 only while every device still gets work.
        let mut block_perf = u.block;
        while block_perf < 128 && block_perf.saturating_mul(u.devices) < n_embd_q {
            block_perf *= 2;
        }
        let granularity_q = lcm(n_embd_q, block_perf);
        let attention = matches!(
            u.at.part,
            Part::AttnSinks
                | Part::AttnQ
                | Part::AttnQBias
                | Part::AttnOut
                | Part::AttnGate
                | Part::AttnKv { .. }
                | Part::AttnKvBias { .. }
                | Part::AttnQkv
                | Part::AttnQkvBias
        );
        if attention {
            let granularity_head = div(granularity_q, head_k, "the key head size")?;
            let qgate = has_qgate_split(u.at.arch);
            match u.at.part {
                Part::AttnSinks => return one(granularity_head),
                Part::AttnQ | Part::AttnQBias if qgate => return one(lcm(n_embd_q.saturating_mul(2), block_perf)),
                Part::AttnQ | Part::AttnQBias => return one(granularity_q),
                Part::AttnOut => return one(granularity_head.saturating_mul(head_v)),
                Part::AttnGate if u.rows == layers.n_head[il] => return one(granularity_head),
                Part::AttnGate => return one(granularity_q),
                _ => {}
            }
            let granularity_kv = div(granularity_q, n_gqa, "the heads per KV head")?;
            // V heads may be narrower than K heads (MiMo): whole V heads, at
            // the same head index as K, so Q, K and V stay in lockstep.
            let granularity_v = div(granularity_kv, head_k, "the key head size")?.saturating_mul(head_v);
            return match u.at.part {
                Part::AttnKv { value } | Part::AttnKvBias { value } => {
                    one(if value { granularity_v } else { granularity_kv })
                }
                _ if qgate => Ok(vec![lcm(n_embd_q.saturating_mul(2), block_perf), granularity_kv]),
                _ if segments.len() == 3 => Ok(vec![granularity_q, granularity_kv, granularity_v]),
                _ if segments.len() == 2 => Ok(vec![granularity_q, granularity_kv]),
                _ => Err(SplitError::tensor(u.at.name, format!("has {} segments, not Q and K/V", segments.len()))),
            };
        }
    }
    match u.at.part {
        Part::FfnUpOrGate { .. } | Part::FfnUpOrGateBias { .. } | Part::FfnGateUp | Part::FfnDown => {
            one(lcm(u.block, 128))
        }
        _ => one(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::registry::LayerKinds;
    use crate::arch::split::layers::Layers;
    use crate::model::{Metadata, Value};

    #[test]
    fn heads_of_80_raise_the_block_only_while_every_device_gets_work() {
        let mut m = Metadata::default();
        for (k, v) in [("block_count", 1), ("embedding_length", 2560), ("attention.head_count", 32)] {
            m.set(&format!("t.{k}"), Value::U32(v));
        }
        m.set("t.attention.head_count_kv", Value::U32(32));
        let layers = Layers::read(&m, "t", LayerKinds::Uniform).unwrap();
        let seg = [Segment { size: 2560, repeats: 1 }];
        let cut = |part, devices| {
            let at = Place { name: "x", part, arch: "t", layers: &layers, il: 0, extent: 2560 };
            granularity(&Unit { at: &at, block: 32, devices, rows: 1 }, &seg).unwrap()
        };
        // One head of 80 per KV head: with 4 devices the 32-block already
        // gives each device work (32·4 ≥ 80) and stays; with 2 it doubles once.
        assert_eq!(cut(Part::AttnQ, 4), [lcm(80, 32)]);
        assert_eq!(cut(Part::AttnQ, 2), [lcm(80, 64)]);
        assert_eq!(cut(Part::AttnKv { value: false }, 2), [lcm(80, 64)]);
        assert_eq!(cut(Part::FfnDown, 2), [128]);
        assert_eq!(cut(Part::Output, 2), [1]);
    }

    #[test]
    fn linear_attention_cuts_whole_state_heads_in_blocks_of_128() {
        let mut m = Metadata::default();
        for (k, v) in
            [("block_count", 4), ("embedding_length", 16), ("attention.head_count", 4), ("ssm.state_size", 48)]
        {
            m.set(&format!("t.{k}"), Value::U32(v));
        }
        let layers = Layers::read(&m, "t", LayerKinds::LinearAttention).unwrap();
        assert!(layers.is_recr[0] && !layers.is_recr[3]);
        let cut = |layers: &Layers, part, block, segments: &[Segment]| {
            let at = Place { name: "x", part, arch: "t", layers, il: 0, extent: 1920 };
            granularity(&Unit { at: &at, block, devices: 2, rows: 1 }, segments)
        };
        let two = [Segment { size: 768, repeats: 2 }, Segment { size: 384, repeats: 1 }];
        assert_eq!(cut(&layers, Part::AttnQkv, 1, &two).unwrap(), [384, 384]);
        assert_eq!(cut(&layers, Part::SsmOut, 256, &two).unwrap(), [768, 768]);
        let one = [Segment { size: 16, repeats: 1 }];
        assert_eq!(cut(&layers, Part::SsmDt, 1, &one).unwrap(), [8]);
        assert_eq!(cut(&layers, Part::SsmBetaAlpha, 1, &one).unwrap(), [16]);
        // Outside the mixer, a recurrent layer's tensors follow the common rules.
        assert_eq!(cut(&layers, Part::FfnDown, 32, &one).unwrap(), [128]);
        m.set("t.ssm.state_size", Value::U32(0));
        let stateless = Layers::read(&m, "t", LayerKinds::LinearAttention).unwrap();
        assert!(cut(&stateless, Part::SsmA, 1, &one).unwrap_err().to_string().contains("ssm.state_size"));
    }
}
