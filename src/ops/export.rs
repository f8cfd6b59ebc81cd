//! `export`: the one op with an effect: a tensor set written as a file, or
//! as the shards of a split.
//!
//! The path is a template (`out/model-{preset}.gguf`) filled from the fan-out
//! values of the nodes upstream, relative to the recipe's directory and never
//! outside it. A split export writes `out/model-{preset}-00001-of-0000N.gguf`,
//! … with llama-gguf-split's keys and layout. The path is not part of the
//! cache key: the same bytes exported to another place are the same result.

use std::borrow::Cow;
use std::path::PathBuf;

use crate::arch::split::Devices;
use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::formats::parse_size;
use crate::key::Key;
use crate::model::Endian;
use crate::ops::device_shards;
use crate::ops::split::{self, ShardPlan, SplitError, SplitKeyOrder, SplitLimit, SplitOptions, WriterSplit};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, ParamValue, Params};

pub const SPEC: OpSpec = OpSpec::new(
    "export",
    1,
    &[
        ParamSpec::required("path", ParamKind::Str),
        ParamSpec::optional("format", ParamKind::Str),
        ParamSpec::optional("split", ParamKind::Table),
        ParamSpec::optional("devices", ParamKind::Table),
        ParamSpec::optional("attest", ParamKind::Bool),
        ParamSpec::optional("byte_order", ParamKind::Str),
    ],
)
.sink();

pub const FORMATS: [&str; 3] = ["gguf", "safetensors", "ggjt"];

/// The container an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Gguf,
    /// SafeTensors as the Python package writes it; a split is sharded as
    /// Hugging Face checkpoints are, with a `.index.json`.
    SafeTensors,
    /// GGJT v3, the last legacy container (one file, little-endian), for
    /// what it can hold.
    Ggjt,
}

impl ExportFormat {
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Gguf => "gguf",
            ExportFormat::SafeTensors => "safetensors",
            ExportFormat::Ggjt => "ggjt",
        }
    }

    pub fn from_name(name: &str) -> Option<ExportFormat> {
        [ExportFormat::Gguf, ExportFormat::SafeTensors, ExportFormat::Ggjt].into_iter().find(|f| f.name() == name)
    }

    /// The extension a split's shards get after their number.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Gguf => "gguf",
            ExportFormat::SafeTensors => "safetensors",
            ExportFormat::Ggjt => "bin",
        }
    }
}

const SPLIT_FIELDS: [&str; 4] = ["max_size", "max_tensors", "no_tensor_first_split", "like"];
/// Whose shards a split writes: llama-gguf-split's (the default) or
/// `convert_hf_to_gguf.py --split-max-*`'s.
const SPLIT_TOOLS: [&str; 2] = ["llama-gguf-split", "convert"];

const DEVICES_FIELDS: [&str; 2] = ["count", "split"];

