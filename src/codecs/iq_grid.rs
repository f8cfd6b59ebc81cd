//! The "IQ grid" blocks: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
//! IQ1_M, decoded to f32 exactly as ggml's `dequantize_row_*` do.
//!
//! Each block stores, per group of 8 (or 4) weights, an index into a table of
//! lattice points ([`super::iq_tables`]), a sign pattern and a small scale
//! multiplier on one f16 block scale. The float expressions below keep C's
//! order and its int → float conversions, so every product rounds as in ggml.

use bytemuck::{Pod, Zeroable};

use super::iq_tables::{
    IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS,
};
use super::scalar::{F16, f16_bits_to_f32};
use crate::types::GgmlType;

/// Weights per super-block, shared by all seven types (ggml's `QK_K`).
const QK_K: usize = GgmlType::IQ2_XXS.block_size() as usize;
const _: () = {
    let types =
        [GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M];
    let mut i = 0;
    while i < types.len() {
        assert!(types[i].block_size() as usize == QK_K);
        i += 1;
    }
};

/// IQ2_XXS: per 32 weights, four 8-bit grid indices, then a u32 holding four
/// 7-bit sign indices and a 4-bit scale.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xxs {
    pub(super) d: F16,
    pub(super) qs: [u8; QK_K / 4],
}
const _: () = assert!(size_of::<BlockIq2Xxs>() as u64 == GgmlType::IQ2_XXS.type_size());

/// IQ2_XS: per 8 weights a u16 (9-bit grid index, 7-bit sign index); per 32
/// weights a byte of two 4-bit scales.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xs {
    pub(super) d: F16,
    pub(super) qs: [u8; QK_K / 4],
    pub(super) scales: [u8; QK_K / 32],
}
const _: () = assert!(size_of::<BlockIq2Xs>() as u64 == GgmlType::IQ2_XS.type_size());

/// IQ2_S: low 8 bits of each 10-bit grid index, then one explicit sign byte
/// per 8 weights (both in `qs`); 2 high index bits each in `qh`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2S {
    pub(super) d: F16,
    pub(super) qs: [u8; QK_K / 4],
    pub(super) qh: [u8; QK_K / 32],
    pub(super) scales: [u8; QK_K / 32],
}
const _: () = assert!(size_of::<BlockIq2S>() as u64 == GgmlType::IQ2_S.type_size());

/// IQ3_XXS: one 8-bit grid index per 4 weights, then per 32 weights a u32 of
/// four 7-bit sign indices and a 4-bit scale.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3Xxs {
    pub(super) d: F16,
    pub(super) qs: [u8; 3 * QK_K / 8],
}
const _: () = assert!(size_of::<BlockIq3Xxs>() as u64 == GgmlType::IQ3_XXS.type_size());

/// IQ3_S: 9-bit grid indices (low bytes in `qs`, high bits in `qh`), explicit
/// sign bits, two 4-bit scales per byte.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3S {
    pub(super) d: F16,
    pub(super) qs: [u8; QK_K / 4],
    pub(super) qh: [u8; QK_K / 32],
    pub(super) signs: [u8; QK_K / 8],
    pub(super) scales: [u8; QK_K / 64],
}
const _: () = assert!(size_of::<BlockIq3S>() as u64 == GgmlType::IQ3_S.type_size());

/// IQ1_S: low 8 bits of each 11-bit grid index; per 32 weights a u16 of four
/// 3-bit high parts, a 3-bit scale and the delta's sign.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1S {
    pub(super) d: F16,
    pub(super) qs: [u8; QK_K / 8],
    pub(super) qh: [u8; QK_K / 16],
}
const _: () = assert!(size_of::<BlockIq1S>() as u64 == GgmlType::IQ1_S.type_size());

/// IQ1_M: like IQ1_S but with a scale and delta sign per 16 weights, and the
/// f16 block scale split into the top nibbles of the four u16 in `scales`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1M {
    pub(super) qs: [u8; QK_K / 8],
    pub(super) qh: [u8; QK_K / 16],
    pub(super) scales: [u8; QK_K / 32],
}
const _: () = assert!(size_of::<BlockIq1M>() as u64 == GgmlType::IQ1_M.type_size());

