//! The command line: parses arguments, calls an operation, prints its report.
//!
//! The only module that knows about clap and about stdout/stderr. Data goes to
//! stdout, logs to stderr; a closed pipe ends the program quietly.

/// A status line on stderr (`wrote …`, `loaded …`), unless `--quiet`:
/// `-q` leaves nothing on the terminal but errors and what was asked for.
macro_rules! say {
    ($($arg:tt)*) => {
        if !$crate::cli::quiet() {
            eprintln!($($arg)*);
        }
    };
}

mod assemble;
mod attest;
mod backends;
mod cache;
mod chart;
mod completions;
mod convert;
mod convert_lora;
mod dequantize;
mod diff;
mod edit;
mod gguf_split;
mod graph;
mod inspect;
mod json;
mod logs;
mod lora_merge;
mod manual;
mod pack;
mod plan_devices;
mod plan_quant;
mod quantize;
mod report;
mod run;
mod schema;
mod signals;
mod split;
mod verify;

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exec::oneshot::OneShotSettings;
use crate::formats::{OpenOptions, human_bytes};

#[derive(Debug, Parser)]
#[command(
    name = "quantforge",
    version,
    long_version = long_version(),
    about = "A build system for model weights",
    after_long_help = ENVIRONMENT
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// No progress bars on stderr (they show only when stderr is a terminal), and no warnings.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// More log lines on stderr: -v each node's outcome (and `run` lists hits), -vv files, cache
    /// and remote events, -vvv everything (RUST_LOG works too: RUST_LOG=quantforge=debug).
    #[arg(long, short, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,
    /// Print the result as one JSON document on stdout, and a failure too
    /// (`quantforge schema` lists each document's schema; docs/JSON.md).
    #[arg(long, global = true)]
    json: bool,
    /// What a step whose backend is `auto` (and every one-shot command) runs on: auto, cpu,
    /// cpu-scalar, cpu-avx2, cpu-avx512 or cuda (`quantforge backends` lists this machine's).
    #[arg(long, global = true, env = "QUANTFORGE_BACKEND", value_parser = clap::builder::PossibleValuesParser::new(crate::backend::Choice::NAMES))]
    backend: Option<String>,
}

/// Every environment variable quantforge reads, for `--help`.
const ENVIRONMENT: &str = "\
Environment:
  QUANTFORGE_CACHE       the cache directory (as --cache-dir)
  QUANTFORGE_CACHE_URL   the shared cache behind it (as --cache-url)
  QUANTFORGE_LINK        how exports share their bytes with the cache (as --link)
  QUANTFORGE_SIMD        scalar, avx2 or avx512: the highest vector level the CPU codecs use
  QUANTFORGE_BACKEND     what `auto` steps and one-shot commands run on (as --backend)
  QUANTFORGE_CUDA_LIBS   directories searched first for libcuda and libnvrtc (docs/CUDA.md)
  AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  AWS_ALLOW_HTTP         the S3 client of an s3:// cache URL
  XDG_CACHE_HOME, HOME   where --user-cache lives
  RUST_LOG               which log lines reach stderr when neither -q nor -v is given
                         (e.g. quantforge=debug; default: warnings)";

/// `--version`: the versions that decide what a cached result or an output
/// holds, and the llama.cpp whose bytes they match.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{}\ncodec version {}, cache key scheme {}\nbytes as {}",
            env!("CARGO_PKG_VERSION"),
            crate::codecs::CODEC_VERSION,
            crate::key::KEY_SCHEME_VERSION,
            crate::codecs::REFERENCE_LLAMA_CPP
        )
    })
}

