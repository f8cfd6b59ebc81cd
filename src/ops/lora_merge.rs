//! `lora-merge`: GGUF LoRA adapters (as `convert-lora` writes them) merged
//! into a base model as `llama-export-lora` merges them, byte for byte: each
//! targeted weight `W + Σ scale·alpha/r · B·A` in f32 with the rounding order
//! of the reference build's matrix product, written F32 where the base's is
//! F32 and F16 otherwise; every other tensor the base's own, under its own
//! key, so what follows a merge re-encodes only what an adapter touched.
//! The reference's arithmetic: `docs/notes/lora-merge-reference.md`.

use rayon::prelude::*;

use crate::artifact::{HeaderEnd, LoraDelta, Tensor, TensorData, TensorSet};
use crate::key::KeyBuilder;
use crate::model::{Endian, Value};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, ParamValue, Params};
use crate::text::Name;
use crate::types::GgmlType;

pub const SPEC: OpSpec =
    OpSpec::new("lora-merge", 1, &[ParamSpec::optional("scale", ParamKind::Table)]).with_many_inputs();

/// The arithmetic's version, in every merged tensor's key.
const MERGE_VERSION: u64 = 1;

/// `llama-export-lora`'s `general.file_type` for every merge (`MOSTLY_F16`).
const MERGED_FILE_TYPE: u32 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct LoraMergeOptions {
    /// A user scale per adapter, by the name it is taken `from` (default 1).
    pub scales: Vec<(String, f32)>,
}

impl LoraMergeOptions {
    pub fn from_params(p: &Params) -> Result<LoraMergeOptions, Vec<Diagnostic>> {
        let mut scales = Vec::new();
        for (name, param) in p.table("scale") {
            let scale = match param.value {
                ParamValue::Float(v) => v as f32,
                ParamValue::Int(v) => v as f32,
                _ => return Err(vec![p.error("scale", format!("`{name}`'s scale is not a number"))]),
            };
            if !scale.is_finite() {
                return Err(vec![p.error("scale", format!("`{name}`'s scale is not finite"))]);
            }
            scales.push((name.to_owned(), scale));
        }
        Ok(LoraMergeOptions { scales })
    }

    pub fn key_params(&self) -> serde_json::Value {
        let scales: serde_json::Map<String, serde_json::Value> =
            self.scales.iter().map(|(name, scale)| (name.clone(), scale.to_bits().into())).collect();
        serde_json::json!({ "scale": scales })
    }

    /// The scale given to the adapter taken from `name`.
    pub fn scale_of(&self, name: &str) -> f32 {
        self.scales.iter().find(|(n, _)| n == name).map_or(1.0, |&(_, s)| s)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoraMergeError {
    #[error("`lora-merge` takes the base model first and then one or more adapters")]
    NoAdapter,
    #[error("{0}: a split model is not merged into (merge its shards first)")]
    SplitBase(String),
    #[error("adapter {adapter}: {problem}")]
    NotAnAdapter { adapter: String, problem: String },
    #[error(
        "the adapters do not hold the same tensors (`{}` is in {first} only); merge them one at a time, as \
         llama-export-lora asks",
        Name(.tensor)
    )]
    DifferentTensors { tensor: String, first: String },
    #[error("adapter {adapter}: `{}` has no tensor of that name in the base model", Name(.tensor))]
    MissingBase { adapter: String, tensor: String },
    #[error("adapter {adapter}: `{}` has only one of its lora_a and lora_b", Name(.tensor))]
    Unpaired { adapter: String, tensor: String },
    #[error(
        "adapter {adapter}: tensor `{}` is {base:?} in the base, but its lora_a is {a:?} and lora_b {b:?} ({})",
        Name(.tensor),
        if *.token_embedding {
            "a token embedding's lora_a [rank, vocabulary], lora_b [rank, width] for a base [width, vocabulary]"
        } else {
            "lora_a [in, rank], lora_b [rank, out] for a base [in, out], each with the expert count last for experts"
        }
    )]
    Shape { adapter: String, tensor: String, base: Vec<u64>, a: Vec<u64>, b: Vec<u64>, token_embedding: bool },
    #[error(
        "adapter {adapter}: `{}` is {ty}: quantized adapters are not merged (convert the adapter with --outtype \
         f16 or f32), as llama-export-lora refuses them",
        Name(.tensor)
    )]
    Quantized { adapter: String, tensor: String, ty: &'static str },
}

/// One adapter: its tensors, its name and scale.
pub struct MergedAdapter<'a> {
    pub name: String,
    pub set: &'a TensorSet,
    pub scale: f32,
}

