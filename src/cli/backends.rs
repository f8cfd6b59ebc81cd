//! `quantforge backends`: what this machine offers a recipe's `backend`:
//! the CPU's vector levels, and CUDA devices or why there are none.

use std::io::Write;

use crate::backend::cuda;
use crate::codecs::simd;

pub fn run() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let levels: Vec<String> = simd::supported().into_iter().map(|l| format!("cpu-{}", l.name())).collect();
    writeln!(out, "cpu: {} (`cpu` and `auto` use cpu-{})", levels.join(", "), simd::level().name())?;
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
    out.flush()?;
    Ok(())
}
