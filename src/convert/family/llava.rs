//! LLaVA-1.5's vision tower: `LlavaForConditionalGeneration` with a CLIP
//! encoder, as llava-hf publishes llava-1.5 (`--mmproj`). The pinned
//! `convert_hf_to_gguf.py` does not write it (its LLaVA tower is Pixtral's,
//! `family::pixtral`); llama.cpp's legacy scripts do, in two steps
//! (`tools/mtmd/legacy-models`: `llava_surgery_v2.py` takes the encoder and
//! the projector out of the checkpoint, `convert_image_encoder_to_gguf.py
//! --clip-model-is-vision --llava-projector` writes them, `vision_config`
//! as the encoder's `config.json`). This writes that file in one step, byte
//! for byte: projector type `mlp`, the projector first, then the encoder in
//! `CLIPVisionModel`'s parameter order without its last block and final
//! norm (LLaVA reads the block before the last), f16 or f32 as that script
//! writes them. The language model is LLaMA's conversion (`family::llama`).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value as Json, json};

use crate::arch::clip::{
    CLIP_NAMES, HAS_LLAVA_PROJECTOR_KEY, HAS_TEXT_ENCODER_KEY, HAS_VISION_ENCODER_KEY, LLAVA_MLP_PROJECTOR_NAMES,
    PROJECTOR_TYPE_KEY, vision_key,
};
use crate::arch::registry::gguf_name_in;
use crate::convert::checkpoint::Checkpoint;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{count_of, file_type};
use crate::convert::mmproj::{Layout, Vision, VisionHparams};
use crate::convert::tensors::{CheckpointPart, ConvertedTensor, OutType, Values};
use crate::model::{Array, Metadata, TensorInfo, Value};
use crate::types::GgmlType;

/// Keys of `LlavaConfig` (beside `text_config` and `vision_config`) that
/// belong to its tower, whichever encoder it has.
pub(super) const LLAVA_SETTINGS: &[&str] = &[
    "image_token_index",
    "image_seq_length",
    "projector_hidden_act",
    "multimodal_projector_bias",
    "vision_feature_layer",
    "vision_feature_select_strategy",
];

pub const CLIP: Vision = Vision {
    classes: &["LlavaForConditionalGeneration"],
    projector: "mlp",
    encoders: &["clip_vision_model"],
    unnamed_encoder: "clip_vision_model",
    top_level: LLAVA_SETTINGS,
    modelled: &[
        "hidden_size",
        "intermediate_size",
        "projection_dim",
        "num_hidden_layers",
        "num_attention_heads",
        "image_size",
        "patch_size",
        "hidden_act",
        "layer_norm_eps",
        // Training settings, and a vocabulary size llava-hf's configs carry
        // in `vision_config`, which `CLIPVisionModel` never reads.
        "attention_dropout",
        "dropout",
        "initializer_range",
        "initializer_factor",
        "vocab_size",
    ],
    defaults: || vec![("num_channels", json!(3))],
    read_config: clip_vision_defaults,
    prefixes: &["multi_modal_projector.", "vision_tower."],
    // LLaVA reads the encoder before its final norm; the legacy script drops
    // it, and the position ids older checkpoints saved (a buffer, not a weight).
    skipped: &[".post_layernorm.", ".embeddings.position_ids"],
    names: &[CLIP_NAMES, LLAVA_MLP_PROJECTOR_NAMES],
    plus_one: &[],
    permuted: &[],
    splits: &[],
    embedding_rows: &[],
    forced: |_, _, _| None,
    keys: clip_keys,
    layout: Layout::Own { write: legacy_file, outtypes: &[OutType::F16, OutType::F32] },
};

/// `vision_config` as `CLIPVisionConfig` reads it: its defaults where the
/// config (saved as a difference from them) leaves a setting out.
fn clip_vision_defaults(config: &mut Map<String, Json>) {
    let defaults = [
        ("hidden_size", json!(768)),
        ("intermediate_size", json!(3072)),
        ("projection_dim", json!(512)),
        ("num_hidden_layers", json!(12)),
        ("num_attention_heads", json!(12)),
        ("image_size", json!(224)),
        ("patch_size", json!(32)),
        ("hidden_act", json!("quick_gelu")),
        ("layer_norm_eps", json!(1e-5)),
    ];
    for (key, value) in defaults {
        config.entry(key).or_insert(value);
    }
}

