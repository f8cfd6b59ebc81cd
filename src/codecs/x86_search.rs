//! The scale searches of [`super::search`] and [`super::iq4`] on many groups
//! at once, one group a lane ([`Lanes`]: 8 or 16 with AVX2, 16 or 32 with
//! AVX-512): lane `j` runs group `j`'s exact scalar sequence (the same
//! operations in the same order, sums accumulated element by element, no
//! fused multiply-add), so every lane ends where the scalar search would.
//! Groups are independent, which is what lets the work spread across lanes;
//! the search inside one group is a chain of dependent f32 sums that must
//! not be reordered.
//!
//! Inputs come as `N` consecutive groups of `n` values (`n` ≤ 32); they are
//! gathered into element-major vectors (vector `i` holds element `i` of
//! every group) once, and every pass of the search works on those. Each
//! search is written once, generic over the width, and compiled for each
//! inside functions that enable the width's instructions (`at_width!`):
//! one vector or two side by side ([`Twice`]) of AVX2 or AVX-512.

#![cfg(target_arch = "x86_64")]

use super::blocks::{GROUP_MAX_EPS, KVALUES, MinSearch, NTRY};
use super::x86_lanes::{Avx2, Avx512, Columns, Lanes, Twice};

/// Per lane, the value of largest magnitude (the first of equals) and
/// whether that magnitude is below [`GROUP_MAX_EPS`].
#[inline(always)]
fn signed_absmax<L: Lanes>(lanes: L, xs: &[L::F]) -> (L::F, L::M) {
    let (mut max, mut amax) = (lanes.splat(0.0), lanes.splat(0.0));
    for &v in xs {
        let magnitude = lanes.abs(v);
        let larger = lanes.gt(magnitude, amax);
        amax = lanes.select(larger, amax, magnitude);
        max = lanes.select(larger, max, v);
    }
    (max, lanes.lt(amax, lanes.splat(GROUP_MAX_EPS)))
}

// The searches' steps as functions rather than closures: a closure is
// compiled on its own, without the target features of the function it
// sits in, and a large one would not be inlined back.

/// A weighted error's term: |diff| (`use_mad`) or diff².
#[inline(always)]
fn error<L: Lanes>(lanes: L, diff: L::F, use_mad: bool) -> L::F {
    if use_mad { lanes.abs(diff) } else { lanes.mul(diff, diff) }
}

/// `clamp(nearest_int(iscale · (v - min)), 0, nmax)`.
#[inline(always)]
fn offset_level<L: Lanes>(lanes: L, iscale: L::F, v: L::F, min: L::F, nmax: i32) -> L::I {
    lanes.clamp_i(lanes.nearest_int(lanes.mul(iscale, lanes.sub(v, min))), lanes.splat_i(0), lanes.splat_i(nmax))
}

/// Below this magnitude ggml's `nearest_int` rounds exactly, ties to even.
const EXACT_ROUNDING: f32 = 4_194_304.0;

/// Whether every `iscale · (v - min)` of a trial, for `lowest ≤ v ≤ max`, is
/// below [`EXACT_ROUNDING`] in magnitude, so that rounding it in floats gives
/// ggml's level. Subtraction and multiplication round monotonically, so the
/// products at the two ends bound every value's (in either order: `min` may
/// have moved above `max`). NaN is outside.
#[inline(always)]
fn rounds_exactly<L: Lanes>(lanes: L, iscale: L::F, lowest: L::F, max: L::F, min: L::F) -> bool {
    let limit = lanes.splat(EXACT_ROUNDING);
    let low_end = lanes.abs(lanes.mul(iscale, lanes.sub(lowest, min)));
    let high_end = lanes.abs(lanes.mul(iscale, lanes.sub(max, min)));
    !lanes.any(lanes.or(lanes.not_lt(low_end, limit), lanes.not_lt(high_end, limit)))
}

