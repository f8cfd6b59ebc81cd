//! `run --report FILE.html` and `quantforge report DOC.json… -o FILE.html`:
//! one self-contained page (inline CSS and SVG; nothing fetched, no script)
//! drawn from `--json` documents. A run's or plan's DAG with each node's
//! status, reason and time, and per export the type and bits per weight of
//! each tensor by layer (read from the file's header); a `plan-quant`
//! document's types and predicted errors; a `diff` document's errors.
//!
//! The page reads the documents as their schemas (docs/schemas) describe
//! them, as any other consumer would, so a saved document renders later.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::chart::{self, Bar, Scale, escape};
use crate::arch::registry::block_of;
use crate::files::WriteGuard;
use crate::formats::{ModelFile, OpenOptions, human_bytes};

#[derive(Debug, clap::Args)]
pub(super) struct ReportArgs {
    /// `--json` documents of `run`, `plan`, `plan-quant` or `diff`, each a section of the page.
    #[arg(required = true)]
    documents: Vec<PathBuf>,
    /// The page to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    output: PathBuf,
}

pub(super) fn run(args: ReportArgs) -> anyhow::Result<()> {
    let mut documents = Vec::new();
    for path in &args.documents {
        let bytes =
            crate::files::read_regular(path, 1 << 30).with_context(|| format!("cannot read {}", path.display()))?;
        let document: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("{}: not a JSON document", path.display()))?;
        // Relative paths in a run's document are the run's; the document's
        // directory is the best guess of where it ran.
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        documents.push(Document { label: path.display().to_string(), value: document, base });
    }
    // The page may replace a page, never one of the documents it is drawn from.
    let mut guard = WriteGuard::default();
    for path in &args.documents {
        guard.protect(path, "one of the documents the page is drawn from");
    }
    let output = guard.check(&args.output, crate::exec::outputs::REPORT_PAGE)?;
    super::write_output(&output, page(&documents)?.as_bytes())?;
    say!("wrote {}", args.output.display());
    Ok(())
}

/// One `--json` document to draw, and where its relative paths may be found
/// besides the working directory.
pub(super) struct Document {
    pub label: String,
    pub value: Value,
    pub base: PathBuf,
}

