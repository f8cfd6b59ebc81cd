//! `inspect`: a summary of a model file built from its header alone.
//!
//! The report is a plain serialisable value; its JSON form is a stable,
//! documented interface (`docs/INSPECT_JSON.md`). Bump [`SCHEMA_VERSION`]
//! when a field changes meaning or disappears.

use serde::Serialize;
use serde_json::{Value as Json, json};

use crate::arch::registry::{DetectedBy, Family, Role, detect, role_of};
use crate::formats::{LoadReport, ModelFile};
use crate::model::{Array, TensorInfo, Value};
use crate::types::{FileType, GgmlType};

pub const SCHEMA_VERSION: u32 = 1;

/// Arrays longer than this are summarised by their length and first entries.
pub const ARRAY_PREVIEW: usize = 8;

/// A model file (or a split, or a bundle) as its header describes it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InspectReport {
    pub schema: u32,
    pub file: String,
    pub file_size: u64,
    pub format: &'static str,
    pub version: u32,
    pub endian: crate::model::Endian,
    pub alignment: u64,
    pub data_offset: u64,
    #[serde(flatten)]
    pub identity: Identity,
    pub file_type: Option<FileTypeReport>,
    pub load: LoadReport,
    /// True when pre-GGJTv3 blocks are repacked (scales narrowed to f16) on read.
    pub legacy_blocks_repacked: bool,
    pub metadata: Vec<MetadataEntry>,
    pub tensor_count: usize,
    pub element_count: u64,
    pub tensor_bytes: u64,
    pub bits_per_weight: f64,
    pub types: Vec<TypeTotals>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensors: Option<Vec<TensorRow>>,
    /// For a bundle (`quantforge assemble`): each part, in bundle order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<PartReport>>,
    /// When the file is one shard of a split: the whole split, which the
    /// rest of the report then describes (metadata without `split.*` keys,
    /// every shard's tensors, sizes summed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<ShardRow>>,
    /// For a Hugging Face checkpoint directory: what its `config.json` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointConfig>,
}

/// A Hugging Face checkpoint's `config.json`, as `convert` reads it: the
/// class it names, its `model_type`, and the GGUF architecture `convert`
/// writes it as (none when `convert` does not take the class).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CheckpointConfig {
    pub class: Option<String>,
    pub model_type: Option<String>,
    pub converts_as: Option<&'static str>,
}

