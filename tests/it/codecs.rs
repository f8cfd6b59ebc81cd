//! Codecs against ggml: every golden file (ggml's own encoder and decoder,
//! called through tests/ggml_ref/ggml_ref.py) is re-encoded and re-decoded
//! by our scalar code and must match byte for byte and bit for bit.

use crate::common;

use quantforge::codecs::{dequantize_row, quantize_row};

/// Types whose quantizers and dequantizers are checked here; the IQ4 and
/// ternary types have their own test file.
const TYPES: &[&str] = &[
    "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "MXFP4",
    "Q1_0", "Q2_0",
];

#[test]
fn quantizers_and_dequantizers_match_ggml_golden_vectors() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in common::golden_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !TYPES.contains(&name.split('.').next().unwrap()) {
            continue;
        }
        let g = common::read_golden(&path);
        let row_bytes = g.encoded.len() / (g.rows.len() / g.n_per_row);
        for (r, (row, expected)) in g.rows.chunks_exact(g.n_per_row).zip(g.encoded.chunks_exact(row_bytes)).enumerate()
        {
            let mut ours = vec![0u8; row_bytes];
            quantize_row(g.ty, row, g.importance.as_deref(), &mut ours).unwrap();
            if ours != expected {
                let first = ours.iter().zip(expected).position(|(a, b)| a != b).unwrap();
                failures.push(format!("{name}: row {r} encodes differently from byte {first}"));
            }
            let mut decoded = vec![0f32; g.n_per_row];
            dequantize_row(g.ty, expected, &mut decoded).unwrap();
            let want = &g.decoded[r * g.n_per_row..][..g.n_per_row];
            if decoded.iter().zip(want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                failures.push(format!("{name}: row {r} decodes differently"));
            }
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(checked, 27, "golden files checked");
}