impl MergedAdapter<'_> {
    fn index(&self, name: &str) -> Option<usize> {
        self.set.tensors.iter().position(|t| t.name == name)
    }

    fn refuse(&self, problem: impl Into<String>) -> LoraMergeError {
        LoraMergeError::NotAnAdapter { adapter: self.name.clone(), problem: problem.into() }
    }

    /// `adapter.lora.alpha`, 0 when absent (the scale is then the user's alone).
    fn alpha(&self) -> f32 {
        match self.set.metadata.get("adapter.lora.alpha") {
            Some(Value::F32(alpha)) => *alpha,
            _ => 0.0,
        }
    }
}

/// The base `base` with `adapters` merged in: every adapter checked
/// against the base here, before any work; each targeted tensor's values
/// computed as it is written ([`TensorData::Merged`], [`add_delta`]).
pub fn apply(base: &TensorSet, adapters: &[MergedAdapter<'_>]) -> Result<TensorSet, LoraMergeError> {
    if adapters.is_empty() {
        return Err(LoraMergeError::NoAdapter);
    }
    if base.metadata.get("split.count").is_some() {
        return Err(LoraMergeError::SplitBase("the base".into()));
    }
    let arch = base.metadata.get("general.architecture").and_then(Value::as_str);
    for adapter in adapters {
        let text = |key: &str| adapter.set.metadata.get(key).and_then(Value::as_str);
        if text("general.type") != Some("adapter") || text("adapter.type") != Some("lora") {
            return Err(adapter.refuse("not a LoRA adapter (general.type `adapter`, adapter.type `lora`)"));
        }
        if text("general.architecture") != arch {
            return Err(adapter.refuse(format!(
                "an adapter for `{}`, where the base is `{}`",
                text("general.architecture").unwrap_or("?"),
                arch.unwrap_or("?")
            )));
        }
        for tensor in &adapter.set.tensors {
            let Some(stem) = tensor.name.strip_suffix(".lora_a").or_else(|| tensor.name.strip_suffix(".lora_b")) else {
                continue;
            };
            if !base.tensors.iter().any(|t| t.name == stem) {
                return Err(LoraMergeError::MissingBase { adapter: adapter.name.clone(), tensor: stem.to_owned() });
            }
        }
    }
    let (first, rest) = adapters.split_first().expect("not empty");
    for other in rest {
        let differs = |a: &MergedAdapter<'_>, b: &MergedAdapter<'_>| {
            a.set.tensors.iter().find(|t| b.index(&t.name).is_none()).map(|t| (t.name.clone(), a.name.clone()))
        };
        if let Some((tensor, first)) = differs(first, other).or_else(|| differs(other, first)) {
            return Err(LoraMergeError::DifferentTensors { tensor, first });
        }
    }
    let mut order: Vec<&Tensor> = base.tensors.iter().collect();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    let mut tensors = Vec::with_capacity(order.len());
    for tensor in order {
        let mut deltas = Vec::new();
        for adapter in adapters {
            let a = adapter.index(&format!("{}.lora_a", tensor.name));
            let b = adapter.index(&format!("{}.lora_b", tensor.name));
            match (a, b) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    deltas.push(delta(tensor, adapter, &adapter.set.tensors[a], &adapter.set.tensors[b])?)
                }
                _ => {
                    return Err(LoraMergeError::Unpaired {
                        adapter: adapter.name.clone(),
                        tensor: tensor.name.clone(),
                    });
                }
            }
        }
        tensors.push(if deltas.is_empty() { tensor.clone() } else { merged(tensor, deltas) });
    }
    let mut metadata = base.metadata.clone();
    // Set as gguf_set_val_u32 sets it: removed, then appended.
    metadata.remove("general.file_type");
    metadata.set("general.file_type", Value::U32(MERGED_FILE_TYPE));
    Ok(TensorSet { endian: Endian::Little, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None })
}

