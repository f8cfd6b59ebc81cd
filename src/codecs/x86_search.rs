//! The scale searches of [`super::search`] with AVX2, eight groups at once:
//! lane `j` runs group `j`'s exact scalar sequence (the same operations in
//! the same order, sums accumulated element by element, no fused
//! multiply-add), so every lane ends where the scalar search would. Groups
//! are independent, which is what lets the work spread across lanes; the
//! search inside one group is a chain of dependent f32 sums that must not be
//! reordered.
//!
//! Inputs come as eight consecutive groups of `n` values (`n` ≤ 32); they
//! are gathered into element-major vectors (vector `i` holds element `i` of
//! every group) once, and every pass of the search works on those.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::blocks::{BATCH as LANES, GROUP_MAX_EPS, KVALUES, MinSearch, NTRY};

const MAX_GROUP: usize = 32;

/// Element `i` of each of eight groups of `n` values, for `i < n`.
#[target_feature(enable = "avx2")]
fn gather_groups(v: &[f32], n: usize) -> [__m256; MAX_GROUP] {
    assert!(n <= MAX_GROUP && v.len() >= LANES * n);
    let n32 = n as i32;
    let index = _mm256_setr_epi32(0, n32, 2 * n32, 3 * n32, 4 * n32, 5 * n32, 6 * n32, 7 * n32);
    let mut out = [_mm256_setzero_ps(); MAX_GROUP];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: the largest index read is 7n + i < 8n ≤ v.len() (asserted above).
        *o = unsafe { _mm256_i32gather_ps::<4>(v.as_ptr().add(i), index) };
    }
    out
}

/// Writes lane `j` of `levels[i]` to `out[j·n + i]`, through `to_byte`.
#[target_feature(enable = "avx2")]
fn scatter_levels(levels: &[__m256i; MAX_GROUP], n: usize, out: &mut [u8], to_byte: impl Fn(i32) -> u8) {
    let out = &mut out[..LANES * n];
    for (i, &l) in levels.iter().enumerate().take(n) {
        let mut lanes = [0i32; LANES];
        // SAFETY: eight i32 fit in `lanes`.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), l) };
        for (j, &lane) in lanes.iter().enumerate() {
            out[j * n + i] = to_byte(lane);
        }
    }
}

fn to_array(v: __m256) -> [f32; LANES] {
    // SAFETY: __m256 and [f32; 8] have the same size, and every bit pattern is valid for both.
    unsafe { std::mem::transmute(v) }
}

/// ggml's `nearest_int` on eight floats: the same bit trick as
/// [`super::scalar::nearest_int`], so out-of-range inputs give the same
/// (meaningless) integers.
#[target_feature(enable = "avx2")]
fn nearest_int(x: __m256) -> __m256i {
    let bits = _mm256_castps_si256(_mm256_add_ps(x, _mm256_set1_ps(12_582_912.0)));
    _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)), _mm256_set1_epi32(0x0040_0000))
}

#[target_feature(enable = "avx2")]
fn clamp(l: __m256i, low: __m256i, high: __m256i) -> __m256i {
    _mm256_min_epi32(_mm256_max_epi32(l, low), high)
}

#[target_feature(enable = "avx2")]
fn select(mask: __m256, if_false: __m256, if_true: __m256) -> __m256 {
    _mm256_blendv_ps(if_false, if_true, mask)
}

#[target_feature(enable = "avx2")]
fn select_i(mask: __m256, if_false: __m256i, if_true: __m256i) -> __m256i {
    _mm256_blendv_epi8(if_false, if_true, _mm256_castps_si256(mask))
}

#[target_feature(enable = "avx2")]
fn any(mask: __m256) -> bool {
    _mm256_movemask_ps(mask) != 0
}