const STYLE: &str = "
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; } h3 { font-size: 14px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.hit { background: #d9f0d3; } .ran { background: #c6dbef; } .miss { background: #fdd0a2; }
.skipped { background: #eeeeee; } .failed { background: #fcbba1; }
.summary { font-size: 13px; color: #444; }
svg { display: block; margin: 8px 0; }
";

/// The whole page.
pub(super) fn page(documents: &[Document]) -> anyhow::Result<String> {
    let is_plan_quant = |value: &Value| value.get("budget").is_some() && value.get("predicted_error").is_some();
    // A budget plan's size is drawn across a ladder's quality charts.
    let budgets: Vec<(f64, String)> = documents
        .iter()
        .filter(|d| is_plan_quant(&d.value))
        .map(|d| (plan_bits_per_weight(&d.value), format!("plan {}", human_bytes(number(&d.value, "budget")))))
        .collect();
    let mut body = String::new();
    for document in documents {
        let value = &document.value;
        let section = if value.get("nodes").is_some() && value.get("totals").is_some() {
            run_section(document, &budgets)
        } else if is_plan_quant(value) {
            plan_quant_section(&document.label, value)
        } else if value.get("only_in_a").is_some() && value.get("total").is_some() {
            diff_section(&document.label, value)
        } else {
            anyhow::bail!("{}: not a run, plan, plan-quant or diff document (`--json`)", document.label)
        };
        body.push_str(&section);
    }
    let title = documents.iter().map(|d| d.label.as_str()).collect::<Vec<_>>().join(", ");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>quantforge: {}</title>\
         <style>{STYLE}</style></head>\n<body>\n<h1>quantforge report</h1>\n{body}</body></html>\n",
        escape(&title)
    ))
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}

fn number(value: &Value, field: &str) -> f64 {
    value.get(field).and_then(Value::as_f64).unwrap_or(0.0)
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    let items = value.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
}

fn run_section(document: &Document, budgets: &[(f64, String)]) -> String {
    let report = &document.value;
    let nodes = report["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let totals = &report["totals"];
    let mut out = String::new();
    let kind = if report["dry_run"].as_bool() == Some(true) { "plan" } else { "run" };
    let _ = writeln!(out, "<h2>{kind} of <code>{}</code></h2>", escape(text(report, "recipe")));
    let _ = writeln!(
        out,
        "<p class=\"summary\">{} nodes: {} hit, {} ran, {} to run, {} skipped, {} failed; {} tensors encoded, \
         {} shared within the run, {} from earlier runs, {} copied; {:.2} s on {} workers</p>",
        number(totals, "nodes"),
        number(totals, "hit"),
        number(totals, "ran"),
        number(totals, "miss"),
        number(totals, "skipped"),
        number(totals, "failed"),
        number(totals, "tensors_encoded"),
        number(totals, "tensors_shared"),
        number(totals, "tensors_reused"),
        number(totals, "tensors_copied"),
        number(report, "wall_ms") / 1e3,
        number(report, "jobs")
    );
    out.push_str(&dag(report));
    out.push_str("<table><tr><th>status</th><th>node</th><th>op</th><th>time</th><th>out</th><th>reason</th></tr>\n");
    for node in nodes {
        let status = text(node, "status");
        let reason = match node.get("error").and_then(Value::as_str) {
            Some(error) => error.to_owned(),
            None => strings(node, "why").join("; "),
        };
        let _ = writeln!(
            out,
            "<tr class=\"{status}\"><td>{status}</td><td>{}</td><td>{}</td><td class=\"n\">{:.0} ms</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            escape(text(node, "id")),
            escape(text(node, "op")),
            number(node, "duration_ms"),
            human_bytes(number(node, "bytes_out")),
            escape(&reason)
        );
    }
    out.push_str("</table>\n");
    // One chart per `evaluate` step: each measures against its own base and text.
    let evaluated: Vec<&Value> = nodes.iter().filter(|n| n.get("evaluation").is_some_and(Value::is_object)).collect();
    let mut steps: Vec<&str> = evaluated.iter().map(|n| text(n, "step")).collect();
    steps.dedup();
    for step in steps {
        let group: Vec<&Value> = evaluated.iter().copied().filter(|n| text(n, "step") == step).collect();
        out.push_str(&quality_section(step, &group, budgets));
    }
    for node in nodes {
        // An export found up to date wrote nothing: its file is where it said.
        let written: Vec<String> =
            node["files"].as_array().into_iter().flatten().map(|f| text(f, "path").to_owned()).collect();
        let files = match (written.is_empty(), node.get("output").and_then(Value::as_str)) {
            (true, Some(output)) => vec![output.to_owned()],
            _ => written,
        };
        for file in files {
            out.push_str(&export_section(text(node, "id"), Path::new(&file), &document.base));
        }
    }
    out
}

const BOX_WIDTH: f64 = 220.0;
const BOX_HEIGHT: f64 = 44.0;
const COLUMN: f64 = 270.0;
const ROW: f64 = 58.0;
const MARGIN: f64 = 10.0;
/// Characters of a node's id drawn in its box (all of it in the tooltip).
const ID_CHARS: usize = 30;

/// The DAG as columns by depth: recipe inputs first, then each node one
/// column right of its deepest upstream node.
fn dag(report: &Value) -> String {
    let nodes = report["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let inputs: Vec<&str> = report["inputs"].as_array().into_iter().flatten().map(|i| text(i, "name")).collect();
    let by_id: HashMap<&str, &Value> = nodes.iter().map(|n| (text(n, "id"), n)).collect();
    let mut depth: HashMap<&str, usize> = HashMap::new();
    for node in nodes {
        depth_of(text(node, "id"), &by_id, &mut depth, 0);
    }
    let mut columns: Vec<Vec<(&str, Option<&Value>)>> = vec![inputs.iter().map(|i| (*i, None)).collect()];
    for node in nodes {
        let d = depth[text(node, "id")];
        if columns.len() <= d {
            columns.resize(d + 1, Vec::new());
        }
        columns[d].push((text(node, "id"), Some(node)));
    }
    let mut place: HashMap<(bool, &str), (f64, f64)> = HashMap::new();
    for (c, column) in columns.iter().enumerate() {
        for (r, (id, node)) in column.iter().enumerate() {
            place.insert((node.is_some(), id), (MARGIN + c as f64 * COLUMN, MARGIN + r as f64 * ROW));
        }
    }
    let rows = columns.iter().map(Vec::len).max().unwrap_or(0);
    let width = MARGIN * 2.0 + (columns.len().max(1) - 1) as f64 * COLUMN + BOX_WIDTH;
    let height = MARGIN * 2.0 + rows.max(1) as f64 * ROW;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"dag\" width=\"{width:.0}\" height=\"{height:.0}\" \
         font-family=\"sans-serif\" role=\"img\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"8\" refY=\"4\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#888\"/></marker></defs>\n"
    );
    for node in nodes {
        let to = place[&(true, text(node, "id"))];
        let sources = strings(node, "from").into_iter().map(|f| (true, f));
        let sources = sources.chain(strings(node, "inputs").into_iter().map(|i| (false, i)));
        for (is_node, source) in sources {
            let Some(from) = place.get(&(is_node, source.as_str())) else { continue };
            let (x1, y1, x2, y2) = (from.0 + BOX_WIDTH, from.1 + BOX_HEIGHT / 2.0, to.0, to.1 + BOX_HEIGHT / 2.0);
            let bend = (x2 - x1) / 2.0;
            let _ = writeln!(
                svg,
                "<path d=\"M{x1:.1},{y1:.1} C{:.1},{y1:.1} {:.1},{y2:.1} {x2:.1},{y2:.1}\" fill=\"none\" stroke=\"#888\" \
                 marker-end=\"url(#arrow)\"/>",
                x1 + bend,
                x2 - bend
            );
        }
    }
    for column in &columns {
        for (id, node) in column {
            let (x, y) = place[&(node.is_some(), *id)];
            let (class, second_line, tooltip) = match node {
                None => ("input", "input".to_owned(), format!("input {id}")),
                Some(node) => {
                    let status = text(node, "status");
                    let time = match status {
                        "ran" | "hit" => format!(" · {:.0} ms", number(node, "duration_ms")),
                        _ => String::new(),
                    };
                    let mut tooltip = format!("{id}\n{} · {status}\nkey {}", text(node, "op"), text(node, "key"));
                    for reason in strings(node, "why")
                        .iter()
                        .chain(node.get("error").and_then(Value::as_str).map(str::to_owned).iter())
                    {
                        let _ = write!(tooltip, "\n{reason}");
                    }
                    (status, format!("{} · {status}{time}", text(node, "op")), tooltip)
                }
            };
            let shown: String = match id.chars().count() > ID_CHARS {
                true => id.chars().take(ID_CHARS - 1).chain(['…']).collect(),
                false => (*id).to_owned(),
            };
            let _ = writeln!(
                svg,
                "<g class=\"node {class}\" data-id=\"{}\" data-status=\"{class}\"><title>{}</title>\
                 <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{BOX_WIDTH}\" height=\"{BOX_HEIGHT}\" rx=\"5\" fill=\"{}\" stroke=\"#666\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#444\">{}</text></g>",
                escape(id),
                escape(&tooltip),
                status_colour(class),
                x + 8.0,
                y + 18.0,
                escape(&shown),
                x + 8.0,
                y + 34.0,
                escape(&second_line)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

fn depth_of<'a>(
    id: &'a str,
    by_id: &HashMap<&'a str, &'a Value>,
    depth: &mut HashMap<&'a str, usize>,
    seen: usize,
) -> usize {
    if let Some(d) = depth.get(id) {
        return *d;
    }
    // A document is the program's, but a hand-edited cycle must not recurse forever.
    if seen > by_id.len() {
        return 1;
    }
    let upstream = by_id.get(id).and_then(|n| n["from"].as_array()).map(Vec::as_slice).unwrap_or_default();
    let d = 1 + upstream
        .iter()
        .filter_map(Value::as_str)
        .filter_map(|f| by_id.get_key_value(f).map(|(k, _)| *k))
        .map(|f| depth_of(f, by_id, depth, seen + 1))
        .max()
        .unwrap_or(0);
    depth.insert(id, d);
    d
}

fn status_colour(status: &str) -> &'static str {
    match status {
        "hit" => "#d9f0d3",
        "ran" => "#c6dbef",
        "miss" => "#fdd0a2",
        "failed" => "#fcbba1",
        "input" => "#ffffff",
        _ => "#eeeeee",
    }
}

/// One layer's tensors in all: what a reader of the chart wants, since a
/// bar per tensor draws a few KiB of F32 norms tallest.
struct Layer<'a> {
    name: String,
    block: Option<u64>,
    /// The type holding most of its bytes: the bar's colour.
    ty: &'a str,
    elements: u64,
    bytes: u64,
}

impl Layer<'_> {
    fn bits_per_weight(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elements.max(1) as f64
    }
}

/// `(name, type, elements, bytes)` rows summed by layer (`blk.N`, the rest
/// as "other"), in order of first appearance.
fn by_layer<'a>(rows: &[(&str, &'a str, u64, u64)]) -> Vec<Layer<'a>> {
    let mut layers: Vec<(Layer<'a>, Vec<(&'a str, u64)>)> = Vec::new();
    for &(name, ty, elements, bytes) in rows {
        let block = block_of(name);
        let index = match layers.iter().position(|(l, _)| l.block == block) {
            Some(index) => index,
            None => {
                let name = block.map_or_else(|| "other tensors".to_owned(), |n| format!("blk.{n}"));
                layers.push((Layer { name, block, ty, elements: 0, bytes: 0 }, Vec::new()));
                layers.len() - 1
            }
        };
        let (layer, types) = &mut layers[index];
        (layer.elements, layer.bytes) = (layer.elements + elements, layer.bytes + bytes);
        match types.iter_mut().find(|(t, _)| *t == ty) {
            Some(entry) => entry.1 += bytes,
            None => types.push((ty, bytes)),
        }
    }
    layers
        .into_iter()
        .map(|(mut layer, types)| {
            layer.ty = types.iter().max_by_key(|(_, bytes)| *bytes).map_or(layer.ty, |(ty, _)| ty);
            layer
        })
        .collect()
}