/// `--quiet`, decided once when the command line is read.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Progress bars go to stderr when it is a terminal, unless `--quiet`.
fn show_progress() -> bool {
    use std::io::IsTerminal;
    !quiet() && io::stderr().is_terminal()
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a recipe: build every export that is not already up to date.
    Run(run::RunArgs),
    /// Show what `run` would do: each node a hit or a miss (and why), and sizes.
    Plan(run::PlanArgs),
    /// Write one self-contained HTML page from `--json` documents of run, plan, plan-quant or diff.
    Report(report::ReportArgs),
    /// Compute work units of a recipe (from `plan --units`) into the shared cache.
    Work(run::WorkArgs),
    /// Print a shell completion script: `quantforge completions bash > /etc/bash_completion.d/quantforge`.
    Completions(completions::CompletionsArgs),
    /// Print a manual page (roff): `quantforge man > quantforge.1`, `quantforge man run`;
    /// `--dir DIR` writes every page the main one lists.
    Man(manual::ManArgs),
    /// Print the JSON Schema of a `--json` document (without NAME: every name, and its commands).
    Schema(schema::SchemaArgs),
    /// Print a recipe's DAG as Graphviz DOT or a Mermaid flowchart.
    Graph(graph::GraphArgs),
    /// Inspect and manage the cache.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Show a model file's format, metadata and tensors (reads headers only).
    Inspect(inspect::InspectArgs),
    /// Write a copy of a model with metadata or tensor names changed.
    ///
    /// Tensor data is copied, not decoded; with no edits the output is
    /// byte-identical to a GGUF input.
    Edit(Box<edit::EditArgs>),
    /// Quantize a model: `quantize [FLAGS] IN [OUT] TYPE [NTHREADS]`, byte-identical to llama-quantize.
    #[command(after_help = quantize::preset_list())]
    Quantize(Box<quantize::QuantizeArgs>),
    /// Decode every tensor to f32, f16 or bf16 (1-D tensors stay f32, as in converted models).
    Dequantize(dequantize::DequantizeArgs),
    /// Convert a Hugging Face checkpoint to GGUF, as convert_hf_to_gguf.py writes it (or quantized straight away).
    Convert(convert::ConvertArgs),
    /// Convert a PEFT LoRA adapter to a GGUF adapter, as convert_lora_to_gguf.py writes it.
    ConvertLora(convert_lora::ConvertLoraArgs),
    /// Merge GGUF LoRA adapters into a base model, as llama-export-lora merges them.
    LoraMerge(lora_merge::LoraMergeArgs),
    /// Plan per-tensor types that fit a file-size budget with the least weighted error.
    PlanQuant(plan_quant::PlanQuantArgs),
    /// Show how llama.cpp's tensor split mode would cut a model across N devices: per tensor its
    /// axis (or mirrored), segments, granularity and each device's extent; per device its bytes.
    PlanDevices(plan_devices::PlanDevicesArgs),
    /// Write that plan as one GGUF per device (OUT_PREFIX-devJ-of-N.gguf): each device's slices,
    /// mirrored tensors whole; `merge` given any of them writes the original back, byte for byte.
    ShardDevices(plan_devices::ShardDevicesArgs),
    /// List the compute backends this machine has: the CPU's vector levels, and CUDA devices
    /// (name, memory, compute capability) and NVRTC, or why there are none.
    Backends(backends::BackendsArgs),
    /// Check that a file is its claimed derivation, byte for byte: a recipe's export made again
    /// (`--recipe R`), or a quantization of a base model (`--as "quantize [FLAGS] TYPE" --from BASE`).
    Verify(verify::VerifyArgs),
    /// Write the provenance attestation of a recipe's export: an in-toto Statement with a SLSA
    /// Provenance predicate (recipe, steps, inputs with digests), signed with --key as a DSSE envelope.
    Attest(attest::AttestArgs),
    /// Store a quantization ladder as its base, its importance matrix and each file's derivation
    /// (plus the bytes no derivation reproduces, zstd-compressed).
    Pack(pack::PackArgs),
    /// Make a pack's files again, byte for byte, each checked against its recorded sha256.
    Unpack(pack::UnpackArgs),
    /// Compare two models tensor by tensor: MAE, RMSE, max abs error, cosine similarity, weighted squared error.
    Diff(diff::DiffArgs),
    /// Split a GGUF model into OUT_PREFIX-00001-of-0000N.gguf shards, byte-identical to llama-gguf-split.
    Split(split::SplitArgs),
    /// Bundle a language model with its mmproj file(s) after checking they fit (roles come from metadata).
    Assemble(assemble::AssembleArgs),
    /// Write one part of a bundle back out, exactly as it went in.
    Unbundle(assemble::UnbundleArgs),
    /// llama-gguf-split's own command line: --split (default) or --merge, its flags, messages
    /// and exit statuses, for scripts that call it (`quantforge gguf-split --help` lists them).
    #[command(name = "gguf-split", disable_help_flag = true)]
    GgufSplit {
        /// llama-gguf-split's arguments: [options] GGUF_IN GGUF_OUT.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<std::ffi::OsString>,
    },
    /// Merge the shards of a split (given any one of them) into one GGUF file.
    Merge(split::MergeArgs),
}

/// `plan --exit-code` found work to do: exit 2, with nothing on stderr
/// (errors exit 1).
#[derive(Debug, thiserror::Error)]
#[error("work is pending")]
struct Pending;

/// Where results are cached. One-shot commands cache only when asked.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct CacheArgs {
    /// Cache directory (default for one-shot commands: no cache).
    #[arg(long, value_name = "DIR", env = "QUANTFORGE_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Cache in the user's cache directory: $XDG_CACHE_HOME/quantforge, else ~/.cache/quantforge.
    #[arg(long, conflicts_with = "cache_dir")]
    user_cache: bool,
    #[command(flatten)]
    remote: cache::RemoteArgs,
    #[command(flatten)]
    link: cache::LinkArgs,
}

