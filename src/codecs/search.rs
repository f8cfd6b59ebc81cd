//! The scale searches shared by the legacy and K-quant quantizers: for a
//! group of values, find a scale (and for the `_1`/`K` types a minimum) and
//! the integer levels that minimise a weighted error.
//!
//! Each function is ggml's search of the same name, evaluated in the same
//! order: sums accumulate left to right in f32, integer levels are converted
//! to f32 where ggml's C converts them, and rounding is [`nearest_int`].

use super::blocks::{GROUP_MAX_EPS, MinSearch};
use super::scalar::nearest_int;
use super::simd::Level;
#[cfg(target_arch = "x86_64")]
use super::{
    x86_lanes::{Avx2, Avx512, Twice},
    x86_search,
};

/// The value of largest magnitude (the first of equals) and that magnitude,
/// found as ggml finds it.
pub fn signed_absmax_and_magnitude(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// The value of largest magnitude (the first of equals).
pub fn signed_absmax(x: &[f32]) -> f32 {
    signed_absmax_and_magnitude(x).0
}

/// How `make_qx_quants` weights each value when no importance is given.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum QxWeighting {
    /// Round once to the scale that maps the largest magnitude to `-nmax`.
    None,
    /// Search scales, weighting each value by its square (ggml's `rmse_type = 1`).
    Squared,
}

/// The largest group any search sees (Q4_K/Q5_K groups, legacy blocks).
const MAX_GROUP: usize = 32;

