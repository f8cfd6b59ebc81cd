//! `lora-merge`: GGUF LoRA adapters (as `convert-lora` writes them) merged
//! into a base model as `llama-export-lora` merges them, byte for byte: each
//! targeted weight `W + Σ scale·alpha/r · B·A` in f32 with the rounding order
//! of the reference build's matrix product, written F32 where the base's is
//! F32 and F16 otherwise; every other tensor the base's own, under its own
//! key, so what follows a merge re-encodes only what an adapter touched.
//! The reference's arithmetic: `docs/notes/lora-merge-reference.md`.

use rayon::prelude::*;

use crate::artifact::{BlobSink, BlobSinkError, HeaderEnd, Tensor, TensorData, TensorSet};
use crate::backend::Backend;
use crate::key::KeyBuilder;
use crate::model::{Endian, Value};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, ParamValue, Params};
use crate::quant::budget::{BudgetError, RowSource};
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
        "adapter {adapter}: tensor `{}` is {base:?} in the base, but its lora_a is {a:?} and lora_b {b:?} \
         (lora_a [in, rank], lora_b [rank, out] for a base [in, out])",
        Name(.tensor)
    )]
    Shape { adapter: String, tensor: String, base: Vec<u64>, a: Vec<u64>, b: Vec<u64> },
    #[error(
        "adapter {adapter}: `{}` is {ty}: quantized adapters are not merged (convert the adapter with --outtype \
         f16 or f32), as llama-export-lora refuses them",
        Name(.tensor)
    )]
    Quantized { adapter: String, tensor: String, ty: &'static str },
    #[error(transparent)]
    Rows(#[from] BudgetError),
    #[error(transparent)]
    Blobs(#[from] BlobSinkError),
}

/// One adapter: its tensors, a way to read them, its name and scale.
pub struct MergedAdapter<'a> {
    pub name: String,
    pub set: &'a TensorSet,
    pub rows: &'a dyn RowSource,
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

/// The base `base` (read through `base_rows`) with `adapters` merged in.
pub fn apply(
    base: &TensorSet,
    base_rows: &dyn RowSource,
    adapters: &[MergedAdapter<'_>],
    backend: &dyn Backend,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<TensorSet, LoraMergeError> {
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
    let mut order: Vec<usize> = (0..base.tensors.len()).collect();
    order.sort_by(|&a, &b| base.tensors[a].name.cmp(&base.tensors[b].name));
    let mut tensors = Vec::with_capacity(order.len());
    for index in order {
        let tensor = &base.tensors[index];
        let pairs: Vec<(Option<usize>, Option<usize>)> = adapters
            .iter()
            .map(|a| (a.index(&format!("{}.lora_a", tensor.name)), a.index(&format!("{}.lora_b", tensor.name))))
            .collect();
        if pairs.iter().all(|&(a, b)| a.is_none() && b.is_none()) {
            tensors.push(tensor.clone());
            continue;
        }
        let mut halves = Vec::with_capacity(adapters.len());
        for (adapter, &pair) in adapters.iter().zip(&pairs) {
            let (Some(a), Some(b)) = pair else {
                return Err(LoraMergeError::Unpaired { adapter: adapter.name.clone(), tensor: tensor.name.clone() });
            };
            halves.push((a, b));
        }
        tensors.push(merge(index, tensor, base_rows, adapters, &halves, backend, blobs)?);
    }
    let mut metadata = base.metadata.clone();
    // Set as gguf_set_val_u32 sets it: removed, then appended.
    metadata.remove("general.file_type");
    metadata.set("general.file_type", Value::U32(MERGED_FILE_TYPE));
    Ok(TensorSet { endian: Endian::Little, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None })
}

/// Every row of tensor `index` of a set, decoded to f32.
fn values(rows: &dyn RowSource, index: usize, tensor: &Tensor, backend: &dyn Backend) -> Result<Vec<f32>, BudgetError> {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1).max(1) as usize;
    let n_rows = (tensor.dims.iter().product::<u64>() as usize) / n_per_row;
    let mut out = vec![0f32; n_rows * n_per_row];
    let all: Vec<usize> = (0..n_rows).collect();
    rows.rows(index, &all, backend, &mut out)?;
    Ok(out)
}

/// The base tensor `tensor` (index `index`) with each adapter's pair `halves` added.
fn merge(
    index: usize,
    tensor: &Tensor,
    base_rows: &dyn RowSource,
    adapters: &[MergedAdapter<'_>],
    halves: &[(usize, usize)],
    backend: &dyn Backend,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<Tensor, LoraMergeError> {
    let mut key = KeyBuilder::new("tensor.lora-merge");
    key.u64(MERGE_VERSION).key(&tensor.key);
    let mut current = values(base_rows, index, tensor, backend)?;
    for (adapter, &(a, b)) in adapters.iter().zip(halves) {
        let (lora_a, lora_b) = (&adapter.set.tensors[a], &adapter.set.tensors[b]);
        for half in [lora_a, lora_b] {
            if half.ggml_type.is_quantized() {
                return Err(LoraMergeError::Quantized {
                    adapter: adapter.name.clone(),
                    tensor: half.name.clone(),
                    ty: half.ggml_type.name(),
                });
            }
        }
        let shape_error = || LoraMergeError::Shape {
            adapter: adapter.name.clone(),
            tensor: tensor.name.clone(),
            base: tensor.dims.clone(),
            a: lora_a.dims.clone(),
            b: lora_b.dims.clone(),
        };
        let (&[n_in, n_out], &[a_in, rank], &[b_rank, b_out]) =
            (tensor.dims.as_slice(), lora_a.dims.as_slice(), lora_b.dims.as_slice())
        else {
            return Err(shape_error());
        };
        if a_in != n_in || b_out != n_out || b_rank != rank || rank == 0 {
            return Err(shape_error());
        }
        let (n_in, rank) = (n_in as usize, rank as usize);
        let a_values = values(adapter.rows, a, lora_a, backend)?;
        let b_values = values(adapter.rows, b, lora_b, backend)?;
        // Column j of A as a row: the reference transposes A before its product.
        let a_columns: Vec<f32> =
            (0..n_in).flat_map(|j| (0..rank).map(move |k| (j, k))).map(|(j, k)| a_values[k * n_in + j]).collect();
        let alpha = adapter.alpha();
        let scale = if alpha != 0.0 { adapter.scale * alpha / rank as f32 } else { adapter.scale };
        current.par_chunks_mut(n_in).zip(b_values.par_chunks(rank)).for_each(|(row, b_row)| {
            for (value, a_column) in row.iter_mut().zip(a_columns.chunks_exact(rank)) {
                *value += ggml_dot(a_column, b_row) * scale;
            }
        });
        key.key(&lora_a.key).key(&lora_b.key).u64(u64::from(scale.to_bits()));
    }
    let (ggml_type, bytes) = match tensor.ggml_type {
        GgmlType::F32 => (GgmlType::F32, current.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
        _ => (GgmlType::F16, current.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect()),
    };
    key.str(ggml_type.name());
    let hash = blobs.put_blob(&bytes)?;
    Ok(Tensor {
        name: tensor.name.clone(),
        dims: tensor.dims.clone(),
        ggml_type,
        key: key.finish(),
        data: TensorData::Blob { hash },
    })
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
}
