//! `quantforge lora-merge BASE.gguf OUT.gguf --lora A.gguf [--lora-scaled B.gguf:0.5 …]`:
//! LoRA adapters merged into a base model as `llama-export-lora` merges
//! them, in the order the command line gives them. A one-shot recipe on the
//! engine: load each file (or convert a PEFT directory), merge, export.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{CacheArgs, workers};
use crate::convert::AdapterConfig;
use crate::exec::oneshot;
use crate::formats::{OpenOptions, model_path};
use crate::recipe::MergeAdapter;

#[derive(Debug, clap::Args)]
pub struct LoraMergeArgs {
    /// The base model (GGUF, any tensor types; not a split).
    base: PathBuf,
    /// The merged model to write: each targeted tensor F32 where the base's is F32, else F16,
    /// every other tensor as the base has it (llama-export-lora's output).
    output: PathBuf,
    /// LoRA adapters, scale 1, comma-separated or repeated, as llama-export-lora's --lora: GGUF
    /// adapters (`quantforge convert-lora`'s or convert_lora_to_gguf.py's), or PEFT adapter
    /// directories (or repo ids in the local Hugging Face cache), converted on the way as
    /// `convert-lora` converts them at f32. Merged in the order given, --lora-scaled ones among them.
    #[arg(long, value_name = "FILE", value_delimiter = ',')]
    lora: Vec<PathBuf>,
    /// Adapters with their user scales, FILE:SCALE, comma-separated or repeated (llama-export-lora's
    /// --lora-scaled).
    #[arg(long, value_name = "FILE:SCALE", value_delimiter = ',', value_parser = parse_scaled)]
    lora_scaled: Vec<(PathBuf, f32)>,
    /// The Hugging Face base model of the PEFT adapters (its config.json gives the architecture
    /// and tensor names), a directory or a repo id in the local Hugging Face cache. Default: each
    /// adapter's `base_model_name_or_path`.
    #[arg(long, value_name = "DIR")]
    lora_base: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long, short = 't', value_name = "N", value_parser = super::parse_workers)]
    threads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
    /// Every adapter with its scale, in command-line order (set by [`Self::order_from`]).
    #[arg(skip)]
    in_order: Vec<(PathBuf, f32)>,
}

impl LoraMergeArgs {
    /// Orders the adapters as the command line gives them, --lora and
    /// --lora-scaled interleaved, as llama-export-lora merges them: the
    /// order is in the bytes (each merge is added to the last one's sum).
    pub fn order_from(&mut self, matches: &clap::ArgMatches) {
        let positions = |id: &str| matches.indices_of(id).map(Iterator::collect::<Vec<usize>>).unwrap_or_default();
        let plain = positions("lora").into_iter().zip(self.lora.iter().map(|path| (path.clone(), 1.0)));
        let scaled = positions("lora_scaled").into_iter().zip(self.lora_scaled.iter().cloned());
        let mut all: Vec<(usize, (PathBuf, f32))> = plain.chain(scaled).collect();
        all.sort_by_key(|&(position, _)| position);
        self.in_order = all.into_iter().map(|(_, adapter)| adapter).collect();
    }
}

fn parse_scaled(text: &str) -> Result<(PathBuf, f32), String> {
    let (file, scale) = text.rsplit_once(':').ok_or("give FILE:SCALE (an adapter and its scale, as b.gguf:0.5)")?;
    let scale: f32 = scale.parse().map_err(|_| format!("`{scale}` is not a number"))?;
    if !scale.is_finite() {
        return Err(format!("`{scale}` is not a finite scale"));
    }
    Ok((PathBuf::from(file), scale))
}

/// An adapter as given, found: a file, or a PEFT directory with its base.
struct FoundAdapter {
    path: PathBuf,
    peft_base: Option<PathBuf>,
    scale: f32,
}

fn find(given: &Path, scale: f32, lora_base: Option<&Path>) -> anyhow::Result<FoundAdapter> {
    let path = model_path(given).map_err(anyhow::Error::msg)?;
    if !path.is_dir() {
        return Ok(FoundAdapter { path, peft_base: None, scale });
    }
    let base = match lora_base {
        Some(base) => base.to_owned(),
        None => {
            let config = AdapterConfig::read(&crate::convert::OnDisk, &path)?;
            let named = config.base_model.with_context(|| {
                format!("{}: the adapter names no base model; give --lora-base DIR", given.display())
            })?;
            PathBuf::from(named)
        }
    };
    let found = model_path(&base).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        found.is_dir(),
        "{}: its base model `{}` is neither a directory nor a repo in the local Hugging Face cache; give \
         --lora-base DIR",
        given.display(),
        base.display()
    );
    Ok(FoundAdapter { path, peft_base: Some(found), scale })
}

pub fn run(args: LoraMergeArgs, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(!args.in_order.is_empty(), "give at least one adapter (--lora FILE or --lora-scaled FILE:SCALE)");
    let found = args
        .in_order
        .iter()
        .map(|(path, scale)| find(path, *scale, args.lora_base.as_deref()))
        .collect::<anyhow::Result<Vec<FoundAdapter>>>()?;
    let adapters: Vec<MergeAdapter<'_>> = found
        .iter()
        .map(|a| MergeAdapter { path: &a.path, peft_base: a.peft_base.as_deref(), scale: a.scale })
        .collect();
    let settings = args.cache.settings(Some(workers(args.threads)), OpenOptions::default())?;
    let report = oneshot::merge_lora_files(&args.base, &adapters, &args.output, &settings)
        .with_context(|| format!("cannot merge into {}", args.base.display()))?;
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    super::wrote("lora-merge", &report, json)
}