/// An export's file: bits per weight by layer (weighted by bytes, coloured
/// by the type holding most of them), and the types in all, from its header.
fn export_section(id: &str, path: &Path, base: &Path) -> String {
    let mut out = format!("<h3>{} → <code>{}</code></h3>\n", escape(id), escape(&path.display().to_string()));
    let found = [path.to_owned(), base.join(path)].into_iter().find(|p| p.is_file());
    let model = match found.map(|p| ModelFile::open(&p, OpenOptions::default())) {
        Some(Ok(model)) => model,
        Some(Err(e)) => return out + &format!("<p>cannot read it: {}</p>\n", escape(&e.to_string())),
        None => return out + "<p>not found here (moved since the run, or written as shards)</p>\n",
    };
    let rows: Vec<(&str, &str, u64, u64)> =
        model.tensors.iter().map(|t| (t.name.as_str(), t.ggml_type.name(), t.n_elements(), t.n_bytes())).collect();
    let layers = by_layer(&rows);
    let bars: Vec<Bar> = layers
        .iter()
        .map(|layer| Bar { name: &layer.name, ty: layer.ty, block: layer.block, value: layer.bits_per_weight() })
        .collect();
    let (elements, bytes): (u64, u64) = rows.iter().fold((0, 0), |(e, b), r| (e + r.2, b + r.3));
    let title = format!(
        "{} tensors, {}, {:.2} bits per weight",
        rows.len(),
        human_bytes(bytes as f64),
        bytes as f64 * 8.0 / elements.max(1) as f64
    );
    out.push_str(&chart::by_layer(&title, "bits per weight", Scale::Bits, &bars));
    let mut types: Vec<(&str, usize, u64)> = Vec::new();
    for (_, ty, _, bytes) in &rows {
        match types.iter_mut().find(|(t, _, _)| t == ty) {
            Some(entry) => (entry.1, entry.2) = (entry.1 + 1, entry.2 + bytes),
            None => types.push((ty, 1, *bytes)),
        }
    }
    out.push_str("<table><tr><th>type</th><th>tensors</th><th>bytes</th></tr>\n");
    for (ty, count, bytes) in types {
        let _ = writeln!(
            out,
            "<tr><td>{ty}</td><td class=\"n\">{count}</td><td class=\"n\">{}</td></tr>",
            human_bytes(bytes as f64)
        );
    }
    out.push_str("</table>\n");
    out
}

