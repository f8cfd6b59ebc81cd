//! `quantforge plan-quant`: the size-budget planner's table as text, JSON
//! or an SVG chart per layer; and the plan behind `quantize --target-size`.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::formats::parse_size;
use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::quant::budget::{BudgetPlan, Model, Target, plan_budget, probe_preset};
use crate::quant::plan::{QuantizeOptions, load_imatrix};

#[derive(Debug, clap::Args)]
pub struct PlanQuantArgs {
    input: PathBuf,
    /// The output file's size: bytes, or with a unit (250MB, 2GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "target_bpw",
          required_unless_present = "target_bpw")]
    target_size: Option<u64>,
    /// Bits per weight over every tensor element (the header on top).
    #[arg(long, value_name = "BITS")]
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

pub fn run(args: PlanQuantArgs, json: bool) -> anyhow::Result<()> {
    let target = match (args.target_size, args.target_bpw) {
        (Some(size), _) => Target::Size(size),
        (None, Some(bpw)) => Target::BitsPerWeight(bpw),
        (None, None) => unreachable!("clap requires one of the targets"),
    };
    let plan = plan_for(&args.input, target, args.imatrix.as_deref(), !args.no_protect, base_options())?;
    if let Some(path) = &args.svg {
        std::fs::write(path, svg(&plan)).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
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
    QuantizeOptions::new(probe_preset())
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
    let width = plan.tensors.iter().map(|t| t.name.len()).max().unwrap_or(6).max(6);
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
            t.name,
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
    const COLOURS: [(&str, &str); 13] = [
        ("Q2_K", "#d73027"),
        ("Q3_K", "#f46d43"),
        ("Q4_0", "#fdae61"),
        ("Q4_1", "#ffffbf"),
        ("Q4_K", "#fee08b"),
        ("Q5_0", "#d9ef8b"),
        ("Q5_1", "#c2e699"),
        ("Q5_K", "#a6d96a"),
        ("Q6_K", "#66bd63"),
        ("Q8_0", "#1a9850"),
        ("F16", "#3288bd"),
        ("BF16", "#3288bd"),
        ("F32", "#5e4fa2"),
    ];
    let colour = |ty: &str| COLOURS.iter().find(|(t, _)| *t == ty).map_or("#999999", |(_, c)| c);
    let planned: Vec<_> = plan.tensors.iter().filter(|t| !t.candidates.is_empty()).collect();
    let mut layers: Vec<Option<u64>> = planned.iter().map(|t| t.block).collect();
    layers.sort_by_key(|b| b.map_or(u64::MAX, |b| b));
    layers.dedup();
    let (bar, gap, height, top, left): (f64, f64, f64, f64, f64) = (4.0, 8.0, 200.0, 20.0, 40.0);
    let max_bpw = 16.0;
    let mut body = String::new();
    let mut x = left;
    for layer in &layers {
        let start = x;
        for t in planned.iter().filter(|t| t.block == *layer) {
            let bpw = t.bytes as f64 * 8.0 / t.elements.max(1) as f64;
            let h = height * bpw.min(max_bpw) / max_bpw;
            let _ = writeln!(
                body,
                r#"<rect x="{x:.1}" y="{:.1}" width="{bar}" height="{h:.1}" fill="{}"><title>{} {} {bpw:.2} bpw</title></rect>"#,
                top + height - h,
                colour(t.ty),
                t.name,
                t.ty
            );
            x += bar;
        }
        let label = layer.map_or("other".to_owned(), |b| b.to_string());
        let _ = writeln!(
            body,
            r#"<text x="{:.1}" y="{:.1}" font-size="8" text-anchor="middle">{label}</text>"#,
            (start + x) / 2.0,
            top + height + 12.0
        );
        x += gap;
    }
    for bpw in [2.0, 4.0, 8.0, 16.0] {
        let y = top + height - height * bpw / max_bpw;
        let _ = writeln!(
            body,
            r##"<line x1="{left}" x2="{x:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ccc" stroke-width="0.5"/><text x="{:.1}" y="{:.1}" font-size="8" text-anchor="end">{bpw}</text>"##,
            left - 4.0,
            y + 3.0
        );
    }
    let mut legend_x = left;
    let legend_y = top + height + 30.0;
    let mut seen: Vec<&str> = planned.iter().map(|t| t.ty).collect();
    seen.sort_unstable();
    seen.dedup();
    for ty in seen {
        let _ = writeln!(
            body,
            r#"<rect x="{legend_x:.1}" y="{:.1}" width="8" height="8" fill="{}"/><text x="{:.1}" y="{legend_y:.1}" font-size="9">{ty}</text>"#,
            legend_y - 8.0,
            colour(ty),
            legend_x + 11.0
        );
        legend_x += 50.0;
    }
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{:.0}" font-family="sans-serif">
<text x="{left}" y="12" font-size="10">bits per weight per tensor, by layer; file {} for a budget of {}</text>
{body}</svg>
"#,
        x.max(legend_x) + left,
        legend_y + 10.0,
        human_bytes(plan.file_size as f64),
        human_bytes(plan.budget as f64)
    )
}
