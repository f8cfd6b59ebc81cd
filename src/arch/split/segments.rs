//! Stage 3, segmentation: the logical pieces of a tensor's split axis that
//! must each be cut on its own — Q, K and V of a fused QKV, gate and up of a
//! fused FFN — as (size, repeats): `repeats` consecutive pieces of `size`
//! are each cut the same way.

use super::SplitError;
use super::classify::Part;
use super::layers::Layers;

/// One run of equal pieces along the split axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Segment {
    pub size: u64,
    pub repeats: u32,
}

/// The segments of tensor `name` (class `part`, layer `il`) whose split
/// axis is `extent` long.
pub fn segments(name: &str, part: Part, layers: &Layers, il: usize, extent: u64) -> Result<Vec<Segment>, SplitError> {
    let seg = |size, repeats| Segment { size, repeats };
    match part {
        Part::AttnQkv | Part::AttnQkvBias => {
            let q = layers.n_head[il] * layers.n_embd_head_k(il);
            let k = layers.n_embd_k_gqa(il);
            let v = layers.n_embd_v_gqa(il);
            if extent != q + k + v {
                return Err(SplitError::tensor(
                    name,
                    format!("is {extent} wide on its split axis, but Q {q} + K {k} + V {v} = {}", q + k + v),
                ));
            }
            if k == v {
                Ok(vec![seg(q, 1), seg(k, 2)])
            } else {
                // Unequal K and V heads (MiMo: d_k 192, d_v 128): three pieces,
                // so every device gets whole heads of each.
                Ok(vec![seg(q, 1), seg(k, 1), seg(v, 1)])
            }
        }
        // Phi-3 stores gate and up side by side under the name `ffn_up`.
        Part::FfnUpOrGate { up: true } | Part::FfnUpOrGateBias { up: true } if extent == 2 * layers.n_ff[il] => {
            Ok(vec![seg(layers.n_ff[il], 2)])
        }
        Part::FfnGateUp => {
            let n_ff_exp = layers.n_ff_exp[il];
            if extent != 2 * n_ff_exp {
                return Err(SplitError::tensor(
                    name,
                    format!("is {extent} wide on its split axis, but gate and up of {n_ff_exp} make {}", 2 * n_ff_exp),
                ));
            }
            Ok(vec![seg(n_ff_exp, 2)])
        }
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

    #[test]
    fn fused_qkv_is_q_then_k_and_v_or_three_pieces_when_their_heads_differ() {
        let base = [("block_count", 1), ("embedding_length", 4096), ("attention.head_count", 32)];
        let equal = layers(&[&base[..], &[("attention.head_count_kv", 8)]].concat());
        assert_eq!(
            segments("blk.0.attn_qkv.weight", Part::AttnQkv, &equal, 0, 4096 + 2 * 1024).unwrap(),
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
            segments("blk.0.attn_qkv.weight", Part::AttnQkv, &mimo, 0, q + 4 * 192 + 4 * 128).unwrap(),
            [Segment { size: q, repeats: 1 }, Segment { size: 768, repeats: 1 }, Segment { size: 512, repeats: 1 }]
        );
        let wrong = segments("blk.0.attn_qkv.weight", Part::AttnQkv, &equal, 0, 4096).unwrap_err().to_string();
        assert!(wrong.contains("blk.0.attn_qkv.weight") && wrong.contains("Q 4096 + K 1024 + V 1024"), "{wrong}");
    }
}
