//! `quantforge quantize`: flags to options, the plan or the run's summary to the terminal.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;

use anyhow::Context;

use super::{CacheArgs, plan_quant, workers};
use crate::exec::oneshot;
use crate::files::IoText;
use crate::files::{Replaces, WriteGuard};
use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::ops::Op;
use crate::ops::export::SplitMode;
use crate::params::nearest;
use crate::quant::budget::Target;
use crate::quant::mixture::{MixtureOptions, TensorTypeOverride};
use crate::quant::plan::{self as quantize, KvOverride, QuantizeOptions, QuantizePlan, QuantizeType, parse_preset};
use crate::quant::prune;
use crate::recipe::{ExtraInput, OneShot, Rung};
use crate::text::{Name, name_width};
use crate::types::GgmlType;

/// How a quantization reports what it did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Summary {
    Text,
    Json,
    /// Nothing: another command derives through it.
    Silent,
}

pub(super) fn run(args: QuantizeArgs, json: bool) -> anyhow::Result<()> {
    quantize(args, if json { Summary::Json } else { Summary::Text })
}

/// The types `quantize` takes, as llama-quantize's usage lists them.
pub(super) fn preset_list() -> String {
    let mut list = String::from("Types:\n");
    for name in quantize::preset_names().chain([quantize::COPY]) {
        let ty = QuantizeType::parse(name).expect("a listed type parses");
        let id = if ty.is_copy() { String::new() } else { format!("{:2}  or", ty.file_type().id()) };
        list.push_str(&format!("  {id:6}  {name:9} : {}\n", ty.description));
    }
    list
}

/// llama-quantize's `IN TYPE [NTHREADS]`: with no OUT, the second
/// positional is the type and the output is `ggml-model-TYPE.gguf` in the
/// input's directory (without `.gguf` for --keep-split, which adds shard suffixes).
fn name_output_after_type(args: &mut QuantizeArgs) -> anyhow::Result<()> {
    let type_name = |second: &str| match quantize::is_copy(second) {
        true => Some(quantize::COPY),
        false => parse_preset(second).is_ok().then(|| QuantizeType::parse(second).expect("a preset parses").name),
    };
    let Some(name) = args.output.to_str().and_then(type_name) else {
        return Ok(());
    };
    if let Some(third) = args.preset.take() {
        if let Some(extra) = args.nthreads {
            anyhow::bail!("unexpected argument `{extra}` after NTHREADS");
        }
        args.nthreads = Some(third.parse().map_err(|_| anyhow::anyhow!("invalid NTHREADS `{third}`"))?);
    }
    args.preset = Some(name.to_owned());
    let suffix = if args.keep_split { "" } else { ".gguf" };
    args.output = args.input.with_file_name(format!("ggml-model-{name}{suffix}"));
    Ok(())
}

/// `--tensor-type-file`: whitespace-separated `PATTERN=TYPE` entries.
fn tensor_types_from(path: &Path) -> anyhow::Result<Vec<TensorTypeOverride>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--tensor-type-file {}: {}", path.display(), IoText(&e)))?;
    text.split_whitespace()
        .map(|entry| TensorTypeOverride::parse(entry).with_context(|| format!("in {}", path.display())))
        .collect()
}

