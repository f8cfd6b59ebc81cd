//! `diff`: how far apart two models' tensors are, whatever their types.
//!
//! Both sides are decoded to f32 row by row and compared in f64: mean
//! absolute error, root-mean-square error, largest absolute error, cosine
//! similarity and the weighted squared error (Σ w·(a − b)², weights from an
//! importance matrix as the budget planner weighs them, else 1) per tensor,
//! plus totals over all compared elements.

use std::path::Path;

use serde::Serialize;

use crate::backend::{Backend, BackendError, Choice, Slab};
use crate::codecs::CodecError;
use crate::formats::{FormatError, ModelFile, OpenOptions};
use crate::model::TensorInfo;
use crate::quant::budget::ErrorWeights;
use crate::quant::imatrix::{ImatrixError, ImportanceMatrix};
use crate::text::Name;
use crate::types::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("tensor `{}`: shapes differ ({a:?} vs {b:?})", Name(.tensor))]
    ShapeMismatch { tensor: String, a: Vec<u64>, b: Vec<u64> },
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Codec { tensor: String, source: CodecError },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("the models share no tensor names")]
    NothingInCommon,
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
}

/// Running sums for one comparison, in f64.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    n: u64,
    abs: f64,
    sq: f64,
    max_abs: f64,
    dot: f64,
    norm_a: f64,
    norm_b: f64,
    weighted_sq: f64,
}

impl Sums {
    fn add_row(&mut self, a: &[f32], b: &[f32]) {
        for (&x, &y) in a.iter().zip(b) {
            let (x, y) = (f64::from(x), f64::from(y));
            let e = (x - y).abs();
            self.abs += e;
            self.sq += e * e;
            self.max_abs = self.max_abs.max(e);
            self.dot += x * y;
            self.norm_a += x * x;
            self.norm_b += y * y;
        }
        self.n += a.len() as u64;
    }

    fn merge(&mut self, other: &Sums) {
        self.n += other.n;
        self.abs += other.abs;
        self.sq += other.sq;
        self.max_abs = self.max_abs.max(other.max_abs);
        self.dot += other.dot;
        self.norm_a += other.norm_a;
        self.norm_b += other.norm_b;
        self.weighted_sq += other.weighted_sq;
    }

    fn stats(&self) -> Stats {
        let n = self.n.max(1) as f64;
        let norms = (self.norm_a * self.norm_b).sqrt();
        Stats {
            elements: self.n,
            mae: self.abs / n,
            rmse: (self.sq / n).sqrt(),
            max_abs_error: self.max_abs,
            weighted_sq_error: self.weighted_sq,
            // Two all-zero tensors are the same direction.
            cosine: if norms > 0.0 {
                self.dot / norms
            } else if self.norm_a == self.norm_b {
                1.0
            } else {
                0.0
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stats {
    pub elements: u64,
    pub mae: f64,
    pub rmse: f64,
    pub max_abs_error: f64,
    pub cosine: f64,
    /// Σ w·(a − b)² (see [`ErrorWeights`]).
    pub weighted_sq_error: f64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TensorDiff {
    pub name: String,
    pub type_a: &'static str,
    pub type_b: &'static str,
    #[serde(flatten)]
    pub stats: Stats,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DiffReport {
    pub tensors: Vec<TensorDiff>,
    /// Tensor names only in A, and only in B.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    pub total: Stats,
}

/// Compares every tensor name `a` and `b` share, in `a`'s order; the
/// weighted error weighs by `imatrix` when given.
pub fn diff_files(a: &Path, b: &Path, imatrix: Option<&ImportanceMatrix>) -> Result<DiffReport, DiffError> {
    let weights = ErrorWeights::new(imatrix);
    let backend = crate::backend::resolve(Choice::Auto)?;
    let (a, b) = (ModelFile::open(a, OpenOptions::default())?, ModelFile::open(b, OpenOptions::default())?);
    let find = |m: &ModelFile, name: &str| m.tensors.iter().position(|t| t.name == name);
    let mut total = Sums::default();
    let mut tensors = Vec::new();
    for ta in &a.tensors {
        let Some(ib) = find(&b, &ta.name) else { continue };
        let tb = &b.tensors[ib];
        if ta.dims != tb.dims {
            return Err(DiffError::ShapeMismatch { tensor: ta.name.clone(), a: ta.dims.clone(), b: tb.dims.clone() });
        }
        let sums = compare((&a, ta), (&b, tb), &weights, &*backend)?;
        total.merge(&sums);
        tensors.push(TensorDiff {
            name: ta.name.clone(),
            type_a: ta.ggml_type.name(),
            type_b: tb.ggml_type.name(),
            stats: sums.stats(),
        });
    }
    if tensors.is_empty() {
        return Err(DiffError::NothingInCommon);
    }
    let only = |x: &ModelFile, y: &ModelFile| -> Vec<String> {
        x.tensors.iter().filter(|t| find(y, &t.name).is_none()).map(|t| t.name.clone()).collect()
    };
    Ok(DiffReport { only_in_a: only(&a, &b), only_in_b: only(&b, &a), tensors, total: total.stats() })
}

/// Rows decoded per step: about a million values from each file.
const SLAB_ELEMENTS: usize = 1 << 20;

/// The error sums of one tensor of `a` against the same tensor of `b`,
/// both decoded on `backend` a slab of rows at a time.
fn compare(
    (a, ta): (&ModelFile, &TensorInfo),
    (b, tb): (&ModelFile, &TensorInfo),
    weights: &ErrorWeights,
    backend: &dyn Backend,
) -> Result<Sums, DiffError> {
    let (columns, rows_per_expert) = weights.for_tensor(ta)?;
    let n_per_row = (ta.dims[0] as usize).max(1);
    let (da, db) = (a.tensor_data(ta)?, b.tensor_data(tb)?);
    let row_size = |t: GgmlType| t.row_size(n_per_row as u64).unwrap_or(0) as usize;
    let (ra, rb) = (row_size(ta.ggml_type).max(1), row_size(tb.ggml_type).max(1));
    let slab_rows = (SLAB_ELEMENTS / n_per_row).max(1);
    let decode = |ty: GgmlType, source: &[u8], first_row: usize, out: &mut Vec<f32>| {
        out.resize(source.len() / row_size(ty).max(1) * n_per_row, 0.0);
        let slab = Slab {
            from: ty,
            to: ty,
            n_per_row,
            first_row,
            rows_per_expert: 1,
            source,
            importance: None,
            row_numbers: None,
        };
        backend.decode(&slab, out).map_err(|source| DiffError::Codec { tensor: ta.name.clone(), source })
    };
    let (mut xa, mut xb) = (Vec::new(), Vec::new());
    let mut sums = Sums::default();
    for (slab, (slab_a, slab_b)) in da.chunks(ra * slab_rows).zip(db.chunks(rb * slab_rows)).enumerate() {
        decode(ta.ggml_type, slab_a, slab * slab_rows, &mut xa)?;
        decode(tb.ggml_type, slab_b, slab * slab_rows, &mut xb)?;
        for (r, (row_a, row_b)) in xa.chunks_exact(n_per_row).zip(xb.chunks_exact(n_per_row)).enumerate() {
            sums.add_row(row_a, row_b);
            sums.weighted_sq += weights.row_error(columns, rows_per_expert, slab * slab_rows + r, row_a, row_b);
        }
    }
    Ok(sums)
}
