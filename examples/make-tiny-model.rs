//! Writes synthetic llama-shaped models:
//! `cargo run --example make-tiny-model -- [PATH] [--wide]`.
//! Without `--wide` it writes the tiny model shipped in the repo (the test
//! `tiny_model_is_reproducible` checks the committed file equals it); with
//! `--wide`, the 4096-wide benchmark model of docs/PERFORMANCE.md.

use std::path::PathBuf;

use quantforge::formats::{AtomicOutput, gguf};
use quantforge::model::Endian;
use quantforge::synth::{self, LlamaConfig};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wide = args.iter().any(|a| a == "--wide");
    let path: PathBuf =
        args.iter().find(|a| !a.starts_with("--")).map_or_else(|| "tests/data/tiny-llama.gguf".into(), PathBuf::from);
    let config = if wide { LlamaConfig::wide() } else { LlamaConfig::tiny() };
    let mut model = synth::llama(&config);
    let (metadata, tensors) = (model.metadata.clone(), model.tensors.clone());
    let mut out = AtomicOutput::create(&path)?;
    let layout = gguf::write_gguf(out.writer(), Endian::Little, &metadata, &tensors, &mut model)?;
    out.commit()?;
    eprintln!("wrote {} ({} bytes)", path.display(), layout.file_len);
    Ok(())
}
