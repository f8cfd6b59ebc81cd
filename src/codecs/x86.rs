//! x86-64 vector kernels. Each computes exactly what its scalar reference in
//! the block-family module computes, operation for operation (no fused
//! multiply-add, the same rounding), a block per iteration.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::blocks::{BlockQ8_0, QK, inverse};
use super::scalar::{F16, c_float_to_i8};

/// Q8_0 with AVX2: the block's absolute maximum (order does not matter for
/// the maximum of finite values, which is all the quantizer sees), then
/// `roundf(x * id)` as trunc plus a half-away step.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_q8_0_avx2(src: &[f32], blocks: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks) {
        let v = load_block_avx2(x);
        let amax = abs_max_avx2(&v);
        let d = amax / 127.0;
        let id = inverse(d);
        b.d = F16::from_f32(d);
        let idv = _mm256_set1_ps(id);
        let mut rounded = [0f32; QK];
        for (k, &vk) in v.iter().enumerate() {
            let r = round_half_away_avx(_mm256_mul_ps(vk, idv));
            // SAFETY: eight floats fit at 8k of a 32-float array.
            unsafe { _mm256_storeu_ps(rounded.as_mut_ptr().add(8 * k), r) };
        }
        for (q, r) in b.qs.iter_mut().zip(rounded) {
            *q = c_float_to_i8(r);
        }
    }
}

/// A 32-float block as four vectors. (A closure would not inherit the
/// target feature and would call the loads out of line.)
#[target_feature(enable = "avx2")]
fn load_block_avx2(x: &[f32]) -> [__m256; 4] {
    let x = &x[..QK];
    // SAFETY: the block holds QK = 32 floats, four loads of eight.
    unsafe {
        let at = x.as_ptr();
        [_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8)), _mm256_loadu_ps(at.add(16)), _mm256_loadu_ps(at.add(24))]
    }
}

/// The largest absolute value of a 32-float block held in four vectors
/// (exact in any order for finite values).
#[target_feature(enable = "avx2")]
fn abs_max_avx2(v: &[__m256; 4]) -> f32 {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let m = _mm256_max_ps(
        _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
        _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)),
    );
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m)))
}

/// `roundf` on eight floats: truncate, then step away from zero when the
/// dropped fraction is at least one half (the fraction `x - trunc(x)` is
/// exact in floating point).
#[target_feature(enable = "avx2")]
fn round_half_away_avx(x: __m256) -> __m256 {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
    let frac = _mm256_and_ps(_mm256_sub_ps(x, t), abs_mask);
    let step = _mm256_or_ps(_mm256_andnot_ps(abs_mask, x), _mm256_set1_ps(1.0));
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
    _mm256_add_ps(t, _mm256_and_ps(away, step))
}

/// Q8_0 with AVX-512: as [`quantize_q8_0_avx2`], two vectors a block.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_q8_0_avx512(src: &[f32], blocks: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks) {
        // SAFETY: a chunk holds QK = 32 floats, two loads of sixteen.
        let (lo, hi) = unsafe { (_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(x.as_ptr().add(16))) };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        let d = amax / 127.0;
        let id = inverse(d);
        b.d = F16::from_f32(d);
        let idv = _mm512_set1_ps(id);
        for (k, half) in [lo, hi].into_iter().enumerate() {
            let r = round_half_away_avx512(_mm512_mul_ps(half, idv));
            // `(int8_t)r`: cvttps2dq as cvttss2si (INT_MIN out of range), then the low byte.
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));
            // SAFETY: sixteen bytes fit at 16k of the block's 32.
            unsafe { _mm_storeu_si128(b.qs.as_mut_ptr().add(16 * k).cast(), bytes) };
        }
    }
}

#[target_feature(enable = "avx512f")]
fn round_half_away_avx512(x: __m512) -> __m512 {
    let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
    let frac = _mm512_abs_ps(_mm512_sub_ps(x, t));
    let sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN));
    let step = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_castps_si512(_mm512_set1_ps(1.0))));
    let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
    _mm512_mask_add_ps(t, away, t, step)
}

/// f16 to f32 with F16C, eight values a step; returns how many it converted
/// (whole groups of eight), leaving the tail to the scalar code.
///
/// # Safety
/// The CPU must support F16C and AVX.
#[target_feature(enable = "f16c,avx")]
pub unsafe fn decode_f16_f16c(src: &[u8], dst: &mut [f32]) -> usize {
    let n = (src.len() / 2).min(dst.len()) / 8 * 8;
    for (chunk, out) in src[..n * 2].chunks_exact(16).zip(dst[..n].chunks_exact_mut(8)) {
        // SAFETY: 16 bytes in, 8 floats out, unaligned loads and stores.
        unsafe {
            let halves = _mm_loadu_si128(chunk.as_ptr().cast());
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(halves));
        }
    }
    n
}

/// The levels and scale of Q4_0 (`nmax` 8) and Q5_0 (16) without importance
/// weights: the value of largest magnitude (the first of equals, as the
/// reference scans) mapped to `-nmax`, each level `min(2·nmax − 1,
/// (int8_t)(x·id + nmax + 0.5))` with x86's truncating conversion.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn symmetric_levels_avx2(x: &[f32], nmax: i32) -> (f32, [u8; QK]) {
    let v = load_block_avx2(x);
    let amax = abs_max_avx2(&v);
    let max = if amax > 0.0 { x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0) } else { 0.0 };
    let d = max / -(nmax as f32);
    let id = inverse(d);
    let (idv, offset, limit) = (_mm256_set1_ps(id), _mm256_set1_ps(nmax as f32 + 0.5), _mm256_set1_epi32(2 * nmax - 1));
    let mut levels = [0i32; QK];
    for (k, &vk) in v.iter().enumerate() {
        let truncated = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(vk, idv), offset));
        // (int8_t) keeps the low byte, sign-extended.
        let narrowed = _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(truncated));
        // SAFETY: eight lanes fit at 8k of a 32-lane array.
        unsafe { _mm256_storeu_si256(levels.as_mut_ptr().add(8 * k).cast(), _mm256_min_epi32(narrowed, limit)) };
    }
    let mut bytes = [0u8; QK];
    for (byte, level) in bytes.iter_mut().zip(levels) {
        *byte = level as u8;
    }
    (d, bytes)
}

/// A 32-value block stored as sixteen bytes of 4-bit indices into a table of
/// signed bytes (low nibbles are values 0–15, high nibbles 16–31), each
/// value `scale · table[index]`: IQ4_NL, an IQ4_XS sub-block, MXFP4. The
/// lookup is a byte shuffle; the product is the scalar one, exactly.
#[target_feature(enable = "avx2")]
pub fn decode_nibble_table_avx2(table: &[i8; 16], qs: &[u8; 16], scale: f32, out: &mut [f32]) {
    let out = &mut out[..32];
    // SAFETY: both arrays hold sixteen bytes.
    let (table, q) = unsafe { (_mm_loadu_si128(table.as_ptr().cast()), _mm_loadu_si128(qs.as_ptr().cast())) };
    let nibble = _mm_set1_epi8(0x0f);
    let low = _mm_shuffle_epi8(table, _mm_and_si128(q, nibble));
    let high = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(q), nibble));
    let scale = _mm256_set1_ps(scale);
    for (k, bytes) in [low, _mm_srli_si128::<8>(low), high, _mm_srli_si128::<8>(high)].into_iter().enumerate() {
        let values = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        // SAFETY: eight floats fit at 8k of the 32-float block.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), _mm256_mul_ps(scale, values)) };
    }
}
