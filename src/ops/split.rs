//! `split` and `merge`: a GGUF model cut into shards and put back together,
//! byte-identical to llama.cpp's `llama-gguf-split`.
//!
//! This module owns the shard file names (`PREFIX-00001-of-0000N.gguf`), the
//! `split.*` keys, the assignment of tensors to shards and the checks that a
//! set of shards belongs together. Tensor bytes are copied, never decoded.
//!
//! The layout follows llama-gguf-split: the first shard carries all of the
//! model's metadata followed by `split.no`, `split.tensors.count` and
//! `split.count`; later shards carry only those three keys. A tensor is
//! never cut across shards. `convert_hf_to_gguf.py`'s `--split-max-*` cut
//! as gguf-py's writer does ([`plan_writer_split`]): the same layout, its
//! own criterion and key order.

use std::io;
use std::path::{Path, PathBuf};

use crate::formats::{FormatError, ModelFile, gguf};
use crate::model::{KeyError, Metadata, TensorInfo, Value};
use crate::text::Name;

/// `split.no`: the shard's 0-based index (u16).
pub const SPLIT_NO: &str = "split.no";
/// `split.count`: how many shards (u16); 0 in a merged file.
pub const SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: tensors in the whole model (i32).
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// llama-gguf-split measures a tensor for `--split-max-size` padded to the
/// default alignment, whatever the file's own alignment.
const SIZE_ALIGNMENT: u64 = gguf::DEFAULT_ALIGNMENT;

/// When to start a new shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitLimit {
    /// At most this many tensors per shard.
    MaxTensors(usize),
    /// At most this many bytes of (padded) tensor data per shard; metadata is
    /// not counted, as in llama-gguf-split.
    MaxSize(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitOptions {
    pub limit: SplitLimit,
    /// The first shard holds the metadata and no tensors.
    pub no_tensor_first_split: bool,
}

/// Shards as gguf-py's `GGUFWriter` cuts them (`convert_hf_to_gguf.py`'s
/// `--split-max-tensors`, `--split-max-size`, `--no-tensor-first-split`):
/// either limit, both, or neither (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterSplit {
    /// At most this many tensors a shard; 0: no limit.
    pub max_tensors: usize,
    /// At most this many bytes of tensor data a shard, counted unpadded;
    /// 0: no limit.
    pub max_size: u64,
    /// The first shard holds the metadata and no tensors.
    pub no_tensor_first_split: bool,
}

