//! `convert`: a Hugging Face checkpoint directory (a recipe input) as a
//! tensor set, as `convert_hf_to_gguf.py` would write it, or quantized
//! straight to a preset. It reads the checkpoint through the run's pinned
//! files alone, and writes only generated tensors' values (as blobs); the
//! other tensors are conversions of the checkpoint's values that the
//! materializer computes a slab at a time, on the worker pool, when an
//! export needs them.

use std::path::Path;
use std::sync::Arc;

use crate::artifact::{BlobSink, BlobSinkError, CheckpointScale, HeaderEnd, Tensor, TensorAt, TensorSet};
use crate::convert::{
    Adapter, Checkpoint, CheckpointFiles, CheckpointPart, ConvertError, MetadataOverride, Mxfp4Part, OutType, ScaleAt,
    Scope, Values, convert, convert_lora, convert_quantized,
};
use crate::key::Key;
use crate::model::Endian;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::quant::plan::parse_preset;
use crate::types::{FileType, GgmlType};

// Version 2: model cards read whole, the post-processor's edits of the
// tokenizer config (CLS as BOS, SEP as EOS): metadata of earlier keys differs.
// Version 3: a `tokenizer.json` vocabulary's pre-tokenizer told by its check
// hash, as the converter tells it (it was the family's usual name).
pub const SPEC: OpSpec = OpSpec::new(
    "convert",
    3,
    &[
        ParamSpec::optional("outtype", ParamKind::Name).fanning_out(),
        ParamSpec::optional("pre", ParamKind::Str),
        ParamSpec::optional("model_name", ParamKind::Str),
        ParamSpec::optional("vocab_only", ParamKind::Bool),
        ParamSpec::optional("mmproj", ParamKind::Bool),
        ParamSpec::optional("metadata", ParamKind::InputName),
    ],
)
.reading_an_input();

/// What the checkpoint becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `convert_hf_to_gguf.py --outtype auto` (its default): bf16 or f16,
    /// as the checkpoint stores its weights.
    Auto,
    /// `convert_hf_to_gguf.py --outtype`.
    Float(OutType),
    /// A quantization preset, from the checkpoint's own values.
    Preset(FileType),
}

