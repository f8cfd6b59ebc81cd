//! The CUDA backend: each slab whose types have trusted kernels (see
//! [`super::check`]), whose buffers fit the device budget and — for `auto`
//! — that is large enough to gain runs on the device, the rest on the CPU
//! (the run report names which ran each tensor). Worker threads hand the
//! device slabs concurrently; its lanes run several at once.
//!
//! A device failure (out of memory, a failed launch) is a warning once;
//! from then on the CPU runs everything, writing the same bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::device::{Device, Job};
use super::kernels::{self, Direction, FIND_NON_FINITE, Kernel};
use crate::backend::{Backend, CpuBackend, Slab, SlabError};
use crate::codecs::{self, CodecError};

pub struct CudaBackend {
    device: Arc<dyn Device>,
    cpu: CpuBackend,
    /// Kernels that failed the device's check: their types run on the CPU.
    distrusted: Arc<[&'static str]>,
    /// Slabs of fewer values run on the CPU.
    min_values: u64,
    failed: AtomicBool,
}

impl CudaBackend {
    /// Every kernel trusted, every slab on the device that fits.
    pub fn new(device: Arc<dyn Device>, cpu: CpuBackend) -> CudaBackend {
        CudaBackend { device, cpu, distrusted: Arc::from([]), min_values: 0, failed: AtomicBool::new(false) }
    }

    /// Leaves the types of `kernels` (names) to the CPU.
    pub fn distrusting(self, kernels: Arc<[&'static str]>) -> CudaBackend {
        CudaBackend { distrusted: kernels, ..self }
    }

    /// Leaves slabs of fewer than `values` values to the CPU.
    pub fn from_values(self, values: u64) -> CudaBackend {
        CudaBackend { min_values: values, ..self }
    }

    fn trusts(&self, kernel: &Kernel) -> bool {
        !self.distrusted.contains(&kernel.name)
    }

    /// The device job that runs `slab`: its type's decoder and, when
    /// `encoding`, the target's encoder — with the slab's importance
    /// weights when it has them, which must be one row (the slab's rows one
    /// expert's) and an encoder that honours them — if its buffers fit the
    /// device's budget.
    fn job<'a>(&self, slab: &'a Slab<'a>, encoding: bool) -> Option<Job<'a>> {
        let job = self.kernels_for(slab, encoding)?;
        let out_len = match encoding {
            true => slab.to.row_size(slab.n_per_row as u64)? as usize * slab.rows(),
            false => 4 * job.n as usize,
        };
        (job.sizes(out_len).total() <= self.device.budget()).then_some(job)
    }

    fn kernels_for<'a>(&self, slab: &'a Slab<'a>, encoding: bool) -> Option<Job<'a>> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let n = (slab.rows() * slab.n_per_row) as u64;
        let decode = kernels::find(slab.from, Direction::Decode).filter(|k| self.trusts(k))?;
        if n < self.min_values {
            return None;
        }
        let mut job = Job { decode, encode: None, source: slab.source, n, importance: None };
        if !encoding {
            return Some(job);
        }
        let encode =
            kernels::find(slab.to, Direction::Encode).filter(|k| self.trusts(k) && self.trusts(&FIND_NON_FINITE))?;
        if slab.importance.is_some() {
            let experts = slab.rows_per_expert.max(1);
            let one_expert = slab.row_numbers.is_none()
                && slab.first_row / experts == (slab.first_row + slab.rows().max(1) - 1) / experts;
            if !encode.weighted || !one_expert {
                return None;
            }
            job.importance = Some(slab.weights_of(slab.first_row)?);
        }
        job.encode = Some(encode);
        Some(job)
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
        match self.job(slab, encoding) {
            Some(_) => self.device.name(),
            None => self.cpu.name(),
        }
    }

    fn decode(&self, slab: &Slab<'_>, out: &mut [f32]) -> Result<(), CodecError> {
        if let Some(job) = self.job(slab, false) {
            match self.device.convert(&job, bytemuck::cast_slice_mut(out)) {
                Ok(_) => return Ok(()),
                Err(e) => self.give_up(&e),
            }
        }
        self.cpu.decode(slab, out)
    }

    fn convert(&self, slab: &Slab<'_>, out: &mut [u8]) -> Result<(), SlabError> {
        if let Some(job) = self.job(slab, true) {
            match self.device.convert(&job, out) {
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
