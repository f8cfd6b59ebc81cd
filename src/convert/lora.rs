//! PEFT LoRA adapters → GGUF adapters, as `convert_lora_to_gguf.py` writes
//! them: each targeted weight's `lora_A`/`lora_B` pair under the base
//! family's GGUF name (`blk.0.attn_q.weight.lora_a`, `….lora_b`), through
//! the family's transforms (LLaMA's Q/K rows permute `lora_b`'s rows, which
//! are the weight's output rows), `adapter.lora.alpha` and the naming keys
//! from the adapter's own model card.
//!
//! `adapter_config.json` is read whole: every key is either modelled,
//! known to change nothing in the file (training settings), or refused
//! unless unset — a DoRA magnitude, rsLoRA's scale, a per-module alpha or
//! a trained bias would otherwise be dropped and the adapter applied wrong.

use std::path::Path;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value as Json;

use super::checkpoint::{Checkpoint, read_optional_json};
use super::error::ConvertError;
use super::family::Piece;
use super::files::CheckpointFiles;
use super::naming::{self, NamingSource, ParameterCounts};
use super::tensors::{self, CheckpointPart, ConvertedTensor, ExpertBuffer, OutType, Values};
use crate::arch::registry::{FAMILIES, gguf_name};
use crate::artifact::RowTransform;
use crate::model::{Array, Metadata, TensorInfo, Value};

/// What an `adapter_config.json` key means for the converted file.
#[derive(Clone, Copy)]
enum Key {
    /// Read and written (or checked against the tensors).
    Modelled,
    /// A training or bookkeeping setting: the trained tensors say it all.
    Inert,
    /// Refused unless unset (absent, null, false, empty): the reason.
    Unset(&'static str),
}

/// Every `adapter_config.json` key PEFT 0.21 writes for a LoRA adapter.
const KEYS: &[(&str, Key)] = &[
    ("peft_type", Key::Modelled),
    ("r", Key::Modelled),
    ("lora_alpha", Key::Modelled),
    ("rank_pattern", Key::Modelled),
    ("alpha_pattern", Key::Modelled),
    ("alora_invocation_tokens", Key::Modelled),
    ("bias", Key::Modelled),
    ("target_modules", Key::Inert),
    ("exclude_modules", Key::Inert),
    ("layers_to_transform", Key::Inert),
    ("layers_pattern", Key::Inert),
    ("base_model_name_or_path", Key::Modelled),
    ("revision", Key::Inert),
    ("task_type", Key::Inert),
    ("auto_mapping", Key::Inert),
    ("inference_mode", Key::Inert),
    ("peft_version", Key::Inert),
    ("lora_dropout", Key::Inert),
    ("init_lora_weights", Key::Inert),
    ("loftq_config", Key::Inert),
    ("eva_config", Key::Inert),
    ("corda_config", Key::Inert),
    ("lora_ga_config", Key::Inert),
    ("megatron_core", Key::Inert),
    ("qalora_group_size", Key::Inert),
    ("ensure_weight_tying", Key::Inert),
    ("use_dora", Key::Unset("DoRA's magnitude vectors have no place in a GGUF LoRA adapter")),
    ("use_rslora", Key::Unset("rsLoRA scales by alpha/sqrt(r), where llama.cpp applies alpha/r")),
    ("use_qalora", Key::Unset("QA-LoRA's pooled inputs are not modelled")),
    ("use_bdlora", Key::Unset("block-diagonal LoRA is not modelled")),
    (
        "fan_in_fan_out",
        Key::Unset(
            "Conv1D-layout (GPT-2) adapters are not converted: convert_lora_to_gguf.py transposes their pairs as it \
             transposes the base's weights, writing a lora_a of [out, rank] for an [in, out] weight, which \
             llama.cpp cannot apply",
        ),
    ),
    ("lora_bias", Key::Unset("a trained lora_B bias is not modelled")),
    ("modules_to_save", Key::Unset("fully trained modules beside the adapter are not converted")),
    ("trainable_token_indices", Key::Unset("trained token embeddings are not converted")),
    ("target_parameters", Key::Unset("LoRA on bare parameters (experts) is not modelled")),
    ("layer_replication", Key::Unset("replicated layers are not modelled")),
    ("megatron_config", Key::Unset("Megatron-parallel layers are not modelled")),
    ("arrow_config", Key::Unset("Arrow routing is not modelled")),
    ("kasa_config", Key::Unset("KaSA is not modelled")),
    ("monteclora_config", Key::Unset("MonteCLoRA is not modelled")),
    ("velora_config", Key::Unset("VeLoRA is not modelled")),
    (
        "invocation_string",
        Key::Unset("an aLoRA invocation string needs the base's tokenizer; give alora_invocation_tokens"),
    ),
];

/// A PEFT LoRA adapter's settings that shape the converted file.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    pub rank: u64,
    pub alpha: f64,
    /// Per-module ranks: a pattern matched against a module's name (as PEFT
    /// matches it: the whole name, or its end after a dot), compiled.
    pub rank_pattern: Vec<(Regex, u64)>,
    /// aLoRA: the tokens after which the adapter applies.
    pub invocation_tokens: Option<Vec<u32>>,
    /// `base_model_name_or_path`: the model it was trained on, a directory
    /// or a Hugging Face repo id.
    pub base_model: Option<String>,
}