/// LLaVA's settings held to what llama.cpp's `mlp` projector computes (the
/// patches, not the class token, of the block before the last, through a
/// GELU projector with biases), each with `LlavaConfig`'s default; then the
/// encoder's activation, as the legacy script writes it.
fn clip_keys(hp: &VisionHparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    hp.hold(
        "llava vision tower",
        &[
            ("projector_hidden_act", json!("gelu"), json!("gelu")),
            ("multimodal_projector_bias", json!(true), json!(true)),
            ("vision_feature_layer", json!(-2), json!(-2)),
            ("vision_feature_select_strategy", json!("default"), json!("default")),
        ],
    )?;
    keys.set("clip.use_gelu", Value::Bool(hp.get("hidden_act") == Some(&json!("gelu"))));
    Ok(())
}

/// The whole file as `convert_image_encoder_to_gguf.py --clip-model-is-vision
/// --llava-projector` writes it, its keys in that script's order.
fn legacy_file(
    ckpt: &Checkpoint,
    vision: &Vision,
    hp: &VisionHparams<'_>,
    outtype: OutType,
) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    if ckpt.metadata_override.is_some() {
        return Err(ConvertError::Config(
            "--metadata: the legacy LLaVA converter writes no metadata override into the tower's file".into(),
        ));
    }
    let blocks = hp.u64(&["num_hidden_layers"])?;
    let kept = blocks.checked_sub(1).filter(|&kept| kept > 0).ok_or_else(|| {
        ConvertError::Config(format!(
            "`vision_config.num_hidden_layers` is {blocks}: LLaVA reads the block before the last, which needs two"
        ))
    })?;
    let tensors = legacy_tensors(ckpt, vision, kept, outtype)?;
    let mut keys = Metadata::new();
    keys.set("general.architecture", Value::string("clip"));
    keys.set(HAS_TEXT_ENCODER_KEY, Value::Bool(false));
    keys.set(HAS_VISION_ENCODER_KEY, Value::Bool(true));
    keys.set(HAS_LLAVA_PROJECTOR_KEY, Value::Bool(true));
    keys.set("general.file_type", file_type(outtype));
    // The script's name is the encoder config's `_name_or_path`, which
    // transformers writes empty (and an empty string is not written).
    if let Some(name) = ckpt.model_name.as_ref().filter(|name| !name.is_empty()) {
        keys.set("general.name", Value::string(name));
    }
    keys.set("general.description", Value::string("image encoder for LLaVA"));
    keys.set(PROJECTOR_TYPE_KEY, Value::string(vision.projector));
    for (key, names) in [
        ("image_size", &["image_size"]),
        ("patch_size", &["patch_size"]),
        ("embedding_length", &["hidden_size"]),
        ("feed_forward_length", &["intermediate_size"]),
        ("projection_dim", &["projection_dim"]),
        ("attention.head_count", &["num_attention_heads"]),
    ] {
        keys.set(&vision_key(key), hp.count(names)?);
    }
    let eps = hp
        .get("layer_norm_eps")
        .and_then(Json::as_f64)
        .ok_or_else(|| ConvertError::Config("`vision_config.layer_norm_eps` is not a number".into()))?;
    keys.set(&vision_key("attention.layer_norm_epsilon"), Value::F32(eps as f32));
    keys.set(&vision_key("block_count"), count_of("vision_config.num_hidden_layers", &json!(kept))?);
    for name in ["image_mean", "image_std"] {
        keys.set(&vision_key(name), Value::Array(Array::F32(processor_floats(hp, name)?)));
    }
    (vision.keys)(hp, &mut keys)?;
    Ok((keys, tensors))
}

/// The image processor's `name`, as the script's `--image-mean` /
/// `--image-std` take it: a list of decimals, written as f32.
fn processor_floats(hp: &VisionHparams<'_>, name: &str) -> Result<Vec<f32>, ConvertError> {
    let value = hp.processor.get(name).ok_or_else(|| {
        ConvertError::Config(format!("the image processor's config (preprocessor_config.json) has no `{name}`"))
    })?;
    let floats: Option<Vec<f32>> =
        value.as_array().and_then(|items| items.iter().map(|v| v.as_f64().map(|x| x as f32)).collect());
    floats.filter(|floats| !floats.is_empty()).ok_or_else(|| {
        ConvertError::Config(format!("the image processor's `{name}` ({value}) is not a list of numbers"))
    })
}