/// `y[j] = scale * grid[j] * (±1)`, the sign from bit j of `signs`. The sign
/// stays a multiplication, as in C: a negation would flip NaNs' sign bits
/// where ggml's multiply keeps them.
#[inline]
fn signed_points(y: &mut [f32], scale: f32, grid: [u8; 8], signs: u8) {
    for ((y, g), mask) in y.iter_mut().zip(grid).zip(KMASK_IQ2XS) {
        *y = scale * f32::from(g) * if signs & mask != 0 { -1.0 } else { 1.0 };
    }
}

/// Two 4-value IQ3 points side by side, as one 8-value point.
#[inline]
fn pair(first: u32, second: u32) -> [u8; 8] {
    (u64::from(first) | (u64::from(second) << 32)).to_le_bytes()
}

/// `y[j] = scale * (grid[j] + delta)` for an IQ1 point.
#[inline]
fn shifted_points(y: &mut [f32], scale: f32, grid: u64, delta: f32) {
    for (y, g) in y.iter_mut().zip(grid.to_le_bytes()) {
        *y = scale * (f32::from(g as i8) + delta);
    }
}

#[inline]
fn u16_at(bytes: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
}

#[inline]
fn u32_at(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
}

pub fn dequantize_iq2_xxs(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq2Xxs] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (q, y) in b.qs.chunks_exact(8).zip(y.chunks_exact_mut(32)) {
            let aux = u32_at(q, 1);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let grid = IQ2XXS_GRID[usize::from(q[l])].to_le_bytes();
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                signed_points(y, db, grid, signs);
            }
        }
    }
}

pub fn dequantize_iq2_xs(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq2Xs] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for ((q, &sc), y) in b.qs.chunks_exact(8).zip(&b.scales).zip(y.chunks_exact_mut(32)) {
            let db = [d * (0.5 + f32::from(sc & 0xf)) * 0.25, d * (0.5 + f32::from(sc >> 4)) * 0.25];
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let q = u16_at(q, l);
                let grid = IQ2XS_GRID[usize::from(q & 511)].to_le_bytes();
                signed_points(y, db[l / 2], grid, KSIGNS_IQ2XS[usize::from(q >> 9)]);
            }
        }
    }
}

pub fn dequantize_iq2_s(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq2S] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let (qs, signs) = b.qs.split_at(QK_K / 8);
        let groups = qs.chunks_exact(4).zip(signs.chunks_exact(4)).zip(b.qh.iter().zip(&b.scales));
        for (((qs, signs), (&qh, &sc)), y) in groups.zip(y.chunks_exact_mut(32)) {
            let db = [d * (0.5 + f32::from(sc & 0xf)) * 0.25, d * (0.5 + f32::from(sc >> 4)) * 0.25];
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let index = usize::from(qs[l]) | ((usize::from(qh) << (8 - 2 * l)) & 0x300);
                signed_points(y, db[l / 2], IQ2S_GRID[index].to_le_bytes(), signs[l]);
            }
        }
    }
}

pub fn dequantize_iq3_xxs(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq3Xxs] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let (qs, scales_and_signs) = b.qs.split_at(QK_K / 4);
        for (ib32, (qs, y)) in qs.chunks_exact(8).zip(y.chunks_exact_mut(32)).enumerate() {
            let aux = u32_at(scales_and_signs, ib32);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let grid = pair(IQ3XXS_GRID[usize::from(qs[2 * l])], IQ3XXS_GRID[usize::from(qs[2 * l + 1])]);
                signed_points(y, db, grid, signs);
            }
        }
    }
}