/// One output shard: its metadata and the indices of its tensors in the input.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlan {
    pub metadata: Metadata,
    pub tensors: Vec<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A per-device export's plan.
    #[error("the devices' split: {0}")]
    Devices(#[from] crate::arch::split::SplitError),
    #[error("invalid split limit: {0}")]
    BadLimit(String),
    #[error(
        "`{}` takes {bytes} bytes (padded), more than the {max} a shard may hold, so shard {shard} would \
         hold no tensors; the smallest size that works is {bytes} ({})",
        crate::text::name(.tensor),
        crate::formats::human_bytes(*.bytes as f64)
    )]
    TensorTooLarge { tensor: String, bytes: u64, max: u64, shard: usize },
    #[error("{count} shards is more than the {max} that split.count (u16) can hold", max = u16::MAX)]
    TooManyShards { count: usize },
    #[error("{count} tensors is more than split.tensors.count (i32) can hold")]
    TooManyTensors { count: usize },
    #[error("refusing to overwrite the input: {} is {}", output.display(), input.display())]
    OutputIsInput { input: PathBuf, output: PathBuf },
    #[error("writing {}: {}", path.display(), crate::files::IoText(source))]
    Write { path: PathBuf, source: io::Error },
    #[error("{}: shard {shard} of {count} is missing", path.display())]
    MissingShard { path: PathBuf, shard: usize, count: usize },
    #[error("{}: not a shard: metadata key `{}` is missing", path.display(), Name(key))]
    MissingKey { path: PathBuf, key: &'static str },
    #[error("{}: `{}` should be {expected}, found {found}", path.display(), Name(key))]
    BadKey { path: PathBuf, key: &'static str, expected: String, found: String },
    #[error("{}: {source}", path.display())]
    Key { path: PathBuf, source: KeyError },
    #[error("{}: tensor `{name}` is also in {}: a duplicated or foreign shard", path.display(), first.display())]
    DuplicateTensor { path: PathBuf, name: String, first: PathBuf },
    #[error("{}: byte order differs from the first shard's: a foreign shard", path.display())]
    EndianMismatch { path: PathBuf },
    #[error("the shards of {} hold {found} tensors, but split.tensors.count is {expected}", first.display())]
    TensorTotal { first: PathBuf, expected: u64, found: u64 },
}

/// Assigns tensors to shards and builds each shard's metadata, exactly as
/// llama-gguf-split does. Pure: no I/O.
pub fn plan_split(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    options: SplitOptions,
) -> Result<Vec<ShardPlan>, SplitError> {
    if options.limit == SplitLimit::MaxTensors(0) {
        return Err(SplitError::BadLimit("--max-tensors must be at least 1".into()));
    }
    if options.limit == SplitLimit::MaxSize(0) {
        return Err(SplitError::BadLimit("--max-size must be positive".into()));
    }
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    if options.no_tensor_first_split {
        shards.push(Vec::new());
    }
    // Only padded tensor bytes count toward the size limit, not metadata.
    let mut current_size = 0u64;
    for (i, tensor) in tensors.iter().enumerate() {
        let padded = gguf::align_up(tensor.n_bytes(), SIZE_ALIGNMENT);
        let next_size = current_size.saturating_add(padded);
        let new_shard = match options.limit {
            SplitLimit::MaxSize(max) => next_size > max,
            SplitLimit::MaxTensors(max) => i > 0 && i % max == 0,
        };
        if new_shard {
            // Only a size limit cuts before a tensor while the shard is still empty.
            if let (SplitLimit::MaxSize(max), Some([])) = (options.limit, shards.last().map(Vec::as_slice)) {
                let (tensor, shard) = (tensor.name.clone(), shards.len());
                return Err(SplitError::TensorTooLarge { tensor, bytes: padded, max, shard });
            }
            shards.push(Vec::new());
            current_size = padded;
        } else {
            current_size = next_size;
        }
        if let Some(last) = shards.last_mut() {
            last.push(i);
        }
    }
    shard_plans(metadata, shards, tensors.len(), SplitKeyOrder::GgufSplit)
}

/// Assigns tensors to shards as gguf-py's writer does as tensors are added:
/// a tensor starts a new shard when the current one holds at least one
/// tensor and either `max_tensors` of them or so many bytes that this one
/// would pass `max_size` (unpadded, unlike llama-gguf-split, which also
/// starts a shard before the first tensor). A model that ends in one shard
/// is the plain file, without `split.*` keys. Pure: no I/O.
pub fn plan_writer_split(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    options: WriterSplit,
) -> Result<Vec<ShardPlan>, SplitError> {
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    if options.no_tensor_first_split {
        shards.push(Vec::new());
    }
    let mut current_size = 0u64;
    for (i, tensor) in tensors.iter().enumerate() {
        let bytes = tensor.n_bytes();
        let current = shards.last().map_or(0, Vec::len);
        let full = current > 0
            && ((options.max_tensors != 0 && current >= options.max_tensors)
                || (options.max_size != 0 && current_size.saturating_add(bytes) > options.max_size));
        if full {
            shards.push(Vec::new());
            current_size = 0;
        }
        current_size = current_size.saturating_add(bytes);
        if let Some(last) = shards.last_mut() {
            last.push(i);
        }
    }
    if shards.len() == 1 {
        return Ok(vec![ShardPlan { metadata: metadata.clone(), tensors: shards.concat() }]);
    }
    shard_plans(metadata, shards, tensors.len(), SplitKeyOrder::Quantize)
}

/// The order the `split.*` keys end a shard's metadata in: gguf's
/// set-value appends a key, and the two tools set them in different orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitKeyOrder {
    /// llama-gguf-split sets `split.count` last, once the count is known.
    GgufSplit,
    /// llama-quantize `--keep-split` (and gguf-py's writer) sets no,
    /// count, tensors.count.
    Quantize,
}

