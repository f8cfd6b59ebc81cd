//! The check a device passes when it is opened: every kernel runs on a few
//! rows there and must reproduce the CPU's bytes — encoders with and
//! without importance weights, decoders on encoded rows and on random
//! bytes (NaN and infinite scales) — and an encode must refuse a NaN at its
//! index. A kernel that differs, or fails to run, is distrusted: the CPU
//! runs its type for the rest of the process, with a warning.
//!
//! The tests prove the kernels on the host emulation; this catches what
//! the emulation cannot model on a real GPU (a compiler's or driver's
//! mistake, arithmetic that is not the IEEE we assume), so neither
//! `cuda` nor `auto` ever writes a byte the CPU would not.

use super::device::{Device, Job};
use super::kernels::{self, Direction, FIND_NON_FINITE, KERNELS, Kernel};
use crate::backend::{Backend, CpuBackend, Slab};
use crate::types::GgmlType;

/// Values a row; every kernel's type divides it.
const ROW: usize = 256;

/// A kernel that failed the check, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distrusted {
    pub kernel: &'static str,
    pub why: String,
}

/// The kernels of `device` that did not reproduce `cpu` (which must write
/// the scalar definitions' bytes, as every CPU level does).
pub fn distrusted(device: &dyn Device, cpu: &CpuBackend) -> Vec<Distrusted> {
    let rows = Rows::new();
    let mut distrusted = Vec::new();
    let mut check = |kernel: &'static Kernel, outcome: Result<(), String>| {
        if let Err(why) = outcome {
            distrusted.push(Distrusted { kernel: kernel.name, why });
        }
    };
    check(&FIND_NON_FINITE, refuses_nan(device, &rows));
    for kernel in &KERNELS {
        match kernel.direction {
            Direction::Encode => {
                check(kernel, encodes_as_cpu(device, cpu, kernel, &rows, None));
                if kernel.weighted {
                    check(kernel, encodes_as_cpu(device, cpu, kernel, &rows, Some(&rows.weights)));
                }
            }
            Direction::Decode => check(kernel, decodes_as_cpu(device, cpu, kernel, &rows)),
        }
    }
    distrusted.dedup_by_key(|d| d.kernel);
    distrusted
}

/// The check's input: rows of values in the shapes the codecs branch on.
struct Rows {
    /// f32 rows: random magnitudes a group, ties and signed zeros,
    /// subnormals among small normals, and large values.
    values: Vec<f32>,
    /// One row of importance weights, some groups all zero.
    weights: Vec<f32>,
    /// Random bytes: any are a decoder's valid input.
    noise: Vec<u8>,
}

impl Rows {
    fn new() -> Rows {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut unit = || (next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        let random: Vec<f32> = (0..ROW).map(|i| unit() * f32::powi(2.0, (i / 32) as i32 - 4)).collect();
        let ties: Vec<f32> =
            (0..ROW).map(|i| [1.5, -1.5, 0.0, -0.0][i % 4] * if i < 128 { 1.0 } else { 0.25 }).collect();
        let tiny: Vec<f32> = (0..ROW).map(|i| if i % 3 == 0 { unit() * 1e-40 } else { unit() * 1e-3 }).collect();
        let large: Vec<f32> = (0..ROW).map(|_| unit() * 6.0e4).collect();
        let weights = (0..ROW).map(|i| if (i / 16) % 5 == 0 { 0.0 } else { unit().abs() * 3.0 }).collect();
        let noise = (0..4 * ROW).map(|_| next() as u8).collect();
        Rows { values: [random, ties, tiny, large].concat(), weights, noise }
    }

    fn f32_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.values)
    }
}

fn slab<'a>(from: GgmlType, to: GgmlType, source: &'a [u8], importance: Option<&'a [f32]>) -> Slab<'a> {
    // One expert spans every row, so one row of weights serves them all.
    Slab { from, to, n_per_row: ROW, first_row: 0, rows_per_expert: usize::MAX, source, importance, row_numbers: None }
}

