//! Q1_0 and Q2_0: one f16 scale per block and one or two bits per weight.
//! Q1_0 keeps each weight's sign in 128-value blocks scaled by their mean
//! magnitude (1.125 bits per weight); Q2_0 rounds 64-value blocks onto
//! {-1, 0, 1, 2} times their largest magnitude (2.25 bits per weight).
//! The encoders follow ggml's `quantize_row_q{1,2}_0_ref`, which ignore
//! importance weights.
//!
//! The loops are shaped for the compiler's vectorizer without changing one
//! f32 operation: Q1_0's mean is a sum whose order fixes its rounding, so
//! blocks are summed side by side (each still front to back) instead of
//! across; Q2_0's maximum is the same in any order, so it runs in lanes.

use bytemuck::{Pod, Zeroable};

use super::scalar::F16;
use crate::types::GgmlType;

const QK1: usize = GgmlType::Q1_0.block_size() as usize;
const QK2: usize = GgmlType::Q2_0.block_size() as usize;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockQ1_0 {
    d: F16,
    /// Bit `j % 8` of byte `j / 8` is set when weight `j` is not negative.
    qs: [u8; QK1 / 8],
}
const _: () = assert!(size_of::<BlockQ1_0>() as u64 == GgmlType::Q1_0.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockQ2_0 {
    d: F16,
    /// Weight `j` is bits `2·(j % 4)` of byte `j / 4`: its level plus one.
    qs: [u8; QK2 / 4],
}
const _: () = assert!(size_of::<BlockQ2_0>() as u64 == GgmlType::Q2_0.type_size());

pub fn dequantize_q1_0(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockQ1_0] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK1)) {
        let d = b.d.to_f32();
        for (&byte, y) in b.qs.iter().zip(y.chunks_exact_mut(8)) {
            for (bit, y) in y.iter_mut().enumerate() {
                *y = if byte >> bit & 1 != 0 { d } else { -d };
            }
        }
    }
}

pub fn dequantize_q2_0(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockQ2_0] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK2)) {
        let d = b.d.to_f32();
        for (&byte, y) in b.qs.iter().zip(y.chunks_exact_mut(4)) {
            for (n, y) in y.iter_mut().enumerate() {
                *y = (i32::from(byte >> (2 * n) & 3) - 1) as f32 * d;
            }
        }
    }
}

/// Blocks summed side by side: enough independent sums to hide the adder's
/// latency, each still in ggml's order.
const SIDE_BY_SIDE: usize = 8;

pub fn quantize_q1_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ1_0] = bytemuck::cast_slice_mut(dst);
    let mut src_groups = src.chunks_exact(SIDE_BY_SIDE * QK1);
    let mut dst_groups = blocks.chunks_exact_mut(SIDE_BY_SIDE);
    for (x, group) in (&mut src_groups).zip(&mut dst_groups) {
        let sums = abs_sums::<SIDE_BY_SIDE>(x);
        for ((b, x), sum) in group.iter_mut().zip(x.chunks_exact(QK1)).zip(sums) {
            encode_q1_0(b, x, sum);
        }
    }
    for (b, x) in dst_groups.into_remainder().iter_mut().zip(src_groups.remainder().chunks_exact(QK1)) {
        let [sum] = abs_sums::<1>(x);
        encode_q1_0(b, x, sum);
    }
}

/// The sum of magnitudes of each of `N` consecutive blocks, each added
/// front to back as ggml's `sum_abs += fabsf(x[j])` does.
#[inline(always)]
fn abs_sums<const N: usize>(x: &[f32]) -> [f32; N] {
    let mut sums = [0.0f32; N];
    for j in 0..QK1 {
        for (n, sum) in sums.iter_mut().enumerate() {
            *sum += x[n * QK1 + j].abs();
        }
    }
    sums
}

#[inline(always)]
fn encode_q1_0(b: &mut BlockQ1_0, x: &[f32], sum_abs: f32) {
    b.d = F16::from_f32(sum_abs / QK1 as f32);
    for (q, x) in b.qs.iter_mut().zip(x.chunks_exact(8)) {
        *q = x.iter().enumerate().fold(0u8, |byte, (bit, &v)| byte | u8::from(v >= 0.0) << bit);
    }
}

/// Lanes of the running maximum: as many as one AVX-512 register holds.
const LANES: usize = 16;

pub fn quantize_q2_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ2_0] = bytemuck::cast_slice_mut(dst);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK2)) {
        let d = amax(x);
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16::from_f32(d);
        for (q, x) in b.qs.iter_mut().zip(x.chunks_exact(4)) {
            *q = x.iter().enumerate().fold(0u8, |byte, (n, &v)| byte | level_q2_0(v * id) << (2 * n));
        }
    }
}

