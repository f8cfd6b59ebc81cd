//! Writes synthetic llama-shaped models:
//! `cargo run --example make-tiny-model -- [PATH] [--wide] [--layers N]`.
//! Without `--wide` it writes the tiny model shipped in the repo (the test
//! `tiny_model_is_reproducible` checks the committed file equals it); with
//! `--wide`, the 4096-wide benchmark model of docs/PERFORMANCE.md, and with
//! `--layers N` as many layers of it (26 make a 10.8 GB model:
//! scripts/gpu-check.sh).

use std::path::PathBuf;

use clap::Parser;
use quantforge::files::{Replaces, WriteGuard};
use quantforge::formats::{AtomicOutput, gguf};
use quantforge::model::Endian;
use quantforge::synth::{self, LlamaConfig};

/// Writes a synthetic llama-shaped GGUF model.
#[derive(Parser)]
#[command(name = "make-tiny-model")]
struct Args {
    /// Where to write it.
    #[arg(default_value = "tests/data/tiny-llama.gguf")]
    path: PathBuf,
    /// The 4096-wide benchmark model of docs/PERFORMANCE.md instead of the tiny one.
    #[arg(long)]
    wide: bool,
    /// This many layers instead of the model's own.
    #[arg(long, value_name = "N")]
    layers: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let Args { path, wide, layers } = Args::parse();
    let mut config = if wide { LlamaConfig::wide() } else { LlamaConfig::tiny() };
    if let Some(layers) = layers {
        config.n_layer = layers;
    }
    let mut model = synth::llama(&config);
    let (metadata, tensors) = (model.metadata.clone(), model.tensors.clone());
    let mut out = AtomicOutput::create(&WriteGuard::default().check(&path, Replaces::AnyFile)?)?;
    let layout = gguf::write_gguf(out.writer(), Endian::Little, &metadata, &tensors, &mut model)?;
    out.commit()?;
    eprintln!("wrote {} ({} bytes)", path.display(), layout.file_len);
    Ok(())
}