/// [`super::search::make_qkx_quants`] on eight groups of `n` values:
/// levels for group `j` go to `levels[j·n..][..n]`; returns each group's
/// `(scale, -min)`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn make_qkx_quants_x8(
    nmax: i32,
    n: usize,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    search: MinSearch,
    qkx3: bool,
) -> ([f32; LANES], [f32; LANES]) {
    let xs = gather_groups(x, n);
    let ws = gather_groups(weights, n);
    let (xs, ws) = (&xs[..n], &ws[..n]);
    let zero = _mm256_setzero_ps();
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let error = |diff: __m256| if search.use_mad { _mm256_and_ps(diff, abs_mask) } else { _mm256_mul_ps(diff, diff) };
    let (low, high) = (_mm256_setzero_si256(), _mm256_set1_epi32(nmax));

    let (mut min, mut max) = (xs[0], xs[0]);
    let mut sum_w = ws[0];
    let mut sum_x = _mm256_mul_ps(sum_w, xs[0]);
    for (&v, &w) in xs.iter().zip(ws).skip(1) {
        // MINPS/MAXPS return their second operand unless the first is strictly
        // smaller/larger: the scalar `if v < min { min = v }`.
        min = _mm256_min_ps(v, min);
        max = _mm256_max_ps(v, max);
        sum_w = _mm256_add_ps(sum_w, w);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w, v));
    }
    min = _mm256_min_ps(zero, min);
    let degenerate = if qkx3 { _mm256_cmp_ps::<_CMP_LE_OQ>(max, min) } else { _mm256_cmp_ps::<_CMP_EQ_OQ>(max, min) };
    let first_min = min;

    let iscale = _mm256_div_ps(_mm256_set1_ps(nmax as f32), _mm256_sub_ps(max, min));
    let mut scale = _mm256_div_ps(_mm256_set1_ps(1.0), iscale);
    let mut best_error = zero;
    let mut best = [_mm256_setzero_si256(); MAX_GROUP];
    for ((b, &v), &w) in best.iter_mut().zip(xs).zip(ws) {
        *b = clamp(nearest_int(_mm256_mul_ps(iscale, _mm256_sub_ps(v, min))), low, high);
        let diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(*b)), min), v);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(w, error(diff)));
    }

    let mut aux = [_mm256_setzero_si256(); MAX_GROUP];
    // A search of fewer than one step keeps the first levels.
    let steps = if search.nstep < 1 { 0 } else { search.nstep + 1 };
    for is in 0..steps {
        // `min` moves with each better step, and the next steps start from it, as in ggml.
        let numerator = _mm256_set1_ps(search.rmin + search.rdelta * is as f32 + nmax as f32);
        let iscale = _mm256_div_ps(numerator, _mm256_sub_ps(max, min));
        let (mut sum_l, mut sum_l2, mut sum_xl) = (zero, zero, zero);
        for ((a, &v), &w) in aux.iter_mut().zip(xs).zip(ws) {
            *a = clamp(nearest_int(_mm256_mul_ps(iscale, _mm256_sub_ps(v, min))), low, high);
            let lf = _mm256_cvtepi32_ps(*a);
            let wl = _mm256_mul_ps(w, lf);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, lf));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, v));
        }
        let det = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        let solvable = _mm256_cmp_ps::<_CMP_GT_OQ>(det, zero);
        if !any(solvable) {
            continue;
        }
        let mut this_scale =
            _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), det);
        let mut this_min =
            _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), det);
        let positive_min = _mm256_cmp_ps::<_CMP_GT_OQ>(this_min, zero);
        this_min = select(positive_min, this_min, zero);
        this_scale = select(positive_min, this_scale, _mm256_div_ps(sum_xl, sum_l2));
        let mut cur_error = zero;
        for ((&a, &v), &w) in aux.iter().zip(xs).zip(ws) {
            let diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(a)), this_min), v);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(w, error(diff)));
        }
        let better = _mm256_and_ps(solvable, _mm256_cmp_ps::<_CMP_LT_OQ>(cur_error, best_error));
        if !any(better) {
            continue;
        }
        for (b, &a) in best.iter_mut().zip(&aux).take(n) {
            *b = select_i(better, *b, a);
        }
        best_error = select(better, best_error, cur_error);
        scale = select(better, scale, this_scale);
        min = select(better, min, this_min);
    }

    for b in best.iter_mut().take(n) {
        *b = select_i(degenerate, *b, _mm256_setzero_si256());
    }
    scatter_levels(&best, n, levels, |l| l as u8);
    let scale = select(degenerate, scale, zero);
    let min = select(degenerate, min, first_min);
    (to_array(scale), to_array(_mm256_xor_ps(min, _mm256_set1_ps(-0.0))))
}