/// Symmetric levels in `[0, 2·nmax)` (stored with an offset of `nmax`);
/// returns the scale. With [`QxWeighting::Squared`], `weights`, when given,
/// replace the squared weighting.
pub fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [i8], weighting: QxWeighting, weights: Option<&[f32]>) -> f32 {
    let n = x.len();
    let levels = &mut levels[..n];
    let (max, amax) = signed_absmax_and_magnitude(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    if weighting == QxWeighting::None {
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = (nmax + clamp(nearest_int(iscale * v))) as i8;
        }
        return 1.0 / iscale;
    }
    // Resolved once: the same f32 products ggml recomputes in every pass.
    let mut w = [0.0f32; MAX_GROUP];
    let w = &mut w[..n];
    match weights {
        Some(given) => w.copy_from_slice(&given[..n]),
        None => w.iter_mut().zip(x).for_each(|(w, &v)| *w = v * v),
    }
    // Levels of one trial scale, computed apart from the (ordered) sums so
    // the rounding vectorizes.
    let mut trial = [0i32; MAX_GROUP];
    let trial = &mut trial[..n];
    let sums = |trial: &[i32]| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for ((&l, &wi), &v) in trial.iter().zip(&*w).zip(x) {
            let lf = l as f32;
            sumlx += wi * v * lf;
            suml2 += wi * lf * lf;
        }
        (sumlx, suml2)
    };
    let round_all = |iscale: f32, trial: &mut [i32]| {
        for (l, &v) in trial.iter_mut().zip(x) {
            *l = clamp(nearest_int(iscale * v));
        }
    };
    round_all(iscale, trial);
    for (out, &l) in levels.iter_mut().zip(&*trial) {
        *out = (l + nmax) as i8;
    }
    let (sumlx, suml2) = sums(trial);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        round_all(iscale, trial);
        let (sumlx, suml2) = sums(trial);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (out, &l) in levels.iter_mut().zip(&*trial) {
                *out = (l + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q3_K's symmetric search with coordinate descent (`make_q3_quants`).
pub fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [i8], do_rmse: bool) -> f32 {
    let (max, amax) = signed_absmax_and_magnitude(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    if !do_rmse {
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = (clamp(nearest_int(iscale * v)) + nmax) as i8;
        }
        return 1.0 / iscale;
    }
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (l, &v) in levels.iter_mut().zip(x) {
        let q = clamp(nearest_int(iscale * v));
        *l = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = f32::from(levels[i]);
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(v * sl2 / slx));
                if new_l != i32::from(levels[i]) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        levels[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in levels.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// Asymmetric levels in `[0, nmax]` under `weights`; returns
/// `(scale, -min)`. `qkx3` selects ggml's `make_qkx3_quants` (which differs
/// in its degenerate-group test) over `make_qkx2_quants`.
pub fn make_qkx_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    search: MinSearch,
    qkx3: bool,
) -> (f32, f32) {
    let n = x.len();
    let (w, levels) = (&weights[..n], &mut levels[..n]);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &wi) in x.iter().zip(w).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += wi;
        sum_x += wi * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    let degenerate = if qkx3 { max <= min } else { max == min };
    if degenerate {
        levels.fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if search.use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((l, &v), &wi) in levels.iter_mut().zip(x).zip(w) {
        *l = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        let diff = scale * f32::from(*l) + min - v;
        best_error += wi * error(diff);
    }
    if search.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; MAX_GROUP];
    let aux = &mut aux[..n];
    for is in 0..=search.nstep {
        iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        // Rounding apart from the (ordered) sums, so it vectorizes.
        for (a, &v) in aux.iter_mut().zip(x) {
            *a = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        }
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((&a, &wi), &v) in aux.iter().zip(w).zip(x) {
            let lf = f32::from(a);
            sum_l += wi * lf;
            sum_l2 += wi * lf * lf;
            sum_xl += wi * lf * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let diffs = aux.iter().zip(x).map(|(&a, &v)| this_scale * f32::from(a) + this_min - v);
            // The error kind is chosen outside the loop, so each loop is branch-free.
            let cur_error = if search.use_mad {
                diffs.zip(w).fold(0.0f32, |e, (d, &wi)| e + wi * d.abs())
            } else {
                diffs.zip(w).fold(0.0f32, |e, (d, &wi)| e + wi * (d * d))
            };
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// A K-quant's last pass, with its block's final scales: value `i` of
/// `n`-value group `g` at `nearest_int((x + dm[g]) / d[g])` (`x / d[g]`
/// without `dm`) clamped to `range`, plus `offset`; a group whose `d` is zero
/// keeps the levels its search chose. With the vector kernels of `level`
/// where the machine has them (groups of 16 or 32 values).
#[allow(clippy::too_many_arguments)]
pub fn requantize_groups(
    level: Level,
    n: usize,
    x: &[f32],
    d: &[f32],
    dm: Option<&[f32]>,
    range: (i32, i32),
    offset: i32,
    levels: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if level >= Level::Avx512
            && let Some(lanes) = Avx512::new()
        {
            match n {
                32 => return x86_search::avx512_twice::requantize(Twice(lanes), n, x, d, dm, range, offset, levels),
                16 => return x86_search::avx512::requantize(lanes, n, x, d, dm, range, offset, levels),
                _ => {}
            }
        }
        if level >= Level::Avx2
            && let Some(lanes) = Avx2::new()
            && n.is_multiple_of(16)
        {
            return x86_search::avx2_twice::requantize(Twice(lanes), n, x, d, dm, range, offset, levels);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    for (g, &dg) in d.iter().enumerate() {
        if dg == 0.0 {
            continue;
        }
        for (&x, level) in x[n * g..][..n].iter().zip(&mut levels[n * g..][..n]) {
            let shifted = if let Some(dm) = dm { x + dm[g] } else { x };
            *level = (nearest_int(shifted / dg).clamp(range.0, range.1) + offset) as u8;
        }
    }
}

/// One step of a batched search: how many groups it covers, and on what.
#[derive(Clone, Copy)]
pub(super) enum Step {
    #[cfg(target_arch = "x86_64")]
    Avx512Twice(Twice<Avx512>),
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    #[cfg(target_arch = "x86_64")]
    Avx2Twice(Twice<Avx2>),
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    One,
}

impl Step {
    fn groups(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Step::Avx512Twice(_) => 32,
            #[cfg(target_arch = "x86_64")]
            Step::Avx512(_) | Step::Avx2Twice(_) => 16,
            #[cfg(target_arch = "x86_64")]
            Step::Avx2(_) => 8,
            Step::One => 1,
        }
    }
}

/// Calls `$search` of the step's width from `x86_search` with `lanes` and
/// the arguments, or evaluates `$one` for a group at a time.
macro_rules! on_step {
    ($step:expr, $search:ident($($arg:expr),*), $one:expr) => {
        match $step {
            #[cfg(target_arch = "x86_64")]
            Step::Avx512Twice(lanes) => x86_search::avx512_twice::$search(lanes, $($arg),*),
            #[cfg(target_arch = "x86_64")]
            Step::Avx512(lanes) => x86_search::avx512::$search(lanes, $($arg),*),
            #[cfg(target_arch = "x86_64")]
            Step::Avx2Twice(lanes) => x86_search::avx2_twice::$search(lanes, $($arg),*),
            #[cfg(target_arch = "x86_64")]
            Step::Avx2(lanes) => x86_search::avx2::$search(lanes, $($arg),*),
            Step::One => $one,
        }
    };
}
pub(super) use on_step;

/// `groups` groups walked in the widest steps `level` and the machine
/// allow: each step's first group and the step.
pub(super) fn steps(level: Level, groups: usize) -> impl Iterator<Item = (usize, Step)> {
    #[cfg(target_arch = "x86_64")]
    let (avx512, avx2) =
        ((level >= Level::Avx512).then(Avx512::new).flatten(), (level >= Level::Avx2).then(Avx2::new).flatten());
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    let mut first = 0;
    std::iter::from_fn(move || {
        let rest = groups - first;
        if rest == 0 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        let step = match (avx512, avx2) {
            (Some(lanes), _) if rest >= 32 => Step::Avx512Twice(Twice(lanes)),
            (Some(lanes), _) if rest >= 16 => Step::Avx512(lanes),
            (None, Some(lanes)) if rest >= 16 => Step::Avx2Twice(Twice(lanes)),
            (_, Some(lanes)) if rest >= 8 => Step::Avx2(lanes),
            _ => Step::One,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let step = Step::One;
        let at = first;
        first += step.groups();
        Some((at, step))
    })
}

/// [`make_qkx_quants`] on consecutive groups of `n` values (levels likewise
/// consecutive), with the vector kernels of `level` where the machine has
/// them; each group's scale and `-min` go to `scales` and `neg_mins`, whose
/// length is the number of groups.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx_quants_groups(
    level: Level,
    nmax: i32,
    n: usize,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    search: MinSearch,
    qkx3: bool,
    scales: &mut [f32],
    neg_mins: &mut [f32],
) {
    for (g, step) in steps(level, scales.len()) {
        let group = g * n..;
        let (x, weights, levels) = (&x[group.clone()], &weights[group.clone()], &mut levels[group]);
        let (scales, neg_mins) = (&mut scales[g..], &mut neg_mins[g..]);
        on_step!(
            step,
            make_qkx_quants(nmax, n, x, weights, levels, search, qkx3, scales, neg_mins),
            (scales[0], neg_mins[0]) = make_qkx_quants(nmax, &x[..n], &weights[..n], &mut levels[..n], search, qkx3)
        );
    }
}

/// [`make_qx_quants`] with [`QxWeighting::Squared`] (or the given weights)
/// on consecutive groups of `n` values, with the vector kernels of `level`
/// where the machine has them; each group's scale goes to `scales`.
pub fn make_qx_quants_groups(
    level: Level,
    nmax: i32,
    n: usize,
    x: &[f32],
    levels: &mut [i8],
    weights: Option<&[f32]>,
    scales: &mut [f32],
) {
    for (g, step) in steps(level, scales.len()) {
        let group = g * n..;
        let (x, levels, weights) = (&x[group.clone()], &mut levels[group.clone()], weights.map(|w| &w[group]));
        let scales = &mut scales[g..];
        on_step!(step, make_qx_quants(nmax, n, x, bytemuck::cast_slice_mut(levels), weights, scales), {
            let weights = weights.map(|w| &w[..n]);
            scales[0] = make_qx_quants(nmax, &x[..n], &mut levels[..n], QxWeighting::Squared, weights);
        });
    }
}

/// [`make_q3_quants`] with `do_rmse` on consecutive groups of `n` values,
/// with the vector kernels of `level` where the machine has them; each
/// group's scale goes to `scales`.
pub fn make_q3_quants_groups(level: Level, nmax: i32, n: usize, x: &[f32], levels: &mut [i8], scales: &mut [f32]) {
    for (g, step) in steps(level, scales.len()) {
        let (x, levels, scales) = (&x[g * n..], &mut levels[g * n..], &mut scales[g..]);
        on_step!(
            step,
            make_q3_quants(nmax, n, x, bytemuck::cast_slice_mut(levels), scales),
            scales[0] = make_q3_quants(nmax, &x[..n], &mut levels[..n], true)
        );
    }
}

/// Quantizes positive scales to `[0, nmax]` levels under importance `weights`
/// (`make_qp_quants`); returns the scale of the levels.
pub fn make_qp_quants(nmax: i32, x: &[f32], levels: &mut [u8], weights: &[f32]) -> f32 {
    let max = x.iter().fold(0.0f32, |m, &v| if m > v { m } else { v });
    if max < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = nearest_int(iscale * v) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for (i, &v) in x.iter().enumerate() {
        let diff = v - scale * f32::from(levels[i]);
        best_mse += weights[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for (i, &v) in x.iter().enumerate() {
            let l = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * l as f32;
            mse += weights[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (i, &v) in x.iter().enumerate() {
        let l = nearest_int(iscale * v).min(nmax);
        levels[i] = l as u8;
        let w = weights[i];
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = weights[i];
            let li = f32::from(levels[i]);
            let mut slx = sumlx - w * v * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(v * sl2 / slx).min(nmax);
                if new_l != i32::from(levels[i]) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        levels[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}
