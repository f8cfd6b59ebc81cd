//! The command line: parses arguments, calls an operation, prints its report.
//!
//! The only module that knows about clap and about stdout/stderr. Data goes to
//! stdout, logs to stderr; a closed pipe ends the program quietly.

mod diff;
mod inspect;
mod quantize;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::ops::edit::{self, Edits};
use crate::ops::inspect::InspectOptions;
use crate::ops::quantize::{KvOverride, QuantizeOptions};
use crate::quant::mixture::{self, MixtureOptions, TensorTypeOverride};
use crate::types::{FileType, GgmlType};

#[derive(Debug, Parser)]
#[command(name = "quantforge", version, about = "A build system for model weights")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a model file's format, metadata and tensors (reads headers only).
    Inspect {
        file: PathBuf,
        /// Print one JSON object (documented in docs/INSPECT_JSON.md).
        #[arg(long)]
        json: bool,
        /// Add a table of every tensor: name, type, shape, offset, bytes.
        #[arg(long)]
        tensors: bool,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Write a copy of a model with metadata or tensor names changed.
    ///
    /// Tensor data is copied, not decoded; with no edits the output is
    /// byte-identical to a GGUF input.
    Edit {
        input: PathBuf,
        output: PathBuf,
        /// Set a metadata key: KEY=TYPE:VALUE with TYPE one of
        /// u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str.
        #[arg(long = "set", value_name = "KEY=TYPE:VALUE", value_parser = edit::parse_set)]
        set: Vec<(String, crate::model::Value)>,
        /// Delete a metadata key.
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        /// Rename a tensor.
        #[arg(long = "rename-tensor", value_name = "OLD=NEW", value_parser = edit::parse_rename)]
        rename_tensor: Vec<(String, String)>,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Quantize a model: `quantize [FLAGS] IN OUT TYPE [NTHREADS]`, byte-identical to llama-quantize.
    Quantize(Box<QuantizeArgs>),
    /// Decode every tensor to f32, f16 or bf16 (1-D tensors stay f32, as in converted models).
    Dequantize {
        input: PathBuf,
        output: PathBuf,
        #[arg(long = "type", default_value = "f16", value_parser = ["f32", "f16", "bf16"])]
        ty: String,
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Compare two models tensor by tensor: MAE, RMSE, max abs error, cosine similarity.
    Diff {
        a: PathBuf,
        b: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Split a GGUF model into OUT_PREFIX-00001-of-0000N.gguf shards, byte-identical to llama-gguf-split.
    Split {
        input: PathBuf,
        out_prefix: PathBuf,
        /// Most bytes of tensor data per shard: a number and M (10^6) or G (10^9), e.g. 100M, 2G.
        #[arg(long, value_name = "N(M|G)", value_parser = crate::ops::split::parse_max_size,
              conflicts_with = "max_tensors", required_unless_present = "max_tensors")]
        max_size: Option<u64>,
        /// Most tensors per shard.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_tensors: Option<u64>,
        /// The first shard holds the metadata only, no tensors.
        #[arg(long)]
        no_tensor_first_split: bool,
        /// Print the shards that would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Merge the shards of a split (given any one of them) into one GGUF file.
    Merge {
        shard: PathBuf,
        output: PathBuf,
        /// Keep the split.* keys (split.count = 0), as llama-gguf-split --merge does.
        #[arg(long)]
        keep_split_keys: bool,
    },
}

/// `quantforge quantize`: llama-quantize's flags and positional order, so an
/// existing command line works unchanged.
#[derive(Debug, clap::Args)]
struct QuantizeArgs {
    /// Allow requantizing tensors that are already quantized.
    #[arg(long)]
    allow_requantize: bool,
    /// Leave output.weight un(re)quantized.
    #[arg(long)]
    leave_output_tensor: bool,
    /// Quantize every tensor to the same type: no k-quant mixture.
    #[arg(long)]
    pure: bool,
    /// Importance matrix (llama.cpp's .dat or GGUF format).
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// Use the importance matrix only for these tensors (repeatable).
    #[arg(long = "include-weights", value_name = "TENSOR", conflicts_with = "exclude_weights")]
    include_weights: Vec<String>,
    /// Do not use the importance matrix for these tensors (repeatable).
    #[arg(long = "exclude-weights", value_name = "TENSOR")]
    exclude_weights: Vec<String>,
    /// Type for output.weight.
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    output_tensor_type: Option<GgmlType>,
    /// Type for the token embeddings.
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    token_embedding_type: Option<GgmlType>,
    /// Quantize tensors whose name matches PATTERN (a regex) to TYPE (repeatable).
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE", value_parser = TensorTypeOverride::parse)]
    tensor_type: Vec<TensorTypeOverride>,
    /// Override a metadata key in the output: KEY=TYPE:VALUE, TYPE one of int, float, bool, str.
    #[arg(long = "override-kv", value_name = "KEY=TYPE:VALUE", value_parser = KvOverride::parse)]
    override_kv: Vec<KvOverride>,
    /// Print the per-tensor plan and the output size; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Worker threads (default: all cores); the positional NTHREADS also sets it.
    #[arg(long)]
    threads: Option<usize>,
    input: PathBuf,
    output: PathBuf,
    /// A preset (Q4_K_M, Q8_0, …) or its llama ftype number.
    #[arg(value_name = "TYPE")]
    preset: String,
    #[arg(value_name = "NTHREADS")]
    nthreads: Option<usize>,
}

fn parse_ggml_type(text: &str) -> Result<GgmlType, String> {
    GgmlType::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = GgmlType::all().map(GgmlType::name).collect();
        format!("unknown ggml type `{text}` (valid: {})", names.join(", "))
    })
}

