//! Importance matrices: both of llama.cpp's formats load to the weights
//! llama-quantize hands to its quantizers, and malformed files fail clearly.
//!
//! The synthetic fixtures are written here the way llama-imatrix writes them
//! (`tools/imatrix/imatrix.cpp`); the real ones in `tests/data/imatrix` were
//! written by llama-imatrix itself (`tests/imatrix/make.sh`).

use crate::common;

use std::path::{Path, PathBuf};

use common::{LegacyFile, LegacyTensor, RawGguf, repo, tiny_model, write_temp};
use quantforge::formats::{ModelFile, OpenOptions};
use quantforge::model::{TensorInfo, Value};
use quantforge::quant::imatrix::{ImatrixError, ImatrixErrorKind, ImatrixFormat, ImportanceMatrix};
use quantforge::types::GgmlType;

// ---------------------------------------------------------------------------
// Writers for both formats.

/// What llama-imatrix has collected for one weight: raw sums of squared
/// activations (`n_per_row` per matrix) and one token count per matrix.
#[derive(Clone)]
struct Stat {
    name: &'static str,
    n_per_row: usize,
    sums: Vec<f32>,
    counts: Vec<i64>,
}

/// The synthetic imatrix: a dense weight, an expert weight with one expert
/// no token reached, and a weight that saw no tokens at all.
fn stats() -> Vec<Stat> {
    let sums = |n: usize, seed: f32| (0..n).map(|i| seed + (i as f32) * 0.37 + (i * i) as f32 * 0.011).collect();
    vec![
        Stat { name: "blk.0.attn_q.weight", n_per_row: 8, sums: sums(8, 1.3), counts: vec![12] },
        Stat { name: "blk.0.ffn_down_exps.weight", n_per_row: 4, sums: sums(12, 1.1), counts: vec![5, 0, 9] },
        Stat { name: "blk.0.ffn_up.weight", n_per_row: 4, sums: vec![0.0; 4], counts: vec![0] },
    ]
}

/// Tokens per chunk of the synthetic run.
const CHUNK_SIZE: i64 = 4;
/// Chunks of the synthetic run (`ceil(max count / CHUNK_SIZE)`).
const CHUNKS: i32 = 3;

/// The legacy bytes llama-imatrix writes for `stats` (entries with no data
/// skipped, `sum/count*ncall` stored, 1 for an expert without data), with a
/// trailer of `trailer` bytes appended.
fn legacy_bytes(stats: &[Stat], trailer: &[u8]) -> Vec<u8> {
    let stored: Vec<&Stat> = stats.iter().filter(|s| s.counts.iter().any(|&c| c != 0)).collect();
    let mut out = (stored.len() as i32).to_le_bytes().to_vec();
    for s in stored {
        out.extend((s.name.len() as i32).to_le_bytes());
        out.extend(s.name.as_bytes());
        let max = *s.counts.iter().max().unwrap();
        let ncall = ((max + CHUNK_SIZE - 1) / CHUNK_SIZE) as i32;
        out.extend(ncall.to_le_bytes());
        out.extend((s.sums.len() as i32).to_le_bytes());
        for (i, &sum) in s.sums.iter().enumerate() {
            let (mut value, mut count) = (sum, s.counts[i / s.n_per_row] as f32);
            if count == 0.0 {
                (value, count) = (1.0, 1.0);
            }
            out.extend(((value / count) * ncall as f32).to_le_bytes());
        }
    }
    out.extend(trailer);
    out
}

/// The standard legacy trailer: chunk count, then the dataset name.
fn legacy_trailer(chunks: i32, dataset: &str) -> Vec<u8> {
    let mut out = chunks.to_le_bytes().to_vec();
    out.extend((dataset.len() as i32).to_le_bytes());
    out.extend(dataset.as_bytes());
    out
}

/// A GGUF imatrix built field by field, so tests can break any part of it.
struct GgufImatrix {
    raw: RawGguf,
    offset: u64,
}

impl GgufImatrix {
    fn new() -> GgufImatrix {
        GgufImatrix { raw: RawGguf::default(), offset: 0 }
    }

    /// The metadata llama-imatrix writes.
    fn standard(datasets: &[&str], chunks: u32, chunk_size: u32) -> GgufImatrix {
        let mut g = GgufImatrix::new();
        g.raw.kv_str("general.type", "imatrix");
        g.datasets(datasets);
        g.raw.kv_u32("imatrix.chunk_count", chunks).kv_u32("imatrix.chunk_size", chunk_size);
        g
    }

