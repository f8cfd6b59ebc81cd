//! `quantforge convert HF-DIR OUT.gguf [--outtype TYPE] [--pre NAME]`: a
//! Hugging Face checkpoint to GGUF as `convert_hf_to_gguf.py` writes it;
//! with a preset (Q4_K_M, …) the tensors are quantized straight from the
//! checkpoint's values, with no F16 file in between.

use std::path::PathBuf;

use anyhow::Context;

use crate::convert::{Checkpoint, OutType, convert, convert_quantized, write};
use crate::formats::{AtomicOutput, human_bytes};
use crate::quant::plan::parse_preset;

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// A Hugging Face checkpoint directory (config.json, SafeTensors, tokenizer files).
    input: PathBuf,
    output: PathBuf,
    /// f32, f16, bf16 or q8_0 (as convert_hf_to_gguf.py), or a quantization preset.
    #[arg(long, default_value = "f16")]
    outtype: String,
    /// The pre-tokenizer of a BPE vocabulary (convert_hf_to_gguf.py recognises it by
    /// hashing a tokenization; default: the family's usual one).
    #[arg(long, value_name = "NAME")]
    pre: Option<String>,
}

pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let checkpoint = Checkpoint::open(&args.input)?;
    let (metadata, tensors) = match OutType::from_name(&args.outtype) {
        Some(outtype) => convert(&checkpoint, outtype, args.pre.as_deref())?,
        None => {
            let ftype = parse_preset(&args.outtype).map_err(|e| anyhow::anyhow!("--outtype: {e}"))?;
            convert_quantized(&checkpoint, ftype, args.pre.as_deref())?
        }
    };
    let mut out =
        AtomicOutput::create(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
    write(out.writer(), &checkpoint, &metadata, &tensors)?;
    out.commit()?;
    let bytes: u64 = tensors.iter().map(|t| t.info.n_bytes()).sum();
    eprintln!(
        "wrote {}: {} tensors, {} of tensor data, in {:.2} s",
        args.output.display(),
        tensors.len(),
        human_bytes(bytes as f64),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