/// The largest magnitude as ggml's `if (a > amax) amax = a` finds it, from
/// zero: NaNs are passed over, so the result is the same in any order.
#[inline(always)]
fn amax(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    for x in x.chunks_exact(LANES) {
        for (lane, v) in lanes.iter_mut().zip(x) {
            let a = v.abs();
            if a > *lane {
                *lane = a;
            }
        }
    }
    lanes.into_iter().fold(0.0, |amax, a| if a > amax { a } else { amax })
}

/// ggml's `(int)roundf(v) + 1` clamped to [0, 3], with C's conversion of
/// NaN and out-of-range values (which a scale that overflowed to infinity
/// produces) to `INT_MIN`, so they land on 0. Written as the rounding's
/// thresholds (half away from zero: ±0.5, 1.5) so that it vectorizes; the
/// tests hold it to the call-by-call definition.
#[inline(always)]
fn level_q2_0(v: f32) -> u8 {
    const INT_RANGE_END: f32 = 2_147_483_648.0;
    let level = u8::from(v > -0.5) + u8::from(v >= 0.5) + u8::from(v >= 1.5);
    if v < INT_RANGE_END { level } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_rounds_half_away_from_zero_and_clamps_as_c() {
        let cases = [(-0.5, 0), (-0.49999997, 1), (0.49999997, 1), (0.5, 2), (1.5, 3), (7.0, 3), (-3.0, 0)];
        for (v, q) in cases {
            assert_eq!(level_q2_0(v), q, "{v}");
        }
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9] {
            assert_eq!(level_q2_0(v), 0, "{v}");
        }
    }

    #[test]
    fn level_thresholds_equal_c_rounding_and_conversion() {
        let by_definition = |v: f32| super::super::scalar::c_float_to_int(v.round()).wrapping_add(1).clamp(0, 3) as u8;
        let edges = [0.5f32, 1.5, 2_147_483_648.0, 1e30, f32::MIN_POSITIVE, 0.0];
        let near_edges = edges.iter().flat_map(|&e| {
            [e, f32::from_bits(e.to_bits() + 1), f32::from_bits(e.to_bits().max(1) - 1)]
                .into_iter()
                .flat_map(|v| [v, -v])
        });
        let spread = (0..1 << 20).map(|i: u32| f32::from_bits(i.wrapping_mul(4099)));
        for v in near_edges.chain(spread).chain([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]) {
            assert_eq!(level_q2_0(v), by_definition(v), "{v:e}");
        }
    }

    #[test]
    fn amax_passes_over_nan_in_any_position() {
        let mut x = [0.25f32; QK2];
        x[17] = -3.0;
        for nan_at in [0, 16, 63] {
            let mut x = x;
            x[nan_at] = f32::NAN;
            assert_eq!(amax(&x), 3.0);
        }
    }

    #[test]
    fn side_by_side_sums_equal_ggml_order() {
        // Magnitudes spread over many binades, so any change of order changes the rounding.
        let x: Vec<f32> =
            (0..9 * QK1).map(|i| ((i * 2_654_435_761) % 1000) as f32 * 10f32.powi(i as i32 % 9 - 4)).collect();
        let mut dst = vec![0u8; 9 * GgmlType::Q1_0.type_size() as usize];
        quantize_q1_0(&x, &mut dst);
        let blocks: &[BlockQ1_0] = bytemuck::cast_slice(&dst);
        for (b, x) in blocks.iter().zip(x.chunks_exact(QK1)) {
            let mut sum = 0.0f32;
            for v in x {
                sum += v.abs();
            }
            assert_eq!(b.d.to_f32(), F16::from_f32(sum / QK1 as f32).to_f32());
        }
    }

    #[test]
    fn levels_round_trip() {
        let src: Vec<f32> = (0..QK1).map(|i| if i % 3 == 0 { -0.5 } else { 0.5 }).collect();
        let mut bytes = vec![0u8; GgmlType::Q1_0.type_size() as usize];
        quantize_q1_0(&src, &mut bytes);
        let mut out = vec![0.0f32; QK1];
        dequantize_q1_0(&bytes, &mut out);
        assert_eq!(out, src);

        // Level 2 (twice the scale) is out of reach: the scale is the largest magnitude.
        let src: Vec<f32> = (0..QK2).map(|i| [-1.0, 0.0, 1.0][i % 3] * 0.5).collect();
        let mut bytes = vec![0u8; GgmlType::Q2_0.type_size() as usize];
        quantize_q2_0(&src, &mut bytes);
        let mut out = vec![0.0f32; QK2];
        dequantize_q2_0(&bytes, &mut out);
        assert_eq!(out, src);
    }
}