    fn datasets(&mut self, names: &[&str]) -> &mut GgufImatrix {
        let mut value = self.raw.u32(8);
        value.extend(self.raw.u64(names.len() as u64));
        for n in names {
            value.extend(self.raw.string(n.as_bytes()));
        }
        self.raw.kv_raw(b"imatrix.datasets", 9, value);
        self
    }

    /// A tensor of `type_id` whose data is `data` (already encoded).
    fn tensor_bytes(&mut self, name: &str, dims: &[u64], type_id: u32, data: &[u8]) -> &mut GgufImatrix {
        self.raw.tensor(name.as_bytes(), dims, type_id, self.offset);
        self.raw.data.extend(data);
        while !self.raw.data.len().is_multiple_of(32) {
            self.raw.data.push(0);
        }
        self.offset = self.raw.data.len() as u64;
        self
    }

    fn tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut GgufImatrix {
        let big = self.raw.big_endian;
        let data: Vec<u8> = values.iter().flat_map(|v| if big { v.to_be_bytes() } else { v.to_le_bytes() }).collect();
        self.tensor_bytes(name, dims, 0, &data)
    }

    /// An entry as llama-imatrix writes it: `in_sum2` `[n_per_row, n_mat]`,
    /// `counts` `[1, n_mat]`.
    fn stat(&mut self, s: &Stat) -> &mut GgufImatrix {
        let n_mat = s.counts.len() as u64;
        let counts: Vec<f32> = s.counts.iter().map(|&c| c as f32).collect();
        self.tensor_f32(&format!("{}.in_sum2", s.name), &[s.n_per_row as u64, n_mat], &s.sums);
        self.tensor_f32(&format!("{}.counts", s.name), &[1, n_mat], &counts)
    }

    fn bytes(&self) -> Vec<u8> {
        self.raw.bytes()
    }
}

fn gguf_bytes(stats: &[Stat]) -> Vec<u8> {
    let mut g = GgufImatrix::standard(&["calibration.txt"], CHUNKS as u32, CHUNK_SIZE as u32);
    for s in stats {
        g.stat(s);
    }
    g.bytes()
}

// ---------------------------------------------------------------------------
// Expectations, computed with llama-quantize's f32 operations.

/// GGUF: each row of sums over its count as f32; 1 where the count is 0.
fn expected_gguf(s: &Stat) -> Vec<f32> {
    let mut out = Vec::new();
    for (row, &count) in s.sums.chunks(s.n_per_row).zip(&s.counts) {
        let count = count as f32;
        out.extend(row.iter().map(|&sum| if count > 0.0 { sum / count } else { 1.0 }));
    }
    out
}

