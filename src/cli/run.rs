//! `quantforge run` and `quantforge plan`: a recipe on the engine, its
//! report as text or JSON.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use super::cache::CacheDir;
use crate::exec::Engine;
use crate::exec::report::{RunReport, Status};
use crate::formats::human_bytes;
use crate::recipe::Recipe;
use crate::store::remote::Layered;
use crate::store::{LocalStore, MemoryStore, Store};

#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    recipe: PathBuf,
    /// Say what would run and why; build nothing (same as `plan`).
    #[arg(long)]
    dry_run: bool,
    /// Workers: nodes at once and codec threads share this budget (default: all cores).
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    #[command(flatten)]
    cache: CacheDir,
    /// Print the run report as JSON (and no progress bars).
    #[arg(long)]
    json: bool,
    /// Also list nodes that were hits.
    #[arg(long, short = 'v')]
    verbose: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct PlanArgs {
    recipe: PathBuf,
    #[command(flatten)]
    cache: CacheDir,
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.dry_run {
        return plan(PlanArgs { recipe: args.recipe, cache: args.cache, json: args.json });
    }
    let recipe = Recipe::load(&args.recipe)?;
    let remote = args.cache.remote.remote(Some(&recipe))?;
    let store = crate::store::open(Some(&args.cache.cache_dir), remote.as_ref().map(|(url, mode)| (url, *mode)))?;
    let engine = Engine::new(store, super::workers(args.jobs))?;
    let progress = !args.json && io::stderr().is_terminal();
    let report = engine.run(&recipe, progress)?;
    const SHOWN: usize = 5;
    for incident in report.cache_incidents.iter().take(SHOWN) {
        eprintln!("warning: cache: {incident}");
    }
    if report.cache_incidents.len() > SHOWN {
        eprintln!("warning: cache: … and {} more (`--json` lists them all)", report.cache_incidents.len() - SHOWN);
    }
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_text(&mut out, &report, args.verbose)?;
    }
    out.flush()?;
    super::cache::report_transfers(report.remote.as_ref(), args.cache.remote.remote_required)?;
    if report.failed() {
        anyhow::bail!("{} of {} nodes failed", report.totals.failed, report.totals.nodes);
    }
    Ok(())
}

pub(super) fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let recipe = Recipe::load(&args.recipe)?;
    // Planning reads the cache and never creates one: without a cache,
    // every node is a miss.
    let local = match LocalStore::open_existing(&args.cache.cache_dir) {
        Ok(store) => Some(store),
        Err(_) if !args.cache.cache_dir.exists() => None,
        Err(e) => return Err(e.into()),
    };
    let store: Arc<dyn Store> = match (local, args.cache.remote.remote(Some(&recipe))?) {
        (Some(local), None) => Arc::new(local),
        (None, None) => Arc::new(MemoryStore::new()),
        (Some(local), Some((url, mode))) => Arc::new(Layered::open(local, &url, mode)?),
        (None, Some((url, mode))) => Arc::new(Layered::scratch(&url, mode)?),
    };
    let engine = Engine::new(store, 1)?;
    let report = engine.plan(&recipe)?;
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_text(&mut out, &report, true)?;
    }
    out.flush()?;
    Ok(())
}

fn status_word(status: Status) -> &'static str {
    match status {
        Status::Hit => "hit",
        Status::Ran => "ran",
        Status::Miss => "miss",
        Status::Skipped => "skipped",
        Status::Failed => "FAILED",
    }
}

fn print_text(out: &mut dyn Write, report: &RunReport, all: bool) -> io::Result<()> {
    const WIDEST_ID: usize = 48;
    let shown = |id: &str| crate::text::shorten(&crate::text::for_terminal(id), WIDEST_ID).into_owned();
    let width = report.nodes.iter().map(|n| shown(&n.id).chars().count()).max().unwrap_or(4);
    for node in &report.nodes {
        let interesting = all || !matches!(node.status, Status::Hit | Status::Skipped) || node.error.is_some();
        if !interesting {
            continue;
        }
        let mut line = format!("{:7}  {:width$}  {:16}", status_word(node.status), shown(&node.id), node.op);
        if node.tensors_encoded + node.tensors_reused + node.tensors_copied > 0 {
            line += &format!(
                "  {} encoded, {} cached, {} copied",
                node.tensors_encoded, node.tensors_reused, node.tensors_copied
            );
        }
        if node.bytes_out > 0 {
            line += &format!("  {}", human_bytes(node.bytes_out as f64));
        }
        if node.status == Status::Ran {
            line += &format!("  {:.2} s", node.duration_ms / 1e3);
        }
        if let Some(path) = &node.output {
            line += &format!("  → {}", path.display());
        }
        writeln!(out, "{}", crate::text::for_terminal(line.trim_end()))?;
        for reason in &node.why {
            writeln!(out, "{:9}{:width$}  because {}", "", "", crate::text::for_terminal(reason))?;
        }
        if let Some(error) = &node.error {
            writeln!(out, "{:9}{:width$}  error: {}", "", "", crate::text::for_terminal(error))?;
        }
    }
    let t = &report.totals;
    let verb = if report.dry_run { "would run" } else { "ran" };
    writeln!(
        out,
        "{}: {} nodes, {} hit, {} {verb}{}; {} tensors encoded, {} from cache, {} copied; {:.0} ms",
        crate::text::for_terminal(&report.recipe),
        t.nodes,
        t.hit,
        if report.dry_run { t.miss } else { t.ran },
        if t.failed > 0 { format!(", {} failed", t.failed) } else { String::new() },
        t.tensors_encoded,
        t.tensors_reused,
        t.tensors_copied,
        report.wall_ms
    )
}
