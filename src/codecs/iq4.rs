//! 4-bit non-linear blocks: IQ4_NL (32 values, one f16 scale) and IQ4_XS
//! (256 values, an f16 super-scale and a 6-bit scale per 32). Both map each
//! 4-bit index through ggml's `kvalues_iq4nl` table, and both are encoded by
//! one search, ggml's `quantize_row_iq4_nl_impl`, which this file reproduces.

use bytemuck::{Pod, Zeroable};

use super::scalar::{F16, nearest_int};
use crate::types::GgmlType;

const QK4_NL: usize = GgmlType::IQ4_NL.block_size() as usize;
const QK_K: usize = GgmlType::IQ4_XS.block_size() as usize;
/// Each scale, in either type, covers this many values.
const SUB_BLOCK: usize = 32;

/// ggml's `kvalues_iq4nl`.
const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// ggml's `GROUP_MAX_EPS`: a sub-block whose largest magnitude is below this
/// gets scale zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Scales tried either side of the first guess; `quantize_iq4_nl` and
/// `quantize_iq4_xs` both pass 7, with or without importance weights (only
/// the `_ref` row functions pass -1, and ggml's chunk quantizer never calls those).
const NTRY: i32 = 7;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockIq4Nl {
    d: F16,
    qs: [u8; QK4_NL / 2],
}
const _: () = assert!(size_of::<BlockIq4Nl>() as u64 == GgmlType::IQ4_NL.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockIq4Xs {
    d: F16,
    /// Two high bits of each sub-block scale, little-endian u16.
    scales_h: [u8; 2],
    /// Four low bits of each sub-block scale, two per byte.
    scales_l: [u8; QK_K / 64],
    qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockIq4Xs>() as u64 == GgmlType::IQ4_XS.type_size());

pub fn dequantize_iq4_nl(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq4Nl] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK4_NL)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = d * f32::from(KVALUES[usize::from(q & 0xf)]);
            y[j + QK4_NL / 2] = d * f32::from(KVALUES[usize::from(q >> 4)]);
        }
    }
}

pub fn dequantize_iq4_xs(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq4Xs] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let scales_h = u16::from_le_bytes(b.scales_h);
        for (ib, (ys, qs)) in y.chunks_exact_mut(SUB_BLOCK).zip(b.qs.chunks_exact(SUB_BLOCK / 2)).enumerate() {
            let ls =
                i32::from((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (i32::from((scales_h >> (2 * ib)) & 3) << 4);
            let dl = d * (ls - 32) as f32;
            for (j, &q) in qs.iter().enumerate() {
                ys[j] = dl * f32::from(KVALUES[usize::from(q & 0xf)]);
                ys[j + SUB_BLOCK / 2] = dl * f32::from(KVALUES[usize::from(q >> 4)]);
            }
        }
    }
}

pub fn quantize_iq4_nl(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let blocks: &mut [BlockIq4Nl] = bytemuck::cast_slice_mut(dst);
    for (ibl, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK4_NL)).enumerate() {
        let qw = importance.map(|w| &w[ibl * QK4_NL..][..QK4_NL]);
        let (d, _) = quantize_super_block(x, qw, &mut b.qs, &mut []);
        b.d = d;
    }
}

pub fn quantize_iq4_xs(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let blocks: &mut [BlockIq4Xs] = bytemuck::cast_slice_mut(dst);
    for (ibl, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        let qw = importance.map(|w| &w[ibl * QK_K..][..QK_K]);
        let (d, scales_h) = quantize_super_block(x, qw, &mut b.qs, &mut b.scales_l);
        b.d = d;
        b.scales_h = scales_h.to_le_bytes();
    }
}