/// How an export is cut into files.
#[derive(Debug, Clone, PartialEq)]
pub enum SplitMode {
    /// One file.
    Whole,
    /// Shards as `llama-gguf-split --split` cuts them.
    Limit(SplitOptions),
    /// Each tensor in the shard its source tensor came from, as
    /// `llama-quantize --keep-split` writes.
    LikeInput,
    /// One file per device of a tensor split, as `shard-devices` writes.
    Devices(Devices),
    /// Shards as `convert_hf_to_gguf.py --split-max-*` cuts and names them
    /// (`STEM-00001-of-0000N.gguf`); one shard is the plain file.
    Writer(WriterSplit),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExportOptions {
    /// Where the file goes, already resolved.
    pub path: PathBuf,
    pub format: ExportFormat,
    pub split: SplitMode,
    /// Write a provenance attestation beside the output (`PATH.intoto.json`)
    /// after each complete run. Not part of the key: it changes no byte of
    /// the output.
    pub attest: bool,
    /// The byte order of a GGUF written; `None` keeps the set's own (its
    /// input's, for a set only edited; little-endian for one computed).
    pub byte_order: Option<Endian>,
}

impl ExportOptions {
    /// Reads the format and split parameters; the path the recipe resolves
    /// (it knows the fan-out values and the output directory).
    pub fn from_params(p: &Params, path: PathBuf) -> Result<ExportOptions, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let format = match p.str("format") {
            None => ExportFormat::Gguf,
            Some((name, _)) => ExportFormat::from_name(name).unwrap_or_else(|| {
                problems.push(p.error("format", format!("cannot export as `{name}`")).suggest(name, FORMATS));
                ExportFormat::Gguf
            }),
        };
        if format == ExportFormat::Ggjt {
            for param in ["split", "devices", "byte_order"] {
                if p.get(param).is_some() {
                    problems.push(p.error(param, format!("GGJT is one little-endian file: `{param}` does not apply")));
                }
            }
        }
        let mut split = split_from_params(p, &mut problems);
        if p.get("devices").is_some() && p.get("split").is_some() {
            problems.push(p.error("devices", "an export is cut by `split` or by `devices`, not both"));
        }
        if p.get("devices").is_some() && format == ExportFormat::SafeTensors {
            problems.push(p.error("devices", "per-device shards are GGUF files"));
        }
        if let Some(devices) = devices_from_params(p, &mut problems) {
            split = SplitMode::Devices(devices);
        }
        if format == ExportFormat::SafeTensors && matches!(split, SplitMode::Writer(_)) {
            problems.push(p.error("split", "`like = \"convert\"` writes GGUF shards"));
        }
        if format == ExportFormat::SafeTensors
            && let SplitMode::Limit(
                SplitOptions { limit: SplitLimit::MaxTensors(_), .. }
                | SplitOptions { no_tensor_first_split: true, .. },
            ) = split
        {
            problems.push(p.error("split", "a SafeTensors split takes `max_size` only"));
        }
        let byte_order = match p.str("byte_order") {
            None => None,
            Some(("little", _)) => Some(Endian::Little),
            Some(("big", _)) => Some(Endian::Big),
            Some((other, _)) => {
                problems.push(
                    p.error("byte_order", format!("`{other}` is not a byte order")).suggest(other, ["little", "big"]),
                );
                None
            }
        };
        if byte_order.is_some() && format == ExportFormat::SafeTensors {
            problems.push(p.error("byte_order", "SafeTensors is little-endian only"));
        }
        if problems.is_empty() {
            Ok(ExportOptions { path, format, split, attest: p.bool("attest"), byte_order })
        } else {
            Err(problems)
        }
    }
    pub fn key_params(&self) -> serde_json::Value {
        let split = match &self.split {
            SplitMode::Whole => serde_json::Value::Null,
            SplitMode::LikeInput => serde_json::json!("like-input"),
            SplitMode::Devices(d) => serde_json::json!({ "devices": d.count, "weights": d.weights }),
            SplitMode::Limit(o) => serde_json::json!({
                "max_size": match o.limit { SplitLimit::MaxSize(n) => Some(n), SplitLimit::MaxTensors(_) => None },
                "max_tensors": match o.limit { SplitLimit::MaxTensors(n) => Some(n), SplitLimit::MaxSize(_) => None },
                "no_tensor_first_split": o.no_tensor_first_split,
            }),
            SplitMode::Writer(o) => serde_json::json!({
                "like": "convert",
                "max_size": o.max_size,
                "max_tensors": o.max_tensors,
                "no_tensor_first_split": o.no_tensor_first_split,
            }),
        };
        let mut key = serde_json::json!({ "format": self.format.name(), "split": split });
        // Only when set: the keys of exports that keep the set's order stay as they were.
        if let Some(order) = self.byte_order {
            key["byte_order"] = serde_json::json!(order);
        }
        key
    }
}