/// One trial of [`make_qkx_quants`]: each value's [`offset_level`], as a
/// float, into `levels`; returns Σ w·l, Σ w·l² and Σ w·l·x. `EXACT` when
/// [`rounds_exactly`] holds: the level is then rounded and clamped in floats
/// (three instructions where the bit trick, the integer clamp and the
/// conversion take six), with the same result.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn offset_trial<L: Lanes, const EXACT: bool>(
    lanes: L,
    iscale: L::F,
    min: L::F,
    nmax: i32,
    xs: &[L::F],
    ws: &[L::F],
    levels: &mut Columns<L::F>,
) -> (L::F, L::F, L::F) {
    let zero = lanes.splat(0.0);
    let top = lanes.splat(nmax as f32);
    let (mut sum_l, mut sum_l2, mut sum_xl) = (zero, zero, zero);
    let mut levels = levels.rewrite();
    for (&v, &w) in xs.iter().zip(ws) {
        let lf = match EXACT {
            // `max` returns its second operand for -0.0 as for NaN: +0.0, the integer path's 0.
            true => lanes.min(lanes.max(lanes.round_even(lanes.mul(iscale, lanes.sub(v, min))), zero), top),
            false => lanes.to_float(offset_level(lanes, iscale, v, min, nmax)),
        };
        levels.push(lf);
        let wl = lanes.mul(w, lf);
        sum_l = lanes.add(sum_l, wl);
        sum_l2 = lanes.add(sum_l2, lanes.mul(wl, lf));
        sum_xl = lanes.add(sum_xl, lanes.mul(wl, v));
    }
    (sum_l, sum_l2, sum_xl)
}

/// Σ w·|scale·l + min - x| (`use_mad`) or Σ w·(scale·l + min - x)², in
/// element order.
#[inline(always)]
fn weighted_error<L: Lanes>(
    lanes: L,
    use_mad: bool,
    scale: L::F,
    min: L::F,
    levels: &[L::F],
    xs: &[L::F],
    ws: &[L::F],
) -> L::F {
    match use_mad {
        true => weighted_error_of::<L, true>(lanes, scale, min, levels, xs, ws),
        false => weighted_error_of::<L, false>(lanes, scale, min, levels, xs, ws),
    }
}

/// [`weighted_error`], its choice of term fixed outside the loop.
#[inline(always)]
fn weighted_error_of<L: Lanes, const MAD: bool>(
    lanes: L,
    scale: L::F,
    min: L::F,
    levels: &[L::F],
    xs: &[L::F],
    ws: &[L::F],
) -> L::F {
    let mut sum = lanes.splat(0.0);
    for ((&l, &v), &w) in levels.iter().zip(xs).zip(ws) {
        let diff = lanes.sub(lanes.add(lanes.mul(scale, l), min), v);
        sum = lanes.add(sum, lanes.mul(w, error(lanes, diff, MAD)));
    }
    sum
}

