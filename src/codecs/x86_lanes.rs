//! The two x86 vector widths the batched searches run at, behind one
//! interface: AVX2 (8 lanes) and AVX-512 (16). A search written once over
//! [`Lanes`] is compiled for each width inside a function that enables its
//! target features; every operation is `inline(always)`, so it is compiled
//! with those features.
//!
//! A width is a token ([`Avx2`], [`Avx512`]) made only where the machine
//! has its instructions, so the operations are safe to call. Every
//! operation is the one the scalar definition performs, lane by lane: IEEE
//! add, subtract, multiply, divide (never fused), MINPS/MAXPS's operand
//! rule, ggml's `nearest_int` bit trick.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

/// The longest group a search gathers (values per group).
pub const MAX_GROUP: usize = 32;

/// Up to [`MAX_GROUP`] vectors, element-major (vector `i` holds element `i`
/// of every group), of which the first `len` are set; only those are seen.
/// Never cleared first: at 16 or 32 lanes such an array is kilobytes, and
/// zeroing each one a search makes cost more than one of its passes.
pub struct Columns<V> {
    vectors: [MaybeUninit<V>; MAX_GROUP],
    len: usize,
}

impl<V: Copy> Columns<V> {
    #[inline(always)]
    pub fn new() -> Columns<V> {
        Columns { vectors: [const { MaybeUninit::uninit() }; MAX_GROUP], len: 0 }
    }

    /// Sets the next vector; past [`MAX_GROUP`] it panics. For loops that
    /// fill many, [`Columns::rewrite`].
    #[inline(always)]
    pub fn push(&mut self, v: V) {
        self.vectors[self.len].write(v);
        self.len += 1;
    }

    /// Sets the vectors again from the first, through a writer that counts
    /// in a register: `push` in a hot loop keeps `len` in memory, a
    /// store-to-load chain through every iteration.
    #[inline(always)]
    pub fn rewrite(&mut self) -> ColumnWriter<'_, V> {
        self.len = 0;
        ColumnWriter { vectors: &mut self.vectors, len: &mut self.len, filled: 0 }
    }
}

/// [`Columns::rewrite`]'s writer; the columns see what it set when it drops.
pub struct ColumnWriter<'a, V> {
    vectors: &'a mut [MaybeUninit<V>; MAX_GROUP],
    len: &'a mut usize,
    filled: usize,
}

impl<V> ColumnWriter<'_, V> {
    /// Sets the next vector; past [`MAX_GROUP`] it panics.
    #[inline(always)]
    pub fn push(&mut self, v: V) {
        self.vectors[self.filled].write(v);
        self.filled += 1;
    }
}

impl<V> Drop for ColumnWriter<'_, V> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.len = self.filled;
    }
}

impl<V> Deref for Columns<V> {
    type Target = [V];
    #[inline(always)]
    fn deref(&self) -> &[V] {
        // SAFETY: `push` wrote each of the first `len` vectors.
        unsafe { std::slice::from_raw_parts(self.vectors.as_ptr().cast(), self.len) }
    }
}

impl<V> DerefMut for Columns<V> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [V] {
        // SAFETY: as in `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.vectors.as_mut_ptr().cast(), self.len) }
    }
}

/// One vector width. `F` holds a float per lane, `I` an i32 per lane,
/// `M` a lane mask.
pub trait Lanes: Copy {
    const N: usize;
    type F: Copy;
    type I: Copy;
    type M: Copy;

