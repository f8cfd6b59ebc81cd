//! `quantforge split` and `merge`: the shards a split writes (or would,
//! with `--dry-run`), and the one file a merge writes.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::exec::oneshot::{self, OneShotSettings};
use crate::exec::report::{FileReport, RunReport};
use crate::formats::{ModelFile, OpenOptions, gguf, human_bytes};
use crate::model::TensorInfo;
use crate::ops::Op;
use crate::ops::export::SplitMode;
use crate::ops::load::MergeOptions;
use crate::ops::split::{self, SplitOptions};

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