/// `split = { max_size = …, max_tensors = …, no_tensor_first_split = …,
/// like = … }`: cut as llama-gguf-split cuts (one limit), or with
/// `like = "convert"` as `convert_hf_to_gguf.py --split-max-*` (either
/// limit or both).
fn split_from_params(p: &Params, problems: &mut Vec<Diagnostic>) -> SplitMode {
    let (mut max_size, mut max_tensors, mut like_convert) = (None, None, false);
    let mut no_tensor_first_split = false;
    for (field, value) in p.table("split") {
        match (field, &value.value) {
            ("max_size", ParamValue::Str(text)) => match parse_size(text) {
                Ok(bytes) if bytes > 0 => max_size = Some(bytes),
                _ => problems.push(
                    Diagnostic::new(format!("`{text}` is not a size"), value.span.clone())
                        .with_hint(r#"max_size = "2G" (llama-gguf-split's units) or "1.5GB", "2GiB""#),
                ),
            },
            ("max_size", ParamValue::Int(n)) if *n > 0 => max_size = Some(*n as u64),
            ("max_tensors", ParamValue::Int(n)) if *n > 0 => {
                max_tensors = Some(usize::try_from(*n).unwrap_or(usize::MAX))
            }
            ("no_tensor_first_split", ParamValue::Bool(b)) => no_tensor_first_split = *b,
            ("like", ParamValue::Str(tool)) if SPLIT_TOOLS.contains(&tool.as_str()) => like_convert = tool == "convert",
            ("max_size" | "max_tensors" | "no_tensor_first_split" | "like", _) => problems.push(Diagnostic::new(
                format!(
                    "`split.{field}` must be {}",
                    match field {
                        "no_tensor_first_split" => "true or false",
                        "max_tensors" => "a positive integer",
                        "like" => r#""llama-gguf-split" or "convert""#,
                        _ => "a positive size",
                    }
                ),
                value.span.clone(),
            )),
            (other, _) => problems.push(
                Diagnostic::new(format!("unknown field `{other}` in `split`"), value.span.clone())
                    .suggest(other, SPLIT_FIELDS),
            ),
        }
    }
    if p.get("split").is_none() {
        return SplitMode::Whole;
    }
    if like_convert && (max_size.is_some() || max_tensors.is_some()) {
        return SplitMode::Writer(WriterSplit {
            max_tensors: max_tensors.unwrap_or(0),
            max_size: max_size.unwrap_or(0),
            no_tensor_first_split,
        });
    }
    let limit = match (max_size, max_tensors) {
        (Some(bytes), None) => SplitLimit::MaxSize(bytes),
        (None, Some(n)) => SplitLimit::MaxTensors(n),
        (Some(_), Some(_)) => {
            problems.push(
                p.error("split", "llama-gguf-split cuts by `max_size` or by `max_tensors`, not both")
                    .with_hint(r#"like = "convert" cuts by both, as convert_hf_to_gguf.py does"#),
            );
            return SplitMode::Whole;
        }
        (None, None) => {
            if problems.is_empty() {
                problems.push(
                    p.error("split", "`split` needs `max_size` or `max_tensors`")
                        .with_hint(r#"split = { max_size = "2G" }"#),
                );
            }
            return SplitMode::Whole;
        }
    };
    SplitMode::Limit(SplitOptions { limit, no_tensor_first_split })
}

/// `devices = { count = N, split = [w1, …] }`: the devices of a tensor
/// split and their weights (llama.cpp's `--tensor-split`).
fn devices_from_params(p: &Params, problems: &mut Vec<Diagnostic>) -> Option<Devices> {
    p.get("devices")?;
    let (mut count, mut weights) = (None, None);
    for (field, value) in p.table("devices") {
        match (field, &value.value) {
            ("count", ParamValue::Int(n)) => count = Some(usize::try_from(*n).unwrap_or(0)),
            ("split", ParamValue::List(items)) => {
                let numbers: Option<Vec<f32>> = items
                    .iter()
                    .map(|item| match item.value {
                        ParamValue::Int(n) => Some(n as f32),
                        ParamValue::Float(x) => Some(x as f32),
                        _ => None,
                    })
                    .collect();
                match numbers {
                    Some(numbers) => weights = Some(numbers),
                    None => problems.push(Diagnostic::new("`devices.split` is a list of numbers", value.span.clone())),
                }
            }
            ("count" | "split", _) => problems.push(
                Diagnostic::new(
                    format!("`devices.{field}` must be {}", if field == "count" { "an integer" } else { "a list" }),
                    value.span.clone(),
                )
                .with_hint("devices = { count = 2, split = [3, 1] }"),
            ),
            (other, _) => problems.push(
                Diagnostic::new(format!("unknown field `{other}` in `devices`"), value.span.clone())
                    .suggest(other, DEVICES_FIELDS),
            ),
        }
    }
    let Some(count) = count else {
        problems.push(p.error("devices", "`devices` needs `count`").with_hint("devices = { count = 2 }"));
        return None;
    };
    Devices::new(count, weights).map_err(|e| problems.push(p.error("devices", e.to_string()))).ok()
}

/// One file an export writes: its path, metadata and tensors (indices into
/// the set).
#[derive(Debug, Clone)]
pub struct OutputFile {
    pub path: PathBuf,
    pub plan: ShardPlan,
}

/// What an export writes: the tensors (the set itself, or with per-device
/// slices added) and the data files (a SafeTensors split also writes an
/// index: [`safetensors_index`], at [`index_path`]).
pub struct Output<'s> {
    pub set: Cow<'s, TensorSet>,
    pub files: Vec<OutputFile>,
}

pub fn output_files<'s>(set: &'s TensorSet, options: &ExportOptions) -> Result<Output<'s>, SplitError> {
    let whole = || vec![ShardPlan { metadata: set.metadata.clone(), tensors: (0..set.tensors.len()).collect() }];
    let mut with_slices = None;
    let plans = match (options.format, &options.split) {
        (_, SplitMode::Whole) => whole(),
        // GGJT is never split (refused with its parameters).
        (ExportFormat::Gguf | ExportFormat::Ggjt, SplitMode::Limit(o)) => {
            split::plan_split(&set.metadata, &set.infos(), *o)?
        }
        (_, SplitMode::Writer(o)) => split::plan_writer_split(&set.metadata, &set.infos(), *o)?,
        (ExportFormat::SafeTensors, SplitMode::Limit(o)) => {
            let max = match o.limit {
                SplitLimit::MaxSize(bytes) => bytes,
                SplitLimit::MaxTensors(_) => u64::MAX,
            };
            safetensors_shards(&set.tensors, max)
                .into_iter()
                .map(|tensors| ShardPlan { metadata: set.metadata.clone(), tensors })
                .collect()
        }
        (_, SplitMode::LikeInput) => match shards_like_input(&set.tensors) {
            // llama-quantize names even a one-shard output as a shard, but
            // writes no split keys in it.
            shards if shards.len() == 1 => {
                vec![ShardPlan { metadata: set.metadata.clone(), tensors: shards.concat() }]
            }
            shards => split::shard_plans(&set.metadata, shards, set.tensors.len(), SplitKeyOrder::Quantize)?,
        },
        (_, SplitMode::Devices(devices)) => {
            let plan = crate::arch::split::plan(&set.metadata, &set.infos(), devices)?;
            let (all, plans) = device_shards::device_files(set, &plan)?;
            with_slices = Some(all);
            plans
        }
    };
    let count = plans.len();
    let files = plans
        .into_iter()
        .enumerate()
        .map(|(no, plan)| OutputFile { path: output_path(options, no, count), plan })
        .collect();
    let set = with_slices.map_or(Cow::Borrowed(set), Cow::Owned);
    Ok(Output { set, files })
}

