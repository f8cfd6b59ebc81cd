//! The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1,
//! decode only). Without importance weights they quantize with ggml's
//! `quantize_row_*_ref`; with them, with ggml's weighted searches.

use bytemuck::{Pod, Zeroable};

use super::blocks::{BATCH, MinSearch, zero_padded_batch};
use super::blocks::{BlockQ8_0, QK, inverse};
use super::scalar::{F16, c_float_to_i8, c_float_to_int};
use super::search::{make_qkx_quants_groups, make_qx_quants_groups, signed_absmax};
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

/// Each 32-value block of `src`, its levels chosen by `levels` (the
/// unweighted rule, one block at a time) or, with importance, by the
/// weighted searches [`BATCH`] blocks at a time.
fn for_each_block<B, L: Copy + Default>(
    src: &[f32],
    importance: Option<&[f32]>,
    blocks: &mut [B],
    weighted: impl Fn(&[f32], &[f32]) -> [L; BATCH],
    unweighted: impl Fn(&[f32]) -> L,
    mut encode: impl FnMut(L, &mut B),
) {
    let Some(importance) = importance else {
        for (x, b) in src.chunks_exact(QK).zip(blocks) {
            encode(unweighted(x), b);
        }
        return;
    };
    let weights = block_weights(src, importance);
    let span = QK * BATCH;
    let mut batches = blocks.chunks_mut(BATCH);
    for ((x, w), batch) in src.chunks(span).zip(weights.chunks(span)).zip(&mut batches) {
        let found = match x.len() == span {
            true => weighted(x, w),
            false => weighted(&zero_padded_batch(x), &zero_padded_batch(w)),
        };
        for (levels, b) in found.into_iter().zip(batch) {
            encode(levels, b);
        }
    }
}

/// Each value's weight: `qw[j] · sqrt(σ² + x[j]²)`, σ² the mean square of
/// the whole row (ggml's `quantize_row_*_impl`).
fn block_weights(src: &[f32], importance: &[f32]) -> Vec<f32> {
    let sigma2 = src.iter().fold(0.0f32, |s, v| s + v * v) / src.len() as f32;
    src.iter().zip(importance).map(|(&x, &qw)| qw * (sigma2 + x * x).sqrt()).collect()
}

/// Q4_0/Q5_0 levels in `[0, 2·nmax)` and their scale, the largest magnitude
/// mapped to `-nmax`.
fn symmetric_levels(level: Level, x: &[f32], nmax: i32) -> (f32, [u8; QK]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 && Level::Avx2.is_supported() {
        // SAFETY: AVX2 is present (checked just above).
        return unsafe { super::x86::symmetric_levels_avx2(x, nmax) };
    }
    let _ = level;
    symmetric_levels_scalar(x, nmax)
}

/// The weighted Q4_0/Q5_0 search of [`BATCH`] blocks.
fn symmetric_levels_weighted(level: Level, x: &[f32], weights: &[f32], nmax: i32) -> [(f32, [u8; QK]); BATCH] {
    let mut levels = [0i8; QK * BATCH];
    let mut scales = [0.0f32; BATCH];
    make_qx_quants_groups(level, nmax, QK, x, &mut levels, Some(weights), &mut scales);
    std::array::from_fn(|j| {
        (scales[j], bytemuck::cast::<[i8; QK], [u8; QK]>(levels[j * QK..][..QK].try_into().expect("a block")))
    })
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

/// Q4_1/Q5_1 levels in `[0, nmax]` with scale and minimum: min to max in
/// `nmax` steps, each level made by `level` from its scaled offset.
fn offset_levels(x: &[f32], nmax: i32, level: impl Fn(f32) -> u8) -> (f32, f32, [u8; QK]) {
    let mut levels = [0u8; QK];
    let (min, max) = min_max(x);
    let d = (max - min) / nmax as f32;
    let id = inverse(d);
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = level((v - min) * id + 0.5);
    }
    (d, min, levels)
}

/// The weighted Q4_1/Q5_1 search (ggml's `make_qkx3_quants`) of [`BATCH`] blocks.
fn offset_levels_weighted(level: Level, x: &[f32], weights: &[f32], nmax: i32) -> [(f32, f32, [u8; QK]); BATCH] {
    let mut levels = [0u8; QK * BATCH];
    let (mut scales, mut neg_mins) = ([0.0f32; BATCH], [0.0f32; BATCH]);
    make_qkx_quants_groups(level, nmax, QK, x, weights, &mut levels, QKX3_SEARCH, true, &mut scales, &mut neg_mins);
    std::array::from_fn(|j| (scales[j], -neg_mins[j], levels[j * QK..][..QK].try_into().expect("a block")))
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
    let weighted = |x: &[f32], w: &[f32]| symmetric_levels_weighted(level, x, w, 8);
    for_each_block(
        src,
        importance,
        blocks,
        weighted,
        |x| symmetric_levels(level, x, 8),
        |(d, levels), b| {
            b.d = F16::from_f32(d);
            pack_nibbles_raw(&levels, &mut b.qs);
        },
    );
}

pub fn quantize_q4_1(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ4_1]) {
    let weighted = |x: &[f32], w: &[f32]| offset_levels_weighted(level, x, w, 15);
    let unweighted = |x: &[f32]| offset_levels(x, 15, |v| clamp_high(v, 15));
    for_each_block(src, importance, blocks, weighted, unweighted, |(d, min, levels), b| {
        b.d = F16::from_f32(d);
        b.m = F16::from_f32(min);
        pack_nibbles_raw(&levels, &mut b.qs);
    });
}

pub fn quantize_q5_0(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ5_0]) {
    let weighted = |x: &[f32], w: &[f32]| symmetric_levels_weighted(level, x, w, 16);
    for_each_block(
        src,
        importance,
        blocks,
        weighted,
        |x| symmetric_levels(level, x, 16),
        |(d, levels), b| {
            b.d = F16::from_f32(d);
            pack_nibbles(&levels, &mut b.qs);
            b.qh = pack_high_bits(&levels);
        },
    );
}

pub fn quantize_q5_1(level: Level, src: &[f32], importance: Option<&[f32]>, blocks: &mut [BlockQ5_1]) {
    let weighted = |x: &[f32], w: &[f32]| offset_levels_weighted(level, x, w, 31);
    // ggml's reference path: (uint8_t)(x + 0.5f), no upper clamp.
    let unweighted = |x: &[f32]| offset_levels(x, 31, |v| c_float_to_int(v) as u8);
    for_each_block(src, importance, blocks, weighted, unweighted, |(d, min, levels), b| {
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