impl CacheArgs {
    pub(super) fn settings(&self, jobs: Option<usize>, open: OpenOptions) -> anyhow::Result<OneShotSettings> {
        let cache_dir = match self.user_cache {
            true => Some(user_cache_dir()?),
            false => self.cache_dir.clone(),
        };
        signals::on_interrupt(cache_dir.as_deref());
        Ok(OneShotSettings {
            cache_dir,
            remote: self.remote.remote(None)?,
            jobs: workers(jobs),
            open,
            progress: show_progress(),
            buffer_limit: None,
            link: self.link.link.0.clone(),
        })
    }
}

/// `$XDG_CACHE_HOME/quantforge`, else `$HOME/.cache/quantforge` (the XDG
/// base directory rules; a relative `XDG_CACHE_HOME` is ignored, as they say).
fn user_cache_dir() -> anyhow::Result<PathBuf> {
    let absolute = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    match (absolute("XDG_CACHE_HOME"), absolute("HOME")) {
        (Some(xdg), _) => Ok(xdg.join("quantforge")),
        (None, Some(home)) => Ok(home.join(".cache/quantforge")),
        (None, None) => anyhow::bail!("--user-cache: neither XDG_CACHE_HOME nor HOME is an absolute path"),
    }
}

/// A count of workers (`--jobs`, `--threads`): at least one, as a recipe's
/// `jobs` must be (only `quantize`'s NTHREADS takes 0 for all cores, as
/// llama-quantize does).
fn parse_workers(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (leave it out for one worker per core)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number of workers")),
    }
}

#[derive(Debug, clap::Args)]
pub(super) struct LoadArgs {
    /// Read the file with plain reads instead of memory-mapping it.
    #[arg(long)]
    no_mmap: bool,
}

impl LoadArgs {
    fn options(&self) -> OpenOptions {
        OpenOptions { use_mmap: !self.no_mmap }
    }
}

/// Writes `bytes` whole or not at all to a path a guard let through; an
/// error names the path.
fn write_output(path: &crate::files::OutputPath, bytes: &[u8]) -> anyhow::Result<()> {
    let write = || -> io::Result<()> {
        let mut out = crate::formats::AtomicOutput::create(path)?;
        out.writer().write_all(bytes)?;
        out.commit().map(drop)
    };
    write().with_context(|| format!("cannot write {}", path.shown().display()))
}

pub fn main() -> ExitCode {
    signals::install();
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::LoraMerge(args), Some((_, sub))) = (&mut cli.command, matches.subcommand()) {
        args.order_from(sub);
    }
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    init_logs(cli.quiet, cli.verbose);
    if let Some(choice) = cli.backend.as_deref().and_then(crate::backend::Choice::from_name) {
        crate::backend::set_default(choice);
    }
    let json = cli.json;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.is::<Pending>() => ExitCode::from(2),
        Err(e) => {
            let message = cause_chain(&e);
            eprintln!("error: {}", crate::text::for_terminal(&message));
            if json && !json::printed() {
                // The terminal has the message already; a closed stdout changes nothing.
                let _ = json::print(&json::Failure::of(&e, message));
            }
            ExitCode::FAILURE
        }
    }
}

