//! The CUDA kernels, run on the host by their emulation
//! (`src/backend/cuda/emulate`), write exactly the scalar codecs' bytes and
//! decode to exactly their values; and NVRTC compiles every kernel for the
//! GPUs this project targets, where NVRTC is installed (CI installs it).

use crate::common;

use common::rows::{Rng, rows};
use quantforge::backend::cuda::{self, emulated, kernels};
use quantforge::codecs::simd::Level;
use quantforge::codecs::{dequantize_row_at, quantize_row_at};
use quantforge::types::GgmlType;

/// The shared rows plus signed-zero and equal-magnitude ties, which decide
/// a Q4_1 minimum's sign and a Q4_0 scale's.
fn kernel_rows() -> Vec<Vec<f32>> {
    let mut rows = rows();
    let alternate = |a: f32, b: f32| (0..256).map(|i| if i % 2 == 0 { a } else { b }).collect::<Vec<f32>>();
    rows.extend([alternate(0.0, -0.0), alternate(-0.0, 0.0), alternate(1.5, -1.5), alternate(-1.5, 1.5)]);
    rows
}

fn types(direction: kernels::Direction) -> Vec<GgmlType> {
    kernels::KERNELS
        .iter()
        .filter(|k| k.direction == direction && k.ggml_type != GgmlType::F32)
        .map(|k| k.ggml_type)
        .collect()
}

/// Importance rows: random positive, and sparse (zeros make whole groups
/// weightless, the searches' degenerate cases).
fn importance_rows() -> Vec<Vec<f32>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let random: Vec<f32> = (0..256).map(|_| rng.float(4.0).abs()).collect();
    let sparse: Vec<f32> = (0..256).map(|i| if (i / 16) % 3 == 0 { 0.0 } else { rng.float(1.0).abs() }).collect();
    vec![random, sparse]
}

#[test]
fn cuda_kernels_encode_the_scalar_bytes() {
    let all = kernel_rows();
    // With weights, every fourth random row and every edge case: the
    // host-emulated searches are slow.
    let edge_cases = all.len() - 16;
    let sampled: Vec<Vec<f32>> =
        all.iter().enumerate().filter(|&(r, _)| r % 4 == 0 || r >= edge_cases).map(|(_, row)| row.clone()).collect();
    for ty in types(kernels::Direction::Encode) {
        let weighted = kernels::find(ty, kernels::Direction::Encode).unwrap().weighted;
        let importance = importance_rows();
        let variants = std::iter::once(None).chain(importance.iter().filter(|_| weighted).map(|w| Some(&w[..])));
        for importance in variants {
            let rows = if importance.is_some() { &sampled } else { &all };
            let values: Vec<f32> = rows.concat();
            let row_len = ty.row_size(256).unwrap() as usize;
            let mut expected = vec![0u8; row_len * rows.len()];
            for (row, out) in rows.iter().zip(expected.chunks_exact_mut(row_len)) {
                quantize_row_at(Level::Scalar, ty, row, importance, out).unwrap();
            }
            let mut got = vec![0u8; expected.len()];
            assert!(emulated::encode(ty, &values, importance, &mut got));
            for (r, (got, expected)) in got.chunks_exact(row_len).zip(expected.chunks_exact(row_len)).enumerate() {
                let weights = importance.map(|w| w[0]);
                assert_eq!(got, expected, "{ty:?} (importance {weights:?}…) row {r}: {:?}", &rows[r][..8]);
            }
        }
    }
}

/// `rows` as the CPU encodes them to `ty`: with importance weights where the
/// type needs them; as doubles between (and halfway between) f32 neighbours
/// for F64, which nothing encodes to; none for Q8_1 and NVFP4, which nothing
/// encodes either (random bytes cover them).
fn encoded_rows(ty: GgmlType, rows: &[Vec<f32>], rng: &mut Rng) -> Vec<u8> {
    match ty {
        GgmlType::F64 => rows
            .iter()
            .flatten()
            .flat_map(|&v| {
                let bits = f64::from(v).to_bits();
                [bits ^ (rng.next() & 0x1fff_ffff), bits | 0x1000_0000].map(|b| f64::from_bits(b).to_le_bytes())
            })
            .flatten()
            .collect(),
        GgmlType::Q8_1 | GgmlType::NVFP4 => Vec::new(),
        _ => {
            let row_len = ty.row_size(256).unwrap() as usize;
            let weights = vec![1.0f32; 256];
            let mut encoded = vec![0u8; row_len * rows.len()];
            for (row, out) in rows.iter().zip(encoded.chunks_exact_mut(row_len)) {
                quantize_row_at(Level::Scalar, ty, row, None, out)
                    .or_else(|_| quantize_row_at(Level::Scalar, ty, row, Some(&weights), out))
                    .unwrap();
            }
            encoded
        }
    }
}