/// `adapter`'s pair (`lora_a`, `lora_b`) on `tensor`, checked against it.
fn delta(
    tensor: &Tensor,
    adapter: &MergedAdapter<'_>,
    lora_a: &Tensor,
    lora_b: &Tensor,
) -> Result<LoraDelta, LoraMergeError> {
    for half in [lora_a, lora_b] {
        if half.ggml_type.is_quantized() {
            return Err(LoraMergeError::Quantized {
                adapter: adapter.name.clone(),
                tensor: half.name.clone(),
                ty: half.ggml_type.name(),
            });
        }
    }
    let token_embedding = is_token_embedding(&tensor.name);
    let shape_error = || LoraMergeError::Shape {
        adapter: adapter.name.clone(),
        tensor: tensor.name.clone(),
        base: tensor.dims.clone(),
        a: lora_a.dims.clone(),
        b: lora_b.dims.clone(),
        token_embedding,
    };
    let (base, a, b) = (tensor.dims.as_slice(), lora_a.dims.as_slice(), lora_b.dims.as_slice());
    let fits = match (token_embedding, base, a, b) {
        (true, &[width, vocab], &[rank, a_vocab], &[b_rank, b_width]) => {
            (a_vocab, b_width, b_rank) == (vocab, width, rank)
        }
        // A stack of experts: a pair per expert, the expert count last.
        (
            false,
            &[n_in, n_out, ref experts @ ..],
            &[a_in, rank, ref a_experts @ ..],
            &[b_rank, b_out, ref b_experts @ ..],
        ) => {
            experts.len() <= 1
                && (a_in, b_out, b_rank) == (n_in, n_out, rank)
                && a_experts == experts
                && b_experts == experts
        }
        _ => false,
    };
    let rank = b[0];
    if !fits || rank == 0 {
        return Err(shape_error());
    }
    let alpha = adapter.alpha();
    let scale = if alpha != 0.0 { adapter.scale * alpha / rank as f32 } else { adapter.scale };
    Ok(LoraDelta { a: lora_a.clone(), b: lora_b.clone(), scale_bits: scale.to_bits(), token_embedding })
}

/// llama-export-lora's test for the token embedding, whose A is stored
/// transposed.
fn is_token_embedding(name: &str) -> bool {
    name.starts_with("token_embd")
}

/// The merged tensor: F32 where the base's is F32, else F16, keyed by
/// the base tensor's key, each half's and each scale.
fn merged(tensor: &Tensor, deltas: Vec<LoraDelta>) -> Tensor {
    let mut key = KeyBuilder::new("tensor.lora-merge");
    key.u64(MERGE_VERSION).key(&tensor.key);
    for delta in &deltas {
        key.key(&delta.a.key).key(&delta.b.key).u64(u64::from(delta.scale_bits));
    }
    let ggml_type = if tensor.ggml_type == GgmlType::F32 { GgmlType::F32 } else { GgmlType::F16 };
    key.str(ggml_type.name());
    Tensor {
        name: tensor.name.clone(),
        dims: tensor.dims.clone(),
        ggml_type,
        key: key.finish(),
        data: TensorData::Merged { base: Box::new(tensor.clone()), deltas },
    }
}

/// Rows of a slab given to one task: enough to share out, few enough that
/// the columns of A a task walks stay in cache across its rows.
const TASK_ROWS: usize = 16;

/// Adds `scale · B·A` to `rows` (f32, `n_in` values each, where A is
/// `rank` rows of `n_in` values): `b` holds the same rows of B (`rank`
/// values each). Each value gets `dot · scale` rounded, then added, with
/// the dot product in the reference build's order ([`ordered_dot`]).
pub fn add_delta(rows: &mut [f32], a: &[f32], b: &[f32], rank: usize, scale: f32) {
    assert!(rank > 0 && a.len().is_multiple_of(rank), "A is rank rows");
    let n_in = a.len() / rank;
    assert!(rows.len() / n_in.max(1) * rank == b.len(), "a row of B for each row");
    if n_in == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if rank.is_multiple_of(8)
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        let (packed, tail) = (columns_side_by_side::pack(a, rank), columns(a, n_in, n_in & !7..n_in));
        rows.par_chunks_mut(n_in * TASK_ROWS).zip(b.par_chunks(rank * TASK_ROWS)).for_each(|(rows, b)| {
            // SAFETY: the CPU has AVX2 and FMA, checked just now; A is packed, the shapes were asserted.
            unsafe { columns_side_by_side::add_delta(rows, n_in, &packed, b, rank, scale) };
            add_delta_by_column(rows, &tail, n_in & !7, b, rank, scale);
        });
        return;
    }
    let all = columns(a, n_in, 0..n_in);
    rows.par_chunks_mut(n_in * TASK_ROWS)
        .zip(b.par_chunks(rank * TASK_ROWS))
        .for_each(|(rows, b)| add_delta_by_column(rows, &all, 0, b, rank, scale));
}