/// Legacy: the stored `(sum/count)*ncall` over `ncall`, both as f32.
fn expected_legacy(s: &Stat) -> Vec<f32> {
    let ncall = ((*s.counts.iter().max().unwrap() + CHUNK_SIZE - 1) / CHUNK_SIZE) as f32;
    let mut out = Vec::new();
    for (row, &count) in s.sums.chunks(s.n_per_row).zip(&s.counts) {
        let count = count as f32;
        out.extend(row.iter().map(|&sum| if count > 0.0 { ((sum / count) * ncall) / ncall } else { 1.0 }));
    }
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn tensor(name: &str, dims: &[u64]) -> TensorInfo {
    TensorInfo::new(name, dims.to_vec(), GgmlType::F16)
}

fn load_bytes(dir: &Path, name: &str, bytes: &[u8]) -> Result<ImportanceMatrix, ImatrixError> {
    ImportanceMatrix::load(&write_temp(dir, name, bytes))
}

fn load_err(dir: &Path, name: &str, bytes: &[u8]) -> ImatrixError {
    match load_bytes(dir, name, bytes) {
        Ok(m) => panic!("{name}: loaded {} entries, expected an error", m.len()),
        Err(e) => e,
    }
}

/// The error's message with the temporary directory taken out.
fn message(e: &ImatrixError, dir: &Path) -> String {
    e.to_string().replace(&format!("{}/", dir.display()), "")
}

// ---------------------------------------------------------------------------
// Synthetic fixtures.

#[test]
fn gguf_weights_are_sums_over_counts() {
    let dir = tempfile::tempdir().unwrap();
    let stats = stats();
    let m = load_bytes(dir.path(), "synthetic.gguf", &gguf_bytes(&stats)).unwrap();
    assert_eq!(m.format(), ImatrixFormat::Gguf);
    assert_eq!(m.names().collect::<Vec<_>>(), stats.iter().map(|s| s.name).collect::<Vec<_>>());
    for s in &stats {
        assert_eq!(bits(m.get(s.name).unwrap()), bits(&expected_gguf(s)), "{}", s.name);
    }
    // By hand: the first value of the dense entry is 1.3 / 12 in f32, and the
    // expert no token reached, and the weight that saw none, get ones.
    let q = m.get("blk.0.attn_q.weight").unwrap();
    assert_eq!(q[0], 1.3f32 / 12.0);
    assert_eq!(q[0].to_bits(), 0x3ddd_dddd);
    let exps = m.get("blk.0.ffn_down_exps.weight").unwrap();
    assert_eq!(exps[0], 1.1f32 / 5.0);
    assert_eq!(&exps[4..8], &[1.0; 4]);
    assert_eq!(exps[8], (1.1f32 + 8.0 * 0.37 + 64.0 * 0.011) / 9.0);
    assert_eq!(m.get("blk.0.ffn_up.weight").unwrap(), &[1.0; 4]);

    assert_eq!(m.datasets().iter().map(|d| d.to_string()).collect::<Vec<_>>(), ["calibration.txt"]);
    assert_eq!(m.chunk_count(), CHUNKS);
    assert_eq!(m.chunk_size(), CHUNK_SIZE as i32);
}

#[test]
fn legacy_weights_undo_ncall() {
    let dir = tempfile::tempdir().unwrap();
    let stats = stats();
    let bytes = legacy_bytes(&stats, &legacy_trailer(CHUNKS, "calibration.txt"));
    let m = load_bytes(dir.path(), "synthetic.dat", &bytes).unwrap();
    assert_eq!(m.format(), ImatrixFormat::Legacy);
    // llama-imatrix leaves out the weight that saw no tokens.
    assert_eq!(m.names().collect::<Vec<_>>(), ["blk.0.attn_q.weight", "blk.0.ffn_down_exps.weight"]);
    for s in &stats[..2] {
        assert_eq!(bits(m.get(s.name).unwrap()), bits(&expected_legacy(s)), "{}", s.name);
    }
    // ncall is 3 (9 tokens in chunks of 4) for the expert entry, whose counts
    // 5 and 9 are not multiples of it, so `x*3/3` rounds away from the GGUF
    // weight `x` for some values: the fixture tells the two paths apart.
    let g = expected_gguf(&stats[1]);
    let l = m.get("blk.0.ffn_down_exps.weight").unwrap();
    assert!(g.iter().zip(l).any(|(a, b)| a != b), "the fixture should exercise rounding");
    assert!(g.iter().zip(l).all(|(a, b)| (a - b).abs() <= a.abs() * 2.0 * f32::EPSILON));

    assert_eq!(m.datasets().iter().map(|d| d.to_string()).collect::<Vec<_>>(), ["calibration.txt"]);
    assert_eq!(m.chunk_count(), CHUNKS);
    assert_eq!(m.chunk_size(), 0);
}

#[test]
fn legacy_ncall_of_zero_keeps_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = 1i32.to_le_bytes().to_vec();
    bytes.extend(1i32.to_le_bytes());
    bytes.extend(b"w");
    bytes.extend(0i32.to_le_bytes()); // ncall
    bytes.extend(2i32.to_le_bytes());
    bytes.extend(0.5f32.to_le_bytes());
    bytes.extend(7.25f32.to_le_bytes());
    let m = load_bytes(dir.path(), "zero-ncall", &bytes).unwrap();
    assert_eq!(m.get("w").unwrap(), &[0.5, 7.25]);
    assert!(m.datasets().is_empty());
    assert_eq!(m.chunk_count(), 0);
}

#[test]
fn format_comes_from_magic_bytes_not_extension() {
    let dir = tempfile::tempdir().unwrap();
    let stats = stats();
    let m = load_bytes(dir.path(), "really-gguf.dat", &gguf_bytes(&stats)).unwrap();
    assert_eq!(m.format(), ImatrixFormat::Gguf);
    let m = load_bytes(dir.path(), "really-legacy.gguf", &legacy_bytes(&stats, &[])).unwrap();
    assert_eq!(m.format(), ImatrixFormat::Legacy);
}

