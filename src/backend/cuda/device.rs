//! Where the kernels run: a GPU through cudarc, or the host emulation —
//! one interface, so the backend's choices (which kernels, the CPU for the
//! rest, a non-finite value refused, the memory budget) are tested without
//! a GPU. Both run slabs on lanes ([`LanePool`]): several at once, each with
//! its own buffers, all within the device budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};

use super::kernels::{FIND_NON_FINITE, KERNELS, Kernel, THREADS};
use super::lanes::{LaneBuffers, LanePool, Sizes};

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

impl Job<'_> {
    /// The device buffers the job needs, writing `out_len` bytes.
    pub fn sizes(&self, out_len: usize) -> Sizes {
        Sizes {
            source: self.source.len() as u64,
            values: 4 * self.n,
            encoded: if self.encode.is_some() { out_len as u64 } else { 0 },
            weights: self.importance.map_or(0, |w| 4 * w.len() as u64),
        }
    }
}

impl From<super::lanes::LaneError> for DeviceError {
    fn from(e: super::lanes::LaneError) -> DeviceError {
        DeviceError(e.to_string())
    }
}

pub trait Device: Send + Sync {
    /// `cuda:0 NVIDIA H200`, or `cuda-emulated`.
    fn name(&self) -> String;

    /// Device bytes all slabs in flight may hold together; a slab needing
    /// more runs on the CPU.
    fn budget(&self) -> u64;

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

/// The kernels on the host (`emulated`), for tests: lanes whose buffers
/// are host memory, accounted as a GPU's are.
pub struct EmulatedDevice {
    lanes: LanePool<HostLane>,
}

impl EmulatedDevice {
    /// `lanes` lanes sharing `budget` bytes.
    pub fn new(lanes: usize, budget: u64) -> EmulatedDevice {
        EmulatedDevice { lanes: LanePool::new((0..lanes.max(1)).map(|_| HostLane::default()).collect(), budget) }
    }
}

/// An emulated lane's buffer of decoded values (the rest it reads and
/// writes in place), sized as a GPU lane's would be.
#[derive(Default)]
struct HostLane {
    values: Vec<f32>,
    sizes: Sizes,
}

impl LaneBuffers for HostLane {
    fn sizes(&self) -> Sizes {
        self.sizes
    }

    fn grow(&mut self, to: &Sizes) -> Result<(), String> {
        self.values.resize((to.values / 4) as usize, 0.0);
        self.sizes = *to;
        Ok(())
    }

    fn release(&mut self) {
        *self = HostLane::default();
    }
}

impl Device for EmulatedDevice {
    fn name(&self) -> String {
        "cuda-emulated".into()
    }

    fn budget(&self) -> u64 {
        self.lanes.budget()
    }

    fn convert(&self, job: &Job<'_>, out: &mut [u8]) -> Result<Option<u64>, DeviceError> {
        let mut lane = self.lanes.take(&job.sizes(out.len()))?;
        let Some(encode) = job.encode else {
            super::emulated::decode(job.decode.ggml_type, job.source, bytemuck::cast_slice_mut(out));
            return Ok(None);
        };
        let values = &mut lane.values[..job.n as usize];
        super::emulated::decode(job.decode.ggml_type, job.source, values);
        if let Some(first) = super::emulated::find_non_finite(values) {
            return Ok(Some(first as u64));
        }
        super::emulated::encode(encode.ggml_type, values, job.importance, out);
        Ok(None)
    }
}

/// A GPU: the kernels loaded from PTX into one context, run on lanes of
/// their own streams.
pub struct GpuDevice {
    name: String,
    functions: HashMap<&'static str, CudaFunction>,
    lanes: LanePool<GpuLane>,
    /// `time_decode` runs alone on its own stream.
    bench: Mutex<Arc<CudaStream>>,
}

/// A GPU lane: its stream; pinned host memory staging a slab's bytes up
/// and its results down, so the copies run while the CPU goes on (and other
/// lanes' kernels run); and the device buffers, grown to its largest slab.
struct GpuLane {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    buffers: Option<GpuBuffers>,
    sizes: Sizes,
}

struct GpuBuffers {
    up: PinnedHostSlice<u8>,
    down: PinnedHostSlice<u8>,
    source: CudaSlice<u8>,
    values: CudaSlice<f32>,
    encoded: CudaSlice<u8>,
    weights: CudaSlice<u8>,
    /// The non-finite search's index: the value count going in, the first
    /// NaN or infinity's index (or still the count) coming out.
    first: CudaSlice<u8>,
}

// Where a job's bytes lie in a lane's pinned buffers, so that every copy is
// from or to pinned memory and none makes the driver wait: going up, the
// slab's bytes, then (8-aligned) the search's starting index, then the
// importance row; coming down, the encoded bytes, then (8-aligned) the
// index found — or the decoded values alone.

fn index_up_at(sizes: &Sizes) -> usize {
    sizes.source.next_multiple_of(8) as usize
}

fn up_len(sizes: &Sizes) -> usize {
    index_up_at(sizes) + 8 + sizes.weights as usize
}

fn index_down_at(sizes: &Sizes) -> usize {
    sizes.encoded.next_multiple_of(8) as usize
}

fn down_len(sizes: &Sizes) -> usize {
    (index_down_at(sizes) + 8).max(sizes.values as usize)
}

impl GpuLane {
    fn allocate(&self, to: &Sizes) -> Result<GpuBuffers, cudarc::driver::DriverError> {
        let stream = &self.stream;
        // At least one element each: a zero-length allocation is no buffer.
        let bytes = |n: u64| (n as usize).max(1);
        // SAFETY: pinned memory starts uninitialized; every byte a copy
        // reads is written first (the slab's bytes up, the results down).
        // Upload staging is write-combined (the CPU only writes it); the
        // download staging is not, as the CPU reads it.
        let (up, down) = unsafe {
            (self.context.alloc_pinned::<u8>(up_len(to))?, self.context.alloc_pinned_with_flags::<u8>(down_len(to), 0)?)
        };
        Ok(GpuBuffers {
            up,
            down,
            source: stream.alloc_zeros::<u8>(bytes(to.source))?,
            values: stream.alloc_zeros::<f32>(bytes(to.values / 4))?,
            encoded: stream.alloc_zeros::<u8>(bytes(to.encoded))?,
            weights: stream.alloc_zeros::<u8>(bytes(to.weights))?,
            first: stream.alloc_zeros::<u8>(8)?,
        })
    }
}

impl LaneBuffers for GpuLane {
    fn sizes(&self) -> Sizes {
        self.sizes
    }

