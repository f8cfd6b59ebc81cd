//! Per-codec throughput: quantizing and dequantizing a 4096-wide matrix of
//! synthetic weights, reported as bytes of f32 per second (quantize: f32 in;
//! dequantize: f32 out), at the SIMD level in use (`QUANTFORGE_SIMD` forces a
//! lower one).
//!
//!     cargo bench --bench codecs
//!     cargo bench --bench codecs -- q4_k      # one codec

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quantforge::codecs::{dequantize_row, quantize_row};
use quantforge::types::GgmlType;

const ROW: usize = 4096;
const ROWS: usize = 64;

/// Deterministic weights shaped like a layer's: mostly small, a few larger.
fn weights() -> Vec<f32> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..ROW * ROWS)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            if i % 97 == 0 { u * 0.5 } else { u * 0.05 }
        })
        .collect()
}

const TYPES: [GgmlType; 14] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
];

fn codecs(c: &mut Criterion) {
    let src = weights();
    let f32_bytes = (src.len() * 4) as u64;
    // The yardstick for decoding: copying the same f32 bytes, row by row, into the same buffer.
    let mut group = c.benchmark_group("memcpy");
    group.throughput(Throughput::Bytes(f32_bytes));
    group.sample_size(10);
    let mut copied = vec![0f32; ROW];
    group.bench_function(BenchmarkId::new("f32", ROW), |b| {
        b.iter(|| {
            for row in src.chunks_exact(ROW) {
                copied.copy_from_slice(std::hint::black_box(row));
            }
            std::hint::black_box(&copied);
        })
    });
    group.finish();
    for ty in TYPES {
        let row_bytes = ty.row_size(ROW as u64).unwrap_or(0) as usize;
        let mut encoded = vec![0u8; row_bytes * ROWS];
        let mut group = c.benchmark_group(ty.name().to_ascii_lowercase());
        group.throughput(Throughput::Bytes(f32_bytes));
        group.sample_size(10);
        group.bench_function(BenchmarkId::new("quantize", ROW), |b| {
            b.iter(|| {
                for (row, out) in src.chunks_exact(ROW).zip(encoded.chunks_exact_mut(row_bytes)) {
                    quantize_row(ty, row, None, out).unwrap_or(());
                }
            })
        });
        let mut decoded = vec![0f32; ROW];
        group.bench_function(BenchmarkId::new("dequantize", ROW), |b| {
            b.iter(|| {
                for row in encoded.chunks_exact(row_bytes) {
                    dequantize_row(ty, row, &mut decoded).unwrap_or(());
                }
                std::hint::black_box(&decoded);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, codecs);
criterion_main!(benches);