#[test]
fn big_endian_gguf_loads_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let stats = stats();
    let mut g = GgufImatrix::new();
    g.raw.big_endian = true;
    g.datasets(&["calibration.txt"]);
    g.raw.kv_u32("imatrix.chunk_count", 3).kv_u32("imatrix.chunk_size", 4);
    for s in &stats {
        g.stat(s);
    }
    let big = load_bytes(dir.path(), "big.gguf", &g.bytes()).unwrap();
    let little = load_bytes(dir.path(), "little.gguf", &gguf_bytes(&stats)).unwrap();
    for s in &stats {
        assert_eq!(bits(big.get(s.name).unwrap()), bits(little.get(s.name).unwrap()));
    }
}

#[test]
fn gguf_counts_round_like_lround() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GgufImatrix::standard(&[], 1, 1);
    // 2.5 rounds away from zero to 3; 0.4 rounds to 0 (no data); -1 is no data;
    // NaN becomes i64::MIN through lroundf on x86-64: no data either.
    for (i, count) in [2.5f32, 0.4, -1.0, f32::NAN].into_iter().enumerate() {
        g.tensor_f32(&format!("w{i}.in_sum2"), &[2], &[6.0, 1.5]);
        g.tensor_f32(&format!("w{i}.counts"), &[1], &[count]);
    }
    let m = load_bytes(dir.path(), "rounding.gguf", &g.bytes()).unwrap();
    assert_eq!(m.get("w0").unwrap(), &[2.0, 0.5]);
    for name in ["w1", "w2", "w3"] {
        assert_eq!(m.get(name).unwrap(), &[1.0, 1.0], "{name}");
    }
    // No datasets in the array: nothing to record.
    assert!(m.datasets().is_empty());
}

#[test]
fn lookup_validates_against_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let m = load_bytes(dir.path(), "synthetic.gguf", &gguf_bytes(&stats())).unwrap();
    // An expert tensor is [n_per_row, rows, n_experts]: one slice per expert.
    let exps = m.weights_for(&tensor("blk.0.ffn_down_exps.weight", &[4, 6, 3])).unwrap().unwrap();
    assert_eq!(exps.len(), 12);
    assert_eq!(exps.chunks(4).nth(1).unwrap(), &[1.0; 4]);
    assert!(m.weights_for(&tensor("blk.0.attn_q.weight", &[8, 8])).unwrap().is_some());
    assert!(m.weights_for(&tensor("blk.0.attn_k.weight", &[8, 8])).unwrap().is_none());

    let e = m.weights_for(&tensor("blk.0.ffn_down_exps.weight", &[4, 6, 2])).unwrap_err();
    assert_eq!(
        message(&e, dir.path()),
        "synthetic.gguf: imatrix entry `blk.0.ffn_down_exps.weight` has 12 values, but the tensor needs 8 \
         (4 per row x 2 experts): was the imatrix computed for another model?"
    );
    assert!(matches!(e.kind, ImatrixErrorKind::SizeMismatch { found: 12, expected: 8, .. }));

    let e = m.check_names(&[tensor("blk.0.attn_q.weight", &[8, 8])]).unwrap_err();
    assert_eq!(
        message(&e, dir.path()),
        "synthetic.gguf: 2 imatrix entries name no tensor of the model (the first: `blk.0.ffn_down_exps.weight`, \
         `blk.0.ffn_up.weight`): was the imatrix computed for another model?"
    );
}

#[test]
fn filtering_and_output_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_temp(dir.path(), "synthetic.gguf", &gguf_bytes(&stats()));
    let mut m = ImportanceMatrix::load(&path).unwrap();
    m.filter(&[], &["ffn_up".into()]);
    assert_eq!(m.len(), 2);
    let md = m.output_metadata();
    assert_eq!(
        md,
        vec![
            ("quantize.imatrix.file", Value::string(path.to_str().unwrap())),
            ("quantize.imatrix.dataset", Value::string("calibration.txt")),
            ("quantize.imatrix.entries_count", Value::U32(2)),
            ("quantize.imatrix.chunks_count", Value::U32(3)),
        ]
    );
    m.filter(&["exps".into()], &[]);
    assert_eq!(m.names().collect::<Vec<_>>(), ["blk.0.ffn_down_exps.weight"]);
    m.filter(&["attn".into()], &[]);
    assert!(m.is_empty());
    assert!(m.output_metadata().is_empty());
}