/// The shards' metadata for a given assignment of tensors (indices) to
/// shards. Only the first shard carries the model's metadata; every shard
/// ends with the `split.*` keys.
pub fn shard_plans(
    metadata: &Metadata,
    shards: Vec<Vec<usize>>,
    n_tensors: usize,
    order: SplitKeyOrder,
) -> Result<Vec<ShardPlan>, SplitError> {
    let n_tensors = i32::try_from(n_tensors).map_err(|_| SplitError::TooManyTensors { count: n_tensors })?;
    let count = u16::try_from(shards.len()).map_err(|_| SplitError::TooManyShards { count: shards.len() })?;
    Ok(shards
        .into_iter()
        .enumerate()
        .map(|(no, tensors)| {
            let mut shard_metadata = if no == 0 { metadata.clone() } else { Metadata::new() };
            shard_metadata.set_last(SPLIT_NO, Value::U16(no as u16));
            match order {
                SplitKeyOrder::GgufSplit => {
                    shard_metadata.set_last(SPLIT_TENSORS_COUNT, Value::I32(n_tensors));
                    shard_metadata.set_last(SPLIT_COUNT, Value::U16(count));
                }
                SplitKeyOrder::Quantize => {
                    shard_metadata.set_last(SPLIT_COUNT, Value::U16(count));
                    shard_metadata.set_last(SPLIT_TENSORS_COUNT, Value::I32(n_tensors));
                }
            }
            ShardPlan { metadata: shard_metadata, tensors }
        })
        .collect())
}

/// Checks the `split.*` keys, byte order and tensors of a split's shards,
/// given in order: every shard present once, numbered in order, from the
/// same split, with no tensor twice and the promised number of tensors.
pub fn check_shards(shards: &[&ModelFile]) -> Result<(), SplitError> {
    let count = shards.len();
    let mut seen: std::collections::HashMap<&str, &Path> = std::collections::HashMap::new();
    let mut expected_total = None;
    let mut found_total = 0u64;
    for (no, shard) in shards.iter().enumerate() {
        let path = shard.path();
        expect_key(path, SPLIT_NO, no as u64, key_u64(shard, SPLIT_NO)?)?;
        expect_key(path, SPLIT_COUNT, count as u64, key_u64(shard, SPLIT_COUNT)?)?;
        let total = key_u64(shard, SPLIT_TENSORS_COUNT)?;
        match expected_total {
            None => expected_total = Some(total),
            Some(expected) => expect_key(path, SPLIT_TENSORS_COUNT, expected, total)?,
        }
        if shards[0].endian != shard.endian {
            return Err(SplitError::EndianMismatch { path: path.to_owned() });
        }
        for tensor in &shard.tensors {
            if let Some(first) = seen.insert(&tensor.name, path) {
                return Err(SplitError::DuplicateTensor {
                    path: path.to_owned(),
                    name: tensor.name.clone(),
                    first: first.to_owned(),
                });
            }
        }
        found_total += shard.tensors.len() as u64;
    }
    let expected = expected_total.unwrap_or(0);
    if found_total != expected {
        let first = shards.first().map_or_else(PathBuf::new, |s| s.path().to_owned());
        return Err(SplitError::TensorTotal { first, expected, found: found_total });
    }
    Ok(())
}

/// The metadata of a merged split: the first shard's, without the `split.*`
/// keys (the unsplit original's), or with them and `split.count = 0`
/// (llama-gguf-split `--merge`'s output).
pub fn merged_metadata(first: &Metadata, keep_split_keys: bool) -> Metadata {
    let mut metadata = first.clone();
    if keep_split_keys {
        // Marks the output as not a split, so it is not merged again.
        metadata.set_last(SPLIT_COUNT, Value::U16(0));
    } else {
        for key in [SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT] {
            metadata.remove(key);
        }
    }
    metadata
}

/// A `split.*` key's value; any integer type is read, as llama.cpp's loader
/// reads these keys by value rather than by exact type.
fn key_u64(shard: &ModelFile, key: &'static str) -> Result<u64, SplitError> {
    let path = || shard.path().to_owned();
    let value = shard.metadata.count(key).map_err(|source| SplitError::Key { path: path(), source })?;
    value.ok_or_else(|| SplitError::MissingKey { path: path(), key })
}

fn expect_key(path: &Path, key: &'static str, expected: u64, found: u64) -> Result<(), SplitError> {
    if expected == found {
        return Ok(());
    }
    Err(SplitError::BadKey { path: path.to_owned(), key, expected: expected.to_string(), found: found.to_string() })
}
