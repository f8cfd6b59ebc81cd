//! llama.cpp's multimodal projector files ("mmproj", `general.architecture =
//! clip`) and the language models they feed: which part of a multimodal model
//! a file is, which projector it has, and how wide the embeddings are that the
//! projector hands the language model and that the language model takes.
//!
//! Each is computed as llama.cpp computes it (the mtmd loader, `clip.cpp`, and
//! `llama_model_n_embd_inp`), so a pair llama.cpp would refuse to load is
//! caught before anything is built from it. This is the one place these keys,
//! tensor names and rules are written down.

use std::fmt;

use super::registry::NamePair;
use crate::model::{KeyError, Metadata, TensorInfo};

const ARCHITECTURE_KEY: &str = "general.architecture";
/// The architecture of every mmproj file, whatever model it belongs to.
const CLIP_ARCHITECTURE: &str = "clip";
pub const HAS_VISION_ENCODER_KEY: &str = "clip.has_vision_encoder";
/// Written by llama.cpp's legacy LLaVA converter beside the vision key.
pub const HAS_TEXT_ENCODER_KEY: &str = "clip.has_text_encoder";
pub const HAS_LLAVA_PROJECTOR_KEY: &str = "clip.has_llava_projector";
const HAS_AUDIO_ENCODER_KEY: &str = "clip.has_audio_encoder";
/// The projector of every encoder in the file; in a file with both encoders
/// it may be absent and each encoder name its own.
pub const PROJECTOR_TYPE_KEY: &str = "clip.projector_type";

/// The key of a vision encoder's setting `name` (`image_size`,
/// `attention.head_count`, …).
pub fn vision_key(name: &str) -> String {
    format!("clip.vision.{name}")
}

/// GGUF ↔ Hugging Face names of a SigLIP vision encoder as transformers
/// stores it inside a multimodal model (`SiglipVisionModel` under
/// `vision_tower.`), `{N}` the block.
pub const SIGLIP_NAMES: &[NamePair] = &[
    ("v.patch_embd", "vision_tower.vision_model.embeddings.patch_embedding"),
    ("v.position_embd", "vision_tower.vision_model.embeddings.position_embedding"),
    ("v.blk.{N}.attn_q", "vision_tower.vision_model.encoder.layers.{N}.self_attn.q_proj"),
    ("v.blk.{N}.attn_k", "vision_tower.vision_model.encoder.layers.{N}.self_attn.k_proj"),
    ("v.blk.{N}.attn_v", "vision_tower.vision_model.encoder.layers.{N}.self_attn.v_proj"),
    ("v.blk.{N}.attn_out", "vision_tower.vision_model.encoder.layers.{N}.self_attn.out_proj"),
    ("v.blk.{N}.ln1", "vision_tower.vision_model.encoder.layers.{N}.layer_norm1"),
    ("v.blk.{N}.ln2", "vision_tower.vision_model.encoder.layers.{N}.layer_norm2"),
    ("v.blk.{N}.ffn_up", "vision_tower.vision_model.encoder.layers.{N}.mlp.fc1"),
    ("v.blk.{N}.ffn_down", "vision_tower.vision_model.encoder.layers.{N}.mlp.fc2"),
    ("v.post_ln", "vision_tower.vision_model.post_layernorm"),
];

