//! The IQ grid quantizers: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S
//! encoded as ggml's `quantize_row_*_impl` encode them.
//!
//! The five share one search ([`search_group`]): per group of 16 or 32
//! values, signs folded out first, then a ladder of trial scales, each
//! rounding the magnitudes to the nearest lattice point of
//! [`super::iq_lattice`] (or, off the grid, to the best of its nearest grid
//! points), keeping the scale of least weighted error; then a last refit of
//! the points at the chosen scale. What differs per type, including ggml's
//! quirks (a degenerate IQ3_S group does not advance the position of the
//! next group's indices and signs), lives in each type's [`GridType`] and
//! packing function.

use bytemuck::Zeroable;

use super::CodecError;
use super::blocks::GROUP_MAX_EPS;
use super::iq_grid::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs};
use super::iq_lattice::{AtLevel, Grid, Lattice, Place};
use super::scalar::{F16, nearest_int};
use super::search::make_qp_quants;
use super::simd::Level;
use crate::types::GgmlType;

const QK_K: usize = 256;
/// The largest group any of the types searches.
const MAX_GROUP: usize = 32;

/// ggml's `MAX(a, b)`: `a > b ? a : b`, so a NaN in `b` wins.
fn c_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// How a type stores the signs of its values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Signs {
    /// Seven bits per eight values: the eighth sign is implied by an even
    /// count of negatives, made even by flipping the value of least
    /// weighted square.
    Parity,
    /// One bit per value.
    Explicit,
}

/// Where the trial scales centre.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The largest magnitude on the top level: trials around `(2·kmax − 1) / max`.
    Max,
    /// The scale `make_qp_quants` finds for levels `0..=kmax` (IQ2_XXS):
    /// trials around `(2·kmax − 1) / (scale · kmax)`.
    QpQuants,
}

/// Which points the last refit at the chosen scale places again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refit {
    /// Every point, always (IQ2_XXS).
    Always,
    /// Every point, when any of the chosen trial's points was off the grid (IQ3_S).
    AllWhenOffGrid,
    /// The points that were off the grid (IQ2_XS, IQ2_S, IQ3_XXS).
    OffGrid,
}

/// How the weights of a group are made without an importance vector.
#[derive(Clone, Copy)]
enum Unweighted {
    /// The type needs importance weights (IQ2_XXS, IQ2_XS).
    Refused,
    /// `x²`.
    Square,
    /// `σ²/4 + x²`.
    QuarterSigmaPlusSquare,
}

/// One type's search parameters.
struct GridType {
    ty: GgmlType,
    grid: Grid,
    group: usize,
    /// Levels per coordinate (ggml's `kMaxQ`).
    kmax: i32,
    /// Trial scales `-tries..=tries` steps either side of the first guess.
    tries: i32,
    step: f32,
    signs: Signs,
    start: Start,
    refit: Refit,
    /// Whether the points start out counted as on the grid (before any trial wins).
    start_on_grid: bool,
    /// σ² is `sumx2 · sigma_factor / QK_K`.
    sigma_factor: f32,
    unweighted: Unweighted,
    /// A group whose largest magnitude is below this is zero; `None`: only
    /// an exact zero is (IQ3_S's `!max`).
    eps: Option<f32>,
    /// The block scale is stored as `max_scale / 31 · fudge`.
    fudge: f32,
}

const IQ2_XXS: GridType = GridType {
    ty: GgmlType::IQ2_XXS,
    grid: Grid::Iq2Xxs,
    group: 32,
    kmax: 3,
    tries: 6,
    step: 0.1,
    signs: Signs::Parity,
    start: Start::QpQuants,
    refit: Refit::Always,
    start_on_grid: true,
    sigma_factor: 1.0,
    unweighted: Unweighted::Refused,
    eps: Some(GROUP_MAX_EPS),
    fudge: 1.0,
};

const IQ2_XS: GridType = GridType {
    ty: GgmlType::IQ2_XS,
    grid: Grid::Iq2Xs,
    group: 16,
    tries: 9,
    start: Start::Max,
    refit: Refit::OffGrid,
    ..IQ2_XXS
};

