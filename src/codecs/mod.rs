//! Codecs: every ggml type decoded to f32, and the quantizers encoded
//! byte-identically to ggml's reference implementations.
//!
//! One file per block family; blocks are `#[repr(C)]` structs of alignment 1
//! whose sizes are asserted against the type table at compile time, cast from
//! bytes with bytemuck. The scalar code here is the definition of the bytes:
//! it follows ggml's C operation by operation, without fused multiply-add
//! (Rust never contracts `a*b + c`), rounding with [`scalar::nearest_int`].
//!
//! Invariants: no I/O; rows only (callers split tensors into rows); a row's
//! output depends on that row (and its importance weights) alone.

pub(crate) mod blocks;
mod float;
pub(crate) mod fp4;
mod iq1_encode;
mod iq4;
mod iq_grid;
mod iq_grid_encode;
mod iq_lattice;
pub(crate) mod iq_tables;
mod kquants;
mod legacy;
mod lowbit;
pub mod scalar;
mod search;
pub mod simd;
mod ternary;
mod x86;
mod x86_lanes;
mod x86_search;

use crate::types::GgmlType;

pub use float::all_finite;

/// Version of the bytes the codecs produce. Part of every derived tensor's
/// cache key: bump it whenever any codec's output changes, so cached results
/// of the old code are not reused.
pub const CODEC_VERSION: u32 = 1;

/// The llama.cpp whose bytes the codecs and presets reproduce: the source
/// `scripts/fetch-references.sh` fetches (the tests compare against its tools).
pub const REFERENCE_LLAMA_CPP: &str = "llama.cpp vendored by llama-cpp-python 0.3.36 (ggml 0.25.3)";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("cannot {op} {ty}: not supported")]
    Unsupported { ty: GgmlType, op: &'static str },
    #[error("a row of {n_elements} elements is not a whole number of {ty} blocks ({block} elements)")]
    PartialBlock { ty: GgmlType, n_elements: usize, block: u64 },
    #[error("{ty} needs an importance matrix: its search weighs every value by one")]
    NeedsImportance { ty: GgmlType },
    #[error("{ty}: {what} holds {got} bytes or values, expected {expected}")]
    Length { ty: GgmlType, what: &'static str, got: usize, expected: usize },
}

/// Bytes of `n_elements` of `ty`, checking the row is whole blocks.
fn encoded_len(ty: GgmlType, n_elements: usize) -> Result<usize, CodecError> {
    ty.row_size(n_elements as u64).map(|n| n as usize).ok_or(CodecError::PartialBlock {
        ty,
        n_elements,
        block: ty.block_size(),
    })
}

fn check_len(ty: GgmlType, what: &'static str, got: usize, expected: usize) -> Result<(), CodecError> {
    if got == expected { Ok(()) } else { Err(CodecError::Length { ty, what, got, expected }) }
}

/// One core's time to encode a weight as `ty`, in nanoseconds: what work
/// estimates (a unit's size, its Slurm request) are made of. Measured with
/// `quantize --pure models/wide-f16.gguf OUT TYPE 1` (617M weights, one
/// thread, AVX-512, input read and output written included; see
/// docs/SCALE.md); a type without its own measurement takes its family's.
pub fn encode_ns_per_weight(ty: GgmlType) -> f64 {
    use GgmlType::*;
    match ty {
        F32 | F64 | I8 | I16 | I32 | I64 | BF16 => 4.0,
        F16 => 6.5,
        Q8_0 | Q8_1 | Q8_K => 6.2,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q1_0 | Q2_0 => 8.4,
        TQ1_0 | TQ2_0 => 11.0,
        MXFP4 | NVFP4 => 12.0,
        Q6_K => 18.0,
        Q2_K | Q3_K | Q4_K | Q5_K => 29.0,
        IQ4_NL | IQ4_XS => 72.0,
        // Not measured yet: as the slowest measured.
        IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S => 72.0,
    }
}

/// Types [`dequantize_row`] decodes.
pub fn can_dequantize(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64)
}

/// Types [`quantize_row`] encodes.
pub fn can_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
            | TQ1_0
            | TQ2_0
            | MXFP4
            | Q1_0
            | Q2_0
    )
}

/// Decodes one row (or any whole number of blocks) of `ty` into `dst`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), CodecError> {
    dequantize_row_at(simd::level(), ty, src, dst)
}

