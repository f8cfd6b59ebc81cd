//! ggml's scalar conversions, reproduced bit for bit.
//!
//! The quantizers' bytes depend on exactly how ggml rounds: `nearest_int`
//! (a magic-number trick that rounds half to even), its software
//! f32 → f16 and f32 → bf16 conversions, and how C converts a float to a
//! small integer on x86-64. These functions are the one home of those rules.

use bytemuck::{Pod, Zeroable};

/// ggml's `nearest_int`: round half to even by adding 1.5 × 2^23 and reading
/// the low mantissa bits. Exact for |x| ≤ 2^22; beyond that it returns what
/// ggml's release builds (no asserts) return.
#[inline]
pub fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C's `(int)x` as x86-64 computes it (`cvttss2si`): truncation toward zero,
/// and `INT_MIN` for NaN and out-of-range values. Rust's `as` saturates
/// instead, so casts that ggml leaves to the hardware go through here.
#[inline]
pub fn c_float_to_int(x: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&x) { x as i32 } else { i32::MIN }
}

/// C's `(int8_t)x` on x86-64: convert to `int`, keep the low byte.
#[inline]
pub fn c_float_to_i8(x: f32) -> i8 {
    c_float_to_int(x) as i8
}

/// ggml's software `GGML_FP32_TO_FP16`: round to nearest even; NaN becomes
/// the quiet NaN `0x7e00` with the input's sign.
#[inline]
pub fn f32_to_f16_bits(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let bias = (shl1_w & 0xff00_0000).max(0x7100_0000);
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7c00;
    let mantissa_bits = bits & 0x0000_0fff;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16) | if shl1_w > 0xff00_0000 { 0x7e00 } else { nonsign }) as u16
}

#[inline]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// ggml's `GGML_FP32_TO_BF16`: round to nearest even; NaN is kept, made quiet.
#[inline]
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[inline]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// An f16 as stored in a block: two little-endian bytes, alignment 1, so a
/// block can be cast from any byte slice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(transparent)]
pub struct F16([u8; 2]);

impl F16 {
    pub const ZERO: F16 = F16([0, 0]);

    /// Rounds as ggml does.
    #[inline]
    pub fn from_f32(f: f32) -> F16 {
        F16(f32_to_f16_bits(f).to_le_bytes())
    }

    #[inline]
    pub fn to_f32(self) -> f32 {
        f16_bits_to_f32(u16::from_le_bytes(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (-2.5, -2), (2.4999, 2), (-3.7, -4)];
        for (x, expected) in cases {
            assert_eq!(nearest_int(x), expected, "{x}");
            assert_eq!(nearest_int(x), x.round_ties_even() as i32, "{x}");
        }
    }

    #[test]
    fn f16_conversion_matches_ieee_round_to_nearest_even() {
        // Every 2^-13th f32 bit pattern, plus edge values; NaN compared separately.
        let mut bits = 0u32;
        loop {
            let f = f32::from_bits(bits);
            if !f.is_nan() {
                assert_eq!(f32_to_f16_bits(f), half::f16::from_f32(f).to_bits(), "{f:e} ({bits:#x})");
            }
            match bits.checked_add(0x2000 - 1) {
                Some(next) => bits = next,
                None => break,
            }
        }
        assert_eq!(f32_to_f16_bits(f32::NAN), 0x7e00);
        assert_eq!(f32_to_f16_bits(-f32::NAN), 0xfe00);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
    }

    #[test]
    fn bf16_conversion() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
    }

    #[test]
    fn c_casts_follow_x86() {
        assert_eq!(c_float_to_int(f32::NAN), i32::MIN);
        assert_eq!(c_float_to_int(3e9), i32::MIN);
        assert_eq!(c_float_to_int(-2.9), -2);
        assert_eq!(c_float_to_i8(300.0), 44);
        assert_eq!(c_float_to_i8(f32::INFINITY), 0);
    }
}