/// A preset by name or llama ftype number, as llama-quantize accepts it,
/// among those whose main type quantforge can encode.
fn parse_preset(text: &str) -> anyhow::Result<FileType> {
    let supported = |f: &FileType| mixture::default_type(*f).is_some_and(crate::codecs::can_quantize);
    let by_number = text.parse::<u32>().ok().and_then(FileType::from_id);
    by_number.or_else(|| FileType::from_name(text)).filter(supported).ok_or_else(|| {
        let names: Vec<&str> = FileType::all().filter(supported).map(FileType::name).collect();
        anyhow::anyhow!("unknown quantization type `{text}`\nhint: valid types are {}", names.join(", "))
    })
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// Read the file with plain reads instead of memory-mapping it.
    #[arg(long)]
    no_mmap: bool,
}

impl LoadArgs {
    fn options(&self) -> OpenOptions {
        OpenOptions { use_mmap: !self.no_mmap }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Inspect { file, json, tensors, load } => {
            let model = ModelFile::open(&file, load.options())?;
            let report = crate::ops::inspect::inspect(&model, InspectOptions { tensors });
            let mut out = io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                eprintln!("loaded {}: {}", file.display(), report.load);
                inspect::print_text(&mut out, &report)?;
            }
            out.flush()?;
        }
        Command::Edit { input, output, set, delete, rename_tensor, load } => {
            let edits = Edits { set, delete, rename_tensors: rename_tensor };
            let summary = edit::edit_file(&input, &output, &edits, load.options())
                .with_context(|| format!("cannot edit {}", input.display()))?;
            eprintln!(
                "wrote {}: {} keys, {} tensors, {}",
                output.display(),
                summary.n_keys,
                summary.n_tensors,
                human_bytes(summary.bytes_written as f64)
            );
        }
        Command::Quantize(args) => quantize::run(*args)?,
        Command::Dequantize { input, output, ty, threads } => {
            // clap allows only f32, f16 and bf16, each a FileType name.
            let ftype = FileType::from_name(&ty).with_context(|| format!("unknown float type `{ty}`"))?;
            let options = dequantize_options(ftype, threads);
            let report = crate::ops::quantize::quantize_file(&input, &output, &options)
                .with_context(|| format!("cannot dequantize {}", input.display()))?;
            eprintln!("wrote {}: {}", output.display(), human_bytes(report.bytes_written as f64));
        }
        Command::Diff { a, b, json } => {
            let report = crate::ops::diff::diff_files(&a, &b)?;
            let mut out = io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                diff::print_text(&mut out, &report)?;
            }
            out.flush()?;
        }
        Command::Split { input, out_prefix, max_size, max_tensors, no_tensor_first_split, dry_run } => {
            use crate::ops::split::{self, SplitLimit, SplitOptions};
            let limit = match (max_size, max_tensors) {
                (Some(bytes), _) => SplitLimit::MaxSize(bytes),
                (None, Some(n)) => SplitLimit::MaxTensors(usize::try_from(n).unwrap_or(usize::MAX)),
                (None, None) => anyhow::bail!("give --max-size or --max-tensors"),
            };
            let options = SplitOptions { limit, no_tensor_first_split };
            let shards = split::split_file(&input, &out_prefix, options, dry_run)
                .with_context(|| format!("cannot split {}", input.display()))?;
            let mut out = io::stdout().lock();
            for shard in &shards {
                let verb = if dry_run { "would write" } else { "wrote" };
                let size = human_bytes(shard.bytes as f64);
                writeln!(out, "{verb} {}: {} tensors, {size}", shard.path.display(), shard.n_tensors)?;
            }
            out.flush()?;
        }
        Command::Merge { shard, output, keep_split_keys } => {
            let summary = crate::ops::split::merge_files(&shard, &output, keep_split_keys)
                .with_context(|| format!("cannot merge the split of {}", shard.display()))?;
            eprintln!(
                "wrote {}: {} shards, {} tensors, {}",
                output.display(),
                summary.n_shards,
                summary.n_tensors,
                human_bytes(summary.bytes_written as f64)
            );
        }
    }
    Ok(())
}

/// Dequantizing is quantizing to a float preset with requantization allowed.
fn dequantize_options(ftype: FileType, threads: Option<usize>) -> QuantizeOptions {
    QuantizeOptions {
        mixture: MixtureOptions::new(ftype),
        allow_requantize: true,
        imatrix: None,
        include_weights: Vec::new(),
        exclude_weights: Vec::new(),
        override_kv: Vec::new(),
        threads: threads.unwrap_or_else(default_threads),
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
