//! `quantforge dequantize`: every tensor decoded to f32, f16 or bf16, as a
//! one-shot recipe.

use std::path::PathBuf;

use anyhow::Context;

use super::{CacheArgs, parse_workers, wrote};
use crate::exec::oneshot;
use crate::formats::OpenOptions;
use crate::ops::Op;
use crate::ops::dequantize::DequantizeOptions;

#[derive(Debug, clap::Args)]
pub(super) struct DequantizeArgs {
    /// The model to decode.
    input: PathBuf,
    /// The decoded model (GGUF).
    output: PathBuf,
    /// The type every tensor of two or more dimensions is written as: f32, f16 or bf16.
    #[arg(long = "type", default_value = "f16", value_parser = crate::ops::dequantize::FLOAT_TYPES)]
    ty: String,
    /// Worker threads (default: all cores).
    #[arg(long, value_parser = parse_workers)]
    threads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

pub(super) fn run(args: DequantizeArgs, json: bool) -> anyhow::Result<()> {
    let DequantizeArgs { input, output, ty, threads, cache } = args;
    // clap allows only the float type names.
    let options = DequantizeOptions::from_name(&ty).with_context(|| format!("unknown float type `{ty}`"))?;
    let ops = vec![(Op::Dequantize(options), Vec::new())];
    let settings = cache.settings(threads, OpenOptions::default())?;
    let report = oneshot::run(oneshot::job("dequantize", &input, ops, &output), &settings)
        .with_context(|| format!("cannot dequantize {}", input.display()))?;
    wrote("dequantize", &report, json)
}
