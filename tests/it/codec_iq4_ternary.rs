//! IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0 against ggml's own output: every golden
//! row (tests/data/golden, written by tests/ggml_ref/ggml_ref.py) must
//! quantize to ggml's bytes exactly, with and without an importance vector,
//! and ggml's bytes must dequantize to ggml's f32 values bit for bit.

use std::path::PathBuf;

use quantforge::codecs::{dequantize_row, quantize_row};
use quantforge::types::GgmlType;

/// One golden file: `n_rows` input rows, the optional importance vector,
/// ggml's encoding of each row and ggml's decoding of that encoding.
struct Golden {
    type_id: u32,
    n_per_row: usize,
    input: Vec<Vec<f32>>,
    importance: Option<Vec<f32>>,
    encoded: Vec<Vec<u8>>,
    decoded: Vec<Vec<f32>>,
}

/// Reads the layout documented in ggml_ref.py; `row_size` is the encoded
/// bytes per row, which the file does not record.
fn read_golden(name: &str, row_size: impl Fn(usize) -> usize) -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden").join(name);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&data[..4], b"QFGV", "{name}: magic");
    let mut at = 4;
    let mut u32_at = || {
        let v = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
        at += 4;
        v
    };
    let (version, type_id, n_rows, n_per_row, has_importance) = (u32_at(), u32_at(), u32_at(), u32_at(), u32_at());
    assert_eq!(version, 1, "{name}: version");
    let (n_rows, n_per_row) = (n_rows as usize, n_per_row as usize);
    let mut take = |n: usize| {
        let bytes = &data[at..at + n];
        at += n;
        bytes
    };
    let floats = |bytes: &[u8]| -> Vec<f32> {
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    let input = take(4 * n_rows * n_per_row).chunks_exact(4 * n_per_row).map(floats).collect();
    let importance = (has_importance != 0).then(|| floats(take(4 * n_per_row)));
    let row_bytes = row_size(n_per_row);
    let encoded = take(row_bytes * n_rows).chunks_exact(row_bytes).map(<[u8]>::to_vec).collect();
    let decoded = take(4 * n_rows * n_per_row).chunks_exact(4 * n_per_row).map(floats).collect();
    assert_eq!(at, data.len(), "{name}: trailing bytes");
    Golden { type_id, n_per_row, input, importance, encoded, decoded }
}

/// Checks one golden file; returns a line per differing row.
fn check(ty: GgmlType, mode: &str) -> Vec<String> {
    let name = format!("{ty}.{mode}.qfgv");
    let golden = read_golden(&name, |n| ty.row_size(n as u64).expect("whole blocks") as usize);
    assert_eq!(golden.type_id, ty.id(), "{name}: type id");
    assert_eq!(golden.importance.is_some(), mode == "imatrix", "{name}: importance present");
    let mut failures = Vec::new();
    for (row, ((input, encoded), decoded)) in golden.input.iter().zip(&golden.encoded).zip(&golden.decoded).enumerate()
    {
        let mut bytes = vec![0u8; encoded.len()];
        quantize_row(ty, input, golden.importance.as_deref(), &mut bytes).expect("quantize");
        if bytes != *encoded {
            let first = bytes.iter().zip(encoded).position(|(a, b)| a != b).unwrap();
            let differing = bytes.iter().zip(encoded).filter(|(a, b)| a != b).count();
            failures.push(format!(
                "{name} row {row}: quantized bytes differ at {differing} of {} (first at byte {first}: ours {:#04x}, ggml {:#04x})",
                bytes.len(),
                bytes[first],
                encoded[first]
            ));
        }
        let mut values = vec![0.0f32; golden.n_per_row];
        dequantize_row(ty, encoded, &mut values).expect("dequantize");
        if let Some(j) = values.iter().zip(decoded).position(|(a, b)| a.to_bits() != b.to_bits()) {
            failures.push(format!(
                "{name} row {row}: dequantized value {j} is {:e} ({:#010x}), ggml's is {:e} ({:#010x})",
                values[j],
                values[j].to_bits(),
                decoded[j],
                decoded[j].to_bits()
            ));
        }
    }
    failures
}

fn assert_golden(ty: GgmlType, modes: &[&str]) {
    let failures: Vec<String> = modes.iter().flat_map(|mode| check(ty, mode)).collect();
    assert!(failures.is_empty(), "{} differences from ggml:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn iq4_nl_matches_ggml() {
    assert_golden(GgmlType::IQ4_NL, &["plain", "imatrix"]);
}

#[test]
fn iq4_xs_matches_ggml() {
    assert_golden(GgmlType::IQ4_XS, &["plain", "imatrix"]);
}

#[test]
fn tq1_0_matches_ggml() {
    assert_golden(GgmlType::TQ1_0, &["plain"]);
}

#[test]
fn tq2_0_matches_ggml() {
    assert_golden(GgmlType::TQ2_0, &["plain"]);
}