/// GGUF ↔ Hugging Face names of Pixtral's vision encoder
/// (`PixtralVisionModel` under `vision_tower.`), `{N}` the block.
pub const PIXTRAL_NAMES: &[NamePair] = &[
    ("v.patch_embd", "vision_tower.patch_conv"),
    ("v.pre_ln", "vision_tower.ln_pre"),
    ("v.blk.{N}.attn_q", "vision_tower.transformer.layers.{N}.attention.q_proj"),
    ("v.blk.{N}.attn_k", "vision_tower.transformer.layers.{N}.attention.k_proj"),
    ("v.blk.{N}.attn_v", "vision_tower.transformer.layers.{N}.attention.v_proj"),
    ("v.blk.{N}.attn_out", "vision_tower.transformer.layers.{N}.attention.o_proj"),
    ("v.blk.{N}.ln1", "vision_tower.transformer.layers.{N}.attention_norm"),
    ("v.blk.{N}.ln2", "vision_tower.transformer.layers.{N}.ffn_norm"),
    ("v.blk.{N}.ffn_gate", "vision_tower.transformer.layers.{N}.feed_forward.gate_proj"),
    ("v.blk.{N}.ffn_up", "vision_tower.transformer.layers.{N}.feed_forward.up_proj"),
    ("v.blk.{N}.ffn_down", "vision_tower.transformer.layers.{N}.feed_forward.down_proj"),
];

/// LLaVA's projector (`LlavaMultiModalProjector`): two linear layers.
pub const LLAVA_PROJECTOR_NAMES: &[NamePair] =
    &[("mm.1", "multi_modal_projector.linear_1"), ("mm.2", "multi_modal_projector.linear_2")];

/// Mistral 3's projector (`Mistral3MultiModalProjector`): an RMS norm, a
/// merger of each 2×2 (`spatial_merge_size`) patches, then LLaVA's two layers.
pub const MISTRAL3_PROJECTOR_NAMES: &[NamePair] = &[
    ("mm.input_norm", "multi_modal_projector.norm"),
    ("mm.patch_merger", "multi_modal_projector.patch_merger.merging_layer"),
    ("mm.1", "multi_modal_projector.linear_1"),
    ("mm.2", "multi_modal_projector.linear_2"),
];

/// GGUF ↔ Hugging Face names of a CLIP vision encoder inside LLaVA
/// (`CLIPVisionModel` under `vision_tower.`) as llama.cpp's legacy LLaVA
/// converter names it (`convert_image_encoder_to_gguf.py`), `{N}` the block,
/// in the order `CLIPVisionModel` holds its parameters, which is the order
/// that converter writes them. Its feed-forward names are the other way
/// round from every other encoder's (`fc1` is `ffn_down`); clip.cpp swaps
/// them back on loading.
pub const CLIP_NAMES: &[NamePair] = &[
    ("v.class_embd", "vision_tower.vision_model.embeddings.class_embedding"),
    ("v.patch_embd", "vision_tower.vision_model.embeddings.patch_embedding"),
    ("v.position_embd", "vision_tower.vision_model.embeddings.position_embedding"),
    ("v.pre_ln", "vision_tower.vision_model.pre_layrnorm"),
    ("v.blk.{N}.attn_k", "vision_tower.vision_model.encoder.layers.{N}.self_attn.k_proj"),
    ("v.blk.{N}.attn_v", "vision_tower.vision_model.encoder.layers.{N}.self_attn.v_proj"),
    ("v.blk.{N}.attn_q", "vision_tower.vision_model.encoder.layers.{N}.self_attn.q_proj"),
    ("v.blk.{N}.attn_out", "vision_tower.vision_model.encoder.layers.{N}.self_attn.out_proj"),
    ("v.blk.{N}.ln1", "vision_tower.vision_model.encoder.layers.{N}.layer_norm1"),
    ("v.blk.{N}.ffn_down", "vision_tower.vision_model.encoder.layers.{N}.mlp.fc1"),
    ("v.blk.{N}.ffn_up", "vision_tower.vision_model.encoder.layers.{N}.mlp.fc2"),
    ("v.blk.{N}.ln2", "vision_tower.vision_model.encoder.layers.{N}.layer_norm2"),
];

/// LLaVA-1.5's projector (`LlavaMultiModalProjector`) as the legacy
/// converter names it: the layers of the original `mm_projector`
/// `Sequential` (a GELU between them is module 1).
pub const LLAVA_MLP_PROJECTOR_NAMES: &[NamePair] =
    &[("mm.0", "multi_modal_projector.linear_1"), ("mm.2", "multi_modal_projector.linear_2")];

