//! IQ1_S and IQ1_M encoded as ggml's `quantize_row_iq1_s_impl` and
//! `quantize_row_iq1_m_impl` encode them.
//!
//! Each value becomes one of three levels, `-1 ± δ`, `±δ`, `1 ± δ` (δ =
//! [`IQ1S_DELTA`], its sign chosen per group or half-group). With three
//! levels the best split of a group is found exhaustively: the values
//! sorted, every pair of boundaries scored from prefix sums. The levels of
//! each eight values must then be a point of the IQ1 lattice (or the best
//! of its neighbours).

use bytemuck::Zeroable;

use super::CodecError;
use super::iq_grid::{BlockIq1M, BlockIq1S};
use super::iq_lattice::{Grid, Lattice, Place};
use super::iq_tables::IQ1S_DELTA;
use super::scalar::{F16, f32_to_f16_bits, nearest_int};
use crate::types::GgmlType;

const QK_K: usize = 256;
const IQ1S_GROUP: usize = 32;
const IQ1M_GROUP: usize = 16;

/// The three levels with a positive delta, and with a negative one.
const X_P: [f32; 3] = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
const X_M: [f32; 3] = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];

/// ggml's `MAX(a, b)`: `a > b ? a : b`.
fn c_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// The group's positions in ascending order of value, equal values in
/// position order (glibc's `qsort` is a merge sort at this size, so stable;
/// its comparison calls -0 and 0 equal). NaN, which that comparison calls
/// equal to everything, sorts last here.
fn ascending<const N: usize>(xb: &[f32]) -> [usize; N] {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    let key = |v: f32| if v == 0.0 { 0.0 } else { v };
    order.sort_by(|&a, &b| key(xb[a]).total_cmp(&key(xb[b])));
    order
}

