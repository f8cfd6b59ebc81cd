//! A multimodal checkpoint's vision tower as llama.cpp's projector file
//! ("mmproj"), as `convert_hf_to_gguf.py --mmproj` writes it
//! (`MmprojModel`): `general.type` mmproj, architecture `clip`, the
//! encoder's and projector's tensors under their `v.`/`mm.` names
//! (`arch::clip`'s tables), and the `clip.vision.*` keys from
//! `vision_config` and the image processor's config. What a family does
//! differently is one [`Vision`] descriptor in that family's module; the
//! language model of the same checkpoint is its text conversion, which
//! leaves the tower's tensors and keys to this one. A tower the converter
//! does not write, but another of llama.cpp's converters does, is that
//! converter's file ([`Layout::Own`]).

use serde_json::{Map, Value as Json};

use super::checkpoint::Checkpoint;
use super::config::{self, shorten};
use super::error::ConvertError;
use super::family;
use super::hparams::file_type;
use super::naming::{self, NamingSource, ParameterCounts};
use super::tensors::{CheckpointPart, ConvertedTensor, OutType, Values, output_type};
use crate::arch::clip::{HAS_VISION_ENCODER_KEY, PROJECTOR_TYPE_KEY, vision_key};
use crate::arch::registry::{NamePair, gguf_name_in};
use crate::artifact::{RowRange, RowTransform};
use crate::model::{Array, Metadata, TensorInfo, Value};
use crate::quant::plan::QUANTIZATION_VERSION;
use crate::types::GgmlType;

/// How one family's vision tower converts.
pub struct Vision {
    /// The Hugging Face classes whose tower it converts (their language
    /// model is a text conversion's).
    pub classes: &'static [&'static str],
    /// Its `clip.projector_type`.
    pub projector: &'static str,
    /// The encoders it converts, by `vision_config.model_type` (LLaVA's
    /// class also holds CLIP encoders, which the converter refuses).
    pub encoders: &'static [&'static str],
    /// The encoder the class's config takes for one that names none.
    pub unnamed_encoder: &'static str,
    /// Keys of the multimodal model's own config (beside `text_config` and
    /// `vision_config`) that belong to the tower: the text conversion takes
    /// them as this one's, and this one checks or reads them.
    pub top_level: &'static [&'static str],
    /// `vision_config` keys it models: read, or right at any value.
    pub modelled: &'static [&'static str],
    /// `vision_config` keys it ignores, with the values at which ignoring
    /// them is right.
    pub defaults: fn() -> Vec<(&'static str, Json)>,
    /// `vision_config` as the converter reads it, once checked: the
    /// settings a family names its own way under the names the common keys
    /// read.
    pub read_config: fn(&mut Map<String, Json>),
    /// Checkpoint tensors of the tower: the names starting so.
    pub prefixes: &'static [&'static str],
    /// Of those, left out (a head the projector never reads): names containing these.
    pub skipped: &'static [&'static str],
    /// GGUF ↔ Hugging Face name tables of its tensors.
    pub names: &'static [&'static [NamePair]],
    /// Tensors stored as offsets from one (one is added): names ending so.
    pub plus_one: &'static [&'static str],
    /// Tensors whose rows are permuted as LLaMA's Q and K are, over the
    /// tower's heads: names ending so.
    pub permuted: &'static [&'static str],
    /// Rows of the language model's token embedding the tower reads, each
    /// written as a tensor of its own.
    pub embedding_rows: &'static [EmbeddingRow],
    /// Tensors written as several.
    pub splits: &'static [Split],
    /// The type a tensor is written as whatever the outtype
    /// (`tensor_force_quant`), from its checkpoint and GGUF names.
    pub forced: fn(&str, &str, OutType) -> Option<GgmlType>,
    /// Its keys after `clip.projector_type`.
    pub keys: fn(&VisionHparams<'_>, &mut Metadata) -> Result<(), ConvertError>,
    /// Which converter's file it is written as.
    pub layout: Layout,
}