    fn grow(&mut self, to: &Sizes) -> Result<(), String> {
        if self.buffers.is_some() && self.sizes.max(to) == self.sizes {
            return Ok(());
        }
        self.release();
        self.buffers = Some(self.allocate(to).map_err(|e| format!("the CUDA driver failed: {e}"))?);
        self.sizes = *to;
        Ok(())
    }

    fn release(&mut self) {
        self.buffers = None;
        self.sizes = Sizes::default();
    }
}

/// Lanes a GPU runs at once (`QUANTFORGE_CUDA_LANES`, default 4).
pub const LANES_ENV: &str = "QUANTFORGE_CUDA_LANES";
/// Device memory the lanes may hold together (`QUANTFORGE_CUDA_MEMORY`,
/// a size such as `8GiB`; default half the device's memory).
pub const MEMORY_ENV: &str = "QUANTFORGE_CUDA_MEMORY";

impl GpuDevice {
    /// Device `ordinal` with the kernels of `ptx` loaded, and its lanes.
    pub fn open(ordinal: usize, ptx: &str) -> Result<GpuDevice, DeviceError> {
        let context = CudaContext::new(ordinal)?;
        let module = context.load_module(cudarc::nvrtc::Ptx::from_src(ptx))?;
        let mut functions = HashMap::new();
        for kernel in KERNELS.iter().chain([&FIND_NON_FINITE]) {
            functions.insert(kernel.name, module.load_function(kernel.name)?);
        }
        let setting = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let lanes = match setting(LANES_ENV) {
            Some(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| DeviceError(format!("{LANES_ENV}=`{v}` is not a count of lanes (1 or more)")))?,
            None => 4,
        };
        let budget = match setting(MEMORY_ENV) {
            Some(v) => crate::formats::parse_size(&v).map_err(|e| DeviceError(format!("{MEMORY_ENV}: {e}")))?,
            None => context.total_mem()? as u64 / 2,
        };
        let lanes = (0..lanes)
            .map(|_| {
                Ok(GpuLane {
                    context: context.clone(),
                    stream: context.new_stream()?,
                    buffers: None,
                    sizes: Sizes::default(),
                })
            })
            .collect::<Result<Vec<_>, DeviceError>>()?;
        Ok(GpuDevice {
            name: format!("cuda:{ordinal} {}", context.name()?),
            functions,
            lanes: LanePool::new(lanes, budget),
            bench: Mutex::new(context.new_stream()?),
        })
    }

    /// Launches `kernel` over `items` items on `stream`, with a row of
    /// importance weights (`n_per_row` of them) on the device or none.
    #[allow(clippy::too_many_arguments)]
    fn launch<S: DeviceRepr, D: DeviceRepr>(
        &self,
        stream: &Arc<CudaStream>,
        kernel: &Kernel,
        items: u64,
        source: &CudaSlice<S>,
        destination: &mut CudaSlice<D>,
        importance: Option<(&CudaSlice<u8>, u64)>,
    ) -> Result<(), DeviceError> {
        let function =
            self.functions.get(kernel.name).ok_or_else(|| DeviceError(format!("no kernel {}", kernel.name)))?;
        let grid = u32::try_from(kernel.grid(items))
            .map_err(|_| DeviceError(format!("{items} items are more than one launch of {} covers", kernel.name)))?;
        if grid == 0 {
            return Ok(());
        }
        let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let (null, n_per_row) = (0u64, importance.map_or(1, |(_, n)| n));
        let mut launch = stream.launch_builder(function);
        launch.arg(source).arg(destination).arg(&items);
        match importance {
            Some((weights, _)) => launch.arg(weights),
            None => launch.arg(&null),
        };
        launch.arg(&n_per_row);
        // SAFETY: every kernel takes (source, destination, item count,
        // weights, weights per row) and reads and writes only the items'
        // bytes, which the callers size.
        unsafe { launch.launch(config) }?;
        Ok(())
    }