#[test]
fn cuda_kernels_decode_to_the_cpus_values() {
    let mut rng = Rng(0x51_7cc1_b727_220a);
    let rows = kernel_rows();
    for ty in types(kernels::Direction::Decode) {
        let row_len = ty.row_size(256).unwrap() as usize;
        // Encoded rows, then random bytes: NaN and infinite scales, subnormal halves.
        let mut encoded = encoded_rows(ty, &rows, &mut rng);
        encoded.extend((0..row_len * 64).map(|_| rng.next() as u8));
        let n = encoded.len() / row_len * 256;
        let mut expected = vec![0f32; n];
        dequantize_row_at(Level::Scalar, ty, &encoded, &mut expected).unwrap();
        let mut got = vec![0f32; n];
        assert!(emulated::decode(ty, &encoded, &mut got));
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                g.to_bits() == e.to_bits(),
                "{ty:?} element {i}: {g:e} ({:#x}) for {e:e} ({:#x})",
                g.to_bits(),
                e.to_bits()
            );
        }
    }
}

#[test]
fn cuda_kernel_finds_the_first_non_finite_value() {
    let mut values = vec![1.0f32; 10_000];
    assert_eq!(emulated::find_non_finite(&values), None);
    values[7_777] = f32::INFINITY;
    values[9_000] = f32::NAN;
    assert_eq!(emulated::find_non_finite(&values), Some(7_777));
    values[3] = f32::NEG_INFINITY;
    assert_eq!(emulated::find_non_finite(&values), Some(3));
}

/// NVRTC compiles every kernel for the A100's and the H100/H200's compute
/// capabilities, and ptxas assembles the PTX for both within what a block
/// of 256 threads may hold (what the driver checks when it loads the
/// module). CI installs NVRTC and ptxas (`pip install nvidia-cuda-nvrtc
/// nvidia-cuda-nvcc`) and names NVRTC's directory in `QUANTFORGE_CUDA_LIBS`;
/// elsewhere each check is skipped with a note when its tool is missing.
#[test]
fn cuda_kernels_compile_with_nvrtc_for_sm_80_and_sm_90() {
    let version = match cuda::nvrtc_version() {
        Ok(version) => version,
        Err(why) if std::env::var_os("CI").is_none() => return eprintln!("skipped: {why}"),
        Err(why) => panic!("CI installs NVRTC: {why}"),
    };
    eprintln!("NVRTC {}.{}", version.0, version.1);
    let ptxas = ptxas();
    for capability in [(8, 0), (9, 0)] {
        let ptx = cuda::compile_ptx(capability).unwrap();
        let target = format!(".target sm_{}{}", capability.0, capability.1);
        assert!(ptx.contains(&target), "no `{target}` in the PTX");
        for kernel in kernels::KERNELS.iter().chain([&kernels::FIND_NON_FINITE]) {
            assert!(ptx.contains(&format!(".entry {}(", kernel.name)), "{} is not in the PTX", kernel.name);
        }
        // --fmad=false: no fused multiply-add anywhere.
        assert!(!ptx.contains("fma."), "the PTX contracts a multiply and an add");
        match &ptxas {
            Some(ptxas) => assemble(ptxas, &ptx, capability),
            None if std::env::var_os("CI").is_none() => eprintln!("skipped: no ptxas"),
            None => panic!("CI installs ptxas (nvidia-cuda-nvcc)"),
        }
    }
}

/// ptxas beside NVRTC (pip's `nvidia/cu13/bin`, a toolkit's `bin`) or on
/// the PATH.
fn ptxas() -> Option<std::path::PathBuf> {
    let beside_nvrtc = std::env::var_os(cuda::LIB_DIRS_ENV)
        .into_iter()
        .flat_map(|dirs| std::env::split_paths(&dirs).collect::<Vec<_>>())
        .filter_map(|lib| lib.parent().map(|dir| dir.join("bin")));
    let path = std::env::var_os("PATH").into_iter().flat_map(|dirs| std::env::split_paths(&dirs).collect::<Vec<_>>());
    beside_nvrtc.chain(path).map(|dir| dir.join("ptxas")).find(|ptxas| ptxas.is_file())
}

