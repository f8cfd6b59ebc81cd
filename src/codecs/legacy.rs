//! The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1,
//! decode only). Without importance weights they quantize with ggml's
//! `quantize_row_*_ref`; with them, with ggml's weighted searches.

use bytemuck::{Pod, Zeroable};

use super::blocks::MinSearch;
use super::blocks::{BlockQ8_0, QK, inverse};
use super::scalar::{F16, c_float_to_i8, c_float_to_int};
use super::search::{QxWeighting, make_qkx_quants, make_qx_quants, signed_absmax};
use super::simd::Level;
use crate::types::GgmlType;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    d: F16,
    qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_0>() as u64 == GgmlType::Q4_0.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    d: F16,
    m: F16,
    qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_1>() as u64 == GgmlType::Q4_1.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    d: F16,
    qh: [u8; 4],
    qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_0>() as u64 == GgmlType::Q5_0.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    d: F16,
    m: F16,
    qh: [u8; 4],
    qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_1>() as u64 == GgmlType::Q5_1.type_size());

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    d: F16,
    s: F16,
    qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_1>() as u64 == GgmlType::Q8_1.type_size());

#[inline(always)]
pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = (i32::from(q & 0xf) - 8) as f32 * d;
            y[j + QK / 2] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

#[inline(always)]
pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = f32::from(q & 0xf) * d + m;
            y[j + QK / 2] = f32::from(q >> 4) * d + m;
        }
    }
}

/// The fifth bits of a Q5 block: bit `j` belongs to element `j`.
fn high_bit(qh: [u8; 4], j: usize) -> u8 {
    (((u32::from_le_bytes(qh) >> j) & 1) << 4) as u8
}

#[inline(always)]
pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            let x0 = i32::from((q & 0xf) | high_bit(b.qh, j)) - 16;
            let x1 = i32::from((q >> 4) | high_bit(b.qh, j + QK / 2)) - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

#[inline(always)]
pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, &q) in b.qs.iter().enumerate() {
            let x0 = (q & 0xf) | high_bit(b.qh, j);
            let x1 = (q >> 4) | high_bit(b.qh, j + QK / 2);
            y[j] = f32::from(x0) * d + m;
            y[j + QK / 2] = f32::from(x1) * d + m;
        }
    }
}

#[inline(always)]
pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (q, v) in b.qs.iter().zip(y) {
            *v = f32::from(*q) * d;
        }
    }
}

pub fn dequantize_q8_1(blocks: &[BlockQ8_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (q, v) in b.qs.iter().zip(y) {
            *v = f32::from(*q) * d;
        }
    }
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `MIN(limit, (int8_t)v)` with ggml's signed comparison and x86 cast.
fn clamp_high(v: f32, limit: i32) -> u8 {
    i32::from(c_float_to_i8(v)).min(limit) as u8
}

/// Runs `encode` on every block with its importance weights, if any:
/// `qw[j] · sqrt(σ² + x[j]²)`, σ² the mean square of the whole row (ggml's
/// `quantize_row_*_impl`).
fn for_each_block<B>(
    src: &[f32],
    importance: Option<&[f32]>,
    blocks: &mut [B],
    mut encode: impl FnMut(&[f32], Option<&[f32; QK]>, &mut B),
) {
    let sigma2 = src.iter().fold(0.0f32, |s, v| s + v * v) / src.len() as f32;
    let mut weight = [0.0f32; QK];
    for (ib, (x, b)) in src.chunks_exact(QK).zip(blocks).enumerate() {
        let weight = importance.map(|qw| {
            for (j, w) in weight.iter_mut().enumerate() {
                *w = qw[ib * QK + j] * (sigma2 + x[j] * x[j]).sqrt();
            }
            &weight
        });
        encode(x, weight, b);
    }
}

/// Q4_0/Q5_0 levels in `[0, 2·nmax)` and their scale: the weighted search
/// with importance, else the largest magnitude mapped to `-nmax`.
fn symmetric_levels(level: Level, x: &[f32], weight: Option<&[f32; QK]>, nmax: i32) -> (f32, [u8; QK]) {
    if let Some(weight) = weight {
        let mut levels = [0i8; QK];
        let d = make_qx_quants(nmax, x, &mut levels, QxWeighting::Squared, Some(weight));
        return (d, bytemuck::cast(levels));
    }
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 && Level::Avx2.is_supported() {
        // SAFETY: AVX2 is present (checked just above).
        return unsafe { super::x86::symmetric_levels_avx2(x, nmax) };
    }
    symmetric_levels_scalar(x, nmax)
}

/// The reference path of ggml's `quantize_row_q4_0_ref` / `q5_0_ref`.
pub(super) fn symmetric_levels_scalar(x: &[f32], nmax: i32) -> (f32, [u8; QK]) {
    let d = signed_absmax(x) / -(nmax as f32);
    let id = inverse(d);
    let mut levels = [0u8; QK];
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = clamp_high(v * id + (nmax as f32 + 0.5), 2 * nmax - 1);
    }
    (d, levels)
}