impl AdapterConfig {
    /// Reads `adapter_config.json`'s text, refusing what is not modelled.
    pub fn parse(path: &Path, text: &str) -> Result<AdapterConfig, ConvertError> {
        let refuse = |problem: String| ConvertError::Adapter { path: path.to_owned(), problem };
        let json: Json = serde_json::from_str(text).map_err(|e| refuse(e.to_string()))?;
        let object = json.as_object().ok_or_else(|| refuse("not a JSON object".into()))?;
        for (key, value) in object {
            match KEYS.iter().find(|(k, _)| k == key) {
                None => {
                    return Err(refuse(format!("`{key}` is not a setting this converter models; refusing to drop it")));
                }
                Some((_, Key::Unset(why))) if is_set(value) => {
                    return Err(refuse(format!("`{key}` is {value}: {why}")));
                }
                _ => {}
            }
        }
        match object.get("peft_type").and_then(Json::as_str) {
            Some("LORA") => {}
            other => return Err(refuse(format!("`peft_type` is {other:?}, not \"LORA\""))),
        }
        match object.get("bias").and_then(Json::as_str) {
            None | Some("none") => {}
            Some(other) => return Err(refuse(format!("`bias` is \"{other}\": trained biases are not converted"))),
        }
        let rank = positive(object.get("r"), "r").map_err(&refuse)?;
        let alpha = object
            .get("lora_alpha")
            .and_then(Json::as_f64)
            .filter(|a| a.is_finite())
            .ok_or_else(|| refuse("`lora_alpha` is missing or not a number".into()))?;
        let rank_pattern = patterns(object.get("rank_pattern"), "rank_pattern")
            .map_err(&refuse)?
            .into_iter()
            .map(|(pattern, value)| {
                Ok((pattern_regex(pattern)?, positive(Some(value), &format!("rank_pattern.{pattern}"))?))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(&refuse)?;
        for (pattern, value) in patterns(object.get("alpha_pattern"), "alpha_pattern").map_err(&refuse)? {
            if value.as_f64() != Some(alpha) {
                return Err(refuse(format!(
                    "`alpha_pattern` gives `{pattern}` alpha {value}, where the adapter's is {alpha}: a GGUF adapter \
                     has one alpha (convert_lora_to_gguf.py would write {alpha} and scale those modules wrong)"
                )));
            }
            pattern_regex(pattern).map_err(&refuse)?;
        }
        let invocation_tokens = match object.get("alora_invocation_tokens") {
            None | Some(Json::Null) => None,
            Some(Json::Array(tokens)) => Some(
                tokens
                    .iter()
                    .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or_else(|| refuse("`alora_invocation_tokens` holds a value that is no token id".into()))?,
            ),
            Some(other) => return Err(refuse(format!("`alora_invocation_tokens` is {other}, not a list"))),
        };
        let base_model = object.get("base_model_name_or_path").and_then(Json::as_str).map(str::to_owned);
        Ok(AdapterConfig { rank, alpha, rank_pattern, invocation_tokens, base_model })
    }

    /// `dir`'s `adapter_config.json`, read and checked.
    pub fn read(files: &dyn CheckpointFiles, dir: &Path) -> Result<AdapterConfig, ConvertError> {
        let path = dir.join("adapter_config.json");
        let problem = |problem: String| ConvertError::Adapter { path: path.clone(), problem };
        let bytes = files.read(&path, 1 << 20)?.ok_or_else(|| problem("no such file".into()))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| problem(format!("is not UTF-8 text: {e}")))?;
        AdapterConfig::parse(&path, text)
    }

    /// The rank PEFT gives module `module` (`model.layers.0.mlp.down_proj`).
    pub fn rank_of(&self, module: &str) -> u64 {
        self.rank_pattern.iter().find(|(pattern, _)| pattern.is_match(module)).map_or(self.rank, |&(_, rank)| rank)
    }
}

fn is_set(value: &Json) -> bool {
    match value {
        Json::Null | Json::Bool(false) => false,
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
        _ => true,
    }
}

fn positive(value: Option<&Json>, key: &str) -> Result<u64, String> {
    value
        .and_then(Json::as_u64)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{key}` is missing or not a positive integer"))
}

fn patterns<'j>(value: Option<&'j Json>, key: &str) -> Result<Vec<(&'j String, &'j Json)>, String> {
    match value {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Object(map)) => Ok(map.iter().collect()),
        Some(other) => Err(format!("`{key}` is {other}, not a table")),
    }
}

/// PEFT's match of a pattern key against a module name: `(.*\.)?KEY$` from the start.
fn pattern_regex(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!(r"^(?:.*\.)?(?:{pattern})$")).map_err(|e| format!("pattern `{pattern}`: {e}"))
}

/// An adapter directory read for conversion: its settings, and its weights
/// as a checkpoint whose config is the base model's.
pub struct Adapter {
    pub config: AdapterConfig,
    pub checkpoint: Checkpoint,
    /// The base's directory name: the name written when nothing else gives one.
    base_name: String,
}

impl Adapter {
    /// `dir`'s `adapter_config.json` and `adapter_model.safetensors` (or
    /// `.bin`), with `base_dir`'s `config.json` (the base's weights are not read).
    pub fn open(dir: &Path, base_dir: &Path, files: Arc<dyn CheckpointFiles>) -> Result<Adapter, ConvertError> {
        let config = AdapterConfig::read(&*files, dir)?;
        let listing = files.list(dir)?;
        let weights = ["adapter_model.safetensors", "adapter_model.bin"]
            .iter()
            .map(|name| dir.join(name))
            .find(|path| listing.contains(path))
            .ok_or_else(|| ConvertError::Adapter {
                path: dir.to_owned(),
                problem: "no adapter_model.safetensors or adapter_model.bin".into(),
            })?;
        let base_config =
            read_optional_json(&*files, &base_dir.join("config.json"))?.ok_or_else(|| ConvertError::Adapter {
                path: base_dir.to_owned(),
                problem: "the base has no config.json (--base names the base model's directory)".into(),
            })?;
        let checkpoint = Checkpoint {
            dir: dir.to_owned(),
            repository: crate::formats::hub_model_name(dir),
            model_name: None,
            metadata_override: None,
            config: super::checkpoint::text_hparams(&base_config),
            file_config: base_config,
            shards: vec![files.model(&weights)?],
            files,
        };
        let base_name = base_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Adapter { config, checkpoint, base_name })
    }

    /// The adapter file's path.
    pub fn weights_path(&self) -> &Path {
        self.checkpoint.shards[0].path()
    }
}

/// Which half of a LoRA pair a checkpoint tensor is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    A,
    B,
}

/// A PEFT tensor name's base weight and half: `base_model.model.X.lora_A.weight`
/// → (`X.weight`, A); an embedding's `X.lora_embedding_A` likewise.
fn split_name(name: &str) -> Result<Option<(String, Half)>, ConvertError> {
    let stem = name.strip_prefix("base_model.model.").unwrap_or(name);
    let refuse = |problem: &str| ConvertError::AdapterTensor { tensor: name.to_owned(), problem: problem.to_owned() };
    for (ending, half) in [
        (".lora_A.weight", Half::A),
        (".lora_B.weight", Half::B),
        (".lora_embedding_A", Half::A),
        (".lora_embedding_B", Half::B),
    ] {
        if let Some(module) = stem.strip_suffix(ending) {
            return Ok(Some((format!("{module}.weight"), half)));
        }
    }
    if stem.ends_with(".base_layer.weight") {
        return Ok(None);
    }
    if stem.ends_with(".embed_tokens.weight") || stem.ends_with("lm_head.weight") {
        return Err(refuse(
            "whole embeddings saved beside an adapter (new tokens added while fine-tuning) are not converted",
        ));
    }
    Err(refuse("not a lora_A or lora_B tensor (norms saved beside an adapter are not converted)"))
}

/// One targeted weight's pair, in the order the adapter first names it.
struct Pair {
    hf: String,
    a: Option<usize>,
    b: Option<usize>,
}

/// The whole converted adapter: metadata in the converter's key order and
/// each pair's `lora_a`, `lora_b` in the order the adapter names them.
pub fn convert_lora(adapter: &Adapter, outtype: OutType) -> Result<(Metadata, Vec<ConvertedTensor>), ConvertError> {
    let ckpt = &adapter.checkpoint;
    let (conversion, arch) = tensors::conversion_of(ckpt)?;
    super::config::check_modelled(ckpt, conversion)?;
    let names = FAMILIES
        .iter()
        .find(|f| f.id == conversion.family)
        .ok_or_else(|| ConvertError::Config(format!("no registry family `{}`", conversion.family)))?;
    let shard = &ckpt.shards[0];
    let pairs = pairs_of(ckpt)?;
    let blocks = ckpt.hparam(super::hparams::BLOCKS).and_then(Json::as_u64);
    let mut out = Vec::with_capacity(pairs.len() * 2);
    let (mut experts_a, mut experts_b) = (ExpertBuffer::new("weight.lora_a"), ExpertBuffer::new("weight.lora_b"));
    let mut total: u64 = 0;
    for pair in &pairs {
        let tensor_error = |problem: String| ConvertError::AdapterTensor { tensor: pair.hf.clone(), problem };
        let (Some(a), Some(b)) = (pair.a, pair.b) else {
            return Err(tensor_error("has only one of its lora_A and lora_B".into()));
        };
        let Some(hf) = conversion.renamed(pair.hf.strip_prefix("language_model.").unwrap_or(&pair.hf)) else {
            continue;
        };
        let hf = hf.as_ref();
        if tensors::past_the_blocks(hf, blocks) && conversion.has(super::family::Transform::DropNextTokenBlocks) {
            continue;
        }
        let (a_info, b_info) = (&shard.tensors[a], &shard.tensors[b]);
        // ggml order: A is [in, rank], B [rank, out].
        let (&[a_in, a_rank], &[b_rank, b_out]) = (a_info.dims.as_slice(), b_info.dims.as_slice()) else {
            return Err(tensor_error(format!(
                "lora_A {:?} and lora_B {:?} are not both 2-D",
                a_info.dims, b_info.dims
            )));
        };
        let rank = adapter.config.rank_of(pair.hf.strip_suffix(".weight").unwrap_or(&pair.hf));
        if a_rank != rank || b_rank != rank {
            return Err(tensor_error(format!(
                "lora_A is {a_rank}×{a_in} and lora_B {b_out}×{b_rank} (rows × columns), where the config's rank \
                 for it is {rank}"
            )));
        }
        total += a_in * b_out;
        let part = |tensor, transform| CheckpointPart { shard: 0, tensor, transform, scale: None };
        let half = |name: String, dims: Vec<u64>, values: Values| {
            let ty = tensors::output_type(&name, &dims, outtype);
            ConvertedTensor::new(TensorInfo::new(&name, dims, ty), values)
        };
        // Each expert's pair is stacked with the block's others, A with A
        // and B with B, written when the block's last is in.
        if let Some(stack) = conversion.experts()
            && let Some(expert) = stack.part(hf)
        {
            let count = tensors::expert_count(ckpt, stack, hf)?;
            let stacks_a = experts_a.add(stack, count, expert, (0, a, None), &a_info.dims, outtype)?;
            let stacks_b = experts_b.add(stack, count, expert, (0, b, None), &b_info.dims, outtype)?;
            out.extend(stacks_a.into_iter().zip(stacks_b).flat_map(|(a, b)| [a, b]));
            continue;
        }
        // A fused projection: each tensor written from it gets all of A
        // and its own rows of B.
        if let Some((fused, block, suffix)) = tensors::fused_of(conversion, hf) {
            for Piece { name, runs, slices } in (fused.pieces)(&ckpt.config)? {
                if slices.is_some() {
                    return Err(tensor_error(format!(
                        "targets `{}`, written a slice per head, which adapters are not converted for yet",
                        fused.hf
                    )));
                }
                let name = format!("{}.{suffix}", name.replace("{N}", &block));
                let b_rows = runs.iter().map(|run| tensors::selected_dims(&b_info.dims, run)[1]).sum();
                let b_values = match runs.as_slice() {
                    [run] => Values::Checkpoint(part(b, *run)),
                    _ => Values::Stacked(runs.iter().map(|run| part(b, *run)).collect()),
                };
                out.push(half(
                    format!("{name}.lora_a"),
                    a_info.dims.clone(),
                    Values::Checkpoint(part(a, RowTransform::default())),
                ));
                out.push(half(format!("{name}.lora_b"), vec![b_rank, b_rows], b_values));
            }
            continue;
        }
        if conversion.transposes(hf) || conversion.squeezes(hf) {
            return Err(tensor_error(
                "targets a weight stored transposed or 3-D, which adapters are not converted for yet".into(),
            ));
        }
        let name = gguf_name(names, hf)
            .ok_or_else(|| ConvertError::Unmapped { tensor: hf.to_owned(), family: conversion.family })?;
        let b_transform =
            RowTransform { permute_heads: tensors::permuted_heads(conversion, ckpt, hf), ..Default::default() };
        // llama.cpp reads a token embedding's A transposed (`llm_build_inp_embd`): [rank, vocabulary].
        let (a_dims, a_transform) = match name.contains("token_embd.weight") {
            true => (vec![a_rank, a_in], RowTransform { transpose: Some(a_rank as usize), ..Default::default() }),
            false => (a_info.dims.clone(), RowTransform::default()),
        };
        out.push(half(format!("{name}.lora_a"), a_dims, Values::Checkpoint(part(a, a_transform))));
        out.push(half(format!("{name}.lora_b"), b_info.dims.clone(), Values::Checkpoint(part(b, b_transform))));
    }
    experts_a.finish()?;
    experts_b.finish()?;
    if out.is_empty() {
        return Err(ConvertError::Adapter {
            path: adapter.weights_path().to_owned(),
            problem: "no lora_A/lora_B pair of a weight the base's conversion writes".into(),
        });
    }
    Ok((adapter_metadata(adapter, arch, total)?, out))
}

/// The adapter's `lora_A`/`lora_B` tensors paired by the weight they
/// target, in the order the adapter first names each.
fn pairs_of(ckpt: &Checkpoint) -> Result<Vec<Pair>, ConvertError> {
    let shard = &ckpt.shards[0];
    let mut pairs: Vec<Pair> = Vec::new();
    for (_, t) in ckpt.tensor_order() {
        let Some((hf, half)) = split_name(&shard.tensors[t].name)? else { continue };
        let pair = match pairs.iter_mut().position(|p| p.hf == hf) {
            Some(at) => &mut pairs[at],
            None => {
                pairs.push(Pair { hf, a: None, b: None });
                pairs.last_mut().expect("just pushed")
            }
        };
        match half {
            Half::A => pair.a = Some(t),
            Half::B => pair.b = Some(t),
        }
    }
    Ok(pairs)
}

/// The converted adapter's metadata, in the converter's key order: `total`
/// the parameters its pairs stand for.
fn adapter_metadata(adapter: &Adapter, arch: &str, total: u64) -> Result<Metadata, ConvertError> {
    let ckpt = &adapter.checkpoint;
    let mut metadata = Metadata::new();
    metadata.set("general.architecture", Value::string(arch));
    let counts = ParameterCounts { total, shared: total, ..Default::default() };
    // gguf-py reads the adapter directory as the model's: its model card,
    // its own config.json (rarely there), its name.
    let own_config = ckpt.json("config.json")?;
    let source = NamingSource {
        config: own_config.as_ref(),
        fallback_name: adapter.base_name.clone(),
        // Negative: gguf-py's sign that a LoRA's count is not exact.
        total: -(total as i64),
        gguf_type: "adapter",
        ..NamingSource::of_model(ckpt, &counts)
    };
    naming::general_keys(&source, &counts, ckpt, &mut metadata)?;
    metadata.set("adapter.lora.alpha", Value::F32(adapter.config.alpha as f32));
    if let Some(tokens) = &adapter.config.invocation_tokens
        && !tokens.is_empty()
    {
        metadata.set("adapter.alora.invocation_tokens", Value::Array(Array::U32(tokens.clone())));
    }
    metadata.set("general.quantization_version", Value::U32(crate::quant::plan::QUANTIZATION_VERSION));
    Ok(metadata)
}
