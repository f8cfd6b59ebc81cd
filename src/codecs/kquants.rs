//! K-quants: 256-element super-blocks of 16- or 32-element groups, each
//! group with its own quantized scale (and minimum): Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K, and Q8_K (the 8-bit intermediate ggml uses for dot products).
//!
//! Without importance weights each type runs ggml's `quantize_row_*_ref`;
//! with them, ggml's `quantize_row_*_impl`, a different search (weights
//! derived from the importance and the row's variance, scales themselves
//! quantized by a weighted search), not just a weighted error.

use bytemuck::{Pod, Zeroable};

use super::blocks::{GROUP_MAX_EPS, MinSearch};
use super::scalar::{F16, nearest_int};
use super::search::{
    QxWeighting, make_q3_quants_groups, make_qkx_quants_groups, make_qp_quants, make_qx_quants, make_qx_quants_groups,
    requantize_groups, signed_absmax_and_magnitude,
};
use super::simd::Level;
use crate::types::GgmlType;

const QK_K: usize = GgmlType::Q4_K.block_size() as usize;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    scales: [u8; QK_K / 16],
    qs: [u8; QK_K / 4],
    d: F16,
    dmin: F16,
}
const _: () = assert!(size_of::<BlockQ2K>() as u64 == GgmlType::Q2_K.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    hmask: [u8; QK_K / 8],
    qs: [u8; QK_K / 4],
    scales: [u8; 12],
    d: F16,
}
const _: () = assert!(size_of::<BlockQ3K>() as u64 == GgmlType::Q3_K.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    d: F16,
    dmin: F16,
    scales: [u8; 12],
    qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ4K>() as u64 == GgmlType::Q4_K.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    d: F16,
    dmin: F16,
    scales: [u8; 12],
    qh: [u8; QK_K / 8],
    qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ5K>() as u64 == GgmlType::Q5_K.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    ql: [u8; QK_K / 2],
    qh: [u8; QK_K / 4],
    scales: [i8; QK_K / 16],
    d: F16,
}
const _: () = assert!(size_of::<BlockQ6K>() as u64 == GgmlType::Q6_K.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    d: [u8; 4],
    qs: [i8; QK_K],
    bsums: [[u8; 2]; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8K>() as u64 == GgmlType::Q8_K.type_size());

// ---------------------------------------------------------------- decoding

#[inline(always)]
pub fn dequantize_q2_k(blocks: &[BlockQ2K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        let mut group = 0;
        for (half, q) in b.qs.chunks_exact(32).enumerate() {
            for shift in 0..4 {
                for part in 0..2 {
                    let sc = b.scales[group];
                    group += 1;
                    let dl = d * f32::from(sc & 0xf);
                    let ml = min * f32::from(sc >> 4);
                    let start = half * 128 + shift * 32 + part * 16;
                    for l in 0..16 {
                        let level = (q[l + part * 16] >> (2 * shift)) & 3;
                        y[start + l] = dl * f32::from(level) - ml;
                    }
                }
            }
        }
    }
}

/// The sixteen 6-bit Q3_K group scales, unpacked and centred.
fn q3_k_scales(packed: &[u8; 12]) -> [i8; 16] {
    let mut scales = [0i8; 16];
    for (j, s) in scales.iter_mut().enumerate() {
        let low = if j < 8 { packed[j] & 0xf } else { packed[j - 8] >> 4 };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        *s = (low | (high << 4)) as i8 - 32;
    }
    scales
}

#[inline(always)]
pub fn dequantize_q3_k(blocks: &[BlockQ3K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d_all = b.d.to_f32();
        let scales = q3_k_scales(&b.scales);
        let mut group = 0;
        let mut mask = 1u8;
        for (half, q) in b.qs.chunks_exact(32).enumerate() {
            for shift in 0..4 {
                for part in 0..2 {
                    let dl = d_all * f32::from(scales[group]);
                    group += 1;
                    let start = half * 128 + shift * 32 + part * 16;
                    for l in 0..16 {
                        let low = ((q[l + part * 16] >> (2 * shift)) & 3) as i8;
                        let high = if b.hmask[l + part * 16] & mask != 0 { 0 } else { 4 };
                        y[start + l] = dl * f32::from(low - high);
                    }
                }
                mask <<= 1;
            }
        }
    }
}

/// Scale and minimum of group `j` of a Q4_K/Q5_K block (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

#[inline(always)]
pub fn dequantize_q4_k(blocks: &[BlockQ4K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        for (pair, (q, y)) in b.qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * pair, &b.scales);
            let (sc2, m2) = scale_min_k4(2 * pair + 1, &b.scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            for l in 0..32 {
                y[l] = d1 * f32::from(q[l] & 0xf) - m1;
                y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

#[inline(always)]
pub fn dequantize_q5_k(blocks: &[BlockQ5K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        for (pair, (ql, y)) in b.qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * pair, &b.scales);
            let (sc2, m2) = scale_min_k4(2 * pair + 1, &b.scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
            for l in 0..32 {
                let h1 = if b.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if b.qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * f32::from((ql[l] & 0xf) + h1) - m1;
                y[l + 32] = d2 * f32::from((ql[l] >> 4) + h2) - m2;
            }
        }
    }
}

#[inline(always)]
pub fn dequantize_q6_k(blocks: &[BlockQ6K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for half in 0..2 {
            let ql = &b.ql[half * 64..][..64];
            let qh = &b.qh[half * 32..][..32];
            let sc = &b.scales[half * 8..][..8];
            let y = &mut y[half * 128..][..128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                y[l] = d * f32::from(sc[is]) * f32::from(q1);
                y[l + 32] = d * f32::from(sc[is + 2]) * f32::from(q2);
                y[l + 64] = d * f32::from(sc[is + 4]) * f32::from(q3);
                y[l + 96] = d * f32::from(sc[is + 6]) * f32::from(q4);
            }
        }
    }
}

pub fn dequantize_q8_k(blocks: &[BlockQ8K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes(b.d);
        for (q, v) in b.qs.iter().zip(y) {
            *v = d * f32::from(*q);
        }
    }
}

// ---------------------------------------------------------------- shared encoding steps

/// Packs 2-bit levels: byte `l` of each 32-byte quarter holds levels
/// `l`, `l+32`, `l+64`, `l+96` of its 128-element half.
fn pack_2bit(levels: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for (half, q) in qs.chunks_exact_mut(32).enumerate() {
        let l0 = half * 128;
        for (l, byte) in q.iter_mut().enumerate() {
            let at = |k: usize| levels[l0 + l + 32 * k];
            *byte = at(0) | (at(1) << 2) | (at(2) << 4) | (at(3) << 6);
        }
    }
}

/// Stores 8 six-bit scales and minimums in Q4_K/Q5_K's 12-byte layout.
fn pack_scales_k4(ls: &[u8; 8], lm: &[u8; 8], scales: &mut [u8; 12]) {
    for j in 0..8 {
        if j < 4 {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (ls[j] & 0xf) | ((lm[j] & 0xf) << 4);
            scales[j - 4] |= (ls[j] >> 4) << 6;
            scales[j] |= (lm[j] >> 4) << 6;
        }
    }
}

/// Requantizes every 32-element group with the block's final (f16-rounded)
/// scales and minimums, as both ggml paths do after choosing them.
fn requantize_k4(level: Level, x: &[f32], d: F16, dmin: F16, scales: &[u8; 12], nmax: i32, levels: &mut [u8; QK_K]) {
    let (mut dj, mut dm) = ([0.0f32; QK_K / 32], [0.0f32; QK_K / 32]);
    for (j, (dj, dm)) in dj.iter_mut().zip(&mut dm).enumerate() {
        let (sc, m) = scale_min_k4(j, scales);
        (*dj, *dm) = (d.to_f32() * f32::from(sc), dmin.to_f32() * f32::from(m));
    }
    requantize_groups(level, 32, x, &dj, Some(&dm), (0, nmax), 0, levels);
}

/// `sqrt(sum(x²) / 32)` plus |x|: the reference weights of Q4_K/Q5_K groups.
fn rms_plus_abs(x: &[f32], weights: &mut [f32]) {
    let sum_x2 = x.iter().fold(0.0f32, |s, v| s + v * v);
    let av_x = (sum_x2 / 32.0).sqrt();
    for (w, v) in weights.iter_mut().zip(x) {
        *w = av_x + v.abs();
    }
}

/// The importance-path weights of one group: `qw · sqrt(σ² + x²)`.
fn importance_weights(x: &[f32], qw: &[f32], sigma2: f32, weights: &mut [f32]) {
    for ((w, &v), &q) in weights.iter_mut().zip(x).zip(qw) {
        *w = q * (sigma2 + v * v).sqrt();
    }
}

fn sum_of_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |s, v| s + v * v)
}

fn sum(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |s, v| s + v)
}

