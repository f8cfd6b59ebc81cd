//! `quantforge plan-quant`: the size-budget planner's table as text, JSON
//! or an SVG chart per layer; and the plan behind `quantize --target-size`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::chart::{self, Bar, Scale};
use crate::files::{Replaces, WriteGuard};
use crate::formats::parse_size;
use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::quant::budget::{BudgetPlan, Model, PROBE_PRESET, Target, plan_budget};
use crate::quant::plan::{QuantizeOptions, load_imatrix};
use crate::text::{Name, name_width};

#[derive(Debug, clap::Args)]
pub struct PlanQuantArgs {
    /// The model to plan a quantization of (GGUF).
    input: PathBuf,
    /// The output file's size: bytes, or with a unit (250MB, 2GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "target_bpw",
          required_unless_present = "target_bpw")]
    target_size: Option<u64>,
    /// Bits per weight over every tensor element (the header on top), above 0 and at most 32.
    #[arg(long, value_name = "BITS", value_parser = parse_bits_per_weight)]
    target_bpw: Option<f64>,
    /// Importance matrix: weighs the errors and steers the quantizers, as in `quantize`.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// Weigh every tensor's error alike (by default embeddings, output, first and
    /// last blocks count twice and attention one and a half times).
    #[arg(long)]
    no_protect: bool,
    /// Also write the plan as an SVG chart, one group of bars per layer.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// A bits-per-weight target: finite, above 0, and at most F32's 32 (no
/// type a plan chooses from holds more).
fn parse_bits_per_weight(text: &str) -> Result<f64, String> {
    let bits: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of bits per weight"))?;
    match bits.is_finite() && bits > 0.0 && bits <= 32.0 {
        true => Ok(bits),
        false => Err(format!("{text} bits per weight: a target lies above 0 and at most 32 (F32)")),
    }
}

pub fn run(args: PlanQuantArgs, json: bool) -> anyhow::Result<()> {
    let target = match (args.target_size, args.target_bpw) {
        (Some(size), _) => Target::Size(size),
        (None, Some(bpw)) => Target::BitsPerWeight(bpw),
        (None, None) => unreachable!("clap requires one of the targets"),
    };
    // The chart replaces a chart, never the model it is drawn from.
    let mut guard = WriteGuard::default();
    guard.protect(&args.input, "the model being planned");
    if let Some(imatrix) = &args.imatrix {
        guard.protect(imatrix, "the importance matrix");
    }
    const CHART: Replaces = Replaces::FileStarting { prefix: b"<svg", what: "an SVG chart" };
    let svg_path = args.svg.as_ref().map(|path| guard.check(path, CHART)).transpose().context("--svg")?;
    let plan = plan_for(&args.input, target, args.imatrix.as_deref(), !args.no_protect, base_options())
        .with_context(|| format!("cannot plan {}", args.input.display()))?;
    if let Some(path) = &svg_path {
        super::write_output(path, svg(&plan).as_bytes())?;
    }
    if json {
        return super::json::print(&plan);
    }
    let mut out = io::stdout().lock();
    print_text(&mut out, &plan)?;
    out.flush()?;
    Ok(())
}

/// Options that leave every choice to the planner.
pub fn base_options() -> QuantizeOptions {
    QuantizeOptions::new(PROBE_PRESET)
}

/// Plans `input` under `target`, `base` supplying the options beyond the types.
pub fn plan_for(
    input: &Path,
    target: Target,
    imatrix: Option<&Path>,
    protect: bool,
    base: QuantizeOptions,
) -> anyhow::Result<BudgetPlan> {
    let model = ModelFile::open(input, OpenOptions::default())?;
    let imatrix = match imatrix {
        Some(path) => load_imatrix(path, path, &base)?,
        None => None,
    };
    let backend = crate::backend::resolve(crate::backend::Choice::Auto)?;
    let planned = Model { metadata: &model.metadata, tensors: &model.tensors, rows: &model, backend: &*backend };
    Ok(plan_budget(&planned, &base, imatrix.as_ref(), target, protect)?)
}

fn print_text(out: &mut dyn Write, plan: &BudgetPlan) -> io::Result<()> {
    let width = plan.tensors.iter().map(|t| name_width(&t.name)).max().unwrap_or(6).max(6);
    writeln!(
        out,
        "{:width$}  {:7}  {:>10}  {:>6}  {:>12}  {:>9}",
        "tensor", "type", "bytes", "bpw", "pred. error", "kurtosis"
    )?;
    for t in &plan.tensors {
        let bpw = t.bytes as f64 * 8.0 / t.elements.max(1) as f64;
        let kurtosis = t.stats.as_ref().map(|s| format!("{:.2}", s.kurtosis)).unwrap_or_default();
        let error = if t.candidates.is_empty() { "kept".to_owned() } else { format!("{:.4e}", t.error) };
        writeln!(
            out,
            "{:width$}  {:7}  {:>10}  {bpw:>6.2}  {error:>12}  {kurtosis:>9}",
            Name(&t.name),
            t.ty,
            human_bytes(t.bytes as f64),
        )?;
    }
    writeln!(
        out,
        "file {} ({} bytes) for a budget of {} ({} bytes); predicted weighted squared error {:.4e}",
        human_bytes(plan.file_size as f64),
        plan.file_size,
        human_bytes(plan.budget as f64),
        plan.budget,
        plan.predicted_error
    )
}

/// One group of bars per layer (blocks in order, then the tensors outside
/// blocks), one bar per planned tensor: its bits per weight, coloured by type.
fn svg(plan: &BudgetPlan) -> String {
    let bars: Vec<Bar> = plan
        .tensors
        .iter()
        .filter(|t| !t.candidates.is_empty())
        .map(|t| Bar {
            name: &t.name,
            ty: t.ty,
            block: t.block,
            value: t.bytes as f64 * 8.0 / t.elements.max(1) as f64,
        })
        .collect();
    let title = format!(
        "bits per weight per tensor, by layer; file {} for a budget of {}",
        human_bytes(plan.file_size as f64),
        human_bytes(plan.budget as f64)
    );
    chart::by_layer(&title, "bits per weight", Scale::Bits, &bars)
}
