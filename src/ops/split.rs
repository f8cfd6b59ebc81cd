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
//! never cut across shards.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::formats::gguf::GgufLayout;
use crate::formats::{AtomicOutput, FormatError, ModelFile, OpenOptions, gguf, same_file};
use crate::model::{Endian, Metadata, TensorInfo, Value};

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
    #[error("invalid split limit: {0}")]
    BadLimit(String),
    #[error("shard {shard} would hold no tensors: the size or tensor limit is too small")]
    EmptyShard { shard: usize },
    #[error("{count} shards is more than the {max} that split.count (u16) can hold", max = u16::MAX)]
    TooManyShards { count: usize },
    #[error("{count} tensors is more than split.tensors.count (i32) can hold")]
    TooManyTensors { count: usize },
    #[error("refusing to overwrite the input: {} is {}", output.display(), input.display())]
    OutputIsInput { input: PathBuf, output: PathBuf },
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{}: not a shard name (expected PREFIX-NNNNN-of-NNNNN.gguf)", path.display())]
    NotAShardName { path: PathBuf },
    #[error("{}: shard {shard} of {count} is missing", path.display())]
    MissingShard { path: PathBuf, shard: usize, count: usize },
    #[error("{}: not a shard: metadata key `{key}` is missing", path.display())]
    MissingKey { path: PathBuf, key: &'static str },
    #[error("{}: `{key}` should be {expected}, found {found}", path.display())]
    BadKey { path: PathBuf, key: &'static str, expected: String, found: String },
    #[error("{}: tensor `{name}` is also in {}: a duplicated or foreign shard", path.display(), first.display())]
    DuplicateTensor { path: PathBuf, name: String, first: PathBuf },
    #[error("{}: byte order differs from the first shard's: a foreign shard", path.display())]
    EndianMismatch { path: PathBuf },
    #[error("the shards of {} hold {found} tensors, but split.tensors.count is {expected}", first.display())]
    TensorTotal { first: PathBuf, expected: u64, found: u64 },
}

/// Parses a llama-gguf-split size: a positive integer followed by `M`
/// (10^6 bytes) or `G` (10^9 bytes).
pub fn parse_max_size(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.as_bytes().last() {
        Some(b'M') => (&text[..text.len() - 1], 1_000_000u64),
        Some(b'G') => (&text[..text.len() - 1], 1_000_000_000u64),
        _ => return Err(format!("`{text}`: supported units are M (megabytes) or G (gigabytes)")),
    };
    let n: u64 = number.parse().map_err(|_| format!("`{text}` is not a number followed by M or G"))?;
    if n == 0 {
        return Err(format!("`{text}`: size must be a positive value"));
    }
    n.checked_mul(unit).ok_or_else(|| format!("`{text}` is too large"))
}

/// `PREFIX-0000i-of-0000N.gguf` for the 0-based shard `shard` of `count`.
pub fn shard_path(prefix: &Path, shard: usize, count: usize) -> PathBuf {
    let mut name = OsString::from(prefix.as_os_str());
    name.push(format!("-{:05}-of-{:05}.gguf", shard + 1, count));
    PathBuf::from(name)
}

/// Splits a shard path into its prefix, 0-based shard index and count.
pub fn parse_shard_path(path: &Path) -> Option<(PathBuf, usize, usize)> {
    let text = path.to_str()?;
    let stem = text.strip_suffix(".gguf")?;
    // "-NNNNN-of-NNNNN": split.count is a u16, so both numbers are 5 digits.
    let split_at = stem.len().checked_sub(15)?;
    let (prefix, tail) = (stem.get(..split_at)?, stem.get(split_at..)?);
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    let (no, count) = tail.strip_prefix('-')?.split_once("-of-")?;
    if prefix.is_empty() || !digits(no) || !digits(count) {
        return None;
    }
    let (no, count): (usize, usize) = (no.parse().ok()?, count.parse().ok()?);
    (no >= 1 && no <= count).then(|| (PathBuf::from(prefix), no - 1, count))
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
    let n_tensors = i32::try_from(tensors.len()).map_err(|_| SplitError::TooManyTensors { count: tensors.len() })?;

    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let start_shard = |shards: &mut Vec<Vec<usize>>, allow_empty: bool| {
        if !allow_empty && shards.last().is_some_and(Vec::is_empty) {
            return Err(SplitError::EmptyShard { shard: shards.len() });
        }
        shards.push(Vec::new());
        Ok(())
    };
    if options.no_tensor_first_split {
        start_shard(&mut shards, true)?;
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
            start_shard(&mut shards, false)?;
            current_size = padded;
        } else {
            current_size = next_size;
        }
        if let Some(last) = shards.last_mut() {
            last.push(i);
        }
    }
    let count = u16::try_from(shards.len()).map_err(|_| SplitError::TooManyShards { count: shards.len() })?;

    Ok(shards
        .into_iter()
        .enumerate()
        .map(|(no, tensors)| {
            // Only the first shard carries the model's metadata. gguf's
            // set-value appends (or moves) a key to the end, and
            // llama-gguf-split sets split.count last, once the count is
            // known: the keys end split.no, split.tensors.count, split.count.
            let mut shard_metadata = if no == 0 { metadata.clone() } else { Metadata::new() };
            shard_metadata.set_last(SPLIT_NO, Value::U16(no as u16));
            shard_metadata.set_last(SPLIT_TENSORS_COUNT, Value::I32(n_tensors));
            shard_metadata.set_last(SPLIT_COUNT, Value::U16(count));
            ShardPlan { metadata: shard_metadata, tensors }
        })
        .collect())
}