#[test]
fn non_finite_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GgufImatrix::standard(&["d"], 1, 1);
    g.tensor_f32("bad.in_sum2", &[2], &[1.0, f32::INFINITY]);
    g.tensor_f32("bad.counts", &[1], &[2.0]);
    g.tensor_f32("good.in_sum2", &[1], &[1.0]);
    g.tensor_f32("good.counts", &[1], &[2.0]);
    let mut m = load_bytes(dir.path(), "inf.gguf", &g.bytes()).unwrap();
    let e = m.check_finite().unwrap_err();
    assert_eq!(message(&e, dir.path()), "inf.gguf: imatrix entry `bad` holds the non-finite value inf at index 1");
    m.filter(&[], &["bad".into()]);
    m.check_finite().unwrap();
}

#[test]
fn legacy_quirks_match_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let entry = |name: &[u8], ncall: i32, values: &[f32]| {
        let mut out = (name.len() as i32).to_le_bytes().to_vec();
        out.extend(name);
        out.extend(ncall.to_le_bytes());
        out.extend((values.len() as i32).to_le_bytes());
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        out
    };
    // Names end at a NUL (llama.cpp reads them as C strings); a repeated
    // name replaces the earlier entry.
    let mut bytes = 3i32.to_le_bytes().to_vec();
    bytes.extend(entry(b"a.weight\0junk", 2, &[4.0]));
    bytes.extend(entry(b"b.weight", 1, &[1.0]));
    bytes.extend(entry(b"a.weight", 4, &[4.0, 8.0]));
    let base = bytes.len();

    // No trailer, a 2-byte chunk count (kept as far as it goes), a dataset
    // name longer than the file (dropped), one with a NUL (cut).
    let cases: [(&[u8], i32, &[&str]); 5] = [
        (&[], 0, &[]),
        (&[7, 1], 0x107, &[]),
        (&[5, 0, 0, 0, 100, 0, 0, 0, b'x'], 5, &[]),
        (&[5, 0, 0, 0, 3, 0, 0, 0, b'a', 0, b'b', b'!', b'!'], 5, &["a"]),
        (&[9, 0, 0, 0, 0, 0, 0, 0], 9, &[]),
    ];
    for (trailer, chunks, datasets) in cases {
        bytes.truncate(base);
        bytes.extend(trailer);
        let m = load_bytes(dir.path(), "quirks.dat", &bytes).unwrap();
        assert_eq!(m.names().collect::<Vec<_>>(), ["a.weight", "b.weight"]);
        assert_eq!(m.get("a.weight").unwrap(), &[1.0, 2.0]);
        assert_eq!(m.chunk_count(), chunks, "{trailer:?}");
        assert_eq!(m.datasets().iter().map(|d| d.to_string()).collect::<Vec<_>>(), datasets, "{trailer:?}");
    }
}

// ---------------------------------------------------------------------------
// Real files from llama-imatrix.

fn real(format: &str) -> PathBuf {
    repo().join(format!("tests/data/imatrix/tiny-llama.imatrix.{format}"))
}

#[test]
fn real_imatrix_formats_agree() {
    let gguf = ImportanceMatrix::load(&real("gguf")).unwrap();
    let legacy = ImportanceMatrix::load(&real("dat")).unwrap();
    assert_eq!(gguf.format(), ImatrixFormat::Gguf);
    assert_eq!(legacy.format(), ImatrixFormat::Legacy);
    assert_eq!(gguf.names().collect::<Vec<_>>(), legacy.names().collect::<Vec<_>>());
    assert_eq!(gguf.len(), 15); // 7 matrices in each of 2 blocks, and output.weight
    for m in [&gguf, &legacy] {
        assert_eq!(m.datasets().iter().map(|d| d.to_string()).collect::<Vec<_>>(), ["text.txt"]);
        assert_eq!(m.chunk_count(), 3);
    }
    assert_eq!(gguf.chunk_size(), 64);

    // Every entry saw 3 chunks of 64 tokens, so the legacy file stores
    // `sum/192*3` and llama-quantize divides that by 3: the GGUF weight
    // through `*3/3` in f32. For a weight that is itself a rounded third
    // (`sum/192`) that gives back the same float, so both formats agree.
    for name in gguf.names() {
        let (g, l) = (gguf.get(name).unwrap(), legacy.get(name).unwrap());
        let through_legacy: Vec<f32> = g.iter().map(|&w| (w * 3.0) / 3.0).collect();
        assert_eq!(bits(l), bits(&through_legacy), "{name}");
        assert_eq!(bits(l), bits(g), "{name}");
    }

    // Both fit the model they were computed on.
    let model = ModelFile::open(&tiny_model(), OpenOptions::default()).unwrap();
    for m in [&gguf, &legacy] {
        m.check_names(&model.tensors).unwrap();
        m.check_finite().unwrap();
        let used = model.tensors.iter().filter(|t| m.weights_for(t).unwrap().is_some()).count();
        assert_eq!(used, 15);
    }
    let q = model.tensors.iter().find(|t| t.name == "blk.0.attn_q.weight").unwrap();
    assert_eq!(gguf.weights_for(q).unwrap().unwrap().len(), 256);
}

