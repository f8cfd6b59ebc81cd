//! SafeTensors dtypes: their names and sizes, the order the reference writer
//! sorts them in, and how each becomes a ggml type — as it is, converted
//! exactly when read ([`ElementConversion`]), or not at all.
//!
//! Every conversion is exact. The FP8 formats all fit in f16 (E8M0, powers
//! of two from 2^-127, needs f32): the tables below are built at compile
//! time, and the build fails if a code would not be representable.

use crate::model::{ElementConversion, StoredLayout};
use crate::types::GgmlType;

/// A SafeTensors dtype. The declaration order is the reference
/// implementation's (its `Dtype` enum, "in increasing alignment order"):
/// its writer sorts tensors by this order, descending, so the derived `Ord`
/// is part of the bytes a writer produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dtype {
    Bool,
    F4,
    F6E2M3,
    F6E3M2,
    U8,
    I8,
    F8E5M2,
    F8E4M3,
    F8E8M0,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

/// Every dtype, in declaration order.
const ALL: [Dtype; 22] = [
    Dtype::Bool,
    Dtype::F4,
    Dtype::F6E2M3,
    Dtype::F6E3M2,
    Dtype::U8,
    Dtype::I8,
    Dtype::F8E5M2,
    Dtype::F8E4M3,
    Dtype::F8E8M0,
    Dtype::F8E4M3Fnuz,
    Dtype::F8E5M2Fnuz,
    Dtype::I16,
    Dtype::U16,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::U32,
    Dtype::F32,
    Dtype::C64,
    Dtype::F64,
    Dtype::I64,
    Dtype::U64,
];

/// The dtypes that are ggml types byte for byte.
const SAME_AS_GGML: [(Dtype, GgmlType); 8] = [
    (Dtype::F64, GgmlType::F64),
    (Dtype::F32, GgmlType::F32),
    (Dtype::F16, GgmlType::F16),
    (Dtype::BF16, GgmlType::BF16),
    (Dtype::I64, GgmlType::I64),
    (Dtype::I32, GgmlType::I32),
    (Dtype::I16, GgmlType::I16),
    (Dtype::I8, GgmlType::I8),
];

impl Dtype {
    /// The name in a SafeTensors header (`F32`, `F8_E4M3`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::F8E4M3Fnuz => "F8_E4M3FNUZ",
            Dtype::F8E5M2Fnuz => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    pub fn from_name(name: &str) -> Option<Dtype> {
        ALL.into_iter().find(|d| d.name() == name)
    }

