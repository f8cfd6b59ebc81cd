//! Quantization policy: what llama-quantize's flags mean and what a
//! quantization will write (metadata, order, per-tensor types), as pure
//! functions of the model's metadata, its tensor descriptors and the
//! importance matrix. The recipe op (`ops::quantize`), the converter's
//! presets and the budget planner all ask here.

use std::borrow::Cow;

use crate::artifact::BlobSinkError;
use crate::codecs::CodecError;
use crate::formats::gguf;
use crate::model::{Metadata, TensorInfo, Value, tensor_bytes};
use crate::quant::imatrix::{ImatrixError, ImportanceMatrix};
use crate::quant::mixture::{self, MixtureError, MixtureOptions};
use crate::quant::prune;
use crate::text::Name;
use crate::types::{FileType, GgmlType};
use FileType as F;

/// ggml's `GGML_QNT_VERSION`, written to `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

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

/// Everything llama-quantize's flags say, but the importance matrix file
/// itself (a recipe input the node depends on).
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    pub mixture: MixtureOptions,
    pub allow_requantize: bool,
    pub include_weights: Vec<String>,
    pub exclude_weights: Vec<String>,
    pub override_kv: Vec<KvOverride>,
    /// Instead of a preset: the output file's size in bytes, the types
    /// chosen by the budget planner (`quant::budget`).
    pub budget: Option<u64>,
    /// `--prune-layers`: layers left out (sorted, each once; `quant::prune`).
    pub prune_layers: Vec<u32>,
}

impl QuantizeOptions {
    /// The preset alone.
    pub fn new(ftype: FileType) -> QuantizeOptions {
        QuantizeOptions {
            mixture: MixtureOptions::new(ftype),
            allow_requantize: false,
            include_weights: Vec::new(),
            exclude_weights: Vec::new(),
            override_kv: Vec::new(),
            budget: None,
            prune_layers: Vec::new(),
        }
    }

    /// The options as they enter the node's cache key: every field that can
    /// change the output, normalized (preset by name, types by name).
    pub fn key_params(&self) -> serde_json::Value {
        let m = &self.mixture;
        let mut params = serde_json::json!({
            "preset": m.ftype.name(),
            "pure": m.pure,
            "leave_output_tensor": m.leave_output_tensor,
            "output_tensor_type": m.output_tensor_type.map(GgmlType::name),
            "token_embedding_type": m.token_embedding_type.map(GgmlType::name),
            "override": m.tensor_types.iter().map(|o| [o.pattern.as_str(), o.ty.name()]).collect::<Vec<_>>(),
            "keep_split": m.keep_split,
            "allow_requantize": self.allow_requantize,
            "include_weights": self.include_weights,
            "exclude_weights": self.exclude_weights,
            "override_kv": self.override_kv.iter().map(|o| format!("{}={:?}", o.key, o.value)).collect::<Vec<_>>(),
            "budget": self.budget,
        });
        // Only when set, so that the keys of every other quantization stay as they were.
        if m.only_copy {
            params["only_copy"] = true.into();
        }
        if !self.prune_layers.is_empty() {
            params["prune_layers"] = self.prune_layers.clone().into();
        }
        params
    }
}

/// One entry of llama-quantize's type list (`QUANT_OPTIONS` in the pinned
/// `tools/quantize/quantize.cpp`): a name it takes, the file type that
/// name makes, and the line its usage prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeType {
    pub name: &'static str,
    file_type: FileType,
    pub description: &'static str,
}

const fn qt(name: &'static str, file_type: FileType, description: &'static str) -> QuantizeType {
    QuantizeType { name, file_type, description }
}

