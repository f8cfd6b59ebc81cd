//! `quantize`: llama-quantize's job, byte for byte, as a recipe op.
//!
//! Pure: the output metadata (llama-quantize's key order and values), the
//! tensors in llama-quantize's order, each either passed through or a
//! conversion to the type the mixture chose. No tensor bytes are touched
//! here; the conversions run when something materializes the result.

use crate::artifact::{Tensor, TensorSet};
use crate::codecs::CodecError;
use crate::formats::gguf;
use crate::model::{Endian, Metadata, TensorInfo, Value, tensor_bytes};
use crate::quant::imatrix::{ImatrixError, ImportanceMatrix};
use crate::quant::mixture::{self, MixtureError, MixtureOptions, TensorTypeOverride};
use crate::recipe::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::store::{Store, StoreError};
use crate::types::{FileType, GgmlType};

/// ggml's `GGML_QNT_VERSION`, written to `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

pub const SPEC: OpSpec = OpSpec {
    name: "quantize",
    version: 1,
    params: &[
        ParamSpec::optional("preset", ParamKind::Str).fanning_out(),
        ParamSpec::optional("budget", ParamKind::Str).fanning_out(),
        ParamSpec::optional("override", ParamKind::TableList),
        ParamSpec::optional("imatrix", ParamKind::InputName),
        ParamSpec::optional("include_weights", ParamKind::StrList),
        ParamSpec::optional("exclude_weights", ParamKind::StrList),
        ParamSpec::optional("allow_requantize", ParamKind::Bool),
        ParamSpec::optional("pure", ParamKind::Bool),
        ParamSpec::optional("leave_output_tensor", ParamKind::Bool),
        ParamSpec::optional("output_tensor_type", ParamKind::Str).fanning_out(),
        ParamSpec::optional("token_embedding_type", ParamKind::Str).fanning_out(),
        ParamSpec::optional("override_kv", ParamKind::StrList),
    ],
    from_input_only: false,
    is_sink: false,
    many_inputs: false,
};

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
        }
    }

    /// Reads a recipe step's parameters.
    pub fn from_params(p: &Params) -> Result<QuantizeOptions, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let budget = match p.str("budget") {
            Some((text, _)) => crate::formats::parse_size(text).map_err(|e| problems.push(p.error("budget", e))).ok(),
            None => None,
        };
        let ftype = match (p.str("preset"), budget) {
            (Some(_), Some(_)) => {
                problems.push(p.error("budget", "give a `preset` or a `budget`, not both"));
                None
            }
            (Some((name, _)), None) => parse_preset(name).map_err(|e| problems.push(p.error("preset", e))).ok(),
            (None, Some(_)) => Some(crate::quant::budget::probe_preset()),
            (None, None) => None,
        };
        let mut ggml_type = |name: &str| match p.str(name) {
            Some((text, _)) => match GgmlType::from_name(text) {
                Some(ty) => Some(ty),
                None => {
                    let names: Vec<&str> = GgmlType::all().map(GgmlType::name).collect();
                    problems.push(p.error(name, format!("unknown ggml type `{text}`")).suggest(text, names));
                    None
                }
            },
            None => None,
        };
        let output_tensor_type = ggml_type("output_tensor_type");
        let token_embedding_type = ggml_type("token_embedding_type");
        let mut tensor_types = Vec::new();
        for (fields, span) in p.table_list("override") {
            let field = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            let unknown: Vec<&str> =
                fields.iter().map(|(k, _)| *k).filter(|k| !["match", "type"].contains(k)).collect();
            for k in unknown {
                problems.push(
                    Diagnostic::new(format!("unknown field `{k}` in an override"), span.clone())
                        .suggest(k, ["match", "type"]),
                );
            }
            match (field("match"), field("type")) {
                (Some(pattern), Some(ty)) => match TensorTypeOverride::new(pattern, ty) {
                    Ok(o) => tensor_types.push(o),
                    Err(MixtureError::BadOverride { problem, .. }) => {
                        problems.push(Diagnostic::new(format!("bad override: {problem}"), span.clone()))
                    }
                    Err(e) => problems.push(Diagnostic::new(e.to_string(), span.clone())),
                },
                _ => problems.push(
                    Diagnostic::new("an override needs `match` (a regex) and `type`", span.clone())
                        .with_hint(r#"override = [{ match = "ffn_down", type = "Q6_K" }]"#),
                ),
            }
        }
        let mut override_kv = Vec::new();
        for (text, span) in p.str_list("override_kv") {
            match KvOverride::parse(text) {
                Ok(o) => override_kv.push(o),
                Err(e) => problems.push(Diagnostic::new(e, span.clone())),
            }
        }
        let Some(ftype) = ftype else {
            if problems.is_empty() {
                problems.push(p.error("preset", "`quantize` needs a `preset` or a `budget`"));
            }
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut mixture = MixtureOptions::new(ftype);
        mixture.pure = p.bool("pure");
        mixture.leave_output_tensor = p.bool("leave_output_tensor");
        mixture.output_tensor_type = output_tensor_type;
        mixture.token_embedding_type = token_embedding_type;
        mixture.tensor_types = tensor_types;
        Ok(QuantizeOptions {
            mixture,
            allow_requantize: p.bool("allow_requantize"),
            include_weights: p.str_list("include_weights").into_iter().map(|(s, _)| s.to_owned()).collect(),
            exclude_weights: p.str_list("exclude_weights").into_iter().map(|(s, _)| s.to_owned()).collect(),
            override_kv,
            budget,
        })
    }

    /// The options as they enter the node's cache key: every field that can
    /// change the output, normalized (preset by name, types by name).
    pub fn key_params(&self) -> serde_json::Value {
        let m = &self.mixture;
        serde_json::json!({
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
        })
    }
}

