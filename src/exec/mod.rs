//! The executor: binds a recipe's inputs, keys every node, decides what is
//! already done, and runs the rest as a DAG on tokio, heavy work on a
//! bounded worker pool.
//!
//! A node's key is blake3 over the key scheme and codec versions, its op and
//! op version, its normalized parameters and its inputs' keys (a file's key is
//! its content hash). Paths, the backend and the environment never enter a
//! key. Work is demand-driven from the exports: an export whose file is still
//! what the cache recorded is a hit, and nothing upstream of it runs; a node
//! whose result manifest is cached is loaded, not recomputed; a derived
//! tensor whose bytes are cached is copied, not encoded. So a rerun with
//! nothing changed costs a `stat` per input and output and a few small reads.

pub mod attest;
pub mod dsse;
mod explain;
mod export;
pub mod lock;
pub mod materialize;
pub mod oneshot;
pub mod outputs;
pub mod report;
mod schedule;
mod tool_steps;
pub mod units;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressDrawTarget};

use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::codecs::CODEC_VERSION;
use crate::files::link::LinkMode;
use crate::formats::safetensors::CheckpointIndex;
use crate::formats::{FormatError, InputShape, OpenOptions, gguf};
use crate::key::{Key, KeyBuilder};
use crate::ops::split::SplitError;
use crate::ops::{self, Op};
use crate::quant::budget;
use crate::quant::plan::Fallbacks;
use crate::recipe::{NodeDecl, Recipe, Source};
use crate::store::{ActionKind, Store, StoreError, fingerprint};
use materialize::{Backends, Fanout, InFlight, InputFiles, MaterializeError, Materializer, PinnedFile, SetRows};
use report::{InputFileReport, InputReport, NodeReport, RunReport, Status};
use schedule::Outcome;

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
}