/// Q4_1/Q5_1 levels in `[0, nmax]` with scale and minimum: the weighted
/// search with importance, else min to max in `nmax` steps, each level made
/// by `level` from its scaled offset.
fn offset_levels(x: &[f32], weight: Option<&[f32; QK]>, nmax: i32, level: impl Fn(f32) -> u8) -> (f32, f32, [u8; QK]) {
    let mut levels = [0u8; QK];
    if let Some(weight) = weight {
        let (d, neg_min) = make_qkx_quants(nmax, x, weight, &mut levels, QKX3_SEARCH, true);
        return (d, -neg_min, levels);
    }
    let (min, max) = min_max(x);
    let d = (max - min) / nmax as f32;
    let id = inverse(d);
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = level((v - min) * id + 0.5);
    }
    (d, min, levels)
}

/// Packs levels `l[j]` and `l[j + 16]` into the low and high nibbles, with
/// ggml's `xi0 | xi1 << 4` on unmasked bytes: a level of 255 (a negative
/// cast in the reference path) sets every bit.
fn pack_nibbles_raw(levels: &[u8; QK], qs: &mut [u8; QK / 2]) {
    for j in 0..QK / 2 {
        qs[j] = levels[j] | (levels[j + QK / 2] << 4);
    }
}

/// Packs the low nibbles of 5-bit levels.
fn pack_nibbles(levels: &[u8; QK], qs: &mut [u8; QK / 2]) {
    for j in 0..QK / 2 {
        qs[j] = (levels[j] & 0xf) | ((levels[j + QK / 2] & 0xf) << 4);
    }
}

/// The fifth bits of 5-bit levels, element `j` at bit `j`.
fn pack_high_bits(levels: &[u8; QK]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, &l) in levels.iter().enumerate() {
        qh |= u32::from((l & 0x10) >> 4) << j;
    }
    qh.to_le_bytes()
}

const QKX3_SEARCH: MinSearch = MinSearch { rmin: -0.9, rdelta: 0.05, nstep: 36, use_mad: false };

pub fn quantize_q4_0(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ4_0]) {
    for_each_block(src, importance, blocks, |x, weight, b| {
        let (d, levels) = symmetric_levels(level, x, weight, 8);
        b.d = F16::from_f32(d);
        pack_nibbles_raw(&levels, &mut b.qs);
    });
}

pub fn quantize_q4_1(src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ4_1]) {
    for_each_block(src, importance, blocks, |x, weight, b| {
        let (d, min, levels) = offset_levels(x, weight, 15, |v| clamp_high(v, 15));
        b.d = F16::from_f32(d);
        b.m = F16::from_f32(min);
        pack_nibbles_raw(&levels, &mut b.qs);
    });
}

pub fn quantize_q5_0(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ5_0]) {
    for_each_block(src, importance, blocks, |x, weight, b| {
        let (d, levels) = symmetric_levels(level, x, weight, 16);
        b.d = F16::from_f32(d);
        pack_nibbles(&levels, &mut b.qs);
        b.qh = pack_high_bits(&levels);
    });
}

pub fn quantize_q5_1(src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ5_1]) {
    // ggml's reference path: (uint8_t)(x + 0.5f), no upper clamp.
    for_each_block(src, importance, blocks, |x, weight, b| {
        let (d, min, levels) = offset_levels(x, weight, 31, |v| c_float_to_int(v) as u8);
        b.d = F16::from_f32(d);
        b.m = F16::from_f32(min);
        pack_nibbles(&levels, &mut b.qs);
        b.qh = pack_high_bits(&levels);
    });
}

/// Q8_0 with the vector kernel of `level` when the machine has it.
pub fn quantize_q8_0(level: Level, src: &[f32], blocks: &mut [BlockQ8_0]) {
    match level {
        // SAFETY: each kernel runs only where its instructions are supported.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if level.is_supported() => unsafe { super::x86::quantize_q8_0_avx512(src, blocks) },
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 if Level::Avx2.is_supported() => unsafe {
            super::x86::quantize_q8_0_avx2(src, blocks)
        },
        _ => quantize_q8_0_scalar(src, blocks),
    }
}

/// The reference: ggml's `quantize_row_q8_0_ref`.
fn quantize_q8_0_scalar(src: &[f32], blocks: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks) {
        // ggml's MAX(a, b) is `a > b ? a : b`, which f32::max is not for NaN.
        let amax = x.iter().fold(0.0f32, |m, v| if m > v.abs() { m } else { v.abs() });
        let d = amax / 127.0;
        let id = inverse(d);
        b.d = F16::from_f32(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = c_float_to_i8((v * id).round());
        }
    }
}
