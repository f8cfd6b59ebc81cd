//! `quantforge convert HF-DIR OUT.gguf [--outtype TYPE] [--pre NAME]`: a
//! Hugging Face checkpoint to GGUF as `convert_hf_to_gguf.py` writes it;
//! with a preset (Q4_K_M, …) the tensors are quantized straight from the
//! checkpoint's values, with no F16 file in between; `--split-max-*` write
//! the converter's shards. A one-step recipe on the engine, like every
//! one-shot command.

use std::path::PathBuf;

use anyhow::Context;

use super::{CacheArgs, workers};
use crate::exec::oneshot;
use crate::formats::{OpenOptions, human_bytes};
use crate::ops::Op;
use crate::ops::convert::{ConvertOptions, Target};
use crate::ops::export::SplitMode;
use crate::ops::split::WriterSplit;
use crate::recipe::{ExtraInput, OneShot};

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// A Hugging Face checkpoint directory (config.json, SafeTensors, tokenizer files): a
    /// repository's clone, or a Hub cache's models--ORG--NAME (its refs/main) or one of its snapshots;
    /// or a repo id, ORG/NAME[@REVISION], read from the local Hugging Face cache (HF_HUB_CACHE, HF_HOME).
    #[arg(required_unless_present = "print_supported_models")]
    input: Option<PathBuf>,
    /// The GGUF to write (with --split-*: the name the shards are named after).
    #[arg(required_unless_present = "print_supported_models")]
    output: Option<PathBuf>,
    /// List the Hugging Face `architectures` classes this converter takes, each with the
    /// `general.architecture` it writes (docs/ARCHITECTURES.md has the same table), and exit.
    #[arg(long, conflicts_with_all = ["input", "output"])]
    print_supported_models: bool,
    /// auto (bf16 or f16, as the checkpoint stores its weights), f32, f16, bf16 or q8_0, as
    /// convert_hf_to_gguf.py takes them, or a quantization preset.
    #[arg(long, default_value = "auto")]
    outtype: String,
    /// The pre-tokenizer of a tokenizer.json vocabulary (tokenizer.ggml.pre). By default it
    /// is told as convert_hf_to_gguf.py tells it, by the hash of a fixed text's encoding, and
    /// a vocabulary whose hash it does not know is refused; name one for a retrained vocabulary.
    #[arg(long, value_name = "NAME")]
    pre: Option<String>,
    /// The model's name, written as it is, as convert_hf_to_gguf.py's --model-name (default:
    /// from the model card, the config or the directory, a Hub cache's repository NAME).
    #[arg(long, value_name = "NAME")]
    model_name: Option<String>,
    /// A JSON file of naming, provenance and sampling keys (general.name, general.author,
    /// general.base_models, general.tags, general.sampling.top_k, …) taken over what the model card,
    /// the config and the directory give, as convert_hf_to_gguf.py's --metadata.
    #[arg(long, value_name = "FILE")]
    metadata: Option<PathBuf>,
    /// Write the vocabulary alone: the metadata (architecture, naming and tokenizer keys)
    /// without a tensor, as convert_hf_to_gguf.py's --vocab-only.
    #[arg(long)]
    vocab_only: bool,
    /// Write the vision tower of a multimodal checkpoint (Gemma3ForConditionalGeneration, …) as
    /// llama.cpp's projector file (general.type mmproj), as convert_hf_to_gguf.py's --mmproj;
    /// the same checkpoint without it gives the language model. `assemble` takes both.
    #[arg(long, conflicts_with = "vocab_only")]
    mmproj: bool,
    /// At most N tensors in each shard, as convert_hf_to_gguf.py's --split-max-tensors: shards
    /// STEM-00001-of-0000N.gguf beside OUT (a model that fits one shard is written as OUT).
    #[arg(long, value_name = "N", default_value_t = 0)]
    split_max_tensors: usize,
    /// At most SIZE bytes of tensor data in each shard (2G, 500M: powers of 1000; counted
    /// without padding; 1.5GB, 2GiB also taken), as convert_hf_to_gguf.py's --split-max-size; 0: no limit.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = crate::formats::parse_size)]
    split_max_size: u64,
    /// The first shard holds the metadata and no tensor, as convert_hf_to_gguf.py's
    /// --no-tensor-first-split.
    #[arg(long)]
    no_tensor_first_split: bool,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N", value_parser = super::parse_workers)]
    threads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

