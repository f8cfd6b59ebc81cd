//! The size-budget planner: measure the reconstruction error of every
//! candidate type on a sample of each quantizable tensor's rows (weighted by
//! the importance matrix when there is one), then choose the types that
//! minimise the total error with the file no larger than the budget.
//!
//! The choice is a multiple-choice knapsack; each tensor's candidates are
//! reduced to their lower convex hull of (bytes, error), and the steps up
//! the hulls are taken best error-per-byte first while they fit, which is
//! optimal up to the last step that no longer fits. The plan is realised as
//! a quantization whose every planned tensor has an exact-name type
//! override, so its file size is computed by the same code that writes it.

use std::collections::BinaryHeap;

use rayon::prelude::*;
use serde::Serialize;

use super::imatrix::{ImatrixError, ImportanceMatrix};
use super::mixture::TensorTypeOverride;
use crate::arch::registry::{Role, block_of, detect, role_of};
use crate::backend::{Backend, Slab, SlabError};
use crate::codecs::CodecError;
use crate::formats::gguf::{DEFAULT_ALIGNMENT, align_up};
use crate::formats::{FormatError, ModelFile};
use crate::model::{Metadata, TensorInfo};
use crate::quant::plan::{self as quantize, QuantizeError, QuantizeOptions};
use crate::text::Name;
use crate::types::{FileType, GgmlType};

/// The ladder for rows that are whole K-quant super-blocks.
const K_LADDER: [GgmlType; 7] =
    [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16];
/// The ladder for other rows: llama.cpp's own fallbacks for them.
const LEGACY_LADDER: [GgmlType; 6] =
    [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::F16];

/// Rows measured per tensor, evenly spaced; the error is scaled to all rows.
const SAMPLE_ROWS: usize = 512;

/// How much more an error counts in protected tensors (embeddings, output,
/// first and last blocks) and in attention than in the FFN: an adaptive
/// quantizer protects them first.
const PROTECTED_PRIORITY: f64 = 2.0;
const ATTENTION_PRIORITY: f64 = 1.5;

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Quantize(#[from] QuantizeError),
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Codec { tensor: String, source: CodecError },
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Rows { tensor: String, source: Box<dyn std::error::Error + Send + Sync> },
    #[error(
        "a budget of {budget} bytes is below the smallest plan, {smallest} bytes (every tensor at its smallest type)"
    )]
    TooSmall { budget: u64, smallest: u64 },
}

/// Where the planner reads the rows it samples, decoded to f32: a model
/// file, or a recipe step's tensor set.
pub trait RowSource: Sync {
    /// Rows `rows` of tensor `index` (ascending), decoded on `backend`, one
    /// after another in `out`.
    fn rows(&self, index: usize, rows: &[usize], backend: &dyn Backend, out: &mut [f32]) -> Result<(), BudgetError>;
}

impl RowSource for ModelFile {
    fn rows(&self, index: usize, rows: &[usize], backend: &dyn Backend, out: &mut [f32]) -> Result<(), BudgetError> {
        let tensor = &self.tensors[index];
        let n_per_row = tensor.dims[0] as usize;
        let row_bytes = tensor.ggml_type.row_size(n_per_row as u64).unwrap_or(0) as usize;
        let data = self.tensor_data(tensor)?;
        let sampled: Vec<u8> = rows.iter().flat_map(|&r| &data[r * row_bytes..][..row_bytes]).copied().collect();
        // The rows are copied out: keep no pages of the input.
        drop(data);
        let slab = Slab {
            from: tensor.ggml_type,
            to: tensor.ggml_type,
            n_per_row,
            first_row: rows.first().copied().unwrap_or(0),
            rows_per_expert: 1,
            source: &sampled,
            importance: None,
            row_numbers: Some(rows),
        };
        backend.decode(&slab, out).map_err(|source| BudgetError::Codec { tensor: tensor.name.clone(), source })?;
        self.release_tensor_range(tensor, 0, tensor.n_bytes());
        Ok(())
    }
}

/// What to fit.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The whole output file, in bytes.
    Size(u64),
    /// Bits per weight over every tensor element (the header on top).
    BitsPerWeight(f64),
}

