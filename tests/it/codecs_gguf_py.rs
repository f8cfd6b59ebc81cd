//! Codecs against gguf-py, run directly (CI installs it): random blocks of
//! every type both implement decode to the same bits, and the quantizers
//! gguf-py has encode random rows to the same bytes.

use crate::common;

use std::path::Path;
use std::process::Command;

use quantforge::codecs::{dequantize_row, quantize_row};
use quantforge::types::GgmlType;

fn gguf_py(python: &str, args: &[&str]) {
    let script = common::repo().join("tests/gguf_py/quants.py");
    let out = Command::new(python).arg(script).args(args).output().expect("python runs");
    assert!(out.status.success(), "quants.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn dequantizers_match_gguf_py() {
    let Some(python) = common::python_with_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    use GgmlType::*;
    for ty in
        [F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4]
    {
        let n_blocks = 16;
        let encoded = common::random_blocks(ty, n_blocks, u64::from(ty.id()));
        let input = dir.path().join("in.bin");
        let output = dir.path().join("out.f32");
        std::fs::write(&input, &encoded).unwrap();
        gguf_py(&python, &["dequantize", &ty.id().to_string(), input.to_str().unwrap(), output.to_str().unwrap()]);
        let theirs = read_f32(&output);
        let mut ours = vec![0f32; n_blocks * ty.block_size() as usize];
        dequantize_row(ty, &encoded, &mut ours).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ty}");
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{ty} element {i}: ours {a}, theirs {b}");
        }
    }
}

#[test]
fn quantizers_match_gguf_py() {
    let Some(python) = common::python_with_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    use GgmlType::*;
    let n_per_row = 512;
    let rows: Vec<f32> = common::noise(7, 8 * n_per_row * 4)
        .chunks_exact(4)
        .map(|c| (i32::from_le_bytes(c.try_into().unwrap()) as f32) * 1e-10)
        .collect();
    let input = dir.path().join("rows.f32");
    std::fs::write(&input, rows.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    for ty in [BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0, MXFP4] {
        let output = dir.path().join("out.bin");
        let args = [
            "quantize",
            &ty.id().to_string(),
            &n_per_row.to_string(),
            input.to_str().unwrap(),
            output.to_str().unwrap(),
        ];
        gguf_py(&python, &args);
        let theirs = std::fs::read(&output).unwrap();
        let row_size = ty.row_size(n_per_row as u64).unwrap() as usize;
        let mut ours = vec![0u8; row_size];
        for (r, row) in rows.chunks_exact(n_per_row).enumerate() {
            quantize_row(ty, row, None, &mut ours).unwrap();
            assert!(ours == theirs[r * row_size..][..row_size], "{ty}: row {r} differs from gguf-py");
        }
    }
}