/// A token embedding's delta added to `rows` (`width` values each): the
/// rows' own `rank` values are rows of `lora_a` (`a_rows`), each value's
/// column a row of `lora_b` (`b`, `width` rows of `rank`), as
/// llama-export-lora multiplies them.
pub fn add_embedding_delta(rows: &mut [f32], a_rows: &[f32], b: &[f32], rank: usize, scale: f32) {
    add_delta(rows, &columns(b, rank, 0..rank), a_rows, rank, scale);
}

/// Columns `range` of `m` (rows of `n` values), each as a row of the
/// column's values.
fn columns(m: &[f32], n: usize, range: std::ops::Range<usize>) -> Vec<f32> {
    let rows = m.len() / n.max(1);
    range.flat_map(|j| (0..rows).map(move |k| m[k * n + j])).collect()
}

/// [`add_delta`] one value at a time, for the values from column `first`
/// on, given those columns of A as rows (`columns`).
fn add_delta_by_column(rows: &mut [f32], columns: &[f32], first: usize, b: &[f32], rank: usize, scale: f32) {
    if columns.is_empty() {
        return;
    }
    let n_in = first + columns.len() / rank;
    for (row, b_row) in rows.chunks_exact_mut(n_in).zip(b.chunks_exact(rank)) {
        for (value, column) in row[first..].iter_mut().zip(columns.chunks_exact(rank)) {
            *value += ggml_dot(column, b_row) * scale;
        }
    }
}

/// tinyBLAS's dot products for eight columns at once, a column to a
/// vector lane: its eight accumulators become eight registers, each lane
/// accumulating its own column's products in the same order, so every
/// value is rounded exactly as [`tinyblas_dot`] rounds it, without the
/// one-register dependency chain.
#[cfg(target_arch = "x86_64")]
mod columns_side_by_side {
    use std::arch::x86_64::*;

    /// Groups of eight columns walked per pass over a task's rows: their
    /// packed values (`rank` × 8 each) stay in the first-level cache.
    const GROUPS_PER_BLOCK: usize = 16;

    /// The whole eight-column groups of A (`rank` rows of `n_in`), each
    /// group's `rank` vectors of eight one after another: the rows of A lie
    /// a power of two apart in a wide model, all in the same cache sets.
    pub fn pack(a: &[f32], rank: usize) -> Vec<f32> {
        let n_in = a.len() / rank;
        let mut packed = Vec::with_capacity(n_in / 8 * 8 * rank);
        for g in 0..n_in / 8 {
            for k in 0..rank {
                packed.extend_from_slice(&a[k * n_in + g * 8..][..8]);
            }
        }
        packed
    }

    /// [`super::add_delta`] for the whole eight-column groups of `rows`
    /// (`n_in` values each), given A [`pack`]ed; `rank` a multiple of 8.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `packed` holds `n_in / 8` groups of `rank`
    /// vectors, `b` `rank` values for each row.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn add_delta(rows: &mut [f32], n_in: usize, packed: &[f32], b: &[f32], rank: usize, scale: f32) {
        let groups = n_in / 8;
        let scale = _mm256_set1_ps(scale);
        for block in (0..groups).step_by(GROUPS_PER_BLOCK) {
            let block_end = (block + GROUPS_PER_BLOCK).min(groups);
            for (row, b_row) in rows.chunks_exact_mut(n_in).zip(b.chunks_exact(rank)) {
                for g in block..block_end {
                    let group = &packed[g * rank * 8..][..rank * 8];
                    let mut acc = [_mm256_setzero_ps(); 8];
                    for (vectors, b8) in group.chunks_exact(64).zip(b_row.chunks_exact(8)) {
                        for lane in 0..8 {
                            // SAFETY: eight values of `vectors`.
                            let column = unsafe { _mm256_loadu_ps(vectors[lane * 8..][..8].as_ptr()) };
                            acc[lane] = _mm256_fmadd_ps(column, _mm256_set1_ps(b8[lane]), acc[lane]);
                        }
                    }
                    let v = [
                        _mm256_add_ps(acc[4], acc[0]),
                        _mm256_add_ps(acc[5], acc[1]),
                        _mm256_add_ps(acc[6], acc[2]),
                        _mm256_add_ps(acc[7], acc[3]),
                    ];
                    let dot = _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]));
                    let out = row[g * 8..][..8].as_mut_ptr();
                    // SAFETY: `out` is eight values of `row`.
                    unsafe { _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_mul_ps(dot, scale))) };
                }
            }
        }
    }
}

/// The f32 dot product of `x` and `y` as the reference build's matrix
/// product computes it: llamafile's tinyBLAS for a length of whole 8-lane
/// vectors, `ggml_vec_dot_f32` otherwise.
fn ggml_dot(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA, checked just now.
        return unsafe { ggml_dot_fma(x, y) };
    }
    ordered_dot(x, y)
}