/// Which of llama.cpp's converters a tower's file is written as.
pub enum Layout {
    /// `convert_hf_to_gguf.py --mmproj`'s (`MmprojModel`), from the descriptor.
    Mmproj,
    /// Another converter's, which writes only `outtypes` (the first its
    /// default), by `write` once the tower's config is checked.
    Own { write: OwnLayout, outtypes: &'static [OutType] },
}

/// Writes a tower's whole file: its metadata and its tensors in order.
pub type OwnLayout =
    fn(&Checkpoint, &Vision, &VisionHparams<'_>, OutType) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError>;

/// A checkpoint tensor the converter writes as several.
pub enum Split {
    /// Rows stacked in equal parts (a fused Q/K/V): each part under the
    /// stored name with `fused` replaced by the part's.
    Rows { fused: &'static str, parts: &'static [&'static str] },
    /// A 3-D convolution's kernel `[out, in, frames, h, w]` (checkpoint
    /// name `hf`) as one 2-D kernel a frame, `names` in frame order.
    Frames { hf: &'static str, names: &'static [&'static str] },
}

/// A token's row of the language model's embedding, written into the tower's file.
pub struct EmbeddingRow {
    /// The token, as the tokenizer's added tokens spell it.
    pub token: &'static str,
    /// The tensor it is written as.
    pub name: &'static str,
}

/// Every family's tower.
pub static VISIONS: &[&Vision] = &[
    &family::gemma3::VISION,
    &family::pixtral::LLAVA,
    &family::llava::CLIP,
    &family::pixtral::MISTRAL3,
    &family::qwen2vl::QWEN2_VL,
    &family::qwen2vl::QWEN2_5_VL,
];

/// The tower of `ckpt`'s class, if it has one this converter writes (the
/// text conversion leaves its tensors out): of a class with several, the
/// one of the checkpoint's encoder, else the first.
pub fn tower_of(ckpt: &Checkpoint) -> Option<&'static Vision> {
    let mut towers = towers_of(ckpt.config["architectures"][0].as_str()?);
    let first = towers.clone().next()?;
    Some(towers.find(|vision| vision.takes_encoder_of(ckpt)).unwrap_or(first))
}

/// The towers of Hugging Face class `class`, in listing order.
fn towers_of(class: &str) -> impl Iterator<Item = &'static Vision> + Clone + '_ {
    VISIONS.iter().copied().filter(move |vision| vision.classes.contains(&class))
}

/// Every class whose tower converts, in listing order, each once.
pub fn supported_classes() -> impl Iterator<Item = &'static str> {
    let mut seen = Vec::new();
    VISIONS.iter().flat_map(|vision| vision.classes.iter().copied()).filter(move |class| {
        let new = !seen.contains(class);
        seen.push(class);
        new
    })
}

impl Vision {
    /// Whether checkpoint tensor `name` is the tower's.
    pub fn takes(&self, name: &str) -> bool {
        self.prefixes.iter().any(|prefix| name.starts_with(prefix))
    }

    /// The encoder `ckpt`'s `vision_config` names (`model_type`), or the
    /// one its class takes for none.
    fn encoder_of<'c>(&self, ckpt: &'c Checkpoint) -> &'c str {
        ckpt.config["vision_config"]["model_type"].as_str().unwrap_or(self.unnamed_encoder)
    }

    /// Whether it converts `ckpt`'s encoder.
    fn takes_encoder_of(&self, ckpt: &Checkpoint) -> bool {
        self.encoders.contains(&self.encoder_of(ckpt))
    }

    /// The outtype `--outtype auto` means for it, if its converter has a default of its own.
    pub fn own_default(&self) -> Option<OutType> {
        match self.layout {
            Layout::Mmproj => None,
            Layout::Own { outtypes, .. } => outtypes.first().copied(),
        }
    }
}

/// The checkpoint's `architectures` class.
fn class_of(ckpt: &Checkpoint) -> Result<&str, ConvertError> {
    ckpt.file_config["architectures"][0].as_str().ok_or_else(|| ConvertError::Config("no `architectures` list".into()))
}

/// A tower's settings as the converter reads them: `vision_config`, the
/// multimodal model's own config, and the image processor's config.
pub struct VisionHparams<'a> {
    vision: &'a Map<String, Json>,
    /// The multimodal model's own config.
    top: &'a Json,
    /// `preprocessor_config.json` with `processor_config.json` laid over it.
    pub processor: Map<String, Json>,
}

impl VisionHparams<'_> {
    /// The first of `names` `vision_config` has (the converter's `find_vparam`).
    pub fn find(&self, names: &[&str]) -> Result<&Json, ConvertError> {
        self.found(names).map(|(_, value)| value)
    }