/// Pixtral's row break: the language model's embedding of `[IMG_BREAK]`,
/// which the projector file carries.
pub const IMAGE_BREAK_EMBEDDING: &str = "v.token_embd.img_break";

/// GGUF ↔ Hugging Face names of Qwen2-VL's and Qwen2.5-VL's vision
/// encoder and merger (under `visual.`), `{N}` the block; the fused Q/K/V
/// under the names of its parts.
pub const QWEN2VL_NAMES: &[NamePair] = &[
    ("v.blk.{N}.attn_q", "visual.blocks.{N}.attn.q"),
    ("v.blk.{N}.attn_k", "visual.blocks.{N}.attn.k"),
    ("v.blk.{N}.attn_v", "visual.blocks.{N}.attn.v"),
    ("v.blk.{N}.attn_out", "visual.blocks.{N}.attn.proj"),
    ("v.blk.{N}.ln1", "visual.blocks.{N}.norm1"),
    ("v.blk.{N}.ln2", "visual.blocks.{N}.norm2"),
    ("v.blk.{N}.ffn_up", "visual.blocks.{N}.mlp.fc1"),
    ("v.blk.{N}.ffn_down", "visual.blocks.{N}.mlp.fc2"),
    ("v.blk.{N}.ffn_gate", "visual.blocks.{N}.mlp.gate_proj"),
    ("v.blk.{N}.ffn_up", "visual.blocks.{N}.mlp.up_proj"),
    ("v.blk.{N}.ffn_down", "visual.blocks.{N}.mlp.down_proj"),
    ("v.post_ln", "visual.merger.ln_q"),
    ("mm.0", "visual.merger.mlp.0"),
    ("mm.2", "visual.merger.mlp.2"),
];

/// Gemma 3's projector (`Gemma3MultiModalProjector`): a norm, then one
/// matrix into the language model's width, a bare parameter stored under
/// its own name (`_weight`, not `.weight`).
pub const GEMMA3_PROJECTOR_NAMES: &[NamePair] = &[
    ("mm.input_projection.weight", "multi_modal_projector.mm_input_projection_weight"),
    ("mm.soft_emb_norm", "multi_modal_projector.mm_soft_emb_norm"),
];

/// Which part of a multimodal model a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartRole {
    /// The language model: any architecture but `clip`.
    Language,
    /// An mmproj with a vision encoder.
    Vision,
    /// An mmproj with an audio encoder.
    Audio,
    /// An mmproj with both encoders, each with its own projector.
    VisionAudio,
}

impl PartRole {
    pub const ALL: [PartRole; 4] = [PartRole::Language, PartRole::Vision, PartRole::Audio, PartRole::VisionAudio];

    pub fn name(self) -> &'static str {
        match self {
            PartRole::Language => "language",
            PartRole::Vision => "vision",
            PartRole::Audio => "audio",
            PartRole::VisionAudio => "vision-audio",
        }
    }

    pub fn from_name(name: &str) -> Option<PartRole> {
        PartRole::ALL.into_iter().find(|role| role.name() == name)
    }

    /// The encoders a file of this role holds; none for the language model.
    pub fn encoders(self) -> &'static [Encoder] {
        match self {
            PartRole::Language => &[],
            PartRole::Vision => &[Encoder::Vision],
            PartRole::Audio => &[Encoder::Audio],
            PartRole::VisionAudio => &[Encoder::Vision, Encoder::Audio],
        }
    }
}

impl fmt::Display for PartRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One encoder of an mmproj file; each has its own projector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoder {
    Vision,
    Audio,
}

impl Encoder {
    pub fn name(self) -> &'static str {
        match self {
            Encoder::Vision => "vision",
            Encoder::Audio => "audio",
        }
    }

    /// The bool key that says a file has this encoder.
    fn presence_key(self) -> &'static str {
        match self {
            Encoder::Vision => HAS_VISION_ENCODER_KEY,
            Encoder::Audio => HAS_AUDIO_ENCODER_KEY,
        }
    }

    /// Where a file with both encoders names this one's projector.
    fn projector_type_key(self) -> &'static str {
        match self {
            Encoder::Vision => "clip.vision.projector_type",
            Encoder::Audio => "clip.audio.projector_type",
        }
    }
}