    fn splat(self, v: f32) -> Self::F;
    fn splat_i(self, v: i32) -> Self::I;
    fn add(self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(self, a: Self::F, b: Self::F) -> Self::F;
    fn div(self, a: Self::F, b: Self::F) -> Self::F;
    /// MINPS: `b` unless `a < b` (the scalar `if a < b { b = a }`).
    fn min(self, a: Self::F, b: Self::F) -> Self::F;
    /// MAXPS: `b` unless `a > b`.
    fn max(self, a: Self::F, b: Self::F) -> Self::F;
    fn abs(self, a: Self::F) -> Self::F;
    fn negate(self, a: Self::F) -> Self::F;
    fn to_float(self, a: Self::I) -> Self::F;
    fn add_i(self, a: Self::I, b: Self::I) -> Self::I;
    fn clamp_i(self, a: Self::I, low: Self::I, high: Self::I) -> Self::I;
    /// ggml's `nearest_int`: the same bit trick as
    /// [`super::scalar::nearest_int`], so out-of-range inputs give the same
    /// (meaningless) integers.
    fn nearest_int(self, a: Self::F) -> Self::I;
    /// Rounds to the nearest integer, ties to even, as a float: what
    /// [`Lanes::nearest_int`] computes wherever |a| < 2²², in one instruction.
    fn round_even(self, a: Self::F) -> Self::F;
    fn lt(self, a: Self::F, b: Self::F) -> Self::M;
    fn le(self, a: Self::F, b: Self::F) -> Self::M;
    fn gt(self, a: Self::F, b: Self::F) -> Self::M;
    fn ge(self, a: Self::F, b: Self::F) -> Self::M;
    /// Not less than, or unordered.
    fn not_lt(self, a: Self::F, b: Self::F) -> Self::M;
    fn eq(self, a: Self::F, b: Self::F) -> Self::M;
    /// Not equal, or unordered.
    fn ne(self, a: Self::F, b: Self::F) -> Self::M;
    fn eq_i(self, a: Self::I, b: Self::I) -> Self::M;
    fn and(self, a: Self::M, b: Self::M) -> Self::M;
    fn or(self, a: Self::M, b: Self::M) -> Self::M;
    /// `a` and not `b`.
    fn and_not(self, a: Self::M, b: Self::M) -> Self::M;
    fn none(self) -> Self::M;
    fn any(self, m: Self::M) -> bool;
    /// `if_true` where `m` is set, else `if_false`.
    fn select(self, m: Self::M, if_false: Self::F, if_true: Self::F) -> Self::F;
    fn select_i(self, m: Self::M, if_false: Self::I, if_true: Self::I) -> Self::I;
    /// `table[index]` in each lane (every index below 16).
    fn lookup16(self, table: &[f32; 16], index: Self::I) -> Self::F;
    /// Element `i` of each of `N` consecutive groups of `n` values, for `i < n`.
    /// Into `out`, in place: returned, kilobytes of vectors would be copied.
    fn gather_groups(self, v: &[f32], n: usize, out: &mut Columns<Self::F>);
    /// [`Lanes::gather_groups`] backwards for levels: the low byte of lane
    /// `j` of `levels[i]` to `out[j·n + i]`, where `n` is `levels.len()`.
    #[inline(always)]
    fn scatter_groups(self, levels: &[Self::I], out: &mut [u8]) {
        scatter_lane_by_lane(self, levels, out);
    }
    fn load(self, v: &[f32]) -> Self::F;
    fn store(self, a: Self::F, out: &mut [f32]);
    fn store_i(self, a: Self::I, out: &mut [i32]);
    /// The low byte of each lane to `out[..N]`.
    #[inline(always)]
    fn store_bytes(self, a: Self::I, out: &mut [u8]) {
        let mut lane_values = [0i32; 32];
        self.store_i(a, &mut lane_values);
        for (o, &l) in out[..Self::N].iter_mut().zip(&lane_values) {
            *o = l as u8;
        }
    }
}

/// AVX2: eight lanes.
#[derive(Clone, Copy)]
pub struct Avx2(());

impl Avx2 {
    pub fn new() -> Option<Avx2> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Avx2(()))
    }
}

/// AVX-512 F: sixteen lanes.
#[derive(Clone, Copy)]
pub struct Avx512(());

impl Avx512 {
    pub fn new() -> Option<Avx512> {
        (std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx2"))
            .then_some(Avx512(()))
    }
}

// SAFETY (every `unsafe` block of the two impls): an `Avx2` or `Avx512`
// exists only where `new` found its instructions; loads, stores and gathers
// stay inside the slices, as each asserts.

impl Lanes for Avx2 {
    const N: usize = 8;
    type F = __m256;
    type I = __m256i;
    type M = __m256;

