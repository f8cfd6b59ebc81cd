//! `quantize`: llama-quantize's job, byte for byte.
//!
//! Planning is pure: the output metadata (llama-quantize's key order and
//! values), the tensors in llama-quantize's order with the type each gets,
//! and the exact output size. Execution streams: each tensor is converted a
//! slab of rows at a time on a bounded thread pool, so memory stays near one
//! slab of f32 per worker rather than the whole tensor (llama-quantize holds
//! whole tensors), and the output appears only when complete.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::codecs::{self, CodecError};
use crate::formats::{AtomicOutput, FormatError, ModelFile, OpenOptions, TensorDataSource, gguf, same_file};
use crate::model::{Metadata, TensorInfo, Value, tensor_bytes};
use crate::quant::imatrix::{ImatrixError, ImportanceMatrix};
use crate::quant::mixture::{self, MixtureError, MixtureOptions};
use crate::types::{FileType, GgmlType};

/// ggml's `GGML_QNT_VERSION`, written to `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

/// Rows converted per slab: bounds memory at about this many f32 values per
/// worker while keeping every worker busy on small tensors.
const SLAB_ELEMENTS: usize = 1 << 20;

/// A `--override-kv KEY=TYPE:VALUE`, with llama.cpp's types: `int` (written
/// as u32 of the absolute value, as llama.cpp does), `float` (f32), `bool`, `str`.
#[derive(Debug, Clone, PartialEq)]
pub struct KvOverride {
    pub key: String,
    pub value: Value,
}

impl KvOverride {
    pub fn parse(text: &str) -> Result<KvOverride, String> {
        let bad = || format!("`{text}` is not KEY=TYPE:VALUE with TYPE one of int, float, bool, str");
        let (key, typed) = text.split_once('=').ok_or_else(bad)?;
        let (ty, raw) = typed.split_once(':').ok_or_else(bad)?;
        let value = match ty {
            "int" => {
                let v: i64 = raw.trim().parse().map_err(|_| format!("`{raw}` is not an integer"))?;
                Value::U32(v.unsigned_abs() as u32)
            }
            "float" => Value::F32(raw.trim().parse::<f64>().map_err(|_| format!("`{raw}` is not a number"))? as f32),
            "bool" => match raw.trim() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(format!("`{raw}` is not true or false")),
            },
            "str" => Value::string(raw),
            _ => return Err(bad()),
        };
        if key.is_empty() {
            return Err(bad());
        }
        Ok(KvOverride { key: key.to_owned(), value })
    }
}

