//! `quantforge run`, `plan` and `work`: a recipe on the engine (or handed
//! to Slurm as work units), its report as text or JSON.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::cache::CacheDir;
use crate::exec::Engine;
use crate::exec::outputs::{self, RunOutputs};
use crate::exec::provenance::{attest, lock};
use crate::exec::report::{RunReport, Status};
use crate::exec::units::{self, UnitPlan, UnitSize};
use crate::formats::human_bytes;
use crate::recipe::Recipe;
use crate::slurm;
use crate::store::remote::{Layered, RemoteMode};
use crate::store::{LocalStore, MemoryStore, Store};

#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    /// The recipe (TOML) to build.
    recipe: PathBuf,
    /// Build only what these need: step names, node ids (`q[preset=Q8_0]`) or export paths.
    targets: Vec<String>,
    /// Where the work runs: here, or as Slurm job arrays meeting in the shared cache (--cache-url).
    #[arg(long, value_enum, default_value_t = Executor::Local)]
    executor: Executor,
    #[command(flatten)]
    slurm: SlurmArgs,
    #[command(flatten)]
    pins: PinArgs,
    /// Say what would run and why; build nothing (same as `plan`).
    #[arg(long)]
    dry_run: bool,
    /// Workers: nodes at once and codec threads share this budget (default: the recipe's
    /// `jobs`, else all cores).
    #[arg(long, short = 'j', value_parser = super::parse_workers)]
    jobs: Option<usize>,
    /// Also write the run as one self-contained HTML page: the DAG, and each export's types by layer.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Compute everything the run (or its targets) needs, whatever the cache holds.
    #[arg(long, conflicts_with = "dry_run")]
    force: bool,
    /// Fail, naming it, when an input no longer matches the recipe's lock file
    /// (`x.toml` → `x.lock`), or when the run would change the lock.
    #[arg(long, conflicts_with = "dry_run")]
    locked: bool,
    #[command(flatten)]
    cache: CacheDir,
    #[command(flatten)]
    link: super::cache::LinkArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Executor {
    Local,
    Slurm,
}

/// What `--executor slurm` asks Slurm for; CPUs and memory default to the units' estimates.
#[derive(Debug, clap::Args)]
struct SlurmArgs {
    /// The partition to submit to (sbatch --partition; default: the cluster's).
    #[arg(long, help_heading = "Slurm")]
    partition: Option<String>,
    /// The account the tasks are charged to (sbatch --account).
    #[arg(long, help_heading = "Slurm")]
    account: Option<String>,
    /// Time limit of each task, in sbatch's form (`30`, `1:00:00`).
    #[arg(long, help_heading = "Slurm")]
    time: Option<String>,
    /// CPUs per task (default: 4, at most the partition's largest node's).
    #[arg(long, help_heading = "Slurm", value_parser = clap::value_parser!(u32).range(1..))]
    cpus_per_task: Option<u32>,
    /// Memory per task: a number of MiB, or with K, M, G or T (default: from the units' slab sizes).
    #[arg(long, help_heading = "Slurm", value_parser = parse_mem_mb)]
    mem: Option<u64>,
    /// Tasks of one array running at once.
    #[arg(long, help_heading = "Slurm", value_parser = clap::value_parser!(u64).range(1..))]
    max_parallel: Option<u64>,
    /// An argument for every sbatch, as it is (repeatable): --sbatch-arg=--qos=long.
    #[arg(long = "sbatch-arg", value_name = "ARG", help_heading = "Slurm", allow_hyphen_values = true)]
    sbatch_args: Vec<String>,
    /// Follow the jobs to their end with a progress bar; fail naming any failed task.
    #[arg(long, help_heading = "Slurm")]
    wait: bool,
    /// Estimated work per unit, in one core's time: 90s, 5m, 1h.
    #[arg(long, help_heading = "Slurm", value_parser = UnitSize::parse, default_value = "5m")]
    unit_size: UnitSize,
}