/// [`super::search::make_qkx_quants`] on `N` groups of `n` values: levels
/// for group `j` go to `levels[j·n..][..n]`; each group's scale and `-min`
/// to `scales[j]` and `neg_mins[j]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn make_qkx_quants<L: Lanes>(
    lanes: L,
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
    let (mut xs, mut ws) = (Columns::new(), Columns::new());
    lanes.gather_groups(x, n, &mut xs);
    lanes.gather_groups(weights, n, &mut ws);
    let (xs, ws) = (&xs[..], &ws[..]);
    let zero = lanes.splat(0.0);

    let (mut min, mut max) = (xs[0], xs[0]);
    let mut sum_w = ws[0];
    let mut sum_x = lanes.mul(sum_w, xs[0]);
    for (&v, &w) in xs.iter().zip(ws).skip(1) {
        min = lanes.min(v, min);
        max = lanes.max(v, max);
        sum_w = lanes.add(sum_w, w);
        sum_x = lanes.add(sum_x, lanes.mul(w, v));
    }
    let lowest = min;
    min = lanes.min(zero, min);
    let degenerate = if qkx3 { lanes.le(max, min) } else { lanes.eq(max, min) };
    let first_min = min;

    // The best levels are not kept but remade at the end from the scale and
    // offset they were rounded at: copying every better trial's levels
    // cost more than one more rounding pass.
    let mut best_iscale = lanes.div(lanes.splat(nmax as f32), lanes.sub(max, min));
    let mut best_offset = min;
    let mut scale = lanes.div(lanes.splat(1.0), best_iscale);
    let mut aux = Columns::new();
    for &v in xs {
        aux.push(lanes.to_float(offset_level(lanes, best_iscale, v, min, nmax)));
    }
    let mut best_error = weighted_error(lanes, search.use_mad, scale, min, &aux, xs, ws);

    // A search of fewer than one step keeps the first levels.
    let steps = if search.nstep < 1 { 0 } else { search.nstep + 1 };
    for is in 0..steps {
        // `min` moves with each better step, and the next steps start from it, as in ggml.
        let numerator = lanes.splat(search.rmin + search.rdelta * is as f32 + nmax as f32);
        let iscale = lanes.div(numerator, lanes.sub(max, min));
        let (sum_l, sum_l2, sum_xl) = match rounds_exactly(lanes, iscale, lowest, max, min) {
            true => offset_trial::<L, true>(lanes, iscale, min, nmax, xs, ws, &mut aux),
            false => offset_trial::<L, false>(lanes, iscale, min, nmax, xs, ws, &mut aux),
        };
        let det = lanes.sub(lanes.mul(sum_w, sum_l2), lanes.mul(sum_l, sum_l));
        let solvable = lanes.gt(det, zero);
        if !lanes.any(solvable) {
            continue;
        }
        let mut this_scale = lanes.div(lanes.sub(lanes.mul(sum_w, sum_xl), lanes.mul(sum_x, sum_l)), det);
        let mut this_min = lanes.div(lanes.sub(lanes.mul(sum_l2, sum_x), lanes.mul(sum_l, sum_xl)), det);
        let positive_min = lanes.gt(this_min, zero);
        this_min = lanes.select(positive_min, this_min, zero);
        this_scale = lanes.select(positive_min, this_scale, lanes.div(sum_xl, sum_l2));
        let cur_error = weighted_error(lanes, search.use_mad, this_scale, this_min, &aux, xs, ws);
        let better = lanes.and(solvable, lanes.lt(cur_error, best_error));
        if !lanes.any(better) {
            continue;
        }
        best_iscale = lanes.select(better, best_iscale, iscale);
        best_offset = lanes.select(better, best_offset, min);
        best_error = lanes.select(better, best_error, cur_error);
        scale = lanes.select(better, scale, this_scale);
        min = lanes.select(better, min, this_min);
    }

    // Rounding again at the best trial's scale and offset gives its levels: the same operations on the same values.
    let mut best_levels = Columns::new();
    for &v in xs {
        let level = offset_level(lanes, best_iscale, v, best_offset, nmax);
        best_levels.push(lanes.select_i(degenerate, level, lanes.splat_i(0)));
    }
    lanes.scatter_groups(&best_levels, levels);
    lanes.store(lanes.select(degenerate, scale, zero), scales);
    lanes.store(lanes.negate(lanes.select(degenerate, min, first_min)), neg_mins);
}

/// One trial of a symmetric search: each value's level at `iscale`,
/// clamped to `[-nmax, nmax)`, as a float into `trial`; returns Σ w·x·l and
/// Σ w·l² (`wxs` holds each w·x). `EXACT` when every `iscale · x` is below
/// [`EXACT_ROUNDING`] in magnitude: the level is then rounded and clamped in
/// floats, with the same result. A -0.0 level only ever meets products and
/// sums that start at +0.0, which no zero term changes.
#[inline(always)]
fn symmetric_trial<L: Lanes, const EXACT: bool>(
    lanes: L,
    iscale: L::F,
    xs: &[L::F],
    ws: &[L::F],
    wxs: &[L::F],
    nmax: i32,
    trial: &mut Columns<L::F>,
) -> (L::F, L::F) {
    let (low, high) = (lanes.splat_i(-nmax), lanes.splat_i(nmax - 1));
    let (low_f, high_f) = (lanes.splat(-nmax as f32), lanes.splat((nmax - 1) as f32));
    let (mut sumlx, mut suml2) = (lanes.splat(0.0), lanes.splat(0.0));
    let mut trial = trial.rewrite();
    for ((&v, &w), &wx) in xs.iter().zip(ws).zip(wxs) {
        let lf = match EXACT {
            true => lanes.min(lanes.max(lanes.round_even(lanes.mul(iscale, v)), low_f), high_f),
            false => lanes.to_float(lanes.clamp_i(lanes.nearest_int(lanes.mul(iscale, v)), low, high)),
        };
        trial.push(lf);
        sumlx = lanes.add(sumlx, lanes.mul(wx, lf));
        suml2 = lanes.add(suml2, lanes.mul(lanes.mul(w, lf), lf));
    }
    (sumlx, suml2)
}

