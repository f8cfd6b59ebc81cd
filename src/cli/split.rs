//! `quantforge split` and `merge`: the shards a split writes (or would,
//! with `--dry-run`), and the one file a merge writes.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{CacheArgs, gguf_split, wrote};
use crate::exec::oneshot::{self, OneShotSettings};
use crate::exec::report::{FileReport, RunReport};
use crate::formats::{ModelFile, OpenOptions, gguf, human_bytes};
use crate::model::TensorInfo;
use crate::ops::Op;
use crate::ops::export::SplitMode;
use crate::ops::load::MergeOptions;
use crate::ops::split::{self, SplitLimit, SplitOptions};

/// Writes `input`'s shards, named after `out_prefix`.
pub(super) fn split(
    input: &Path,
    out_prefix: &Path,
    options: SplitOptions,
    settings: &OneShotSettings,
) -> anyhow::Result<RunReport> {
    // The export path's `.gguf` is what shard names replace.
    let mut output = out_prefix.as_os_str().to_owned();
    output.push(".gguf");
    let output = PathBuf::from(output);
    let mut job = oneshot::job("split", input, Vec::new(), &output);
    job.split = SplitMode::Limit(options);
    oneshot::run(job, settings).with_context(|| format!("cannot split {}", input.display()))
}

/// Writes the split `shard` belongs to as one file.
pub(super) fn merge(
    shard: &Path,
    output: &Path,
    keep_split_keys: bool,
    settings: &OneShotSettings,
) -> anyhow::Result<RunReport> {
    let mut job = oneshot::job("merge", shard, Vec::new(), output);
    job.read = Op::MergeShards(MergeOptions { keep_split_keys });
    oneshot::run(job, settings).with_context(|| format!("cannot merge the split of {}", shard.display()))
}

/// Prints the shards a split would write.
pub(super) fn print_plan(input: &Path, out_prefix: &Path, options: SplitOptions, json: bool) -> anyhow::Result<()> {
    let model = ModelFile::open(input, OpenOptions::default())?;
    let plans = split::plan_split(&model.metadata, &model.tensors, options)?;
    let mut files = Vec::with_capacity(plans.len());
    for (no, plan) in plans.iter().enumerate() {
        let tensors: Vec<TensorInfo> = plan.tensors.iter().map(|&i| model.tensors[i].clone()).collect();
        let bytes = gguf::file_len(&plan.metadata, &tensors)?;
        let path = crate::formats::shard_path(out_prefix, no, plans.len());
        files.push(FileReport::new(path, bytes, tensors.len()));
    }
    if json {
        return super::json::print(&super::json::SplitPlan { files });
    }
    let mut out = io::stdout().lock();
    for file in &files {
        writeln!(
            out,
            "would write {}: {}, {}",
            file.path.display(),
            crate::text::count(file.tensors as u64, "tensor"),
            human_bytes(file.bytes as f64)
        )?;
    }
    out.flush()?;
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(super) struct SplitArgs {
    /// The model to split (GGUF).
    input: PathBuf,
    /// Shards are named OUT_PREFIX-0000i-of-0000N.gguf.
    out_prefix: PathBuf,
    /// Most bytes of tensor data per shard: llama-gguf-split's 100M and 2G (10^6, 10^9), or
    /// 1.5GB, 2GiB, a number of bytes — the sizes recipes take. Also --split-max-size.
    #[arg(long, visible_alias = "split-max-size", value_name = "SIZE",
          value_parser = crate::formats::parse_size, conflicts_with = "max_tensors")]
    max_size: Option<u64>,
    /// Most tensors per shard (default, as llama-gguf-split's: 128). Also --split-max-tensors.
    #[arg(long, visible_alias = "split-max-tensors", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_tensors: Option<u64>,
    /// The first shard holds the metadata only, no tensors.
    #[arg(long)]
    no_tensor_first_split: bool,
    /// Print the shards that would be written; write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    cache: CacheArgs,
}

pub(super) fn run_split(args: SplitArgs, json: bool) -> anyhow::Result<()> {
    let SplitArgs { input, out_prefix, max_size, max_tensors, no_tensor_first_split, dry_run, cache } = args;
    let limit = match (max_size, max_tensors) {
        (Some(bytes), _) => SplitLimit::MaxSize(bytes),
        (None, n) => SplitLimit::MaxTensors(
            n.map_or(gguf_split::DEFAULT_MAX_TENSORS, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        ),
    };
    let options = SplitOptions { limit, no_tensor_first_split };
    if dry_run {
        return print_plan(&input, &out_prefix, options, json)
            .with_context(|| format!("cannot split {}", input.display()));
    }
    let report = split(&input, &out_prefix, options, &cache.settings(Some(1), OpenOptions::default())?)?;
    wrote("split", &report, json)
}

#[derive(Debug, clap::Args)]
pub(super) struct MergeArgs {
    /// Any shard of the split.
    shard: PathBuf,
    /// The merged model (GGUF).
    output: PathBuf,
    /// Keep the split.* keys (split.count = 0), as llama-gguf-split --merge does.
    #[arg(long)]
    keep_split_keys: bool,
    #[command(flatten)]
    cache: CacheArgs,
}

pub(super) fn run_merge(args: MergeArgs, json: bool) -> anyhow::Result<()> {
    let MergeArgs { shard, output, keep_split_keys, cache } = args;
    if is_device_shard(&shard) {
        crate::ops::device_shards::merge_shards(&shard, &output)
            .with_context(|| format!("cannot merge the device shards of {}", shard.display()))?;
        say!("wrote {}", output.display());
        return Ok(());
    }
    let settings = cache.settings(Some(1), OpenOptions::default())?;
    let report = merge(&shard, &output, keep_split_keys, &settings)?;
    wrote("merge", &report, json)
}

/// Whether `path` is one of `shard-devices`' shards (not a `split`'s).
fn is_device_shard(path: &std::path::Path) -> bool {
    ModelFile::open(path, OpenOptions::default())
        .is_ok_and(|shard| crate::ops::device_shards::is_device_shard(&shard.metadata))
}