/// The error weight of each value: the importance matrix's entry for its
/// column (an expert's slice for expert stacks), and for tensors it does not
/// cover, the matrix's mean, so every tensor's error is on one scale.
/// Without a matrix every weight is 1. `diff --imatrix` measures with the same weights.
pub struct ErrorWeights<'a> {
    imatrix: Option<&'a ImportanceMatrix>,
    uncovered: f32,
}

impl<'a> ErrorWeights<'a> {
    pub fn new(imatrix: Option<&'a ImportanceMatrix>) -> ErrorWeights<'a> {
        let uncovered = imatrix.map_or(1.0, |m| {
            let (sum, n) = m
                .names()
                .filter_map(|name| m.get(name))
                .fold((0.0f64, 0usize), |(s, n), w| (s + w.iter().map(|&v| f64::from(v)).sum::<f64>(), n + w.len()));
            if n == 0 { 1.0 } else { (sum / n as f64) as f32 }
        });
        ErrorWeights { imatrix, uncovered }
    }

    /// The weights of `tensor`'s columns (per expert), or `None` for one uniform weight.
    fn columns(&self, tensor: &TensorInfo) -> Result<Option<&'a [f32]>, ImatrixError> {
        match self.imatrix {
            Some(m) => m.weights_for(tensor),
            None => Ok(None),
        }
    }

    /// Σ w·(a − b)² over one row, in f64; `row` picks the expert slice.
    pub fn row_error(&self, columns: Option<&[f32]>, rows_per_expert: usize, row: usize, a: &[f32], b: &[f32]) -> f64 {
        let squared = |(&x, &y): (&f32, &f32)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        };
        match columns {
            Some(w) => {
                let w = row_columns(w, rows_per_expert, row, a.len());
                a.iter().zip(b).zip(w).map(|(pair, &w)| f64::from(w) * squared(pair)).sum()
            }
            None => f64::from(self.uncovered) * a.iter().zip(b).map(squared).sum::<f64>(),
        }
    }

    /// [`ErrorWeights::row_error`]'s inputs for a tensor: its columns' weights and rows per expert.
    pub fn for_tensor(&self, tensor: &TensorInfo) -> Result<(Option<&'a [f32]>, usize), ImatrixError> {
        let rows = tensor.dims.iter().skip(1).product::<u64>() as usize;
        let experts = tensor.dims.get(2).copied().unwrap_or(1) as usize;
        Ok((self.columns(tensor)?, rows / experts.max(1)))
    }
}

/// The column weights of `row`: its expert's slice of a tensor's weights.
fn row_columns(columns: &[f32], rows_per_expert: usize, row: usize, n_per_row: usize) -> &[f32] {
    &columns[(row / rows_per_expert.max(1)) * n_per_row..][..n_per_row]
}

/// A candidate type for one tensor.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Candidate {
    #[serde(rename = "type")]
    pub ty: &'static str,
    #[serde(skip)]
    pub ggml_type: GgmlType,
    pub bytes: u64,
    /// What it occupies in the file: `bytes` padded to the alignment.
    #[serde(skip)]
    pub stored: u64,
    /// Predicted weighted squared error over the whole tensor.
    pub error: f64,
}

/// The sampled rows' value distribution.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stats {
    pub min: f32,
    pub max: f32,
    pub std: f64,
    pub kurtosis: f64,
    /// Share of values more than three standard deviations from the mean.
    pub outlier_ratio: f64,
}

/// One tensor of the plan.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PlannedTensor {
    pub name: String,
    pub role: Role,
    /// The `blk.N` block, if any.
    pub block: Option<u64>,
    pub elements: u64,
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub bytes: u64,
    /// Predicted weighted squared error at the chosen type (0 when kept).
    pub error: f64,
    /// How much this tensor's error counts in the choice.
    pub priority: f64,
    /// Candidates measured (empty for tensors kept as they are).
    pub candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BudgetPlan {
    pub budget: u64,
    /// The output file's exact size.
    pub file_size: u64,
    pub predicted_error: f64,
    pub tensors: Vec<PlannedTensor>,
    /// The quantization that writes the plan.
    #[serde(skip)]
    pub options: QuantizeOptions,
}

