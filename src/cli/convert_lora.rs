//! `quantforge convert-lora ADAPTER-DIR OUT.gguf --base BASE-DIR [--outtype TYPE]`:
//! a PEFT LoRA adapter to a GGUF adapter, as `convert_lora_to_gguf.py`
//! writes it. A one-step recipe on the engine, like every one-shot command.

use std::path::PathBuf;

use anyhow::Context;

use super::{CacheArgs, workers};
use crate::convert::OutType;
use crate::exec::oneshot;
use crate::formats::OpenOptions;
use crate::ops::Op;
use crate::ops::convert::ConvertLoraOptions;
use crate::ops::export::SplitMode;
use crate::recipe::{ExtraInput, OneShot};

#[derive(Debug, clap::Args)]
pub struct ConvertLoraArgs {
    /// The PEFT adapter directory (adapter_config.json, adapter_model.safetensors or .bin), or a
    /// repo id ORG/NAME[@REVISION] from the local Hugging Face cache.
    input: PathBuf,
    /// The GGUF adapter to write.
    output: PathBuf,
    /// The base model's Hugging Face directory (its config.json gives the architecture and
    /// names; its weights are not read), or a repo id from the local Hugging Face cache.
    #[arg(long, value_name = "DIR")]
    base: PathBuf,
    /// f32 (the default, as convert_lora_to_gguf.py's), f16, bf16 or q8_0.
    #[arg(long, default_value = "f32")]
    outtype: String,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N", value_parser = super::parse_workers)]
    threads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

pub fn run(args: ConvertLoraArgs, json: bool) -> anyhow::Result<()> {
    let input = &crate::formats::model_path(&args.input).map_err(anyhow::Error::msg)?;
    let base = &crate::formats::model_path(&args.base).map_err(anyhow::Error::msg)?;
    let outtype = OutType::from_name(&args.outtype)
        .ok_or_else(|| anyhow::anyhow!("--outtype: `{}` is not f32, f16, bf16 or q8_0", args.outtype))?;
    let extra = [ExtraInput { name: "base", path: base, as_written: &args.base }];
    let job = OneShot {
        name: "convert-lora",
        input,
        extra_inputs: &extra,
        read: Op::ConvertLora(ConvertLoraOptions { outtype }),
        read_uses: vec![1],
        ops: Vec::new(),
        output: &args.output,
        split: SplitMode::Whole,
        format: crate::ops::export::ExportFormat::Gguf,
        byte_order: None,
    };
    let settings = args.cache.settings(Some(workers(args.threads)), OpenOptions::default())?;
    let report = oneshot::run(job, &settings).with_context(|| format!("cannot convert {}", input.display()))?;
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    super::wrote("convert-lora", &report, json)
}