/// [`ordered_dot`] compiled with FMA instructions: a fused multiply-add is
/// one rounding either way, so the bytes are the same, and `mul_add` is an
/// instruction instead of a call to libm's `fmaf`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn ggml_dot_fma(x: &[f32], y: &[f32]) -> f32 {
    ordered_dot(x, y)
}

#[inline(always)]
fn ordered_dot(x: &[f32], y: &[f32]) -> f32 {
    if x.len().is_multiple_of(8) { tinyblas_dot(x, y) } else { vec_dot(x, y) }
}

/// One 8-lane fused multiply-add accumulator, then tinyBLAS's `hsum`.
#[inline(always)]
fn tinyblas_dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (xs, ys) in x.chunks_exact(8).zip(y.chunks_exact(8)) {
        for lane in 0..8 {
            acc[lane] = xs[lane].mul_add(ys[lane], acc[lane]);
        }
    }
    let v: [f32; 4] = std::array::from_fn(|i| acc[i + 4] + acc[i]);
    (v[0] + v[2]) + (v[1] + v[3])
}

/// `ggml_vec_dot_f32` for AVX2: four 8-lane accumulators over whole steps
/// of 32, `GGML_F32x8_REDUCE`, then the rest one product at a time.
#[inline(always)]
fn vec_dot(x: &[f32], y: &[f32]) -> f32 {
    let whole = x.len() & !31;
    let mut sum = [[0f32; 8]; 4];
    for (xs, ys) in x[..whole].chunks_exact(32).zip(y[..whole].chunks_exact(32)) {
        for (j, acc) in sum.iter_mut().enumerate() {
            for lane in 0..8 {
                acc[lane] = xs[j * 8 + lane].mul_add(ys[j * 8 + lane], acc[lane]);
            }
        }
    }
    let add = |a: [f32; 8], b: [f32; 8]| -> [f32; 8] { std::array::from_fn(|i| a[i] + b[i]) };
    let (s0, s1) = (add(sum[0], sum[2]), add(sum[1], sum[3]));
    let s = add(s0, s1);
    let t: [f32; 4] = std::array::from_fn(|i| s[i] + s[i + 4]);
    let mut total = (t[0] + t[1]) + (t[2] + t[3]);
    for (a, b) in x[whole..].iter().zip(&y[whole..]) {
        total += a * b;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dot_products_keep_the_reference_order() {
        // Values whose sums round differently in another order.
        let x: Vec<f32> = (0..40).map(|i| 1.0 + (i as f32) * 1e-7).collect();
        let y: Vec<f32> = (0..40).map(|i| if i % 3 == 0 { 1e8 } else { -1.0 - (i as f32) * 1e-3 }).collect();
        let lanes = tinyblas_dot(&x[..8], &y[..8]);
        let acc: Vec<f32> = (0..8).map(|i| x[i] * y[i]).collect();
        assert_eq!(
            lanes.to_bits(),
            (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))).to_bits()
        );
        let short = vec_dot(&x[..5], &y[..5]);
        let mut sequential = 0f32;
        for i in 0..5 {
            sequential += x[i] * y[i];
        }
        assert_eq!(short.to_bits(), sequential.to_bits());
    }

    #[test]
    fn columns_side_by_side_round_as_one_at_a_time() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32 - 0.5) * 4.0
        };
        for (n_in, rank, n_rows) in [(136, 8, 3), (300, 64, 20), (37, 16, 5), (8, 8, 1), (44, 12, 4), (40, 40, 2)] {
            let a: Vec<f32> = (0..rank * n_in).map(|_| next()).collect();
            let b: Vec<f32> = (0..rank * n_rows).map(|_| next()).collect();
            let base: Vec<f32> = (0..n_in * n_rows).map(|_| next()).collect();
            let scale = 0.37;
            let mut merged = base.clone();
            add_delta(&mut merged, &a, &b, rank, scale);
            for (i, row) in merged.chunks_exact(n_in).enumerate() {
                for (j, value) in row.iter().enumerate() {
                    let column: Vec<f32> = (0..rank).map(|k| a[k * n_in + j]).collect();
                    let expected = base[i * n_in + j] + ordered_dot(&column, &b[i * rank..][..rank]) * scale;
                    assert_eq!(value.to_bits(), expected.to_bits(), "n_in {n_in} rank {rank} row {i} column {j}");
                }
            }
        }
    }
}