impl fmt::Display for Encoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClipError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("no encoder: neither {HAS_VISION_ENCODER_KEY} nor {HAS_AUDIO_ENCODER_KEY} is true")]
    NoEncoder,
    #[error("missing {PROJECTOR_TYPE_KEY} (and {encoder_key}): the file names no projector")]
    MissingProjectorType { encoder_key: &'static str },
    #[error("unknown projector type `{name}` (known: {known})")]
    UnknownProjectorType { name: String, known: String },
    #[error("missing tensor {tensor}: a {projector_type} projector's output width is read from it")]
    MissingTensor { tensor: &'static str, projector_type: String },
    #[error("{what} overflows 64 bits")]
    Overflow { what: String },
}

/// A file's role, from its metadata alone: an mmproj's from its encoder
/// flags (absent means false, as clip.cpp reads them).
pub fn part_role(metadata: &Metadata) -> Result<PartRole, ClipError> {
    if architecture(metadata)? != CLIP_ARCHITECTURE {
        return Ok(PartRole::Language);
    }
    let flag = |encoder: Encoder| metadata.flag(encoder.presence_key()).map(Option::unwrap_or_default);
    match (flag(Encoder::Vision)?, flag(Encoder::Audio)?) {
        (true, true) => Ok(PartRole::VisionAudio),
        (true, false) => Ok(PartRole::Vision),
        (false, true) => Ok(PartRole::Audio),
        // clip.cpp would load no encoder, and mtmd refuses the file.
        (false, false) => Err(ClipError::NoEncoder),
    }
}

/// The projector type of `encoder` in an mmproj file: `clip.projector_type`,
/// else the encoder's own key (`clip.vision.projector_type`,
/// `clip.audio.projector_type`). An empty string counts as absent, as in
/// clip.cpp.
pub fn projector_type(metadata: &Metadata, encoder: Encoder) -> Result<&str, ClipError> {
    for key in [PROJECTOR_TYPE_KEY, encoder.projector_type_key()] {
        if let Some(name) = metadata.string(key)?.filter(|name| !name.is_empty()) {
            return Ok(name);
        }
    }
    Err(ClipError::MissingProjectorType { encoder_key: encoder.projector_type_key() })
}

/// A dimension of a named tensor, in ggml order (`dim` 0 is `ne[0]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TensorDim {
    tensor: &'static str,
    dim: usize,
}

const fn ne(tensor: &'static str, dim: usize) -> TensorDim {
    TensorDim { tensor, dim }
}

/// How clip.cpp's `clip_n_mmproj_embd` reads a projector's output width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WidthRule {
    Dim(TensorDim),
    /// LLaVA's `mlp`, which clip.cpp turns into `mlp_norm` (Yi-style, read
    /// from `marked`) when the file has tensor `marker`.
    Marked {
        marker: &'static str,
        marked: TensorDim,
        plain: TensorDim,
    },
    /// Qwen3-VL: the main output and one of the same width per deepstack
    /// layer, concatenated.
    Deepstack(TensorDim),
}

