//! 4-bit floating-point blocks: MXFP4 (32 E2M1 values, one E8M0 scale) and
//! NVFP4 (64 E2M1 values, a UE4M3 scale per 16).

use bytemuck::{Pod, Zeroable};

use super::simd::Level;
use crate::types::GgmlType;

/// E2M1 values, doubled so they are integers (ggml's `kvalues_mxfp4`); the
/// scales carry the matching factor of one half.
pub(crate) const E2M1_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockMxfp4 {
    e: u8,
    qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockMxfp4>() as u64 == GgmlType::MXFP4.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockNvfp4 {
    d: [u8; 4],
    qs: [u8; 32],
}
const _: () = assert!(size_of::<BlockNvfp4>() as u64 == GgmlType::NVFP4.type_size());

/// Half of 2^(e - 127), as ggml's `GGML_E8M0_TO_FP32_HALF`.
fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// Half of a UE4M3 scale, as ggml's `ggml_ue4m3_to_fp32`.
fn ue4m3_to_f32_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0xf);
    let man = f32::from(x & 0x7);
    let raw = if exp == 0 { man * 2f32.powi(-9) } else { (1.0 + man / 8.0) * 2f32.powi(exp - 7) };
    raw * 0.5
}

#[inline(always)]
pub fn dequantize_mxfp4(level: Level, blocks: &[BlockMxfp4], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(32)) {
        let d = e8m0_to_f32_half(b.e);
        #[cfg(target_arch = "x86_64")]
        if level >= Level::Avx2 {
            // SAFETY: callers pass a vector level only where the machine has it;
            // `d · v` and `v · d` are the same product.
            unsafe { super::x86::decode_nibble_table_avx2(&E2M1_DOUBLED, &b.qs, d, y) };
            continue;
        }
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = f32::from(E2M1_DOUBLED[usize::from(q & 0xf)]) * d;
            y[j + 16] = f32::from(E2M1_DOUBLED[usize::from(q >> 4)]) * d;
        }
    }
}

pub fn dequantize_nvfp4(blocks: &[BlockNvfp4], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(64)) {
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let d = ue4m3_to_f32_half(b.d[s]);
            for j in 0..8 {
                let q = b.qs[s * 8 + j];
                ys[j] = f32::from(E2M1_DOUBLED[usize::from(q & 0xf)]) * d;
                ys[j + 8] = f32::from(E2M1_DOUBLED[usize::from(q >> 4)]) * d;
            }
        }
    }
}

/// The E2M1 index nearest to `x / d`; the first of equals wins.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0;
    let mut best_err = (f32::from(E2M1_DOUBLED[0]) * d - x).abs();
    for (i, &v) in E2M1_DOUBLED.iter().enumerate().skip(1) {
        let err = (f32::from(v) * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

pub fn quantize_mxfp4(src: &[f32], blocks: &mut [BlockMxfp4]) {
    for (x, b) in src.chunks_exact(32).zip(blocks) {
        let amax = x.iter().fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
        // ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127), a float-to-int conversion.
        b.e = if amax > 0.0 { super::scalar::c_float_to_int(amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
        let d = e8m0_to_f32_half(b.e);
        for j in 0..16 {
            b.qs[j] = best_index(x[j], d) | (best_index(x[j + 16], d) << 4);
        }
    }
}
