//! 4-bit non-linear blocks: IQ4_NL (32 values, one f16 scale) and IQ4_XS
//! (256 values, an f16 super-scale and a 6-bit scale per 32). Both map each
//! 4-bit index through ggml's `kvalues_iq4nl` table, and both are encoded by
//! one search, ggml's `quantize_row_iq4_nl_impl`, which this file reproduces.

use bytemuck::{Pod, Zeroable};

use super::blocks::{BATCH, GROUP_MAX_EPS, KVALUES, NTRY, QK, zero_padded_batch};
use super::scalar::{F16, nearest_int};
use super::search::{Step, on_step, steps};
use super::simd::Level;
#[cfg(target_arch = "x86_64")]
use super::x86_search;
use crate::types::GgmlType;

const QK4_NL: usize = GgmlType::IQ4_NL.block_size() as usize;
const QK_K: usize = GgmlType::IQ4_XS.block_size() as usize;
/// Each scale, in either type, covers this many values.
const SUB_BLOCK: usize = 32;

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

#[inline(always)]
pub fn dequantize_iq4_nl(level: Level, src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq4Nl] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK4_NL)) {
        decode_sub_block(level, b.d.to_f32(), &b.qs, y);
    }
}

#[inline(always)]
pub fn dequantize_iq4_xs(level: Level, src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq4Xs] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let scales_h = u16::from_le_bytes(b.scales_h);
        for (ib, (ys, qs)) in y.chunks_exact_mut(SUB_BLOCK).zip(b.qs.chunks_exact(SUB_BLOCK / 2)).enumerate() {
            let ls =
                i32::from((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (i32::from((scales_h >> (2 * ib)) & 3) << 4);
            let qs: &[u8; SUB_BLOCK / 2] = qs.try_into().expect("chunks_exact gives half a sub-block");
            decode_sub_block(level, d * (ls - 32) as f32, qs, ys);
        }
    }
}

/// One 32-value sub-block: `d · KVALUES[index]`, low nibbles first.
#[inline(always)]
fn decode_sub_block(level: Level, d: f32, qs: &[u8; SUB_BLOCK / 2], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: callers pass a vector level only where the machine has it.
        return unsafe { super::x86::decode_nibble_table_avx2(&KVALUES, qs, d, y) };
    }
    let _ = level;
    for (j, &q) in qs.iter().enumerate() {
        y[j] = d * f32::from(KVALUES[usize::from(q & 0xf)]);
        y[j + SUB_BLOCK / 2] = d * f32::from(KVALUES[usize::from(q >> 4)]);
    }
}

pub fn quantize_iq4_nl(level: Level, src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let blocks: &mut [BlockIq4Nl] = bytemuck::cast_slice_mut(dst);
    let mut weights = vec![0.0f32; src.len()];
    for (ibl, (x, w)) in src.chunks_exact(QK4_NL).zip(weights.chunks_exact_mut(QK4_NL)).enumerate() {
        super_block_weights(x, importance.map(|qw| &qw[ibl * QK4_NL..][..QK4_NL]), w);
    }
    let mut scales = vec![0.0f32; blocks.len()];
    sub_block_scales(level, src, &weights, &mut scales);
    for ((b, x), &scale) in blocks.iter_mut().zip(src.chunks_exact(QK4_NL)).zip(&scales) {
        let (d, _) = finish_super_block(level, x, &[scale], &mut b.qs, &mut []);
        b.d = d;
    }
}

pub fn quantize_iq4_xs(level: Level, src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let blocks: &mut [BlockIq4Xs] = bytemuck::cast_slice_mut(dst);
    let mut weights = [0.0f32; QK_K];
    let mut scales = [0.0f32; QK_K / SUB_BLOCK];
    for (ibl, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        super_block_weights(x, importance.map(|qw| &qw[ibl * QK_K..][..QK_K]), &mut weights);
        sub_block_scales(level, x, &weights, &mut scales);
        let (d, scales_h) = finish_super_block(level, x, &scales, &mut b.qs, &mut b.scales_l);
        b.d = d;
        b.scales_h = scales_h.to_le_bytes();
    }
}

