//! Unquantized element types: F32, F16, BF16 (both directions) and F64
//! (decode only; ggml never produces it).

use super::scalar::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
use super::simd::Level;

fn decode<const N: usize>(src: &[u8], dst: &mut [f32], convert: impl Fn([u8; N]) -> f32) {
    for (chunk, out) in src.chunks_exact(N).zip(dst) {
        *out = convert(chunk.try_into().expect("chunks_exact gives N bytes"));
    }
}

fn encode<const N: usize>(src: &[f32], dst: &mut [u8], convert: impl Fn(f32) -> [u8; N]) {
    for (value, chunk) in src.iter().zip(dst.chunks_exact_mut(N)) {
        chunk.copy_from_slice(&convert(*value));
    }
}

#[inline(always)]
pub fn decode_f32(src: &[u8], dst: &mut [f32]) {
    decode(src, dst, f32::from_le_bytes);
}

pub fn decode_f16(level: Level, src: &[u8], dst: &mut [f32]) {
    // F16C converts exactly (f16 to f32 never rounds), eight at a time.
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: F16C is present (checked just above).
        let done = unsafe { super::x86::decode_f16_f16c(src, dst) };
        let (src, dst) = (&src[done * 2..], &mut dst[done..]);
        return decode(src, dst, |b| f16_bits_to_f32(u16::from_le_bytes(b)));
    }
    decode(src, dst, |b| f16_bits_to_f32(u16::from_le_bytes(b)));
}

#[inline(always)]
pub fn decode_bf16(src: &[u8], dst: &mut [f32]) {
    decode(src, dst, |b| bf16_bits_to_f32(u16::from_le_bytes(b)));
}

/// Narrowed as C's `(float)double`: round to nearest even.
pub fn decode_f64(src: &[u8], dst: &mut [f32]) {
    decode(src, dst, |b| f64::from_le_bytes(b) as f32);
}

#[inline(always)]
pub fn encode_f32(src: &[f32], dst: &mut [u8]) {
    encode(src, dst, f32::to_le_bytes);
}

#[inline(always)]
pub fn encode_f16(src: &[f32], dst: &mut [u8]) {
    encode(src, dst, |v| f32_to_f16_bits(v).to_le_bytes());
}

#[inline(always)]
pub fn encode_bf16(src: &[f32], dst: &mut [u8]) {
    encode(src, dst, |v| f32_to_bf16_bits(v).to_le_bytes());
}
