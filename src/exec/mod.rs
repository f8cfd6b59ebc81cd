//! The executor: binds a recipe's inputs, keys every node, decides what is
//! already done, and runs the rest as a DAG on tokio, heavy work on a
//! bounded worker pool.
//!
//! A node's key is blake3 over the key scheme and codec versions, its op and
//! op version, its normalized parameters and its inputs' keys (a file's key is
//! its content hash; `bind.rs`). A path enters a key only where the result
//! records it: an input a step uses as the recipe writes it (llama-quantize
//! names its imatrix file in the output), a directory input's file names. The
//! backend and the environment never do. Work is demand-driven from the exports: an export whose file is still
//! what the cache recorded is a hit, and nothing upstream of it runs; a node
//! whose result manifest is cached is loaded, not recomputed; a derived
//! tensor whose bytes are cached is copied, not encoded. So a rerun with
//! nothing changed costs a `stat` per input and output and a few small reads.

mod bind;
mod compute;
mod errors;
mod explain;
mod export;
pub mod materialize;
pub mod oneshot;
pub mod outputs;
pub mod provenance;
pub mod report;
mod schedule;
mod tool_steps;
pub mod units;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{MultiProgress, ProgressDrawTarget};

use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::codecs::CODEC_VERSION;
use crate::files::link::LinkMode;
use crate::formats::safetensors::CheckpointIndex;
use crate::formats::{AtomicOutput, FormatError, InputShape, OpenOptions, gguf};
use crate::key::{Key, KeyBuilder};
use crate::ops::split::SplitError;
use crate::ops::{self, Op};
use crate::quant::budget;
use crate::quant::plan::Fallbacks;
use crate::recipe::{NodeDecl, Recipe, Source};
use crate::store::{ActionKind, Store, StoreError, fingerprint};
use materialize::{
    Backends, Destinations, Fanout, InFlight, InputFiles, MaterializeError, Materializer, PinnedFile, SetRows,
};
use report::{InputFileReport, InputReport, NodeReport, RunReport, Status};
use schedule::Outcome;

use bind::*;
use compute::*;
pub use errors::{NodeError, RunError};

/// The most worker threads an engine starts: a few per core.
pub fn max_jobs() -> usize {
    const PER_CORE: usize = 4;
    std::thread::available_parallelism().map_or(1, usize::from) * PER_CORE
}

/// Where a run's heavy work happens and what it shares.
pub struct Engine {
    store: Arc<dyn Store>,
    pool: Arc<rayon::ThreadPool>,
    jobs: usize,
    open: OpenOptions,
    /// Input hashes handed over by a planner, by path.
    pins: HashMap<PathBuf, fingerprint::Pin>,
    /// Compute everything a run needs, whatever the cache holds (`--force`).
    force: bool,
    /// The most bytes of one tensor's rows held at once (`--max-buffer-size`).
    buffer_limit: Option<u64>,
    /// How the cache takes in what exports write (`--link`), in the order tried.
    link: Vec<LinkMode>,
    /// Every file read or written is hashed by sha256 too, in the read that
    /// hashes its blake3.
    sha256_of_files: bool,
}