/// One shard written (or planned, on a dry run).
#[derive(Debug, Clone)]
pub struct ShardSummary {
    pub path: PathBuf,
    pub n_tensors: usize,
    pub bytes: u64,
}

/// Splits `input` into `OUT_PREFIX-0000i-of-0000N.gguf`. On a dry run nothing
/// is written. Every shard appears only once all of them are complete.
pub fn split_file(
    input: &Path,
    out_prefix: &Path,
    options: SplitOptions,
    dry_run: bool,
) -> Result<Vec<ShardSummary>, SplitError> {
    let model = ModelFile::open(input, OpenOptions::default())?;
    let plans = plan_split(&model.metadata, &model.tensors, options)?;
    let count = plans.len();

    let mut summaries = Vec::with_capacity(count);
    let mut outputs = Vec::with_capacity(count);
    for (no, plan) in plans.iter().enumerate() {
        let path = shard_path(out_prefix, no, count);
        let tensors: Vec<TensorInfo> = plan.tensors.iter().map(|&i| model.tensors[i].clone()).collect();
        if dry_run {
            let bytes = gguf::file_len(&plan.metadata, &tensors)
                .map_err(|source| SplitError::Write { path: path.clone(), source })?;
            summaries.push(ShardSummary { path, n_tensors: tensors.len(), bytes });
            continue;
        }
        refuse_same_file(input, &path)?;
        let write_err = |source| SplitError::Write { path: path.clone(), source };
        let mut out = AtomicOutput::create(&path).map_err(write_err)?;
        let sources: Vec<(&ModelFile, &TensorInfo)> =
            plan.tensors.iter().map(|&i| (&model, &model.tensors[i])).collect();
        let layout = write_copied(&mut out, model.endian, &plan.metadata, &sources).map_err(write_err)?;
        summaries.push(ShardSummary { path: path.clone(), n_tensors: tensors.len(), bytes: layout.file_len });
        outputs.push((path, out));
    }
    // Commit only when every shard is written, so a failure leaves no set of
    // shards that looks complete but is not.
    for (path, out) in outputs {
        out.commit().map_err(|source| SplitError::Write { path, source })?;
    }
    Ok(summaries)
}

/// Writes a GGUF whose tensors are copied from their source files, file to
/// file in the kernel.
fn write_copied(
    out: &mut AtomicOutput,
    endian: Endian,
    metadata: &Metadata,
    tensors: &[(&ModelFile, &TensorInfo)],
) -> io::Result<GgufLayout> {
    let infos: Vec<TensorInfo> = tensors.iter().map(|(_, t)| (*t).clone()).collect();
    let layout = gguf::write_header(out.writer(), endian, metadata, &infos)?;
    let file = out.file()?;
    for (model, tensor) in tensors {
        model.copy_tensor_data_to_file(tensor, file)?;
        gguf::write_padding(file, tensor.n_bytes(), layout.alignment)?;
    }
    Ok(layout)
}

fn refuse_same_file(input: &Path, output: &Path) -> Result<(), SplitError> {
    if same_file(input, output) {
        return Err(SplitError::OutputIsInput { input: input.to_owned(), output: output.to_owned() });
    }
    Ok(())
}

/// What `merge` wrote.
#[derive(Debug, Clone)]
pub struct MergeSummary {
    pub n_shards: usize,
    pub n_tensors: usize,
    pub bytes_written: u64,
}