const IQ2_S: GridType = GridType {
    ty: GgmlType::IQ2_S,
    grid: Grid::Iq2S,
    signs: Signs::Explicit,
    sigma_factor: 2.0,
    unweighted: Unweighted::QuarterSigmaPlusSquare,
    eps: Some(1e-8),
    fudge: 0.9875,
    ..IQ2_XS
};

const IQ3_XXS: GridType = GridType {
    ty: GgmlType::IQ3_XXS,
    grid: Grid::Iq3Xxs,
    group: 32,
    kmax: 8,
    tries: 15,
    step: 0.2,
    signs: Signs::Parity,
    start: Start::Max,
    refit: Refit::OffGrid,
    start_on_grid: true,
    sigma_factor: 2.0,
    unweighted: Unweighted::Square,
    eps: Some(1e-8),
    fudge: 1.0125,
};

const IQ3_S: GridType = GridType {
    ty: GgmlType::IQ3_S,
    grid: Grid::Iq3S,
    tries: 9,
    signs: Signs::Explicit,
    refit: Refit::AllWhenOffGrid,
    start_on_grid: false,
    eps: None,
    fudge: 1.033,
    ..IQ3_XXS
};

/// One group's result: its scale (before the block scale rounds it), each
/// point's grid index and each eight values' sign byte.
struct Group {
    scale: f32,
    indices: [u16; MAX_GROUP / 4],
    signs: [u8; MAX_GROUP / 8],
}

/// What one super-block's groups came to.
struct SuperBlock {
    groups: Vec<Option<Group>>,
    max_scale: f32,
}

impl GridType {
    fn points(&self, lattice: &AtLevel<'_>) -> usize {
        self.group / lattice.dims()
    }

    /// Runs the search over each group of one super-block `x` (with its
    /// importance weights); a degenerate group is `None`.
    #[inline(always)]
    fn super_block(&self, lattice: &AtLevel<'_>, x: &[f32], importance: Option<&[f32]>) -> SuperBlock {
        let sumx2 = x.iter().fold(0.0f32, |s, &v| s + v * v);
        let sigma2 = self.sigma_factor * sumx2 / QK_K as f32;
        let mut max_scale = 0.0f32;
        let mut groups = Vec::with_capacity(QK_K / self.group);
        // A loop, not an iterator chain, so that all of it inlines into
        // the AVX2 build of `super_block_at`.
        for (ib, xb) in x.chunks_exact(self.group).enumerate() {
            let group = self.encode_group(lattice, xb, importance.map(|w| &w[ib * self.group..][..self.group]), sigma2);
            if let Some(g) = &group {
                max_scale = c_max(max_scale, g.scale);
            }
            groups.push(group);
        }
        SuperBlock { groups, max_scale }
    }

    #[inline(always)]
    fn encode_group(
        &self,
        lattice: &AtLevel<'_>,
        xb: &[f32],
        importance: Option<&[f32]>,
        sigma2: f32,
    ) -> Option<Group> {
        let n = self.group;
        let mut weight = [0.0f32; MAX_GROUP];
        let weight = &mut weight[..n];
        match (importance, self.unweighted) {
            (Some(qw), _) => {
                for ((w, &q), &v) in weight.iter_mut().zip(qw).zip(xb) {
                    *w = q * (sigma2 + v * v).sqrt();
                }
            }
            (None, Unweighted::Square) => weight.iter_mut().zip(xb).for_each(|(w, &v)| *w = v * v),
            (None, Unweighted::QuarterSigmaPlusSquare) => {
                weight.iter_mut().zip(xb).for_each(|(w, &v)| *w = 0.25 * sigma2 + v * v)
            }
            (None, Unweighted::Refused) => unreachable!("checked before the row is encoded"),
        }
        let mut waux = [0.0f32; MAX_GROUP];
        waux.iter_mut().zip(&*weight).for_each(|(a, &w)| *a = w.sqrt());

        let mut xval = [0.0f32; MAX_GROUP];
        let mut signs = [0u8; MAX_GROUP / 8];
        for (((xv, xb), w), s) in
            xval.chunks_exact_mut(8).zip(xb.chunks_exact(8)).zip(weight.chunks_exact(8)).zip(&mut signs)
        {
            *s = fold_signs(self.signs, xb, w, xv);
        }
        let xval = &xval[..n];
        let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
        let degenerate = match self.eps {
            Some(eps) => max < eps,
            None => max == 0.0,
        };
        if degenerate {
            return None;
        }

        let (first_scale, base) = if self.start == Start::QpQuants {
            let mut levels = [0u8; MAX_GROUP];
            let scale = make_qp_quants(self.kmax + 1, xval, &mut levels[..n], weight);
            let eff_max = scale * self.kmax as f32;
            if eff_max <= 0.0 {
                return None;
            }
            (scale, eff_max)
        } else {
            (max / (2 * self.kmax - 1) as f32, max)
        };
        let (mut scale, indices) = self.search_group(lattice, xval, weight, &waux[..n], first_scale, base);
        if scale < 0.0 {
            // ggml: "should never happen"; the scale is stored unsigned, so the signs flip.
            scale = -scale;
            let mask = if self.signs == Signs::Parity { 127 } else { 255 };
            signs[..n / 8].iter_mut().for_each(|s| *s = !*s & mask);
        }
        Some(Group { scale, indices, signs })
    }