/// Log lines go to stderr as `warning: …`, `info: …`: at the level `-q`/`-v`
/// ask for, else as `RUST_LOG` says, else warnings and errors.
fn init_logs(quiet: bool, verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let level = match (quiet, verbose) {
        (true, _) => Some("error"),
        (false, 0) => None,
        (false, 1) => Some("info"),
        (false, 2) => Some("debug"),
        (false, _) => Some("trace"),
    };
    let filter = match level {
        Some(level) => EnvFilter::new(format!("warn,quantforge={level}")),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(io::stderr).event_format(logs::Plain).init();
}

/// The error and its causes, each said once: a cause whose text the
/// message already holds (most of ours include their source) is not
/// repeated.
fn cause_chain(e: &anyhow::Error) -> String {
    let mut message = e.to_string();
    for cause in e.chain().skip(1) {
        // An I/O error is said as messages say it (`IoText`).
        let text = match cause.downcast_ref::<io::Error>() {
            Some(io) => crate::files::IoText(io).to_string(),
            None => cause.to_string(),
        };
        if message.contains(&text) {
            continue;
        }
        // A cause that begins by naming what the message ends with names it once.
        let text = match text.split_once(": ") {
            Some((head, rest)) if message.ends_with(head) => rest.to_owned(),
            _ => text,
        };
        message = format!("{message}: {text}");
    }
    message
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|json| json.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let json = cli.json;
    match cli.command {
        Command::Inspect(args) => inspect::run(args, json)?,
        Command::Dequantize(args) => dequantize::run(args, json)?,
        Command::Diff(args) => diff::run(args, json)?,
        Command::Split(args) => split::run_split(args, json)?,
        Command::Merge(args) => split::run_merge(args, json)?,
        Command::Assemble(args) => assemble::run_assemble(args, json)?,
        Command::Unbundle(args) => assemble::run_unbundle(args, json)?,
        Command::Run(args) => run::run(args, json, cli.verbose > 0)?,
        Command::Plan(args) => run::plan(args, json)?,
        Command::Work(args) => run::work(args, json)?,
        Command::Report(args) => report::run(args)?,
        Command::PlanDevices(args) => plan_devices::run(args, json)?,
        Command::ShardDevices(args) => plan_devices::shard(args, json)?,
        Command::Schema(args) => schema::run(args)?,
        Command::Backends(_) if json => anyhow::bail!("--json: `backends` prints text only"),
        Command::Backends(args) => backends::run(args)?,
        Command::Completions(_) | Command::Man(_) | Command::Graph(_) if json => {
            anyhow::bail!("--json: this command prints a document of another kind (a script, a page, a graph)")
        }
        Command::Completions(args) => completions::run(args)?,
        Command::Man(args) => manual::run(args)?,
        Command::Graph(args) => graph::run(args)?,
        Command::Cache(command) => cache::run(command, json)?,
        Command::Edit(args) => edit::run(*args, json)?,
        Command::Quantize(args) => quantize::run(*args, json)?,
        Command::Verify(args) => verify::run(args, json)?,
        // An attestation is a JSON document already.
        Command::Attest(args) => attest::run(args)?,
        Command::Pack(args) => pack::pack(args, json)?,
        Command::Unpack(args) => pack::unpack(args, json)?,
        Command::PlanQuant(args) => plan_quant::run(args, json)?,
        Command::Convert(args) => convert::run(args, json)?,
        Command::ConvertLora(args) => convert_lora::run(args, json)?,
        Command::LoraMerge(args) => lora_merge::run(args, json)?,
        Command::GgufSplit { args } => gguf_split::run(&args, json)?,
    }
    Ok(())
}

/// Says what a one-shot command wrote: each file, its tensors and size (on
/// stderr, as logs go), or under `--json` the [`json::Written`] document.
fn wrote(command: &str, report: &crate::exec::report::RunReport, json: bool) -> anyhow::Result<()> {
    if json {
        return json::print(&json::Written::of(command, report));
    }
    for file in report.files() {
        let size = human_bytes(file.bytes as f64);
        say!("wrote {}: {}, {size}", file.path.display(), crate::text::count(file.tensors as u64, "tensor"));
    }
    Ok(())
}

/// Says, as llama-quantize does, every tensor a quantization wrote in a
/// fallback type and how many fell back — on every run, a result taken from
/// the cache included (cargo replays a cached crate's warnings too). Each
/// line names its node when `by_node` (a recipe may quantize many times).
fn warn_fallbacks(report: &crate::exec::report::RunReport, by_node: bool) {
    for node in report.nodes.iter().filter(|n| !n.fallbacks.is_empty()) {
        let at = if by_node { format!("{}: ", crate::text::for_terminal(&node.id)) } else { String::new() };
        for fallback in &node.fallbacks.tensors {
            tracing::warn!("{at}{fallback}");
        }
        tracing::warn!("{at}{}", node.fallbacks.warning());
    }
}

/// Worker threads: as asked, or one per core; more than
/// [`crate::exec::max_jobs`] is capped with a warning (each thread is spawned
/// one at a time, and past a few per core they only contend).
fn workers(requested: Option<usize>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    match requested {
        None => cores,
        Some(n) if n > crate::exec::max_jobs() => {
            let max = crate::exec::max_jobs();
            tracing::warn!("{n} worker threads asked; using {max} ({} per core on {cores} cores)", max / cores);
            max
        }
        Some(n) => n,
    }
}

#[cfg(test)]
mod help_tests {
    use super::*;

    /// Every argument of every command says what it is in `--help`.
    #[test]
    fn every_argument_is_described() {
        fn undescribed(command: &clap::Command, path: &str, out: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    out.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                undescribed(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut missing = Vec::new();
        undescribed(&Cli::command(), "quantforge", &mut missing);
        assert!(missing.is_empty(), "{} arguments without help:\n{}", missing.len(), missing.join("\n"));
    }
}