pub fn dequantize_iq3_s(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq3S] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let groups = b.qs.chunks_exact(8).zip(&b.qh).zip(b.signs.chunks_exact(4));
        for (ib32, (((qs, &qh), signs), y)) in groups.zip(y.chunks_exact_mut(32)).enumerate() {
            // ggml walks the groups in pairs with scales db1, db2 from one
            // byte; computing each group's scale on its own is the same value.
            let sc = (b.scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf;
            let db = d * f32::from(1 + 2 * sc);
            let qh = usize::from(qh);
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let first = usize::from(qs[2 * l]) | ((qh << (8 - 2 * l)) & 256);
                let second = usize::from(qs[2 * l + 1]) | ((qh << (7 - 2 * l)) & 256);
                signed_points(y, db, pair(IQ3S_GRID[first], IQ3S_GRID[second]), signs[l]);
            }
        }
    }
}

pub fn dequantize_iq1_s(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq1S] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (ib, (qs, y)) in b.qs.chunks_exact(4).zip(y.chunks_exact_mut(32)).enumerate() {
            let qh = u16_at(&b.qh, ib);
            let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
            let delta = if qh & 0x8000 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let index = usize::from(qs[l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
                shifted_points(y, dl, IQ1S_GRID[index], delta);
            }
        }
    }
}

pub fn dequantize_iq1_m(src: &[u8], out: &mut [f32]) {
    let blocks: &[BlockIq1M] = bytemuck::cast_slice(src);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let sc: [u16; 4] = std::array::from_fn(|i| u16_at(&b.scales, i));
        let d_bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = f16_bits_to_f32(d_bits);
        let groups = b.qs.chunks_exact(4).zip(b.qh.chunks_exact(2));
        for (ib, ((qs, qh), y)) in groups.zip(y.chunks_exact_mut(32)).enumerate() {
            let shift = 6 * (ib % 2);
            let dl = [
                d * f32::from(2 * ((sc[ib / 2] >> shift) & 0x7) + 1),
                d * f32::from(2 * ((sc[ib / 2] >> (shift + 3)) & 0x7) + 1),
            ];
            // Each qh byte serves two points: bits 0-2 and 4-6 extend their
            // indices, bits 3 and 7 flip their deltas.
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let h = usize::from(qh[l / 2]);
                let (index_shift, delta_bit) = if l % 2 == 0 { (8, 0x08) } else { (4, 0x80) };
                let index = usize::from(qs[l]) | ((h << index_shift) & 0x700);
                let delta = if h & delta_bit != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
                shifted_points(y, dl[l / 2], IQ1S_GRID[index], delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(ty: GgmlType, block: &[u8]) -> Vec<f32> {
        let mut out = vec![0.0; QK_K];
        crate::codecs::dequantize_row(ty, block, &mut out).expect("one whole block");
        out
    }

    #[test]
    fn sign_table_adds_an_even_parity_bit() {
        for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
            assert_eq!(usize::from(s & 127), i);
            assert_eq!(s.count_ones() % 2, 0, "{i}");
        }
    }

    #[test]
    fn iq2_xxs_first_point_with_unit_scale() {
        // d = 1, every index 0 (all magnitudes 8), scale nibble 0, no signs:
        // 1 * (0.5 + 0) * 0.25 * 8 = 1.
        let mut block = vec![0u8; GgmlType::IQ2_XXS.type_size() as usize];
        block[..2].copy_from_slice(bytemuck::bytes_of(&F16::from_f32(1.0)));
        assert!(decode(GgmlType::IQ2_XXS, &block).iter().all(|&v| v == 1.0));
        // Sign index 1 (ksigns 0x81) negates elements 0 and 7 of the first point.
        block[2 + 4] = 1;
        let y = decode(GgmlType::IQ2_XXS, &block);
        assert_eq!(&y[..8], &[-1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0]);
    }

    #[test]
    fn iq1_m_assembles_its_scale_from_four_nibbles() {
        // 1.0 is f16 0x3c00: nibbles 0, 0, c, 3 from the lowest up, stored in
        // the top nibble of scales u16 0..3. Scale fields 0 give dl = d.
        let mut block = vec![0u8; GgmlType::IQ1_M.type_size() as usize];
        let scales = block.len() - QK_K / 32;
        block[scales + 5] = 0xc0;
        block[scales + 7] = 0x30;
        // Index 0 is all -1; the delta is +0.125.
        assert!(decode(GgmlType::IQ1_M, &block).iter().all(|&v| v == -0.875));
    }
}