/// The levels of a split: the `i1` smallest values level 0, the next up to
/// `i2` level 1, the rest level 2; mirrored, with the scale, when the scale
/// is negative. Returns them and whether they were mirrored (the delta's
/// sign flips with them).
fn split_levels<const N: usize>(order: &[usize; N], i1: usize, i2: usize, scale: &mut f32) -> ([i8; N], bool) {
    let mut levels = [0i8; N];
    for (j, &i) in order.iter().enumerate() {
        levels[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
    let mirrored = *scale < 0.0;
    if mirrored {
        levels.iter_mut().for_each(|l| *l = 2 - *l);
        *scale = -*scale;
    }
    (levels, mirrored)
}

/// The weights of a group: importance-scaled, or the squares.
fn group_weights(xb: &[f32], importance: Option<&[f32]>, sigma2: f32, weight: &mut [f32]) {
    match importance {
        Some(qw) => {
            for ((w, &q), &v) in weight.iter_mut().zip(qw).zip(xb) {
                *w = q * (sigma2 + v * v).sqrt();
            }
        }
        None => weight.iter_mut().zip(xb).for_each(|(w, &v)| *w = v * v),
    }
}

/// Places each eight levels on the lattice (the best neighbour at `scale`
/// under the levels `shift_of(k)` when off it), writing the grid indices;
/// when any was off, the scale refitted to the points chosen.
fn place_points(
    lattice: &Lattice,
    xb: &[f32],
    weight: &[f32],
    mut scale: f32,
    shift_of: impl Fn(usize) -> &'static [f32; 3],
    levels: &mut [i8],
    indices: &mut [u16],
) -> f32 {
    let mut all_on_grid = true;
    for (k, index) in indices.iter_mut().enumerate() {
        let span = 8 * k..8 * (k + 1);
        let xx = shift_of(k);
        *index = match lattice.place(&levels[span.clone()]) {
            Place::OnGrid(g) => g as u16,
            Place::OffGrid(neighbours) => {
                all_on_grid = false;
                let value = |p: i8| xx[Lattice::level(p)];
                lattice.best_neighbour(
                    neighbours.indices,
                    &xb[span.clone()],
                    &weight[span.clone()],
                    scale,
                    value,
                    &mut levels[span],
                ) as u16
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (k, &index) in indices.iter().enumerate() {
            let xx = shift_of(k);
            for ((&p, &w), &x) in lattice.point(usize::from(index)).iter().zip(&weight[8 * k..]).zip(&xb[8 * k..]) {
                let q = xx[Lattice::level(p)];
                sumqx += w * q * x;
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

pub fn quantize_iq1_s(x: &[f32], importance: Option<&[f32]>, out: &mut [BlockIq1S]) -> Result<(), CodecError> {
    let Some(importance) = importance else {
        return Err(CodecError::NeedsImportance { ty: GgmlType::IQ1_S });
    };
    let lattice = Lattice::of(Grid::Iq1S);
    for (ibl, (xbl, y)) in x.chunks_exact(QK_K).zip(out).enumerate() {
        *y = BlockIq1S::zeroed();
        let sumx2 = xbl.iter().fold(0.0f32, |s, &v| s + v * v);
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        let mut scales = [0.0f32; QK_K / IQ1S_GROUP];
        let mut shifts = [1i8; QK_K / IQ1S_GROUP];
        let mut max_scale = 0.0f32;
        for (ib, xb) in xbl.chunks_exact(IQ1S_GROUP).enumerate() {
            let mut weight = [0.0f32; IQ1S_GROUP];
            group_weights(xb, Some(&importance[QK_K * ibl + IQ1S_GROUP * ib..][..IQ1S_GROUP]), sigma2, &mut weight);
            let max = xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()));
            if max < 1e-12 {
                continue;
            }
            let order = ascending::<IQ1S_GROUP>(xb);
            let (mut sumx, mut sumw) = ([0.0f32; IQ1S_GROUP + 1], [0.0f32; IQ1S_GROUP + 1]);
            for (j, &i) in order.iter().enumerate() {
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let n = IQ1S_GROUP;
            let (mut best_score, mut scale) = (-f32::MAX, max);
            let mut best: Option<(usize, usize, i8)> = None;
            for i1 in 0..=n {
                for i2 in i1..=n {
                    for (xx, shift) in [(&X_P, 1), (&X_M, -1)] {
                        let sumqx =
                            (sumx[i1] - sumx[0]) * xx[0] + (sumx[i2] - sumx[i1]) * xx[1] + (sumx[n] - sumx[i2]) * xx[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * xx[0] * xx[0]
                            + (sumw[i2] - sumw[i1]) * xx[1] * xx[1]
                            + (sumw[n] - sumw[i2]) * xx[2] * xx[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            best = Some((i1, i2, shift));
                        }
                    }
                }
            }
            let Some((i1, i2, mut shift)) = best else { continue };
            let (mut levels, mirrored) = split_levels(&order, i1, i2, &mut scale);
            if mirrored {
                shift = -shift;
            }
            let xx = if shift == 1 { &X_P } else { &X_M };
            let mut indices = [0u16; IQ1S_GROUP / 8];
            scale = place_points(lattice, xb, &weight, scale, |_| xx, &mut levels, &mut indices);
            let mut h = 0u16;
            for (k, &index) in indices.iter().enumerate() {
                y.qs[IQ1S_GROUP / 8 * ib + k] = index as u8;
                h |= (index >> 8) << (3 * k);
            }
            y.qh[2 * ib..][..2].copy_from_slice(&h.to_le_bytes());
            scales[ib] = scale;
            shifts[ib] = shift;
            max_scale = c_max(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 15.0;
        y.d = F16::from_f32(d * 1.125);
        let id = 1.0 / d;
        for (ib, (&scale, &shift)) in scales.iter().zip(&shifts).enumerate() {
            let mut l = nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 7) as u16;
            if shift == -1 {
                l |= 8;
            }
            let h = u16::from_le_bytes([y.qh[2 * ib], y.qh[2 * ib + 1]]) | (l << 12);
            y.qh[2 * ib..][..2].copy_from_slice(&h.to_le_bytes());
        }
    }
    Ok(())
}

/// The levels of IQ1_M's half-group `k` under shift choice `choice`: bit 1
/// picks the first half's delta sign, bit 0 the second's (set: negative).
fn half_levels(choice: usize, k: usize) -> &'static [f32; 3] {
    let negative = if k == 0 { choice >= 2 } else { choice % 2 == 1 };
    if negative { &X_M } else { &X_P }
}

pub fn quantize_iq1_m(x: &[f32], importance: Option<&[f32]>, out: &mut [BlockIq1M]) {
    const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    let lattice = Lattice::of(Grid::Iq1S);
    let n = IQ1M_GROUP;
    for (ibl, (xbl, y)) in x.chunks_exact(QK_K).zip(out).enumerate() {
        *y = BlockIq1M::zeroed();
        let sumx2 = xbl.iter().fold(0.0f32, |s, &v| s + v * v);
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        let group_importance = |ib: usize| importance.map(|w| &w[QK_K * ibl + n * ib..][..n]);
        let mut scales = [0.0f32; QK_K / IQ1M_GROUP];
        let mut shifts = [0usize; QK_K / IQ1M_GROUP];
        // Kept for the block scale's refit below, which weighs every group again.
        let mut weights = [[0.0f32; IQ1M_GROUP]; QK_K / IQ1M_GROUP];
        let mut max_scale = 0.0f32;
        for ((ib, xb), weight) in xbl.chunks_exact(n).enumerate().zip(&mut weights) {
            group_weights(xb, group_importance(ib), sigma2, weight);
            let max = xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()));
            if max < 1e-7 {
                continue;
            }
            let order = ascending::<IQ1M_GROUP>(xb);
            // Prefix sums per half of the group, since each half has its own delta sign.
            let (mut px, mut pw) = ([[0.0f32; IQ1M_GROUP + 1]; 2], [[0.0f32; IQ1M_GROUP + 1]; 2]);
            for (j, &i) in order.iter().enumerate() {
                let h = usize::from(i >= n / 2);
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let txs = [px[0][n], px[1][n]];
            let tws = [pw[0][n], pw[1][n]];
            let (p2, m2) = (X_P[2], X_M[2]);
            let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
            let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
            let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
            let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
            let (mut best_score, mut scale) = (-f32::MAX, max);
            let mut best: Option<(usize, usize, usize)> = None;
            for i1 in 0..=n {
                for i2 in i1..=n {
                    let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) = ([0.0f32; 2], [0.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
                    for h in 0..2 {
                        let sx = px[h][i1] + px[h][i2];
                        qx_p[h] = txs[h] * p2 - sx;
                        qx_m[h] = txs[h] * m2 - sx;
                        q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                        q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                    }
                    let sumqx = [qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]];
                    let sumq2 = [q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]];
                    for k in 0..4 {
                        if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            best = Some((i1, i2, k));
                        }
                    }
                }
            }
            let Some((i1, i2, mut choice)) = best else { continue };
            let (mut levels, mirrored) = split_levels(&order, i1, i2, &mut scale);
            if mirrored {
                choice = 3 - choice;
            }
            let mut indices = [0u16; IQ1M_GROUP / 8];
            scale = place_points(lattice, xb, weight, scale, |k| half_levels(choice, k), &mut levels, &mut indices);
            y.qs[2 * ib] = indices[0] as u8;
            y.qs[2 * ib + 1] = indices[1] as u8;
            y.qh[ib] = ((indices[0] >> 8) | ((indices[1] >> 8) << 4)) as u8;
            scales[ib] = scale;
            shifts[ib] = choice;
            max_scale = c_max(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        // The block scale is fitted again to every group's rounded scale and
        // points (degenerate groups included, as grid point 0 at level 0).
        let mut sc = [0u16; 4];
        let mut d = max_scale / 15.0;
        let id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (ib, xb) in xbl.chunks_exact(n).enumerate() {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
            y.qh[ib] |= MASKS[shifts[ib]];
            let weight = &weights[ib];
            for k in 0..2 {
                let xx = half_levels(shifts[ib], k);
                let high = (usize::from(y.qh[ib]) << (8 - 4 * k)) & 0x700;
                let point = lattice.point(usize::from(y.qs[2 * ib + k]) + high);
                for ((&p, &w), &x) in point.iter().zip(&weight[8 * k..]).zip(&xb[8 * k..]) {
                    let q = xx[Lattice::level(p)] * (2 * l + 1) as f32;
                    sumqx += w * q * x;
                    sumq2 += w * q * q;
                }
            }
        }
        if sumq2 > 0.0 {
            d = sumqx / sumq2;
        }
        let bits = f32_to_f16_bits(d * 1.1125);
        sc[0] |= (bits & 0x000f) << 12;
        sc[1] |= (bits & 0x00f0) << 8;
        sc[2] |= (bits & 0x0f00) << 4;
        sc[3] |= bits & 0xf000;
        y.scales.copy_from_slice(bytemuck::cast_slice(&sc.map(u16::to_le)));
    }
}