/// The preset a budgeted quantization is planned from: its mixture only
/// decides which tensors are quantizable; the written file's preset label
/// comes from the plan.
pub const PROBE_PRESET: FileType = FileType::Q8_0;

/// A model to plan: its metadata, tensors, and where their rows come from.
pub struct Model<'a> {
    pub metadata: &'a Metadata,
    pub tensors: &'a [TensorInfo],
    pub rows: &'a dyn RowSource,
    /// Where the trial encodes run.
    pub backend: &'a dyn Backend,
}

/// Plans a quantization of `model` under `target`. `base` supplies the
/// options beyond the types (imatrix filters, `override_kv`, …); its preset
/// decides only which tensors are quantizable.
pub fn plan_budget(
    model: &Model,
    base: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
    target: Target,
    protect: bool,
) -> Result<BudgetPlan, BudgetError> {
    let tensors = model.tensors;
    let mut probe = base.clone();
    probe.mixture.ftype = PROBE_PRESET;
    probe.mixture.tensor_types.clear();
    let probe_plan = quantize::plan(model.metadata, tensors, &probe, imatrix)?;
    let quantizable: Vec<bool> = {
        let mut q = vec![false; tensors.len()];
        for p in &probe_plan.tensors {
            q[p.input_idx] = p.converts();
        }
        q
    };
    let family = detect(model.metadata, tensors).family;
    let last_block = tensors.iter().filter_map(|t| block_of(&t.name)).max();
    let weights = ErrorWeights::new(imatrix);

    let measured: Vec<Option<(Vec<Candidate>, Stats)>> = (0..tensors.len())
        .into_par_iter()
        .map(|i| if quantizable[i] { measure(model, i, &weights).map(Some) } else { Ok(None) })
        .collect::<Result<_, BudgetError>>()?;

    let mut planned: Vec<PlannedTensor> = tensors
        .iter()
        .zip(measured)
        .map(|(t, m)| {
            let role = role_of(family, &t.name);
            let block = block_of(&t.name);
            let protected =
                matches!(role, Role::TokenEmbedding | Role::Output) || block == Some(0) || block == last_block;
            let priority = match (protect, protected, role) {
                (false, ..) => 1.0,
                (true, true, _) => PROTECTED_PRIORITY,
                (true, false, Role::Attention) => ATTENTION_PRIORITY,
                _ => 1.0,
            };
            let (candidates, stats) = m.map_or((Vec::new(), None), |(c, s)| (c, Some(s)));
            PlannedTensor {
                name: t.name.clone(),
                role,
                block,
                elements: t.n_elements(),
                ty: t.ggml_type.name(),
                bytes: t.n_bytes(),
                error: 0.0,
                priority,
                candidates,
                stats,
            }
        })
        .collect();

    // The header and alignment: measured on the plan of smallest types, with
    // a block of padding per tensor in reserve.
    let smallest: Vec<Option<GgmlType>> = planned.iter().map(|p| p.candidates.first().map(|c| c.ggml_type)).collect();
    let (_, smallest_plan) = realise(model, base, imatrix, &planned, &smallest)?;
    let budget = match target {
        Target::Size(bytes) => bytes,
        Target::BitsPerWeight(bpw) => {
            let elements: u64 = tensors.iter().map(TensorInfo::n_elements).sum();
            let data: u64 = smallest_plan.tensors.iter().map(|t| t.bytes_out).sum();
            (smallest_plan.file_size - data) + (bpw * elements as f64 / 8.0) as u64
        }
    };
    if smallest_plan.file_size > budget {
        return Err(BudgetError::TooSmall { budget, smallest: smallest_plan.file_size });
    }
    // Candidates cost their size padded to the alignment, as the file stores
    // them, so the room is exact.
    let mut room = budget - smallest_plan.file_size;

    let hulls: Vec<Vec<usize>> = planned.iter().map(|p| lower_hull(&p.candidates)).collect();
    let mut position = vec![0usize; planned.len()];
    let mut steps = BinaryHeap::new();
    for (i, hull) in hulls.iter().enumerate() {
        push_step(&mut steps, &planned[i], hull, i, 0);
    }
    while let Some(Step { tensor, from, .. }) = steps.pop() {
        if position[tensor] != from {
            continue;
        }
        let hull = &hulls[tensor];
        let (a, b) = (&planned[tensor].candidates[hull[from]], &planned[tensor].candidates[hull[from + 1]]);
        let extra = b.stored - a.stored;
        if extra > room {
            continue;
        }
        room -= extra;
        position[tensor] = from + 1;
        push_step(&mut steps, &planned[tensor], hull, tensor, from + 1);
    }

    exchange(&planned, &hulls, &mut position, &mut room);

    let chosen: Vec<Option<GgmlType>> = planned
        .iter()
        .zip(&hulls)
        .zip(&position)
        .map(|((p, hull), &at)| hull.get(at).map(|&c| p.candidates[c].ggml_type))
        .collect();
    let (options, quantize_plan) = realise(model, base, imatrix, &planned, &chosen)?;
    for (p, (hull, &at)) in planned.iter_mut().zip(hulls.iter().zip(&position)) {
        if let Some(&c) = hull.get(at) {
            let candidate = &p.candidates[c];
            (p.ty, p.bytes, p.error) = (candidate.ty, candidate.bytes, candidate.error);
        }
    }
    let predicted_error = planned.iter().map(|p| p.error).sum();
    Ok(BudgetPlan { budget, file_size: quantize_plan.file_size, predicted_error, tensors: planned, options })
}