/// ggml's `best_index_int8`: the index of the table value nearest to `x`
/// (the upper one on a tie), by bisection over the sorted table.
fn best_index_int8(values: &[i8], x: f32) -> usize {
    let n = values.len();
    let val = |i: usize| f32::from(values[i]);
    if x <= val(0) {
        return 0;
    }
    if x >= val(n - 1) {
        return n - 1;
    }
    let (mut ml, mut mu) = (0, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - val(mu - 1) < val(mu) - x { mu - 1 } else { mu }
}

/// Weighted sums of a sub-block quantized with inverse scale `id`:
/// (Σ w·q·x, Σ w·q²), accumulated in ggml's order, plus each value's index.
fn weighted_sums(xb: &[f32], weight: &[f32], id: f32, mut indices: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (j, (&x, &w)) in xb.iter().zip(weight).enumerate() {
        let l = best_index_int8(&KVALUES, id * x);
        if let Some(indices) = indices.as_deref_mut() {
            indices[j] = l as u8;
        }
        let q = f32::from(KVALUES[l]);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// ggml's `quantize_row_iq4_nl_impl` with `ntry = 7` for one super-block
/// `x` (32 values for IQ4_NL, 256 for IQ4_XS). Writes the packed indices to
/// `q4` and, with more than one sub-block, the low scale bits to `scales_l`;
/// returns the block's f16 scale and the high scale bits.
fn quantize_super_block(x: &[f32], quant_weights: Option<&[f32]>, q4: &mut [u8], scales_l: &mut [u8]) -> (F16, u16) {
    let n = x.len();
    let nb = n / SUB_BLOCK;

    // The variance that importance weights are scaled against (ggml computes
    // it even when there are no weights).
    let mut sigma2 = 0.0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / n as f32;

    let mut indices = [0u8; QK_K];
    let indices = &mut indices[..n];
    let mut scales = [0.0f32; QK_K / SUB_BLOCK];
    let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
    let v0 = f32::from(KVALUES[0]);

    for ib in 0..nb {
        let xb = &x[ib * SUB_BLOCK..][..SUB_BLOCK];
        let mut weight = [0.0f32; SUB_BLOCK];
        match quant_weights {
            Some(qw) => {
                let qw = &qw[ib * SUB_BLOCK..][..SUB_BLOCK];
                for j in 0..SUB_BLOCK {
                    weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..SUB_BLOCK {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        // The signed value of largest magnitude (first one wins a tie).
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        // First guess: `max` lands on the table's most negative entry (the
        // table reaches further below zero than above, hence the sign).
        let d0 = -max / v0;
        let (sumqx, sumq2) = weighted_sums(xb, &weight, 1.0 / d0, Some(&mut indices[ib * SUB_BLOCK..][..SUB_BLOCK]));
        let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            let id = (itry + i32::from(KVALUES[0])) as f32 / max;
            let (sumqx, sumq2) = weighted_sums(xb, &weight, id, None);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    let dh;
    let mut scales_h = 0u16;
    if nb > 1 {
        // Sub-block scales become 6-bit multiples of one f16 scale; the
        // indices are then chosen again against the rounded scales.
        let d = -max_scale / 32.0;
        dh = F16::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[ib * SUB_BLOCK..][..SUB_BLOCK];
            for (lj, &xj) in indices[ib * SUB_BLOCK..][..SUB_BLOCK].iter_mut().zip(xb) {
                *lj = best_index_int8(&KVALUES, idl * xj) as u8;
            }
            let l = (l + 32) as u8;
            let (l_l, l_h) = (l & 0xf, l >> 4);
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            scales_h |= u16::from(l_h) << (2 * (ib % 8));
        }
    } else {
        // One sub-block: its scale is stored as is, and the indices are
        // chosen again against the unrounded scale.
        dh = F16::from_f32(scales[0]);
        let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
        for (lj, &xj) in indices.iter_mut().zip(x) {
            *lj = best_index_int8(&KVALUES, id * xj) as u8;
        }
    }

    for (q, l) in q4.chunks_exact_mut(SUB_BLOCK / 2).zip(indices.chunks_exact(SUB_BLOCK)) {
        for j in 0..SUB_BLOCK / 2 {
            q[j] = l[j] | (l[j + SUB_BLOCK / 2] << 4);
        }
    }
    (dh, scales_h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_picks_nearest_and_upper_on_tie() {
        assert_eq!(best_index_int8(&KVALUES, -1000.0), 0);
        assert_eq!(best_index_int8(&KVALUES, 1000.0), 15);
        assert_eq!(best_index_int8(&KVALUES, 0.0), 8);
        // -4.5 is equidistant from -10 and 1: ggml takes the upper index.
        assert_eq!(best_index_int8(&KVALUES, -4.5), 8);
        assert_eq!(best_index_int8(&KVALUES, -4.6), 7);
        assert_eq!(best_index_int8(&KVALUES, 70.0), 13);
    }

    #[test]
    fn zero_row_round_trips_to_zero() {
        let src = [0.0f32; QK_K];
        let mut nl = vec![0u8; GgmlType::IQ4_NL.row_size(QK_K as u64).unwrap() as usize];
        quantize_iq4_nl(&src, None, &mut nl);
        let mut xs = vec![0u8; GgmlType::IQ4_XS.type_size() as usize];
        quantize_iq4_xs(&src, None, &mut xs);
        let mut out = [1.0f32; QK_K];
        dequantize_iq4_nl(&nl, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
        let mut out = [1.0f32; QK_K];
        dequantize_iq4_xs(&xs, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }
}