/// [`symmetric_trial`] at `iscale`, where every value lies within `max` in
/// magnitude: rounded in floats when `iscale · max` is below
/// [`EXACT_ROUNDING`] in every lane (multiplication rounds monotonically).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn symmetric_trial_at<L: Lanes>(
    lanes: L,
    iscale: L::F,
    max: L::F,
    xs: &[L::F],
    ws: &[L::F],
    wxs: &[L::F],
    nmax: i32,
    trial: &mut Columns<L::F>,
) -> (L::F, L::F) {
    let outside = lanes.not_lt(lanes.abs(lanes.mul(iscale, max)), lanes.splat(EXACT_ROUNDING));
    match lanes.any(outside) {
        false => symmetric_trial::<L, true>(lanes, iscale, xs, ws, wxs, nmax, trial),
        true => symmetric_trial::<L, false>(lanes, iscale, xs, ws, wxs, nmax, trial),
    }
}

/// [`super::search::make_qx_quants`] with squared (or given) weights on `N`
/// groups of `n` values: levels for group `j` go to `levels[j·n..][..n]`
/// (offset by `nmax`), its scale to `scales[j]`.
#[inline(always)]
fn make_qx_quants<L: Lanes>(
    lanes: L,
    nmax: i32,
    n: usize,
    x: &[f32],
    levels: &mut [u8],
    weights: Option<&[f32]>,
    scales: &mut [f32],
) {
    let mut xs = Columns::new();
    lanes.gather_groups(x, n, &mut xs);
    let xs = &xs[..];
    let zero = lanes.splat(0.0);
    let (max, degenerate) = signed_absmax(lanes, xs);

    let mut ws = Columns::new();
    match weights {
        Some(given) => lanes.gather_groups(given, n, &mut ws),
        None => {
            for &v in xs {
                ws.push(lanes.mul(v, v));
            }
        }
    }
    let ws = &ws[..];
    let mut wxs = Columns::new();
    for (&w, &v) in ws.iter().zip(xs) {
        wxs.push(lanes.mul(w, v));
    }
    let wxs = &wxs[..];

    let mut best_levels = Columns::new();
    let iscale = lanes.div(lanes.splat(-(nmax as f32)), max);
    let (sumlx, suml2) = symmetric_trial_at(lanes, iscale, max, xs, ws, wxs, nmax, &mut best_levels);
    let nonzero = lanes.ne(suml2, zero);
    let mut scale = lanes.select(nonzero, zero, lanes.div(sumlx, suml2));
    let mut best = lanes.mul(scale, sumlx);
    let mut trial = Columns::new();
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = lanes.div(lanes.splat(-(nmax as f32 + 0.1 * is as f32)), max);
        let (sumlx, suml2) = symmetric_trial_at(lanes, iscale, max, xs, ws, wxs, nmax, &mut trial);
        let better = lanes.and(lanes.gt(suml2, zero), lanes.gt(lanes.mul(sumlx, sumlx), lanes.mul(best, suml2)));
        if !lanes.any(better) {
            continue;
        }
        for (b, &t) in best_levels.iter_mut().zip(trial.iter()) {
            *b = lanes.select(better, *b, t);
        }
        scale = lanes.select(better, scale, lanes.div(sumlx, suml2));
        best = lanes.select(better, best, lanes.mul(scale, sumlx));
    }

    // Levels are whole numbers in [-nmax, nmax): `nearest_int` gives them exactly.
    let offset = lanes.splat_i(nmax);
    let mut offset_levels = Columns::new();
    for &b in best_levels.iter() {
        offset_levels.push(lanes.select_i(degenerate, lanes.add_i(lanes.nearest_int(b), offset), lanes.splat_i(0)));
    }
    lanes.scatter_groups(&offset_levels, levels);
    lanes.store(lanes.select(degenerate, scale, zero), scales);
}