/// Finds the set of shards `any_shard` belongs to, checks that they belong
/// together, and writes them as one GGUF file.
///
/// By default the `split.*` keys are dropped, so merging a split of an
/// unsplit file gives that file back byte for byte. With `keep_split_keys`
/// the output is llama-gguf-split `--merge`'s: the first shard's metadata with
/// `split.count` set to 0 (and moved last, as gguf's set-value does).
pub fn merge_files(any_shard: &Path, output: &Path, keep_split_keys: bool) -> Result<MergeSummary, SplitError> {
    let (prefix, _, count) =
        parse_shard_path(any_shard).ok_or_else(|| SplitError::NotAShardName { path: any_shard.to_owned() })?;
    let shards = open_shards(&prefix, count)?;
    for shard in &shards {
        refuse_same_file(shard.path(), output)?;
    }

    let first = &shards[0];
    let mut metadata = first.metadata.clone();
    if keep_split_keys {
        // Marks the output as not a split, so it is not merged again.
        metadata.set_last(SPLIT_COUNT, Value::U16(0));
    } else {
        for key in [SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT] {
            metadata.remove(key);
        }
    }
    let sources: Vec<(&ModelFile, &TensorInfo)> =
        shards.iter().flat_map(|shard| shard.tensors.iter().map(move |t| (shard, t))).collect();

    let write_err = |source| SplitError::Write { path: output.to_owned(), source };
    let mut out = AtomicOutput::create(output).map_err(write_err)?;
    let layout = write_copied(&mut out, first.endian, &metadata, &sources).map_err(write_err)?;
    out.commit().map_err(write_err)?;
    Ok(MergeSummary { n_shards: shards.len(), n_tensors: sources.len(), bytes_written: layout.file_len })
}

/// Opens shards 1..=count of `prefix` and checks their `split.*` keys, byte
/// order and tensors: every shard present once, numbered as named, from the
/// same split, with no tensor twice and the promised number of tensors.
fn open_shards(prefix: &Path, count: usize) -> Result<Vec<ModelFile>, SplitError> {
    let mut shards: Vec<ModelFile> = Vec::with_capacity(count);
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut expected_total = None;
    let mut found_total = 0u64;
    for no in 0..count {
        let path = shard_path(prefix, no, count);
        if !path.exists() {
            return Err(SplitError::MissingShard { path, shard: no + 1, count });
        }
        let shard = ModelFile::open(&path, OpenOptions::default())?;
        let shard_no = key_u64(&shard, SPLIT_NO)?;
        expect_key(&path, SPLIT_NO, no as u64, shard_no)?;
        let shard_count = key_u64(&shard, SPLIT_COUNT)?;
        expect_key(&path, SPLIT_COUNT, count as u64, shard_count)?;
        let total = key_u64(&shard, SPLIT_TENSORS_COUNT)?;
        match expected_total {
            None => expected_total = Some(total),
            Some(expected) => expect_key(&path, SPLIT_TENSORS_COUNT, expected, total)?,
        }
        if let Some(first) = shards.first()
            && first.endian != shard.endian
        {
            return Err(SplitError::EndianMismatch { path });
        }
        for tensor in &shard.tensors {
            if let Some(&other) = seen.get(&tensor.name) {
                return Err(SplitError::DuplicateTensor {
                    path,
                    name: tensor.name.clone(),
                    first: shard_path(prefix, other, count),
                });
            }
            seen.insert(tensor.name.clone(), no);
        }
        found_total += shard.tensors.len() as u64;
        shards.push(shard);
    }
    let expected = expected_total.unwrap_or(0);
    if found_total != expected {
        return Err(SplitError::TensorTotal { first: shard_path(prefix, 0, count), expected, found: found_total });
    }
    Ok(shards)
}

/// A `split.*` key's value; any integer type is read, as llama.cpp's loader
/// reads these keys by value rather than by exact type.
fn key_u64(shard: &ModelFile, key: &'static str) -> Result<u64, SplitError> {
    let value = shard.metadata.get(key).ok_or_else(|| SplitError::MissingKey { path: shard.path().to_owned(), key })?;
    value.as_u64().ok_or_else(|| SplitError::BadKey {
        path: shard.path().to_owned(),
        key,
        expected: "a non-negative integer".into(),
        found: format!("{value:?}"),
    })
}

fn expect_key(path: &Path, key: &'static str, expected: u64, found: u64) -> Result<(), SplitError> {
    if expected == found {
        return Ok(());
    }
    Err(SplitError::BadKey { path: path.to_owned(), key, expected: expected.to_string(), found: found.to_string() })
}