/// [`dequantize_row`] compiled for the instruction set of `level` (or lower,
/// where the machine lacks it). Decoding is elementwise (no sums to order),
/// so the compiler's vectorization of the one scalar definition is exact;
/// the differential tests check it anyway.
pub fn dequantize_row_at(level: simd::Level, ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), CodecError> {
    check_len(ty, "the encoded row", src.len(), encoded_len(ty, dst.len())?)?;
    #[cfg(target_arch = "x86_64")]
    {
        use simd::Level;
        if level >= Level::Avx512 && Level::Avx512.is_supported() {
            // SAFETY: AVX-512 F/BW is present (checked just above), and F16C and AVX2 with it.
            return unsafe { decode_avx512(ty, src, dst) };
        }
        if level >= Level::Avx2 && Level::Avx2.is_supported() {
            // SAFETY: AVX2 is present (checked just above), and F16C with it.
            return unsafe { decode_avx2(ty, src, dst) };
        }
    }
    decode(simd::Level::Scalar, ty, src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn decode_avx2(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), CodecError> {
    decode(simd::Level::Avx2, ty, src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
unsafe fn decode_avx512(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), CodecError> {
    decode(simd::Level::Avx512, ty, src, dst)
}

/// The decoders, inlined into each level's wrapper so that each is compiled
/// (and vectorized) for that level's instructions; `level` is one the
/// machine has.
#[inline(always)]
fn decode(level: simd::Level, ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), CodecError> {
    use GgmlType::*;
    match ty {
        F32 => float::decode_f32(src, dst),
        F16 => float::decode_f16(level, src, dst),
        BF16 => float::decode_bf16(src, dst),
        F64 => float::decode_f64(src, dst),
        Q4_0 => legacy::dequantize_q4_0(bytemuck::cast_slice(src), dst),
        Q4_1 => legacy::dequantize_q4_1(bytemuck::cast_slice(src), dst),
        Q5_0 => legacy::dequantize_q5_0(bytemuck::cast_slice(src), dst),
        Q5_1 => legacy::dequantize_q5_1(bytemuck::cast_slice(src), dst),
        Q8_0 => legacy::dequantize_q8_0(bytemuck::cast_slice(src), dst),
        Q8_1 => legacy::dequantize_q8_1(bytemuck::cast_slice(src), dst),
        Q2_K => kquants::dequantize_q2_k(bytemuck::cast_slice(src), dst),
        Q3_K => kquants::dequantize_q3_k(bytemuck::cast_slice(src), dst),
        Q4_K => kquants::dequantize_q4_k(bytemuck::cast_slice(src), dst),
        Q5_K => kquants::dequantize_q5_k(bytemuck::cast_slice(src), dst),
        Q6_K => kquants::dequantize_q6_k(bytemuck::cast_slice(src), dst),
        Q8_K => kquants::dequantize_q8_k(bytemuck::cast_slice(src), dst),
        MXFP4 => fp4::dequantize_mxfp4(level, bytemuck::cast_slice(src), dst),
        NVFP4 => fp4::dequantize_nvfp4(bytemuck::cast_slice(src), dst),
        IQ4_NL => iq4::dequantize_iq4_nl(level, src, dst),
        IQ4_XS => iq4::dequantize_iq4_xs(level, src, dst),
        TQ1_0 => ternary::dequantize_tq1_0(src, dst),
        TQ2_0 => ternary::dequantize_tq2_0(src, dst),
        Q1_0 => lowbit::dequantize_q1_0(src, dst),
        Q2_0 => lowbit::dequantize_q2_0(src, dst),
        IQ2_XXS => iq_grid::dequantize_iq2_xxs(src, dst),
        IQ2_XS => iq_grid::dequantize_iq2_xs(src, dst),
        IQ2_S => iq_grid::dequantize_iq2_s(src, dst),
        IQ3_XXS => iq_grid::dequantize_iq3_xxs(src, dst),
        IQ3_S => iq_grid::dequantize_iq3_s(src, dst),
        IQ1_S => iq_grid::dequantize_iq1_s(src, dst),
        IQ1_M => iq_grid::dequantize_iq1_m(src, dst),
        _ => return Err(CodecError::Unsupported { ty, op: "dequantize" }),
    }
    Ok(())
}

/// Encodes one row of `src` as `ty` into `dst`, as ggml's `quantize_chunk`
/// does for a row: with `importance` (one weight per column, from an
/// importance matrix) the types that support it run their weighted search.
pub fn quantize_row(ty: GgmlType, src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) -> Result<(), CodecError> {
    quantize_row_at(simd::level(), ty, src, importance, dst)
}

/// [`quantize_row`] with the vector kernels of `level` (or lower, where the
/// machine lacks it), and the rest of the scalar code compiled for that
/// level's instructions: every level writes the same bytes, which the
/// differential tests check.
pub fn quantize_row_at(
    level: simd::Level,
    ty: GgmlType,
    src: &[f32],
    importance: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), CodecError> {
    check_len(ty, "the output row", dst.len(), encoded_len(ty, src.len())?)?;
    if let Some(weights) = importance {
        check_len(ty, "the importance row", weights.len(), src.len())?;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use simd::Level;
        if level >= Level::Avx512 && Level::Avx512.is_supported() {
            // SAFETY: AVX-512 F/BW is present (checked just above), and F16C and AVX2 with it.
            return unsafe { encode_avx512(ty, src, importance, dst) };
        }
        if level >= Level::Avx2 && Level::Avx2.is_supported() {
            // SAFETY: AVX2 is present (checked just above), and F16C with it.
            return unsafe { encode_avx2(ty, src, importance, dst) };
        }
    }
    encode(simd::Level::Scalar, ty, src, importance, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn encode_avx2(ty: GgmlType, src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) -> Result<(), CodecError> {
    encode(simd::Level::Avx2, ty, src, importance, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
unsafe fn encode_avx512(
    ty: GgmlType,
    src: &[f32],
    importance: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), CodecError> {
    encode(simd::Level::Avx512, ty, src, importance, dst)
}

/// The encoders, inlined into each level's wrapper like [`decode`]; the
/// compiler never reorders f32 arithmetic, so its vectorization of the
/// scalar code is exact too.
#[inline(always)]
fn encode(
    level: simd::Level,
    ty: GgmlType,
    src: &[f32],
    importance: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), CodecError> {
    use GgmlType::*;
    match ty {
        F32 => float::encode_f32(src, dst),
        F16 => float::encode_f16(src, dst),
        BF16 => float::encode_bf16(src, dst),
        Q4_0 => legacy::quantize_q4_0(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q4_1 => legacy::quantize_q4_1(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q5_0 => legacy::quantize_q5_0(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q5_1 => legacy::quantize_q5_1(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q8_0 => legacy::quantize_q8_0(level, src, bytemuck::cast_slice_mut(dst)),
        Q2_K => kquants::quantize_q2_k(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q3_K => kquants::quantize_q3_k(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q4_K => kquants::quantize_q4_k(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q5_K => kquants::quantize_q5_k(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q6_K => kquants::quantize_q6_k(level, src, importance, bytemuck::cast_slice_mut(dst)),
        Q8_K => kquants::quantize_q8_k(src, bytemuck::cast_slice_mut(dst)),
        MXFP4 => fp4::quantize_mxfp4(src, bytemuck::cast_slice_mut(dst)),
        IQ4_NL => iq4::quantize_iq4_nl(level, src, importance, dst),
        IQ4_XS => iq4::quantize_iq4_xs(level, src, importance, dst),
        TQ1_0 => ternary::quantize_tq1_0(src, dst),
        TQ2_0 => ternary::quantize_tq2_0(src, dst),
        Q1_0 => lowbit::quantize_q1_0(src, dst),
        Q2_0 => lowbit::quantize_q2_0(src, dst),
        IQ2_XXS => iq_grid_encode::quantize_iq2_xxs(level, src, importance, bytemuck::cast_slice_mut(dst))?,
        IQ2_XS => iq_grid_encode::quantize_iq2_xs(level, src, importance, bytemuck::cast_slice_mut(dst))?,
        IQ2_S => iq_grid_encode::quantize_iq2_s(level, src, importance, bytemuck::cast_slice_mut(dst)),
        IQ3_XXS => iq_grid_encode::quantize_iq3_xxs(level, src, importance, bytemuck::cast_slice_mut(dst)),
        IQ3_S => iq_grid_encode::quantize_iq3_s(level, src, importance, bytemuck::cast_slice_mut(dst)),
        IQ1_S => iq1_encode::quantize_iq1_s(src, importance, bytemuck::cast_slice_mut(dst))?,
        IQ1_M => iq1_encode::quantize_iq1_m(src, importance, bytemuck::cast_slice_mut(dst)),
        _ => return Err(CodecError::Unsupported { ty, op: "quantize to" }),
    }
    Ok(())
}
