//! `quantforge split --dry-run`: the shards a split would write.

use std::io::{self, Write};
use std::path::Path;

use crate::exec::report::FileReport;
use crate::formats::{ModelFile, OpenOptions, gguf, human_bytes};
use crate::model::TensorInfo;
use crate::ops::split::{self, SplitOptions};

pub(super) fn print_plan(input: &Path, out_prefix: &Path, options: SplitOptions, json: bool) -> anyhow::Result<()> {
    let model = ModelFile::open(input, OpenOptions::default())?;
    let plans = split::plan_split(&model.metadata, &model.tensors, options)?;
    let mut files = Vec::with_capacity(plans.len());
    for (no, plan) in plans.iter().enumerate() {
        let tensors: Vec<TensorInfo> = plan.tensors.iter().map(|&i| model.tensors[i].clone()).collect();
        let bytes = gguf::file_len(&plan.metadata, &tensors)?;
        let path = crate::formats::shard_path(out_prefix, no, plans.len());
        files.push(FileReport { path, bytes, tensors: tensors.len() });
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