/// The quantization options that write `types` (one per input tensor;
/// `None` keeps the tensor as the base preset would), and their plan.
fn realise(
    model: &Model,
    base: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
    planned: &[PlannedTensor],
    types: &[Option<GgmlType>],
) -> Result<(QuantizeOptions, quantize::QuantizePlan), BudgetError> {
    let mut options = base.clone();
    options.budget = None;
    options.mixture.ftype = label(planned, types);
    options.mixture.tensor_types = planned
        .iter()
        .zip(types)
        .filter_map(|(p, ty)| ty.map(|ty| (p, ty)))
        .map(|(p, ty)| {
            TensorTypeOverride::new(&format!("^{}$", regex::escape(&p.name)), ty.name())
                .expect("an escaped name and a known type make a valid override")
        })
        .collect();
    let plan = quantize::plan(model.metadata, model.tensors, &options, imatrix)?;
    Ok((options, plan))
}

/// The preset whose main type holds most of the planned bytes: only the
/// `general.file_type` label of the output, since every planned tensor has
/// its own override.
fn label(planned: &[PlannedTensor], types: &[Option<GgmlType>]) -> FileType {
    let mut bytes_by_type: Vec<(GgmlType, u64)> = Vec::new();
    for (p, ty) in planned.iter().zip(types) {
        let Some(ty) = *ty else { continue };
        let bytes = ty.row_size(p.elements).unwrap_or(0);
        match bytes_by_type.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, b)) => *b += bytes,
            None => bytes_by_type.push((ty, bytes)),
        }
    }
    let main = bytes_by_type.iter().max_by_key(|(_, b)| *b).map(|(t, _)| *t);
    use {FileType as F, GgmlType as G};
    match main {
        Some(G::Q2_K) => F::Q2_K,
        Some(G::Q3_K) => F::Q3_K_M,
        Some(G::Q4_K) => F::Q4_K_M,
        Some(G::Q5_K) => F::Q5_K_M,
        Some(G::Q6_K) => F::Q6_K,
        Some(G::Q4_0) => F::Q4_0,
        Some(G::Q4_1) => F::Q4_1,
        Some(G::Q5_0) => F::Q5_0,
        Some(G::Q5_1) => F::Q5_1,
        Some(G::F16) => F::F16,
        _ => F::Q8_0,
    }
}