    /// Queues `job` on `stream`: its bytes (then the search's index and the
    /// importance row) staged in the lane's pinned memory and copied up,
    /// the kernels, the results copied down into pinned memory.
    fn queue(
        &self,
        stream: &Arc<CudaStream>,
        b: &mut GpuBuffers,
        job: &Job<'_>,
        sizes: &Sizes,
        out_len: usize,
    ) -> Result<(), DeviceError> {
        let (decode, n) = (job.decode, job.n);
        let up = b.up.as_mut_slice()?;
        let source_len = job.source.len();
        up[..source_len].copy_from_slice(job.source);
        stream.memcpy_htod(&up[..source_len], &mut b.source)?;
        self.launch(stream, decode, decode.items(n), &b.source, &mut b.values, None)?;
        let down = b.down.as_mut_slice()?;
        let Some(encode) = job.encode else {
            let values = bytemuck::cast_slice_mut::<u8, f32>(&mut down[..out_len]);
            stream.memcpy_dtoh(&b.values.slice(..n as usize), values)?;
            return Ok(());
        };
        let index = index_up_at(sizes);
        up[index..index + 8].copy_from_slice(&n.to_ne_bytes());
        stream.memcpy_htod(&up[index..index + 8], &mut b.first)?;
        self.launch(stream, &FIND_NON_FINITE, n, &b.values, &mut b.first, None)?;
        let weights = match job.importance {
            Some(row) => {
                let staged = &mut up[index + 8..][..4 * row.len()];
                staged.copy_from_slice(bytemuck::cast_slice(row));
                stream.memcpy_htod(&*staged, &mut b.weights)?;
                Some((&b.weights, row.len() as u64))
            }
            None => None,
        };
        self.launch(stream, encode, encode.items(n), &b.values, &mut b.encoded, weights)?;
        let (encoded, found) = down.split_at_mut(index_down_at(sizes));
        stream.memcpy_dtoh(&b.encoded.slice(..out_len), &mut encoded[..out_len])?;
        stream.memcpy_dtoh(&b.first, &mut found[..8])?;
        Ok(())
    }
}

impl Device for GpuDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn budget(&self) -> u64 {
        self.lanes.budget()
    }

    /// On a free lane: the slab's bytes staged in pinned memory and copied
    /// up, decoded, searched for a non-finite value, encoded, the results
    /// copied down — all queued on the lane's stream, one wait at the end.
    fn convert(&self, job: &Job<'_>, out: &mut [u8]) -> Result<Option<u64>, DeviceError> {
        let sizes = job.sizes(out.len());
        let mut lane = self.lanes.take(&sizes)?;
        let stream = lane.stream.clone();
        let buffers = lane.buffers.as_mut().ok_or_else(|| DeviceError("a lane without buffers".into()))?;
        let queued = self.queue(&stream, buffers, job, &sizes, out.len());
        // Whatever was queued finishes before the lane's buffers are read
        // or handed to the next slab, even when queueing failed midway.
        let finished = stream.synchronize();
        queued?;
        finished?;
        let down = buffers.down.as_slice()?;
        if job.encode.is_some() {
            let at = index_down_at(&sizes);
            let first = u64::from_ne_bytes(down[at..at + 8].try_into().expect("eight bytes"));
            if first < job.n {
                return Ok(Some(first));
            }
        }
        out.copy_from_slice(&down[..out.len()]);
        Ok(None)
    }

    fn time_decode(&self, decode: &Kernel, source: &[u8], n: u64) -> Result<f64, DeviceError> {
        const ROUNDS: u32 = 20;
        let stream = self.bench.lock().unwrap_or_else(|e| e.into_inner());
        let source = stream.clone_htod(source)?;
        let mut values = stream.alloc_zeros::<f32>(n as usize)?;
        self.launch(&stream, decode, decode.items(n), &source, &mut values, None)?;
        stream.synchronize()?;
        let start = std::time::Instant::now();
        for _ in 0..ROUNDS {
            self.launch(&stream, decode, decode.items(n), &source, &mut values, None)?;
        }
        stream.synchronize()?;
        Ok(start.elapsed().as_secs_f64() / f64::from(ROUNDS))
    }
}