/// [`super::search::make_qx_quants`] with squared (or given) weights on
/// eight groups of `n` values: levels for group `j` go to `levels[j·n..][..n]`
/// (offset by `nmax`); returns each group's scale.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn make_qx_quants_x8(
    nmax: i32,
    n: usize,
    x: &[f32],
    levels: &mut [u8],
    weights: Option<&[f32]>,
) -> [f32; LANES] {
    let xs = gather_groups(x, n);
    let xs = &xs[..n];
    let zero = _mm256_setzero_ps();
    let (max, degenerate) = signed_absmax(xs);

    let ws = match weights {
        Some(given) => gather_groups(given, n),
        None => {
            let mut squares = [zero; MAX_GROUP];
            for (s, &v) in squares.iter_mut().zip(xs) {
                *s = _mm256_mul_ps(v, v);
            }
            squares
        }
    };
    let ws = &ws[..n];
    let (low, high) = (_mm256_set1_epi32(-nmax), _mm256_set1_epi32(nmax - 1));
    let round_and_sum = |numerator: f32, trial: &mut [__m256i; MAX_GROUP]| {
        let iscale = _mm256_div_ps(_mm256_set1_ps(numerator), max);
        let (mut sumlx, mut suml2) = (zero, zero);
        for ((t, &v), &w) in trial.iter_mut().zip(xs).zip(ws) {
            *t = clamp(nearest_int(_mm256_mul_ps(iscale, v)), low, high);
            let lf = _mm256_cvtepi32_ps(*t);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, v), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
        }
        (sumlx, suml2)
    };

    let mut best_levels = [_mm256_setzero_si256(); MAX_GROUP];
    let (sumlx, suml2) = round_and_sum(-(nmax as f32), &mut best_levels);
    let nonzero = _mm256_cmp_ps::<_CMP_NEQ_UQ>(suml2, zero);
    let mut scale = select(nonzero, zero, _mm256_div_ps(sumlx, suml2));
    let mut best = _mm256_mul_ps(scale, sumlx);
    let mut trial = [_mm256_setzero_si256(); MAX_GROUP];
    for is in (-9..=9).filter(|&is| is != 0) {
        let (sumlx, suml2) = round_and_sum(-(nmax as f32 + 0.1 * is as f32), &mut trial);
        let better = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GT_OQ>(suml2, zero),
            _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2)),
        );
        if !any(better) {
            continue;
        }
        for (b, &t) in best_levels.iter_mut().zip(&trial).take(n) {
            *b = select_i(better, *b, t);
        }
        scale = select(better, scale, _mm256_div_ps(sumlx, suml2));
        best = select(better, best, _mm256_mul_ps(scale, sumlx));
    }

    let offset = _mm256_set1_epi32(nmax);
    for b in best_levels.iter_mut().take(n) {
        *b = select_i(degenerate, _mm256_add_epi32(*b, offset), _mm256_setzero_si256());
    }
    scatter_levels(&best_levels, n, levels, |l| l as u8);
    to_array(select(degenerate, scale, zero))
}