/// Assembles `ptx` for `capability` and checks every kernel's resources:
/// registers for 256 threads, static shared memory within 48 KiB, no
/// spills (the searches keep their groups in registers). Prints the table
/// docs/CUDA.md quotes.
fn assemble(ptxas: &std::path::Path, ptx: &str, (major, minor): (i32, i32)) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("kernels.ptx");
    std::fs::write(&input, ptx).unwrap();
    let output = std::process::Command::new(ptxas)
        .arg(format!("-arch=sm_{major}{minor}"))
        .arg("-v")
        .arg(&input)
        .arg("-o")
        .arg(dir.path().join("kernels.cubin"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ptxas failed for sm_{major}{minor}:\n{log}");
    let mut seen = 0;
    for entry in log.split("Compiling entry function '").skip(1) {
        let name = &entry[..entry.find('\'').unwrap()];
        let number_before = |label: &str| -> u64 {
            entry.find(label).map_or(0, |at| {
                let words: Vec<&str> = entry[..at].split_whitespace().collect();
                words.last().unwrap().parse().unwrap()
            })
        };
        let (registers, shared) = (number_before(" registers"), number_before(" bytes smem"));
        let (stack, spills) = (number_before(" bytes stack frame"), number_before(" bytes spill stores"));
        eprintln!(
            "sm_{major}{minor} {name:<22} {registers:>3} registers {shared:>6} bytes shared {stack:>3} bytes stack"
        );
        assert!(registers * u64::from(kernels::THREADS) <= 65_536, "{name}: {registers} registers a thread");
        assert!(shared <= 48 * 1024, "{name}: {shared} bytes of static shared memory");
        assert_eq!(spills, 0, "{name} spills registers");
        seen += 1;
    }
    assert_eq!(seen, kernels::KERNELS.len() + 1, "ptxas compiled every entry point:\n{log}");
}

/// The CUDA backend over the emulated device: conversions with kernels
/// write the CPU backend's bytes, the rest (TQ2_0, importance weights an
/// encoder does not take) run on the CPU and the backend says so, and a non-finite value is
/// refused naming its tensor row.
#[test]
fn cuda_backend_runs_kernels_where_it_has_them_and_the_cpu_elsewhere() {
    use quantforge::backend::cuda::{CudaBackend, EmulatedDevice};
    use quantforge::backend::{Backend, CpuBackend, Slab, SlabError};

    let cpu = CpuBackend::new(Level::Scalar);
    let gpu = CudaBackend::new(std::sync::Arc::new(EmulatedDevice::new(2, 1 << 30)), CpuBackend::new(Level::Scalar));
    let values: Vec<f32> = kernel_rows()[..24].concat();
    let mut f16 = vec![0u8; values.len() * 2];
    quantize_row_at(Level::Scalar, GgmlType::F16, &values, None, &mut f16).unwrap();
    let f32_bytes: Vec<u8> = bytemuck::cast_slice(&values).to_vec();
    let importance = importance_rows().swap_remove(0);
    fn slab<'a>(from: GgmlType, to: GgmlType, source: &'a [u8], importance: Option<&'a [f32]>) -> Slab<'a> {
        Slab { from, to, n_per_row: 256, first_row: 40, rows_per_expert: 1000, source, importance, row_numbers: None }
    }
    let cases = [
        (slab(GgmlType::F32, GgmlType::Q8_0, &f32_bytes, None), true),
        (slab(GgmlType::F16, GgmlType::Q4_0, &f16, None), true),
        (slab(GgmlType::F32, GgmlType::Q5_1, &f32_bytes, None), true),
        (slab(GgmlType::F16, GgmlType::BF16, &f16, None), true),
        (slab(GgmlType::F32, GgmlType::Q4_K, &f32_bytes, None), true),
        (slab(GgmlType::F32, GgmlType::TQ2_0, &f32_bytes, None), false),
        (slab(GgmlType::F32, GgmlType::Q4_0, &f32_bytes, Some(&importance)), true),
        (slab(GgmlType::F32, GgmlType::Q4_K, &f32_bytes, Some(&importance)), true),
        (slab(GgmlType::F32, GgmlType::Q8_0, &f32_bytes, Some(&importance)), false),
        (slab(GgmlType::F16, GgmlType::Q6_K, &f16, Some(&importance)), true),
        (slab(GgmlType::F32, GgmlType::IQ4_XS, &f32_bytes, Some(&importance)), true),
    ];
    for (slab, on_device) in cases {
        let len = slab.rows() * slab.to.row_size(256).unwrap() as usize;
        let (mut expected, mut got) = (vec![0u8; len], vec![0u8; len]);
        cpu.convert(&slab, &mut expected).unwrap();
        gpu.convert(&slab, &mut got).unwrap();
        assert!(got == expected, "{:?} → {:?}", slab.from, slab.to);
        let ran_on = gpu.ran_on(&slab, true);
        assert_eq!(ran_on == "cuda-emulated", on_device, "{:?} → {:?} ran on {ran_on}", slab.from, slab.to);
    }
    let decode = slab(GgmlType::F16, GgmlType::F32, &f16, None);
    let (mut expected, mut got) = (vec![0f32; values.len()], vec![0f32; values.len()]);
    cpu.decode(&decode, &mut expected).unwrap();
    gpu.decode(&decode, &mut got).unwrap();
    assert!(got.iter().zip(&expected).all(|(g, e)| g.to_bits() == e.to_bits()));

    let mut poisoned = values.clone();
    poisoned[3 * 256 + 5] = f32::NEG_INFINITY;
    let mut out = vec![0u8; 24 * GgmlType::Q8_0.row_size(256).unwrap() as usize];
    match gpu.convert(&slab(GgmlType::F32, GgmlType::Q8_0, bytemuck::cast_slice(&poisoned), None), &mut out) {
        Err(SlabError::NonFinite { row: 43, value }) if value == f32::NEG_INFINITY => {}
        other => panic!("expected row 43's -inf to be refused, got {other:?}"),
    }
}

/// The rows of f32 values in `source` (256 a row, from tensor row 0) to
/// convert to `to`.
fn f32_slab(to: GgmlType, source: &[u8]) -> quantforge::backend::Slab<'_> {
    quantforge::backend::Slab {
        from: GgmlType::F32,
        to,
        n_per_row: 256,
        first_row: 0,
        rows_per_expert: 1,
        source,
        importance: None,
        row_numbers: None,
    }
}