const QKX3_SEARCH: MinSearch = MinSearch { rmin: -0.9, rdelta: 0.05, nstep: 36, use_mad: false };

// ---------------------------------------------------------------- Q2_K

/// Q2_K's sixteen group searches; returns the scales and minimums.
fn search_q2_k_groups(
    level: Level,
    x: &[f32],
    weights: &[f32; QK_K],
    levels: &mut [u8; QK_K],
    search: MinSearch,
    qkx3: bool,
) -> ([f32; 16], [f32; 16]) {
    let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
    make_qkx_quants_groups(level, 3, 16, x, weights, levels, search, qkx3, &mut scales, &mut mins);
    (scales, mins)
}

pub fn quantize_q2_k(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ2K]) {
    let mut levels = [0u8; QK_K];
    let mut weights = [0.0f32; QK_K];
    for (ib, (x, b)) in src.chunks_exact(QK_K).zip(blocks).enumerate() {
        let (dm, mm) = match importance {
            None => {
                let search = MinSearch { rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };
                for (w, v) in weights.iter_mut().zip(x) {
                    *w = v.abs();
                }
                let (scales, mins) = search_q2_k_groups(level, x, &weights, &mut levels, search, false);
                let max_scale = scales.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
                let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
                if max_scale > 0.0 {
                    let iscale = 15.0 / max_scale;
                    for (packed, &scale) in b.scales.iter_mut().zip(&scales) {
                        *packed = nearest_int(iscale * scale) as u8;
                    }
                    b.d = F16::from_f32(max_scale / 15.0);
                } else {
                    b.scales = [0; 16];
                    b.d = F16::from_f32(0.0);
                }
                if max_min > 0.0 {
                    let iscale = 15.0 / max_min;
                    for (packed, &min) in b.scales.iter_mut().zip(&mins) {
                        *packed |= (nearest_int(iscale * min) << 4) as u8;
                    }
                    b.dmin = F16::from_f32(max_min / 15.0);
                } else {
                    b.dmin = F16::from_f32(0.0);
                }
                (b.d.to_f32(), b.dmin.to_f32())
            }
            Some(qw) => {
                let qw = &qw[ib * QK_K..][..QK_K];
                let sigma2 = sum_of_squares(x) / QK_K as f32;
                let mut group_weight = [0.0f32; 16];
                for j in 0..16 {
                    let w = &mut weights[16 * j..][..16];
                    importance_weights(&x[16 * j..][..16], &qw[16 * j..][..16], sigma2, w);
                    group_weight[j] = sum(w);
                }
                let (scales, mins) = search_q2_k_groups(level, x, &weights, &mut levels, QKX3_SEARCH, true);
                let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
                let dm = make_qp_quants(15, &scales, &mut ls, &group_weight);
                let mm = make_qp_quants(15, &mins, &mut lm, &group_weight);
                b.d = F16::from_f32(dm);
                b.dmin = F16::from_f32(mm);
                for j in 0..16 {
                    b.scales[j] = ls[j] | (lm[j] << 4);
                }
                (b.d.to_f32(), b.dmin.to_f32())
            }
        };
        for j in 0..16 {
            let d = dm * f32::from(b.scales[j] & 0xf);
            if d == 0.0 {
                continue;
            }
            let m = mm * f32::from(b.scales[j] >> 4);
            for ii in 0..16 {
                levels[16 * j + ii] = nearest_int((x[16 * j + ii] + m) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&levels, &mut b.qs);
    }
}

// ---------------------------------------------------------------- Q3_K

/// Stores sixteen 6-bit (already offset) scales in Q3_K's 12-byte layout.
fn pack_scales_q3(levels: impl Fn(usize) -> i32, scales: &mut [u8; 12]) {
    *scales = [0; 12];
    for j in 0..16 {
        let l = levels(j);
        if j < 8 {
            scales[j] = (l & 0xf) as u8;
        } else {
            scales[j - 8] |= ((l & 0xf) << 4) as u8;
        }
        scales[j % 4 + 8] |= ((l >> 4) << (2 * (j / 4))) as u8;
    }
}

/// Q3_K's group searches, like Q6_K's, run over two super-blocks at a time.
const Q3_RUN: usize = 2 * QK_K;

pub fn quantize_q3_k(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ3K]) {
    for ((run, x), blocks) in src.chunks(Q3_RUN).enumerate().zip(blocks.chunks_mut(Q3_RUN / QK_K)) {
        let mut run_levels = [0i8; Q3_RUN];
        let mut run_scales = [0.0f32; Q3_RUN / 16];
        let mut group_weight = [0.0f32; Q3_RUN / 16];
        let (levels, scales) = (&mut run_levels[..x.len()], &mut run_scales[..x.len() / 16]);
        match importance {
            None => make_q3_quants_groups(level, 4, 16, x, levels, scales),
            Some(qw) => {
                let qw = &qw[run * Q3_RUN..][..x.len()];
                let mut weights = [0.0f32; Q3_RUN];
                for (k, x) in x.chunks_exact(QK_K).enumerate() {
                    let sigma2 = 2.0 * sum_of_squares(x) / QK_K as f32;
                    for j in 0..16 {
                        let at = QK_K * k + 16 * j;
                        let w = &mut weights[at..][..16];
                        importance_weights(&x[16 * j..][..16], &qw[at..][..16], sigma2, w);
                        group_weight[16 * k + j] = sum(w);
                    }
                }
                make_qx_quants_groups(level, 4, 16, x, levels, Some(&weights[..x.len()]), scales);
            }
        }
        let supers = x.chunks_exact(QK_K).zip(run_levels.chunks_exact_mut(QK_K));
        let supers = supers.zip(run_scales.chunks_exact(16)).zip(group_weight.chunks_exact(16));
        for ((((x, levels), scales), group_weight), b) in supers.zip(blocks) {
            match importance {
                None => {
                    let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
                    for &scale in scales {
                        if scale.abs() > amax {
                            amax = scale.abs();
                            max_scale = scale;
                        }
                    }
                    if max_scale != 0.0 {
                        let iscale = -32.0 / max_scale;
                        let scale_level =
                            |j: usize| i32::from(nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32;
                        pack_scales_q3(scale_level, &mut b.scales);
                        b.d = F16::from_f32(1.0 / iscale);
                    } else {
                        b.scales = [0; 12];
                        b.d = F16::from_f32(0.0);
                    }
                }
                Some(_) => {
                    let mut ls = [0i8; 16];
                    let d_block = make_qx_quants(32, scales, &mut ls, QxWeighting::Squared, Some(group_weight));
                    pack_scales_q3(|j| i32::from(ls[j]), &mut b.scales);
                    b.d = F16::from_f32(d_block);
                }
            }
            let group_scales = q3_k_scales(&b.scales);
            let d: [f32; 16] = std::array::from_fn(|j| b.d.to_f32() * f32::from(group_scales[j]));
            requantize_groups(level, 16, x, &d, None, (-4, 3), 4, bytemuck::cast_slice_mut(levels));
            b.hmask = [0; QK_K / 8];
            let mut unsigned = [0u8; QK_K];
            for (j, (&l, u)) in levels.iter().zip(unsigned.iter_mut()).enumerate() {
                let mut l = l as u8;
                if l > 3 {
                    b.hmask[j % 32] |= 1 << (j / 32);
                    l -= 4;
                }
                *u = l;
            }
            pack_2bit(&unsigned, &mut b.qs);
        }
    }
}

// ---------------------------------------------------------------- Q4_K and Q5_K

/// Four super-blocks: the group searches take up to 32 groups a call (two
/// AVX-512 vectors side by side).
const K4_RUN: usize = 4 * QK_K;

/// Q4_K's (`nmax` 15) and Q5_K's (`nmax` 31) choices for each super-block of
/// `src` — packed group scales and minimums, their f16 super-scales, the
/// levels requantized against them — handed to `pack` with the block's
/// index. The group searches run over [`K4_RUN`] values at a time.
fn quantize_k4(
    level: Level,
    src: &[f32],
    importance: Option<&[f32]>,
    nmax: i32,
    reference_search: MinSearch,
    mut pack: impl FnMut(usize, F16, F16, [u8; 12], &[u8; QK_K]),
) {
    let (search, qkx3) = if importance.is_some() { (QKX3_SEARCH, true) } else { (reference_search, false) };
    for (run, x) in src.chunks(K4_RUN).enumerate() {
        let mut weights = [0.0f32; K4_RUN];
        let mut group_weight = [0.0f32; K4_RUN / 32];
        for (k, (x, w)) in x.chunks_exact(QK_K).zip(weights.chunks_exact_mut(QK_K)).enumerate() {
            match importance {
                None => {
                    for (x, w) in x.chunks_exact(32).zip(w.chunks_exact_mut(32)) {
                        rms_plus_abs(x, w);
                    }
                }
                Some(qw) => {
                    let qw = &qw[(run * K4_RUN / QK_K + k) * QK_K..][..QK_K];
                    let sigma2 = 2.0 * sum_of_squares(x) / QK_K as f32;
                    for (j, gw) in group_weight[8 * k..][..8].iter_mut().enumerate() {
                        let w = &mut w[32 * j..][..32];
                        importance_weights(&x[32 * j..][..32], &qw[32 * j..][..32], sigma2, w);
                        *gw = sum(w);
                    }
                }
            }
        }
        let groups = x.len() / 32;
        let (mut scales, mut mins) = ([0.0f32; K4_RUN / 32], [0.0f32; K4_RUN / 32]);
        let mut run_levels = [0u8; K4_RUN];
        make_qkx_quants_groups(
            level,
            nmax,
            32,
            x,
            &weights[..x.len()],
            &mut run_levels[..x.len()],
            search,
            qkx3,
            &mut scales[..groups],
            &mut mins[..groups],
        );
        for (k, x) in x.chunks_exact(QK_K).enumerate() {
            let (scales, mins) = (&scales[8 * k..][..8], &mins[8 * k..][..8]);
            let mut packed = [0u8; 12];
            let (d, dmin) = match importance {
                None => reference_scales_k4(scales, mins, &mut packed),
                Some(_) => weighted_scales_k4(scales, mins, &group_weight[8 * k..][..8], &mut packed),
            };
            let mut levels: [u8; QK_K] = run_levels[k * QK_K..][..QK_K].try_into().expect("a super-block");
            requantize_k4(level, x, d, dmin, &packed, nmax, &mut levels);
            pack(run * K4_RUN / QK_K + k, d, dmin, packed, &levels);
        }
    }
}

/// The reference path's 6-bit group scales and minimums: each the group's
/// share of the largest.
fn reference_scales_k4(scales: &[f32], mins: &[f32], packed: &mut [u8; 12]) -> (F16, F16) {
    let max_scale = scales.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    pack_scales_k4(&ls, &lm, packed);
    (F16::from_f32(max_scale / 63.0), F16::from_f32(max_min / 63.0))
}

/// The importance path's: the scales and minimums themselves quantized by
/// the weighted search, each group weighted by its weights' sum.
fn weighted_scales_k4(scales: &[f32], mins: &[f32], group_weight: &[f32], packed: &mut [u8; 12]) -> (F16, F16) {
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d_block = make_qp_quants(63, scales, &mut ls, group_weight);
    let m_block = make_qp_quants(63, mins, &mut lm, group_weight);
    for j in 0..8 {
        ls[j] = ls[j].min(63);
        lm[j] = lm[j].min(63);
    }
    pack_scales_k4(&ls, &lm, packed);
    (F16::from_f32(d_block), F16::from_f32(m_block))
}

pub fn quantize_q4_k(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ4K]) {
    let search = MinSearch { rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
    quantize_k4(level, src, importance, 15, search, |ib, d, dmin, scales, levels| {
        let b = &mut blocks[ib];
        (b.d, b.dmin, b.scales) = (d, dmin, scales);
        for (half, q) in b.qs.chunks_exact_mut(32).enumerate() {
            for (l, byte) in q.iter_mut().enumerate() {
                *byte = levels[64 * half + l] | (levels[64 * half + l + 32] << 4);
            }
        }
    });
}

pub fn quantize_q5_k(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ5K]) {
    let search = MinSearch { rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: false };
    quantize_k4(level, src, importance, 31, search, |ib, d, dmin, scales, levels| {
        let b = &mut blocks[ib];
        (b.d, b.dmin, b.scales) = (d, dmin, scales);
        b.qh = [0; QK_K / 8];
        for (pair, ql) in b.qs.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
            for (j, byte) in ql.iter_mut().enumerate() {
                let mut l1 = levels[64 * pair + j];
                if l1 > 15 {
                    l1 -= 16;
                    b.qh[j] |= m1;
                }
                let mut l2 = levels[64 * pair + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    b.qh[j] |= m2;
                }
                *byte = l1 | (l2 << 4);
            }
        }
    });
}