/// Tensors this process encoded and kept in a lasting store: what an
/// interrupted command says it leaves for the next run.
pub static TENSORS_KEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Engine {
    /// An engine over `store` with `jobs` workers (nodes at once and codec
    /// threads share this budget).
    pub fn new(store: Arc<dyn Store>, jobs: usize) -> Result<Engine, RunError> {
        let jobs = jobs.clamp(1, max_jobs());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("quantforge-worker-{i}"))
            .build()
            .map_err(|e| RunError::Workers(e.to_string()))?;
        Ok(Engine {
            store,
            pool: Arc::new(pool),
            jobs,
            open: OpenOptions::default(),
            pins: HashMap::new(),
            force: false,
            buffer_limit: None,
            link: LinkMode::DEFAULT_MODES.to_vec(),
            sha256_of_files: false,
        })
    }

    /// Computes everything a run needs again, whatever the cache holds
    /// (`run --force`); what it computes replaces nothing it finds.
    pub fn with_force(mut self, force: bool) -> Engine {
        self.force = force;
        self
    }

    /// Input hashes from the planner that submitted this run's work: an
    /// input whose stat still matches its pin is not read to hash it.
    pub fn with_pins(mut self, pins: Vec<fingerprint::Pin>) -> Engine {
        self.pins = pins.into_iter().map(|pin| (pin.path.clone(), pin)).collect();
        self
    }

    /// The pins of `recipe`'s input files as this engine hashes them, for
    /// the tasks of a submission.
    pub fn input_pins(&self, recipe: &Recipe) -> Result<Vec<fingerprint::Pin>, RunError> {
        let (bound, _) = self.bind(recipe)?;
        let mut pins: Vec<fingerprint::Pin> = bound.files.pins().collect();
        pins.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(pins)
    }

    /// Holds at most `limit` bytes of one tensor's rows at once
    /// (llama-quantize's `--max-buffer-size`); a slab is never less than one row.
    pub fn with_buffer_limit(mut self, limit: Option<u64>) -> Engine {
        self.buffer_limit = limit;
        self
    }

    /// How the cache takes in what exports write (`--link`): the first of
    /// `modes` the file system allows; none for exports that are scratch,
    /// whose tensors the cache then keeps whole.
    pub fn with_link(mut self, modes: Vec<LinkMode>) -> Engine {
        self.link = modes;
        self
    }

    /// Every input file the run hashes and every file its exports write is
    /// hashed by sha256 too, in the one read that hashes its blake3, and
    /// the cache remembers it: for `run`, whose lock lists the sha256 of
    /// each and then reads none of them again.
    pub fn with_sha256_of_files(mut self, sha256: bool) -> Engine {
        self.sha256_of_files = sha256;
        self
    }

    /// How input files are opened (`--no-mmap`).
    pub fn with_open_options(mut self, open: OpenOptions) -> Engine {
        self.open = open;
        self
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The worker pool, sized by `--jobs`.
    pub(crate) fn pool(&self) -> &rayon::ThreadPool {
        &self.pool
    }

    /// Where a run of `recipe` may write besides its exports (its lock, a
    /// report, attestations), for the run `report` describes: the same
    /// guard its exports passed, with every input file the run read.
    pub fn outputs(&self, recipe: &Recipe, report: &RunReport) -> Result<outputs::RunOutputs, RunError> {
        let inputs: Vec<std::path::PathBuf> =
            report.inputs.iter().flat_map(|i| &i.files).map(|f| f.path.clone()).collect();
        Ok(outputs::RunOutputs::check(recipe, self.store.directory(), inputs.iter())?)
    }

    /// Runs `recipe`: everything not already done.
    pub fn run(&self, recipe: &Recipe, progress: bool) -> Result<RunReport, RunError> {
        self.run_targets(recipe, &[], progress)
    }

    /// Runs what `targets` need (step names, node ids or export paths; all
    /// exports and kept steps when empty), unless already done.
    /// Hashes `recipe`'s inputs (through the store's fingerprints) and says
    /// what each is, without running anything.
    pub fn input_reports(&self, recipe: &Recipe) -> Result<Vec<InputReport>, RunError> {
        Ok(self.bind(recipe)?.1)
    }

    pub fn run_targets(&self, recipe: &Recipe, targets: &[String], progress: bool) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let roots = select(recipe, targets)?;
        let (bound, mut input_reports) = self.bind_for(recipe, roots.as_deref())?;
        outputs::sweep(&bound.recipe);
        let n = bound.recipe.nodes.len();
        let is_export = |i: usize| matches!(bound.recipe.nodes[i].op, Op::Export(_));
        let (fresh, mut cached) = match self.force {
            true => (vec![false; n], vec![false; n]),
            false => self.done(&bound),
        };
        // From the exports back: what must run, and whose result is needed.
        // A cached result that is needed is loaded (and so checked) now; one
        // that fails its check is a miss, which may make its inputs needed.
        let mut loaded: Vec<Option<Arc<TensorSet>>> = vec![None; n];
        let (needed, must_run) = loop {
            let (needed, must_run) = demand(&bound, &fresh, &cached, roots.as_deref());
            let mut changed = false;
            for i in 0..n {
                if !needed[i] || must_run[i] || is_export(i) || loaded[i].is_some() {
                    continue;
                }
                match cached_set(&*self.store, &bound.keys[i]) {
                    Some((set, _)) => loaded[i] = Some(set),
                    None => (cached[i], changed) = (false, true),
                }
            }
            if !changed {
                break (needed, must_run);
            }
        };
        let prefetch = self.prefetch_exports(&bound, &loaded, &must_run);
        let writes = (0..n).map(|i| needed[i] && must_run[i] && is_export(i)).collect();
        let mut shared = self.shared(bound, loaded, progress)?;
        shared.writes = writes;
        let shared = Arc::new(shared);
        // Why each node that will run must: said now, before running
        // changes what the cache and the outputs hold.
        let reasons: Vec<Vec<String>> = (0..n)
            .map(|i| match (must_run[i], self.force) {
                (false, _) => Vec::new(),
                (true, true) => vec!["--force: nothing is taken from the cache".into()],
                (true, false) => shared.why(i),
            })
            .collect();
        let mut reports: Vec<Option<NodeReport>> = vec![None; n];
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(self.jobs.max(2))
            .build()
            .map_err(|e| RunError::Workers(e.to_string()))?;
        let jobs = self.jobs;
        let done = runtime.block_on(schedule::schedule(Arc::clone(&shared), needed.clone(), must_run.clone(), jobs));
        if let Some(prefetch) = prefetch {
            // Best effort: what it did not fetch, the exports fetched themselves.
            let _ = prefetch.join();
        }
        for (i, report) in done {
            reports[i] = Some(report);
        }
        let shared = &*shared;
        let mut nodes = Vec::with_capacity(n);
        for (i, report) in reports.into_iter().enumerate() {
            let mut report = report.unwrap_or_else(|| {
                let status = if fresh[i] || cached[i] { Status::Hit } else { Status::Skipped };
                let mut report = shared.report(i, status);
                if status == Status::Hit {
                    (report.bytes_out, report.fallbacks) = shared.cached_record(i);
                    report.evaluation = shared.cached_evaluation(i);
                }
                report
            });
            if report.status == Status::Ran {
                report.why = reasons[i].clone();
            }
            if matches!(report.status, Status::Hit | Status::Ran) {
                shared.remember(i);
            }
            nodes.push(report);
        }
        for file in input_reports.iter_mut().flat_map(|input| input.files.iter_mut()) {
            file.load = shared.bound.files.load_of(&file.path);
        }
        let mut report = RunReport::new(shared.bound.recipe.name.clone(), false, self.jobs, input_reports, nodes);
        report.cache_incidents = self.store.take_incidents();
        report.remote = self.store.transfers();
        report.wall_ms = ms(started);
        Ok(report)
    }

    /// The result entries a recipe's outputs are made of, as far as the
    /// store knows them: every node's and export's entry, and the entries of
    /// the derived tensors of each node whose result it holds (`cache push`
    /// and `cache pull` move these).
    pub fn result_entries(&self, recipe: &Recipe) -> Result<Vec<(ActionKind, Key)>, RunError> {
        let (bound, _) = self.bind(recipe)?;
        let mut entries = Vec::new();
        for (node, key) in bound.recipe.nodes.iter().zip(&bound.keys) {
            if matches!(node.op, Op::Export(_)) {
                entries.push((ActionKind::Export, *key));
                continue;
            }
            entries.push((ActionKind::Node, *key));
            if let Some((set, _)) = cached_set(&*self.store, key) {
                let derived = set.tensors.iter().filter(|t| t.is_derived());
                entries.extend(derived.map(|t| (ActionKind::Tensor, t.key)));
            }
        }
        entries.sort_unstable_by_key(|(kind, key)| (kind.name(), key.0));
        entries.dedup();
        Ok(entries)
    }

    /// Starts fetching, beside the run, the bytes of the exports that will be
    /// written from cached results (a store with nothing to fetch ignores it),
    /// so downloads overlap the writing of outputs.
    fn prefetch_exports(
        &self,
        bound: &Bound,
        loaded: &[Option<Arc<TensorSet>>],
        must_run: &[bool],
    ) -> Option<std::thread::JoinHandle<()>> {
        let (mut tensors, mut blobs) = (Vec::new(), Vec::new());
        let exports =
            bound.recipe.nodes.iter().enumerate().filter(|(i, n)| must_run[*i] && matches!(n.op, Op::Export(_)));
        for (_, node) in exports {
            let sets = node.from.iter().filter_map(|s| match s {
                Source::Node(j) => loaded[*j].as_ref(),
                Source::Input(_) => None,
            });
            for tensor in sets.flat_map(|set| set.tensors.iter()) {
                match tensor.data {
                    TensorData::Convert { .. } => tensors.push(tensor.key),
                    TensorData::Blob { hash } => blobs.push(hash),
                    _ => {}
                }
            }
        }
        if tensors.is_empty() && blobs.is_empty() {
            return None;
        }
        let store = Arc::clone(&self.store);
        Some(std::thread::spawn(move || {
            store.prefetch_actions(ActionKind::Tensor, &tensors);
            store.prefetch_blobs(&blobs);
        }))
    }

    /// True when `run` would run anything: an export not up to date, or a
    /// kept or final step whose result is not in the cache.
    pub fn pending(&self, recipe: &Recipe) -> Result<bool, RunError> {
        let (bound, _) = self.bind(recipe)?;
        let (fresh, cached) = self.done(&bound);
        let (_, must_run) = demand(&bound, &fresh, &cached, None);
        Ok(must_run.contains(&true))
    }

    /// What the cache says is done: each export whose file is up to date
    /// (`fresh`), each step whose result it holds, kept ones with their
    /// tensors (`cached`).
    fn done(&self, bound: &Bound) -> (Vec<bool>, Vec<bool>) {
        let n = bound.recipe.nodes.len();
        let (mut fresh, mut cached) = (vec![false; n], vec![false; n]);
        for (i, node) in bound.recipe.nodes.iter().enumerate() {
            match &node.op {
                Op::Export(o) => fresh[i] = self.export_is_fresh(&bound.keys[i], o),
                _ => cached[i] = self.node_entry(&bound.keys[i]).is_some_and(|e| e.kept || !node.keep),
            }
        }
        (fresh, cached)
    }

    /// What `run` would do, and why: each node a hit or a miss with the
    /// reasons, and the size of what it would produce.
    pub fn plan(&self, recipe: &Recipe) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let (bound, input_reports) = self.bind(recipe)?;
        let n = bound.recipe.nodes.len();
        // A node run would not execute (what it feeds is up to date) is
        // skipped, not a miss to explain.
        let (fresh, cached) = self.done(&bound);
        let (_, must_run) = demand(&bound, &fresh, &cached, None);
        let shared = self.shared(bound, vec![None; n], false)?;
        let mut sets: Vec<Option<Arc<TensorSet>>> = vec![None; n];
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let node = &shared.bound.recipe.nodes[i];
            let key = shared.bound.keys[i];
            let inputs: Option<Vec<Arc<TensorSet>>> = node
                .from
                .iter()
                .filter_map(|s| match s {
                    Source::Node(j) => Some(sets[*j].clone()),
                    Source::Input(_) => None,
                })
                .collect();
            let (hit, mut report) = match &node.op {
                Op::Export(o) => {
                    let hit = self.export_is_fresh(&key, o);
                    let mut report = shared.report(i, Status::Miss);
                    report.bytes_out = inputs
                        .as_ref()
                        .and_then(|sets| sets.first())
                        .and_then(|set| gguf::file_len(&set.metadata, &set.infos()).ok())
                        .unwrap_or(0);
                    (hit, report)
                }
                _ => {
                    let hit = self.node_entry(&key).is_some();
                    let set = shared.manifest(i, inputs.unwrap_or_default(), true).ok().map(|(set, _)| set);
                    let mut report = shared.report(i, Status::Miss);
                    report.bytes_out = set.as_ref().map_or(0, |s| total_bytes(s));
                    sets[i] = set;
                    (hit, report)
                }
            };
            if hit {
                report.status = Status::Hit;
                report.evaluation = shared.cached_evaluation(i);
            } else if !must_run[i] {
                report.status = Status::Skipped;
            } else {
                report.why = shared.why(i);
            }
            nodes.push(report);
        }
        let mut report = RunReport::new(shared.bound.recipe.name.clone(), true, self.jobs, input_reports, nodes);
        report.wall_ms = ms(started);
        Ok(report)
    }

    fn node_entry(&self, key: &Key) -> Option<NodeEntry> {
        node_entry(&*self.store, key)
    }

    /// What the node tasks of a bound recipe share, its backends resolved.
    fn shared(&self, bound: Bound, loaded: Vec<Option<Arc<TensorSet>>>, progress: bool) -> Result<Shared, RunError> {
        Ok(Shared {
            backends: resolve_backends(&bound, &*self.store)?,
            bound,
            loaded,
            store: Arc::clone(&self.store),
            pool: Arc::clone(&self.pool),
            rebuild: self.force,
            buffer_limit: self.buffer_limit,
            link: self.link.clone(),
            sha256_of_files: self.sha256_of_files,
            in_flight: InFlight::default(),
            fanout: Fanout::default(),
            destinations: Destinations::default(),
            writes: Vec::new(),
            prepared: Default::default(),
            tool_runs: std::sync::RwLock::new(()),
            progress: MultiProgress::with_draw_target(if progress {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            }),
        })
    }
}

