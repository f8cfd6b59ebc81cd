//! The CUDA backend: each slab whose types have kernels runs on the device,
//! the rest on the CPU (the run report names which ran each tensor).
//!
//! A device failure (out of memory, a failed launch) is a warning once;
//! from then on the CPU runs everything, writing the same bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::device::Device;
use super::kernels::{self, Direction, Kernel};
use crate::backend::{Backend, CpuBackend, Slab, SlabError};
use crate::codecs::{self, CodecError};

pub struct CudaBackend {
    device: Arc<dyn Device>,
    cpu: CpuBackend,
    failed: AtomicBool,
}

impl CudaBackend {
    pub fn new(device: Arc<dyn Device>, cpu: CpuBackend) -> CudaBackend {
        CudaBackend { device, cpu, failed: AtomicBool::new(false) }
    }

    /// The kernels that run `slab` on the device: its type's decoder and,
    /// when `encoding`, the target's encoder (importance weights: none yet).
    fn kernels(&self, slab: &Slab<'_>, encoding: bool) -> Option<(&'static Kernel, Option<&'static Kernel>)> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let decode = kernels::find(slab.from, Direction::Decode)?;
        if !encoding {
            return Some((decode, None));
        }
        if slab.importance.is_some() {
            return None;
        }
        Some((decode, Some(kernels::find(slab.to, Direction::Encode)?)))
    }

    fn give_up(&self, error: &super::device::DeviceError) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            tracing::warn!("{}: {error}; the CPU runs the rest of this run", self.device.name());
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.device.name()
    }

    fn ran_on(&self, slab: &Slab<'_>, encoding: bool) -> String {
        match self.kernels(slab, encoding) {
            Some(_) => self.device.name(),
            None => self.cpu.name(),
        }
    }

    fn decode(&self, slab: &Slab<'_>, out: &mut [f32]) -> Result<(), CodecError> {
        if let Some((decode, None)) = self.kernels(slab, false) {
            match self.device.convert(decode, None, slab.source, out.len() as u64, bytemuck::cast_slice_mut(out)) {
                Ok(_) => return Ok(()),
                Err(e) => self.give_up(&e),
            }
        }
        self.cpu.decode(slab, out)
    }

    fn convert(&self, slab: &Slab<'_>, out: &mut [u8]) -> Result<(), SlabError> {
        if let Some((decode, encode)) = self.kernels(slab, true) {
            let n = (slab.rows() * slab.n_per_row) as u64;
            match self.device.convert(decode, encode, slab.source, n, out) {
                Ok(None) => return Ok(()),
                Ok(Some(first)) => return Err(non_finite(slab, first as usize)),
                Err(e) => self.give_up(&e),
            }
        }
        self.cpu.convert(slab, out)
    }
}

/// The error for the slab's first non-finite value, at element `first`.
fn non_finite(slab: &Slab<'_>, first: usize) -> SlabError {
    let (r, at) = (first / slab.n_per_row.max(1), first % slab.n_per_row.max(1));
    let row_bytes = slab.from.row_size(slab.n_per_row as u64).unwrap_or(0) as usize;
    let mut values = vec![0f32; slab.n_per_row];
    let value = match codecs::dequantize_row_at(
        codecs::simd::Level::Scalar,
        slab.from,
        &slab.source[r * row_bytes..][..row_bytes],
        &mut values,
    ) {
        Ok(()) => values[at],
        Err(e) => return SlabError::Codec(e),
    };
    SlabError::NonFinite { row: slab.row_number(r), value }
}