/// [`super::search::make_q3_quants`] with `do_rmse` on `N` groups of `n`
/// values: levels for group `j` go to `levels[j·n..][..n]` (offset by
/// `nmax`), its scale to `scales[j]`. A lane whose pass changed nothing
/// would have stopped; passing again over it changes nothing either, so
/// the lanes stop together, when none changed.
#[inline(always)]
fn make_q3_quants<L: Lanes>(lanes: L, nmax: i32, n: usize, x: &[f32], levels: &mut [u8], scales: &mut [f32]) {
    let mut xs = Columns::new();
    lanes.gather_groups(x, n, &mut xs);
    let xs = &xs[..];
    let zero = lanes.splat(0.0);
    let (max, degenerate) = signed_absmax(lanes, xs);
    let (low, high) = (lanes.splat_i(-nmax), lanes.splat_i(nmax - 1));

    let iscale = lanes.div(lanes.splat(-(nmax as f32)), max);
    let mut ls = Columns::new();
    let (mut sumlx, mut suml2) = (zero, zero);
    for &v in xs {
        let l = lanes.clamp_i(lanes.nearest_int(lanes.mul(iscale, v)), low, high);
        ls.push(l);
        let q = lanes.to_float(l);
        let w = lanes.mul(v, v);
        sumlx = lanes.add(sumlx, lanes.mul(lanes.mul(w, v), q));
        suml2 = lanes.add(suml2, lanes.mul(lanes.mul(w, q), q));
    }
    for _ in 0..5 {
        let mut changed = lanes.none();
        for (l, &v) in ls.iter_mut().zip(xs) {
            let w = lanes.mul(v, v);
            let wv = lanes.mul(w, v);
            let li = lanes.to_float(*l);
            let mut slx = lanes.sub(sumlx, lanes.mul(wv, li));
            let positive = lanes.gt(slx, zero);
            if !lanes.any(positive) {
                continue;
            }
            let mut sl2 = lanes.sub(suml2, lanes.mul(lanes.mul(w, li), li));
            let new_l = lanes.clamp_i(lanes.nearest_int(lanes.div(lanes.mul(v, sl2), slx)), low, high);
            let moved = lanes.and_not(positive, lanes.eq_i(new_l, *l));
            let new_q = lanes.to_float(new_l);
            slx = lanes.add(slx, lanes.mul(wv, new_q));
            sl2 = lanes.add(sl2, lanes.mul(lanes.mul(w, new_q), new_q));
            let gains = lanes.gt(lanes.mul(lanes.mul(slx, slx), suml2), lanes.mul(lanes.mul(sumlx, sumlx), sl2));
            let accept = lanes.and(moved, lanes.and(lanes.gt(sl2, zero), gains));
            *l = lanes.select_i(accept, *l, new_l);
            sumlx = lanes.select(accept, sumlx, slx);
            suml2 = lanes.select(accept, suml2, sl2);
            changed = lanes.or(changed, accept);
        }
        if !lanes.any(changed) {
            break;
        }
    }

    let offset = lanes.splat_i(nmax);
    for l in ls.iter_mut() {
        *l = lanes.select_i(degenerate, lanes.add_i(*l, offset), lanes.splat_i(0));
    }
    lanes.scatter_groups(&ls, levels);
    let scale = lanes.select(lanes.gt(suml2, zero), zero, lanes.div(sumlx, suml2));
    lanes.store(lanes.select(degenerate, scale, zero), scales);
}