#[test]
fn real_gguf_weights_are_sums_over_counts() {
    // Read the raw tensors with the container reader and redo the division.
    let model = ModelFile::open(&real("gguf"), OpenOptions::default()).unwrap();
    let m = ImportanceMatrix::load(&real("gguf")).unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        let t = model.tensors.iter().find(|t| t.name == name).unwrap();
        model.tensor_data(t).unwrap().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    for name in m.names() {
        let sums = f32s(&format!("{name}.in_sum2"));
        let counts = f32s(&format!("{name}.counts"));
        assert_eq!(counts, [192.0], "{name}");
        let expected: Vec<f32> = sums.iter().map(|&s| s / 192.0).collect();
        assert_eq!(bits(m.get(name).unwrap()), bits(&expected), "{name}");
    }
}

#[test]
fn an_imatrix_for_another_model_is_refused() {
    let gguf = ImportanceMatrix::load(&real("gguf")).unwrap();
    // A model whose matrices are twice as wide.
    let wide = tensor("blk.0.attn_q.weight", &[512, 256]);
    let e = gguf.weights_for(&wide).unwrap_err();
    assert!(e.to_string().contains("has 256 values, but the tensor needs 512"), "{e}");
    // A model without these tensors at all.
    let e = gguf.check_names(&[tensor("model.layers.0.q_proj", &[256, 256])]).unwrap_err();
    assert!(matches!(e.kind, ImatrixErrorKind::UnknownTensors { count: 15, .. }), "{e}");
}

// ---------------------------------------------------------------------------
// Malformed files.

#[test]
fn every_truncation_of_a_legacy_file_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let entries = legacy_bytes(&stats(), &[]);
    let full = legacy_bytes(&stats(), &legacy_trailer(CHUNKS, "calibration.txt"));
    for len in 0..full.len() {
        let result = load_bytes(dir.path(), "cut.dat", &full[..len]);
        // The trailer is optional: cuts inside it still load, as in llama.cpp.
        assert_eq!(result.is_ok(), len >= entries.len(), "cut at {len}: {:?}", result.err());
    }
    // Too short for the entries it claims: refused before reading them.
    let e = load_err(dir.path(), "cut.dat", &full[..30]);
    assert_eq!(
        message(&e, dir.path()),
        "cut.dat: at byte 0: the entry count claims 2 entries, but only 26 bytes remain (each needs at least 16)"
    );
    let e = load_err(dir.path(), "cut.dat", &full[..99]);
    assert_eq!(
        message(&e, dir.path()),
        "cut.dat: at byte 97: file ends early: the call count of entry 2 (`blk.0.ffn_down_exps.weight`) needs 4 bytes, \
         2 left"
    );
    let e = load_err(dir.path(), "cut.dat", &full[..45]);
    assert_eq!(
        message(&e, dir.path()),
        "cut.dat: at byte 35: file ends early: the values of entry 1 (`blk.0.attn_q.weight`) needs 32 bytes, 10 left"
    );
}

#[test]
fn malformed_legacy_files() {
    let dir = tempfile::tempdir().unwrap();
    let header = |n_entries: i32, name_len: i32, name: &[u8], ncall: i32, nval: i32| {
        let mut out = n_entries.to_le_bytes().to_vec();
        out.extend(name_len.to_le_bytes());
        out.extend(name);
        out.extend(ncall.to_le_bytes());
        out.extend(nval.to_le_bytes());
        out.extend([0u8; 16]);
        out
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "at byte 0: file ends early: the entry count needs 4 bytes, 0 left"),
        (
            "zero entries",
            0i32.to_le_bytes().to_vec(),
            "at byte 0: no importance data: the entry count is 0 (expected at least 1)",
        ),
        (
            "negative entries",
            (-3i32).to_le_bytes().to_vec(),
            "at byte 0: no importance data: the entry count is -3 (expected at least 1)",
        ),
        (
            "absurd entry count",
            header(i32::MAX, 1, b"w", 1, 1),
            "at byte 0: the entry count claims 2147483647 entries, but only 29 bytes remain (each needs at least 16)",
        ),
        (
            "negative name length",
            header(1, -1, b"", 1, 1),
            "at byte 4: the name length of entry 1 is -1 (expected 0 or more)",
        ),
        (
            "absurd name length",
            header(1, i32::MAX, b"", 1, 1),
            "at byte 8: file ends early: the name of entry 1 needs 2147483647 bytes, 24 left",
        ),
        (
            "name not UTF-8",
            header(1, 2, b"\xff\xfe", 1, 1),
            "at byte 8: invalid entry name: the name of entry 1 is not valid UTF-8",
        ),
        (
            "zero values",
            header(1, 1, b"w", 1, 0),
            "at byte 13: the value count of entry 1 (`w`) is 0 (expected 1 or more)",
        ),
        (
            "absurd value count",
            header(1, 1, b"w", 1, i32::MAX),
            "at byte 17: file ends early: the values of entry 1 (`w`) needs 8589934588 bytes, 16 left",
        ),
    ];
    for (what, bytes, expected) in cases {
        let e = load_err(dir.path(), "bad.dat", &bytes);
        assert_eq!(message(&e, dir.path()), format!("bad.dat: {expected}"), "{what}");
    }
}

