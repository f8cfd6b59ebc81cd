//! Ternary blocks (BitNet b1.58, TriLM): TQ1_0 packs five trits per byte as
//! a base-3 fixed-point fraction (1.6875 bits per weight), TQ2_0 stores two
//! bits per weight; both hold 256 values of {-1, 0, 1} times one f16 scale.
//! The encoders follow ggml's `quantize_row_tq{1,2}_0_ref`, which ignore
//! importance weights.

use bytemuck::{Pod, Zeroable};

use super::scalar::F16;
use crate::types::GgmlType;

const QK_K: usize = GgmlType::TQ1_0.block_size() as usize;
/// TQ1_0: bytes holding five trits each; the rest of the block's values
/// go four to a byte in `qh`.
const TQ1_QS: usize = (QK_K - 4 * QK_K / 64) / 5;
const TQ1_QH: usize = QK_K / 64;
/// TQ1_0's `qs` is split into runs of 32 bytes, then 16: each run's byte `m`
/// holds values `m + n·run` for n in 0..5.
const TQ1_QS_32: usize = TQ1_QS - TQ1_QS % 32;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockTq1_0 {
    qs: [u8; TQ1_QS],
    qh: [u8; TQ1_QH],
    d: F16,
}
const _: () = assert!(size_of::<BlockTq1_0>() as u64 == GgmlType::TQ1_0.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct BlockTq2_0 {
    qs: [u8; QK_K / 4],
    d: F16,
}
const _: () = assert!(size_of::<BlockTq2_0>() as u64 == GgmlType::TQ2_0.type_size());
const _: () = assert!(GgmlType::TQ2_0.block_size() as usize == QK_K);

const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// The trit a TQ1_0 byte holds at position `n` (0 = most significant):
/// multiplying by 3^n (mod 256) shifts the fraction, and the top of `q·3`
/// is the next digit.
#[inline]
fn tq1_trit(byte: u8, n: usize) -> f32 {
    let q = byte.wrapping_mul(POW3[n]);
    let xi = ((u16::from(q) * 3) >> 8) as i16;
    f32::from(xi - 1)
}

pub fn dequantize_tq1_0(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockTq1_0] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let mut k = 0;
        for (bytes, run) in [(0..TQ1_QS_32, 32), (TQ1_QS_32..TQ1_QS, 16)] {
            for j in bytes.step_by(run) {
                for n in 0..5 {
                    for &byte in &b.qs[j..j + run] {
                        y[k] = tq1_trit(byte, n) * d;
                        k += 1;
                    }
                }
            }
        }
        for n in 0..4 {
            for &byte in &b.qh {
                y[k] = tq1_trit(byte, n) * d;
                k += 1;
            }
        }
    }
}

pub fn dequantize_tq2_0(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockTq2_0] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (qs, ys) in b.qs.chunks_exact(32).zip(y.chunks_exact_mut(4 * 32)) {
            for l in 0..4 {
                for (m, &q) in qs.iter().enumerate() {
                    let q = ((q >> (2 * l)) & 3) as i8;
                    ys[l * 32 + m] = f32::from(q - 1) * d;
                }
            }
        }
    }
}

/// C's `lroundf` on x86-64 glibc: half away from zero; NaN and values out of
/// `long`'s range give `LONG_MIN`.
fn c_lroundf(x: f32) -> i64 {
    const TWO_63: f32 = 9_223_372_036_854_775_808.0;
    if !(-TWO_63..TWO_63).contains(&x) { i64::MIN } else { x.round() as i64 }
}

/// ggml's `int xi = lroundf(v) + 1`: the trit as 0, 1 or 2 (the `long` sum
/// is narrowed to `int`, so garbage from NaN or infinity wraps as in C).
#[inline]
fn trit(v: f32) -> i32 {
    c_lroundf(v).wrapping_add(1) as i32
}

/// The absolute maximum as ggml's `MAX(amax, fabsf(v))` folds it (a NaN
/// sticks once seen, since `amax > NaN` is false).
fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |amax, v| if amax > v.abs() { amax } else { v.abs() })
}

/// Packs trits into one byte as the base-3 fraction ⌈q·256/243⌉, the first
/// trit most significant; all arithmetic in `uint8_t` as in C.
fn pack_trits(trits: impl Iterator<Item = i32>) -> u8 {
    let mut q = 0u8;
    for xi in trits {
        q = q.wrapping_mul(3).wrapping_add(xi as u8);
    }
    (u32::from(q) * 256).div_ceil(243) as u8
}

pub fn quantize_tq1_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockTq1_0] = bytemuck::cast_slice_mut(dst);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        let d = amax(x);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16::from_f32(d);

        let mut x = x;
        for j in (0..TQ1_QS_32).step_by(32) {
            for m in 0..32 {
                b.qs[j + m] = pack_trits((0..5).map(|n| trit(x[m + n * 32] * id)));
            }
            x = &x[5 * 32..];
        }
        for j in (TQ1_QS_32..TQ1_QS).step_by(16) {
            for m in 0..16 {
                b.qs[j + m] = pack_trits((0..5).map(|n| trit(x[m + n * 16] * id)));
            }
            x = &x[5 * 16..];
        }
        for j in 0..TQ1_QH {
            // Four trits, then a zero trit so the first lands in the top
            // digit, as the five-trit bytes have it.
            b.qh[j] = pack_trits((0..4).map(|m| trit(x[j + m * TQ1_QH] * id)).chain([0]));
        }
    }
}

pub fn quantize_tq2_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockTq2_0] = bytemuck::cast_slice_mut(dst);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        let d = amax(x);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16::from_f32(d);
        for (qs, x) in b.qs.chunks_exact_mut(32).zip(x.chunks_exact(4 * 32)) {
            for (m, q) in qs.iter_mut().enumerate() {
                let mut byte = 0u8;
                for n in 0..4 {
                    byte = byte.wrapping_add(((trit(x[m + n * 32] * id) & 3) << (2 * n)) as u8);
                }
                *q = byte;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lroundf_rounds_half_away_from_zero() {
        assert_eq!(c_lroundf(0.5), 1);
        assert_eq!(c_lroundf(-0.5), -1);
        assert_eq!(c_lroundf(0.49999997), 0);
        assert_eq!(c_lroundf(f32::NAN), i64::MIN);
        assert_eq!(trit(f32::INFINITY), 1);
    }

    #[test]
    fn every_trit_pattern_round_trips() {
        // 256 values cycling through -1, 0, 1 in different orders per run.
        let src: Vec<f32> = (0..QK_K).map(|i| ((i * 7 + i / 5) % 3) as f32 - 1.0).collect();
        for (quantize, dequantize, ty) in [
            (quantize_tq1_0 as fn(&[f32], &mut [u8]), dequantize_tq1_0 as fn(&[u8], &mut [f32]), GgmlType::TQ1_0),
            (quantize_tq2_0, dequantize_tq2_0, GgmlType::TQ2_0),
        ] {
            let mut bytes = vec![0u8; ty.type_size() as usize];
            quantize(&src, &mut bytes);
            let mut out = vec![0.0f32; QK_K];
            dequantize(&bytes, &mut out);
            assert_eq!(out, src, "{ty}");
        }
    }
}