/// One IQ4 trial: each value at `id` mapped to its nearest table value;
/// returns Σ w·q·x and Σ w·q².
#[inline(always)]
fn iq4_trial<L: Lanes>(lanes: L, id: L::F, xs: &[L::F], ws: &[L::F]) -> (L::F, L::F) {
    let (mut sumqx, mut sumq2) = (lanes.splat(0.0), lanes.splat(0.0));
    for (&v, &w) in xs.iter().zip(ws) {
        let q = iq4_nearest_value(lanes, lanes.mul(id, v));
        let wq = lanes.mul(w, q);
        sumqx = lanes.add(sumqx, lanes.mul(wq, v));
        sumq2 = lanes.add(sumq2, lanes.mul(wq, q));
    }
    (sumqx, sumq2)
}

/// The scale search of IQ4_NL and IQ4_XS ([`super::iq4::sub_block_scale`])
/// on `N` consecutive 32-value sub-blocks; each one's scale to `scales[j]`.
#[inline(always)]
fn iq4_scales<L: Lanes>(lanes: L, x: &[f32], weights: &[f32], scales: &mut [f32]) {
    const N: usize = 32;
    let (mut xs, mut ws) = (Columns::new(), Columns::new());
    lanes.gather_groups(x, N, &mut xs);
    lanes.gather_groups(weights, N, &mut ws);
    let (xs, ws) = (&xs[..], &ws[..]);
    let zero = lanes.splat(0.0);
    let (max, degenerate) = signed_absmax(lanes, xs);
    let v0 = f32::from(KVALUES[0]);
    let d0 = lanes.div(lanes.negate(max), lanes.splat(v0));
    let (sumqx, sumq2) = iq4_trial(lanes, lanes.div(lanes.splat(1.0), d0), xs, ws);
    let mut d = lanes.select(lanes.gt(sumq2, zero), zero, lanes.div(sumqx, sumq2));
    let mut best = lanes.mul(d, sumqx);
    for itry in -NTRY..=NTRY {
        let id = lanes.div(lanes.splat((itry + i32::from(KVALUES[0])) as f32), max);
        let (sumqx, sumq2) = iq4_trial(lanes, id, xs, ws);
        let better = lanes.and(lanes.gt(sumq2, zero), lanes.gt(lanes.mul(sumqx, sumqx), lanes.mul(best, sumq2)));
        d = lanes.select(better, d, lanes.div(sumqx, sumq2));
        best = lanes.select(better, best, lanes.mul(d, sumqx));
    }
    lanes.store(lanes.select(degenerate, d, zero), scales);
}

/// `best_index_int8(KVALUES, scale · x[j])` for each of 32 values.
#[inline(always)]
fn iq4_indices<L: Lanes>(lanes: L, scale: f32, x: &[f32], indices: &mut [u8]) {
    let (x, indices) = (&x[..32], &mut indices[..32]);
    for (x, out) in x.chunks_exact(L::N).zip(indices.chunks_exact_mut(L::N)) {
        let v = lanes.mul(lanes.splat(scale), lanes.load(x));
        lanes.store_bytes(iq4_nearest_index(lanes, v), out);
    }
}

/// [`super::search::requantize_groups`] at one width, which divides `n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn requantize<L: Lanes>(
    lanes: L,
    n: usize,
    x: &[f32],
    d: &[f32],
    dm: Option<&[f32]>,
    range: (i32, i32),
    offset: i32,
    levels: &mut [u8],
) {
    let (low, high, offset) = (lanes.splat_i(range.0), lanes.splat_i(range.1), lanes.splat_i(offset));
    for (g, &dg) in d.iter().enumerate() {
        if dg == 0.0 {
            continue;
        }
        let dv = lanes.splat(dg);
        for (x, out) in x[n * g..][..n].chunks_exact(L::N).zip(levels[n * g..][..n].chunks_exact_mut(L::N)) {
            // No closure here: it would not be compiled for the width.
            let shifted = if let Some(dm) = dm { lanes.add(lanes.load(x), lanes.splat(dm[g])) } else { lanes.load(x) };
            let q = lanes.clamp_i(lanes.nearest_int(lanes.div(shifted, dv)), low, high);
            lanes.store_bytes(lanes.add_i(q, offset), out);
        }
    }
}