/// llama-quantize's list in its order, aliases (`Q4_K` for `Q4_K_M`) and
/// [`COPY`] (file type 0, after F32, so that 0 means F32) included.
const QUANTIZE_TYPES: &[QuantizeType] = &[
    qt("Q1_0", F::Q1_0, " 1.125 bpw quantization"),
    qt("Q2_0", F::Q2_0, " 2.25 bpw quantization (group 64)"),
    qt("Q4_0", F::Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"),
    qt("Q4_1", F::Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"),
    qt("MXFP4_MOE", F::MXFP4_MOE, " MXFP4 MoE"),
    qt("Q5_0", F::Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"),
    qt("Q5_1", F::Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"),
    qt("IQ2_XXS", F::IQ2_XXS, " 2.06 bpw quantization"),
    qt("IQ2_XS", F::IQ2_XS, " 2.31 bpw quantization"),
    qt("IQ2_S", F::IQ2_S, " 2.5  bpw quantization"),
    qt("IQ2_M", F::IQ2_M, " 2.7  bpw quantization"),
    qt("IQ1_S", F::IQ1_S, " 1.56 bpw quantization"),
    qt("IQ1_M", F::IQ1_M, " 1.75 bpw quantization"),
    qt("TQ1_0", F::TQ1_0, " 1.69 bpw ternarization"),
    qt("TQ2_0", F::TQ2_0, " 2.06 bpw ternarization"),
    qt("Q2_K", F::Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"),
    qt("Q2_K_S", F::Q2_K_S, " 2.96G, +3.1836 ppl @ Llama-3-8B"),
    qt("IQ3_XXS", F::IQ3_XXS, " 3.06 bpw quantization"),
    qt("IQ3_S", F::IQ3_S, " 3.44 bpw quantization"),
    qt("IQ3_M", F::IQ3_M, " 3.66 bpw quantization mix"),
    qt("Q3_K", F::Q3_K_M, "alias for Q3_K_M"),
    qt("IQ3_XS", F::IQ3_XS, " 3.3 bpw quantization"),
    qt("Q3_K_S", F::Q3_K_S, " 3.41G, +1.6321 ppl @ Llama-3-8B"),
    qt("Q3_K_M", F::Q3_K_M, " 3.74G, +0.6569 ppl @ Llama-3-8B"),
    qt("Q3_K_L", F::Q3_K_L, " 4.03G, +0.5562 ppl @ Llama-3-8B"),
    qt("IQ4_NL", F::IQ4_NL, " 4.50 bpw non-linear quantization"),
    qt("IQ4_XS", F::IQ4_XS, " 4.25 bpw non-linear quantization"),
    qt("Q4_K", F::Q4_K_M, "alias for Q4_K_M"),
    qt("Q4_K_S", F::Q4_K_S, " 4.37G, +0.2689 ppl @ Llama-3-8B"),
    qt("Q4_K_M", F::Q4_K_M, " 4.58G, +0.1754 ppl @ Llama-3-8B"),
    qt("Q5_K", F::Q5_K_M, "alias for Q5_K_M"),
    qt("Q5_K_S", F::Q5_K_S, " 5.21G, +0.1049 ppl @ Llama-3-8B"),
    qt("Q5_K_M", F::Q5_K_M, " 5.33G, +0.0569 ppl @ Llama-3-8B"),
    qt("Q6_K", F::Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"),
    qt("Q8_0", F::Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"),
    qt("F16", F::F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    qt("BF16", F::BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    qt("F32", F::F32, "26.00G              @ 7B"),
    qt(COPY, F::F32, "only copy tensors, no quantizing"),
];

impl QuantizeType {
    /// llama-quantize's list in its order, [`COPY`] last.
    pub fn all() -> impl Iterator<Item = QuantizeType> {
        QUANTIZE_TYPES.iter().copied()
    }

    /// A type as llama-quantize reads one: a name in any case, or a file
    /// type number (the first entry with it, so 12 is `Q3_K`, as there).
    pub fn parse(text: &str) -> Option<QuantizeType> {
        let by_number = || text.parse::<u32>().ok().and_then(|id| QuantizeType::all().find(|t| t.file_type.id() == id));
        QuantizeType::all().find(|t| t.name.eq_ignore_ascii_case(text)).or_else(by_number)
    }

    pub fn file_type(self) -> FileType {
        self.file_type
    }

    pub fn is_copy(self) -> bool {
        self.name == COPY
    }

    /// Whether quantforge makes it: COPY, or a preset whose main type has an encoder.
    fn is_supported(self) -> bool {
        self.is_copy() || self.file_type().default_type().is_some_and(crate::codecs::can_quantize)
    }
}

/// A preset by name or llama ftype number, as llama-quantize accepts it,
/// among those whose main type quantforge can encode.
pub fn parse_preset(text: &str) -> Result<FileType, String> {
    QuantizeType::parse(text).filter(|t| !t.is_copy() && t.is_supported()).map(QuantizeType::file_type).ok_or_else(
        || {
            let names: Vec<&str> = preset_names().collect();
            format!("unknown quantization type `{text}`; valid types are {}", names.join(", "))
        },
    )
}

/// llama-quantize's `COPY` type: every tensor as it is, the input's file
/// type kept.
pub const COPY: &str = "COPY";

/// Whether a type as written is [`COPY`] (in any case, as llama-quantize reads it).
pub fn is_copy(text: &str) -> bool {
    text.eq_ignore_ascii_case(COPY)
}

/// The mixture a quantize type as written starts from: a preset's, or
/// [`COPY`]'s (whose file type the plan reads from the input).
pub fn mixture_for(text: &str) -> Result<MixtureOptions, String> {
    if is_copy(text) {
        let mut mixture = MixtureOptions::new(FileType::from_id(0).expect("ALL_F32 is file type 0"));
        mixture.only_copy = true;
        return Ok(mixture);
    }
    parse_preset(text).map(MixtureOptions::new)
}

/// The presets quantforge makes, by name, in llama-quantize's order.
pub fn preset_names() -> impl Iterator<Item = &'static str> {
    QuantizeType::all().filter(|t| !t.is_copy() && t.is_supported()).map(|t| t.name)
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Mixture(#[from] MixtureError),
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    #[error(transparent)]
    Blobs(#[from] BlobSinkError),
    #[error(
        "tensor `{tensor}`: requantizing from type {from} is disabled (set allow_requantize / pass --allow-requantize)"
    )]
    Requantize { tensor: String, from: GgmlType },
    #[error("tensor `{}`: {ty} needs an importance matrix (set imatrix / pass --imatrix)", Name(.tensor))]
    NeedsImatrix { tensor: String, ty: GgmlType },
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Codec { tensor: String, source: CodecError },
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

    /// The tensors written in another type than their rule chose, in order.
    pub fn fallbacks(&self) -> Fallbacks {
        let fallback = |t: &PlannedTensor| {
            let wanted = t.fallback_from?;
            Some(Fallback {
                tensor: t.info.name.clone(),
                columns: t.info.dims.first().copied().unwrap_or(0),
                wanted: wanted.name().to_owned(),
                block: wanted.block_size(),
                written: t.info.ggml_type.name().to_owned(),
            })
        };
        Fallbacks { of: self.tensors.len(), tensors: self.tensors.iter().filter_map(fallback).collect() }
    }
}

/// The tensors of a quantized model that fell back to another type.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Fallbacks {
    /// Tensors in the model.
    pub of: usize,
    pub tensors: Vec<Fallback>,
}

impl Fallbacks {
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// llama-quantize's closing warning.
    pub fn warning(&self) -> String {
        format!("{} of {} tensor(s) required fallback quantization", self.tensors.len(), self.of)
    }
}

/// A tensor whose rows do not divide into its chosen type's blocks, written
/// in the type llama-quantize falls back to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Fallback {
    pub tensor: String,
    /// Elements per row.
    pub columns: u64,
    /// The type its rule chose, and that type's block.
    pub wanted: String,
    pub block: u64,
    /// The type written.
    pub written: String,
}

/// In llama-quantize's words.
impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} - {} columns not divisible by {} (required for type {}) -> falling back to {}",
            Name(&self.tensor),
            self.columns,
            self.block,
            self.wanted,
            self.written
        )
    }
}

/// Plans a quantization of a model with this metadata and these tensors:
/// pure, no I/O.
pub fn plan(
    model_metadata: &Metadata,
    model_tensors: &[TensorInfo],
    options: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
) -> Result<QuantizePlan, QuantizeError> {
    let mut mixture_options = options.mixture.clone();
    mixture_options.has_imatrix = imatrix.is_some();
    // Pruned layers' tensors go and later layers take new names; the mixture
    // sees the names the output will have, and the model's own hyperparameters.
    let (tensors_out, origin, block_count) = match options.prune_layers.is_empty() {
        true => (Cow::Borrowed(model_tensors), (0..model_tensors.len()).collect::<Vec<usize>>(), None),
        false => {
            let order = mixture::visiting_order(model_tensors, false);
            let pruned = prune::prune(model_tensors, &order, &options.prune_layers);
            let (origin, kept): (Vec<usize>, Vec<TensorInfo>) = pruned
                .names
                .into_iter()
                .enumerate()
                .filter_map(|(i, name)| Some((i, TensorInfo { name: name?, ..model_tensors[i].clone() })))
                .unzip();
            (Cow::Owned(kept), origin, Some(pruned.block_count))
        }
    };
    let choices = mixture::choose_types(model_metadata, &tensors_out, &mixture_options)?;
    let file_type = match options.mixture.only_copy {
        true => input_file_type(model_metadata, model_tensors),
        false => options.mixture.ftype.id(),
    };
    let ftype = FileType::from_id(file_type).unwrap_or(options.mixture.ftype);

    let mut metadata = model_metadata.clone();
    metadata.set_last("general.quantization_version", Value::U32(QUANTIZATION_VERSION));
    metadata.set_last("general.file_type", Value::U32(file_type));
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
    if let Some(block_count) = block_count {
        let arch = metadata.get_str("general.architecture").unwrap_or_default().to_owned();
        metadata.set_last(&format!("{arch}.block_count"), Value::U32(block_count));
    }

    let order = mixture::visiting_order(&tensors_out, mixture_options.keep_split);
    let mut tensors = Vec::with_capacity(order.len());
    let mut offset = 0u64;
    for k in order {
        let input = &tensors_out[k];
        let choice = &choices[k];
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
            input_idx: origin[k],
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

/// The input's `general.file_type`, or the one llama.cpp's loader guesses
/// from its tensors when it has none: what a `COPY` writes.
fn input_file_type(metadata: &Metadata, tensors: &[TensorInfo]) -> u32 {
    if let Some(Value::U32(id)) = metadata.get("general.file_type") {
        return *id;
    }
    FileType::guessed_id(mixture::visiting_order(tensors, false).into_iter().map(|i| tensors[i].ggml_type))
}

/// Loads an importance matrix as llama-quantize would use it: filtered by
/// the include/exclude lists, checked finite, and none if nothing is left.
pub fn load_imatrix(
    path: &std::path::Path,
    recorded_as: &std::path::Path,
    options: &QuantizeOptions,
) -> Result<Option<ImportanceMatrix>, ImatrixError> {
    prepare_imatrix(ImportanceMatrix::load(path)?, recorded_as, options)
}

/// An importance matrix made ready for `options`: its entries filtered by
/// `include_weights`/`exclude_weights`, checked finite, and recorded as
/// `recorded_as`; `None` when nothing is left.
pub fn prepare_imatrix(
    mut m: ImportanceMatrix,
    recorded_as: &std::path::Path,
    options: &QuantizeOptions,
) -> Result<Option<ImportanceMatrix>, ImatrixError> {
    m.filter(&options.include_weights, &options.exclude_weights);
    m.check_finite()?;
    m.record_as(recorded_as);
    Ok((!m.is_empty()).then_some(m))
}

/// Importance weights as stored in a blob (little-endian f32).
pub fn importance_from_blob(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}
