//! `export`: the one op with an effect: a tensor set written as a file, or
//! as the shards of a split.
//!
//! The path is a template (`out/model-{preset}.gguf`) filled from the fan-out
//! values of the nodes upstream, relative to the recipe's directory and never
//! outside it. A split export writes `out/model-{preset}-00001-of-0000N.gguf`,
//! … with llama-gguf-split's keys and layout. The path is not part of the
//! cache key: the same bytes exported to another place are the same result.

use std::path::PathBuf;

use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::formats::parse_size;
use crate::ops::split::{self, ShardPlan, SplitError, SplitKeyOrder, SplitLimit, SplitOptions};
use crate::recipe::{Diagnostic, OpSpec, ParamKind, ParamSpec, ParamValue, Params};
use crate::store::Key;

pub const SPEC: OpSpec = OpSpec {
    name: "export",
    version: 1,
    params: &[
        ParamSpec::required("path", ParamKind::Str),
        ParamSpec::optional("format", ParamKind::Str),
        ParamSpec::optional("split", ParamKind::Table),
    ],
    from_input_only: false,
    is_sink: true,
};

pub const FORMATS: [&str; 1] = ["gguf"];

const SPLIT_FIELDS: [&str; 3] = ["max_size", "max_tensors", "no_tensor_first_split"];

/// How an export is cut into files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMode {
    /// One file.
    Whole,
    /// Shards as `llama-gguf-split --split` cuts them.
    Limit(SplitOptions),
    /// Each tensor in the shard its source tensor came from, as
    /// `llama-quantize --keep-split` writes.
    LikeInput,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Where the file goes, already resolved.
    pub path: PathBuf,
    pub split: SplitMode,
}

impl ExportOptions {
    /// Reads everything but the path, which the recipe resolves (it knows
    /// the fan-out values and the output directory).
    pub fn split_from_params(p: &Params) -> Result<SplitMode, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        if let Some((format, _)) = p.str("format")
            && !FORMATS.contains(&format)
        {
            problems.push(p.error("format", format!("cannot export as `{format}`")).suggest(format, FORMATS));
        }
        let mut limit = None;
        let mut no_tensor_first_split = false;
        for (field, value) in p.table("split") {
            match (field, &value.value) {
                ("max_size", ParamValue::Str(text)) => {
                    match split::parse_max_size(text).or_else(|_| parse_size(text)) {
                        Ok(bytes) if bytes > 0 => limit = Some(SplitLimit::MaxSize(bytes)),
                        _ => problems.push(
                            Diagnostic::new(format!("`{text}` is not a size"), value.span.clone())
                                .with_hint(r#"max_size = "2G" (llama-gguf-split's units) or "1.5GB", "2GiB""#),
                        ),
                    }
                }
                ("max_size", ParamValue::Int(n)) if *n > 0 => limit = Some(SplitLimit::MaxSize(*n as u64)),
                ("max_tensors", ParamValue::Int(n)) if *n > 0 => {
                    limit = Some(SplitLimit::MaxTensors(usize::try_from(*n).unwrap_or(usize::MAX)))
                }
                ("no_tensor_first_split", ParamValue::Bool(b)) => no_tensor_first_split = *b,
                ("max_size" | "max_tensors" | "no_tensor_first_split", _) => problems.push(Diagnostic::new(
                    format!(
                        "`split.{field}` must be {}",
                        match field {
                            "no_tensor_first_split" => "true or false",
                            "max_tensors" => "a positive integer",
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
        let mode = match (p.get("split"), limit) {
            (None, _) => SplitMode::Whole,
            (Some(_), Some(limit)) => SplitMode::Limit(SplitOptions { limit, no_tensor_first_split }),
            (Some(_), None) => {
                if problems.is_empty() {
                    problems.push(
                        p.error("split", "`split` needs `max_size` or `max_tensors`")
                            .with_hint(r#"split = { max_size = "2G" }"#),
                    );
                }
                SplitMode::Whole
            }
        };
        if problems.is_empty() { Ok(mode) } else { Err(problems) }
    }

    pub fn key_params(&self) -> serde_json::Value {
        let split = match self.split {
            SplitMode::Whole => serde_json::Value::Null,
            SplitMode::LikeInput => serde_json::json!("like-input"),
            SplitMode::Limit(o) => serde_json::json!({
                "max_size": match o.limit { SplitLimit::MaxSize(n) => Some(n), SplitLimit::MaxTensors(_) => None },
                "max_tensors": match o.limit { SplitLimit::MaxTensors(n) => Some(n), SplitLimit::MaxSize(_) => None },
                "no_tensor_first_split": o.no_tensor_first_split,
            }),
        };
        serde_json::json!({ "format": "gguf", "split": split })
    }
}

/// One file an export writes: its path, metadata and tensors (indices into
/// the set).
#[derive(Debug, Clone)]
pub struct OutputFile {
    pub path: PathBuf,
    pub plan: ShardPlan,
}

/// The files an export of `set` writes.
pub fn output_files(set: &TensorSet, options: &ExportOptions) -> Result<Vec<OutputFile>, SplitError> {
    let plans = match options.split {
        SplitMode::Whole => {
            vec![ShardPlan { metadata: set.metadata.clone(), tensors: (0..set.tensors.len()).collect() }]
        }
        SplitMode::Limit(o) => split::plan_split(&set.metadata, &set.infos(), o)?,
        SplitMode::LikeInput => match shards_like_input(&set.tensors) {
            // llama-quantize names even a one-shard output as a shard, but
            // writes no split keys in it.
            shards if shards.len() == 1 => {
                vec![ShardPlan { metadata: set.metadata.clone(), tensors: shards.concat() }]
            }
            shards => split::shard_plans(&set.metadata, shards, set.tensors.len(), SplitKeyOrder::Quantize)?,
        },
    };
    let count = plans.len();
    Ok(plans
        .into_iter()
        .enumerate()
        .map(|(no, plan)| OutputFile { path: output_path(options, no, count), plan })
        .collect())
}

/// The path of file `no` of the `count` an export writes: its path, or for a
/// split `PREFIX-0000i-of-0000N.gguf` with the path's `.gguf` taken off.
pub fn output_path(options: &ExportOptions, no: usize, count: usize) -> PathBuf {
    if options.split == SplitMode::Whole {
        return options.path.clone();
    }
    let text = options.path.as_os_str().to_string_lossy();
    let prefix = PathBuf::from(text.strip_suffix(".gguf").unwrap_or(&text));
    split::shard_path(&prefix, no, count)
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
        TensorData::Input { file, .. } => Some(*file),
        TensorData::Convert { from, .. } => source_file(from),
        TensorData::Blob { .. } => None,
    }
}