/// `best_index_int8(KVALUES, scale · x[j])` for one 32-value sub-block,
/// with the vector kernel of `level` where the machine has it.
fn sub_block_indices(level: Level, scale: f32, x: &[f32], indices: &mut [u8]) {
    // The widest step over 32 lanes picks the width; the scalar one does all 32.
    let (_, step) = steps(level, 32).next().expect("32 values make a step");
    on_step!(step, iq4_indices(scale, x, indices), {
        for (l, &v) in indices.iter_mut().zip(x) {
            *l = best_index_int8(&KVALUES, scale * v) as u8;
        }
    })
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

/// The weight of each value of a super-block `x` (32 values for IQ4_NL,
/// 256 for IQ4_XS): the importance scaled by `sqrt(σ² + x²)`, or `x²`
/// without importance.
fn super_block_weights(x: &[f32], quant_weights: Option<&[f32]>, weights: &mut [f32]) {
    match quant_weights {
        Some(qw) => {
            // ggml's variance: twice the mean square of the super-block.
            let mut sigma2 = 0.0f32;
            for &v in x {
                sigma2 += v * v;
            }
            sigma2 *= 2.0 / x.len() as f32;
            for ((w, &q), &v) in weights.iter_mut().zip(qw).zip(x) {
                *w = q * (sigma2 + v * v).sqrt();
            }
        }
        None => {
            for (w, &v) in weights.iter_mut().zip(x) {
                *w = v * v;
            }
        }
    }
}

/// The scale search of ggml's `quantize_row_iq4_nl_impl` (`ntry = 7`) for
/// each 32-value sub-block of `x`, with the vector kernels of `level` where
/// the machine has them: [`BATCH`] sub-blocks at a time, a row's last ones
/// padded with zero sub-blocks (whose lanes never mix with the others).
fn sub_block_scales(level: Level, x: &[f32], weights: &[f32], scales: &mut [f32]) {
    const _: () = assert!(SUB_BLOCK == QK, "zero_padded_batch pads 32-value blocks");
    let span = SUB_BLOCK * BATCH;
    for ((x, w), s) in x.chunks(span).zip(weights.chunks(span)).zip(scales.chunks_mut(BATCH)) {
        let mut found = [0.0f32; BATCH];
        match x.len() == span {
            true => batch_scales(level, x, w, &mut found),
            false => batch_scales(level, &zero_padded_batch(x), &zero_padded_batch(w), &mut found),
        }
        s.copy_from_slice(&found[..s.len()]);
    }
}

/// [`sub_block_scale`] of each of [`BATCH`] sub-blocks.
fn batch_scales(level: Level, x: &[f32], weights: &[f32], scales: &mut [f32; BATCH]) {
    for (g, step) in steps(level, BATCH) {
        let (x, weights, scales) = (&x[g * SUB_BLOCK..], &weights[g * SUB_BLOCK..], &mut scales[g..]);
        on_step!(
            step,
            iq4_scales(x, weights, scales),
            scales[0] = sub_block_scale(&x[..SUB_BLOCK], &weights[..SUB_BLOCK])
        );
    }
}

/// One sub-block's scale search: the value of largest magnitude mapped to
/// the table's most negative entry, then `NTRY` scales either side, keeping
/// the one of least weighted error.
pub(super) fn sub_block_scale(xb: &[f32], weight: &[f32]) -> f32 {
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
        return 0.0;
    }
    // First guess: `max` lands on the table's most negative entry (the
    // table reaches further below zero than above, hence the sign).
    let d0 = -max / f32::from(KVALUES[0]);
    let (sumqx, sumq2) = weighted_sums(xb, weight, 1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES[0])) as f32 / max;
        let (sumqx, sumq2) = weighted_sums(xb, weight, id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Weighted sums of a sub-block quantized with inverse scale `id`:
/// (Σ w·q·x, Σ w·q²), accumulated in ggml's order.
fn weighted_sums(xb: &[f32], weight: &[f32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (&x, &w) in xb.iter().zip(weight) {
        let q = f32::from(KVALUES[best_index_int8(&KVALUES, id * x)]);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The rest of `quantize_row_iq4_nl_impl` for one super-block `x`, given its
/// sub-block `scales`: writes the packed indices to `q4` and, with more than
/// one sub-block, the low scale bits to `scales_l`; returns the block's f16
/// scale and the high scale bits.
fn finish_super_block(level: Level, x: &[f32], scales: &[f32], q4: &mut [u8], scales_l: &mut [u8]) -> (F16, u16) {
    let n = x.len();
    let nb = n / SUB_BLOCK;
    let mut indices = [0u8; QK_K];
    let indices = &mut indices[..n];

    let dh;
    let mut scales_h = 0u16;
    if nb > 1 {
        // The signed sub-block scale of largest magnitude (first one wins a tie).
        let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
        for &d in scales {
            if d.abs() > amax_scale {
                amax_scale = d.abs();
                max_scale = d;
            }
        }
        // Sub-block scales become 6-bit multiples of one f16 scale; the
        // indices are then chosen again against the rounded scales.
        let d = -max_scale / 32.0;
        dh = F16::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            sub_block_indices(
                level,
                idl,
                &x[ib * SUB_BLOCK..][..SUB_BLOCK],
                &mut indices[ib * SUB_BLOCK..][..SUB_BLOCK],
            );
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
        sub_block_indices(level, id, x, indices);
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
        quantize_iq4_nl(Level::Scalar, &src, None, &mut nl);
        let mut xs = vec![0u8; GgmlType::IQ4_XS.type_size() as usize];
        quantize_iq4_xs(Level::Scalar, &src, None, &mut xs);
        let mut out = [1.0f32; QK_K];
        dequantize_iq4_nl(Level::Scalar, &nl, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
        let mut out = [1.0f32; QK_K];
        dequantize_iq4_xs(Level::Scalar, &xs, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }
}
