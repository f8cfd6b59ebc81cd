//! `quantforge backends`: what this machine offers a recipe's `backend`:
//! the CPU's vector levels, and CUDA devices or why there are none; and the
//! llama.cpp tools `imatrix` and `evaluate` steps would run (a recipe's
//! `[tools] llama_cpp` aside).

use std::io::Write;

use crate::backend::cuda;
use crate::codecs::simd;
use crate::types::GgmlType;

/// `--bench`: each decode kernel's throughput on the first device.
#[derive(Debug, clap::Args)]
pub struct BackendsArgs {
    /// Time the Q4_K, Q6_K and Q8_0 decode kernels on the first CUDA device (256M values each,
    /// already on the device): bytes read and written per second.
    #[arg(long)]
    bench: bool,
}

pub fn run(args: BackendsArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let levels: Vec<String> = simd::supported().into_iter().map(|l| format!("cpu-{}", l.name())).collect();
    writeln!(out, "cpu: {} (`cpu` uses cpu-{})", levels.join(", "), simd::level().name())?;
    match crate::backend::resolve(crate::backend::Choice::Auto) {
        Ok(backend) => writeln!(out, "auto: {}", backend.name())?,
        Err(e) => writeln!(out, "auto: {e}")?,
    }
    if let Ok(opened) = cuda::open(None) {
        let min = crate::backend::AUTO_CUDA_MIN_VALUES;
        writeln!(out, "auto runs slabs of fewer than {min} values on cpu-{}", simd::level().name())?;
        for kernel in opened.distrusted.iter() {
            writeln!(out, "{}: kernel {kernel} failed its check; the CPU runs its type", opened.device.name())?;
        }
    }
    match cuda::devices() {
        Ok(devices) => {
            for d in devices {
                let (major, minor) = d.compute_capability;
                let gib = d.memory_bytes as f64 / f64::from(1u32 << 30);
                writeln!(out, "cuda:{}: {}, {gib:.1} GiB, compute capability {major}.{minor}", d.ordinal, d.name)?;
            }
        }
        Err(why) => writeln!(out, "cuda: none: {why}")?,
    }
    match cuda::nvrtc_version() {
        Ok((major, minor)) => writeln!(out, "nvrtc: {major}.{minor}")?,
        Err(why) => writeln!(out, "nvrtc: none: {why}")?,
    }
    let hash = |path: &std::path::Path| crate::store::fingerprint::hash_file(path);
    for tool in crate::tools::Tool::ALL {
        match crate::tools::find(tool, None, &hash) {
            Ok(found) => writeln!(
                out,
                "{}: {} ({}; from {}; build {})",
                tool.binary(),
                found.path.display(),
                found.version,
                found.origin.describe(),
                found.identity.short()
            )?,
            Err(why) => writeln!(out, "{why}")?,
        }
    }
    if args.bench {
        bench(&mut out)?;
    }
    out.flush()?;
    Ok(())
}

fn bench(out: &mut impl Write) -> anyhow::Result<()> {
    let device = cuda::open(None).map_err(|why| anyhow::anyhow!("no CUDA device to time: {why}"))?.device;
    const N: u64 = 1 << 28;
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        let kernel = cuda::kernels::find(ty, cuda::kernels::Direction::Decode).expect("a decode kernel");
        // Any bytes decode: a fixed pseudo-random fill, quickly made.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let source: Vec<u8> = (0..ty.row_size(N).unwrap_or(0))
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let seconds = device.time_decode(kernel, &source, N)?;
        let bytes = source.len() as f64 + 4.0 * N as f64;
        writeln!(
            out,
            "decode {:<5} {:7.1} GB/s ({:.2} ms for {N} values)",
            ty.name(),
            bytes / seconds / 1e9,
            seconds * 1e3
        )?;
    }
    Ok(())
}