/// How many data files an export writes, when that is known before its
/// input is (one, or one per device).
pub fn known_file_count(options: &ExportOptions) -> Option<usize> {
    match &options.split {
        SplitMode::Whole => Some(1),
        SplitMode::Devices(devices) => Some(devices.count),
        SplitMode::Limit(_) | SplitMode::LikeInput | SplitMode::Writer(_) => None,
    }
}

/// Every path an export with `count` data files writes, in order: the data
/// files, then a SafeTensors split's index.
pub fn all_paths(options: &ExportOptions, count: usize) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = (0..count).map(|no| output_path(options, no, count)).collect();
    paths.extend(index_path(options));
    paths
}

/// The path of data file `no` of the `count` an export writes: its path, or
/// for a split `PREFIX-0000i-of-0000N.gguf` (`.safetensors`) with the path's
/// extension taken off (gguf-py's writer takes off whatever extension the
/// path has, and writes one shard as the plain file).
pub fn output_path(options: &ExportOptions, no: usize, count: usize) -> PathBuf {
    let prefix = match options.split {
        SplitMode::Whole => return options.path.clone(),
        SplitMode::Writer(_) if count == 1 => return options.path.clone(),
        SplitMode::Devices(_) => return device_shards::shard_path(&shard_prefix(options), no, count),
        SplitMode::Limit(_) | SplitMode::LikeInput | SplitMode::Writer(_) => shard_prefix(options),
    };
    match options.format {
        ExportFormat::SafeTensors => {
            let mut name = prefix.into_os_string();
            name.push(format!("-{:05}-of-{:05}.safetensors", no + 1, count));
            PathBuf::from(name)
        }
        // GGJT is never split (refused with its parameters).
        ExportFormat::Gguf | ExportFormat::Ggjt => crate::formats::shard_path(&prefix, no, count),
    }
}