    /// [`Self::find`], with the key it was found under.
    fn found<'n>(&self, names: &[&'n str]) -> Result<(&'n str, &Json), ConvertError> {
        names
            .iter()
            .find_map(|k| self.vision.get(*k).map(|value| (*k, value)))
            .ok_or_else(|| ConvertError::Config(format!("`vision_config` has none of {}", names.join(", "))))
    }

    /// `vision_config`'s `name`, if set.
    pub fn get(&self, name: &str) -> Option<&Json> {
        self.vision.get(name).filter(|v| !v.is_null())
    }

    /// The multimodal model's own `name`, if set.
    pub fn top_level(&self, name: &str) -> Option<&Json> {
        self.top.get(name).filter(|v| !v.is_null())
    }

    /// A whole number at the first of `names`.
    pub fn u64(&self, names: &[&str]) -> Result<u64, ConvertError> {
        let (key, value) = self.found(names)?;
        value.as_u64().ok_or_else(|| ConvertError::Config(format!("`vision_config`'s {key} ({value}) is not a count")))
    }

    /// Refuses a setting of the multimodal model's own config that is not
    /// at the value llama.cpp computes with: each `(key, default,
    /// computed)`, the default standing for an unset key.
    pub fn hold(&self, tower: &str, settings: &[(&'static str, Json, Json)]) -> Result<(), ConvertError> {
        for (key, default, computed) in settings {
            let value = self.top_level(key).unwrap_or(default);
            if value != computed {
                return Err(ConvertError::Unmodelled {
                    family: tower.into(),
                    key: key.to_string(),
                    value: value.to_string(),
                });
            }
        }
        Ok(())
    }

    /// A count at the first of `names`, as a u32.
    pub fn count(&self, names: &[&str]) -> Result<Value, ConvertError> {
        let (key, value) = self.found(names)?;
        super::hparams::count_of(&format!("vision_config.{key}"), value)
    }
}

/// The image processor's config as the converter merges it:
/// `preprocessor_config.json` (its `media_proc_cfg` laid over it), then
/// `processor_config.json` (its `image_processor` laid over it) over that.
fn processor_config(ckpt: &Checkpoint) -> Result<Map<String, Json>, ConvertError> {
    let mut merged = Map::new();
    for (file, nested) in [("preprocessor_config.json", "media_proc_cfg"), ("processor_config.json", "image_processor")]
    {
        let Some(json) = ckpt.json(file)? else { continue };
        let Json::Object(mut cfg) = json else {
            return Err(ConvertError::Config(format!("{file} is not a JSON object")));
        };
        if let Some(Json::Object(inner)) = cfg.get(nested).cloned() {
            cfg.extend(inner);
        }
        merged.extend(cfg);
    }
    Ok(merged)
}

/// Refuses a `vision_config` key the tower does not model, by name.
fn check_modelled(vision: &Vision, family: &str, config: &Map<String, Json>) -> Result<(), ConvertError> {
    match config::first_unmodelled(config, |key| vision.modelled.contains(&key), &(vision.defaults)()) {
        Some((key, value)) => Err(ConvertError::Unmodelled {
            family: format!("{family} vision tower"),
            key: format!("vision_config.{key}"),
            value: shorten(value),
        }),
        None => Ok(()),
    }
}

/// The vision tower of a multimodal checkpoint as its mmproj file: the
/// metadata in the converter's key order and the tensors in its order.
pub fn convert_mmproj(ckpt: &Checkpoint, outtype: OutType) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    let class = class_of(ckpt)?;
    let (conversion, _) = super::tensors::conversion_of(ckpt)?;
    let vision = tower_of(ckpt).ok_or_else(|| ConvertError::NoVisionTower {
        class: class.to_owned(),
        supported: supported_classes().collect(),
    })?;
    let Some(Json::Object(vision_config)) = ckpt.config.get("vision_config") else {
        return Err(ConvertError::Config(format!("`{class}` has no `vision_config` object")));
    };
    if !vision.takes_encoder_of(ckpt) {
        let encoders: Vec<&str> = towers_of(class).flat_map(|v| v.encoders.iter().copied()).collect();
        return Err(ConvertError::Config(format!(
            "`{class}` with a `{}` vision encoder: its tower converts with {} encoders only, as llama.cpp's \
             converters convert it",
            vision.encoder_of(ckpt),
            encoders.join(", ")
        )));
    }
    if let Layout::Own { outtypes, .. } = vision.layout
        && !outtypes.contains(&outtype)
    {
        let names: Vec<&str> = outtypes.iter().map(|t| t.name()).collect();
        return Err(ConvertError::Config(format!(
            "`{class}`'s `{}` tower is written as llama.cpp's converter for it writes it, which takes --outtype {} \
             only",
            vision.projector,
            names.join(" or ")
        )));
    }
    check_modelled(vision, conversion.family, vision_config)?;
    let mut vision_config = vision_config.clone();
    (vision.read_config)(&mut vision_config);
    let hp = VisionHparams { vision: &vision_config, top: &ckpt.file_config, processor: processor_config(ckpt)? };
    if let Layout::Own { write, .. } = vision.layout {
        return write(ckpt, vision, &hp, outtype);
    }
    let tensors = tower_tensors(ckpt, vision, &hp, conversion.family, outtype)?;
    let counts = ParameterCounts::of(tensors.iter().map(|t| &t.info));
    let mut metadata = Metadata::new();
    metadata.set("general.architecture", Value::string("clip"));
    let mut source = NamingSource::of_model(ckpt, &counts);
    source.gguf_type = "mmproj";
    naming::general_keys(&source, &counts, ckpt, &mut metadata)?;
    metadata.set("general.file_type", file_type(outtype));
    common_keys(ckpt, &hp, &mut metadata)?;
    metadata.set(PROJECTOR_TYPE_KEY, Value::string(vision.projector));
    (vision.keys)(&hp, &mut metadata)?;
    metadata.set("general.quantization_version", Value::U32(QUANTIZATION_VERSION));
    Ok((metadata, tensors))
}