#[derive(Debug, clap::Args)]
pub(super) struct PlanArgs {
    /// The recipe (TOML) to plan.
    recipe: PathBuf,
    #[command(flatten)]
    cache: CacheDir,
    /// Also write the plan as one self-contained HTML page (the DAG, each node's reason).
    #[arg(long, value_name = "FILE.html", conflicts_with = "units")]
    report: Option<PathBuf>,
    /// List what is still to compute as work units for `quantforge work`, and the exports to assemble.
    #[arg(long)]
    units: bool,
    /// Estimated work per unit, in one core's time: 90s, 5m, 1h.
    #[arg(long, requires = "units", value_parser = UnitSize::parse, default_value = "5m")]
    unit_size: UnitSize,
    /// Group the units into N jobs and print a CI matrix: {"include": [{"index": 0, "units": [...]}, ...]}.
    #[arg(long, value_name = "N", requires = "units", value_parser = clap::value_parser!(u64).range(1..))]
    matrix: Option<u64>,
    /// Exit with status 2 when there is work to do (0 when everything is up to date), for CI.
    #[arg(long)]
    exit_code: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct WorkArgs {
    /// The recipe (TOML) the units were planned from.
    recipe: PathBuf,
    /// The units to compute, as `plan --units` lists them (repeatable, or comma-separated).
    #[arg(long = "unit", value_name = "ID", required = true, value_delimiter = ',')]
    units: Vec<String>,
    /// The unit size the units were planned with.
    #[arg(long, value_parser = UnitSize::parse, default_value = "5m")]
    unit_size: UnitSize,
    /// Worker threads (default: all cores).
    #[arg(long, short = 'j', value_parser = super::parse_workers)]
    jobs: Option<usize>,
    #[command(flatten)]
    cache: CacheDir,
    #[command(flatten)]
    pins: PinArgs,
}

/// Input hashes handed over by the planner that submitted this task.
#[derive(Debug, clap::Args)]
struct PinArgs {
    /// Take the inputs' hashes from this file (written by `run --executor slurm`) while their stats match.
    #[arg(long, value_name = "FILE")]
    input_pins: Option<PathBuf>,
}

impl PinArgs {
    fn pins(&self) -> anyhow::Result<Vec<crate::store::fingerprint::Pin>> {
        const MAX_PINS_BYTES: u64 = 16 << 20;
        let Some(path) = &self.input_pins else { return Ok(Vec::new()) };
        let bytes = crate::files::read_regular(path, MAX_PINS_BYTES)
            .map_err(|e| anyhow::anyhow!("input pins {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("input pins {}: {e}", path.display()))
    }
}

fn parse_mem_mb(text: &str) -> Result<u64, String> {
    let (number, scale) = match text.char_indices().last() {
        Some((i, c @ ('K' | 'M' | 'G' | 'T'))) => (&text[..i], c),
        _ => (text, 'M'),
    };
    let n: u64 = number.parse().map_err(|_| format!("`{text}` is not a size such as 4096, 4096M or 4G"))?;
    Ok(match scale {
        'K' => n.div_ceil(1024),
        'G' => n << 10,
        'T' => n << 20,
        _ => n,
    })
}

/// `verbose`: list the nodes that were hits too.
pub(super) fn run(args: RunArgs, json: bool, verbose: bool) -> anyhow::Result<()> {
    if args.dry_run {
        return plan(
            PlanArgs {
                recipe: args.recipe,
                cache: args.cache,
                report: args.report,
                units: false,
                unit_size: args.slurm.unit_size,
                matrix: None,
                exit_code: false,
            },
            json,
        );
    }
    let recipe = Recipe::load(&args.recipe)?;
    if args.executor == Executor::Slurm {
        return run_on_slurm(&args, &recipe, json);
    }
    let remote = args.cache.remote.remote(Some(&recipe))?;
    let cache_dir = args.cache.path(Some(&recipe));
    let store = crate::store::open(Some(&cache_dir), remote.as_ref().map(|(url, mode)| (url, *mode)))?;
    super::signals::on_interrupt(Some(&cache_dir));
    let engine = Engine::new(store, super::workers(args.jobs.or(recipe.jobs)))?
        .with_pins(args.pins.pins()?)
        .with_force(args.force)
        .with_link(args.link.link.0.clone())
        .with_sha256_of_files(args.targets.is_empty());
    if let Some(page) = &args.report {
        check_page(&engine, &recipe, page)?;
    }
    let locked = match args.locked {
        true => Some(check_locked_inputs(&engine, &recipe)?),
        false => None,
    };
    let progress = !json && super::show_progress();
    let report = engine.run_targets(&recipe, &args.targets, progress)?;
    let outputs = engine.outputs(&recipe, &report)?;
    const SHOWN: usize = 5;
    for incident in report.cache_incidents.iter().take(SHOWN) {
        tracing::warn!("cache: {incident}");
    }
    if report.cache_incidents.len() > SHOWN {
        tracing::warn!("cache: … and {} more (`--json` lists them all)", report.cache_incidents.len() - SHOWN);
    }
    if json {
        super::json::print(&report)?;
    } else {
        let mut out = io::stdout().lock();
        print_text(&mut out, &report, verbose)?;
        super::warn_fallbacks(&report, true);
        out.flush()?;
    }
    if let Some(page) = &args.report {
        write_page(page, &args.recipe, &report, &outputs)?;
    }
    super::cache::report_transfers(report.remote.as_ref(), args.cache.remote.remote_required)?;
    if report.failed() {
        anyhow::bail!("{} of {} nodes failed", report.totals.failed, report.totals.nodes);
    }
    // A run of some targets says nothing about the others' files.
    if args.targets.is_empty() {
        update_lock(&engine, &recipe, &report, locked.as_ref(), &outputs)?;
    }
    Ok(())
}

/// The recipe's lock, once every input is checked against it.
fn check_locked_inputs(engine: &Engine, recipe: &Recipe) -> anyhow::Result<lock::Lock> {
    let path = lock::lock_path(recipe)?;
    let Some(locked) = lock::read(recipe)? else {
        anyhow::bail!("--locked: there is no lock file {}; run once without --locked to write it", path.display());
    };
    let inputs = engine.input_reports(recipe)?;
    let sha256 = lock::input_sha256s(engine, &inputs)?;
    let drift = lock::input_drift(&locked, recipe, &inputs, &sha256);
    if !drift.is_empty() {
        anyhow::bail!("--locked: {} no longer matches:\n  {}", path.display(), drift.join("\n  "));
    }
    Ok(locked)
}

/// Writes the lock a complete run stands for (under `--locked`, fails
/// instead when it would differ from `locked`), then the attestations of
/// the exports that ask for one.
fn update_lock(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    locked: Option<&lock::Lock>,
    outputs: &RunOutputs,
) -> anyhow::Result<()> {
    let new = lock::of_run(engine, recipe, report)?;
    match locked.map(|old| lock::first_difference(old, &new)) {
        Some(Some(difference)) => {
            anyhow::bail!("--locked: {difference}; {} is left as it was", lock::lock_path(recipe)?.display())
        }
        Some(None) => {}
        // The outputs are written; a lock that cannot be is worth a warning, not a failure.
        None => {
            if let Err(e) = outputs.lock_file().map_err(anyhow::Error::from).and_then(|path| {
                lock::write(recipe, &new, &path)?;
                Ok(())
            }) {
                tracing::warn!("{e:#}");
            }
        }
    }
    attest::write_for_run(recipe, &new, report, outputs)?;
    Ok(())
}

/// Plans here, hands the units and exports to Slurm, and (with `--wait`)
/// follows them to the end.
fn run_on_slurm(args: &RunArgs, recipe: &Recipe, json: bool) -> anyhow::Result<()> {
    if !args.targets.is_empty() {
        anyhow::bail!("--executor slurm builds the whole recipe; targets are for the local executor");
    }
    let Some((url, _)) = args.cache.remote.remote(Some(recipe))? else {
        anyhow::bail!(
            "--executor slurm needs a shared cache, where the tasks' results meet: give --cache-url URL, \
             set QUANTFORGE_CACHE_URL or `remote` in [recipe]"
        );
    };
    let cache_dir = args.cache.path(Some(recipe));
    let store = crate::store::open(Some(&cache_dir), Some((&url, RemoteMode::Required)))?;
    let engine = Engine::new(store, super::workers(args.jobs.or(recipe.jobs)))?;
    let plan = engine.units(recipe, args.slurm.unit_size, true)?;
    let pins = engine.input_pins(recipe)?;
    if plan.units.is_empty() && plan.exports.is_empty() {
        println!("{}: every export is up to date; nothing submitted", recipe.name);
        return Ok(());
    }
    let absolute = |path: &Path| std::path::absolute(path);
    let worker = slurm::Worker {
        binary: std::env::current_exe()?,
        recipe: absolute(&args.recipe)?,
        cache_dir: absolute(&cache_dir)?,
        cache_url: url.to_string(),
        unit_size: args.slurm.unit_size,
        pins: None,
    };
    let request = slurm::Request {
        partition: args.slurm.partition.clone(),
        account: args.slurm.account.clone(),
        time: args.slurm.time.clone(),
        cpus_per_task: args.slurm.cpus_per_task,
        mem_mb: args.slurm.mem,
        max_parallel: args.slurm.max_parallel.map(|k| k as usize),
        sbatch_args: args.slurm.sbatch_args.clone(),
    };
    let dir = slurm::submission_dir(&worker.cache_dir, &recipe.name);
    let submission = slurm::submit(&plan, &pins, &worker, &request, &dir)?;
    let mut out = io::stdout().lock();
    if json {
        super::json::print(&super::json::Submitted { plan, submission: submission.clone() })?;
    } else {
        writeln!(
            out,
            "{}: {} of {} units to compute, {} exports to write",
            recipe.name,
            plan.units.len(),
            plan.total_units,
            plan.exports.len()
        )?;
        for job in &submission.jobs {
            writeln!(
                out,
                "submitted job {} ({}): {} tasks, {} CPUs and {} MiB each",
                job.job_id,
                job.what,
                job.tasks.len(),
                job.cpus,
                job.mem_mb
            )?;
        }
        writeln!(out, "scripts and logs: {}", submission.dir.display())?;
    }
    out.flush()?;
    drop(out);
    if !args.slurm.wait {
        let ids: Vec<&str> = submission.jobs.iter().map(|j| j.job_id.as_str()).collect();
        say!(
            "follow with `squeue --jobs {}`; run the same command again to resubmit whatever is missing",
            ids.join(",")
        );
        return Ok(());
    }
    let progress = !json && super::show_progress();
    slurm::follow(&submission, progress, Duration::from_secs(1))?;
    // The controller's word is checked against the cache's.
    let left = engine.units(recipe, args.slurm.unit_size, false)?;
    if !left.units.is_empty() || !left.exports.is_empty() {
        anyhow::bail!(
            "the jobs ended, but {} units and {} exports are still missing; run again to resubmit them",
            left.units.len(),
            left.exports.len()
        );
    }
    if !json {
        println!("{}: done; every export is up to date", recipe.name);
    }
    Ok(())
}

/// `quantforge work`: computes units of a recipe into the cache.
pub(super) fn work(args: WorkArgs, json: bool) -> anyhow::Result<()> {
    let recipe = Recipe::load(&args.recipe)?;
    let Some((url, mode)) = args.cache.remote.remote(Some(&recipe))? else {
        anyhow::bail!(
            "work stores its results for other machines: give --cache-url URL, set QUANTFORGE_CACHE_URL \
             or `remote` in [recipe]"
        );
    };
    let store = crate::store::open(Some(&args.cache.path(Some(&recipe))), Some((&url, mode)))?;
    let engine = Engine::new(store, super::workers(args.jobs.or(recipe.jobs)))?.with_pins(args.pins.pins()?);
    let report = engine.work(&recipe, &args.units, args.unit_size)?;
    let mut out = io::stdout().lock();
    if json {
        super::json::print(&report)?;
    } else {
        for unit in &report.units {
            writeln!(
                out,
                "unit {}: {} tensors, {} encoded, {} already cached",
                unit.id, unit.tensors, unit.encoded, unit.reused
            )?;
        }
        writeln!(
            out,
            "{}: {} units in {:.0} ms",
            crate::text::for_terminal(&report.recipe),
            report.units.len(),
            report.wall_ms
        )?;
    }
    out.flush()?;
    super::cache::report_transfers(report.remote.as_ref(), args.cache.remote.remote_required)?;
    Ok(())
}

pub(super) fn plan(args: PlanArgs, json: bool) -> anyhow::Result<()> {
    let recipe = Recipe::load(&args.recipe)?;
    // Planning reads the cache and never creates one: without a cache,
    // every node is a miss.
    let cache_dir = args.cache.path(Some(&recipe));
    let local = match LocalStore::open_existing(&cache_dir) {
        Ok(store) => Some(store),
        Err(_) if !cache_dir.exists() => None,
        Err(e) => return Err(e.into()),
    };
    let store: Arc<dyn Store> = match (local, args.cache.remote.remote(Some(&recipe))?) {
        (Some(local), None) => Arc::new(local),
        (None, None) => Arc::new(MemoryStore::new()),
        (Some(local), Some((url, mode))) => Arc::new(Layered::open(local, &url, mode)?),
        (None, Some((url, mode))) => Arc::new(Layered::scratch(&url, mode)?),
    };
    let keeps_results = store.keeps_results();
    let engine = Engine::new(store, 1)?;
    if args.units {
        let plan = engine.units(&recipe, args.unit_size, false)?;
        print_units(&plan, args.matrix, json)?;
        let pending = !plan.units.is_empty() || !plan.exports.is_empty();
        return if args.exit_code && pending { Err(super::Pending.into()) } else { Ok(()) };
    }
    if let Some(page) = &args.report {
        check_page(&engine, &recipe, page)?;
    }
    let report = engine.plan(&recipe)?;
    let drift = lock_drift(&engine, &recipe, &report, keeps_results)?;
    let pending = args.exit_code && engine.pending(&recipe)?;
    if let Some(page) = &args.report {
        write_page(page, &args.recipe, &report, &engine.outputs(&recipe, &report)?)?;
    }
    if json {
        super::json::print(&super::json::Plan { report, lock_drift: drift })?;
    } else {
        let mut out = io::stdout().lock();
        print_text(&mut out, &report, true)?;
        for line in drift.iter().flatten() {
            writeln!(out, "lock: {line}")?;
        }
        out.flush()?;
    }
    if pending {
        return Err(super::Pending.into());
    }
    Ok(())
}

/// How the recipe's inputs differ from its lock: `None` without a lock,
/// or without a cache to hash the inputs against.
/// `--report`'s page, checked before anything runs against the files the
/// recipe names (and again, with every file the run read, before it is
/// written): never an input, the recipe, its lock, an export's file or a
/// file that is not a page.
fn check_page(engine: &Engine, recipe: &Recipe, page: &Path) -> anyhow::Result<()> {
    let declared: Vec<PathBuf> = recipe.inputs.iter().map(|i| i.path.clone()).collect();
    RunOutputs::check(recipe, engine.store().directory(), declared.iter())?.side_file(
        page,
        "report",
        outputs::REPORT_PAGE,
    )?;
    Ok(())
}

/// `--report`: the run's page, its relative paths the working directory's.
fn write_page(page: &Path, recipe: &Path, report: &RunReport, outputs: &RunOutputs) -> anyhow::Result<()> {
    let path = outputs.side_file(page, "report", outputs::REPORT_PAGE)?;
    let document = super::report::Document {
        label: recipe.display().to_string(),
        value: serde_json::to_value(report)?,
        base: PathBuf::new(),
    };
    super::write_output(&path, super::report::page(&[document])?.as_bytes())
}

fn lock_drift(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    keeps_results: bool,
) -> anyhow::Result<Option<Vec<String>>> {
    let Some(locked) = lock::read(recipe)? else { return Ok(None) };
    let sha256 = lock::known_sha256s(engine.store(), &report.inputs);
    Ok(keeps_results.then(|| lock::input_drift(&locked, recipe, &report.inputs, &sha256)))
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
        let mut line = format!("{:7}  {:width$}  {:16}", node.status.name(), shown(&node.id), node.op);
        if node.tensors_encoded + node.tensors_shared + node.tensors_reused + node.tensors_copied > 0 {
            line += &format!("  {} encoded", node.tensors_encoded);
            if node.tensors_shared > 0 {
                line += &format!(", {} shared", node.tensors_shared);
            }
            line += &format!(", {} cached, {} copied", node.tensors_reused, node.tensors_copied);
        }
        if node.bytes_out > 0 {
            line += &format!("  {}", human_bytes(node.bytes_out as f64));
        }
        if let Some(file) = node.files.iter().find(|f| f.restored) {
            let link = file.link.map_or("", |mode| mode.name());
            line += &format!("  restored from the cache ({link})");
        }
        if node.status == Status::Ran {
            line += &format!("  {:.2} s", node.duration_ms / 1e3);
        }
        if let Some(path) = &node.output {
            line += &format!("  → {}", path.display());
        }
        writeln!(out, "{}", crate::text::for_terminal(line.trim_end()))?;
        if let Some(e) = &node.evaluation {
            writeln!(
                out,
                "{:9}{:width$}  {:.2} bpw: PPL {} ± {} (base {}), KLD mean {} median {} p99 {}, same top token {} %",
                "",
                "",
                e.bits_per_weight,
                e.ppl,
                e.ppl_error,
                e.ppl_base,
                e.kld_mean,
                e.kld_median,
                e.kld_p99,
                e.same_top_p
            )?;
        }
        // A plan says why each node would run; a run says why with -v.
        for reason in node.why.iter().filter(|_| report.dry_run || all) {
            writeln!(out, "{:9}{:width$}  because {}", "", "", crate::text::for_terminal(reason))?;
        }
        if let Some(error) = &node.error {
            // A tool's failure goes on for lines (its command, its last words): kept under the node.
            let indent = format!("{:9}{:width$}  ", "", "");
            let mut lines = error.lines();
            writeln!(out, "{indent}error: {}", crate::text::for_terminal(lines.next().unwrap_or_default()))?;
            for line in lines {
                writeln!(out, "{indent}{}", crate::text::for_terminal(line))?;
            }
        }
    }
    let t = &report.totals;
    let verb = if report.dry_run { "would run" } else { "ran" };
    writeln!(
        out,
        "{}: {}, {} hit, {} {verb}{}{}; {} encoded{}{}, {} from cache, {} copied; {:.0} ms",
        crate::text::for_terminal(&report.recipe),
        crate::text::count(t.nodes as u64, "node"),
        t.hit,
        if report.dry_run { t.miss } else { t.ran },
        if t.skipped > 0 { format!(", {} skipped (not needed)", t.skipped) } else { String::new() },
        if t.failed > 0 { format!(", {} failed", t.failed) } else { String::new() },
        crate::text::count(t.tensors_encoded, "tensor"),
        if t.tensors_decoded > 0 && t.tensors_decoded < t.tensors_encoded {
            format!(" from {} sources decoded", t.tensors_decoded)
        } else {
            String::new()
        },
        if t.tensors_shared > 0 { format!(", {} shared", t.tensors_shared) } else { String::new() },
        t.tensors_reused,
        t.tensors_copied,
        report.wall_ms
    )
}

fn print_units(plan: &UnitPlan, matrix: Option<u64>, json: bool) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    if let Some(jobs) = matrix {
        let include = units::matrix(&plan.units, jobs as usize)
            .into_iter()
            .enumerate()
            .map(|(index, units)| super::json::MatrixJob { index, units })
            .collect();
        // One line, for a CI variable.
        serde_json::to_writer(&mut out, &super::json::Matrix { include })?;
        writeln!(out)?;
    } else if json {
        super::json::print(plan)?;
    } else {
        writeln!(
            out,
            "{:14}  {:>5}  {:>7}  {:>7}  {:>10}  {:>9}",
            "unit", "stage", "tensors", "pending", "weights", "estimate"
        )?;
        for unit in &plan.units {
            writeln!(
                out,
                "{:14}  {:>5}  {:>7}  {:>7}  {:>10}  {:>8.2}s",
                unit.id, unit.stage, unit.tensors, unit.pending, unit.weights, unit.estimate_seconds
            )?;
        }
        for export in &plan.exports {
            writeln!(out, "export {}  → {}", crate::text::for_terminal(&export.id), export.path.display())?;
        }
        writeln!(
            out,
            "{}: {} of {} units to compute ({:.0} core-seconds estimated), {} exports to write",
            crate::text::for_terminal(&plan.recipe),
            plan.units.len(),
            plan.total_units,
            plan.units.iter().fold(0.0, |sum, u| sum + u.estimate_seconds),
            plan.exports.len()
        )?;
    }
    out.flush()?;
    Ok(())
}