    #[inline(always)]
    fn splat(self, v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    fn splat_i(self, v: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_min_ps(a, b) }
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn abs(self, a: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff))) }
    }
    #[inline(always)]
    fn negate(self, a: __m256) -> __m256 {
        unsafe { _mm256_xor_ps(a, _mm256_set1_ps(-0.0)) }
    }
    #[inline(always)]
    fn to_float(self, a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn add_i(self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    fn clamp_i(self, a: __m256i, low: __m256i, high: __m256i) -> __m256i {
        unsafe { _mm256_min_epi32(_mm256_max_epi32(a, low), high) }
    }
    #[inline(always)]
    fn nearest_int(self, a: __m256) -> __m256i {
        unsafe {
            let bits = _mm256_castps_si256(_mm256_add_ps(a, _mm256_set1_ps(12_582_912.0)));
            _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)), _mm256_set1_epi32(0x0040_0000))
        }
    }
    #[inline(always)]
    fn round_even(self, a: __m256) -> __m256 {
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn lt(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn gt(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_GT_OQ>(a, b) }
    }
    #[inline(always)]
    fn ge(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_GE_OQ>(a, b) }
    }
    #[inline(always)]
    fn not_lt(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_NLT_US>(a, b) }
    }
    #[inline(always)]
    fn eq(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn ne(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_NEQ_UQ>(a, b) }
    }
    #[inline(always)]
    fn eq_i(self, a: __m256i, b: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)) }
    }
    #[inline(always)]
    fn and(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn or(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn and_not(self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_andnot_ps(b, a) }
    }
    #[inline(always)]
    fn none(self) -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    fn any(self, m: __m256) -> bool {
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn select(self, m: __m256, if_false: __m256, if_true: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(if_false, if_true, m) }
    }
    #[inline(always)]
    fn select_i(self, m: __m256, if_false: __m256i, if_true: __m256i) -> __m256i {
        unsafe { _mm256_blendv_epi8(if_false, if_true, _mm256_castps_si256(m)) }
    }
    #[inline(always)]
    fn lookup16(self, table: &[f32; 16], index: __m256i) -> __m256 {
        unsafe {
            let (low, high) = (_mm256_loadu_ps(table.as_ptr()), _mm256_loadu_ps(table.as_ptr().add(8)));
            let upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(index, _mm256_set1_epi32(7)));
            _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, index), _mm256_permutevar8x32_ps(high, index), upper)
        }
    }
    #[inline(always)]
    fn gather_groups(self, v: &[f32], n: usize, out: &mut Columns<__m256>) {
        assert!(n <= MAX_GROUP && v.len() >= Self::N * n);
        let n32 = n as i32;
        let mut out = out.rewrite();
        unsafe {
            let index = _mm256_setr_epi32(0, n32, 2 * n32, 3 * n32, 4 * n32, 5 * n32, 6 * n32, 7 * n32);
            for i in 0..n {
                // The largest index read is 7n + i < 8n ≤ v.len().
                out.push(_mm256_i32gather_ps::<4>(v.as_ptr().add(i), index));
            }
        }
    }
    #[inline(always)]
    fn load(self, v: &[f32]) -> __m256 {
        assert!(v.len() >= Self::N);
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, a: __m256, out: &mut [f32]) {
        assert!(out.len() >= Self::N);
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_i(self, a: __m256i, out: &mut [i32]) {
        assert!(out.len() >= Self::N);
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), a) }
    }
}

impl Lanes for Avx512 {
    const N: usize = 16;
    type F = __m512;
    type I = __m512i;
    type M = __mmask16;

