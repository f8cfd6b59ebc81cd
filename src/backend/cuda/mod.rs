//! The CUDA backend: the kernels (`kernels/*.cu`, one table in
//! [`kernels`]), their host emulation ([`emulated`], what `cargo test`
//! runs), their compilation by NVRTC (PTX cached in the store), the probe
//! of this machine's devices, and the [`CudaBackend`] that runs slabs on a
//! [`Device`] — a GPU, or the emulation in tests.
//!
//! The kernels follow the scalar definitions operation for operation and
//! are compiled with no multiply-add contraction, so their bytes are the
//! CPU's. Nothing here loads a CUDA library before [`libraries`] has found
//! it: no driver or no NVRTC is a message, never a panic.

mod backend;
pub mod check;
mod device;
pub mod emulated;
pub mod kernels;
mod lanes;
mod libraries;
mod ptx;

use std::sync::{Arc, OnceLock};

pub use backend::CudaBackend;
pub use device::{Device, DeviceError, EmulatedDevice, GpuDevice, Job};
pub use libraries::LIB_DIRS_ENV;

use crate::backend::CpuBackend;
use crate::codecs::simd;
use crate::store::Store;

/// A device opened and checked: the kernels it runs as the CPU does, and
/// the names of those it does not.
#[derive(Clone)]
pub struct Opened {
    pub device: Arc<dyn Device>,
    pub distrusted: Arc<[&'static str]>,
}

impl Opened {
    /// The backend running this device's trusted kernels.
    pub fn backend(&self) -> CudaBackend {
        let cpu = CpuBackend::new(simd::level());
        CudaBackend::new(self.device.clone(), cpu).distrusting(self.distrusted.clone())
    }
}

/// The first CUDA device with the kernels loaded and checked against the
/// CPU, opened once a process (the first caller's store caches the PTX),
/// or why there is none.
pub fn open(store: Option<&dyn Store>) -> Result<Opened, String> {
    static OPENED: OnceLock<Result<Opened, String>> = OnceLock::new();
    OPENED
        .get_or_init(|| {
            let first = devices()?.into_iter().next().ok_or("no CUDA device")?;
            let ptx = ptx::for_capability(store, first.compute_capability)?;
            let device: Arc<dyn Device> = Arc::new(GpuDevice::open(first.ordinal, &ptx).map_err(|e| e.to_string())?);
            let distrusted = check::distrusted(&*device, &CpuBackend::new(simd::level()));
            for d in &distrusted {
                tracing::warn!(
                    "{}: kernel {} failed its check ({}); the CPU runs its type",
                    device.name(),
                    d.kernel,
                    d.why
                );
            }
            Ok(Opened { device, distrusted: distrusted.iter().map(|d| d.kernel).collect() })
        })
        .clone()
}

/// A CUDA device as `quantforge backends` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: (i32, i32),
}

/// This machine's CUDA devices, or why there are none.
pub fn devices() -> Result<Vec<DeviceInfo>, String> {
    libraries::driver()?;
    let failed = |e: cudarc::driver::DriverError| format!("the CUDA driver failed: {e}");
    let count = cudarc::driver::CudaContext::device_count().map_err(failed)?;
    if count <= 0 {
        return Err("the CUDA driver reports no devices".into());
    }
    (0..count as usize)
        .map(|ordinal| {
            let context = cudarc::driver::CudaContext::new(ordinal).map_err(failed)?;
            Ok(DeviceInfo {
                ordinal,
                name: context.name().map_err(failed)?,
                memory_bytes: context.total_mem().map_err(failed)? as u64,
                compute_capability: context.compute_capability().map_err(failed)?,
            })
        })
        .collect()
}

/// NVRTC's version, (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    libraries::nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is loaded (checked above); the call writes two ints.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    match status {
        cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS => Ok((major, minor)),
        other => Err(format!("nvrtcVersion failed: {other:?}")),
    }
}

/// Every kernel compiled to PTX for compute capability `major.minor`.
pub fn compile_ptx(compute_capability: (i32, i32)) -> Result<String, String> {
    libraries::nvrtc()?;
    let (major, minor) = compute_capability;
    let mut options: Vec<String> = kernels::NVRTC_OPTIONS.iter().map(|o| o.to_string()).collect();
    options.push(format!("--gpu-architecture=compute_{major}{minor}"));
    let compiled = cudarc::nvrtc::compile_ptx_with_opts(
        kernels::program(),
        cudarc::nvrtc::CompileOptions { options, name: Some("quantforge.cu".into()), ..Default::default() },
    );
    compiled.map(|ptx| ptx.to_src()).map_err(|e| format!("NVRTC could not compile the kernels: {e}"))
}
