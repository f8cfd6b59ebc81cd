//! Unquantized element types: F32, F16, BF16 (both directions) and F64
//! (decode only; ggml never produces it).

use super::scalar::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
use super::simd::Level;
use crate::types::GgmlType;

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

/// Whether every element of `bytes` (little-endian, of type `ty`) is finite,
/// read from the bits alone — what decoding and `f32::is_finite` would say;
/// `None` for a type that is not a plain float. A finite bf16 or f16 also
/// comes back unchanged from f32.
pub fn all_finite(ty: GgmlType, bytes: &[u8]) -> Option<bool> {
    // No early exit: the loops vectorize.
    fn exponent_below_max<T: bytemuck::Pod + Into<u32>, const N: usize>(bytes: &[u8], mask: u32) -> bool {
        let finite = |w: u32| w & mask != mask;
        match bytemuck::try_cast_slice::<u8, T>(bytes) {
            Ok(words) => words.iter().fold(true, |all, &w| all & finite(w.into())),
            Err(_) => bytes.chunks_exact(N).fold(true, |all, b| {
                let mut word = [0u8; 4];
                word[..N].copy_from_slice(b);
                all & finite(u32::from_le_bytes(word))
            }),
        }
    }
    match ty {
        GgmlType::F32 => Some(exponent_below_max::<u32, 4>(bytes, 0x7f80_0000)),
        GgmlType::F16 => Some(exponent_below_max::<u16, 2>(bytes, 0x7c00)),
        GgmlType::BF16 => Some(exponent_below_max::<u16, 2>(bytes, 0x7f80)),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_finite_says_what_decoding_says() {
        for h in 0..=u16::MAX {
            let bytes = h.to_le_bytes();
            assert_eq!(all_finite(GgmlType::BF16, &bytes), Some(bf16_bits_to_f32(h).is_finite()), "bf16 {h:#06x}");
            assert_eq!(all_finite(GgmlType::F16, &bytes), Some(f16_bits_to_f32(h).is_finite()), "f16 {h:#06x}");
            // Finite half floats come back from f32 unchanged.
            if bf16_bits_to_f32(h).is_finite() {
                assert_eq!(f32_to_bf16_bits(bf16_bits_to_f32(h)), h);
            }
        }
        for value in [0.0, -0.0, 1.5, f32::MAX, f32::MIN_POSITIVE / 2.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(all_finite(GgmlType::F32, &value.to_le_bytes()), Some(value.is_finite()), "{value}");
        }
        // Unaligned and several at once: one NaN among finite values.
        let mut bytes = vec![0u8; 1 + 2 * 9];
        bytes[1 + 2 * 7..1 + 2 * 8].copy_from_slice(&0x7fc0u16.to_le_bytes());
        assert_eq!(all_finite(GgmlType::BF16, &bytes[1..]), Some(false));
        assert_eq!(all_finite(GgmlType::BF16, &bytes[1..1 + 2 * 7]), Some(true));
        assert_eq!(all_finite(GgmlType::Q8_0, &bytes), None);
    }
}