/// A preset by name or llama ftype number, as llama-quantize accepts it,
/// among those whose main type quantforge can encode.
pub fn parse_preset(text: &str) -> Result<FileType, String> {
    let supported = |f: &FileType| mixture::default_type(*f).is_some_and(crate::codecs::can_quantize);
    let by_number = text.parse::<u32>().ok().and_then(FileType::from_id);
    by_number.or_else(|| FileType::from_name(text)).filter(supported).ok_or_else(|| {
        let names: Vec<&str> = FileType::all().filter(supported).map(FileType::name).collect();
        format!("unknown quantization type `{text}`; valid types are {}", names.join(", "))
    })
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Mixture(#[from] MixtureError),
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "tensor `{tensor}`: requantizing from type {from} is disabled (set allow_requantize / pass --allow-requantize)"
    )]
    Requantize { tensor: String, from: GgmlType },
    #[error("tensor `{tensor}`: {ty} needs an importance matrix (set imatrix / pass --imatrix)")]
    NeedsImatrix { tensor: String, ty: GgmlType },
    #[error("tensor `{tensor}`: {source}")]
    Codec { tensor: String, source: CodecError },
    #[error("input tensors are big-endian; quantizing them is not supported yet")]
    BigEndian,
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
    let choices = mixture::choose_types(model_metadata, model_tensors, &mixture_options)?;
    let ftype = options.mixture.ftype;

    let mut metadata = model_metadata.clone();
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

    let order = mixture::visiting_order(model_tensors, mixture_options.keep_split);
    let mut tensors = Vec::with_capacity(order.len());
    let mut offset = 0u64;
    for input_idx in order {
        let input = &model_tensors[input_idx];
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

/// The quantized tensor set: `input`'s tensors in llama-quantize's order,
/// each passed through or converted. Importance weights go to the store as
/// blobs, so the conversions (and their keys) name them by hash.
pub fn apply(
    input: &TensorSet,
    options: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
    store: &dyn Store,
) -> Result<TensorSet, QuantizeError> {
    if input.endian == Endian::Big {
        return Err(QuantizeError::BigEndian);
    }
    let infos = input.infos();
    let plan = plan(&input.metadata, &infos, options, imatrix)?;
    let mut tensors = Vec::with_capacity(plan.tensors.len());
    for planned in &plan.tensors {
        let source = &input.tensors[planned.input_idx];
        if !planned.converts() {
            tensors.push(source.clone());
            continue;
        }
        let weights = match imatrix {
            Some(m) => m.weights_for(&infos[planned.input_idx])?,
            None => None,
        };
        if planned.requires_imatrix && weights.is_none() {
            return Err(QuantizeError::NeedsImatrix { tensor: source.name.clone(), ty: planned.info.ggml_type });
        }
        let importance = match weights {
            Some(w) => Some(store.put_blob(&w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?),
            None => None,
        };
        tensors.push(Tensor::convert(source.clone(), planned.info.ggml_type, importance));
    }
    Ok(TensorSet { endian: input.endian, metadata: plan.metadata, tensors })
}

/// Loads an importance matrix as llama-quantize would use it: filtered by
/// the include/exclude lists, checked finite, and none if nothing is left.
pub fn load_imatrix(
    path: &std::path::Path,
    options: &QuantizeOptions,
) -> Result<Option<ImportanceMatrix>, ImatrixError> {
    let mut m = ImportanceMatrix::load(path)?;
    m.filter(&options.include_weights, &options.exclude_weights);
    m.check_finite()?;
    Ok((!m.is_empty()).then_some(m))
}

/// Importance weights as stored in a blob (little-endian f32).
pub fn importance_from_blob(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}