/// `MmprojModel.set_gguf_parameters`' vision keys, after `general.file_type`.
fn common_keys(ckpt: &Checkpoint, hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    keys.set(HAS_VISION_ENCODER_KEY, Value::Bool(true));
    // The language model's width: the text hyperparameters' (`text_config` over the top level).
    let text_width = ckpt.hparam(&["hidden_size", "n_embd"]).filter(|v| v.as_u64().is_some_and(|n| n > 0));
    let text_width =
        text_width.ok_or_else(|| ConvertError::Config("no `hidden_size` for the language model".into()))?;
    keys.set(&vision_key("projection_dim"), super::hparams::count_of("hidden_size", text_width)?);
    keys.set(&vision_key("image_size"), hp.count(&["image_size"])?);
    keys.set(&vision_key("patch_size"), hp.count(&["patch_size"])?);
    keys.set(&vision_key("embedding_length"), hp.count(&["hidden_size", "width", "vt_hidden_size"])?);
    keys.set(&vision_key("feed_forward_length"), hp.count(&["intermediate_size", "vt_intermediate_size"])?);
    keys.set(&vision_key("block_count"), hp.count(BLOCKS)?);
    keys.set(
        &vision_key("attention.head_count"),
        hp.count(&["num_attention_heads", "num_heads", "heads", "vt_num_attention_heads"])?,
    );
    for name in ["image_mean", "image_std"] {
        let value = hp.processor.get(name).ok_or_else(|| {
            ConvertError::Config(format!("the image processor's config (preprocessor_config.json) has no `{name}`"))
        })?;
        keys.set(&vision_key(name), number_array(name, value)?);
    }
    Ok(())
}

/// The converter's `n_block_keys`.
const BLOCKS: &[&str] = &[
    "n_layers",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "depth",
    "layers",
    "encoder_layers",
    "vt_num_hidden_layers",
];