/// Refuses, saying which command to use instead, a file `quantize` does
/// not take: a Hugging Face checkpoint's (SafeTensors, PyTorch or ONNX:
/// `convert` makes GGUF of it, straight to a preset) or a bundle
/// (`unbundle` writes the part to quantize). A directory is refused where
/// every command refuses one for a model file.
fn refuse_other_inputs(input: &Path) -> anyhow::Result<()> {
    use crate::formats::{DetectedFormat, detect};
    let shown = input.display();
    let convert = |what: &str| {
        anyhow::anyhow!(
            "{shown} is {what}, which quantize does not read: `quantforge convert CHECKPOINT-DIR OUT.gguf \
             --outtype TYPE` writes GGUF from a Hugging Face checkpoint, quantized straight to a preset"
        )
    };
    match detect(input) {
        Ok(DetectedFormat::SafeTensors) => Err(convert("a SafeTensors file")),
        Ok(DetectedFormat::PyTorchZip | DetectedFormat::PyTorchLegacy) => Err(convert("a PyTorch file")),
        Ok(DetectedFormat::Onnx) => Err(convert("an ONNX model")),
        Ok(DetectedFormat::Gguf) => {
            let model = ModelFile::open(input, OpenOptions::default())?;
            match crate::ops::assemble::bundle_parts(&model.metadata) {
                Ok(parts) => anyhow::bail!(
                    "{shown} is a bundle of {} parts: `quantforge unbundle {shown} PART OUT.gguf` writes one \
                     to quantize",
                    parts.len()
                ),
                Err(_) => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// The options of a quantization to `preset` (none: the budget planner's
/// base) with `args`' flags; `read_only` learns the files it reads.
fn options_for(
    args: &QuantizeArgs,
    preset: Option<&str>,
    read_only: &mut WriteGuard,
) -> anyhow::Result<QuantizeOptions> {
    let mut mixture = match preset {
        Some(preset) => quantize::mixture_for(preset).map_err(|e| match nearest(preset, quantize::preset_names()) {
            Some(near) => anyhow::anyhow!("{e}\n  did you mean `{near}`?"),
            None => anyhow::anyhow!("{e}"),
        })?,
        None => MixtureOptions::new(plan_quant::base_options().mixture.ftype),
    };
    mixture.pure = args.pure;
    mixture.leave_output_tensor = args.leave_output_tensor;
    mixture.output_tensor_type = args.output_tensor_type;
    mixture.token_embedding_type = args.token_embedding_type;
    mixture.tensor_types = args.tensor_type.clone();
    for path in &args.tensor_type_file {
        mixture.tensor_types.extend(tensor_types_from(path)?);
        read_only.protect(path, "a --tensor-type-file");
    }
    mixture.keep_split = args.keep_split;
    // A budget is planned inside the run, as a recipe's `budget` is: one path.
    Ok(QuantizeOptions {
        mixture,
        allow_requantize: args.allow_requantize,
        include_weights: args.include_weights.clone(),
        exclude_weights: args.exclude_weights.clone(),
        override_kv: args.override_kv.clone(),
        budget: args.target_size,
        prune_layers: match &args.prune_layers {
            Some(layers) => prune::parse_layers(layers).map_err(|e| anyhow::anyhow!("--prune-layers: {e}"))?,
            None => Vec::new(),
        },
    })
}

/// Quantizes as `args` say, and says what was written as `summary` asks.
fn quantize(mut args: QuantizeArgs, summary: Summary) -> anyhow::Result<()> {
    refuse_other_inputs(&args.input)?;
    if args.target_size.is_none() {
        if let Some(types) = args.output.to_str().and_then(ladder_types) {
            // `IN TYPES [NTHREADS]`: the third positional is the thread count.
            if let Some(third) = args.preset.take() {
                anyhow::ensure!(args.nthreads.is_none(), "unexpected argument after NTHREADS");
                args.nthreads = Some(third.parse().map_err(|_| anyhow::anyhow!("invalid NTHREADS `{third}`"))?);
            }
            return ladder(args, types, None, summary);
        }
        if let Some(list) = args.preset.as_deref().filter(|p| p.contains(',')) {
            let types = list.split(',').map(str::to_owned).collect();
            let template = args.output.clone();
            return ladder(args, types, Some(&template), summary);
        }
        name_output_after_type(&mut args)?;
        anyhow::ensure!(args.preset.is_some(), "missing TYPE: give a preset (Q4_K_M, …) or --target-size");
    }
    // With --target-size the type is the planner's: `IN OUT NTHREADS` then
    // puts the thread count where the type would be.
    if args.target_size.is_some()
        && let Some(threads) = args.preset.as_deref().and_then(|p| p.parse::<usize>().ok())
    {
        args.nthreads = args.nthreads.or(Some(threads));
        args.preset = None;
    }
    anyhow::ensure!(
        args.target_size.is_none() || args.preset.is_none(),
        "give either a TYPE or --target-size, not both"
    );
    // The run's guard knows its model and matrix; these files it never sees.
    let mut read_only = WriteGuard::default();
    let options = options_for(&args, args.preset.as_deref(), &mut read_only)?;
    read_only.check(&args.output, Replaces::AnyFile)?;
    if args.dry_run
        && let Some(size) = args.target_size
    {
        let plan = plan_quant::plan_for(&args.input, Target::Size(size), args.imatrix.as_deref(), true, options)?;
        if summary == Summary::Json {
            return super::json::print(&plan);
        }
        say!(
            "planned {} for a budget of {}, predicted weighted squared error {:.4e}",
            human_bytes(plan.file_size as f64),
            human_bytes(size as f64),
            plan.predicted_error
        );
        return Ok(());
    }
    let (ftype, copy) = (options.mixture.ftype, options.mixture.only_copy);
    if args.dry_run {
        let model = ModelFile::open(&args.input, OpenOptions::default())?;
        let imatrix = match &args.imatrix {
            Some(path) => quantize::load_imatrix(path, args.imatrix_name.as_deref().unwrap_or(path), &options)?,
            None => None,
        };
        let plan = quantize::plan(&model.metadata, &model.tensors, &options, imatrix.as_ref())?;
        if summary == Summary::Json {
            return super::json::print(&plan_document(&plan));
        }
        return print_plan(&mut io::stdout().lock(), &plan).map_err(Into::into);
    }
    let started = std::time::Instant::now();
    let (extra, uses) = imatrix_input(&args);
    let mut job = oneshot::job("quantize", &args.input, vec![(Op::Quantize(Box::new(options)), uses)], &args.output);
    job.extra_inputs = &extra;
    if args.keep_split {
        job.split = SplitMode::LikeInput;
    }
    let settings = run_settings(&args)?;
    let report = oneshot::run(job, &settings).with_context(|| format!("cannot quantize {}", args.input.display()))?;
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    if let Some(budget) = args.target_size {
        anyhow::ensure!(
            report.output_bytes() <= budget,
            "wrote {} bytes, over the budget of {budget}: a bug in the planner",
            report.output_bytes()
        );
    }
    let kind = match args.target_size {
        Some(budget) => format!("types planned for a budget of {}", human_bytes(budget as f64)),
        None if copy => "every tensor copied".to_owned(),
        None => ftype.description().to_owned(),
    };
    say_written(&report, summary, &kind, started)
}

/// The importance matrix as the run's second input, and the quantize op's
/// use of it.
fn imatrix_input(args: &QuantizeArgs) -> (Vec<ExtraInput<'_>>, Vec<usize>) {
    let extra: Vec<ExtraInput> = args
        .imatrix
        .iter()
        .map(|path| ExtraInput { name: "imatrix", path, as_written: args.imatrix_name.as_deref().unwrap_or(path) })
        .collect();
    let uses = if extra.is_empty() { Vec::new() } else { vec![1] };
    (extra, uses)
}

/// How the run goes: its threads (0 is llama-quantize's "all cores"), cache
/// and buffer limit.
fn run_settings(args: &QuantizeArgs) -> anyhow::Result<oneshot::OneShotSettings> {
    let jobs = workers(args.threads.or(args.nthreads).filter(|&n| n > 0));
    let mut settings = args.cache.settings(Some(jobs), OpenOptions::default())?;
    settings.buffer_limit = args.max_buffer_size.map(|mib| mib << 20);
    Ok(settings)
}

/// Says what a run wrote, as `summary` asks: its fallbacks, then its files.
fn say_written(
    report: &crate::exec::report::RunReport,
    summary: Summary,
    kind: &str,
    started: std::time::Instant,
) -> anyhow::Result<()> {
    let ladder = report.files().count() > 1 && report.nodes.iter().filter(|n| n.op == "quantize").count() > 1;
    match summary {
        Summary::Silent => return Ok(()),
        Summary::Json => return super::json::print(&super::json::Written::of("quantize", report)),
        Summary::Text => super::warn_fallbacks(report, ladder),
    }
    let totals = &report.totals;
    let files: Vec<String> = report.files().map(|f| f.path.display().to_string()).collect();
    say!(
        "wrote {}: {kind} ({}), {} encoded{}, {} from cache, {} copied, in {:.2} s",
        files.join(", "),
        human_bytes(report.output_bytes() as f64),
        crate::text::count(totals.tensors_encoded, "tensor"),
        if totals.tensors_shared > 0 { format!(" ({} shared by rungs)", totals.tensors_shared) } else { String::new() },
        totals.tensors_reused,
        totals.tensors_copied,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `TYPE,TYPE,…` where OUT would be (`IN TYPES [NTHREADS]`): a ladder's
/// types, when every one is a type.
fn ladder_types(text: &str) -> Option<Vec<String>> {
    let types: Vec<String> = text.split(',').map(str::to_owned).collect();
    let is_type = |t: &String| quantize::is_copy(t) || parse_preset(t).is_ok();
    (types.len() > 1 && types.iter().all(is_type)).then_some(types)
}

/// `quantize IN OUT TYPE,TYPE,…`: a ladder, as one run — each tensor read
/// and decoded once for every rung, as a recipe's fan-out is. OUT names each
/// rung's file with `{preset}`; without OUT, each is llama-quantize's
/// `ggml-model-TYPE.gguf` beside the input.
fn ladder(args: QuantizeArgs, types: Vec<String>, template: Option<&Path>, summary: Summary) -> anyhow::Result<()> {
    anyhow::ensure!(!args.dry_run, "--dry-run plans one type: give one TYPE");
    anyhow::ensure!(!args.keep_split, "--keep-split writes one type's shards: give one TYPE");
    if let Some(template) = template {
        anyhow::ensure!(
            template.to_string_lossy().contains("{preset}"),
            "a ladder writes a file per type: put {{preset}} in OUT ({} has none)",
            template.display()
        );
    }
    let (extra, uses) = imatrix_input(&args);
    let mut read_only = WriteGuard::default();
    let mut rungs: Vec<Rung> = Vec::with_capacity(types.len());
    for ty in &types {
        let options = options_for(&args, Some(ty), &mut read_only)?;
        let name = QuantizeType::parse(ty).map_or(quantize::COPY, |t| t.name);
        if rungs.iter().any(|r| r.name == format!("preset={name}")) {
            anyhow::bail!("{name} is listed twice");
        }
        let output = match template {
            Some(template) => PathBuf::from(template.to_string_lossy().replace("{preset}", name)),
            None => args.input.with_file_name(format!("ggml-model-{name}.gguf")),
        };
        read_only.check(&output, Replaces::AnyFile)?;
        let op = Op::Quantize(Box::new(options));
        rungs.push(Rung { name: format!("preset={name}"), op, uses: uses.clone(), output });
    }
    let first = rungs[0].output.clone();
    let job = OneShot { extra_inputs: &extra, ..oneshot::job("quantize", &args.input, Vec::new(), &first) };
    let started = std::time::Instant::now();
    let mut settings = run_settings(&args)?;
    // Rungs share their decoding through stored results: without a cache, a
    // scratch one beside the outputs, gone when the run ends.
    let scratch = match settings.cache_dir {
        Some(_) => None,
        None => {
            let dir = first.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
            let scratch = tempfile::Builder::new()
                .prefix(".quantforge-ladder-")
                .tempdir_in(dir)
                .map_err(crate::files::without_temp_name)?;
            settings.cache_dir = Some(scratch.path().to_owned());
            Some(scratch)
        }
    };
    let report = oneshot::run_ladder(job, rungs, &settings)
        .with_context(|| format!("cannot quantize {}", args.input.display()))?;
    drop(scratch);
    super::cache::report_transfers(report.remote.as_ref(), false)?;
    say_written(&report, summary, &format!("a ladder of {} types", types.len()), started)
}
/// Runs `quantize [FLAGS] BASE OUT TYPE [NTHREADS]` as the command line
/// would, without a word to the terminal: how `verify --as` and `pack` derive.
pub(super) fn quantize_quietly<S: AsRef<str>>(flags: &[S], base: &Path, out: &Path, rest: &[S]) -> anyhow::Result<()> {
    let mut argv: Vec<OsString> = vec!["quantforge".into(), "quantize".into(), "--quiet".into()];
    argv.extend(flags.iter().map(|f| f.as_ref().into()));
    argv.extend([base.into(), out.into()]);
    argv.extend(rest.iter().map(|r| r.as_ref().into()));
    let cli = super::Cli::try_parse_from(argv)?;
    let super::Command::Quantize(args) = cli.command else { anyhow::bail!("not a quantize command") };
    quantize(*args, Summary::Silent)
}

/// `quantize --dry-run --json`.
fn plan_document(plan: &QuantizePlan) -> super::json::QuantizePlan {
    let tensors = plan
        .tensors
        .iter()
        .map(|t| super::json::PlannedTensor {
            name: t.info.name.clone(),
            shape: t.info.dims.clone(),
            from: t.from.name().to_owned(),
            ggml_type: t.info.ggml_type.name().to_owned(),
            fallback_from: t.fallback_from.map(|f| f.name().to_owned()),
            bytes_in: t.bytes_in,
            bytes_out: t.bytes_out,
        })
        .collect();
    super::json::QuantizePlan {
        file_type: super::json::FileTypeName {
            id: plan.ftype.id(),
            name: plan.ftype.name().to_owned(),
            description: plan.ftype.description().to_owned(),
        },
        file_size: plan.file_size,
        fallbacks: plan.n_fallback(),
        tensors,
    }
}

fn print_plan(out: &mut dyn Write, plan: &QuantizePlan) -> io::Result<()> {
    let width = plan.tensors.iter().map(|t| name_width(&t.info.name)).max().unwrap_or(6);
    for t in &plan.tensors {
        let fallback = t.fallback_from.map(|f| format!(" (fallback from {f})")).unwrap_or_default();
        writeln!(
            out,
            "{:width$}  {:24}  {:>7} -> {:7}  {:>10} -> {:>10}{fallback}",
            Name(&t.info.name),
            format!("{:?}", t.info.dims),
            t.from.name(),
            t.info.ggml_type.name(),
            human_bytes(t.bytes_in as f64),
            human_bytes(t.bytes_out as f64)
        )?;
    }
    writeln!(
        out,
        "output: {} bytes ({}), {}",
        plan.file_size,
        human_bytes(plan.file_size as f64),
        plan.ftype.description()
    )?;
    let fallbacks = plan.fallbacks();
    if !fallbacks.is_empty() {
        writeln!(out, "warning: {}", fallbacks.warning())?;
    }
    if plan.tensors.iter().any(|t| t.converts() && t.requires_imatrix) {
        writeln!(out, "warning: this quantization will need an importance matrix (--imatrix)")?;
    }
    Ok(())
}

/// `quantforge quantize`: llama-quantize's flags and positional order, so an
/// existing command line works unchanged.
#[derive(Debug, clap::Args)]
pub(super) struct QuantizeArgs {
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
    /// The name the output records of the importance matrix (`quantize.imatrix.file`; default:
    /// --imatrix as given), to make again a file made with the matrix elsewhere.
    #[arg(long, value_name = "NAME", requires = "imatrix")]
    imatrix_name: Option<PathBuf>,
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
    /// A file of PATTERN=TYPE entries separated by spaces or newlines, read as --tensor-type
    /// (after the --tensor-type flags; repeatable).
    #[arg(long = "tensor-type-file", value_name = "FILE")]
    tensor_type_file: Vec<PathBuf>,
    /// Override a metadata key in the output: KEY=TYPE:VALUE, TYPE one of int, float, bool, str.
    #[arg(long = "override-kv", value_name = "KEY=TYPE:VALUE", value_parser = KvOverride::parse)]
    override_kv: Vec<KvOverride>,
    /// Leave out these layers (comma-separated numbers); the layers after them are numbered
    /// again and block_count is the count kept, as llama-quantize's --prune-layers.
    #[arg(long, value_name = "L0,L1,…")]
    prune_layers: Option<String>,
    /// Print the per-tensor plan and the output size; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Write the output as shards like the input's (OUT-0000i-of-0000N.gguf), as llama-quantize does.
    #[arg(long)]
    keep_split: bool,
    /// The most MiB of one tensor's rows held in memory at once (as read, as f32 and as
    /// encoded), as llama-quantize's --max-buffer-size: the output is the same at any value.
    /// Default: about 20 MiB for F16 to Q4_K_M (three slabs of 2^20 values), far below
    /// llama-quantize's 8 GiB.
    #[arg(long, value_name = "MiB", value_parser = clap::value_parser!(u64).range(1..))]
    max_buffer_size: Option<u64>,
    /// Choose each tensor's type to fit this file size (bytes, or 250MB, 2GiB):
    /// the plan of `plan-quant`.
    #[arg(long, value_name = "SIZE", value_parser = crate::formats::parse_size)]
    target_size: Option<u64>,
    /// Worker threads (default, and 0 as llama-quantize takes it: all cores); the positional
    /// NTHREADS also sets it.
    #[arg(long)]
    threads: Option<usize>,
    /// The model to quantize (GGUF, any shard of a split, or a legacy GGML file).
    input: PathBuf,
    /// The output; left out, `ggml-model-TYPE.gguf` beside the input (llama-quantize's name).
    #[arg(value_name = "OUT")]
    output: PathBuf,
    /// A preset (Q4_K_M, Q8_0, …) or its llama ftype number; left out with --target-size.
    /// Several, comma-separated (Q4_K_M,Q6_K,Q8_0), make a ladder in one run: OUT names
    /// each file with {preset}.
    #[arg(value_name = "TYPE")]
    preset: Option<String>,
    /// Worker threads, as llama-quantize's last positional (0: all cores).
    #[arg(value_name = "NTHREADS")]
    nthreads: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

fn parse_ggml_type(text: &str) -> Result<GgmlType, String> {
    GgmlType::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = GgmlType::all().map(GgmlType::name).collect();
        match crate::spelling::nearest(text, names.iter().copied()) {
            Some(near) => format!("unknown ggml type `{text}`; did you mean `{near}`?"),
            None => format!("unknown ggml type `{text}` (valid: {})", names.join(", ")),
        }
    })
}