/// Each candidate's predicted error on `tensor`, smallest type first, and
/// the distribution of its sampled rows.
fn measure(model: &Model, index: usize, weights: &ErrorWeights) -> Result<(Vec<Candidate>, Stats), BudgetError> {
    let tensor = &model.tensors[index];
    let slab_err = |e| match e {
        SlabError::Codec(source) => BudgetError::Codec { tensor: tensor.name.clone(), source },
        other => BudgetError::Rows { tensor: tensor.name.clone(), source: Box::new(other) },
    };
    let n_per_row = tensor.dims[0] as usize;
    let n_rows = (tensor.n_elements() / n_per_row as u64) as usize;
    let whole_super_blocks = (n_per_row as u64).is_multiple_of(GgmlType::Q2_K.block_size());
    let ladder: &[GgmlType] = if whole_super_blocks { &K_LADDER } else { &LEGACY_LADDER };
    let ladder: Vec<GgmlType> =
        ladder.iter().copied().filter(|t| (n_per_row as u64).is_multiple_of(t.block_size())).collect();
    // The importance the quantizers steer by is the same column weighting the error is measured with.
    let (columns, rows_per_expert) = weights.for_tensor(tensor)?;
    let sampled: Vec<usize> = (0..SAMPLE_ROWS.min(n_rows)).map(|k| k * n_rows / SAMPLE_ROWS.min(n_rows)).collect();

    let mut rows = vec![0f32; sampled.len() * n_per_row];
    model.rows.rows(index, &sampled, model.backend, &mut rows)?;
    let scale = n_rows as f64 / sampled.len() as f64;
    let mut encoded = Vec::new();
    let mut decoded = vec![0f32; rows.len()];
    let mut candidates = Vec::with_capacity(ladder.len());
    for ty in ladder {
        // Every sampled row encoded and decoded in one slab each way.
        let trial = Slab {
            from: GgmlType::F32,
            to: ty,
            n_per_row,
            first_row: 0,
            rows_per_expert,
            source: bytemuck::cast_slice(&rows),
            importance: columns,
            row_numbers: Some(&sampled),
        };
        encoded.resize(sampled.len() * ty.row_size(n_per_row as u64).unwrap_or(0) as usize, 0);
        model.backend.convert(&trial, &mut encoded).map_err(slab_err)?;
        let back = Slab { from: ty, source: &encoded, ..trial };
        model
            .backend
            .decode(&back, &mut decoded)
            .map_err(|source| BudgetError::Codec { tensor: tensor.name.clone(), source })?;
        let mut error = 0.0f64;
        for ((&r, x), y) in sampled.iter().zip(rows.chunks_exact(n_per_row)).zip(decoded.chunks_exact(n_per_row)) {
            error += weights.row_error(columns, rows_per_expert, r, x, y);
        }
        let bytes = ty.row_size(tensor.n_elements()).unwrap_or(0);
        let stored = align_up(bytes, DEFAULT_ALIGNMENT);
        candidates.push(Candidate { ty: ty.name(), ggml_type: ty, bytes, stored, error: error * scale });
    }
    Ok((candidates, stats(&rows)))
}

fn stats(values: &[f32]) -> Stats {
    let n = values.len().max(1) as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let (mut m2, mut m4) = (0.0f64, 0.0f64);
    for &v in values {
        let d = f64::from(v) - mean;
        m2 += d * d;
        m4 += d * d * d * d;
    }
    let (m2, m4) = (m2 / n, m4 / n);
    let std = m2.sqrt();
    let outliers = values.iter().filter(|&&v| (f64::from(v) - mean).abs() > 3.0 * std).count();
    Stats {
        min: values.iter().copied().fold(f32::INFINITY, f32::min),
        max: values.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        std,
        kurtosis: if m2 > 0.0 { m4 / (m2 * m2) } else { 0.0 },
        outlier_ratio: outliers as f64 / n,
    }
}