/// Every projector type whose output width is known, with the tensor it is
/// read from (clip.cpp's `clip_n_mmproj_embd` and the tensors its loader
/// binds to the fields that function reads).
const PROJECTORS: [(&str, WidthRule); 14] = [
    ("gemma3", WidthRule::Dim(ne("mm.input_projection.weight", 0))),
    ("pixtral", WidthRule::Dim(ne("mm.2.weight", 1))),
    ("mlp", WidthRule::Marked { marker: "mm.3.weight", marked: ne("mm.3.bias", 0), plain: ne("mm.2.weight", 1) }),
    ("ldp", WidthRule::Dim(ne("mm.model.mb_block.1.block.2.1.bias", 0))),
    ("ldpv2", WidthRule::Dim(ne("mm.model.peg.0.bias", 0))),
    ("resampler", WidthRule::Dim(ne("resampler.proj.weight", 0))),
    ("minicpmv4_6", WidthRule::Dim(ne("mm.down.weight", 1))),
    ("qwen2vl_merger", WidthRule::Dim(ne("mm.2.bias", 0))),
    ("qwen2.5vl_merger", WidthRule::Dim(ne("mm.2.bias", 0))),
    ("qwen3vl_merger", WidthRule::Deepstack(ne("mm.2.bias", 0))),
    ("idefics3", WidthRule::Dim(ne("mm.model.fc.weight", 1))),
    ("ultravox", WidthRule::Dim(ne("mm.a.mlp.2.weight", 1))),
    ("voxtral", WidthRule::Dim(ne("mm.a.mlp.2.weight", 1))),
    ("qwen2a", WidthRule::Dim(ne("mm.a.fc.weight", 1))),
];

/// A projector's output width and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectorWidth {
    pub projector_type: String,
    /// The tensor whose dimension gives the width.
    pub tensor: &'static str,
    /// Deepstack layers whose outputs are concatenated with the main one
    /// (Qwen3-VL); 0 for other projectors.
    pub deepstack_layers: u64,
    /// Values per token the projector hands the language model.
    pub width: u64,
}

impl fmt::Display for ProjectorWidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}", self.projector_type, self.tensor)?;
        match self.deepstack_layers {
            0 => {}
            1 => write!(f, " × (1 + 1 deepstack layer)")?,
            n => write!(f, " × (1 + {n} deepstack layers)")?,
        }
        Ok(())
    }
}

/// The width of the embeddings `encoder`'s projector outputs per token, as
/// clip.cpp computes it (dimensions a tensor leaves out are 1, as in ggml).
pub fn projector_output_width(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    encoder: Encoder,
) -> Result<ProjectorWidth, ClipError> {
    let projector_type = projector_type(metadata, encoder)?;
    let Some(&(_, rule)) = PROJECTORS.iter().find(|(name, _)| *name == projector_type) else {
        let known = PROJECTORS.map(|(name, _)| name).join(", ");
        return Err(ClipError::UnknownProjectorType { name: projector_type.to_owned(), known });
    };
    let has_tensor = |name: &str| tensors.iter().any(|t| t.name == name);
    let (source, deepstack_layers) = match rule {
        WidthRule::Dim(source) => (source, 0),
        WidthRule::Marked { marker, marked, plain } => (if has_tensor(marker) { marked } else { plain }, 0),
        WidthRule::Deepstack(source) => (source, deepstack_layer_count(tensors)),
    };
    let tensor = tensors
        .iter()
        .find(|t| t.name == source.tensor)
        .ok_or_else(|| ClipError::MissingTensor { tensor: source.tensor, projector_type: projector_type.to_owned() })?;
    let main_width = tensor.dims.get(source.dim).copied().unwrap_or(1);
    let width = times_one_plus(main_width, deepstack_layers).ok_or_else(|| ClipError::Overflow {
        what: format!("{} ne[{}] {main_width} × (1 + {deepstack_layers})", source.tensor, source.dim),
    })?;
    Ok(ProjectorWidth { projector_type: projector_type.to_owned(), tensor: source.tensor, deepstack_layers, width })
}

/// Layers with a deepstack merger: clip.cpp counts layer N (below
/// `clip.vision.block_count`; converters write no others) when the file has
/// `v.deepstack.N.fc1.weight`, N written as `%d` writes it. Tensor names are
/// unique, so each counted name is a distinct layer.
fn deepstack_layer_count(tensors: &[TensorInfo]) -> u64 {
    let is_deepstack_fc1 = |name: &str| {
        let layer = name.strip_prefix("v.deepstack.").and_then(|rest| rest.strip_suffix(".fc1.weight"));
        layer.and_then(|n| n.parse::<u32>().ok().filter(|parsed| parsed.to_string() == n)).is_some()
    };
    tensors.iter().filter(|t| is_deepstack_fc1(&t.name)).count() as u64
}