/// Worker threads hand the device slabs at once; its lanes run them side by
/// side within the memory budget, and a slab that could never fit runs on
/// the CPU — the same bytes every way.
#[test]
fn cuda_backend_runs_slabs_concurrently_within_its_memory_budget() {
    use quantforge::backend::cuda::{CudaBackend, EmulatedDevice};
    use quantforge::backend::{Backend, CpuBackend, Slab};

    let slab = |source| f32_slab(GgmlType::Q4_K, source);
    let rows = kernel_rows();
    let small: Vec<u8> = bytemuck::cast_slice(&rows[..4].concat()).to_vec();
    let large: Vec<u8> = bytemuck::cast_slice(&rows[..64].concat()).to_vec();
    let (small, large) = (&small[..], &large[..]);
    let cpu = CpuBackend::new(Level::Scalar);
    // Room for two small slabs' buffers (4 rows: 4 KiB up, 4 KiB of values,
    // 576 encoded bytes), never for the large one.
    let gpu = CudaBackend::new(std::sync::Arc::new(EmulatedDevice::new(3, 20_000)), CpuBackend::new(Level::Scalar));
    let expected = |slab: &Slab<'_>| {
        let mut out = vec![0u8; slab.rows() * 144];
        cpu.convert(slab, &mut out).unwrap();
        out
    };
    let (small_bytes, large_bytes) = (expected(&slab(small)), expected(&slab(large)));
    assert_eq!(gpu.ran_on(&slab(small), true), "cuda-emulated");
    assert_ne!(gpu.ran_on(&slab(large), true), "cuda-emulated", "the large slab is over the budget");
    std::thread::scope(|s| {
        for t in 0..6 {
            let (gpu, small_bytes, large_bytes) = (&gpu, &small_bytes, &large_bytes);
            s.spawn(move || {
                for _ in 0..3 {
                    let (case, bytes) =
                        if t % 3 == 2 { (slab(large), large_bytes) } else { (slab(small), small_bytes) };
                    let mut got = vec![0u8; bytes.len()];
                    gpu.convert(&case, &mut got).unwrap();
                    assert!(&got == bytes, "thread {t}");
                }
            });
        }
    });
}

/// A device that runs the emulated kernels but lies about one of them: it
/// flips a byte of every `wrong` encode, or reports a non-finite value one
/// element late.
struct LyingDevice {
    inner: quantforge::backend::cuda::EmulatedDevice,
    wrong: GgmlType,
    late_non_finite: bool,
}

impl quantforge::backend::cuda::Device for LyingDevice {
    fn name(&self) -> String {
        "cuda-lying".into()
    }