    #[inline(always)]
    fn splat(self, v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    fn splat_i(self, v: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    fn abs(self, a: __m512) -> __m512 {
        unsafe { _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fff_ffff))) }
    }
    #[inline(always)]
    fn negate(self, a: __m512) -> __m512 {
        unsafe { _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(i32::MIN))) }
    }
    #[inline(always)]
    fn to_float(self, a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn add_i(self, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    fn clamp_i(self, a: __m512i, low: __m512i, high: __m512i) -> __m512i {
        unsafe { _mm512_min_epi32(_mm512_max_epi32(a, low), high) }
    }
    #[inline(always)]
    fn nearest_int(self, a: __m512) -> __m512i {
        unsafe {
            let bits = _mm512_castps_si512(_mm512_add_ps(a, _mm512_set1_ps(12_582_912.0)));
            _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007f_ffff)), _mm512_set1_epi32(0x0040_0000))
        }
    }
    #[inline(always)]
    fn round_even(self, a: __m512) -> __m512 {
        unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
    }
    #[inline(always)]
    fn lt(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    fn le(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b) }
    }
    #[inline(always)]
    fn gt(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b) }
    }
    #[inline(always)]
    fn ge(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b) }
    }
    #[inline(always)]
    fn not_lt(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_NLT_US>(a, b) }
    }
    #[inline(always)]
    fn eq(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b) }
    }
    #[inline(always)]
    fn ne(self, a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(a, b) }
    }
    #[inline(always)]
    fn eq_i(self, a: __m512i, b: __m512i) -> __mmask16 {
        unsafe { _mm512_cmpeq_epi32_mask(a, b) }
    }
    #[inline(always)]
    fn and(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a & b
    }
    #[inline(always)]
    fn or(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn and_not(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a & !b
    }
    #[inline(always)]
    fn none(self) -> __mmask16 {
        0
    }
    #[inline(always)]
    fn any(self, m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn select(self, m: __mmask16, if_false: __m512, if_true: __m512) -> __m512 {
        unsafe { _mm512_mask_blend_ps(m, if_false, if_true) }
    }
    #[inline(always)]
    fn select_i(self, m: __mmask16, if_false: __m512i, if_true: __m512i) -> __m512i {
        unsafe { _mm512_mask_blend_epi32(m, if_false, if_true) }
    }
    #[inline(always)]
    fn lookup16(self, table: &[f32; 16], index: __m512i) -> __m512 {
        unsafe { _mm512_permutexvar_ps(index, _mm512_loadu_ps(table.as_ptr())) }
    }
    #[inline(always)]
    fn gather_groups(self, v: &[f32], n: usize, out: &mut Columns<__m512>) {
        assert!(n <= MAX_GROUP && v.len() >= Self::N * n);
        let mut out = out.rewrite();
        if n.is_multiple_of(16) {
            // Sixteen rows of sixteen values turned into sixteen columns by
            // shuffles: several times fewer operations than gathers.
            for block in 0..n / 16 {
                let mut rows = [unsafe { _mm512_setzero_ps() }; 16];
                for (j, row) in rows.iter_mut().enumerate() {
                    *row = self.load(&v[j * n + 16 * block..]);
                }
                for column in transpose16(&rows) {
                    out.push(column);
                }
            }
            return;
        }
        unsafe {
            let index = _mm512_mullo_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(n as i32),
            );
            for i in 0..n {
                // The largest index read is 15n + i < 16n ≤ v.len().
                out.push(_mm512_i32gather_ps::<4>(index, v.as_ptr().add(i)));
            }
        }
    }
    #[inline(always)]
    fn scatter_groups(self, levels: &[__m512i], out: &mut [u8]) {
        let n = levels.len();
        if !n.is_multiple_of(16) {
            return scatter_lane_by_lane(self, levels, out);
        }
        let out = &mut out[..Self::N * n];
        for (block, columns) in levels.chunks_exact(16).enumerate() {
            let mut as_floats = [unsafe { _mm512_setzero_ps() }; 16];
            for (f, &c) in as_floats.iter_mut().zip(columns) {
                *f = unsafe { _mm512_castsi512_ps(c) };
            }
            for (j, row) in transpose16(&as_floats).into_iter().enumerate() {
                self.store_bytes(unsafe { _mm512_castps_si512(row) }, &mut out[j * n + 16 * block..]);
            }
        }
    }
    #[inline(always)]
    fn load(self, v: &[f32]) -> __m512 {
        assert!(v.len() >= Self::N);
        unsafe { _mm512_loadu_ps(v.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, a: __m512, out: &mut [f32]) {
        assert!(out.len() >= Self::N);
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_i(self, a: __m512i, out: &mut [i32]) {
        assert!(out.len() >= Self::N);
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), a) }
    }
    #[inline(always)]
    fn store_bytes(self, a: __m512i, out: &mut [u8]) {
        assert!(out.len() >= Self::N);
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(a)) }
    }
}