#[test]
fn model_files_are_not_importance_matrices() {
    let dir = tempfile::tempdir().unwrap();
    let ggjt = LegacyFile {
        magic: *b"tjgg",
        version: 3,
        hparams: [4, 32, 1, 1, 1, 32, 0],
        vocab: (0..4).map(|i| (vec![b'a' + i], 0.0)).collect(),
        tensors: vec![LegacyTensor { name: "w".into(), dims: vec![32], type_id: 0, data: vec![0; 128] }],
    };
    let e = load_err(dir.path(), "model.bin", &ggjt.bytes());
    assert_eq!(message(&e, dir.path()), "model.bin: this is a GGJT model file, not an importance matrix");

    // A GGUF model has no imatrix metadata.
    let e = ImportanceMatrix::load(&tiny_model()).unwrap_err();
    assert!(
        e.to_string().ends_with(
            "tiny-llama.gguf: missing imatrix metadata (no `imatrix.datasets`, `imatrix.chunk_count`, \
             `imatrix.chunk_size`): this GGUF file is not an importance matrix from llama-imatrix"
        ),
        "{e}"
    );
}

#[test]
fn malformed_gguf_imatrices() {
    let dir = tempfile::tempdir().unwrap();
    let std = || GgufImatrix::standard(&["d"], 1, 1);
    let mut cases: Vec<(&str, Vec<u8>, String)> = Vec::new();

    cases.push(("no tensors", std().bytes(), "no importance data: the tensor count is 0 (expected at least 1)".into()));

    let mut g = std();
    g.tensor_f32("w.in_sum2", &[2], &[1.0, 2.0]);
    cases.push(("sums alone", g.bytes(), "entry `w` has a `w.in_sum2` tensor but no `w.counts` tensor".into()));

    let mut g = std();
    g.tensor_f32("w.counts", &[1], &[1.0]);
    cases.push(("counts alone", g.bytes(), "entry `w` has a `w.counts` tensor but no `w.in_sum2` tensor".into()));

    let mut g = std();
    g.tensor_bytes("w.in_sum2", &[2], 1, &[0; 4]);
    g.tensor_f32("w.counts", &[1], &[1.0]);
    cases.push(("F16 sums", g.bytes(), "tensor `w.in_sum2` has type F16; imatrix sums and counts must be F32".into()));

    let mut g = std();
    g.tensor_f32("w.in_sum2", &[2], &[1.0, 2.0]);
    g.tensor_bytes("w.counts", &[1], 24, &[1]);
    cases.push(("I8 counts", g.bytes(), "tensor `w.counts` has type I8; imatrix sums and counts must be F32".into()));

    let mut g = std();
    g.tensor_f32("w.in_sum2", &[2], &[1.0, 2.0]);
    g.tensor_f32("w.counts", &[1, 0], &[]);
    cases.push(("no counts", g.bytes(), "tensor `w.counts` has no elements; an entry needs at least one count".into()));

    let mut g = std();
    g.tensor_f32("w.in_sum2", &[5], &[1.0; 5]);
    g.tensor_f32("w.counts", &[1, 2], &[1.0, 1.0]);
    cases.push((
        "ragged sums",
        g.bytes(),
        "entry `w` has 5 sums for 2 counts; the sums must be a whole number of rows per count (expected a multiple of 2)"
            .into(),
    ));

    let mut g = GgufImatrix::new();
    g.datasets(&["d"]);
    g.raw.kv_str("imatrix.chunk_count", "3").kv_u32("imatrix.chunk_size", 1);
    g.tensor_f32("w.in_sum2", &[1], &[1.0]).tensor_f32("w.counts", &[1], &[1.0]);
    cases.push((
        "string chunk count",
        g.bytes(),
        "metadata key `imatrix.chunk_count` has type str, expected u32".into(),
    ));

    let mut g = GgufImatrix::new();
    g.raw.kv_u32("imatrix.chunk_count", 3).kv_u32("imatrix.chunk_size", 1);
    g.tensor_f32("w.in_sum2", &[1], &[1.0]).tensor_f32("w.counts", &[1], &[1.0]);
    cases.push((
        "no datasets key",
        g.bytes(),
        "missing imatrix metadata (no `imatrix.datasets`): this GGUF file is not an importance matrix from llama-imatrix"
            .into(),
    ));

    for (what, bytes, expected) in cases {
        let e = load_err(dir.path(), "bad.gguf", &bytes);
        assert_eq!(message(&e, dir.path()), format!("bad.gguf: {expected}"), "{what}");
    }

    // Container errors keep the reader's offset and message.
    let mut g = std();
    g.tensor_f32("w.in_sum2", &[1], &[1.0]).tensor_f32("w.counts", &[1], &[1.0]);
    g.raw.n_tensors = Some(u64::MAX);
    let e = load_err(dir.path(), "bad.gguf", &g.bytes());
    assert!(matches!(e.kind, ImatrixErrorKind::Format(_)) && e.offset.is_some(), "{e}");
}

