//! `quantforge lora-merge BASE.gguf OUT.gguf --lora A.gguf [--lora-scaled B.gguf:0.5 …]`:
//! GGUF LoRA adapters merged into a base model as `llama-export-lora`
//! merges them. A one-shot recipe on the engine: load each file, merge, export.

use std::path::PathBuf;

use anyhow::Context;

use super::{CacheArgs, workers};
use crate::exec::oneshot;
use crate::formats::OpenOptions;

#[derive(Debug, clap::Args)]
pub struct LoraMergeArgs {
    /// The base model (GGUF, any tensor types; not a split).
    base: PathBuf,
    /// The merged model to write: each targeted tensor F32 where the base's is F32, else F16,
    /// every other tensor as the base has it (llama-export-lora's output).
    output: PathBuf,
    /// GGUF LoRA adapters (`quantforge convert-lora`'s or convert_lora_to_gguf.py's), scale 1,
    /// comma-separated or repeated, as llama-export-lora's --lora; merged in the order given,
    /// --lora ones before --lora-scaled ones.
    #[arg(long, value_name = "FILE", value_delimiter = ',')]
    lora: Vec<PathBuf>,
    /// Adapters with their user scales, FILE:SCALE, comma-separated or repeated (llama-export-lora's
    /// --lora-scaled).
    #[arg(long, value_name = "FILE:SCALE", value_delimiter = ',', value_parser = parse_scaled)]
    lora_scaled: Vec<(PathBuf, f32)>,
    /// Worker threads (default: all cores).
    #[arg(long, short = 't', value_name = "N", value_parser = super::parse_workers)]
    threads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

fn parse_scaled(text: &str) -> Result<(PathBuf, f32), String> {
    let (file, scale) = text.rsplit_once(':').ok_or("give FILE:SCALE (an adapter and its scale, as b.gguf:0.5)")?;
    let scale: f32 = scale.parse().map_err(|_| format!("`{scale}` is not a number"))?;
    if !scale.is_finite() {
        return Err(format!("`{scale}` is not a finite scale"));
    }
    Ok((PathBuf::from(file), scale))
}

pub fn run(args: LoraMergeArgs, json: bool) -> anyhow::Result<()> {
    let mut adapters: Vec<(&std::path::Path, f32)> = args.lora.iter().map(|p| (p.as_path(), 1.0)).collect();
    adapters.extend(args.lora_scaled.iter().map(|(p, s)| (p.as_path(), *s)));
    anyhow::ensure!(!adapters.is_empty(), "give at least one adapter (--lora FILE or --lora-scaled FILE:SCALE)");
    let settings = args.cache.settings(Some(workers(args.threads)), OpenOptions::default())?;
    let report = oneshot::merge_lora_files(&args.base, &adapters, &args.output, &settings)
        .with_context(|| format!("cannot merge into {}", args.base.display()))?;
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    super::wrote("lora-merge", &report, json)
}