/// The nodes `targets` name (a step: all its fan-out nodes; a node id; an
/// export's path, relative to the recipe or to the working directory), or
/// `None` for all.
fn select(recipe: &Recipe, targets: &[String]) -> Result<Option<Vec<bool>>, RunError> {
    if targets.is_empty() {
        return Ok(None);
    }
    let mut roots = vec![false; recipe.nodes.len()];
    let recipe_dir = recipe.source.as_deref().and_then(std::path::Path::parent);
    let resolve = crate::files::resolve;
    for target in targets {
        // A path as written in the recipe, or as the shell completes it,
        // however spelled (`./`, `//`, `..`, absolute, through a link).
        let paths = [recipe_dir.map(|d| resolve(&d.join(target))), Some(resolve(Path::new(target)))];
        let mut found = false;
        for (i, node) in recipe.nodes.iter().enumerate() {
            let names_export = match &node.op {
                Op::Export(o) => paths.iter().flatten().any(|p| *p == resolve(&o.path)),
                _ => false,
            };
            if node.step == *target || node.id == *target || names_export {
                (roots[i], found) = (true, true);
            }
        }
        if !found {
            let mut steps: Vec<&str> = recipe.nodes.iter().map(|n| n.step.as_str()).collect();
            steps.dedup();
            return Err(RunError::UnknownTarget { target: target.clone(), steps: steps.join(", ") });
        }
    }
    Ok(Some(roots))
}

/// Which nodes must run and whose results are needed, from the exports back
/// (from `roots` only, when given).
fn demand(bound: &Bound, fresh: &[bool], cached: &[bool], roots: Option<&[bool]>) -> (Vec<bool>, Vec<bool>) {
    let n = bound.recipe.nodes.len();
    let mut must_run = vec![false; n];
    let mut needed = vec![false; n];
    for i in (0..n).rev() {
        let node = &bound.recipe.nodes[i];
        let rooted = roots.map(|r| r[i]);
        if matches!(node.op, Op::Export(_)) {
            must_run[i] = !fresh[i] && rooted.unwrap_or(true);
            needed[i] = must_run[i];
            continue;
        }
        let root = rooted.unwrap_or(bound.consumers[i].is_empty() || node.keep);
        needed[i] = bound.consumers[i].iter().any(|&j| must_run[j]) || (!cached[i] && root);
        must_run[i] = needed[i] && !cached[i];
    }
    (needed, must_run)
}