fn plan_quant_section(label: &str, plan: &Value) -> String {
    let tensors = plan["tensors"].as_array().map(Vec::as_slice).unwrap_or_default();
    let planned: Vec<&Value> =
        tensors.iter().filter(|t| t["candidates"].as_array().is_some_and(|c| !c.is_empty())).collect();
    fn bar(t: &Value, value: f64) -> Bar<'_> {
        Bar { name: text(t, "name"), ty: text(t, "type"), block: t["block"].as_u64(), value }
    }
    let bits: Vec<Bar> =
        planned.iter().map(|t| bar(t, number(t, "bytes") * 8.0 / number(t, "elements").max(1.0))).collect();
    let errors: Vec<Bar> = planned.iter().map(|t| bar(t, number(t, "error"))).collect();
    let mut out = format!("<h2>size plan <code>{}</code></h2>\n", escape(label));
    let _ = writeln!(
        out,
        "<p class=\"summary\">file {} for a budget of {}; predicted weighted squared error {:.4e}</p>",
        human_bytes(number(plan, "file_size")),
        human_bytes(number(plan, "budget")),
        number(plan, "predicted_error")
    );
    out.push_str(&chart::by_layer("bits per weight of the chosen type", "bits per weight", Scale::Bits, &bits));
    out.push_str(&chart::by_layer("predicted weighted squared error", "error (log)", Scale::Log, &errors));
    out
}