impl Target {
    /// `auto`, a float outtype (`f32`, `f16`, `bf16`, `q8_0`) or a preset.
    pub fn parse(name: &str) -> Result<Target, String> {
        if name.eq_ignore_ascii_case("auto") {
            return Ok(Target::Auto);
        }
        match OutType::from_name(name) {
            Some(outtype) => Ok(Target::Float(outtype)),
            None => parse_preset(name).map(Target::Preset).map_err(|e| e.to_string()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertOptions {
    pub target: Target,
    /// The pre-tokenizer name of a `tokenizer.json` vocabulary (default: the
    /// one its check hash is known by; an unknown hash is refused).
    pub pre: Option<String>,
    /// The model's name, written as it is (the converter's `--model-name`).
    pub model_name: Option<String>,
    /// The converter's `--vocab-only`: the metadata without a tensor.
    pub vocab_only: bool,
    /// The converter's `--mmproj`: the vision tower as llama.cpp's projector file.
    pub mmproj: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertOpError {
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Blobs(#[from] BlobSinkError),
    #[error("{}: a checkpoint file the run did not hash (it appeared during the run?)", .0.display())]
    UnpinnedFile(std::path::PathBuf),
    #[error("a vocabulary alone has no tensors to quantize to {0}: give a float outtype (auto, f32, f16, bf16, q8_0)")]
    QuantizedVocabulary(&'static str),
    #[error(
        "a projector file is converted to a float outtype (auto, f32, f16, bf16, q8_0), as convert_hf_to_gguf.py \
         --mmproj converts it, not to {0}"
    )]
    QuantizedProjector(&'static str),
    #[error("--mmproj and --vocab-only: a projector file has no vocabulary (as convert_hf_to_gguf.py refuses)")]
    ProjectorVocabulary,
}

/// Whether the converter writes tensor `index` of `model` as `target` byte
/// for byte as the checkpoint stores it, so it is copied, file to file,
/// instead of decoded and encoded again: no transform, the same float type
/// and shape, and every value finite (a conversion refuses the others, and
/// a finite bf16 comes back unchanged from the f32 the converter goes through).
fn written_as_stored(
    model: &crate::formats::ModelFile,
    index: usize,
    transform: &crate::artifact::RowTransform,
    target: &crate::model::TensorInfo,
) -> Result<bool, ConvertOpError> {
    let Some(source) = model.tensors.get(index) else { return Ok(false) };
    let same = *transform == Default::default()
        && source.ggml_type == target.ggml_type
        && source.dims == target.dims
        && matches!(source.layout, crate::model::StoredLayout::Native);
    if !same {
        return Ok(false);
    }
    let finite = crate::codecs::all_finite(source.ggml_type, &model.tensor_data(source).map_err(ConvertError::from)?);
    // The copy goes file to file: the pages just read need not stay mapped.
    model.release_tensor_range(source, 0, source.n_bytes());
    Ok(finite == Some(true))
}

impl ConvertOptions {
    pub fn from_params(p: &Params) -> Result<ConvertOptions, Vec<Diagnostic>> {
        let target = match p.str("outtype") {
            None => Target::Auto,
            Some((name, _)) => Target::parse(name).map_err(|e| vec![p.error("outtype", e)])?,
        };
        let text = |name: &str| p.str(name).map(|(s, _)| s.to_owned());
        Ok(ConvertOptions {
            target,
            pre: text("pre"),
            model_name: text("model_name"),
            vocab_only: p.bool("vocab_only"),
            mmproj: p.bool("mmproj"),
        })
    }

    pub fn key_params(&self) -> serde_json::Value {
        let outtype = match self.target {
            Target::Auto => "Auto".to_owned(),
            Target::Float(t) => format!("{t:?}"),
            Target::Preset(f) => f.name().to_owned(),
        };
        let mut params = serde_json::json!({ "outtype": outtype, "pre": self.pre });
        // Absent, not null, when unset: keys made before the field existed stay valid.
        if let Some(name) = &self.model_name {
            params["model_name"] = name.as_str().into();
        }
        if self.vocab_only {
            params["vocab_only"] = true.into();
        }
        if self.mmproj {
            params["mmproj"] = true.into();
        }
        params
    }
}

/// Where a checkpoint part's FP8 scales are, by the file's content hash.
fn scale_of(
    checkpoint: &Checkpoint,
    part: &CheckpointPart,
    pinned: &dyn Fn(&Path) -> Result<Key, ConvertOpError>,
) -> Result<Option<CheckpointScale>, ConvertOpError> {
    let Some(ScaleAt { shard, tensor, block }) = part.scale else { return Ok(None) };
    let file = pinned(checkpoint.shards[shard].path())?;
    Ok(Some(CheckpointScale { file, index: tensor, block }))
}

/// The files a run hashed before any step ran, each checked unchanged as
/// it is read: a conversion reads its checkpoint through them, and names
/// each tensor's source file by the content key the run gave it.
pub trait PinnedFiles: CheckpointFiles {
    /// The content key of the file at `path`; `None` when the run did not
    /// hash it.
    fn key_of(&self, path: &Path) -> Option<Key>;
}

/// The converted checkpoint in `dir`: its metadata, and each tensor as a
/// conversion of the checkpoint tensor's transformed f32 values to the
/// output type, computed a slab at a time when something needs the bytes.
/// `metadata` is the converter's `--metadata` file, a recipe input.
pub fn apply(
    dir: &Path,
    options: &ConvertOptions,
    metadata: Option<&Path>,
    files: &Arc<dyn PinnedFiles>,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<TensorSet, ConvertOpError> {
    let dir = &crate::formats::hub_snapshot(dir);
    let mut checkpoint = Checkpoint::open(dir, files.clone()).map_err(ConvertError::from)?;
    checkpoint.repository = crate::formats::hub_model_name(dir);
    checkpoint.model_name = options.model_name.clone();
    checkpoint.metadata_override = metadata.map(|path| MetadataOverride::read(&**files, path)).transpose()?;
    let pre = options.pre.as_deref();
    let scope = match (options.vocab_only, options.mmproj) {
        (true, true) => return Err(ConvertOpError::ProjectorVocabulary),
        (true, false) => Scope::VocabOnly,
        (false, true) => Scope::Mmproj,
        (false, false) => Scope::Model,
    };
    let (metadata, converted) = match options.target {
        Target::Auto => convert(&checkpoint, OutType::auto(&checkpoint, scope), pre, scope)?,
        Target::Float(outtype) => convert(&checkpoint, outtype, pre, scope)?,
        Target::Preset(ftype) if options.vocab_only => return Err(ConvertOpError::QuantizedVocabulary(ftype.name())),
        Target::Preset(ftype) if options.mmproj => return Err(ConvertOpError::QuantizedProjector(ftype.name())),
        Target::Preset(ftype) => convert_quantized(&checkpoint, ftype, pre)?,
    };
    let header_end = if options.vocab_only { HeaderEnd::AtMetadata } else { HeaderEnd::Aligned };
    tensor_set(&checkpoint, metadata, converted, header_end, blobs, &**files)
}

/// The converted tensors as a set whose bytes the materializer computes
/// from the checkpoint's pinned files.
fn tensor_set(
    checkpoint: &Checkpoint,
    metadata: crate::model::Metadata,
    converted: Vec<crate::convert::ConvertedTensor>,
    header_end: HeaderEnd,
    blobs: &(impl BlobSink + ?Sized),
    files: &dyn PinnedFiles,
) -> Result<TensorSet, ConvertOpError> {
    let pinned = |path: &Path| files.key_of(path).ok_or_else(|| ConvertOpError::UnpinnedFile(path.to_owned()));
    let tensors = converted
        .into_iter()
        .map(|t| {
            let info = &t.info;
            let values = match t.values_source() {
                Values::Generated(values) => {
                    let hash = blobs.put_blob(&values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?;
                    Tensor::generated(&crate::model::TensorInfo { ggml_type: GgmlType::F32, ..info.clone() }, hash)
                }
                Values::Checkpoint(part) => {
                    let model = &checkpoint.shards[part.shard];
                    let file = pinned(model.path())?;
                    if part.scale.is_none() && written_as_stored(model, part.tensor, &part.transform, info)? {
                        return Ok(Tensor::from_input(file, part.tensor, info));
                    }
                    let scale = scale_of(checkpoint, part, &pinned)?;
                    Tensor::from_checkpoint(&info.name, info.dims.clone(), file, part.tensor, part.transform, scale)
                }
                Values::Stacked(parts) => {
                    let parts = parts
                        .iter()
                        .map(|part| {
                            let model = &checkpoint.shards[part.shard];
                            let source = &model.tensors[part.tensor];
                            let file = pinned(model.path())?;
                            let dims = crate::convert::selected_dims(&source.dims, &part.transform);
                            let scale = scale_of(checkpoint, part, &pinned)?;
                            Ok(Tensor::from_checkpoint(&source.name, dims, file, part.tensor, part.transform, scale))
                        })
                        .collect::<Result<Vec<_>, ConvertOpError>>()?;
                    Tensor::stacked(&info.name, info.dims.clone(), parts)
                }
                Values::Mxfp4(Mxfp4Part { blocks, scales, rows }) => {
                    let at = |(shard, index): (usize, usize)| {
                        Ok::<_, ConvertOpError>(TensorAt { file: pinned(checkpoint.shards[shard].path())?, index })
                    };
                    let repacked = Tensor::mxfp4(&info.name, info.dims.clone(), at(*blocks)?, at(*scales)?, *rows);
                    // Kept as published unless a preset's mixture asks for another type.
                    if info.ggml_type == GgmlType::MXFP4 {
                        return Ok(repacked);
                    }
                    repacked
                }
            };
            Ok(Tensor::convert(values, info.ggml_type, None))
        })
        .collect::<Result<Vec<_>, ConvertOpError>>()?;
    Ok(TensorSet { endian: Endian::Little, metadata, tensors, header_end, legacy: None })
}

// Version 1: convert_lora_to_gguf.py's file.
pub const LORA_SPEC: OpSpec = OpSpec::new(
    "convert-lora",
    1,
    &[ParamSpec::optional("outtype", ParamKind::Name), ParamSpec::required("base", ParamKind::InputName)],
)
.reading_an_input();

/// `convert-lora`: a PEFT adapter directory as a GGUF LoRA adapter, as
/// `convert_lora_to_gguf.py` writes it; the base (an input) gives the
/// architecture and names (its config only: its weights are not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertLoraOptions {
    /// f32 (the converter's default), f16, bf16 or q8_0.
    pub outtype: OutType,
}

impl ConvertLoraOptions {
    pub fn from_params(p: &Params) -> Result<ConvertLoraOptions, Vec<Diagnostic>> {
        let outtype = match p.str("outtype") {
            None => OutType::F32,
            Some((name, _)) => OutType::from_name(name)
                .ok_or_else(|| vec![p.error("outtype", format!("`{name}` is not f32, f16, bf16 or q8_0"))])?,
        };
        Ok(ConvertLoraOptions { outtype })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "outtype": format!("{:?}", self.outtype) })
    }
}

/// The adapter in `dir` converted against the base model in `base_dir`.
pub fn apply_lora(
    dir: &Path,
    base_dir: &Path,
    options: &ConvertLoraOptions,
    files: &Arc<dyn PinnedFiles>,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<TensorSet, ConvertOpError> {
    let (dir, base_dir) = (crate::formats::hub_snapshot(dir), crate::formats::hub_snapshot(base_dir));
    let adapter = Adapter::open(&dir, &base_dir, files.clone())?;
    let (metadata, converted) = convert_lora(&adapter, options.outtype)?;
    tensor_set(&adapter.checkpoint, metadata, converted, HeaderEnd::Aligned, blobs, &**files)
}
