//! `quantforge assemble` and `unbundle`: a language model bundled with its
//! mmproj files, and one part written back out as it went in.

use std::path::PathBuf;

use anyhow::Context;

use super::{CacheArgs, wrote};
use crate::exec::oneshot;
use crate::formats::OpenOptions;
use crate::ops::Op;

#[derive(Debug, clap::Args)]
pub(super) struct AssembleArgs {
    /// The language model and its mmproj files, in any order.
    #[arg(required = true, num_args = 2..)]
    parts: Vec<PathBuf>,
    /// The bundle to write.
    #[arg(long, short = 'o')]
    output: PathBuf,
    #[command(flatten)]
    cache: CacheArgs,
}

pub(super) fn run_assemble(args: AssembleArgs, json: bool) -> anyhow::Result<()> {
    let AssembleArgs { parts, output, cache } = args;
    let parts: Vec<&std::path::Path> = parts.iter().map(PathBuf::as_path).collect();
    let report = oneshot::assemble_files(&parts, &output, &cache.settings(Some(1), OpenOptions::default())?)
        .with_context(|| {
            let names: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
            format!("cannot assemble {} (parts 1 to {}, in that order)", names.join(", "), names.len())
        })?;
    wrote("assemble", &report, json)
}

#[derive(Debug, clap::Args)]
pub(super) struct UnbundleArgs {
    /// The bundle (`quantforge assemble`'s output).
    bundle: PathBuf,
    /// language, vision, audio or vision-audio.
    #[arg(value_parser = parse_part)]
    part: crate::arch::clip::PartRole,
    /// Where the part is written.
    output: PathBuf,
    #[command(flatten)]
    cache: CacheArgs,
}

pub(super) fn run_unbundle(args: UnbundleArgs, json: bool) -> anyhow::Result<()> {
    let UnbundleArgs { bundle, part, output, cache } = args;
    let ops = vec![(Op::Unbundle(crate::ops::assemble::UnbundleOptions { part }), Vec::new())];
    let report = oneshot::run(
        oneshot::job("unbundle", &bundle, ops, &output),
        &cache.settings(Some(1), OpenOptions::default())?,
    )
    .with_context(|| format!("cannot unbundle {}", bundle.display()))?;
    wrote("unbundle", &report, json)
}

fn parse_part(text: &str) -> Result<crate::arch::clip::PartRole, String> {
    use crate::arch::clip::PartRole;
    PartRole::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = PartRole::ALL.iter().map(|r| r.name()).collect();
        format!("unknown part `{text}` (one of {})", names.join(", "))
    })
}