/// Bits per weight of a `plan-quant` document's plan: its tensors' bytes
/// over their weights.
fn plan_bits_per_weight(plan: &Value) -> f64 {
    let tensors = plan["tensors"].as_array().map(Vec::as_slice).unwrap_or_default();
    let bytes: f64 = tensors.iter().map(|t| number(t, "bytes")).sum();
    let weights: f64 = tensors.iter().map(|t| number(t, "elements")).sum();
    if weights > 0.0 { bytes * 8.0 / weights } else { 0.0 }
}

/// A ladder's quality against its size: each evaluated model's mean KL
/// divergence and perplexity by its bits per weight, and a table of what
/// `llama-perplexity` measured.
fn quality_section(step: &str, evaluated: &[&Value], budgets: &[(f64, String)]) -> String {
    let labels: Vec<String> = evaluated.iter().map(|n| model_label(text(n, "id"))).collect();
    let points = |y: &str, error: &str| -> Vec<chart::Point<'_>> {
        evaluated
            .iter()
            .zip(&labels)
            .map(|(n, label)| {
                let e = &n["evaluation"];
                let error = if error.is_empty() { 0.0 } else { number(e, error) };
                chart::Point { label, x: number(e, "bits_per_weight"), y: number(e, y), error }
            })
            .collect()
    };
    let mut rules: Vec<chart::Rule> = budgets.iter().map(|(x, label)| chart::Rule::AtX(*x, label)).collect();
    let mut out = format!("<h3>quality against size: <code>{}</code></h3>\n", escape(step));
    out.push_str(&chart::quality(
        "mean KL divergence from the base against bits per weight",
        "mean KLD (log)",
        true,
        &points("kld_mean", "kld_mean_error"),
        &rules,
    ));
    let base_ppl = number(&evaluated[0]["evaluation"], "ppl_base");
    rules.push(chart::Rule::AtY(base_ppl, "base"));
    out.push_str(&chart::quality(
        "perplexity against bits per weight",
        "perplexity",
        false,
        &points("ppl", "ppl_error"),
        &rules,
    ));
    out.push_str(
        "<table><tr><th>model</th><th>bits per weight</th><th>size</th><th>PPL</th><th>PPL(Q)/PPL(base)</th>\
         <th>mean KLD</th><th>median KLD</th><th>99% KLD</th><th>same top token</th></tr>\n",
    );
    let mut rows: Vec<(&Value, &String)> = evaluated.iter().copied().zip(&labels).collect();
    rows.sort_by(|a, b| {
        number(&b.0["evaluation"], "bits_per_weight").total_cmp(&number(&a.0["evaluation"], "bits_per_weight"))
    });
    for (node, label) in rows {
        let e = &node["evaluation"];
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{}</td><td class=\"n\">{} ± {}</td>\
             <td class=\"n\">{:.4}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{} ± {} %</td></tr>",
            escape(label),
            number(e, "bits_per_weight"),
            human_bytes(number(e, "bytes")),
            number(e, "ppl"),
            number(e, "ppl_error"),
            number(e, "ln_ppl_ratio").exp(),
            number(e, "kld_mean"),
            number(e, "kld_median"),
            number(e, "kld_p99"),
            number(e, "same_top_p"),
            number(e, "same_top_p_error")
        );
    }
    out.push_str("</table>\n");
    out
}

