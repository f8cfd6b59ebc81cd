//! Where the kernels run: a GPU through cudarc, or the host emulation —
//! one interface, so the backend's choices (which kernels, the CPU for the
//! rest, a non-finite value refused) are tested without a GPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use super::kernels::{FIND_NON_FINITE, KERNELS, Kernel, THREADS};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

impl From<cudarc::driver::DriverError> for DeviceError {
    fn from(e: cudarc::driver::DriverError) -> DeviceError {
        DeviceError(format!("the CUDA driver failed: {e}"))
    }
}

/// One conversion on a device: `n` values of `source` (whole blocks of
/// `decode`'s type) decoded and, with `encode`, encoded under `importance`
/// (one weight per column of rows of its length).
pub struct Job<'a> {
    pub decode: &'static Kernel,
    pub encode: Option<&'static Kernel>,
    pub source: &'a [u8],
    pub n: u64,
    pub importance: Option<&'a [f32]>,
}

pub trait Device: Send + Sync {
    /// `cuda:0 NVIDIA H200`, or `cuda-emulated`.
    fn name(&self) -> String;

    /// Runs `job` into `out`: the encoded bytes unless a decoded value is
    /// NaN or infinite (then returns the first's index and writes nothing),
    /// or without an encoder the f32 values.
    fn convert(&self, job: &Job<'_>, out: &mut [u8]) -> Result<Option<u64>, DeviceError>;

    /// Seconds one run of `decode` over `n` values of `source` takes on the
    /// device, the data already there (`quantforge backends --bench`).
    fn time_decode(&self, _decode: &Kernel, _source: &[u8], _n: u64) -> Result<f64, DeviceError> {
        Err(DeviceError(format!("{} does not time kernels", self.name())))
    }
}

/// The kernels on the host (`emulated`), for tests.
pub struct EmulatedDevice;

impl Device for EmulatedDevice {
    fn name(&self) -> String {
        "cuda-emulated".into()
    }

    fn convert(&self, job: &Job<'_>, out: &mut [u8]) -> Result<Option<u64>, DeviceError> {
        let Some(encode) = job.encode else {
            super::emulated::decode(job.decode.ggml_type, job.source, bytemuck::cast_slice_mut(out));
            return Ok(None);
        };
        let mut values = vec![0f32; job.n as usize];
        super::emulated::decode(job.decode.ggml_type, job.source, &mut values);
        if let Some(first) = super::emulated::find_non_finite(&values) {
            return Ok(Some(first as u64));
        }
        super::emulated::encode(encode.ggml_type, &values, job.importance, out);
        Ok(None)
    }
}

/// A GPU: the kernels loaded from PTX into one context, run on one stream
/// a conversion at a time.
pub struct GpuDevice {
    name: String,
    stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    busy: Mutex<()>,
}

impl GpuDevice {
    /// Device `ordinal` with the kernels of `ptx` loaded.
    pub fn open(ordinal: usize, ptx: &str) -> Result<GpuDevice, DeviceError> {
        let context = CudaContext::new(ordinal)?;
        let module = context.load_module(cudarc::nvrtc::Ptx::from_src(ptx))?;
        let mut functions = HashMap::new();
        for kernel in KERNELS.iter().chain([&FIND_NON_FINITE]) {
            functions.insert(kernel.name, module.load_function(kernel.name)?);
        }
        Ok(GpuDevice {
            name: format!("cuda:{ordinal} {}", context.name()?),
            stream: context.default_stream(),
            functions,
            busy: Mutex::new(()),
        })
    }

    fn launch<S: DeviceRepr, D: DeviceRepr>(
        &self,
        kernel: &Kernel,
        items: u64,
        source: &CudaSlice<S>,
        destination: &mut CudaSlice<D>,
    ) -> Result<(), DeviceError> {
        self.launch_weighted(kernel, items, source, destination, None)
    }

    /// [`Self::launch`] with a row of importance weights on the device.
    fn launch_weighted<S: DeviceRepr, D: DeviceRepr>(
        &self,
        kernel: &Kernel,
        items: u64,
        source: &CudaSlice<S>,
        destination: &mut CudaSlice<D>,
        importance: Option<&CudaSlice<f32>>,
    ) -> Result<(), DeviceError> {
        let function =
            self.functions.get(kernel.name).ok_or_else(|| DeviceError(format!("no kernel {}", kernel.name)))?;
        let grid = u32::try_from(kernel.grid(items))
            .map_err(|_| DeviceError(format!("{items} items are more than one launch of {} covers", kernel.name)))?;
        if grid == 0 {
            return Ok(());
        }
        let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let (null, n_per_row) = (0u64, importance.map_or(1, |w| w.len() as u64));
        let mut launch = self.stream.launch_builder(function);
        launch.arg(source).arg(destination).arg(&items);
        match importance {
            Some(weights) => launch.arg(weights),
            None => launch.arg(&null),
        };
        launch.arg(&n_per_row);
        // SAFETY: every kernel takes (source, destination, item count) and
        // reads and writes only the items' bytes, which the callers size.
        unsafe { launch.launch(config) }?;
        Ok(())
    }
}

impl Device for GpuDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn convert(&self, job: &Job<'_>, out: &mut [u8]) -> Result<Option<u64>, DeviceError> {
        let _one_at_a_time = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let (decode, encode, n) = (job.decode, job.encode, job.n);
        let stream = &self.stream;
        let source = stream.clone_htod(job.source)?;
        let mut values = stream.alloc_zeros::<f32>(n as usize)?;
        self.launch(decode, decode.items(n), &source, &mut values)?;
        let Some(encode) = encode else {
            stream.memcpy_dtoh(&values, bytemuck::cast_slice_mut::<u8, f32>(out))?;
            stream.synchronize()?;
            return Ok(None);
        };
        let mut first = stream.clone_htod(&[n])?;
        self.launch(&FIND_NON_FINITE, n, &values, &mut first)?;
        let first = stream.clone_dtoh(&first)?;
        stream.synchronize()?;
        if first[0] < n {
            return Ok(Some(first[0]));
        }
        let importance = match job.importance {
            Some(weights) => Some(stream.clone_htod(weights)?),
            None => None,
        };
        let mut encoded = stream.alloc_zeros::<u8>(out.len())?;
        self.launch_weighted(encode, encode.items(n), &values, &mut encoded, importance.as_ref())?;
        stream.memcpy_dtoh(&encoded, out)?;
        stream.synchronize()?;
        Ok(None)
    }

    fn time_decode(&self, decode: &Kernel, source: &[u8], n: u64) -> Result<f64, DeviceError> {
        const ROUNDS: u32 = 20;
        let _one_at_a_time = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let stream = &self.stream;
        let source = stream.clone_htod(source)?;
        let mut values = stream.alloc_zeros::<f32>(n as usize)?;
        self.launch(decode, decode.items(n), &source, &mut values)?;
        stream.synchronize()?;
        let start = std::time::Instant::now();
        for _ in 0..ROUNDS {
            self.launch(decode, decode.items(n), &source, &mut values)?;
        }
        stream.synchronize()?;
        Ok(start.elapsed().as_secs_f64() / f64::from(ROUNDS))
    }
}