// ---------------------------------------------------------------- Q6_K

/// Q6_K's group searches run over two super-blocks at a time: 32 groups, the
/// widest step of the batched searches.
const Q6_RUN: usize = 2 * QK_K;

pub fn quantize_q6_k(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ6K]) {
    for ((run, x), blocks) in src.chunks(Q6_RUN).enumerate().zip(blocks.chunks_mut(Q6_RUN / QK_K)) {
        let mut run_levels = [0i8; Q6_RUN];
        let mut run_scales = [0.0f32; Q6_RUN / 16];
        // The importance path passes the raw importance as weights.
        let qw = importance.map(|w| &w[run * Q6_RUN..][..x.len()]);
        make_qx_quants_groups(level, 32, 16, x, &mut run_levels[..x.len()], qw, &mut run_scales[..x.len() / 16]);
        let supers = x.chunks_exact(QK_K).zip(run_levels.chunks_exact_mut(QK_K)).zip(run_scales.chunks_exact(16));
        for (((x, levels), scales), b) in supers.zip(blocks) {
            let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
            for &scale in scales {
                if scale.abs() > max_abs_scale {
                    max_abs_scale = scale.abs();
                    max_scale = scale;
                }
            }
            if max_abs_scale < GROUP_MAX_EPS {
                *b = BlockQ6K::zeroed();
                continue;
            }
            let iscale = -128.0 / max_scale;
            b.d = F16::from_f32(1.0 / iscale);
            for (packed, &scale) in b.scales.iter_mut().zip(scales) {
                *packed = nearest_int(iscale * scale).min(127) as i8;
            }
            let d: [f32; 16] = std::array::from_fn(|j| b.d.to_f32() * f32::from(b.scales[j]));
            requantize_groups(level, 16, x, &d, None, (-32, 31), 32, bytemuck::cast_slice_mut(levels));
            let levels: &[u8; QK_K] = bytemuck::cast_slice::<i8, u8>(&*levels).try_into().expect("a super-block");
            for half in 0..2 {
                let l0 = 128 * half;
                for l in 0..32 {
                    let at = |k: usize| levels[l0 + l + 32 * k];
                    b.ql[64 * half + l] = (at(0) & 0xf) | ((at(2) & 0xf) << 4);
                    b.ql[64 * half + l + 32] = (at(1) & 0xf) | ((at(3) & 0xf) << 4);
                    b.qh[32 * half + l] =
                        (at(0) >> 4) | ((at(1) >> 4) << 2) | ((at(2) >> 4) << 4) | ((at(3) >> 4) << 6);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- Q8_K

pub fn quantize_q8_k(src: &[f32], blocks: &mut [BlockQ8K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks) {
        let (max, amax) = signed_absmax_and_magnitude(x);
        if amax == 0.0 {
            *b = BlockQ8K::zeroed();
            continue;
        }
        // ggml uses -127 rather than -128 so its IQ2_XXS dot products stay simple.
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (sum, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            let total: i32 = group.iter().map(|&q| i32::from(q)).sum();
            *sum = (total as i16).to_le_bytes();
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