/// An evaluation node's model, by the fan-out values that name it
/// (`eval[preset=Q4_K_M]` → `Q4_K_M`), else the node's id.
fn model_label(id: &str) -> String {
    let Some(values) = id.split_once('[').and_then(|(_, rest)| rest.strip_suffix(']')) else { return id.to_owned() };
    values.split(',').map(|kv| kv.split_once('=').map_or(kv, |(_, v)| v)).collect::<Vec<_>>().join(", ")
}

fn diff_section(label: &str, diff: &Value) -> String {
    let tensors = diff["tensors"].as_array().map(Vec::as_slice).unwrap_or_default();
    let bars: Vec<Bar> = tensors
        .iter()
        .map(|t| Bar {
            name: text(t, "name"),
            ty: text(t, "type_b"),
            block: block_of(text(t, "name")),
            value: number(t, "rmse"),
        })
        .collect();
    let total = &diff["total"];
    let mut out = format!("<h2>diff <code>{}</code></h2>\n", escape(label));
    let _ = writeln!(
        out,
        "<p class=\"summary\">{} tensors compared; RMSE {:.4e}, max abs error {:.4e}, cosine {:.6}</p>",
        tensors.len(),
        number(total, "rmse"),
        number(total, "max_abs_error"),
        number(total, "cosine")
    );
    out.push_str(&chart::by_layer("RMSE per tensor, coloured by B's type", "RMSE (log)", Scale::Log, &bars));
    let mut worst: Vec<&Value> = tensors.iter().collect();
    worst.sort_by(|a, b| number(b, "rmse").total_cmp(&number(a, "rmse")));
    out.push_str("<table><tr><th>tensor</th><th>A</th><th>B</th><th>RMSE</th><th>cosine</th></tr>\n");
    for t in worst.iter().take(10) {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{:.4e}</td><td class=\"n\">{:.6}</td></tr>",
            escape(text(t, "name")),
            escape(text(t, "type_a")),
            escape(text(t, "type_b")),
            number(t, "rmse"),
            number(t, "cosine")
        );
    }
    out.push_str("</table>\n");
    out
}