/// The width of the embeddings a language model takes per token, and the
/// keys it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputWidth {
    pub architecture: String,
    pub embedding_length: u64,
    /// Deepstack layers whose embeddings come concatenated with the main ones.
    pub deepstack_layers: u64,
    pub width: u64,
}

impl fmt::Display for InputWidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arch = &self.architecture;
        if self.deepstack_layers == 0 {
            write!(f, "{arch}.embedding_length")
        } else {
            let (length, layers) = (self.embedding_length, self.deepstack_layers);
            write!(f, "{arch}.embedding_length {length} × (1 + {arch}.n_deepstack_layers {layers})")
        }
    }
}

/// llama.cpp's `llama_model_n_embd_inp`: `{arch}.embedding_length` ×
/// (1 + `{arch}.n_deepstack_layers`), the latter 0 when absent.
pub fn language_input_width(metadata: &Metadata) -> Result<InputWidth, ClipError> {
    let architecture = architecture(metadata)?;
    let length_key = format!("{architecture}.embedding_length");
    let embedding_length = metadata.count::<u64>(&length_key)?.ok_or_else(|| KeyError::missing(&length_key))?;
    let deepstack_layers = metadata.count::<u64>(&format!("{architecture}.n_deepstack_layers"))?.unwrap_or(0);
    let width = times_one_plus(embedding_length, deepstack_layers).ok_or_else(|| ClipError::Overflow {
        what: format!("{architecture}.embedding_length {embedding_length} × (1 + {deepstack_layers})"),
    })?;
    Ok(InputWidth { architecture: architecture.to_owned(), embedding_length, deepstack_layers, width })
}

fn times_one_plus(base: u64, extra: u64) -> Option<u64> {
    extra.checked_add(1).and_then(|factor| base.checked_mul(factor))
}

