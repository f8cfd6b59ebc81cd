//! Stage 3, segmentation: the logical pieces of a tensor's split axis that
//! must each be cut on its own — Q, K and V of a fused QKV, gate and up of a
//! fused FFN — as (size, repeats): `repeats` consecutive pieces of `size`
//! are each cut the same way.

use super::SplitError;
use super::classify::Part;
use super::layers::Layers;
use super::policy::{has_qgate_split, interleaves_value_heads};

/// One run of equal pieces along the split axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Segment {
    pub size: u64,
    pub repeats: u32,
}

/// Where a tensor lies, for its segmentation.
pub struct Place<'a> {
    pub name: &'a str,
    pub part: Part,
    pub arch: &'a str,
    pub layers: &'a Layers,
    pub il: usize,
    /// The tensor's length along its split axis.
    pub extent: u64,
}

/// The segments of a tensor; their sizes times repeats always make its
/// extent (a fused tensor whose size does not match its pieces is refused).
pub fn segments(at: &Place<'_>) -> Result<Vec<Segment>, SplitError> {
    let segments = if has_qgate_split(at.arch) { gated_segments(at)? } else { common_segments(at)? };
    let total = segments.iter().fold(0u64, |sum, s| sum.saturating_add(s.size.saturating_mul(u64::from(s.repeats))));
    if total != at.extent {
        let pieces: Vec<String> = segments.iter().map(|s| format!("{} × {}", s.size, s.repeats)).collect();
        return Err(SplitError::tensor(
            at.name,
            format!("is {} wide on its split axis, but its pieces {} make {total}", at.extent, pieces.join(" + ")),
        ));
    }
    Ok(segments)
}

fn seg(size: u64, repeats: u32) -> Segment {
    Segment { size, repeats }
}

/// Refuses a fused tensor whose width is not the sum its pieces' keys give.
fn expect_width(at: &Place<'_>, width: u64, pieces: impl FnOnce() -> String) -> Result<(), SplitError> {
    if at.extent == width {
        Ok(())
    } else {
        Err(SplitError::tensor(at.name, format!("is {} wide on its split axis, but {} = {width}", at.extent, pieces())))
    }
}

/// Qwen3-Next's and Qwen3.5's layouts: full-attention Q carries its gate
/// (twice as wide), and the linear-attention mixers fuse Q, K and V heads
/// of the gated delta net.
fn gated_segments(at: &Place<'_>) -> Result<Vec<Segment>, SplitError> {
    let (layers, il) = (at.layers, at.il);
    if !layers.is_recr[il] && matches!(at.part, Part::AttnQkv | Part::AttnQkvBias) {
        let q = layers.n_head[il].saturating_mul(layers.n_embd_head_k(il)).saturating_mul(2);
        let (k, v) = (layers.n_embd_k_gqa(il), layers.n_embd_v_gqa(il));
        if k != v {
            return Err(SplitError::tensor(
                at.name,
                format!("fuses K {k} and V {v} wide: a gated Q's fused QKV needs them equal"),
            ));
        }
        expect_width(at, q.saturating_add(v.saturating_mul(2)), || format!("gated Q {q} + K {k} + V {v}"))?;
        return Ok(vec![seg(q, 1), seg(v, 2)]);
    }
    let ssm = layers.ssm;
    let (key_dim, value_dim) = (ssm.key_dim(), ssm.value_dim());
    let mixer = || format!("Q and K of {key_dim} each + V {value_dim}");
    let mixer_width = key_dim.saturating_mul(2).saturating_add(value_dim);
    if interleaves_value_heads(at.arch) {
        // Value heads cycle over the key heads (k0_v0, k1_v1, k0_v2, …), so V
        // is cut in runs of key_dim, one per value head a key head serves.
        let ratio = ssm.dt_rank.checked_div(ssm.n_group).ok_or_else(|| {
            SplitError::metadata(format!("{}.ssm.group_count", at.arch), "is 0: the mixer has no key heads")
        })?;
        let ratio = u32::try_from(ratio)
            .map_err(|_| SplitError::metadata(format!("{}.ssm.time_step_rank", at.arch), "has too many value heads"))?;
        match at.part {
            Part::AttnQkv | Part::SsmConv1d => {
                expect_width(at, mixer_width, mixer)?;
                return Ok(vec![seg(key_dim, ratio.saturating_add(2))]);
            }
            Part::AttnGate | Part::SsmOut => return Ok(vec![seg(key_dim, ratio)]),
            Part::SsmDt | Part::SsmA | Part::SsmAlphaBeta => return Ok(vec![seg(ssm.n_group, ratio)]),
            _ => {}
        }
    } else if matches!(at.part, Part::AttnQkv | Part::SsmConv1d) {
        // Value heads follow their key head in runs (k0_v0, k0_v1, k1_v2, …).
        expect_width(at, mixer_width, mixer)?;
        return Ok(vec![seg(key_dim, 2), seg(value_dim, 1)]);
    }
    match at.part {
        Part::FfnGateUp => fused_gate_up(at),
        _ => Ok(vec![seg(at.extent, 1)]),
    }
}