/// A SafeTensors split's index, `PREFIX.safetensors.index.json`.
pub fn index_path(options: &ExportOptions) -> Option<PathBuf> {
    if options.format != ExportFormat::SafeTensors || options.split == SplitMode::Whole {
        return None;
    }
    let mut name = shard_prefix(options).into_os_string();
    name.push(".safetensors.index.json");
    Some(PathBuf::from(name))
}

/// What a split's shards are named from: the path without its `.gguf`
/// (`.safetensors`), or for the converter's writer without whatever
/// extension it has.
pub fn shard_prefix(options: &ExportOptions) -> PathBuf {
    if let SplitMode::Writer(_) = options.split {
        return options.path.with_file_name(options.path.file_stem().unwrap_or_default());
    }
    let extension = format!(".{}", options.format.extension());
    let text = options.path.as_os_str().to_string_lossy();
    PathBuf::from(text.strip_suffix(&extension).unwrap_or(&text))
}

/// Hugging Face's sharding: tensors in order, a new shard when the next
/// would take the current one past `max_bytes`; a tensor larger than that
/// alone fills a shard.
fn safetensors_shards(tensors: &[Tensor], max_bytes: u64) -> Vec<Vec<usize>> {
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut current = 0u64;
    for (i, tensor) in tensors.iter().enumerate() {
        let size = tensor.n_bytes();
        let full = shards.last().is_some_and(|shard| !shard.is_empty() && current + size > max_bytes);
        if full {
            shards.push(Vec::new());
            current = 0;
        }
        if let Some(shard) = shards.last_mut() {
            shard.push(i);
        }
        current += size;
    }
    shards
}

/// The `.index.json` of a SafeTensors split, as `transformers` writes it:
/// `total_size` in the metadata, the weight map sorted, two-space indent.
pub fn safetensors_index(set: &TensorSet, files: &[OutputFile]) -> Vec<u8> {
    let mut weight_map = std::collections::BTreeMap::new();
    for file in files {
        let name = file.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for &t in &file.plan.tensors {
            weight_map.insert(set.tensors[t].name.clone(), name.clone());
        }
    }
    let total_size: u64 = set.tensors.iter().map(Tensor::n_bytes).sum();
    let index = serde_json::json!({ "metadata": { "total_size": total_size }, "weight_map": weight_map });
    let mut text = serde_json::to_string_pretty(&index).unwrap_or_default();
    text.push('\n');
    text.into_bytes()
}

/// Tensors grouped by the input file their bytes come from, files in the
/// order their first tensor appears (a merged split's shard order).
fn shards_like_input(tensors: &[Tensor]) -> Vec<Vec<usize>> {
    let mut files: Vec<Option<Key>> = Vec::new();
    let mut shards: Vec<Vec<usize>> = Vec::new();
    let mut current = 0;
    for (i, tensor) in tensors.iter().enumerate() {
        // A tensor whose origin is not a file (a kept blob) stays with its
        // neighbour.
        if let Some(file) = source_file(tensor) {
            current = match files.iter().position(|f| *f == Some(file)) {
                Some(shard) => shard,
                None => {
                    files.push(Some(file));
                    shards.push(Vec::new());
                    files.len() - 1
                }
            };
        }
        if shards.is_empty() {
            files.push(None);
            shards.push(Vec::new());
        }
        shards[current].push(i);
    }
    if shards.is_empty() {
        shards.push(Vec::new());
    }
    shards
}

fn source_file(tensor: &Tensor) -> Option<Key> {
    match &tensor.data {
        TensorData::Input { file, .. } | TensorData::Checkpoint { file, .. } => Some(*file),
        TensorData::Mxfp4 { blocks, .. } => Some(blocks.file),
        TensorData::Convert { from, .. } | TensorData::Slice { from, .. } => source_file(from),
        TensorData::Merged { base, .. } => source_file(base),
        TensorData::Stacked { parts } => parts.first().and_then(source_file),
        TensorData::Blob { .. } => None,
    }
}