#[test]
fn every_truncation_of_a_gguf_imatrix_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let full = gguf_bytes(&stats());
    assert!(load_bytes(dir.path(), "full.gguf", &full).is_ok());
    // The last tensor (4 bytes of counts) is followed by 28 bytes of padding,
    // which a reader need not see.
    let data_end = full.len() - 28;
    for len in 0..full.len() {
        let result = load_bytes(dir.path(), "cut.gguf", &full[..len]);
        assert_eq!(result.is_ok(), len >= data_end, "cut at {len}: {:?}", result.err());
    }
    // Cut inside the magic it is no GGUF file, and reads as a short legacy one.
    let e = load_err(dir.path(), "cut.gguf", &full[..3]);
    assert_eq!(message(&e, dir.path()), "cut.gguf: at byte 0: file ends early: the entry count needs 4 bytes, 3 left");
}

// ---------------------------------------------------------------------------
// llama-quantize itself, when the reference build is there.

/// llama-quantize accepts both real files, and writes the same
/// `quantize.imatrix.*` keys, in the same order, as `output_metadata` says,
/// also after `--exclude-weights`.
#[test]
fn output_metadata_matches_llama_quantize() {
    let Some(bin) = common::llama_quantize() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 2] = [("gguf", &[]), ("dat", &["ffn_", "output"])];
    for (format, exclude) in cases {
        // Relative, as a user would type it: the path is recorded as given.
        let imatrix = format!("tests/data/imatrix/tiny-llama.imatrix.{format}");
        let out = dir.path().join(format!("q4_k-{format}.gguf"));
        let mut cmd = std::process::Command::new(&bin);
        cmd.current_dir(repo()).arg("--imatrix").arg(&imatrix);
        for e in exclude {
            cmd.args(["--exclude-weights", e]);
        }
        cmd.arg(tiny_model()).arg(&out).args(["Q4_K", "2"]);
        let output = cmd.output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

        let mut m = ImportanceMatrix::load(Path::new(&imatrix)).unwrap();
        m.filter(&[], &exclude.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        // Substrings: `output` takes the two `attn_output` entries too.
        assert_eq!(m.len(), if exclude.is_empty() { 15 } else { 15 - 6 - 2 - 1 });
        let ours = m.output_metadata();
        let quantized = ModelFile::open(&out, OpenOptions::default()).unwrap();
        let theirs: Vec<(&str, &Value)> =
            quantized.metadata.iter().filter(|(k, _)| k.starts_with("quantize.")).collect();
        assert_eq!(theirs, ours.iter().map(|(k, v)| (*k, v)).collect::<Vec<_>>(), "{format}");
        // ... and last, as gguf's setters append them.
        let tail: Vec<&str> =
            quantized.metadata.iter().map(|(k, _)| k).skip(quantized.metadata.len() - ours.len()).collect();
        assert_eq!(tail, ours.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    }
}