/// Everything llama-quantize's flags say.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    pub mixture: MixtureOptions,
    pub allow_requantize: bool,
    pub imatrix: Option<PathBuf>,
    pub include_weights: Vec<String>,
    pub exclude_weights: Vec<String>,
    pub override_kv: Vec<KvOverride>,
    pub threads: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Mixture(#[from] MixtureError),
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    #[error("refusing to overwrite the input: {} is {}", output.display(), input.display())]
    OutputIsInput { input: PathBuf, output: PathBuf },
    #[error("tensor `{tensor}`: requantizing from type {from} is disabled (pass --allow-requantize)")]
    Requantize { tensor: String, from: GgmlType },
    #[error("tensor `{tensor}`: {ty} needs an importance matrix (pass --imatrix)")]
    NeedsImatrix { tensor: String, ty: GgmlType },
    #[error("tensor `{tensor}`: {source}")]
    Codec { tensor: String, source: CodecError },
    #[error("tensor `{tensor}` row {row} holds {value}; llama.cpp refuses to quantize non-finite weights too")]
    NonFinite { tensor: String, row: usize, value: f32 },
    #[error("input tensors are big-endian; quantizing them is not supported yet")]
    BigEndian,
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// One output tensor.
#[derive(Debug, Clone)]
pub struct PlannedTensor {
    /// Index of the tensor in the input file.
    pub input_idx: usize,
    pub info: TensorInfo,
    pub from: GgmlType,
    /// The type chosen before a row-length fallback, when one happened.
    pub fallback_from: Option<GgmlType>,
    /// The target type is too coarse to be useful without importance weights.
    pub requires_imatrix: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl PlannedTensor {
    pub fn converts(&self) -> bool {
        self.from != self.info.ggml_type
    }
}

/// What a quantization will write.
#[derive(Debug, Clone)]
pub struct QuantizePlan {
    pub ftype: FileType,
    pub metadata: Metadata,
    pub tensors: Vec<PlannedTensor>,
    pub file_size: u64,
}

impl QuantizePlan {
    pub fn n_fallback(&self) -> usize {
        self.tensors.iter().filter(|t| t.fallback_from.is_some()).count()
    }
}

/// Plans a quantization of `model`: pure, no I/O.
pub fn plan(
    model: &ModelFile,
    options: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
) -> Result<QuantizePlan, QuantizeError> {
    let mut mixture_options = options.mixture.clone();
    mixture_options.has_imatrix = imatrix.is_some();
    let choices = mixture::choose_types(&model.metadata, &model.tensors, &mixture_options)?;
    let ftype = options.mixture.ftype;

    let mut metadata = model.metadata.clone();
    metadata.set_last("general.quantization_version", Value::U32(QUANTIZATION_VERSION));
    metadata.set_last("general.file_type", Value::U32(ftype.id()));
    for key in ["split.no", "split.count", "split.tensors.count"] {
        metadata.remove(key);
    }
    // llama-quantize applies the user's overrides, then its own imatrix keys.
    for o in &options.override_kv {
        metadata.set_last(&o.key, o.value.clone());
    }
    if let Some(imatrix) = imatrix {
        imatrix.apply_output_metadata(&mut metadata);
    }

    let order = mixture::visiting_order(&model.tensors, mixture_options.keep_split);
    let mut tensors = Vec::with_capacity(order.len());
    let mut offset = 0u64;
    for input_idx in order {
        let input = &model.tensors[input_idx];
        let choice = &choices[input_idx];
        let mut info = input.clone();
        info.ggml_type = choice.ty;
        let bytes_out = tensor_bytes(choice.ty, &input.dims).ok_or_else(|| QuantizeError::Codec {
            tensor: input.name.clone(),
            source: CodecError::PartialBlock {
                ty: choice.ty,
                n_elements: input.dims[0] as usize,
                block: choice.ty.block_size(),
            },
        })?;
        let planned = PlannedTensor {
            input_idx,
            from: input.ggml_type,
            fallback_from: choice.fallback_from,
            requires_imatrix: choice.requires_imatrix,
            bytes_in: input.n_bytes(),
            bytes_out,
            info,
        };
        if planned.converts() && planned.from.is_quantized() && !options.allow_requantize {
            return Err(QuantizeError::Requantize { tensor: input.name.clone(), from: planned.from });
        }
        offset = gguf::align_up(offset + bytes_out, gguf::DEFAULT_ALIGNMENT);
        tensors.push(planned);
    }
    let header = gguf::header_len(&metadata, tensors.iter().map(|t| &t.info));
    let file_size = gguf::align_up(header, gguf::DEFAULT_ALIGNMENT) + offset;
    Ok(QuantizePlan { ftype, metadata, tensors, file_size })
}

/// What a finished quantization did.
#[derive(Debug, Clone)]
pub struct QuantizeReport {
    pub plan: QuantizePlan,
    pub bytes_written: u64,
}

/// Reads `input`, quantizes it as `options` say and writes `output`.
pub fn quantize_file(input: &Path, output: &Path, options: &QuantizeOptions) -> Result<QuantizeReport, QuantizeError> {
    if same_file(input, output) {
        return Err(QuantizeError::OutputIsInput { input: input.to_owned(), output: output.to_owned() });
    }
    let model = ModelFile::open(input, OpenOptions::default())?;
    if model.endian == crate::model::Endian::Big {
        return Err(QuantizeError::BigEndian);
    }
    let imatrix = match &options.imatrix {
        Some(path) => {
            let mut m = ImportanceMatrix::load(path)?;
            m.filter(&options.include_weights, &options.exclude_weights);
            m.check_finite()?;
            // llama-quantize treats an imatrix filtered down to nothing as none.
            (!m.is_empty()).then_some(m)
        }
        None => None,
    };
    let plan = plan(&model, options, imatrix.as_ref())?;
    let mut importance = Vec::with_capacity(plan.tensors.len());
    for t in &plan.tensors {
        let weights = match (&imatrix, t.converts()) {
            (Some(m), true) => m.weights_for(&model.tensors[t.input_idx])?,
            _ => None,
        };
        if t.converts() && t.requires_imatrix && weights.is_none() {
            return Err(QuantizeError::NeedsImatrix { tensor: t.info.name.clone(), ty: t.info.ggml_type });
        }
        importance.push(weights);
    }

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads.max(1))
        .build()
        .map_err(|e| QuantizeError::Write { path: output.to_owned(), source: io::Error::other(e) })?;
    let write_err = |source| QuantizeError::Write { path: output.to_owned(), source };
    let mut out = AtomicOutput::create(output).map_err(write_err)?;
    let infos: Vec<TensorInfo> = plan.tensors.iter().map(|t| t.info.clone()).collect();
    let mut source = Converter { model: &model, plan: &plan, importance: &importance, pool: &pool, error: None };
    let written = gguf::write_gguf(out.writer(), model.endian, &plan.metadata, &infos, &mut source);
    if let Some(e) = source.error.take() {
        return Err(e);
    }
    let layout = written.map_err(write_err)?;
    out.commit().map_err(write_err)?;
    Ok(QuantizeReport { bytes_written: layout.file_len, plan })
}

/// Supplies each output tensor: copied when its type is unchanged,
/// converted slab by slab otherwise.
struct Converter<'a> {
    model: &'a ModelFile,
    plan: &'a QuantizePlan,
    importance: &'a [Option<&'a [f32]>],
    pool: &'a rayon::ThreadPool,
    /// A conversion error, kept typed (the writer only carries io errors).
    error: Option<QuantizeError>,
}

