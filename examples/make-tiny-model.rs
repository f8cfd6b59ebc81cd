//! Writes the tiny model shipped in the repo:
//! `cargo run --example make-tiny-model -- tests/data/tiny-llama.gguf`.
//! The test `tiny_model_is_reproducible` checks the committed file equals
//! what this writes.

use std::path::PathBuf;

use quantforge::formats::{AtomicOutput, gguf};
use quantforge::model::Endian;
use quantforge::synth::{self, LlamaConfig};

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args_os().nth(1).map_or_else(|| "tests/data/tiny-llama.gguf".into(), PathBuf::from);
    let mut model = synth::llama(&LlamaConfig::tiny());
    let (metadata, tensors) = (model.metadata.clone(), model.tensors.clone());
    let mut out = AtomicOutput::create(&path)?;
    let layout = gguf::write_gguf(out.writer(), Endian::Little, &metadata, &tensors, &mut model)?;
    out.commit()?;
    eprintln!("wrote {} ({} bytes)", path.display(), layout.file_len);
    Ok(())
}