    /// The dtypes [`Dtype::read_as`] accepts.
    pub fn readable() -> impl Iterator<Item = Dtype> {
        ALL.into_iter().filter(|d| d.read_as().is_some())
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 6,
            Dtype::Bool
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8E5M2
            | Dtype::F8E4M3
            | Dtype::F8E8M0
            | Dtype::F8E4M3Fnuz
            | Dtype::F8E5M2Fnuz => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The dtype that holds a ggml type byte for byte.
    pub fn from_ggml(ty: GgmlType) -> Option<Dtype> {
        SAME_AS_GGML.iter().find(|&&(_, g)| g == ty).map(|&(d, _)| d)
    }

    /// How a tensor of this dtype is read: the ggml type it becomes and how
    /// its stored bytes map to that type's, or `None` when no ggml type holds
    /// every value exactly (U64, C64) or the dtype packs elements below a
    /// byte (F4, F6).
    pub fn read_as(self) -> Option<(GgmlType, StoredLayout)> {
        if let Some(&(_, ty)) = SAME_AS_GGML.iter().find(|&&(d, _)| d == self) {
            return Some((ty, StoredLayout::Native));
        }
        let conversion = match self {
            Dtype::Bool => ElementConversion::BoolToI8,
            Dtype::U8 => ElementConversion::U8ToI16,
            Dtype::U16 => ElementConversion::U16ToI32,
            Dtype::U32 => ElementConversion::U32ToI64,
            Dtype::F8E4M3 => ElementConversion::F8E4M3ToF16,
            Dtype::F8E5M2 => ElementConversion::F8E5M2ToF16,
            Dtype::F8E4M3Fnuz => ElementConversion::F8E4M3FnuzToF16,
            Dtype::F8E5M2Fnuz => ElementConversion::F8E5M2FnuzToF16,
            Dtype::F8E8M0 => ElementConversion::F8E8M0ToF32,
            _ => return None,
        };
        Some((conversion.output_type(), StoredLayout::Converted(conversion)))
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ElementConversion {
    /// Bytes of one stored element.
    pub fn stored_size(self) -> u64 {
        match self {
            ElementConversion::U16ToI32 => 2,
            ElementConversion::U32ToI64 => 4,
            // An element here is a block.
            ElementConversion::FromBigEndian(ty) => ty.type_size(),
            _ => 1,
        }
    }

    pub fn output_type(self) -> GgmlType {
        match self {
            ElementConversion::F8E4M3ToF16
            | ElementConversion::F8E5M2ToF16
            | ElementConversion::F8E4M3FnuzToF16
            | ElementConversion::F8E5M2FnuzToF16 => GgmlType::F16,
            ElementConversion::F8E8M0ToF32 => GgmlType::F32,
            ElementConversion::U8ToI16 => GgmlType::I16,
            ElementConversion::BoolToI8 => GgmlType::I8,
            ElementConversion::U16ToI32 => GgmlType::I32,
            ElementConversion::U32ToI64 => GgmlType::I64,
            ElementConversion::FromBigEndian(ty) => ty,
        }
    }

    /// Bytes of one converted element.
    pub fn output_size(self) -> u64 {
        self.output_type().type_size()
    }

    /// The stored bytes `(offset, len)` that hold converted bytes
    /// `[offset, offset + len)`: whole elements, rounded outwards.
    pub fn stored_range(self, offset: u64, len: u64) -> (u64, u64) {
        let out = self.output_size();
        let first = offset / out;
        let end = offset.saturating_add(len).div_ceil(out);
        (first.saturating_mul(self.stored_size()), (end - first).saturating_mul(self.stored_size()))
    }

    /// Converts whole stored elements (a trailing partial element is dropped).
    pub fn convert(self, stored: &[u8]) -> Vec<u8> {
        let n = stored.len() / self.stored_size() as usize;
        let mut out = Vec::with_capacity(n * self.output_size() as usize);
        let f16_table = |table: &'static [u16; 256]| stored.iter().flat_map(|&b| table[usize::from(b)].to_le_bytes());
        match self {
            ElementConversion::F8E4M3ToF16 => out.extend(f16_table(&E4M3_TO_F16)),
            ElementConversion::F8E5M2ToF16 => out.extend(f16_table(&E5M2_TO_F16)),
            ElementConversion::F8E4M3FnuzToF16 => out.extend(f16_table(&E4M3FNUZ_TO_F16)),
            ElementConversion::F8E5M2FnuzToF16 => out.extend(f16_table(&E5M2FNUZ_TO_F16)),
            ElementConversion::F8E8M0ToF32 => {
                out.extend(stored.iter().flat_map(|&b| e8m0_to_f32_bits(b).to_le_bytes()))
            }
            ElementConversion::U8ToI16 => out.extend(stored.iter().flat_map(|&b| i16::from(b).to_le_bytes())),
            ElementConversion::BoolToI8 => out.extend(stored.iter().map(|&b| u8::from(b != 0))),
            ElementConversion::U16ToI32 => out
                .extend(stored.chunks_exact(2).flat_map(|c| i32::from(u16::from_le_bytes([c[0], c[1]])).to_le_bytes())),
            ElementConversion::U32ToI64 => out.extend(
                stored
                    .chunks_exact(4)
                    .flat_map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()),
            ),
            ElementConversion::FromBigEndian(ty) => {
                out.extend_from_slice(&stored[..n * self.stored_size() as usize]);
                // `ModelFile` reads no bytes of a type without a swap.
                if let Some(swap) = crate::formats::gguf::ByteSwap::of(ty) {
                    swap.apply(&mut out);
                }
            }
        }
        out
    }
}

/// Which codes of a small float format are not finite numbers.
#[derive(Clone, Copy)]
enum Specials {
    /// An all-ones exponent is infinity (mantissa 0) or NaN, as in IEEE 754.
    Ieee,
    /// Only all-ones exponent and mantissa is NaN; no infinities (OCP E4M3).
    AllOnesNan,
    /// Only the negative-zero code is NaN; no infinities ("FNUZ").
    NegativeZeroNan,
}

/// A sign bit, then `exponent_bits`, then `mantissa_bits`.
#[derive(Clone, Copy)]
struct MiniFloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    specials: Specials,
}

const E4M3: MiniFloat = MiniFloat { exponent_bits: 4, mantissa_bits: 3, bias: 7, specials: Specials::AllOnesNan };
const E5M2: MiniFloat = MiniFloat { exponent_bits: 5, mantissa_bits: 2, bias: 15, specials: Specials::Ieee };
const E4M3FNUZ: MiniFloat =
    MiniFloat { exponent_bits: 4, mantissa_bits: 3, bias: 8, specials: Specials::NegativeZeroNan };
const E5M2FNUZ: MiniFloat =
    MiniFloat { exponent_bits: 5, mantissa_bits: 2, bias: 16, specials: Specials::NegativeZeroNan };

static E4M3_TO_F16: [u16; 256] = f16_table(E4M3);
static E5M2_TO_F16: [u16; 256] = f16_table(E5M2);
static E4M3FNUZ_TO_F16: [u16; 256] = f16_table(E4M3FNUZ);
static E5M2FNUZ_TO_F16: [u16; 256] = f16_table(E5M2FNUZ);

const F16_INFINITY: u16 = 0x7c00;
const F16_QUIET_NAN: u16 = 0x7e00;
const F16_MANTISSA_BITS: u32 = 10;
const F16_BIAS: i32 = 15;

const fn f16_table(format: MiniFloat) -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = minifloat_to_f16(code as u8, format);
        code += 1;
    }
    table
}