/// [`super::search::make_q3_quants`] with `do_rmse` on eight groups of `n`
/// values: levels for group `j` go to `levels[j·n..][..n]` (offset by
/// `nmax`); returns each group's scale. A lane whose pass changed nothing
/// would have stopped; passing again over it changes nothing either, so
/// the lanes stop together, when none changed.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn make_q3_quants_x8(nmax: i32, n: usize, x: &[f32], levels: &mut [u8]) -> [f32; LANES] {
    let xs = gather_groups(x, n);
    let xs = &xs[..n];
    let zero = _mm256_setzero_ps();
    let (max, degenerate) = signed_absmax(xs);
    let (low, high) = (_mm256_set1_epi32(-nmax), _mm256_set1_epi32(nmax - 1));

    let iscale = _mm256_div_ps(_mm256_set1_ps(-(nmax as f32)), max);
    let mut ls = [_mm256_setzero_si256(); MAX_GROUP];
    let (mut sumlx, mut suml2) = (zero, zero);
    for (l, &v) in ls.iter_mut().zip(xs) {
        *l = clamp(nearest_int(_mm256_mul_ps(iscale, v)), low, high);
        let q = _mm256_cvtepi32_ps(*l);
        let w = _mm256_mul_ps(v, v);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, v), q));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, q), q));
    }
    for _ in 0..5 {
        let mut changed = zero;
        for (l, &v) in ls.iter_mut().zip(xs) {
            let w = _mm256_mul_ps(v, v);
            let wv = _mm256_mul_ps(w, v);
            let li = _mm256_cvtepi32_ps(*l);
            let mut slx = _mm256_sub_ps(sumlx, _mm256_mul_ps(wv, li));
            let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(slx, zero);
            if !any(positive) {
                continue;
            }
            let mut sl2 = _mm256_sub_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, li), li));
            let new_l = clamp(nearest_int(_mm256_div_ps(_mm256_mul_ps(v, sl2), slx)), low, high);
            let moved = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(new_l, *l)), positive);
            let new_q = _mm256_cvtepi32_ps(new_l);
            slx = _mm256_add_ps(slx, _mm256_mul_ps(wv, new_q));
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(w, new_q), new_q));
            let gains = _mm256_cmp_ps::<_CMP_GT_OQ>(
                _mm256_mul_ps(_mm256_mul_ps(slx, slx), suml2),
                _mm256_mul_ps(_mm256_mul_ps(sumlx, sumlx), sl2),
            );
            let accept = _mm256_and_ps(moved, _mm256_and_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(sl2, zero), gains));
            *l = select_i(accept, *l, new_l);
            sumlx = select(accept, sumlx, slx);
            suml2 = select(accept, suml2, sl2);
            changed = _mm256_or_ps(changed, accept);
        }
        if !any(changed) {
            break;
        }
    }

    let offset = _mm256_set1_epi32(nmax);
    for l in ls.iter_mut().take(n) {
        *l = select_i(degenerate, _mm256_add_epi32(*l, offset), _mm256_setzero_si256());
    }
    scatter_levels(&ls, n, levels, |l| l as u8);
    let scale = select(_mm256_cmp_ps::<_CMP_GT_OQ>(suml2, zero), zero, _mm256_div_ps(sumlx, suml2));
    to_array(select(degenerate, scale, zero))
}

/// The scale search of IQ4_NL and IQ4_XS ([`super::iq4::sub_block_scale`])
/// on eight consecutive 32-value sub-blocks; returns each one's scale.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn iq4_scales_x8(x: &[f32], weights: &[f32]) -> [f32; LANES] {
    const N: usize = 32;
    let xs = gather_groups(x, N);
    let ws = gather_groups(weights, N);
    let (xs, ws) = (&xs[..N], &ws[..N]);
    let zero = _mm256_setzero_ps();
    let (max, degenerate) = signed_absmax(xs);
    let sums = |id: __m256| {
        let (mut sumqx, mut sumq2) = (zero, zero);
        for (&v, &w) in xs.iter().zip(ws) {
            let q = iq4_nearest_value(_mm256_mul_ps(id, v));
            let wq = _mm256_mul_ps(w, q);
            sumqx = _mm256_add_ps(sumqx, _mm256_mul_ps(wq, v));
            sumq2 = _mm256_add_ps(sumq2, _mm256_mul_ps(wq, q));
        }
        (sumqx, sumq2)
    };
    let v0 = f32::from(KVALUES[0]);
    let d0 = _mm256_div_ps(_mm256_xor_ps(max, _mm256_set1_ps(-0.0)), _mm256_set1_ps(v0));
    let (sumqx, sumq2) = sums(_mm256_div_ps(_mm256_set1_ps(1.0), d0));
    let mut d = select(_mm256_cmp_ps::<_CMP_GT_OQ>(sumq2, zero), zero, _mm256_div_ps(sumqx, sumq2));
    let mut best = _mm256_mul_ps(d, sumqx);
    for itry in -NTRY..=NTRY {
        let (sumqx, sumq2) = sums(_mm256_div_ps(_mm256_set1_ps((itry + i32::from(KVALUES[0])) as f32), max));
        let better = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GT_OQ>(sumq2, zero),
            _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_mul_ps(sumqx, sumqx), _mm256_mul_ps(best, sumq2)),
        );
        d = select(better, d, _mm256_div_ps(sumqx, sumq2));
        best = select(better, best, _mm256_mul_ps(d, sumqx));
    }
    to_array(select(degenerate, d, zero))
}

