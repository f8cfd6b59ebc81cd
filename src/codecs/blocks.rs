//! What the block families and their vector kernels share: the Q8_0 block
//! (the x86 kernel writes it), the 32-element block size, ggml's IQ4
//! non-linear levels, the search parameters and batch width of the scale
//! searches. A leaf of `codecs`: the scalar definitions (`legacy`, `iq4`,
//! `search`) and the x86 kernels (`x86`, `x86_search`) both stand on it, so
//! neither imports the other in a circle.

use bytemuck::{Pod, Zeroable};

use super::scalar::F16;
use crate::types::GgmlType;

pub const QK: usize = GgmlType::Q4_0.block_size() as usize;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub(super) d: F16,
    pub(super) qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_0>() as u64 == GgmlType::Q8_0.type_size());

/// `1 / d`, or 0 for a zero scale.
pub fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// ggml's `kvalues_iq4nl`.
pub const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Scales tried either side of the first guess; `quantize_iq4_nl` and
/// `quantize_iq4_xs` both pass 7, with or without importance weights (only
/// the `_ref` row functions pass -1, and ggml's chunk quantizer never calls those).
pub const NTRY: i32 = 7;

/// Groups whose largest magnitude is below this are all zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// Blocks the legacy and IQ4 weighted searches take at once: AVX-512's
/// lanes (AVX2 runs them as two steps of eight).
pub const BATCH: usize = 16;

/// A row's short last batch of 32-value blocks, padded with zero blocks to
/// a whole one: the batch kernels' lanes never mix, so the real blocks come
/// out as they would in a full batch.
pub fn zero_padded_batch(values: &[f32]) -> [f32; QK * BATCH] {
    let mut padded = [0.0f32; QK * BATCH];
    padded[..values.len()].copy_from_slice(values);
    padded
}

/// Parameters of the asymmetric (scale and minimum) searches.
#[derive(Clone, Copy)]
pub struct MinSearch {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Minimise absolute rather than squared error.
    pub use_mad: bool,
}