pub fn run(args: ConvertArgs, json: bool) -> anyhow::Result<()> {
    if args.print_supported_models {
        anyhow::ensure!(!json, "--json: --print-supported-models prints a list");
        return print_supported_models();
    }
    let (Some(input), Some(output)) = (&args.input, &args.output) else {
        anyhow::bail!("give the checkpoint directory and the output file");
    };
    let input = &crate::formats::model_path(input).map_err(anyhow::Error::msg)?;
    let started = std::time::Instant::now();
    let target = Target::parse(&args.outtype).map_err(|e| anyhow::anyhow!("--outtype: {e}"))?;
    let split = WriterSplit {
        max_tensors: args.split_max_tensors,
        max_size: args.split_max_size,
        no_tensor_first_split: args.no_tensor_first_split,
    };
    let split_asked = split != WriterSplit::default();
    anyhow::ensure!(
        !(args.vocab_only && args.no_tensor_first_split),
        "--vocab-only: splitting the vocabulary is not supported (as convert_hf_to_gguf.py)"
    );
    let options = ConvertOptions {
        target,
        pre: args.pre,
        model_name: args.model_name,
        vocab_only: args.vocab_only,
        mmproj: args.mmproj,
    };
    let extra: Vec<ExtraInput> =
        args.metadata.iter().map(|path| ExtraInput { name: "metadata", path, as_written: path }).collect();
    let job = OneShot {
        name: "convert",
        input,
        extra_inputs: &extra,
        read: Op::Convert(Box::new(options)),
        read_uses: if extra.is_empty() { Vec::new() } else { vec![1] },
        ops: Vec::new(),
        output,
        split: if split_asked && !args.vocab_only { SplitMode::Writer(split) } else { SplitMode::Whole },
        format: crate::ops::export::ExportFormat::Gguf,
        byte_order: None,
    };
    let settings = args.cache.settings(Some(workers(args.threads)), OpenOptions::default())?;
    let report = oneshot::run(job, &settings).with_context(|| format!("cannot convert {}", input.display()))?;
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    if json {
        return super::json::print(&super::json::Written::of("convert", &report));
    }
    let tensors: usize = report.files().map(|f| f.tensors).sum();
    let files: Vec<_> = report.files().collect();
    if split_asked && files.len() == 1 {
        say!("note: the model fits one shard (the split limits are not reached); not splitting");
    }
    let written = match files.as_slice() {
        [first, _, ..] => format!("{} … ({} shards)", first.path.display(), files.len()),
        _ => output.display().to_string(),
    };
    say!(
        "wrote {written}: {}, {}, in {:.2} s",
        crate::text::count(tensors as u64, "tensor"),
        human_bytes(report.output_bytes() as f64),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every class, sorted as the converter's `--print-supported-models` sorts
/// them, with the architecture it is written as.
fn print_supported_models() -> anyhow::Result<()> {
    use std::io::Write;
    let mut classes: Vec<(&str, &str)> = crate::convert::family::supported_classes().collect();
    classes.sort_unstable();
    let mut out = std::io::stdout().lock();
    writeln!(out, "TEXT models:")?;
    for (class, arch) in classes {
        writeln!(out, "  - {class} ({arch})")?;
    }
    let mut towers: Vec<&str> = crate::convert::mmproj::supported_classes().collect();
    towers.sort_unstable();
    writeln!(out, "MMPROJ models:")?;
    for class in towers {
        writeln!(out, "  - {class} (clip)")?;
    }
    out.flush()?;
    Ok(())
}
