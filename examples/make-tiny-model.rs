//! Writes synthetic llama-shaped models:
//! `cargo run --example make-tiny-model -- [PATH] [--wide] [--layers N]`.
//! Without `--wide` it writes the tiny model shipped in the repo (the test
//! `tiny_model_is_reproducible` checks the committed file equals it); with
//! `--wide`, the 4096-wide benchmark model of docs/PERFORMANCE.md, and with
//! `--layers N` as many layers of it (26 make a 10.8 GB model:
//! scripts/gpu-check.sh).

use std::path::PathBuf;

use quantforge::files::{Replaces, WriteGuard};
use quantforge::formats::{AtomicOutput, gguf};
use quantforge::model::Endian;
use quantforge::synth::{self, LlamaConfig};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wide = args.iter().any(|a| a == "--wide");
    let layers = match args.iter().position(|a| a == "--layers") {
        Some(at) => {
            Some(args.get(at + 1).and_then(|n| n.parse::<u64>().ok()).ok_or_else(|| anyhow::anyhow!("--layers N"))?)
        }
        None => None,
    };
    let path: PathBuf = args
        .iter()
        .enumerate()
        .find(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--layers"))
        .map_or_else(|| "tests/data/tiny-llama.gguf".into(), |(_, a)| PathBuf::from(a));
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