impl CheckpointConfig {
    pub fn of(config: &serde_json::Value) -> CheckpointConfig {
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        let class = config.get("architectures").and_then(|a| a.get(0)).and_then(text);
        let converts_as = class.as_deref().and_then(crate::convert::family::of_class).map(|(_, arch)| arch);
        CheckpointConfig { class, model_type: config.get("model_type").and_then(text), converts_as }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FamilyReport {
    pub id: &'static str,
    pub name: &'static str,
    pub detected_by: DetectedBy,
}

impl FamilyReport {
    fn detect(metadata: &crate::model::Metadata, tensors: &[TensorInfo]) -> FamilyReport {
        let detection = detect(metadata, tensors);
        FamilyReport { id: detection.family.id, name: detection.family.name, detected_by: detection.by }
    }
}

/// What a model is: its architecture, its family, and for a language model
/// its hyperparameters.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Identity {
    pub architecture: Option<String>,
    /// The model family the registry detected, and the rule that decided.
    pub family: FamilyReport,
    /// A language model's hyperparameters, checked against its tensors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperparameters: Option<crate::arch::hparams::Hyperparameters>,
    /// Why the hyperparameters do not hold together (the key at fault first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperparameter_error: Option<String>,
}

impl Identity {
    fn of(metadata: &crate::model::Metadata, tensors: &[TensorInfo]) -> Identity {
        let hparams = crate::arch::hparams::hyperparameters(metadata, tensors);
        Identity {
            architecture: metadata.get_str("general.architecture").map(str::to_owned),
            family: FamilyReport::detect(metadata, tensors),
            hyperparameters: hparams.as_ref().ok().cloned().flatten(),
            hyperparameter_error: hparams.err().map(|e| e.to_string()),
        }
    }
}

/// One part of a bundle, as a model of its own.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PartReport {
    /// `language`, `vision`, `audio` or `vision-audio`.
    pub role: &'static str,
    #[serde(flatten)]
    pub identity: Identity,
    pub tensor_count: usize,
    pub tensor_bytes: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ShardRow {
    pub file: String,
    pub file_size: u64,
    pub tensor_count: usize,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FileTypeReport {
    pub id: u32,
    pub name: Option<&'static str>,
    pub description: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MetadataEntry {
    pub key: String,
    /// `u8` … `f64`, `bool`, `str`, or `arr`.
    #[serde(rename = "type")]
    pub value_type: &'static str,
    /// For arrays: the element type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub element_type: Option<&'static str>,
    /// For arrays: the number of elements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub len: Option<usize>,
    /// The value; for arrays the first [`ARRAY_PREVIEW`] elements (or all,
    /// when `truncated` is false).
    pub value: Json,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TypeTotals {
    #[serde(rename = "type")]
    pub ggml_type: &'static str,
    pub tensors: usize,
    pub elements: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TensorRow {
    pub name: String,
    #[serde(rename = "type")]
    pub ggml_type: &'static str,
    /// ggml order: the row length first.
    pub shape: Vec<u64>,
    /// Absolute byte offset of the tensor's data in the file.
    pub offset: u64,
    /// Bytes in the current ggml layout.
    pub bytes: u64,
    /// What the tensor is for, from its name ([`Role`]).
    pub role: Role,
    /// The shard (0-based) holding the tensor, when inspecting a split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct InspectOptions {
    pub tensors: bool,
}

pub fn inspect(model: &ModelFile, options: InspectOptions) -> InspectReport {
    let mut identity = Identity::of(&model.metadata, &model.tensors);
    // A bundle's hyperparameters are its parts'.
    let parts = match crate::ops::assemble::is_bundle(&model.metadata) {
        false => None,
        true => {
            let parts = bundle_parts(&model.metadata, &model.tensors);
            identity.hyperparameters = None;
            identity.hyperparameter_error = parts.as_ref().err().cloned();
            parts.ok()
        }
    };
    let element_count: u64 = model.tensors.iter().map(TensorInfo::n_elements).sum();
    let tensor_bytes: u64 = model.tensors.iter().map(TensorInfo::n_bytes).sum();
    let file_type = model.metadata.get("general.file_type").and_then(Value::as_u64).map(|id| {
        let known = u32::try_from(id).ok().and_then(FileType::from_id);
        FileTypeReport {
            id: u32::try_from(id).unwrap_or(u32::MAX),
            name: known.map(FileType::name),
            description: known.map(FileType::description),
        }
    });
    InspectReport {
        schema: SCHEMA_VERSION,
        file: model.path().display().to_string(),
        file_size: model.file_len(),
        format: model.format.name(),
        version: model.format.version(),
        endian: model.endian,
        alignment: model.alignment,
        data_offset: model.data_offset,
        identity,
        file_type,
        load: model.load.clone(),
        legacy_blocks_repacked: model.has_legacy_blocks(),
        metadata: model.metadata.iter().map(|(k, v)| metadata_entry(k, v)).collect(),
        tensor_count: model.tensors.len(),
        element_count,
        tensor_bytes,
        bits_per_weight: if element_count == 0 { 0.0 } else { tensor_bytes as f64 * 8.0 / element_count as f64 },
        types: type_totals(&model.tensors),
        tensors: options.tensors.then(|| {
            let family = detect(&model.metadata, &model.tensors).family;
            model.tensors.iter().map(|t| tensor_row(family, t)).collect()
        }),
        parts,
        split: None,
        checkpoint: None,
    }
}

fn bundle_parts(metadata: &crate::model::Metadata, tensors: &[TensorInfo]) -> Result<Vec<PartReport>, String> {
    use crate::ops::assemble::{name_in_part, part_metadata};
    let roles = crate::ops::assemble::bundle_parts(metadata).map_err(|e| e.to_string())?;
    let parts = roles.into_iter().map(|role| {
        let metadata = part_metadata(metadata, role);
        let tensors: Vec<TensorInfo> = tensors
            .iter()
            .filter_map(|t| Some(TensorInfo { name: name_in_part(&t.name, role)?.to_owned(), ..t.clone() }))
            .collect();
        PartReport {
            role: role.name(),
            identity: Identity::of(&metadata, &tensors),
            tensor_count: tensors.len(),
            tensor_bytes: tensors.iter().map(TensorInfo::n_bytes).sum(),
        }
    });
    Ok(parts.collect())
}

fn type_totals(tensors: &[TensorInfo]) -> Vec<TypeTotals> {
    GgmlType::all()
        .filter_map(|ty| {
            let of_type = tensors.iter().filter(|t| t.ggml_type == ty);
            let (n, elements, bytes) =
                of_type.fold((0, 0, 0), |(n, e, b), t| (n + 1, e + t.n_elements(), b + t.n_bytes()));
            (n > 0).then_some(TypeTotals { ggml_type: ty.name(), tensors: n, elements, bytes })
        })
        .collect()
}

fn tensor_row(family: &Family, t: &TensorInfo) -> TensorRow {
    TensorRow {
        role: role_of(family, &t.name),
        name: t.name.clone(),
        ggml_type: t.ggml_type.name(),
        shape: t.dims.clone(),
        offset: t.file_offset,
        bytes: t.n_bytes(),
        shard: None,
    }
}

/// The report of a whole split, given its shards in order (checked to
/// belong together): the first shard's container facts, the merged model's
/// metadata and tensors.
pub fn inspect_split(shards: &[&ModelFile], options: InspectOptions) -> Option<InspectReport> {
    let first = shards.first()?;
    let tensors: Vec<TensorInfo> = shards.iter().flat_map(|s| s.tensors.iter().cloned()).collect();
    let metadata = crate::ops::split::merged_metadata(&first.metadata, false);
    let mut report = inspect(first, options);
    let element_count: u64 = tensors.iter().map(TensorInfo::n_elements).sum();
    let tensor_bytes: u64 = tensors.iter().map(TensorInfo::n_bytes).sum();
    report.file_size = shards.iter().map(|s| s.file_len()).sum();
    report.metadata = metadata.iter().map(|(k, v)| metadata_entry(k, v)).collect();
    report.tensor_count = tensors.len();
    report.element_count = element_count;
    report.tensor_bytes = tensor_bytes;
    report.bits_per_weight = if element_count == 0 { 0.0 } else { tensor_bytes as f64 * 8.0 / element_count as f64 };
    report.types = type_totals(&tensors);
    report.identity = Identity::of(&metadata, &tensors);
    let family = detect(&metadata, &tensors).family;
    report.tensors = options.tensors.then(|| {
        shards
            .iter()
            .enumerate()
            .flat_map(|(no, s)| s.tensors.iter().map(move |t| TensorRow { shard: Some(no), ..tensor_row(family, t) }))
            .collect()
    });
    report.split = Some(
        shards
            .iter()
            .map(|s| ShardRow {
                file: s.path().display().to_string(),
                file_size: s.file_len(),
                tensor_count: s.tensors.len(),
            })
            .collect(),
    );
    Some(report)
}

/// A metadata value as a message says it, with what a number stands for
/// where its key says: `general.file_type` 15 is `15 (Q4_K_M)`.
pub fn value_text(key: &str, value: &Value) -> String {
    let file_type = value.as_u64().and_then(|id| u32::try_from(id).ok()).and_then(FileType::from_id);
    match (key, file_type) {
        ("general.file_type", Some(file_type)) => format!("{value} ({})", file_type.name()),
        _ => value.to_string(),
    }
}

fn metadata_entry(key: &str, value: &Value) -> MetadataEntry {
    let mut entry = MetadataEntry {
        key: key.to_owned(),
        value_type: value.value_type().name(),
        element_type: None,
        len: None,
        value: Json::Null,
        truncated: false,
    };
    match value {
        Value::Array(array) => {
            entry.element_type = Some(array.element_type().name());
            entry.len = Some(array.len());
            entry.truncated = array.len() > ARRAY_PREVIEW;
            entry.value = array_preview(array);
        }
        scalar => entry.value = scalar_json(scalar),
    }
    entry
}

fn array_preview(array: &Array) -> Json {
    let shown = array.len().min(ARRAY_PREVIEW);
    Json::Array((0..shown).filter_map(|i| array.get(i)).map(|v| scalar_json(&v)).collect())
}

/// JSON for one value. Non-finite floats, which JSON cannot hold, become the
/// strings `"NaN"`, `"inf"` and `"-inf"`.
pub fn scalar_json(value: &Value) -> Json {
    fn float(x: f64) -> Json {
        if x.is_finite() { json!(x) } else { Json::String(x.to_string()) }
    }
    match value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        // Through the shortest decimal that reads back as the same f32, so
        // 1e-6 prints as 1e-6 rather than 9.999999974752427e-7.
        Value::F32(v) => float(v.to_string().parse().unwrap_or(f64::NAN)),
        Value::F64(v) => float(*v),
        Value::Bool(v) => json!(v),
        Value::String(s) => Json::String(s.to_string_lossy()),
        Value::Array(a) => {
            let all: Vec<Json> = (0..a.len()).filter_map(|i| a.get(i)).map(|v| scalar_json(&v)).collect();
            Json::Array(all)
        }
    }
}