/// Per lane, the value of largest magnitude (the first of equals) and
/// whether that magnitude is below [`GROUP_MAX_EPS`].
#[target_feature(enable = "avx2")]
fn signed_absmax(xs: &[__m256]) -> (__m256, __m256) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (mut max, mut amax) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for &v in xs {
        let magnitude = _mm256_and_ps(v, abs_mask);
        let larger = _mm256_cmp_ps::<_CMP_GT_OQ>(magnitude, amax);
        amax = select(larger, amax, magnitude);
        max = select(larger, max, v);
    }
    (max, _mm256_cmp_ps::<_CMP_LT_OQ>(amax, _mm256_set1_ps(GROUP_MAX_EPS)))
}

/// `best_index_int8(KVALUES, scale · x[j])` for each of 32 values, as
/// [`iq4_nearest_index`] finds it eight at a time.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn iq4_indices_x32(scale: f32, x: &[f32], indices: &mut [u8]) {
    let (x, indices) = (&x[..32], &mut indices[..32]);
    for (x, out) in x.chunks_exact(8).zip(indices.chunks_exact_mut(8)) {
        // SAFETY: eight floats in `x` and eight i32 in `lanes`.
        let v = _mm256_mul_ps(_mm256_set1_ps(scale), unsafe { _mm256_loadu_ps(x.as_ptr()) });
        let mut lanes = [0i32; LANES];
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), iq4_nearest_index(v)) };
        for (o, &l) in out.iter_mut().zip(&lanes) {
            *o = l as u8;
        }
    }
}

/// `best_index_int8(KVALUES, x)` on eight floats. The bisection ends at
/// the first entry `mu` with `x < KVALUES[mu]`, which is one plus the count
/// of inner entries that `x` is not below (NaN is below none, and ends at
/// the top as the bisection does); then the nearer of the two neighbours,
/// the upper on a tie; values at or past either end take that end.
#[target_feature(enable = "avx2")]
fn iq4_nearest_index(x: __m256) -> __m256i {
    let value = |i: usize| _mm256_set1_ps(f32::from(KVALUES[i]));
    let mut mu = _mm256_set1_epi32(1);
    for i in 1..KVALUES.len() - 1 {
        let not_below = _mm256_cmp_ps::<_CMP_NLT_US>(x, value(i));
        mu = _mm256_sub_epi32(mu, _mm256_castps_si256(not_below));
    }
    let below_index = _mm256_sub_epi32(mu, _mm256_set1_epi32(1));
    let nearer_below = _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_sub_ps(x, kvalue(below_index)), _mm256_sub_ps(kvalue(mu), x));
    let index = select_i(nearer_below, mu, below_index);
    let last = KVALUES.len() - 1;
    let index = select_i(_mm256_cmp_ps::<_CMP_GE_OQ>(x, value(last)), index, _mm256_set1_epi32(last as i32));
    select_i(_mm256_cmp_ps::<_CMP_LE_OQ>(x, value(0)), index, _mm256_setzero_si256())
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

/// `KVALUES[best_index_int8(KVALUES, x)]` on eight floats.
#[target_feature(enable = "avx2")]
fn iq4_nearest_value(x: __m256) -> __m256 {
    kvalue(iq4_nearest_index(x))
}

/// `KVALUES[index]` on eight indices (each below 16).
#[target_feature(enable = "avx2")]
fn kvalue(index: __m256i) -> __m256 {
    // SAFETY: the table holds sixteen floats, two loads of eight.
    let (low_half, high_half) =
        unsafe { (_mm256_loadu_ps(KVALUES_F32.as_ptr()), _mm256_loadu_ps(KVALUES_F32.as_ptr().add(8))) };
    let upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(index, _mm256_set1_epi32(7)));
    select(upper, _mm256_permutevar8x32_ps(low_half, index), _mm256_permutevar8x32_ps(high_half, index))
}