/// Two vectors of a width side by side, as one of twice the lanes. The
/// searches are chains of dependent sums; two independent chains in flight
/// keep the vector units busy while each waits on its last add.
#[derive(Clone, Copy)]
pub struct Twice<L>(pub L);

impl<L: Lanes> Lanes for Twice<L> {
    const N: usize = 2 * L::N;
    type F = (L::F, L::F);
    type I = (L::I, L::I);
    type M = (L::M, L::M);

    #[inline(always)]
    fn splat(self, v: f32) -> Self::F {
        (self.0.splat(v), self.0.splat(v))
    }
    #[inline(always)]
    fn splat_i(self, v: i32) -> Self::I {
        (self.0.splat_i(v), self.0.splat_i(v))
    }
    #[inline(always)]
    fn add(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.add(a.0, b.0), self.0.add(a.1, b.1))
    }
    #[inline(always)]
    fn sub(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.sub(a.0, b.0), self.0.sub(a.1, b.1))
    }
    #[inline(always)]
    fn mul(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.mul(a.0, b.0), self.0.mul(a.1, b.1))
    }
    #[inline(always)]
    fn div(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.div(a.0, b.0), self.0.div(a.1, b.1))
    }
    #[inline(always)]
    fn min(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.min(a.0, b.0), self.0.min(a.1, b.1))
    }
    #[inline(always)]
    fn max(self, a: Self::F, b: Self::F) -> Self::F {
        (self.0.max(a.0, b.0), self.0.max(a.1, b.1))
    }
    #[inline(always)]
    fn abs(self, a: Self::F) -> Self::F {
        (self.0.abs(a.0), self.0.abs(a.1))
    }
    #[inline(always)]
    fn negate(self, a: Self::F) -> Self::F {
        (self.0.negate(a.0), self.0.negate(a.1))
    }
    #[inline(always)]
    fn to_float(self, a: Self::I) -> Self::F {
        (self.0.to_float(a.0), self.0.to_float(a.1))
    }
    #[inline(always)]
    fn add_i(self, a: Self::I, b: Self::I) -> Self::I {
        (self.0.add_i(a.0, b.0), self.0.add_i(a.1, b.1))
    }
    #[inline(always)]
    fn clamp_i(self, a: Self::I, low: Self::I, high: Self::I) -> Self::I {
        (self.0.clamp_i(a.0, low.0, high.0), self.0.clamp_i(a.1, low.1, high.1))
    }
    #[inline(always)]
    fn nearest_int(self, a: Self::F) -> Self::I {
        (self.0.nearest_int(a.0), self.0.nearest_int(a.1))
    }
    #[inline(always)]
    fn round_even(self, a: Self::F) -> Self::F {
        (self.0.round_even(a.0), self.0.round_even(a.1))
    }
    #[inline(always)]
    fn lt(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.lt(a.0, b.0), self.0.lt(a.1, b.1))
    }
    #[inline(always)]
    fn le(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.le(a.0, b.0), self.0.le(a.1, b.1))
    }
    #[inline(always)]
    fn gt(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.gt(a.0, b.0), self.0.gt(a.1, b.1))
    }
    #[inline(always)]
    fn ge(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.ge(a.0, b.0), self.0.ge(a.1, b.1))
    }
    #[inline(always)]
    fn not_lt(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.not_lt(a.0, b.0), self.0.not_lt(a.1, b.1))
    }
    #[inline(always)]
    fn eq(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.eq(a.0, b.0), self.0.eq(a.1, b.1))
    }
    #[inline(always)]
    fn ne(self, a: Self::F, b: Self::F) -> Self::M {
        (self.0.ne(a.0, b.0), self.0.ne(a.1, b.1))
    }
    #[inline(always)]
    fn eq_i(self, a: Self::I, b: Self::I) -> Self::M {
        (self.0.eq_i(a.0, b.0), self.0.eq_i(a.1, b.1))
    }
    #[inline(always)]
    fn and(self, a: Self::M, b: Self::M) -> Self::M {
        (self.0.and(a.0, b.0), self.0.and(a.1, b.1))
    }
    #[inline(always)]
    fn or(self, a: Self::M, b: Self::M) -> Self::M {
        (self.0.or(a.0, b.0), self.0.or(a.1, b.1))
    }
    #[inline(always)]
    fn and_not(self, a: Self::M, b: Self::M) -> Self::M {
        (self.0.and_not(a.0, b.0), self.0.and_not(a.1, b.1))
    }
    #[inline(always)]
    fn none(self) -> Self::M {
        (self.0.none(), self.0.none())
    }
    #[inline(always)]
    fn any(self, m: Self::M) -> bool {
        self.0.any(m.0) || self.0.any(m.1)
    }
    #[inline(always)]
    fn select(self, m: Self::M, if_false: Self::F, if_true: Self::F) -> Self::F {
        (self.0.select(m.0, if_false.0, if_true.0), self.0.select(m.1, if_false.1, if_true.1))
    }
    #[inline(always)]
    fn select_i(self, m: Self::M, if_false: Self::I, if_true: Self::I) -> Self::I {
        (self.0.select_i(m.0, if_false.0, if_true.0), self.0.select_i(m.1, if_false.1, if_true.1))
    }
    #[inline(always)]
    fn lookup16(self, table: &[f32; 16], index: Self::I) -> Self::F {
        (self.0.lookup16(table, index.0), self.0.lookup16(table, index.1))
    }
    #[inline(always)]
    fn gather_groups(self, v: &[f32], n: usize, out: &mut Columns<Self::F>) {
        let (mut first, mut second) = (Columns::new(), Columns::new());
        self.0.gather_groups(v, n, &mut first);
        self.0.gather_groups(&v[L::N * n..], n, &mut second);
        let mut out = out.rewrite();
        for (&a, &b) in first.iter().zip(second.iter()) {
            out.push((a, b));
        }
    }
    #[inline(always)]
    fn scatter_groups(self, levels: &[Self::I], out: &mut [u8]) {
        let (mut first, mut second) = (Columns::new(), Columns::new());
        for &(a, b) in levels {
            first.push(a);
            second.push(b);
        }
        self.0.scatter_groups(&first, out);
        self.0.scatter_groups(&second, &mut out[L::N * levels.len()..]);
    }
    #[inline(always)]
    fn load(self, v: &[f32]) -> Self::F {
        (self.0.load(v), self.0.load(&v[L::N..]))
    }
    #[inline(always)]
    fn store(self, a: Self::F, out: &mut [f32]) {
        self.0.store(a.0, out);
        self.0.store(a.1, &mut out[L::N..]);
    }
    #[inline(always)]
    fn store_i(self, a: Self::I, out: &mut [i32]) {
        self.0.store_i(a.0, out);
        self.0.store_i(a.1, &mut out[L::N..]);
    }
    #[inline(always)]
    fn store_bytes(self, a: Self::I, out: &mut [u8]) {
        self.0.store_bytes(a.0, out);
        self.0.store_bytes(a.1, &mut out[L::N..]);
    }
}