/// The f16 bits of one code. Evaluated only at compile time (the tables are
/// statics), where the assertions make an inexact format a build error.
const fn minifloat_to_f16(code: u8, format: MiniFloat) -> u16 {
    let sign = ((code >> 7) as u16) << 15;
    let max_exponent = (1u32 << format.exponent_bits) - 1;
    let exponent = ((code as u32) >> format.mantissa_bits) & max_exponent;
    let mantissa_mask = (1u32 << format.mantissa_bits) - 1;
    let mantissa = code as u32 & mantissa_mask;
    match format.specials {
        // E5M2 is the top byte of an f16, so a NaN keeps its payload.
        Specials::Ieee if exponent == max_exponent => {
            return sign | F16_INFINITY | ((mantissa as u16) << (F16_MANTISSA_BITS - format.mantissa_bits));
        }
        Specials::AllOnesNan if exponent == max_exponent && mantissa == mantissa_mask => return sign | F16_QUIET_NAN,
        Specials::NegativeZeroNan if code == 0x80 => return F16_QUIET_NAN,
        _ => {}
    }
    // The value is significand * 2^scale.
    let (significand, scale) = if exponent == 0 {
        (mantissa, 1 - format.bias - format.mantissa_bits as i32)
    } else {
        (mantissa | (1 << format.mantissa_bits), exponent as i32 - format.bias - format.mantissa_bits as i32)
    };
    if significand == 0 {
        return sign;
    }
    let top_bit = 31 - significand.leading_zeros() as i32;
    let biased = top_bit + scale + F16_BIAS;
    if biased >= 1 {
        assert!(biased <= 30, "too large for f16");
        let fraction = (significand << (F16_MANTISSA_BITS as i32 - top_bit)) & 0x3ff;
        sign | ((biased as u16) << F16_MANTISSA_BITS) | fraction as u16
    } else {
        // An f16 subnormal: significand * 2^scale = m * 2^-24.
        let shift = scale + F16_BIAS - 1 + F16_MANTISSA_BITS as i32;
        assert!(shift >= 0, "too small for f16");
        sign | (significand << shift) as u16
    }
}