/// Tensors this process encoded and kept in a lasting store: what an
/// interrupted command says it leaves for the next run.
pub static TENSORS_KEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How an error about an input starts: where the recipe declares it
/// (`recipes/x.toml:4:8: input `m`: `); nothing for a one-shot command's
/// file, which the path after it names.
fn input_label(recipe: &Recipe, decl: &crate::recipe::InputDecl) -> String {
    match (&recipe.source, decl.written_at) {
        (Some(file), Some((line, column))) => format!("{}:{line}:{column}: input `{}`: ", file.display(), decl.name),
        _ => String::new(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `input` says which, and where the recipe declares it ([`input_label`]).
    #[error("{input}{}: {}", path.display(), crate::files::IoText(source))]
    Input { input: String, path: PathBuf, source: std::io::Error },
    #[error("{input}{}: no such file; `{fetch}` fetches it (the recipe's `fetch`)", path.display())]
    Missing { input: String, path: PathBuf, fetch: String },
    #[error("{input}{} has blake3 {actual}, but the recipe pins {expected}", path.display())]
    PinMismatch { input: String, path: PathBuf, expected: Key, actual: Key },
    #[error("{input}{source}")]
    Split { input: String, source: Box<SplitError> },
    #[error("{input}{source}")]
    Resolve { input: String, source: Box<FormatError> },
    #[error("cannot start the workers: {0}")]
    Workers(String),
    #[error(transparent)]
    Output(#[from] outputs::OutputError),
    #[error("step `{node}`: {source}")]
    Backend { node: String, source: crate::backend::BackendError },
    #[error("step `{node}`: {source}")]
    Step { node: String, source: Box<NodeError> },
    #[error("unit `{id}`: {why}")]
    Unit { id: String, why: String },
    #[error("no step, export or output path `{target}` in the recipe (its steps: {steps})")]
    UnknownTarget { target: String, steps: String },
    #[error("step `{node}`: {source}")]
    Tool { node: String, source: crate::tools::ToolError },
}

/// Why one node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Quantize(#[from] crate::quant::plan::QuantizeError),
    #[error(transparent)]
    Imatrix(#[from] crate::quant::imatrix::ImatrixError),
    #[error(transparent)]
    Budget(#[from] budget::BudgetError),
    #[error(transparent)]
    Convert(#[from] ops::convert::ConvertOpError),
    /// Boxed: its shape variant names three shapes.
    #[error(transparent)]
    LoraMerge(Box<ops::lora_merge::LoraMergeError>),
    #[error(transparent)]
    Rename(#[from] ops::rename::RenameError),
    #[error(transparent)]
    Metadata(#[from] ops::metadata::MetadataError),
    #[error(transparent)]
    Materialize(#[from] MaterializeError),
    #[error(transparent)]
    Manifest(#[from] crate::artifact::ManifestError),
    #[error(transparent)]
    Output(#[from] outputs::OutputError),
    #[error("writing {}: {}", path.display(), crate::files::IoText(source))]
    Write { path: PathBuf, source: std::io::Error },
    #[error("input `{0}` failed")]
    Upstream(String),
    #[error(transparent)]
    Split(#[from] SplitError),
    #[error(transparent)]
    SafeTensors(crate::formats::safetensors::WriteError),
    #[error(transparent)]
    Ggjt(crate::formats::ggml_legacy::GgjtError),
    #[error(transparent)]
    Load(#[from] ops::load::LoadError),
    #[error(transparent)]
    Assemble(#[from] ops::assemble::AssembleError),
    #[error("cannot write big-endian: {0}")]
    ByteOrder(#[from] crate::formats::gguf::NoBigEndianLayout),
    /// Boxed: it carries the command line and the tool's last lines.
    #[error(transparent)]
    Tool(Box<crate::tools::RunFailure>),
    /// What binding a recipe gives a node was not there (a bug, not the input's fault).
    #[error("step `{node}` has no {what}")]
    Unbound { node: String, what: &'static str },
    /// A dry run (`plan`, `plan --units`) met a step a tool computes that
    /// is not cached yet.
    #[error("{tool} computes it only when the recipe runs: run the recipe with this step as its target first")]
    NotPlanned { tool: &'static str },
}

impl From<ops::lora_merge::LoraMergeError> for NodeError {
    fn from(e: ops::lora_merge::LoraMergeError) -> NodeError {
        NodeError::LoraMerge(Box::new(e))
    }
}

/// The node-cache entry: where the manifest is and what it needs.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeEntry {
    manifest: Key,
    blobs: Vec<Key>,
    recipe: String,
    id: String,
    op: String,
    tensors: usize,
    bytes: u64,
    /// Every derived tensor is in the store (`keep = true`).
    kept: bool,
    /// Tensors its quantization wrote in a fallback type, said again when
    /// the result is taken from the cache.
    #[serde(default, skip_serializing_if = "Fallbacks::is_empty")]
    fallbacks: Fallbacks,
}

/// An input bound to its content: one file, or every shard of a split.
#[derive(Debug, Clone)]
struct BoundInput {
    /// The file's blake3, or (a split) a key over every shard's.
    key: Key,
    /// Content hashes of the files, in shard order.
    shards: Vec<Key>,
    /// The index of a sharded SafeTensors checkpoint, when the input is one.
    index: Option<CheckpointIndex>,
}

/// A recipe with its inputs hashed and its nodes keyed.
struct Bound {
    recipe: Recipe,
    inputs: Vec<Option<BoundInput>>,
    keys: Vec<Key>,
    consumers: Vec<Vec<usize>>,
    files: InputFiles,
    /// The external tool each node runs, found and identified.
    tools: Vec<Option<crate::tools::FoundTool>>,
    /// Where the run may write, checked when it was bound.
    outputs: outputs::RunOutputs,
}

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

    /// Hashes the inputs (through the stat table) and keys every node.
    fn bind(&self, recipe: &Recipe) -> Result<(Bound, Vec<InputReport>), RunError> {
        let mut used = vec![false; recipe.inputs.len()];
        for node in &recipe.nodes {
            for src in &node.from {
                if let Source::Input(i) = src {
                    used[*i] = true;
                }
            }
            node.uses.iter().for_each(|&i| used[i] = true);
        }
        let mut inputs = Vec::with_capacity(recipe.inputs.len());
        let mut reports = Vec::new();
        let mut paths = HashMap::new();
        for (idx, (decl, used)) in recipe.inputs.iter().zip(used).enumerate() {
            if !used {
                inputs.push(None);
                continue;
            }
            let label = input_label(recipe, decl);
            if let Some(fetch) = &decl.fetch
                && !decl.path.exists()
            {
                return Err(RunError::Missing { input: label, path: decl.path.clone(), fetch: fetch.clone() });
            }
            let input_err = |source| RunError::Input { input: label.clone(), path: decl.path.clone(), source };
            // Checkpoint directories: what `convert` reads, and both inputs of `convert-lora`.
            let converted = recipe.nodes.iter().any(|n| match n.op {
                Op::Convert(_) => n.from.contains(&Source::Input(idx)),
                Op::ConvertLora(_) => n.from.contains(&Source::Input(idx)) || n.uses.contains(&idx),
                _ => false,
            });
            let shape = InputShape::resolve(&decl.path, converted)
                .map_err(|source| RunError::Resolve { input: label.clone(), source: Box::new(source) })?;
            let files = shape.files();
            let (index, directory) = match shape {
                InputShape::CheckpointIndex(index) => (Some(index), false),
                InputShape::Directory(_) => (None, true),
                InputShape::File(_) | InputShape::Split(_) => (None, false),
            };
            let mut shards = Vec::with_capacity(files.len());
            let mut file_reports = Vec::with_capacity(files.len());
            let (mut bytes, mut rehashed) = (0, false);
            for (no, file) in files.iter().enumerate() {
                if !file.exists() && files.len() > 1 {
                    let source = SplitError::MissingShard { path: file.clone(), shard: no + 1, count: files.len() };
                    return Err(RunError::Split { input: label.clone(), source: Box::new(source) });
                }
                let content = match self.pins.get(file).and_then(|pin| pin.check(file)) {
                    Some(pinned) => Ok(pinned),
                    // A store that keeps nothing needs keys unique to this run only.
                    None if self.store.keeps_results() || decl.pin.is_some() => {
                        fingerprint::content_hash(&*self.store, file)
                    }
                    None => fingerprint::stat_identity(file),
                };
                let content = content.map_err(input_err)?;
                if let Some(expected) = decl.pin
                    && *file == decl.path
                    && expected != content.hash
                {
                    return Err(RunError::PinMismatch {
                        input: label.clone(),
                        path: decl.path.clone(),
                        expected,
                        actual: content.hash,
                    });
                }
                paths.insert(content.hash, PinnedFile { path: file.clone(), stat: content.stat });
                file_reports.push(InputFileReport {
                    path: file.clone(),
                    bytes: content.len,
                    blake3: content.hash.hex(),
                    load: None,
                });
                shards.push(content.hash);
                bytes += content.len;
                rehashed |= content.rehashed;
            }
            let key = match (&index, shards.as_slice()) {
                (None, _) if directory => {
                    let mut key = KeyBuilder::new("input.directory");
                    for (file, hash) in files.iter().zip(&shards) {
                        key.str(&file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()).key(hash);
                    }
                    key.finish()
                }
                (None, [single]) => *single,
                (None, _) => {
                    let mut key = KeyBuilder::new("input.split");
                    shards.iter().for_each(|h| {
                        key.key(h);
                    });
                    key.finish()
                }
                (Some(_), _) => {
                    // The index's weight map is checked against the shards.
                    let index = fingerprint::content_hash(&*self.store, &decl.path).map_err(input_err)?;
                    let index_hash = index.hash;
                    file_reports.insert(
                        0,
                        InputFileReport {
                            path: decl.path.clone(),
                            bytes: index.len,
                            blake3: index_hash.hex(),
                            load: None,
                        },
                    );
                    let mut key = KeyBuilder::new("input.safetensors-index");
                    key.key(&index_hash);
                    shards.iter().for_each(|h| {
                        key.key(h);
                    });
                    key.finish()
                }
            };
            reports.push(InputReport {
                name: decl.name.clone(),
                path: decl.path.clone(),
                content_key: key.hex(),
                bytes,
                rehashed,
                files: file_reports,
            });
            inputs.push(Some(BoundInput { key, shards, index }));
        }
        let tools = find_tools(recipe, &*self.store)?;
        let mut keys: Vec<Key> = Vec::with_capacity(recipe.nodes.len());
        let mut consumers = vec![Vec::new(); recipe.nodes.len()];
        for (i, node) in recipe.nodes.iter().enumerate() {
            let mut key = KeyBuilder::new("node");
            key.str(node.op.name()).u64(u64::from(node.op.spec().version)).u64(u64::from(CODEC_VERSION));
            key.str(&node.op.key_params().to_string());
            for src in &node.from {
                match *src {
                    Source::Input(j) => key.key(&input_hash(&inputs, j)),
                    Source::Node(j) => {
                        consumers[j].push(i);
                        key.key(&keys[j])
                    }
                };
            }
            for &j in &node.uses {
                key.key(&input_hash(&inputs, j));
                key.str(&recipe.inputs[j].as_written.to_string_lossy());
            }
            if let Some(j) = imatrix_step_of(node) {
                key.str(&recipe.imatrix_name(j).to_string_lossy());
            }
            if let Some(tool) = &tools[i] {
                key.str("tool").key(&tool.identity);
            }
            keys.push(key.finish());
        }
        let files = InputFiles::new(paths, self.open);
        let outputs = outputs::RunOutputs::check(recipe, self.store.directory(), files.paths())?;
        let bound = Bound { recipe: recipe.clone(), inputs, keys, consumers, files, tools, outputs };
        Ok((bound, reports))
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
        let (bound, mut input_reports) = self.bind(recipe)?;
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
        let shared = Arc::new(self.shared(bound, loaded, progress)?);
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
            in_flight: InFlight::default(),
            fanout: Fanout::default(),
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

/// The external tool of each node that runs one, found and identified when
/// the run is planned: a missing tool fails the run before any work (its
/// identity is part of the node's key, cached result or not).
fn find_tools(recipe: &Recipe, store: &dyn Store) -> Result<Vec<Option<crate::tools::FoundTool>>, RunError> {
    let hash = |path: &Path| fingerprint::content_hash(store, path).map(|c| c.hash);
    let mut found: HashMap<crate::tools::Tool, crate::tools::FoundTool> = HashMap::new();
    let mut tools = Vec::with_capacity(recipe.nodes.len());
    for node in &recipe.nodes {
        let Some(tool) = node.op.tool() else {
            tools.push(None);
            continue;
        };
        let found = match found.entry(tool) {
            std::collections::hash_map::Entry::Occupied(e) => e.get().clone(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let tool = crate::tools::find(tool, recipe.llama_cpp.as_deref(), &hash)
                    .map_err(|source| RunError::Tool { node: node.step.clone(), source })?;
                e.insert(tool).clone()
            }
        };
        tools.push(Some(found));
    }
    Ok(tools)
}

/// The node whose importance matrix a `quantize` node uses (`imatrix =
/// "STEP"`): its second source.
fn imatrix_step_of(node: &NodeDecl) -> Option<usize> {
    match (&node.op, node.from.get(1)) {
        (Op::Quantize(_), Some(&Source::Node(j))) => Some(j),
        _ => None,
    }
}

/// Every node's backend, resolved when the run is planned: one this machine
/// cannot provide fails the run before any work, whatever the cache holds.
fn resolve_backends(bound: &Bound, store: &dyn Store) -> Result<Backends, RunError> {
    let fallback = crate::backend::resolve(crate::backend::Choice::Auto)
        .map_err(|source| RunError::Backend { node: "(default)".into(), source })?;
    let mut by_node = HashMap::new();
    for (node, key) in bound.recipe.nodes.iter().zip(&bound.keys) {
        let backend = crate::backend::resolve_with_store(node.backend, Some(store))
            .map_err(|source| RunError::Backend { node: node.step.clone(), source })?;
        by_node.insert(*key, backend);
    }
    Ok(Backends { by_node, fallback })
}

/// Marks the conversions node `key` made (those none of its inputs holds)
/// as its own, so they run on its backend.
fn claim_conversions(set: &mut TensorSet, key: &Key, inputs: &[Arc<TensorSet>]) {
    let upstream: std::collections::HashSet<Key> =
        inputs.iter().flat_map(|s| s.tensors.iter().map(|t| t.key)).collect();
    for tensor in &mut set.tensors {
        if let crate::artifact::TensorData::Convert { producer: producer @ None, .. } = &mut tensor.data
            && !upstream.contains(&tensor.key)
        {
            *producer = Some(*key);
        }
    }
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

/// A node's cached result, read and checked, with the fallbacks it was made
/// with; `None` when absent or unusable (the store quarantines what is
/// corrupt).
fn cached_set(store: &dyn Store, key: &Key) -> Option<(Arc<TensorSet>, Fallbacks)> {
    let entry = node_entry(store, key)?;
    let bytes = store.read_blob(&entry.manifest).ok()?;
    let set = TensorSet::decode(&bytes, &entry.manifest.hex()).ok()?;
    store.touch_action(ActionKind::Node, key);
    Some((Arc::new(set), entry.fallbacks))
}

/// A node's cache entry, if it, its manifest and every blob it names are in
/// the store.
fn node_entry(store: &dyn Store, key: &Key) -> Option<NodeEntry> {
    let entry = node_record(store, key)?;
    let complete = store.has_blob(&entry.manifest) && store.has_blobs(&entry.blobs);
    complete.then_some(entry)
}

/// A node's cache entry as recorded, its blobs unchecked: what a report
/// says of a result already checked (or not needed) this run.
fn node_record(store: &dyn Store, key: &Key) -> Option<NodeEntry> {
    serde_json::from_slice(&store.get_action(ActionKind::Node, key)?).ok()
}

fn input_hash(inputs: &[Option<BoundInput>], i: usize) -> Key {
    // bind() hashes every input a node names before keying nodes.
    inputs[i].as_ref().map_or(Key([0; 32]), |b| b.key)
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn total_bytes(set: &TensorSet) -> u64 {
    set.tensors.iter().map(Tensor::n_bytes).sum()
}

/// What the node tasks share.
struct Shared {
    bound: Bound,
    backends: Backends,
    /// Results found in the cache and checked before the run started.
    loaded: Vec<Option<Arc<TensorSet>>>,
    store: Arc<dyn Store>,
    pool: Arc<rayon::ThreadPool>,
    /// Nothing is taken from the cache (`--force`).
    rebuild: bool,
    buffer_limit: Option<u64>,
    link: Vec<LinkMode>,
    /// Conversions being encoded by some node, so no other encodes them again.
    in_flight: InFlight,
    /// Every conversion of the sets produced so far, for encoding siblings together.
    fanout: Fanout,
    progress: MultiProgress,
    /// Written while an external tool runs, read by every other node while
    /// it works: a tool runs alone. Each takes every core, and llama.cpp's
    /// tools print from a logging thread their exit does not wait for
    /// (llama.cpp #22142), which loses their last lines when the machine is
    /// busy.
    tool_runs: std::sync::RwLock<()>,
}

impl Shared {
    fn report(&self, i: usize, status: Status) -> NodeReport {
        let recipe = &self.bound.recipe;
        let node = &recipe.nodes[i];
        let input_names = node.from.iter().filter_map(|src| match src {
            Source::Input(k) => Some(*k),
            Source::Node(_) => None,
        });
        NodeReport {
            id: node.id.clone(),
            step: node.step.clone(),
            op: node.op.name(),
            from: node
                .from
                .iter()
                .filter_map(|src| match src {
                    Source::Node(j) => Some(recipe.nodes[*j].id.clone()),
                    Source::Input(_) => None,
                })
                .collect(),
            inputs: input_names.chain(node.uses.iter().copied()).map(|k| recipe.inputs[k].name.clone()).collect(),
            status,
            key: self.bound.keys[i].hex(),
            // A tool's step runs on whatever the tool runs on.
            backend: match &self.bound.tools[i] {
                Some(found) => found.tool.binary().to_owned(),
                None => self.backends.of(Some(&self.bound.keys[i])).name(),
            },
            duration_ms: 0.0,
            bytes_in: 0,
            bytes_out: 0,
            tensors_encoded: 0,
            tensors_shared: 0,
            tensors_reused: 0,
            tensors_copied: 0,
            tensors_decoded: 0,
            output: match &node.op {
                Op::Export(o) => Some(o.path.clone()),
                _ => None,
            },
            files: Vec::new(),
            fallbacks: Fallbacks::default(),
            why: Vec::new(),
            evaluation: None,
            error: None,
        }
    }

    /// Computes (or loads) node `i` on a blocking thread.
    fn execute(&self, i: usize, inputs: Vec<Arc<TensorSet>>, run: bool) -> (Outcome, NodeReport) {
        let _no_tool_running = match self.bound.recipe.nodes[i].op.tool() {
            None => Some(self.tool_runs.read().unwrap_or_else(|e| e.into_inner())),
            Some(_) => None,
        };
        let started = Instant::now();
        let mut report = self.report(i, if run { Status::Ran } else { Status::Hit });
        report.bytes_in = inputs.iter().map(|s| total_bytes(s)).sum();
        let result = match &self.bound.recipe.nodes[i].op {
            Op::Export(o) => self.export(i, &inputs, o, &mut report).map(|()| Outcome::Written),
            _ => self.manifest(i, inputs, false).and_then(|(set, fallbacks)| {
                self.fanout.register(&set.tensors);
                report.bytes_out = total_bytes(&set);
                if matches!(self.bound.recipe.nodes[i].op, Op::Evaluate(_)) {
                    report.evaluation = ops::evaluate::Evaluation::from_set(&set);
                }
                report.fallbacks = fallbacks;
                if self.bound.recipe.nodes[i].keep && run { self.keep(i, set, &mut report) } else { Ok(set) }
                    .map(Outcome::Set)
            }),
        };
        report.duration_ms = ms(started);
        // Whatever went wrong, an input that moved under the run is the
        // cause to report: its bytes were not the ones the run hashed.
        let result = match self.bound.files.check_unchanged() {
            Ok(()) => result,
            Err(changed) => Err(changed.into()),
        };
        match result {
            Ok(outcome) => (outcome, report),
            Err(e) => {
                report.status = Status::Failed;
                report.error = Some(e.to_string());
                (Outcome::Failed, report)
            }
        }
    }

    /// Node `i`'s tensor set and its fallbacks: from the node cache, or
    /// computed from `inputs` and cached. `dry` computes without caching
    /// (for `plan`).
    fn manifest(
        &self,
        i: usize,
        inputs: Vec<Arc<TensorSet>>,
        dry: bool,
    ) -> Result<(Arc<TensorSet>, Fallbacks), NodeError> {
        if let Some(set) = &self.loaded[i] {
            let fallbacks = node_record(&*self.store, &self.bound.keys[i]).map(|e| e.fallbacks);
            return Ok((Arc::clone(set), fallbacks.unwrap_or_default()));
        }
        if !self.rebuild
            && let Some(cached) = cached_set(&*self.store, &self.bound.keys[i])
        {
            return Ok(cached);
        }
        if let Some(tool) = self.bound.recipe.nodes[i].op.tool().filter(|_| dry) {
            return Err(NodeError::NotPlanned { tool: tool.binary() });
        }
        let (mut set, fallbacks) = self.compute(i, &inputs)?;
        claim_conversions(&mut set, &self.bound.keys[i], &inputs);
        let derived = set.tensors.iter().any(Tensor::is_derived);
        // A kept node's entry is written once, by `keep`, when its tensors
        // are stored: an entry is never replaced by a better one under the
        // same key (a shared cache keeps the first).
        if !dry && self.store.keeps_results() && !(self.bound.recipe.nodes[i].keep && derived) {
            self.cache_manifest(i, &set, !derived, &fallbacks)?;
        }
        Ok((Arc::new(set), fallbacks))
    }

    /// The evaluation an `evaluate` node's cached result holds.
    fn cached_evaluation(&self, i: usize) -> Option<ops::evaluate::Evaluation> {
        if !matches!(self.bound.recipe.nodes[i].op, Op::Evaluate(_)) {
            return None;
        }
        let (set, _) = cached_set(&*self.store, &self.bound.keys[i])?;
        ops::evaluate::Evaluation::from_set(&set)
    }

    /// What the record of node `i`'s cached result says: its size (an
    /// export's files, another node's tensor bytes) and its fallbacks.
    fn cached_record(&self, i: usize) -> (u64, Fallbacks) {
        let key = &self.bound.keys[i];
        match &self.bound.recipe.nodes[i].op {
            Op::Export(o) => {
                let files = export::exported_files(&*self.store, key, o);
                (files.map_or(0, |files| files.iter().map(|f| f.1).sum()), Fallbacks::default())
            }
            _ => node_record(&*self.store, key).map_or_else(Default::default, |e| (e.bytes, e.fallbacks)),
        }
    }

    /// Records node `i`'s result; `kept` when every derived tensor of it is
    /// in the store.
    fn cache_manifest(&self, i: usize, set: &TensorSet, kept: bool, fallbacks: &Fallbacks) -> Result<(), NodeError> {
        let node = &self.bound.recipe.nodes[i];
        let encoded = set.encode().map_err(|source| NodeError::Write { path: self.store.location().into(), source })?;
        let manifest = self.store.put_blob(&encoded)?;
        let (mut blobs, _) = set.references();
        blobs.push(manifest);
        let entry = NodeEntry {
            manifest,
            blobs,
            recipe: self.bound.recipe.name.clone(),
            id: node.id.clone(),
            op: node.op.name().to_owned(),
            tensors: set.tensors.len(),
            bytes: total_bytes(set),
            kept,
            fallbacks: fallbacks.clone(),
        };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| NodeError::Write { path: self.store.location().into(), source: e.into() })?;
        self.store.put_action(ActionKind::Node, &self.bound.keys[i], &json)?;
        Ok(())
    }

    /// Applies node `i`'s op: pure, apart from importance weights stored as
    /// blobs. A quantization also says which tensors fell back.
    fn compute(&self, i: usize, inputs: &[Arc<TensorSet>]) -> Result<(TensorSet, Fallbacks), NodeError> {
        let node: &NodeDecl = &self.bound.recipe.nodes[i];
        let input = || inputs.first().map(Arc::as_ref).ok_or_else(|| NodeError::Upstream(node.id.clone()));
        let quantized = |q: ops::quantize::Quantized| Ok((q.set, q.fallbacks));
        let set = match &node.op {
            Op::Load | Op::MergeShards(_) => {
                let Some(&Source::Input(j)) = node.from.first() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let Some(bound) = self.bound.inputs[j].as_ref() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let models = bound.shards.iter().map(|h| self.bound.files.model(h)).collect::<Result<Vec<_>, _>>()?;
                let input = ops::load::LoadInput {
                    path: &self.bound.recipe.inputs[j].path,
                    shards: models.iter().map(|m| &**m).zip(bound.shards.iter().copied()).collect(),
                    index: bound.index.as_ref(),
                };
                let merge = match &node.op {
                    Op::MergeShards(o) => Some(*o),
                    _ => None,
                };
                ops::load::read(&input, merge)?
            }
            Op::Convert(o) => {
                let Some(&Source::Input(j)) = node.from.first() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let file_key = |path: &std::path::Path| self.bound.files.key_of(path);
                let metadata = node.uses.first().map(|&m| self.bound.recipe.inputs[m].path.as_path());
                ops::convert::apply(&self.bound.recipe.inputs[j].path, o, metadata, &*self.store, &file_key)?
            }
            Op::ConvertLora(o) => {
                let (Some(&Source::Input(j)), Some(&base)) = (node.from.first(), node.uses.first()) else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let file_key = |path: &std::path::Path| self.bound.files.key_of(path);
                let inputs = &self.bound.recipe.inputs;
                ops::convert::apply_lora(&inputs[j].path, &inputs[base].path, o, &*self.store, &file_key)?
            }
            Op::Dequantize(o) => {
                return quantized(ops::quantize::apply(input()?, &o.quantize_options(), None, &*self.store)?);
            }
            Op::Quantize(o) => {
                let imatrix = match (node.uses.first(), imatrix_step_of(node), inputs.get(1)) {
                    (Some(&j), _, _) => {
                        let decl = &self.bound.recipe.inputs[j];
                        crate::quant::plan::load_imatrix(&decl.path, &decl.as_written, o)?
                    }
                    (None, Some(j), Some(set)) => self.importance_from_step(j, set, o)?,
                    _ => None,
                };
                let input = input()?;
                let m = self.materializer();
                let rows = SetRows { materializer: &m, set: input };
                let backend = self.backends.of(Some(&self.bound.keys[i]));
                return quantized(self.pool.install(|| {
                    ops::quantize::apply_planned(input, o, imatrix.as_ref(), &rows, backend, &*self.store)
                })?);
            }
            Op::Filter(o) => ops::filter::apply(input()?, o),
            Op::Rename(o) => ops::rename::apply(input()?, o)?,
            Op::SetMetadata(o) => o.apply(input()?)?,
            Op::DeleteMetadata(o) => o.apply(input()?)?,
            Op::LoraMerge(o) => {
                let source_name = |source: &Source| match *source {
                    Source::Input(j) => self.bound.recipe.inputs[j].name.clone(),
                    Source::Node(j) => self.bound.recipe.nodes[j].id.clone(),
                };
                let base = inputs.first().ok_or_else(|| NodeError::Upstream(node.id.clone()))?;
                let adapters: Vec<ops::lora_merge::MergedAdapter<'_>> = node.from[1..]
                    .iter()
                    .zip(&inputs[1..])
                    .map(|(source, set)| {
                        let name = source_name(source);
                        let scale = o.scale_of(&name);
                        ops::lora_merge::MergedAdapter { name, set, scale }
                    })
                    .collect();
                ops::lora_merge::apply(base, &adapters)?
            }
            Op::Imatrix(o) => self.imatrix(i, input()?, o)?,
            Op::KldBase(o) => self.kld_base(i, input()?, o)?,
            Op::Evaluate(o) => {
                let logits = inputs.get(1).ok_or_else(|| NodeError::Upstream(node.id.clone()))?;
                self.evaluate(i, input()?, logits, o)?
            }
            Op::Assemble => ops::assemble::assemble(&inputs.iter().map(Arc::as_ref).collect::<Vec<_>>())?,
            Op::Unbundle(o) => ops::assemble::unbundle(input()?, o.part)?,
            Op::Export(_) => return Err(NodeError::Upstream(node.id.clone())),
        };
        Ok((set, Fallbacks::default()))
    }

    fn materializer(&self) -> Materializer<'_> {
        Materializer {
            store: &*self.store,
            files: &self.bound.files,
            backends: &self.backends,
            pool: &self.pool,
            rebuild: self.rebuild,
            in_flight: &self.in_flight,
            fanout: &self.fanout,
            counters: Default::default(),
            buffer_limit: self.buffer_limit,
            on_written: None,
        }
    }

    /// Puts every derived tensor of `set` in the store (`keep = true`).
    fn keep(&self, i: usize, set: Arc<TensorSet>, report: &mut NodeReport) -> Result<Arc<TensorSet>, NodeError> {
        let m = self.materializer();
        set.tensors.iter().try_for_each(|t| m.persist(t))?;
        self.cache_manifest(i, &set, true, &report.fallbacks)?;
        report.tensors_encoded = m.counters.encoded.load(Ordering::Relaxed);
        report.tensors_shared = m.counters.shared.load(Ordering::Relaxed);
        report.tensors_reused = m.counters.reused.load(Ordering::Relaxed);
        report.tensors_decoded = m.counters.decoded.load(Ordering::Relaxed);
        Ok(set)
    }
}