/// The projector's tensors (in the checkpoint's order, as the surgery
/// script saves them), then the encoder's first `kept` blocks in
/// `CLIPVisionModel`'s order; every other tower tensor is the dropped
/// block's, or skipped, or refused.
fn legacy_tensors(
    ckpt: &Checkpoint,
    vision: &Vision,
    kept: u64,
    outtype: OutType,
) -> Result<Vec<ConvertedTensor>, ConvertError> {
    let tower: Vec<(usize, usize)> =
        ckpt.tensor_order().into_iter().filter(|&(s, t)| vision.takes(&ckpt.shards[s].tensors[t].name)).collect();
    let info = |(s, t): (usize, usize)| &ckpt.shards[s].tensors[t];
    let by_name: HashMap<&str, (usize, usize)> = tower.iter().map(|&at| (info(at).name.as_str(), at)).collect();
    let unmapped = |name: &str| ConvertError::Unmapped { tensor: name.to_owned(), family: "llava vision tower" };
    let mut written = HashSet::new();
    let mut out = Vec::new();
    let mut write = |at: (usize, usize), name: String, ty: GgmlType| {
        let source = info(at);
        written.insert(source.name.as_str());
        let values = Values::Checkpoint(CheckpointPart {
            shard: at.0,
            tensor: at.1,
            transform: Default::default(),
            scale: None,
        });
        out.push(ConvertedTensor::new(TensorInfo::new(&name, squeezed(&source.dims), ty), values));
    };
    for &at in tower.iter().filter(|&&at| info(at).name.starts_with("multi_modal_projector.")) {
        let hf = &info(at).name;
        let name = gguf_name_in(&[LLAVA_MLP_PROJECTOR_NAMES], hf).ok_or_else(|| unmapped(hf))?;
        // Matrices as f16 at either outtype, the rest f32: the script's projector rule.
        let ty = if matches!(info(at).dims.len(), 2 | 4) { GgmlType::F16 } else { GgmlType::F32 };
        write(at, name, ty);
    }
    for (gguf, hf) in encoder_parameters(kept) {
        let mut found = false;
        for suffix in [".weight", ".bias", ""] {
            let Some(&at) = by_name.get(format!("{hf}{suffix}").as_str()) else { continue };
            let name = format!("{gguf}{suffix}");
            let ty = encoder_type(&name, squeezed(&info(at).dims).len(), outtype);
            write(at, name, ty);
            found = true;
        }
        if !found {
            return Err(ConvertError::Config(format!("the vision tower has no `{hf}` (weight or bias)")));
        }
    }
    let dropped = format!(".encoder.layers.{kept}.");
    for &at in &tower {
        let hf = info(at).name.as_str();
        let left_out = hf.contains(&dropped) || vision.skipped.iter().any(|part| hf.contains(part));
        if !written.contains(hf) && !left_out {
            return Err(unmapped(hf));
        }
    }
    Ok(out)
}

/// The encoder's parameters (GGUF and Hugging Face names, without
/// `.weight`/`.bias`) in `CLIPVisionModel`'s order: [`CLIP_NAMES`]' order
/// (the embeddings before the blocks, as there), its block entries once for
/// each of the first `kept` blocks.
fn encoder_parameters(kept: u64) -> Vec<(String, String)> {
    let (whole, per_block): (Vec<_>, Vec<_>) = CLIP_NAMES.iter().partition(|(gguf, _)| !gguf.contains("{N}"));
    let mut names: Vec<(String, String)> = whole.iter().map(|(gguf, hf)| (gguf.to_string(), hf.to_string())).collect();
    for block in 0..kept {
        let n = block.to_string();
        names.extend(per_block.iter().map(|(gguf, hf)| (gguf.replace("{N}", &n), hf.replace("{N}", &n))));
    }
    names
}

/// The script's type for an encoder tensor of `dims` dimensions (after
/// squeezing): a convolution's kernel f16 at either outtype (ggml's
/// convolution takes no f32 kernel); at f16, matrices named `.weight` f16
/// and the rest f32; at f32, everything else f32.
fn encoder_type(name: &str, dims: usize, outtype: OutType) -> GgmlType {
    match (dims, outtype) {
        (4, _) => GgmlType::F16,
        (2, OutType::F16) if name.ends_with(".weight") => GgmlType::F16,
        _ => GgmlType::F32,
    }
}

/// `dims` without those of length one, as numpy's `squeeze` leaves them.
fn squeezed(dims: &[u64]) -> Vec<u64> {
    dims.iter().copied().filter(|&n| n != 1).collect()
}