    fn budget(&self) -> u64 {
        self.inner.budget()
    }

    fn convert(
        &self,
        job: &quantforge::backend::cuda::Job<'_>,
        out: &mut [u8],
    ) -> Result<Option<u64>, quantforge::backend::cuda::DeviceError> {
        let first = self.inner.convert(job, out)?;
        if job.encode.is_some_and(|k| k.ggml_type == self.wrong) {
            out[out.len() / 2] ^= 0x10;
        }
        Ok(first.map(|at| at + u64::from(self.late_non_finite)))
    }
}

/// Opening a device checks every kernel against the CPU: the emulation
/// passes whole, a kernel that writes other bytes is distrusted by name and
/// its type runs on the CPU, and a wrong non-finite search distrusts the
/// search (so every encode runs on the CPU).
#[test]
fn cuda_device_check_distrusts_kernels_that_differ_from_the_cpu() {
    use quantforge::backend::cuda::{CudaBackend, EmulatedDevice, check};
    use quantforge::backend::{Backend, CpuBackend};

    let cpu = CpuBackend::new(Level::Scalar);
    assert_eq!(check::distrusted(&EmulatedDevice::new(2, 1 << 30), &cpu), vec![]);

    let lying = LyingDevice { inner: EmulatedDevice::new(2, 1 << 30), wrong: GgmlType::Q4_K, late_non_finite: false };
    let distrusted = check::distrusted(&lying, &cpu);
    let names: Vec<&str> = distrusted.iter().map(|d| d.kernel).collect();
    assert_eq!(names, ["qf_encode_q4_k"], "{distrusted:?}");
    assert!(distrusted[0].why.contains("encoded byte"), "{distrusted:?}");

    let values: Vec<f32> = kernel_rows()[..8].concat();
    let source: &[u8] = bytemuck::cast_slice(&values);
    let slab = |to| f32_slab(to, source);
    let backend = CudaBackend::new(std::sync::Arc::new(lying), CpuBackend::new(Level::Scalar))
        .distrusting(names.into_iter().collect());
    for (to, on_device) in [(GgmlType::Q4_K, false), (GgmlType::Q6_K, true)] {
        let len = 8 * to.row_size(256).unwrap() as usize;
        let (mut expected, mut got) = (vec![0u8; len], vec![0u8; len]);
        cpu.convert(&slab(to), &mut expected).unwrap();
        backend.convert(&slab(to), &mut got).unwrap();
        assert!(got == expected, "{to:?}");
        assert_eq!(backend.ran_on(&slab(to), true) == "cuda-lying", on_device, "{to:?}");
    }

    let late = LyingDevice { inner: EmulatedDevice::new(2, 1 << 30), wrong: GgmlType::F32, late_non_finite: true };
    let names: Vec<&str> = check::distrusted(&late, &cpu).iter().map(|d| d.kernel).collect();
    assert_eq!(names, ["qf_find_non_finite"]);
}

/// Under `auto` a small slab (a norm, a bias) runs on the CPU and a large
/// one on the device, with the same bytes.
#[test]
fn cuda_backend_leaves_slabs_below_its_minimum_to_the_cpu() {
    use quantforge::backend::cuda::{CudaBackend, EmulatedDevice};
    use quantforge::backend::{Backend, CpuBackend};

    let values: Vec<f32> = kernel_rows()[..16].concat();
    let source: &[u8] = bytemuck::cast_slice(&values);
    let slab = |rows: usize| f32_slab(GgmlType::Q8_0, &source[..rows * 1024]);
    let backend =
        CudaBackend::new(std::sync::Arc::new(EmulatedDevice::new(2, 1 << 30)), CpuBackend::new(Level::Scalar))
            .from_values(8 * 256);
    for (rows, on_device) in [(1, false), (7, false), (8, true), (16, true)] {
        assert_eq!(backend.ran_on(&slab(rows), true) == "cuda-emulated", on_device, "{rows} rows");
        assert_eq!(backend.ran_on(&slab(rows), false) == "cuda-emulated", on_device, "{rows} rows, decoding");
        let len = rows * GgmlType::Q8_0.row_size(256).unwrap() as usize;
        let (mut expected, mut got) = (vec![0u8; len], vec![0u8; len]);
        CpuBackend::new(Level::Scalar).convert(&slab(rows), &mut expected).unwrap();
        backend.convert(&slab(rows), &mut got).unwrap();
        assert!(got == expected, "{rows} rows");
    }
}