fn copy_f32() -> &'static Kernel {
    kernels::find(GgmlType::F32, Direction::Decode).expect("f32 is read by a kernel")
}

fn encodes_as_cpu(
    device: &dyn Device,
    cpu: &CpuBackend,
    kernel: &'static Kernel,
    rows: &Rows,
    importance: Option<&[f32]>,
) -> Result<(), String> {
    let slab = slab(GgmlType::F32, kernel.ggml_type, rows.f32_bytes(), importance);
    let len = slab.rows() * kernel.ggml_type.row_size(ROW as u64).unwrap_or(0) as usize;
    let mut expected = vec![0u8; len];
    cpu.convert(&slab, &mut expected).map_err(|e| format!("the CPU's reference failed: {e}"))?;
    let job =
        Job { decode: copy_f32(), encode: Some(kernel), source: slab.source, n: rows.values.len() as u64, importance };
    let mut got = vec![0u8; len];
    match device.convert(&job, &mut got).map_err(|e| e.to_string())? {
        Some(first) => Err(format!("refused finite values (at {first})")),
        None => first_difference(&got, &expected).map_or(Ok(()), |at| {
            let weighted = if importance.is_some() { " with importance weights" } else { "" };
            Err(format!("encoded byte {at}{weighted} as {:#04x}, the CPU {:#04x}", got[at], expected[at]))
        }),
    }
}

fn decodes_as_cpu(device: &dyn Device, cpu: &CpuBackend, kernel: &'static Kernel, rows: &Rows) -> Result<(), String> {
    let ty = kernel.ggml_type;
    let row_len = ty.row_size(ROW as u64).unwrap_or(0) as usize;
    let mut source = vec![0u8; 4 * row_len];
    let encodable = [None, Some(&rows.weights[..])]
        .into_iter()
        .any(|importance| cpu.convert(&slab(GgmlType::F32, ty, rows.f32_bytes(), importance), &mut source).is_ok());
    if !encodable {
        source.clear();
    }
    source.extend_from_slice(&rows.noise[..rows.noise.len() / row_len * row_len]);
    let slab = slab(ty, GgmlType::F32, &source, None);
    let n = slab.rows() * ROW;
    let mut expected = vec![0f32; n];
    cpu.decode(&slab, &mut expected).map_err(|e| format!("the CPU's reference failed: {e}"))?;
    let job = Job { decode: kernel, encode: None, source: &source, n: n as u64, importance: None };
    let mut got = vec![0f32; n];
    device.convert(&job, bytemuck::cast_slice_mut(&mut got)).map_err(|e| e.to_string())?;
    let (got_bits, expected_bits): (&[u32], &[u32]) = (bytemuck::cast_slice(&got), bytemuck::cast_slice(&expected));
    first_difference(got_bits, expected_bits).map_or(Ok(()), |at| {
        Err(format!("decoded value {at} as {:e} ({:#x}), the CPU {:e}", got[at], got_bits[at], expected[at]))
    })
}

fn refuses_nan(device: &dyn Device, rows: &Rows) -> Result<(), String> {
    let mut values = rows.values.clone();
    let at = ROW + 37;
    values[at] = f32::NAN;
    values[3 * ROW] = f32::INFINITY;
    let encode = kernels::find(GgmlType::Q8_0, Direction::Encode).expect("Q8_0 has an encoder");
    let len = 4 * GgmlType::Q8_0.row_size(ROW as u64).unwrap_or(0) as usize;
    let job = Job {
        decode: copy_f32(),
        encode: Some(encode),
        source: bytemuck::cast_slice(&values),
        n: values.len() as u64,
        importance: None,
    };
    match device.convert(&job, &mut vec![0u8; len]).map_err(|e| e.to_string())? {
        Some(first) if first == at as u64 => Ok(()),
        Some(first) => Err(format!("found the first non-finite value at {first}, not {at}")),
        None => Err(format!("missed the NaN at {at}")),
    }
}

fn first_difference<T: PartialEq>(got: &[T], expected: &[T]) -> Option<usize> {
    got.iter().zip(expected).position(|(g, e)| g != e)
}