    /// The trial scales around `(2·kmax − 1) / base`, then the refit;
    /// returns the scale and each point's grid index.
    #[inline(always)]
    fn search_group(
        &self,
        lattice: &AtLevel<'_>,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        first_scale: f32,
        base: f32,
    ) -> (f32, [u16; MAX_GROUP / 4]) {
        let dims = lattice.dims();
        let n_points = self.points(lattice);
        let mut levels = [0i8; MAX_GROUP];
        let mut indices = [0u16; MAX_GROUP / 4];
        let mut on_grid = [self.start_on_grid; MAX_GROUP / 4];
        let (mut trial, mut trial_indices, mut trial_on_grid) = (levels, indices, on_grid);
        let mut scale = first_scale;
        let mut best = 0.0f32;
        let odd_max = (2 * self.kmax - 1) as f32;
        for is in -self.tries..=self.tries {
            let id = (odd_max + is as f32 * self.step) / base;
            let this_scale = 1.0 / id;
            for k in 0..n_points {
                let span = k * dims..(k + 1) * dims;
                (trial_indices[k], trial_on_grid[k]) =
                    self.place(lattice, id, this_scale, &xval[span.clone()], &waux[span.clone()], &mut trial[span]);
            }
            let (sumqx, sumq2) = weighted_sums(&trial[..xval.len()], xval, weight);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                (levels, indices, on_grid) = (trial, trial_indices, trial_on_grid);
            }
        }
        let refit = match self.refit {
            Refit::Always => true,
            Refit::AllWhenOffGrid | Refit::OffGrid => on_grid[..n_points].iter().any(|&on| !on),
        };
        if refit && scale > 0.0 {
            let id = 1.0 / scale;
            for k in 0..n_points {
                if self.refit == Refit::OffGrid && on_grid[k] {
                    continue;
                }
                let span = k * dims..(k + 1) * dims;
                (indices[k], _) =
                    self.place(lattice, id, scale, &xval[span.clone()], &waux[span.clone()], &mut levels[span]);
            }
            let (sumqx, sumq2) = weighted_sums(&levels[..xval.len()], xval, weight);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        (scale, indices)
    }

    /// Rounds one point's values at inverse scale `id` to levels and finds
    /// its grid index (the best neighbour at `scale` when off the grid);
    /// returns the index and whether the rounding was on the grid.
    #[inline(always)]
    fn place(
        &self,
        lattice: &AtLevel<'_>,
        id: f32,
        scale: f32,
        xval: &[f32],
        waux: &[f32],
        levels: &mut [i8],
    ) -> (u16, bool) {
        for (l, &v) in levels.iter_mut().zip(xval) {
            *l = nearest_int(0.5 * (id * v - 1.0)).clamp(0, self.kmax - 1) as i8;
        }
        match lattice.place(levels) {
            Place::OnGrid(k) => (k as u16, true),
            Place::OffGrid(neighbours) => (lattice.nearest(neighbours, xval, waux, scale, levels) as u16, false),
        }
    }
}