impl TensorDataSource for Converter<'_> {
    fn write_tensor(&mut self, idx: usize, out: &mut dyn Write) -> io::Result<()> {
        let planned = &self.plan.tensors[idx];
        let input = &self.model.tensors[planned.input_idx];
        if !planned.converts() {
            self.model.copy_tensor_data(input, out)?;
            self.model.release_tensor_range(input, 0, input.stored_len);
            return Ok(());
        }
        match convert_tensor(self.model, planned, input, self.importance[idx], self.pool, out) {
            Ok(()) => Ok(()),
            Err(ConvertError::Io(e)) => Err(e),
            Err(ConvertError::Quantize(e)) => {
                self.error = Some(e);
                Err(io::Error::other("quantization failed"))
            }
        }
    }
}

enum ConvertError {
    Io(io::Error),
    Quantize(QuantizeError),
}

fn convert_tensor(
    model: &ModelFile,
    planned: &PlannedTensor,
    input: &TensorInfo,
    importance: Option<&[f32]>,
    pool: &rayon::ThreadPool,
    out: &mut dyn Write,
) -> Result<(), ConvertError> {
    let tensor_err = |source| ConvertError::Quantize(QuantizeError::Codec { tensor: input.name.clone(), source });
    let n_per_row = input.dims[0] as usize;
    let n_rows = (input.n_elements() as usize).checked_div(n_per_row).unwrap_or(0);
    let rows_per_expert = input.dims.get(1).copied().unwrap_or(1).max(1) as usize;
    let (from, to) = (planned.from, planned.info.ggml_type);
    let row_in = from.row_size(n_per_row as u64).unwrap_or(0) as usize;
    let row_out = to.row_size(n_per_row as u64).unwrap_or(0) as usize;
    let data = model.tensor_data(input).map_err(|e| ConvertError::Io(io::Error::other(e)))?;

    let slab_rows = (SLAB_ELEMENTS / n_per_row.max(1)).max(1);
    let mut encoded = vec![0u8; slab_rows.min(n_rows) * row_out];
    for first in (0..n_rows).step_by(slab_rows) {
        let rows = slab_rows.min(n_rows - first);
        let src = &data[first * row_in..(first + rows) * row_in];
        let dst = &mut encoded[..rows * row_out];
        pool.install(|| {
            dst.par_chunks_mut(row_out).zip(src.par_chunks(row_in)).enumerate().try_for_each_init(
                || vec![0f32; n_per_row],
                |values, (r, (dst_row, src_row))| {
                    let row = first + r;
                    codecs::dequantize_row(from, src_row, values).map_err(tensor_err)?;
                    if let Some(value) = values.iter().copied().find(|v| !v.is_finite()) {
                        return Err(ConvertError::Quantize(QuantizeError::NonFinite {
                            tensor: input.name.clone(),
                            row,
                            value,
                        }));
                    }
                    let weights = importance.map(|w| &w[(row / rows_per_expert) * n_per_row..][..n_per_row]);
                    codecs::quantize_row(to, values, weights, dst_row).map_err(tensor_err)
                },
            )
        })?;
        out.write_all(dst).map_err(ConvertError::Io)?;
        model.release_tensor_range(input, (first * row_in) as u64, (rows * row_in) as u64);
    }
    Ok(())
}
