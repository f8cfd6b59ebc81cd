//! The IQ grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
//! against ggml. Decoders bit for bit: golden vectors that ggml's own
//! `dequantize_row_*` decoded (`tests/ggml_ref/iq_goldens.py golden`), and
//! fresh random blocks decoded by gguf-py where it is installed. Encoders
//! byte for byte at every vector level: rows ggml's `ggml_quantize_chunk`
//! encoded, with and without importance weights
//! (`tests/ggml_ref/ggml_ref.py golden`).

use crate::common;

use std::path::Path;
use std::process::Command;

use quantforge::codecs::{CodecError, dequantize_row, quantize_row, quantize_row_at, simd};
use quantforge::types::GgmlType;

const TYPES: [GgmlType; 7] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

fn decode(ty: GgmlType, encoded: &[u8], n_elements: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_elements];
    dequantize_row(ty, encoded, &mut out).unwrap_or_else(|e| panic!("{ty}: {e}"));
    out
}

/// Asserts equal bit patterns, naming the first element that differs.
fn assert_same_bits(ty: GgmlType, what: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len(), "{ty} {what}: lengths");
    let block = ty.block_size() as usize;
    if let Some(i) = ours.iter().zip(theirs).position(|(a, b)| a.to_bits() != b.to_bits()) {
        panic!(
            "{ty} {what}: element {i} (block {}, index {}): ours {:e} ({:#010x}), theirs {:e} ({:#010x})",
            i / block,
            i % block,
            ours[i],
            ours[i].to_bits(),
            theirs[i],
            theirs[i].to_bits()
        );
    }
}

fn u32_at(data: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(data[offset..offset + 4].try_into().expect("four bytes"))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("four bytes"))).collect()
}

/// A `.qfgd` file: `QFGD`, u32 version 1, u32 type id, u32 n_elements, the
/// encoded blocks, then ggml's decoded f32 values.
fn read_golden(path: &Path) -> (GgmlType, Vec<u8>, Vec<f32>) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&data[..4], b"QFGD", "{}", path.display());
    assert_eq!(u32_at(&data, 4), 1, "{}: version", path.display());
    let ty = GgmlType::from_id(u32_at(&data, 8)).expect("a known type id");
    let n = u32_at(&data, 12) as usize;
    let encoded_len = ty.row_size(n as u64).expect("whole blocks") as usize;
    assert_eq!(data.len(), 16 + encoded_len + 4 * n, "{}: length", path.display());
    let (encoded, decoded) = data[16..].split_at(encoded_len);
    (ty, encoded.to_vec(), f32s(decoded))
}

#[test]
fn golden_vectors_decode_bit_for_bit() {
    for ty in TYPES {
        let path = common::repo().join(format!("tests/data/golden/{}.decode.qfgd", ty.name()));
        let (file_ty, encoded, expected) = read_golden(&path);
        assert_eq!(file_ty, ty, "{}", path.display());
        assert!(expected.len() >= 8 * ty.block_size() as usize, "{ty}: too few golden blocks");
        assert_same_bits(ty, "golden", &decode(ty, &encoded, expected.len()), &expected);
    }
}

#[test]
fn random_blocks_decode_as_gguf_py_does() {
    let Some(python) = common::python_with_gguf() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    for (seed, ty) in TYPES.into_iter().enumerate() {
        let n_blocks = 64;
        let encoded = common::random_blocks(ty, n_blocks, 0x1000 + seed as u64);
        let input = common::write_temp(dir.path(), &format!("{}.blocks", ty.name()), &encoded);
        let output = dir.path().join(format!("{}.f32", ty.name()));
        let run = Command::new(&python)
            .arg(common::repo().join("tests/ggml_ref/iq_goldens.py"))
            .arg("gguf-py")
            .arg(ty.id().to_string())
            .args([&input, &output])
            .output()
            .expect("python runs");
        assert!(run.status.success(), "iq_goldens.py gguf-py {ty}: {}", String::from_utf8_lossy(&run.stderr));
        let theirs = f32s(&std::fs::read(&output).expect("gguf-py's output"));
        let n = n_blocks * ty.block_size() as usize;
        assert_same_bits(ty, "vs gguf-py", &decode(ty, &encoded, n), &theirs);
    }
}

/// Encodes every row of `ty`'s golden files at every vector level the
/// machine has; returns a line per row that differs from ggml's bytes.
fn encode_goldens(ty: GgmlType, modes: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for mode in modes {
        let path = common::repo().join(format!("tests/data/golden/{ty}.{mode}.qfgv"));
        let g = common::read_golden(&path);
        assert_eq!(g.ty, ty, "{}", path.display());
        assert_eq!(g.importance.is_some(), *mode == "imatrix", "{}: importance", path.display());
        let row_bytes = ty.row_size(g.n_per_row as u64).expect("whole blocks") as usize;
        for level in simd::supported() {
            for (r, (row, expected)) in
                g.rows.chunks_exact(g.n_per_row).zip(g.encoded.chunks_exact(row_bytes)).enumerate()
            {
                let mut ours = vec![0u8; row_bytes];
                quantize_row_at(level, ty, row, g.importance.as_deref(), &mut ours).expect("quantize");
                if let Some(first) = ours.iter().zip(expected).position(|(a, b)| a != b) {
                    let differing = ours.iter().zip(expected).filter(|(a, b)| a != b).count();
                    failures.push(format!(
                        "{ty}.{mode} at {}: row {r} differs in {differing} of {row_bytes} bytes, first at {first} (ours {:#04x}, ggml {:#04x})",
                        level.name(),
                        ours[first],
                        expected[first]
                    ));
                }
            }
        }
    }
    failures
}

#[test]
fn iq2_xxs_iq2_xs_and_iq1_s_encode_as_ggml_does_with_importance() {
    let failures: Vec<String> = [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S]
        .into_iter()
        .flat_map(|ty| encode_goldens(ty, &["imatrix"]))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn iq2_s_iq3_xxs_iq3_s_and_iq1_m_encode_as_ggml_does_with_and_without_importance() {
    let failures: Vec<String> = [GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_M]
        .into_iter()
        .flat_map(|ty| encode_goldens(ty, &["plain", "imatrix"]))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_types_whose_search_weighs_by_importance_refuse_a_row_without_it() {
    for ty in [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S] {
        let mut out = vec![0u8; ty.row_size(256).unwrap() as usize];
        let err = quantize_row(ty, &[0.5; 256], None, &mut out).unwrap_err();
        assert_eq!(err, CodecError::NeedsImportance { ty });
        assert_eq!(err.to_string(), format!("{ty} needs an importance matrix: its search weighs every value by one"));
    }
}
