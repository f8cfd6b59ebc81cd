//! `quantforge convert HF-DIR OUT.gguf [--outtype TYPE] [--pre NAME]`: a
//! Hugging Face checkpoint to GGUF as `convert_hf_to_gguf.py` writes it;
//! with a preset (Q4_K_M, …) the tensors are quantized straight from the
//! checkpoint's values, with no F16 file in between.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use rayon::prelude::*;

use crate::codecs;
use crate::convert::{Checkpoint, ConvertedTensor, OutType, convert, infos};
use crate::formats::gguf::{TensorDataSource, write_gguf};
use crate::formats::{AtomicOutput, human_bytes};
use crate::model::{Endian, TensorInfo};
use crate::ops::quantize::{self, QuantizeOptions, parse_preset};

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

struct Tensors<'a>(&'a [ConvertedTensor]);

impl TensorDataSource for Tensors<'_> {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> std::io::Result<()> {
        out.write_all(&self.0[tensor_idx].data)
    }
}

pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let checkpoint = Checkpoint::open(&args.input)?;
    let (metadata, tensors) = match OutType::from_name(&args.outtype) {
        Some(outtype) => convert(&checkpoint, outtype, args.pre.as_deref())?,
        None => {
            let ftype = parse_preset(&args.outtype).map_err(|e| anyhow::anyhow!("--outtype: {e}"))?;
            let (metadata, tensors) = convert(&checkpoint, OutType::F32, args.pre.as_deref())?;
            quantize_in_memory(metadata, tensors, &QuantizeOptions::new(ftype))?
        }
    };
    let mut out =
        AtomicOutput::create(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
    write_gguf(out.writer(), Endian::Little, &metadata, &infos(&tensors), &mut Tensors(&tensors))?;
    out.commit()?;
    let bytes: u64 = tensors.iter().map(|t| t.data.len() as u64).sum();
    eprintln!(
        "wrote {}: {} tensors, {} of tensor data, in {:.2} s",
        args.output.display(),
        tensors.len(),
        human_bytes(bytes as f64),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The preset's plan (llama-quantize's mixture, order and metadata) applied
/// to F32 tensors held in memory.
fn quantize_in_memory(
    metadata: crate::model::Metadata,
    tensors: Vec<ConvertedTensor>,
    options: &QuantizeOptions,
) -> anyhow::Result<(crate::model::Metadata, Vec<ConvertedTensor>)> {
    let plan = quantize::plan(&metadata, &infos(&tensors), options, None)?;
    let quantized = plan
        .tensors
        .par_iter()
        .map(|planned| {
            let source = &tensors[planned.input_idx];
            if !planned.converts() {
                return Ok(ConvertedTensor { info: planned.info.clone(), data: source.data.clone() });
            }
            let info: &TensorInfo = &planned.info;
            let n_per_row = info.dims[0] as usize;
            let row_bytes = info.ggml_type.row_size(n_per_row as u64).unwrap_or(0) as usize;
            let values: Vec<f32> =
                source.data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let mut data = vec![0u8; info.n_bytes() as usize];
            for (row, dst) in values.chunks_exact(n_per_row).zip(data.chunks_exact_mut(row_bytes)) {
                codecs::quantize_row(info.ggml_type, row, None, dst)
                    .with_context(|| format!("tensor {}", info.name))?;
            }
            Ok(ConvertedTensor { info: info.clone(), data })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((plan.metadata, quantized))
}
