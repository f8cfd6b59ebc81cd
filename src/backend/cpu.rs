//! The CPU backend: the codecs at one vector level, rows in parallel on the
//! caller's rayon pool (the engine's, sized by `--jobs`).

use rayon::prelude::*;

use super::{Backend, Slab, SlabError};
use crate::codecs::{self, CodecError, simd::Level};
use crate::types::GgmlType;

pub struct CpuBackend {
    level: Level,
}

impl CpuBackend {
    /// A backend at `level`, which the machine must support.
    pub fn new(level: Level) -> CpuBackend {
        CpuBackend { level }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu-{}", self.level.name())
    }

    fn decode(&self, slab: &Slab<'_>, out: &mut [f32]) -> Result<(), CodecError> {
        let row_in = slab.from.row_size(slab.n_per_row as u64).unwrap_or(0) as usize;
        out.par_chunks_mut(slab.n_per_row.max(1))
            .zip(slab.source.par_chunks(row_in.max(1)))
            .try_for_each(|(dst, src)| codecs::dequantize_row_at(self.level, slab.from, src, dst))
    }

    fn convert(&self, slab: &Slab<'_>, out: &mut [u8]) -> Result<(), SlabError> {
        let row_in = slab.from.row_size(slab.n_per_row as u64).unwrap_or(0) as usize;
        let row_out = slab.to.row_size(slab.n_per_row as u64).unwrap_or(0) as usize;
        out.par_chunks_mut(row_out.max(1)).zip(slab.source.par_chunks(row_in.max(1))).enumerate().try_for_each_init(
            || vec![0f32; slab.n_per_row],
            |values, (r, (dst, src))| {
                let row = slab.row_number(r);
                codecs::dequantize_row_at(self.level, slab.from, src, values)?;
                // Every value read without an early exit, so the check vectorizes;
                // only a failing row is searched for its value.
                if codecs::all_finite(GgmlType::F32, bytemuck::cast_slice(values)) != Some(true)
                    && let Some(value) = values.iter().copied().find(|v| !v.is_finite())
                {
                    return Err(SlabError::NonFinite { row, value });
                }
                codecs::quantize_row_at(self.level, slab.to, values, slab.weights_of(row), dst)?;
                Ok(())
            },
        )
    }
}
