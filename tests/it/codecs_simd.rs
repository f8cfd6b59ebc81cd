//! Every vector kernel writes exactly the scalar reference's bytes, at every
//! instruction-set level this machine has, on random rows and on the edge
//! cases that break careless vector code: zero and constant blocks, huge and
//! subnormal values, signed zeros, and exact ties that must round half away
//! from zero.

use quantforge::codecs::simd::{self, Level};
use quantforge::codecs::{CodecError, can_dequantize, can_quantize, dequantize_row_at, quantize_row_at};
use quantforge::types::GgmlType;

use crate::common;

use common::rows::{Rng, rows};

/// Importance weights for a row: none, random positive, and sparse (zeros
/// make whole groups weightless, the searches' degenerate cases).
fn importance_variants(rng: &mut Rng, len: usize) -> Vec<Option<Vec<f32>>> {
    let random: Vec<f32> = (0..len).map(|_| rng.float(4.0).abs()).collect();
    let sparse: Vec<f32> = (0..len).map(|i| if (i / 16) % 3 == 0 { 0.0 } else { rng.float(1.0).abs() }).collect();
    vec![None, Some(random), Some(sparse)]
}

#[test]
fn every_level_writes_the_scalar_bytes() {
    let levels = simd::supported();
    eprintln!("levels on this machine: {:?}; in use: {:?}", levels, simd::level());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let types: Vec<GgmlType> = GgmlType::all().filter(|&ty| can_quantize(ty)).collect();
    let rows = rows();
    for r in 0..rows.len() {
        // Five rows end to end: several super-blocks of different scales (the
        // searches take up to 32 groups a call, and a run ends in fewer).
        let row: Vec<f32> = (0..5).flat_map(|k| rows[(r + k) % rows.len()].iter().copied()).collect();
        for importance in importance_variants(&mut rng, row.len()) {
            for &ty in &types {
                // Rows of 32-value blocks also end in a partial batch of blocks.
                let lengths: &[usize] = if ty.block_size() == 32 { &[256, 224, 736] } else { &[256, 1280] };
                for &n in lengths {
                    let (row, importance) = (&row[..n], importance.as_ref().map(|w| &w[..n]));
                    let row_len = ty.row_size(n as u64).unwrap() as usize;
                    let mut reference = vec![0u8; row_len];
                    match quantize_row_at(Level::Scalar, ty, row, importance, &mut reference) {
                        // IQ1_S, IQ2_XXS and IQ2_XS take no row without importance weights.
                        Err(CodecError::NeedsImportance { .. }) if importance.is_none() => continue,
                        scalar => scalar.unwrap(),
                    }
                    for &level in &levels {
                        let mut ours = vec![0u8; row_len];
                        quantize_row_at(level, ty, row, importance, &mut ours).unwrap();
                        let weighted = if importance.is_some() { "with" } else { "without" };
                        assert!(
                            ours == reference,
                            "{ty} row {r} ({n} values) {weighted} importance at {level:?} differs from the scalar reference"
                        );
                    }
                }
            }
        }
    }
}

/// Decoding is checked on random bytes: every bit pattern is a valid block,
/// scales included (NaN, infinite and subnormal f16 scales among them).
/// Values must match bit for bit, except that where two NaNs meet (a NaN
/// minimum added to an infinite scale times zero) IEEE 754 leaves open
/// whose payload survives, and the compiler may order the operands either
/// way: any NaN then matches any NaN.
#[test]
fn every_level_decodes_the_scalar_values() {
    let levels = simd::supported();
    let mut rng = Rng(0xd1b5_4a32_d192_ed03);
    for ty in GgmlType::all().filter(|&ty| can_dequantize(ty)) {
        let n = 256 * ty.block_size() as usize;
        let bytes: Vec<u8> = (0..ty.row_size(n as u64).unwrap()).map(|_| rng.next() as u8).collect();
        let mut reference = vec![0f32; n];
        dequantize_row_at(Level::Scalar, ty, &bytes, &mut reference).unwrap();
        for &level in &levels {
            let mut ours = vec![0f32; n];
            dequantize_row_at(level, ty, &bytes, &mut ours).unwrap();
            for (i, (a, b)) in ours.iter().zip(&reference).enumerate() {
                let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                assert!(same, "{ty} value {i} at {level:?}: {a:?} differs from the scalar reference's {b:?}");
            }
        }
    }
}

#[test]
fn asking_for_a_level_never_exceeds_the_machine() {
    assert!(simd::level().is_supported());
    assert!(simd::supported().contains(&Level::Scalar));
}

/// The F16C path of f16 decoding (used from the AVX2 level up) against the
/// scalar conversion, for all 65,536 values, NaN payloads included.
#[test]
fn f16_decoding_is_exact_for_every_value() {
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let mut decoded = vec![0f32; 1 << 16];
    quantforge::codecs::dequantize_row(GgmlType::F16, &bytes, &mut decoded).unwrap();
    for (bits, value) in (0..=u16::MAX).zip(&decoded) {
        let expected = quantforge::codecs::scalar::f16_bits_to_f32(bits);
        assert_eq!(value.to_bits(), expected.to_bits(), "f16 {bits:#06x}");
    }
}