/// E8M0 is an f32's exponent field alone, except that code 0 (2^-127) is an
/// f32 subnormal and 0xFF is NaN.
const fn e8m0_to_f32_bits(code: u8) -> u32 {
    match code {
        0xff => 0x7fc0_0000,
        0 => 0x0040_0000,
        e => (e as u32) << 23,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// The value of `code` by the textbook formula, in f64; `None` for NaN.
    fn reference(code: u8, format: MiniFloat) -> Option<f64> {
        let (e_bits, m_bits) = (format.exponent_bits, format.mantissa_bits);
        let negative = code & 0x80 != 0;
        let exponent = i32::from((code >> m_bits) & ((1 << e_bits) - 1) as u8);
        let mantissa = f64::from(code & ((1 << m_bits) - 1) as u8);
        let all_ones = (1 << e_bits) - 1;
        let m_max = f64::from((1u8 << m_bits) - 1);
        match format.specials {
            Specials::Ieee if exponent == all_ones && mantissa == 0.0 => {
                return Some(if negative { f64::NEG_INFINITY } else { f64::INFINITY });
            }
            Specials::Ieee if exponent == all_ones => return None,
            Specials::AllOnesNan if exponent == all_ones && mantissa == m_max => return None,
            Specials::NegativeZeroNan if code == 0x80 => return None,
            _ => {}
        }
        let scale = f64::from(1u32 << m_bits);
        let magnitude = if exponent == 0 {
            2f64.powi(1 - format.bias) * (mantissa / scale)
        } else {
            2f64.powi(exponent - format.bias) * (1.0 + mantissa / scale)
        };
        Some(if negative { -magnitude } else { magnitude })
    }

    fn check_all_codes(conversion: ElementConversion, format: MiniFloat) -> usize {
        let codes: Vec<u8> = (0..=255).collect();
        let converted = conversion.convert(&codes);
        assert_eq!(converted.len(), 512);
        let mut nans = 0;
        for (code, bits) in codes.iter().zip(converted.chunks_exact(2)) {
            let half = f16::from_le_bytes([bits[0], bits[1]]);
            match reference(*code, format) {
                None => {
                    assert!(half.is_nan(), "{conversion:?} {code:#04x} must be NaN, got {half}");
                    nans += 1;
                }
                Some(value) => {
                    assert_eq!(half.to_f64(), value, "{conversion:?} {code:#04x}");
                    // Zero's sign too.
                    assert_eq!(half.is_sign_negative(), value.is_sign_negative(), "{conversion:?} {code:#04x}");
                }
            }
        }
        nans
    }

    #[test]
    fn e4m3_every_code() {
        assert_eq!(check_all_codes(ElementConversion::F8E4M3ToF16, E4M3), 2);
        let value = |code: u8| f16::from_bits(E4M3_TO_F16[usize::from(code)]).to_f64();
        assert_eq!(value(0x38), 1.0);
        assert_eq!(value(0x7e), 448.0);
        assert_eq!(value(0x78), 256.0);
        assert_eq!(value(0xfe), -448.0);
        assert_eq!(value(0x01), 2f64.powi(-9));
        assert!(f16::from_bits(E4M3_TO_F16[0x7f]).is_nan() && f16::from_bits(E4M3_TO_F16[0xff]).is_nan());
    }

    #[test]
    fn e5m2_every_code_is_the_top_byte_of_an_f16() {
        assert_eq!(check_all_codes(ElementConversion::F8E5M2ToF16, E5M2), 6);
        for code in 0..=255u8 {
            assert_eq!(E5M2_TO_F16[usize::from(code)], u16::from(code) << 8);
        }
        assert_eq!(f16::from_bits(E5M2_TO_F16[0x7b]).to_f64(), 57344.0);
        assert_eq!(f16::from_bits(E5M2_TO_F16[0x7c]), f16::INFINITY);
        assert_eq!(f16::from_bits(E5M2_TO_F16[0xfc]), f16::NEG_INFINITY);
    }

    #[test]
    fn fnuz_every_code() {
        assert_eq!(check_all_codes(ElementConversion::F8E4M3FnuzToF16, E4M3FNUZ), 1);
        assert_eq!(check_all_codes(ElementConversion::F8E5M2FnuzToF16, E5M2FNUZ), 1);
        assert_eq!(f16::from_bits(E4M3FNUZ_TO_F16[0x7f]).to_f64(), 240.0);
        assert_eq!(f16::from_bits(E4M3FNUZ_TO_F16[0x40]).to_f64(), 1.0);
        assert_eq!(f16::from_bits(E5M2FNUZ_TO_F16[0x7f]).to_f64(), 57344.0);
        assert_eq!(f16::from_bits(E5M2FNUZ_TO_F16[0x01]).to_f64(), 2f64.powi(-17));
    }

    #[test]
    fn e8m0_every_code() {
        let codes: Vec<u8> = (0..=255).collect();
        let converted = ElementConversion::F8E8M0ToF32.convert(&codes);
        for (code, bytes) in codes.iter().zip(converted.chunks_exact(4)) {
            let value = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            if *code == 0xff {
                assert!(value.is_nan());
            } else {
                assert_eq!(f64::from(value), 2f64.powi(i32::from(*code) - 127), "{code}");
            }
        }
    }

    #[test]
    fn integer_widenings() {
        let bytes = [0u8, 1, 127, 128, 255];
        let as_i16: Vec<i16> = ElementConversion::U8ToI16
            .convert(&bytes)
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(as_i16, [0, 1, 127, 128, 255]);
        assert_eq!(ElementConversion::BoolToI8.convert(&bytes), [0, 1, 1, 1, 1]);
        let u16s: Vec<u8> = [0u16, 1, 0x8000, u16::MAX].iter().flat_map(|v| v.to_le_bytes()).collect();
        let as_i32: Vec<i32> = ElementConversion::U16ToI32
            .convert(&u16s)
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(as_i32, [0, 1, 0x8000, 65535]);
        let u32s: Vec<u8> = [0u32, 0x8000_0000, u32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect();
        let as_i64: Vec<i64> = ElementConversion::U32ToI64
            .convert(&u32s)
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(as_i64, [0, 0x8000_0000, 4294967295]);
    }

    #[test]
    fn stored_ranges_round_outwards_to_whole_elements() {
        let c = ElementConversion::U16ToI32;
        assert_eq!(c.stored_range(0, 8), (0, 4));
        assert_eq!(c.stored_range(6, 4), (2, 4));
        assert_eq!(c.stored_range(5, 0), (2, 2));
        assert_eq!(c.stored_range(4, 0), (2, 0));
        assert_eq!(ElementConversion::F8E8M0ToF32.stored_range(4, 5), (1, 2));
    }

    #[test]
    fn names_round_trip_and_order_is_the_reference_writers() {
        for (i, dtype) in ALL.into_iter().enumerate() {
            assert_eq!(Dtype::from_name(dtype.name()), Some(dtype));
            assert!(i == 0 || ALL[i - 1] < dtype, "ALL is in declaration order");
        }
        assert_eq!(Dtype::from_name("f32"), None);
        let mut writable: Vec<Dtype> = SAME_AS_GGML.iter().map(|&(d, _)| d).collect();
        writable.sort_by(|a, b| b.cmp(a));
        assert_eq!(
            writable,
            [Dtype::I64, Dtype::F64, Dtype::F32, Dtype::I32, Dtype::BF16, Dtype::F16, Dtype::I16, Dtype::I8]
        );
    }
}