/// [`Lanes::scatter_groups`] a byte at a time.
#[inline(always)]
fn scatter_lane_by_lane<L: Lanes>(lanes: L, levels: &[L::I], out: &mut [u8]) {
    let n = levels.len();
    let out = &mut out[..L::N * n];
    let mut lane_bytes = [0u8; 32];
    for (i, &l) in levels.iter().enumerate() {
        lanes.store_bytes(l, &mut lane_bytes);
        for (j, &byte) in lane_bytes.iter().take(L::N).enumerate() {
            out[j * n + i] = byte;
        }
    }
}

/// A 16×16 matrix of floats transposed: lane `c` of row `r` becomes lane `r`
/// of row `c`. Interleaves of 32-bit and 64-bit elements within 128-bit
/// lanes, then two exchanges of 128-bit lanes.
#[inline(always)]
fn transpose16(rows: &[__m512; 16]) -> [__m512; 16] {
    unsafe {
        let mut pairs = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            pairs[2 * k] = _mm512_unpacklo_ps(rows[2 * k], rows[2 * k + 1]);
            pairs[2 * k + 1] = _mm512_unpackhi_ps(rows[2 * k], rows[2 * k + 1]);
        }
        // quads[4g + m]: in 128-bit lane L, column 4L + m of rows 4g..4g+4.
        let mut quads = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (ab_lo, ab_hi) = (_mm512_castps_pd(pairs[4 * g]), _mm512_castps_pd(pairs[4 * g + 1]));
            let (cd_lo, cd_hi) = (_mm512_castps_pd(pairs[4 * g + 2]), _mm512_castps_pd(pairs[4 * g + 3]));
            quads[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(ab_lo, cd_lo));
            quads[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(ab_lo, cd_lo));
            quads[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(ab_hi, cd_hi));
            quads[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(ab_hi, cd_hi));
        }
        let mut columns = [_mm512_setzero_ps(); 16];
        for m in 0..4 {
            // Lanes 0 and 2 (0x88), 1 and 3 (0xdd) of two row groups each.
            let even_01 = _mm512_shuffle_f32x4::<0x88>(quads[m], quads[4 + m]);
            let odd_01 = _mm512_shuffle_f32x4::<0xdd>(quads[m], quads[4 + m]);
            let even_23 = _mm512_shuffle_f32x4::<0x88>(quads[8 + m], quads[12 + m]);
            let odd_23 = _mm512_shuffle_f32x4::<0xdd>(quads[8 + m], quads[12 + m]);
            columns[m] = _mm512_shuffle_f32x4::<0x88>(even_01, even_23);
            columns[8 + m] = _mm512_shuffle_f32x4::<0xdd>(even_01, even_23);
            columns[4 + m] = _mm512_shuffle_f32x4::<0x88>(odd_01, odd_23);
            columns[12 + m] = _mm512_shuffle_f32x4::<0xdd>(odd_01, odd_23);
        }
        columns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gathering and scattering against their definition, at every group
    /// length the searches use (16 and 32 take the transposes, the others
    /// gathers), one and two vectors wide.
    fn check<L: Lanes>(lanes: L) {
        for n in [8, 16, 24, 32] {
            let v: Vec<f32> = (0..L::N * n).map(|k| k as f32).collect();
            let mut columns = Columns::new();
            lanes.gather_groups(&v, n, &mut columns);
            let mut lane_values = vec![0f32; L::N];
            for (i, &c) in columns.iter().enumerate() {
                lanes.store(c, &mut lane_values);
                for (j, &value) in lane_values.iter().enumerate() {
                    assert_eq!(value, v[j * n + i], "n = {n}, element {i} of group {j}");
                }
            }
            assert_eq!(columns.len(), n);
            let mut levels = Columns::new();
            for &c in columns.iter() {
                levels.push(lanes.nearest_int(lanes.add(c, lanes.splat(256.0 * 3.0))));
            }
            let mut out = vec![0u8; L::N * n];
            lanes.scatter_groups(&levels, &mut out);
            let expected: Vec<u8> = (0..L::N * n).map(|k| k as u8).collect();
            assert_eq!(out, expected, "n = {n}: each lane's low byte, in group order");
        }
    }

    #[test]
    fn groups_gather_and_scatter_as_defined() {
        if let Some(lanes) = Avx2::new() {
            check(lanes);
            check(Twice(lanes));
        }
        if let Some(lanes) = Avx512::new() {
            check(lanes);
            check(Twice(lanes));
        }
    }
}