/// Folds the signs of eight values out into `xval` (magnitudes; with
/// [`Signs::Parity`] one may stay negative) and returns their sign byte.
#[inline(always)]
fn fold_signs(signs: Signs, xb: &[f32], weight: &[f32], xval: &mut [f32]) -> u8 {
    let mut s = 0u8;
    let mut flips = 0;
    for (i, (xv, &v)) in xval.iter_mut().zip(xb).enumerate() {
        if v >= 0.0 {
            *xv = v;
        } else {
            *xv = -v;
            flips += 1;
            s |= 1 << i;
        }
    }
    if signs == Signs::Explicit {
        return s;
    }
    if flips % 2 == 1 {
        let square = |i: usize| weight[i] * xb[i] * xb[i];
        let mut imin = 0;
        let mut min = square(0);
        for i in 1..8 {
            if square(i) < min {
                min = square(i);
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// (Σ w·x·q, Σ w·q²) with `q = 2l + 1`, in ggml's order.
#[inline(always)]
fn weighted_sums(levels: &[i8], xval: &[f32], weight: &[f32]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ((&l, &x), &w) in levels.iter().zip(xval).zip(weight) {
        let q = f32::from(2 * l + 1);
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

impl SuperBlock {
    /// The block scale, stored with the type's `fudge` factor, and each
    /// group's 4-bit multiple of it; `None` when every group's scale is zero
    /// (the block scale stays zero).
    fn scales(&self, fudge: f32) -> Option<(F16, impl Iterator<Item = u8> + '_)> {
        if self.max_scale == 0.0 {
            return None;
        }
        let d = self.max_scale / 31.0;
        let id = 1.0 / d;
        let levels = self.groups.iter().map(move |g| {
            let scale = g.as_ref().map_or(0.0, |g| g.scale);
            nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
        });
        Some((F16::from_f32(d * fudge), levels))
    }
}

impl GridType {
    /// The types that weigh by importance alone refuse a row without it.
    fn require(&self, importance: Option<&[f32]>) -> Result<(), CodecError> {
        match (importance, self.unweighted) {
            (None, Unweighted::Refused) => Err(CodecError::NeedsImportance { ty: self.ty }),
            _ => Ok(()),
        }
    }

    /// Encodes each super-block of `x` into a zeroed block of `out`, the
    /// groups searched and then packed by `pack`.
    fn encode<B: Zeroable>(
        &self,
        level: Level,
        x: &[f32],
        importance: Option<&[f32]>,
        out: &mut [B],
        pack: impl Fn(&SuperBlock, &mut B),
    ) {
        let lattice = &AtLevel(Lattice::of(self.grid), level);
        for (i, (xb, y)) in x.chunks_exact(QK_K).zip(out).enumerate() {
            let block = self.super_block_at(lattice, xb, importance.map(|w| &w[i * QK_K..][..QK_K]));
            *y = B::zeroed();
            pack(&block, y);
        }
    }

    /// [`GridType::super_block`], compiled for AVX2 where the machine and
    /// `lattice`'s level have it: the search's small loops (a point's
    /// rounding, the weighted sums) then vectorize. Rust never fuses a
    /// multiply and an add, so the bytes stay those of the scalar code.
    fn super_block_at(&self, lattice: &AtLevel<'_>, x: &[f32], importance: Option<&[f32]>) -> SuperBlock {
        #[cfg(target_arch = "x86_64")]
        if lattice.1 >= Level::Avx2 && Level::Avx2.is_supported() {
            #[target_feature(enable = "avx2")]
            fn super_block_avx2(
                t: &GridType,
                lattice: &AtLevel<'_>,
                x: &[f32],
                importance: Option<&[f32]>,
            ) -> SuperBlock {
                t.super_block(lattice, x, importance)
            }
            // SAFETY: AVX2 is present (checked just above).
            return unsafe { super_block_avx2(self, lattice, x, importance) };
        }
        self.super_block(lattice, x, importance)
    }
}

pub fn quantize_iq2_xxs(
    level: Level,
    x: &[f32],
    importance: Option<&[f32]>,
    out: &mut [BlockIq2Xxs],
) -> Result<(), CodecError> {
    IQ2_XXS.require(importance)?;
    IQ2_XXS.encode(level, x, importance, out, |block, y| {
        // All zero, indices and signs too, when every scale is.
        let Some((d, levels)) = block.scales(IQ2_XXS.fudge) else { return };
        let mut q2 = [0u32; QK_K / 16];
        for ((ib, group), l) in block.groups.iter().enumerate().zip(levels) {
            if let Some(g) = group {
                for k in 0..4 {
                    q2[2 * ib] |= u32::from(g.indices[k]) << (8 * k);
                    q2[2 * ib + 1] |= u32::from(g.signs[k]) << (7 * k);
                }
            }
            q2[2 * ib + 1] |= u32::from(l) << 28;
        }
        y.d = d;
        y.qs.copy_from_slice(bytemuck::cast_slice(&q2.map(u32::to_le)));
    });
    Ok(())
}

pub fn quantize_iq2_xs(
    level: Level,
    x: &[f32],
    importance: Option<&[f32]>,
    out: &mut [BlockIq2Xs],
) -> Result<(), CodecError> {
    IQ2_XS.require(importance)?;
    IQ2_XS.encode(level, x, importance, out, |block, y| {
        let Some((d, levels)) = block.scales(IQ2_XS.fudge) else { return };
        let mut q2 = [0u16; QK_K / 8];
        for (ib, group) in block.groups.iter().enumerate() {
            if let Some(g) = group {
                for k in 0..2 {
                    q2[2 * ib + k] = g.indices[k] | (u16::from(g.signs[k]) << 9);
                }
            }
        }
        y.d = d;
        pack_nibbles(levels, &mut y.scales);
        y.qs.copy_from_slice(bytemuck::cast_slice(&q2.map(u16::to_le)));
    });
    Ok(())
}

pub fn quantize_iq2_s(level: Level, x: &[f32], importance: Option<&[f32]>, out: &mut [BlockIq2S]) {
    IQ2_S.encode(level, x, importance, out, |block, y| {
        for (ib, group) in block.groups.iter().enumerate() {
            let Some(g) = group else { continue };
            for k in 0..2 {
                let i8 = 2 * ib + k;
                let index = g.indices[k];
                y.qs[i8] = index as u8;
                y.qh[i8 / 4] |= ((index >> 8) as u8) << (2 * (i8 % 4));
                y.qs[QK_K / 8 + i8] = g.signs[k];
            }
        }
        if let Some((d, levels)) = block.scales(IQ2_S.fudge) {
            y.d = d;
            pack_nibbles(levels, &mut y.scales);
        }
    });
}

pub fn quantize_iq3_xxs(level: Level, x: &[f32], importance: Option<&[f32]>, out: &mut [BlockIq3Xxs]) {
    IQ3_XXS.encode(level, x, importance, out, |block, y| {
        let Some((d, levels)) = block.scales(IQ3_XXS.fudge) else { return };
        let (indices, scales_and_signs) = y.qs.split_at_mut(QK_K / 4);
        for ((ib, group), l) in block.groups.iter().enumerate().zip(levels) {
            let mut word = u32::from(l) << 28;
            if let Some(g) = group {
                for k in 0..8 {
                    indices[8 * ib + k] = g.indices[k] as u8;
                }
                word |= (0..4).map(|k| u32::from(g.signs[k]) << (7 * k)).fold(0, |a, b| a | b);
            }
            scales_and_signs[4 * ib..][..4].copy_from_slice(&word.to_le_bytes());
        }
        y.d = d;
    });
}

pub fn quantize_iq3_s(level: Level, x: &[f32], importance: Option<&[f32]>, out: &mut [BlockIq3S]) {
    IQ3_S.encode(level, x, importance, out, |block, y| {
        // ggml advances its index and sign cursors only past groups it
        // wrote, so the groups after a degenerate one move up; the high
        // index bits stay at each group's own place.
        let mut written = 0;
        for (ib, group) in block.groups.iter().enumerate() {
            let Some(g) = group else { continue };
            for k in 0..8 {
                let index = g.indices[k];
                y.qs[8 * written + k] = index as u8;
                y.qh[ib] |= ((index >> 8) as u8) << k;
            }
            y.signs[4 * written..][..4].copy_from_slice(&g.signs[..4]);
            written += 1;
        }
        if let Some((d, levels)) = block.scales(IQ3_S.fudge) {
            y.d = d;
            pack_nibbles(levels, &mut y.scales);
        }
    });
}

/// Two groups' 4-bit scales a byte, the even group's in the low nibble.
fn pack_nibbles(levels: impl Iterator<Item = u8>, scales: &mut [u8]) {
    for (ib, l) in levels.enumerate() {
        scales[ib / 2] |= l << (4 * (ib % 2));
    }
}