/// `best_index_int8(KVALUES, x)` in each lane. The bisection ends at the
/// first entry `mu` with `x < KVALUES[mu]`, which is one plus the count of
/// inner entries that `x` is not below (NaN is below none, and ends at the
/// top as the bisection does); then the nearer of the two neighbours, the
/// upper on a tie; values at or past either end take that end.
#[inline(always)]
fn iq4_nearest_index<L: Lanes>(lanes: L, x: L::F) -> L::I {
    let value = |i: usize| lanes.splat(f32::from(KVALUES[i]));
    let one = lanes.splat_i(1);
    let mut mu = one;
    for i in 1..KVALUES.len() - 1 {
        mu = lanes.select_i(lanes.not_lt(x, value(i)), mu, lanes.add_i(mu, one));
    }
    let below_index = lanes.add_i(mu, lanes.splat_i(-1));
    let nearer_below = lanes
        .lt(lanes.sub(x, lanes.lookup16(&KVALUES_F32, below_index)), lanes.sub(lanes.lookup16(&KVALUES_F32, mu), x));
    let index = lanes.select_i(nearer_below, mu, below_index);
    let last = KVALUES.len() - 1;
    let index = lanes.select_i(lanes.ge(x, value(last)), index, lanes.splat_i(last as i32));
    lanes.select_i(lanes.le(x, value(0)), index, lanes.splat_i(0))
}

/// [`KVALUES`] as floats.
const KVALUES_F32: [f32; 16] = {
    let mut table = [0.0; 16];
    let mut i = 0;
    while i < 16 {
        table[i] = KVALUES[i] as f32;
        i += 1;
    }
    table
};

/// `KVALUES[best_index_int8(KVALUES, x)]` in each lane.
#[inline(always)]
fn iq4_nearest_value<L: Lanes>(lanes: L, x: L::F) -> L::F {
    lanes.lookup16(&KVALUES_F32, iq4_nearest_index(lanes, x))
}

/// Each generic search compiled for one width, in module `$width`: every
/// operation inlined into a function with the width's target features.
macro_rules! at_width {
    ($width:ident, $lanes:ty, $features:literal) => {
        at_width!(@module $width, $lanes, $features;);
    };
    // The widths the last passes over 16- and 32-value groups run at.
    ($width:ident, $lanes:ty, $features:literal, whole_groups) => {
        at_width!(@module $width, $lanes, $features;
            requantize(
                n: usize, x: &[f32], d: &[f32], dm: Option<&[f32]>, range: (i32, i32), offset: i32, levels: &mut [u8]
            );
        );
    };
    (@module $width:ident, $lanes:ty, $features:literal; $($group_passes:tt)*) => {
        pub mod $width {
            use super::*;

            at_width!(@compile $lanes, $features;
                make_qkx_quants(
                    nmax: i32, n: usize, x: &[f32], weights: &[f32], levels: &mut [u8], search: MinSearch,
                    qkx3: bool, scales: &mut [f32], neg_mins: &mut [f32]
                );
                make_qx_quants(
                    nmax: i32, n: usize, x: &[f32], levels: &mut [u8], weights: Option<&[f32]>, scales: &mut [f32]
                );
                make_q3_quants(nmax: i32, n: usize, x: &[f32], levels: &mut [u8], scales: &mut [f32]);
                iq4_scales(x: &[f32], weights: &[f32], scales: &mut [f32]);
                iq4_indices(scale: f32, x: &[f32], indices: &mut [u8]);
                $($group_passes)*
            );
        }
    };
    (@compile $lanes:ty, $features:literal; $($search:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($search), "` at this width.")]
        #[allow(clippy::too_many_arguments)]
        pub fn $search(lanes: $lanes, $($arg: $ty),*) {
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            fn compiled(lanes: $lanes, $($arg: $ty),*) {
                super::$search(lanes, $($arg),*)
            }
            // SAFETY: the token exists only where the machine has these features.
            unsafe { compiled(lanes, $($arg),*) }
        }
    )*};
}

at_width!(avx2, Avx2, "avx2");
at_width!(avx2_twice, Twice<Avx2>, "avx2", whole_groups);
at_width!(avx512, Avx512, "avx512f,avx2", whole_groups);
at_width!(avx512_twice, Twice<Avx512>, "avx512f,avx2", whole_groups);