fn architecture(metadata: &Metadata) -> Result<&str, KeyError> {
    metadata.string(ARCHITECTURE_KEY)?.ok_or_else(|| KeyError::missing(ARCHITECTURE_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Value;
    use crate::types::GgmlType;

    fn metadata(entries: &[(&str, Value)]) -> Metadata {
        let mut metadata = Metadata::new();
        for (key, value) in entries {
            metadata.set(key, value.clone());
        }
        metadata
    }

    fn vision_mmproj(projector_type: &str) -> Metadata {
        metadata(&[
            ("general.architecture", Value::string("clip")),
            ("clip.has_vision_encoder", Value::Bool(true)),
            ("clip.projector_type", Value::string(projector_type)),
        ])
    }

    fn tensor(name: &str, dims: &[u64]) -> TensorInfo {
        TensorInfo::new(name, dims.to_vec(), GgmlType::F32)
    }

    /// Each projector type with the tensor and dimension clip.cpp reads its
    /// width from, written out apart from the table they check.
    const WIDTH_TENSORS: [(&str, &str, usize); 14] = [
        ("gemma3", "mm.input_projection.weight", 0),
        ("pixtral", "mm.2.weight", 1),
        ("mlp", "mm.2.weight", 1),
        ("ldp", "mm.model.mb_block.1.block.2.1.bias", 0),
        ("ldpv2", "mm.model.peg.0.bias", 0),
        ("resampler", "resampler.proj.weight", 0),
        ("minicpmv4_6", "mm.down.weight", 1),
        ("qwen2vl_merger", "mm.2.bias", 0),
        ("qwen2.5vl_merger", "mm.2.bias", 0),
        ("qwen3vl_merger", "mm.2.bias", 0),
        ("idefics3", "mm.model.fc.weight", 1),
        ("ultravox", "mm.a.mlp.2.weight", 1),
        ("voxtral", "mm.a.mlp.2.weight", 1),
        ("qwen2a", "mm.a.fc.weight", 1),
    ];

    #[test]
    fn every_projector_type_reads_its_width_tensor() {
        let mut table: Vec<&str> = PROJECTORS.iter().map(|(name, _)| *name).collect();
        let mut checked: Vec<&str> = WIDTH_TENSORS.iter().map(|(name, _, _)| *name).collect();
        table.sort_unstable();
        checked.sort_unstable();
        assert_eq!(table, checked, "every table row has its case here");

        for (projector_type, name, dim) in WIDTH_TENSORS {
            let mut dims = vec![11; dim + 2];
            dims[dim] = 24;
            let decoys = [tensor("mm.0.weight", &[5, 6]), tensor("v.blk.0.attn_q.weight", &[7, 7])];
            let mut tensors = decoys.to_vec();
            tensors.insert(1, tensor(name, &dims));
            let meta = vision_mmproj(projector_type);
            let width = projector_output_width(&meta, &tensors, Encoder::Vision).unwrap();
            let expected = ProjectorWidth {
                projector_type: projector_type.to_owned(),
                tensor: name,
                deepstack_layers: 0,
                width: 24,
            };
            assert_eq!(width, expected, "{projector_type}");

            let missing = projector_output_width(&meta, &decoys, Encoder::Vision).unwrap_err();
            assert_eq!(
                missing.to_string(),
                format!("missing tensor {name}: a {projector_type} projector's output width is read from it")
            );
        }
    }

    #[test]
    fn mlp_with_mm_3_weight_is_read_as_mlp_norm() {
        let tensors = [tensor("mm.2.weight", &[8, 16]), tensor("mm.3.weight", &[32, 32]), tensor("mm.3.bias", &[32])];
        let width = projector_output_width(&vision_mmproj("mlp"), &tensors, Encoder::Vision).unwrap();
        assert_eq!((width.tensor, width.width), ("mm.3.bias", 32));
        let err = projector_output_width(&vision_mmproj("mlp"), &tensors[..2], Encoder::Vision).unwrap_err();
        assert!(matches!(err, ClipError::MissingTensor { tensor: "mm.3.bias", .. }));
    }

    #[test]
    fn qwen3vl_counts_each_deepstack_layer_once() {
        let mut tensors = vec![tensor("mm.2.bias", &[64])];
        for name in [
            "v.deepstack.5.fc1.weight",
            "v.deepstack.5.fc1.bias",
            "v.deepstack.5.fc2.weight",
            "v.deepstack.11.fc1.weight",
            // Not how `%d` writes a layer number: clip.cpp never looks it up.
            "v.deepstack.011.fc1.weight",
            "v.deepstack.x.fc1.weight",
        ] {
            tensors.push(tensor(name, &[4, 4]));
        }
        let width = projector_output_width(&vision_mmproj("qwen3vl_merger"), &tensors, Encoder::Vision).unwrap();
        assert_eq!((width.deepstack_layers, width.width), (2, 192));
        assert_eq!(width.to_string(), "qwen3vl_merger, mm.2.bias × (1 + 2 deepstack layers)");
    }

    #[test]
    fn a_dimension_a_tensor_leaves_out_is_one() {
        let width =
            projector_output_width(&vision_mmproj("idefics3"), &[tensor("mm.model.fc.weight", &[9])], Encoder::Vision);
        assert_eq!(width.unwrap().width, 1);
    }

    #[test]
    fn unknown_and_missing_projector_types() {
        let err = projector_output_width(&vision_mmproj("gizmo"), &[], Encoder::Vision).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown projector type `gizmo` (known: gemma3, pixtral, mlp, ldp, ldpv2, resampler, minicpmv4_6, qwen2vl_merger, \
             qwen2.5vl_merger, qwen3vl_merger, idefics3, ultravox, voxtral, qwen2a)"
        );
        let mut meta = vision_mmproj("");
        assert_eq!(
            projector_type(&meta, Encoder::Vision).unwrap_err().to_string(),
            "missing clip.projector_type (and clip.vision.projector_type): the file names no projector"
        );
        meta.set("clip.projector_type", Value::U32(3));
        assert_eq!(
            projector_type(&meta, Encoder::Vision).unwrap_err().to_string(),
            "clip.projector_type: is 3 (u32), expected a UTF-8 string"
        );
    }

    #[test]
    fn a_file_with_both_encoders_names_a_projector_for_each() {
        let mut meta = metadata(&[
            ("general.architecture", Value::string("clip")),
            ("clip.has_vision_encoder", Value::Bool(true)),
            ("clip.has_audio_encoder", Value::Bool(true)),
            ("clip.vision.projector_type", Value::string("qwen2.5vl_merger")),
            ("clip.audio.projector_type", Value::string("qwen2a")),
        ]);
        assert_eq!(part_role(&meta), Ok(PartRole::VisionAudio));
        assert_eq!(projector_type(&meta, Encoder::Vision), Ok("qwen2.5vl_merger"));
        assert_eq!(projector_type(&meta, Encoder::Audio), Ok("qwen2a"));
        // The shared key comes first, as in clip.cpp.
        meta.set("clip.projector_type", Value::string("ultravox"));
        assert_eq!(projector_type(&meta, Encoder::Vision), Ok("ultravox"));
    }

    #[test]
    fn roles_come_from_the_architecture_and_encoder_flags() {
        let lm = metadata(&[("general.architecture", Value::string("llama"))]);
        assert_eq!(part_role(&lm), Ok(PartRole::Language));
        let audio = metadata(&[
            ("general.architecture", Value::string("clip")),
            ("clip.has_vision_encoder", Value::Bool(false)),
            ("clip.has_audio_encoder", Value::Bool(true)),
        ]);
        assert_eq!(part_role(&audio), Ok(PartRole::Audio));
        let neither = metadata(&[("general.architecture", Value::string("clip"))]);
        assert_eq!(
            part_role(&neither).unwrap_err().to_string(),
            "no encoder: neither clip.has_vision_encoder nor clip.has_audio_encoder is true"
        );
        let bad_flag =
            metadata(&[("general.architecture", Value::string("clip")), ("clip.has_vision_encoder", Value::U8(1))]);
        assert_eq!(
            part_role(&bad_flag).unwrap_err().to_string(),
            "clip.has_vision_encoder: is 1 (u8), expected a bool"
        );
        assert_eq!(part_role(&Metadata::new()).unwrap_err().to_string(), "general.architecture: missing");
    }

    #[test]
    fn role_names_round_trip() {
        for role in PartRole::ALL {
            assert_eq!(PartRole::from_name(role.name()), Some(role));
        }
        assert_eq!(PartRole::from_name("Vision"), None);
    }

    #[test]
    fn language_input_width_counts_deepstack_layers() {
        let mut meta = metadata(&[("general.architecture", Value::string("qwen3vl"))]);
        assert_eq!(language_input_width(&meta).unwrap_err().to_string(), "qwen3vl.embedding_length: missing");
        meta.set("qwen3vl.embedding_length", Value::U32(64));
        let plain = language_input_width(&meta).unwrap();
        assert_eq!((plain.width, plain.to_string()), (64, "qwen3vl.embedding_length".to_owned()));
        meta.set("qwen3vl.n_deepstack_layers", Value::U32(3));
        let deep = language_input_width(&meta).unwrap();
        assert_eq!(deep.width, 256);
        assert_eq!(deep.to_string(), "qwen3vl.embedding_length 64 × (1 + qwen3vl.n_deepstack_layers 3)");
        meta.set("qwen3vl.n_deepstack_layers", Value::I32(-1));
        assert_eq!(
            language_input_width(&meta).unwrap_err().to_string(),
            "qwen3vl.n_deepstack_layers: is -1 (i32), expected a non-negative integer"
        );
        meta.set("qwen3vl.n_deepstack_layers", Value::U64(u64::MAX));
        assert!(matches!(language_input_width(&meta), Err(ClipError::Overflow { .. })));
    }
}