/// A list of numbers as gguf-py writes it: typed by its first element (an
/// integer makes an i32 array, a decimal an f32 one).
fn number_array(name: &str, value: &Json) -> Result<Value, ConvertError> {
    let invalid = || {
        ConvertError::Config(format!("the image processor's `{name}` ({}) is not a list of numbers", shorten(value)))
    };
    let items = value.as_array().filter(|items| !items.is_empty()).ok_or_else(invalid)?;
    let array = if items[0].is_i64() || items[0].is_u64() {
        let ints: Option<Vec<i32>> = items.iter().map(|v| v.as_i64().and_then(|n| i32::try_from(n).ok())).collect();
        Array::I32(ints.ok_or_else(invalid)?)
    } else {
        let floats: Option<Vec<f32>> = items.iter().map(|v| v.as_f64().map(|x| x as f32)).collect();
        Array::F32(floats.ok_or_else(invalid)?)
    };
    Ok(Value::Array(array))
}

/// The tower's tensors in the converter's order, each with the type the
/// converter writes it as.
fn tower_tensors(
    ckpt: &Checkpoint,
    vision: &Vision,
    hp: &VisionHparams<'_>,
    family: &'static str,
    outtype: OutType,
) -> Result<Vec<ConvertedTensor>, ConvertError> {
    let heads = match vision.permuted {
        [] => None,
        _ => Some(hp.u64(&["num_attention_heads"])? as usize),
    };
    let mut out = Vec::new();
    for (s, t) in ckpt.tensor_order() {
        let source = &ckpt.shards[s].tensors[t];
        let hf = source.name.as_str();
        if !vision.takes(hf) {
            if hf.ends_with("embed_tokens.weight") {
                out.extend(embedding_rows(ckpt, vision, (s, t))?);
            }
            continue;
        }
        if vision.skipped.iter().any(|part| hf.contains(part)) {
            continue;
        }
        let transform = RowTransform {
            plus_one: vision.plus_one.iter().any(|end| hf.ends_with(end)),
            permute_heads: heads.filter(|_| vision.permuted.iter().any(|end| hf.ends_with(end))),
            ..Default::default()
        };
        for (name, dims, transform) in written_as(vision, source, transform, family)? {
            let ty = if dims.len() <= 1 || name.ends_with("_norm.weight") {
                GgmlType::F32
            } else {
                (vision.forced)(hf, &name, outtype).unwrap_or_else(|| output_type(&name, &dims, outtype))
            };
            let values = Values::Checkpoint(CheckpointPart { shard: s, tensor: t, transform, scale: None });
            out.push(ConvertedTensor { info: TensorInfo::new(&name, dims, ty), values });
        }
    }
    if out.is_empty() {
        return Err(ConvertError::Config(format!(
            "no vision tower tensors (names starting {})",
            vision.prefixes.join(", ")
        )));
    }
    Ok(out)
}

/// A tower tensor as the tensors it is written as: each one's GGUF name,
/// shape and the rows of `source` it takes (with `transform`'s other edits).
fn written_as(
    vision: &Vision,
    source: &TensorInfo,
    transform: RowTransform,
    family: &'static str,
) -> Result<Vec<(String, Vec<u64>, RowTransform)>, ConvertError> {
    let hf = source.name.as_str();
    let unmapped = |name: &str| ConvertError::Unmapped { tensor: name.to_owned(), family };
    let split = vision.splits.iter().find(|split| match split {
        Split::Rows { fused, .. } => hf.contains(fused),
        Split::Frames { hf: stored, .. } => hf == *stored,
    });
    let rows_dim = usize::from(source.dims.len() >= 2);
    match split {
        None => Ok(vec![(gguf_name_in(vision.names, hf).ok_or_else(|| unmapped(hf))?, source.dims.clone(), transform)]),
        Some(Split::Rows { fused, parts }) => {
            let rows = source.dims[rows_dim] as usize;
            let share = rows / parts.len();
            if share * parts.len() != rows {
                return Err(ConvertError::Config(format!(
                    "`{hf}`'s {rows} rows do not split in {} parts",
                    parts.len()
                )));
            }
            parts
                .iter()
                .enumerate()
                .map(|(i, part)| {
                    let stored = hf.replace(fused, part);
                    let name = gguf_name_in(vision.names, &stored).ok_or_else(|| unmapped(&stored))?;
                    let mut dims = source.dims.clone();
                    dims[rows_dim] = share as u64;
                    let range = RowRange { group: rows, start: i * share, len: share };
                    Ok((name, dims, RowTransform { rows: Some(range), ..transform }))
                })
                .collect()
        }
        Some(Split::Frames { names, .. }) => {
            // ggml's order: [w, h, frames, in, out]; rows of `w`, a frame's `h` rows in a run.
            let &[w, h, frames, input, output] = source.dims.as_slice() else {
                return Err(ConvertError::Config(format!("`{hf}` is not a 3-D convolution's kernel")));
            };
            if frames as usize != names.len() {
                return Err(ConvertError::Config(format!(
                    "`{hf}` has {frames} frames, where llama.cpp takes {}",
                    names.len()
                )));
            }
            let (h, group) = (h as usize, (h * frames) as usize);
            let frame = |i: usize| RowTransform { rows: Some(RowRange { group, start: i * h, len: h }), ..transform };
            Ok(names
                .iter()
                .enumerate()
                .map(|(i, name)| (name.to_string(), vec![w, h as u64, input, output], frame(i)))
                .collect())
        }
    }
}