fn fused_gate_up(at: &Place<'_>) -> Result<Vec<Segment>, SplitError> {
    let n_ff_exp = at.layers.n_ff_exp[at.il];
    expect_width(at, n_ff_exp.saturating_mul(2), || format!("gate and up of {n_ff_exp}"))?;
    Ok(vec![seg(n_ff_exp, 2)])
}

fn common_segments(at: &Place<'_>) -> Result<Vec<Segment>, SplitError> {
    let (part, layers, il, extent) = (at.part, at.layers, at.il, at.extent);
    match part {
        Part::AttnQkv | Part::AttnQkvBias => {
            let q = layers.n_head[il].saturating_mul(layers.n_embd_head_k(il));
            let k = layers.n_embd_k_gqa(il);
            let v = layers.n_embd_v_gqa(il);
            expect_width(at, q.saturating_add(k).saturating_add(v), || format!("Q {q} + K {k} + V {v}"))?;
            if k == v {
                Ok(vec![seg(q, 1), seg(k, 2)])
            } else {
                // Unequal K and V heads (MiMo: d_k 192, d_v 128): three pieces,
                // so every device gets whole heads of each.
                Ok(vec![seg(q, 1), seg(k, 1), seg(v, 1)])
            }
        }
        // Phi-3 stores gate and up side by side under the name `ffn_up`.
        Part::FfnUpOrGate { up: true } | Part::FfnUpOrGateBias { up: true }
            if extent == layers.n_ff[il].saturating_mul(2) =>
        {
            Ok(vec![seg(layers.n_ff[il], 2)])
        }
        Part::FfnGateUp => fused_gate_up(at),
        _ => Ok(vec![seg(extent, 1)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::registry::LayerKinds;
    use crate::model::{Metadata, Value};

    fn layers(pairs: &[(&str, u64)]) -> Layers {
        let mut m = Metadata::default();
        for &(k, v) in pairs {
            m.set(&format!("t.{k}"), Value::U32(v as u32));
        }
        Layers::read(&m, "t", LayerKinds::Uniform).unwrap()
    }

    fn cut(name: &str, part: Part, layers: &Layers, extent: u64) -> Result<Vec<Segment>, SplitError> {
        segments(&Place { name, part, arch: "t", layers, il: 0, extent })
    }

    #[test]
    fn fused_qkv_is_q_then_k_and_v_or_three_pieces_when_their_heads_differ() {
        let base = [("block_count", 1), ("embedding_length", 4096), ("attention.head_count", 32)];
        let equal = layers(&[&base[..], &[("attention.head_count_kv", 8)]].concat());
        assert_eq!(
            cut("blk.0.attn_qkv.weight", Part::AttnQkv, &equal, 4096 + 2 * 1024).unwrap(),
            [Segment { size: 4096, repeats: 1 }, Segment { size: 1024, repeats: 2 }]
        );
        // MiMo's shape: 192-wide keys, 128-wide values.
        let mimo = layers(
            &[
                &base[..],
                &[("attention.head_count_kv", 4), ("attention.key_length", 192), ("attention.value_length", 128)],
            ]
            .concat(),
        );
        let q = 32 * 192;
        assert_eq!(
            cut("blk.0.attn_qkv.weight", Part::AttnQkv, &mimo, q + 4 * 192 + 4 * 128).unwrap(),
            [Segment { size: q, repeats: 1 }, Segment { size: 768, repeats: 1 }, Segment { size: 512, repeats: 1 }]
        );
        let wrong = cut("blk.0.attn_qkv.weight", Part::AttnQkv, &equal, 4096).unwrap_err().to_string();
        assert!(wrong.contains("blk.0.attn_qkv.weight") && wrong.contains("Q 4096 + K 1024 + V 1024"), "{wrong}");
    }

    /// A Qwen3.5-like layer 0 (recurrent) and 1 (full attention): 32-wide
    /// heads, 8 key heads and `value_heads` value heads in the mixer.
    fn hybrid(value_heads: u32, group_count: u32) -> Layers {
        let mut m = Metadata::default();
        let keys = [
            ("block_count", 2),
            ("embedding_length", 16),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 2),
            ("attention.key_length", 32),
            ("attention.value_length", 32),
            ("full_attention_interval", 2),
            ("ssm.state_size", 32),
            ("ssm.group_count", group_count),
            ("ssm.time_step_rank", value_heads),
        ];
        for (k, v) in keys {
            m.set(&format!("t.{k}"), Value::U32(v));
        }
        Layers::read(&m, "t", LayerKinds::LinearAttention).unwrap()
    }

    fn gated(
        arch: &str,
        name: &str,
        part: Part,
        layers: &Layers,
        il: usize,
        extent: u64,
    ) -> Result<Vec<Segment>, SplitError> {
        segments(&Place { name, part, arch, layers, il, extent })
    }

    #[test]
    fn gated_mixers_cut_value_heads_after_or_among_the_key_heads() {
        let layers = hybrid(16, 8);
        let (key, value) = (256, 512);
        let qkv = 2 * key + value;
        // Qwen3-Next: Q and K, then V in one piece.
        assert_eq!(
            gated("qwen3next", "blk.0.attn_qkv.weight", Part::AttnQkv, &layers, 0, qkv).unwrap(),
            [Segment { size: key, repeats: 2 }, Segment { size: value, repeats: 1 }]
        );
        // Qwen3.5: every piece key_dim wide, two value runs a key head.
        assert_eq!(
            gated("qwen35", "blk.0.ssm_conv1d.weight", Part::SsmConv1d, &layers, 0, qkv).unwrap(),
            [Segment { size: key, repeats: 4 }]
        );
        assert_eq!(
            gated("qwen35", "blk.0.ssm_out.weight", Part::SsmOut, &layers, 0, value).unwrap(),
            [Segment { size: key, repeats: 2 }]
        );
        assert_eq!(
            gated("qwen35", "blk.0.ssm_a", Part::SsmA, &layers, 0, 16).unwrap(),
            [Segment { size: 8, repeats: 2 }]
        );
        // Full attention: Q with its gate, then K and V.
        assert_eq!(
            gated("qwen35", "blk.1.attn_qkv.weight", Part::AttnQkv, &layers, 1, 256 + 2 * 64).unwrap(),
            [Segment { size: 256, repeats: 1 }, Segment { size: 64, repeats: 2 }]
        );
    }

    #[test]
    fn gated_mixers_whose_keys_do_not_add_up_are_refused_by_name() {
        let err = gated("qwen35", "blk.0.attn_qkv.weight", Part::AttnQkv, &hybrid(16, 0), 0, 1024).unwrap_err();
        assert!(err.to_string().starts_with("qwen35.ssm.group_count: is 0"), "{err}");
        let err = gated("qwen35", "blk.0.attn_qkv.weight", Part::AttnQkv, &hybrid(16, 8), 0, 1000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "blk.0.attn_qkv.weight is 1000 wide on its split axis, but Q and K of 256 each + V 512 = 1024"
        );
        // Widths past u64 (a u32 state size times a u32 head count, doubled)
        // are refused like any other mismatch.
        let mut huge = hybrid(16, 8);
        huge.ssm.d_state = u64::from(u32::MAX);
        huge.ssm.n_group = u64::from(u32::MAX);
        let err = gated("qwen3next", "blk.0.attn_qkv.weight", Part::AttnQkv, &huge, 0, 1024).unwrap_err();
        assert!(err.to_string().starts_with("blk.0.attn_qkv.weight is 1024 wide"), "{err}");
        // 16 value heads over 3 key heads: the pieces cannot make the tensor.
        let err = gated("qwen35", "blk.0.ssm_out.weight", Part::SsmOut, &hybrid(16, 3), 0, 512).unwrap_err();
        assert_eq!(
            err.to_string(),
            "blk.0.ssm_out.weight is 512 wide on its split axis, but its pieces 96 × 5 make 480"
        );
    }
}