/// Indices of the candidates on the lower convex hull of (bytes, error):
/// the only ones an optimal choice uses, in increasing size.
fn lower_hull(candidates: &[Candidate]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_key(|&i| candidates[i].stored);
    let mut hull: Vec<usize> = Vec::new();
    for i in order {
        let c = &candidates[i];
        if hull.last().is_some_and(|&h| candidates[h].error <= c.error) {
            continue;
        }
        while hull.len() >= 2 {
            let (a, b) = (&candidates[hull[hull.len() - 2]], &candidates[hull[hull.len() - 1]]);
            // b is above the segment from a to c: drop it.
            let cross =
                (b.stored - a.stored) as f64 * (c.error - a.error) - (b.error - a.error) * (c.stored - a.stored) as f64;
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(i);
    }
    hull
}

/// The greedy pass can leave out a step whose gain is large but whose
/// bytes no longer fit, after taking many small steps of better gain per
/// byte. Repair that: for each step up, free the bytes it lacks by the
/// cheapest steps down elsewhere (least loss per byte, one per tensor);
/// make the exchange of largest net gain, and repeat until none gains.
fn exchange(planned: &[PlannedTensor], hulls: &[Vec<usize>], position: &mut [usize], room: &mut u64) {
    let at = |t: usize, p: usize| &planned[t].candidates[hulls[t][p]];
    loop {
        let mut best: Option<(f64, usize, Vec<usize>, u64)> = None;
        for up in 0..planned.len() {
            let p = position[up];
            if p + 1 >= hulls[up].len() {
                continue;
            }
            let extra = at(up, p + 1).stored - at(up, p).stored;
            let gain = planned[up].priority * (at(up, p).error - at(up, p + 1).error);
            let needed = extra.saturating_sub(*room);
            let mut downs: Vec<(f64, u64, usize)> = (0..planned.len())
                .filter(|&t| t != up && position[t] > 0)
                .map(|t| {
                    let q = position[t];
                    let loss = planned[t].priority * (at(t, q - 1).error - at(t, q).error);
                    (loss, at(t, q).stored - at(t, q - 1).stored, t)
                })
                .collect();
            downs.sort_by(|a, b| (a.0 / a.1.max(1) as f64).total_cmp(&(b.0 / b.1.max(1) as f64)).then(a.2.cmp(&b.2)));
            let (mut freed, mut loss, mut taken) = (0u64, 0.0f64, Vec::new());
            for &(l, bytes, t) in &downs {
                if freed >= needed {
                    break;
                }
                freed += bytes;
                loss += l;
                taken.push(t);
            }
            let net = gain - loss;
            if freed >= needed && net > 0.0 && best.as_ref().is_none_or(|b| net > b.0) {
                best = Some((net, up, taken, freed));
            }
        }
        let Some((_, up, taken, freed)) = best else { break };
        let p = position[up];
        let extra = at(up, p + 1).stored - at(up, p).stored;
        for t in taken {
            position[t] -= 1;
        }
        position[up] += 1;
        *room = *room + freed - extra;
    }
}

/// Moving a tensor one step up its hull, ranked by prioritised error saved per byte.
struct Step {
    gain_per_byte: f64,
    tensor: usize,
    from: usize,
}

impl PartialEq for Step {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Step {}
impl PartialOrd for Step {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Step {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Ties go to the earlier tensor, so plans are deterministic.
        self.gain_per_byte.total_cmp(&other.gain_per_byte).then(other.tensor.cmp(&self.tensor))
    }
}

fn push_step(steps: &mut BinaryHeap<Step>, p: &PlannedTensor, hull: &[usize], tensor: usize, from: usize) {
    if from + 1 >= hull.len() {
        return;
    }
    let (a, b) = (&p.candidates[hull[from]], &p.candidates[hull[from + 1]]);
    let gain_per_byte = p.priority * (a.error - b.error) / (b.stored - a.stored).max(1) as f64;
    steps.push(Step { gain_per_byte, tensor, from });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(bytes: u64, error: f64) -> Candidate {
        Candidate { ty: "x", ggml_type: GgmlType::F16, bytes, stored: bytes, error }
    }

    #[test]
    fn hull_drops_dominated_and_concave_points() {
        let c =
            [candidate(10, 100.0), candidate(20, 40.0), candidate(30, 35.0), candidate(40, 5.0), candidate(50, 6.0)];
        // (30, 35) lies above the segment from (20, 40) to (40, 5); (50, 6) is worse than (40, 5).
        assert_eq!(lower_hull(&c), vec![0, 1, 3]);
    }

    #[test]
    fn stats_of_a_known_distribution() {
        let s = stats(&[-1.0, 1.0, -1.0, 1.0]);
        assert_eq!((s.min, s.max, s.std, s.kurtosis, s.outlier_ratio), (-1.0, 1.0, 1.0, 1.0, 0.0));
    }
}