/// The rows of the token embedding at `(shard, tensor)` the tower reads,
/// each a tensor of one row.
fn embedding_rows(
    ckpt: &Checkpoint,
    vision: &Vision,
    (shard, tensor): (usize, usize),
) -> Result<Vec<ConvertedTensor>, ConvertError> {
    let embedding = &ckpt.shards[shard].tensors[tensor];
    let &[width, rows] = embedding.dims.as_slice() else {
        return Err(ConvertError::Config(format!("`{}` is not a matrix", embedding.name)));
    };
    vision
        .embedding_rows
        .iter()
        .map(|row| {
            let id = added_token_id(ckpt, row.token)?;
            if id >= rows {
                return Err(ConvertError::Config(format!(
                    "`{}` (id {id}) is past the {rows} rows of `{}`",
                    row.token, embedding.name
                )));
            }
            let range = RowRange { group: rows as usize, start: id as usize, len: 1 };
            let transform = RowTransform { rows: Some(range), ..Default::default() };
            Ok(ConvertedTensor {
                info: TensorInfo::new(row.name, vec![width], GgmlType::F32),
                values: Values::Checkpoint(CheckpointPart { shard, tensor, transform, scale: None }),
            })
        })
        .collect()
}

/// The id of added token `token`, as the converter's `get_token_id` finds
/// it: `tokenizer_config.json`'s `added_tokens_decoder`, then
/// `tokenizer.json`'s `added_tokens`.
fn added_token_id(ckpt: &Checkpoint, token: &str) -> Result<u64, ConvertError> {
    if let Some(config) = ckpt.json("tokenizer_config.json")?
        && let Some(Json::Object(decoder)) = config.get("added_tokens_decoder")
        && let Some((id, _)) =
            decoder.iter().find(|(_, entry)| entry.get("content").and_then(Json::as_str) == Some(token))
    {
        return id.parse().map_err(|_| ConvertError::Config(format!("tokenizer_config.json: token id `{id}`")));
    }
    let tokenizer = ckpt.json("tokenizer.json")?;
    let added = tokenizer.as_ref().and_then(|t| t.get("added_tokens")).and_then(Json::as_array);
    added
        .into_iter()
        .flatten()
        .find(|entry| entry.get("content").and_then(Json::as_str) == Some(token))
        .and_then(|entry| entry.get("id").and_then(Json::as_u64))
        .ok_or_else(|| ConvertError::Config(format!("no added token `{token}` in the tokenizer's files")))
}

/// `MmprojModel.tensor_force_quant`: the patch embedding (and merger) F16
/// in an F16 file, else F32.
pub fn patch_embedding_type(_hf: &str, gguf: &str, outtype: OutType) -> Option<GgmlType> {
    (gguf.contains(".patch_embd.weight") || gguf.contains(".patch_merger.weight"))
        .then_some(if outtype == OutType::F16 { GgmlType::F16 } else { GgmlType::F32 })
}
