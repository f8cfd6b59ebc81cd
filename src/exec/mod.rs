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

mod explain;
pub mod materialize;
pub mod oneshot;
pub mod report;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::artifact::{Tensor, TensorSet};
use crate::codecs::CODEC_VERSION;
use crate::formats::safetensors::{SafeTensorsIndex, read_index};
use crate::formats::{AtomicOutput, FormatError, OpenOptions, gguf, same_file};
use crate::ops::export::{ExportFormat, ExportOptions};
use crate::ops::split::SplitError;
use crate::ops::{self, Op};
use crate::recipe::{NodeDecl, Recipe, Source};
use crate::store::fingerprint::{hash_file, stat_key};
use crate::store::{ActionKind, Key, KeyBuilder, Store, StoreError};
use materialize::{InputFiles, MaterializeError, Materializer};
use report::{InputReport, NodeReport, RunReport, Status};

/// Where a run's heavy work happens and what it shares.
pub struct Engine {
    store: Arc<Store>,
    pool: Arc<rayon::ThreadPool>,
    jobs: usize,
    open: OpenOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("input `{name}` ({}): {source}", path.display())]
    Input { name: String, path: PathBuf, source: StoreError },
    #[error("input `{name}` ({}) has blake3 {actual}, but the recipe pins {expected}", path.display())]
    PinMismatch { name: String, path: PathBuf, expected: Key, actual: Key },
    #[error("input `{name}`: {source}")]
    Split { name: String, source: Box<SplitError> },
    #[error("input `{name}`: {source}")]
    Index { name: String, source: Box<FormatError> },
    #[error("cannot start the workers: {0}")]
    Workers(String),
}

/// Why one node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Quantize(#[from] ops::quantize::QuantizeError),
    #[error(transparent)]
    Imatrix(#[from] crate::quant::imatrix::ImatrixError),
    #[error(transparent)]
    Rename(#[from] ops::rename::RenameError),
    #[error(transparent)]
    Metadata(#[from] ops::metadata::NoSuchKey),
    #[error(transparent)]
    Materialize(#[from] MaterializeError),
    #[error(transparent)]
    Manifest(#[from] crate::artifact::ManifestError),
    #[error("refusing to overwrite the input: {} is {}", output.display(), input.display())]
    OutputIsInput { input: PathBuf, output: PathBuf },
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("input `{0}` failed")]
    Upstream(String),
    #[error("{}: not a shard name (expected PREFIX-NNNNN-of-NNNNN.gguf, more than one shard)", .0.display())]
    NotASplit(PathBuf),
    #[error(transparent)]
    Split(#[from] SplitError),
    #[error(transparent)]
    SafeTensors(crate::formats::safetensors::WriteError),
    #[error(transparent)]
    Shards(#[from] ops::load::ShardError),
    #[error(transparent)]
    Assemble(#[from] ops::assemble::AssembleError),
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
}

/// The export-cache entry: the files an export wrote, by content and stat.
#[derive(serde::Serialize, serde::Deserialize)]
struct ExportEntry {
    blobs: Vec<Key>,
    recipe: String,
    id: String,
    path: PathBuf,
    bytes: u64,
    /// How many of `files` hold tensors (a SafeTensors split adds its index).
    data_files: usize,
    /// In output order (a split's shards in order).
    files: Vec<ExportedFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ExportedFile {
    file_hash: Key,
    len: u64,
    /// Stat fingerprints of files known to hold these bytes.
    fingerprints: Vec<Key>,
}

/// Why writing one output file failed, before the path is known.
enum WriteFailure {
    Io(std::io::Error),
    Materialize(MaterializeError),
    SafeTensors(crate::formats::safetensors::WriteError),
}

impl WriteFailure {
    fn at(self, path: &std::path::Path) -> NodeError {
        match self {
            WriteFailure::Io(source) => NodeError::Write { path: path.to_owned(), source },
            WriteFailure::Materialize(e) => NodeError::Materialize(e),
            WriteFailure::SafeTensors(e) => NodeError::SafeTensors(e),
        }
    }
}

impl From<std::io::Error> for WriteFailure {
    fn from(e: std::io::Error) -> WriteFailure {
        WriteFailure::Io(e)
    }
}

impl From<MaterializeError> for WriteFailure {
    fn from(e: MaterializeError) -> WriteFailure {
        WriteFailure::Materialize(e)
    }
}

/// Writes one GGUF file of an export; returns its length. The layout is
/// known, so every tensor goes straight to its offset, its padding written
/// after it: a file written in order, without holes, is the cheapest for
/// the file system to extend.
fn write_gguf_file(
    m: &Materializer<'_>,
    set: &TensorSet,
    file: &ops::export::OutputFile,
    out: &mut AtomicOutput,
    bar: &ProgressBar,
) -> Result<u64, WriteFailure> {
    let tensors: Vec<&Tensor> = file.plan.tensors.iter().map(|&t| &set.tensors[t]).collect();
    let infos: Vec<_> = tensors.iter().map(|t| t.info()).collect();
    let layout = gguf::write_header(out.writer(), set.endian, &file.plan.metadata, &infos)?;
    let output: &std::fs::File = out.file()?;
    for (k, tensor) in tensors.iter().enumerate() {
        let at = layout.data_offset + layout.tensor_offsets[k];
        if !m.copy_at(tensor, output, at)? {
            m.encode_at(tensor, output, at)?;
        }
        let end = at + tensor.n_bytes();
        write_zeros_at(output, end, gguf::align_up(end, layout.alignment) - end)?;
        bar.inc(tensor.n_bytes());
    }
    Ok(layout.file_len)
}

/// Writes one SafeTensors file of an export, as the Python package lays it
/// out; returns its length. The set's `safetensors.metadata.*` keys become
/// `__metadata__` (none: no `__metadata__`); other metadata has no place.
fn write_safetensors_file(
    m: &Materializer<'_>,
    set: &TensorSet,
    file: &ops::export::OutputFile,
    out: &mut AtomicOutput,
    bar: &ProgressBar,
) -> Result<u64, WriteFailure> {
    use crate::formats::safetensors::{SafeTensorsEntry, header_bytes, safetensors_metadata};
    let tensors: Vec<&Tensor> = file.plan.tensors.iter().map(|&t| &set.tensors[t]).collect();
    let entries = tensors
        .iter()
        .map(|t| SafeTensorsEntry::from_tensor(&t.info()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(WriteFailure::SafeTensors)?;
    let metadata = safetensors_metadata(&set.metadata).map_err(WriteFailure::SafeTensors)?;
    let layout = header_bytes(&entries, (!metadata.is_empty()).then_some(metadata.as_slice()))
        .map_err(WriteFailure::SafeTensors)?;
    out.writer().write_all(&layout.header)?;
    let output: &std::fs::File = out.file()?;
    let data = layout.header.len() as u64;
    for &e in &layout.order {
        let at = data + layout.data_offsets[e].0;
        if !m.copy_at(tensors[e], output, at)? {
            m.encode_at(tensors[e], output, at)?;
        }
        bar.inc(tensors[e].n_bytes());
    }
    Ok(layout.file_len)
}

/// Writes `n` zero bytes at `offset` (padding: usually under 32 bytes).
fn write_zeros_at(file: &std::fs::File, mut offset: u64, mut n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let chunk = n.min(ZEROS.len() as u64);
        file.write_all_at(&ZEROS[..chunk as usize], offset)?;
        (offset, n) = (offset + chunk, n - chunk);
    }
    Ok(())
}

/// Fingerprints kept per export entry (one per place the file was written).
const MAX_FINGERPRINTS: usize = 16;

/// An input bound to its content: one file, or every shard of a split.
#[derive(Debug, Clone)]
struct BoundInput {
    /// The file's blake3, or (a split) a key over every shard's.
    key: Key,
    /// Content hashes of the files, in shard order.
    shards: Vec<Key>,
    /// The index of a sharded SafeTensors checkpoint, when the input is one.
    index: Option<SafeTensorsIndex>,
}

/// A recipe with its inputs hashed and its nodes keyed.
struct Bound {
    recipe: Recipe,
    inputs: Vec<Option<BoundInput>>,
    keys: Vec<Key>,
    consumers: Vec<Vec<usize>>,
    files: InputFiles,
}

impl Engine {
    /// An engine over `store` with `jobs` workers (nodes at once and codec
    /// threads share this budget).
    pub fn new(store: Store, jobs: usize) -> Result<Engine, RunError> {
        let jobs = jobs.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("quantforge-worker-{i}"))
            .build()
            .map_err(|e| RunError::Workers(e.to_string()))?;
        Ok(Engine { store: Arc::new(store), pool: Arc::new(pool), jobs, open: OpenOptions::default() })
    }

    /// How input files are opened (`--no-mmap`).
    pub fn with_open_options(mut self, open: OpenOptions) -> Engine {
        self.open = open;
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
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
        for (decl, used) in recipe.inputs.iter().zip(used) {
            if !used {
                inputs.push(None);
                continue;
            }
            let input_err = |source| RunError::Input { name: decl.name.clone(), path: decl.path.clone(), source };
            let index = match is_safetensors_index(&decl.path) {
                true => Some(
                    read_index(&decl.path)
                        .map_err(|source| RunError::Index { name: decl.name.clone(), source: Box::new(source) })?,
                ),
                false => None,
            };
            let files = match &index {
                Some(index) => index.shards(),
                None => ops::split::shard_set(&decl.path).unwrap_or_else(|| vec![decl.path.clone()]),
            };
            let mut shards = Vec::with_capacity(files.len());
            let (mut bytes, mut rehashed) = (0, false);
            for (no, file) in files.iter().enumerate() {
                if !file.exists() && files.len() > 1 {
                    let source = SplitError::MissingShard { path: file.clone(), shard: no + 1, count: files.len() };
                    return Err(RunError::Split { name: decl.name.clone(), source: Box::new(source) });
                }
                // A store that keeps nothing needs keys unique to this run only.
                let content = match self.store.persists_tensors() || decl.pin.is_some() {
                    true => self.store.content_hash(file),
                    false => self.store.stat_identity(file),
                };
                let content = content.map_err(input_err)?;
                if let Some(expected) = decl.pin
                    && *file == decl.path
                    && expected != content.hash
                {
                    return Err(RunError::PinMismatch {
                        name: decl.name.clone(),
                        path: decl.path.clone(),
                        expected,
                        actual: content.hash,
                    });
                }
                paths.insert(content.hash, file.clone());
                shards.push(content.hash);
                bytes += content.len;
                rehashed |= content.rehashed;
            }
            let key = match (&index, shards.as_slice()) {
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
                    let index_hash = self.store.content_hash(&decl.path).map_err(input_err)?.hash;
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
            });
            inputs.push(Some(BoundInput { key, shards, index }));
        }
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
            }
            keys.push(key.finish());
        }
        let bound = Bound { recipe: recipe.clone(), inputs, keys, consumers, files: InputFiles::new(paths, self.open) };
        Ok((bound, reports))
    }

    /// Runs `recipe`: everything not already done.
    pub fn run(&self, recipe: &Recipe, progress: bool) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let (bound, input_reports) = self.bind(recipe)?;
        let n = bound.recipe.nodes.len();
        let is_export = |i: usize| matches!(bound.recipe.nodes[i].op, Op::Export(_));
        let mut cached = vec![false; n];
        let mut fresh = vec![false; n];
        for i in 0..n {
            match &bound.recipe.nodes[i].op {
                Op::Export(o) => fresh[i] = self.export_is_fresh(&bound.keys[i], o),
                _ => {
                    let keep = bound.recipe.nodes[i].keep;
                    cached[i] = self.node_entry(&bound.keys[i]).is_some_and(|e| e.kept || !keep)
                }
            }
        }
        // From the exports back: what must run, and whose result is needed.
        let mut must_run = vec![false; n];
        let mut needed = vec![false; n];
        for i in (0..n).rev() {
            if is_export(i) {
                must_run[i] = !fresh[i];
                needed[i] = must_run[i];
                continue;
            }
            let node = &bound.recipe.nodes[i];
            let leaf = bound.consumers[i].is_empty();
            needed[i] = bound.consumers[i].iter().any(|&j| must_run[j]) || (!cached[i] && (leaf || node.keep));
            must_run[i] = needed[i] && !cached[i];
        }
        let shared = Arc::new(Shared {
            bound,
            store: Arc::clone(&self.store),
            pool: Arc::clone(&self.pool),
            progress: MultiProgress::with_draw_target(if progress {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            }),
        });
        let mut reports: Vec<Option<NodeReport>> = vec![None; n];
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(self.jobs.max(2))
            .build()
            .map_err(|e| RunError::Workers(e.to_string()))?;
        let jobs = self.jobs;
        let done = runtime.block_on(schedule(Arc::clone(&shared), needed.clone(), must_run.clone(), jobs));
        for (i, report) in done {
            reports[i] = Some(report);
        }
        let shared = &*shared;
        let mut nodes = Vec::with_capacity(n);
        for (i, report) in reports.into_iter().enumerate() {
            let report = report.unwrap_or_else(|| {
                let status = if fresh[i] || cached[i] { Status::Hit } else { Status::Skipped };
                shared.report(i, status)
            });
            if matches!(report.status, Status::Hit | Status::Ran) {
                shared.remember(i);
            }
            nodes.push(report);
        }
        let mut report = RunReport::new(shared.bound.recipe.name.clone(), false, self.jobs, input_reports, nodes);
        report.wall_ms = ms(started);
        Ok(report)
    }

    /// What `run` would do, and why: each node a hit or a miss with the
    /// reasons, and the size of what it would produce.
    pub fn plan(&self, recipe: &Recipe) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let (bound, input_reports) = self.bind(recipe)?;
        let shared = Shared {
            bound,
            store: Arc::clone(&self.store),
            pool: Arc::clone(&self.pool),
            progress: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
        };
        let n = shared.bound.recipe.nodes.len();
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
                    let set = shared.manifest(i, inputs.unwrap_or_default(), true).ok();
                    let mut report = shared.report(i, Status::Miss);
                    report.bytes_out = set.as_ref().map_or(0, |s| total_bytes(s));
                    sets[i] = set;
                    (hit, report)
                }
            };
            if hit {
                report.status = Status::Hit;
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
        let entry: NodeEntry = serde_json::from_slice(&self.store.get_action(ActionKind::Node, key)?).ok()?;
        self.store.has_blob(&entry.manifest).then_some(entry)
    }

    /// True when every file this export wrote before still holds its bytes:
    /// its stat is one we recorded, or its content hashes to what we wrote.
    fn export_is_fresh(&self, key: &Key, options: &ExportOptions) -> bool {
        let Some(mut entry) =
            self.store.get_action(ActionKind::Export, key).and_then(|b| serde_json::from_slice::<ExportEntry>(&b).ok())
        else {
            return false;
        };
        let paths = ops::export::all_paths(options, entry.data_files);
        if paths.len() != entry.files.len() {
            return false;
        }
        let mut learned = false;
        for (path, file) in paths.iter().zip(entry.files.iter_mut()) {
            let Ok(meta) = std::fs::metadata(path) else { return false };
            if meta.len() != file.len {
                return false;
            }
            let fingerprint = stat_key(&meta);
            if file.fingerprints.contains(&fingerprint) {
                continue;
            }
            if hash_file(path).ok() != Some(file.file_hash) {
                return false;
            }
            file.fingerprints.insert(0, fingerprint);
            file.fingerprints.truncate(MAX_FINGERPRINTS);
            learned = true;
        }
        if learned && let Ok(json) = serde_json::to_vec(&entry) {
            // Best effort: without the fingerprint the next run hashes again.
            let _ = self.store.put_action(ActionKind::Export, key, &json);
        }
        !paths.is_empty()
    }
}

/// `model.safetensors.index.json` and the like name a sharded checkpoint.
fn is_safetensors_index(path: &std::path::Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".index.json"))
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
    store: Arc<Store>,
    pool: Arc<rayon::ThreadPool>,
    progress: MultiProgress,
}

/// A finished node, as its consumers see it.
enum Outcome {
    Set(Arc<TensorSet>),
    Written,
    Failed,
}

/// Runs the needed nodes as tokio tasks: each waits for its inputs, then
/// for a worker slot, then computes on a blocking thread.
async fn schedule(
    shared: Arc<Shared>,
    needed: Vec<bool>,
    must_run: Vec<bool>,
    jobs: usize,
) -> Vec<(usize, NodeReport)> {
    use tokio::sync::{Semaphore, watch};
    let n = needed.len();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| watch::channel::<Option<Arc<Outcome>>>(None)).unzip();
    let receivers = Arc::new(receivers);
    let slots = Arc::new(Semaphore::new(jobs));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, sender) in senders.into_iter().enumerate() {
        if !needed[i] {
            continue;
        }
        let (shared, receivers, slots, run) =
            (Arc::clone(&shared), Arc::clone(&receivers), Arc::clone(&slots), must_run[i]);
        tasks.spawn(async move {
            let node = &shared.bound.recipe.nodes[i];
            let mut inputs = Vec::new();
            let mut failed_input = None;
            if run {
                for src in &node.from {
                    let Source::Node(j) = *src else { continue };
                    let mut rx = receivers[j].clone();
                    let outcome = rx.wait_for(Option::is_some).await.ok().and_then(|v| v.clone());
                    match outcome.as_deref() {
                        Some(Outcome::Set(set)) => inputs.push(Arc::clone(set)),
                        _ => failed_input = Some(shared.bound.recipe.nodes[j].id.clone()),
                    }
                }
            }
            let (outcome, report) = match failed_input {
                Some(id) => {
                    let mut report = shared.report(i, Status::Skipped);
                    report.error = Some(NodeError::Upstream(id).to_string());
                    (Outcome::Failed, report)
                }
                None => {
                    let _slot = slots.acquire().await;
                    let worker = Arc::clone(&shared);
                    match tokio::task::spawn_blocking(move || worker.execute(i, inputs, run)).await {
                        Ok(done) => done,
                        Err(e) => {
                            let mut report = shared.report(i, Status::Failed);
                            report.error = Some(format!("worker stopped: {e}"));
                            (Outcome::Failed, report)
                        }
                    }
                }
            };
            // Consumers may all be gone (hits); nobody listening is fine.
            let _ = sender.send(Some(Arc::new(outcome)));
            (i, report)
        });
    }
    let mut done = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(result) = joined {
            done.push(result);
        }
    }
    done
}

impl Shared {
    fn report(&self, i: usize, status: Status) -> NodeReport {
        let node = &self.bound.recipe.nodes[i];
        NodeReport {
            id: node.id.clone(),
            step: node.step.clone(),
            op: node.op.name(),
            status,
            key: self.bound.keys[i].hex(),
            backend: crate::recipe::Backend::Cpu,
            duration_ms: 0.0,
            bytes_in: 0,
            bytes_out: 0,
            tensors_encoded: 0,
            tensors_reused: 0,
            tensors_copied: 0,
            output: match &node.op {
                Op::Export(o) => Some(o.path.clone()),
                _ => None,
            },
            files: Vec::new(),
            why: Vec::new(),
            error: None,
        }
    }

    /// Computes (or loads) node `i` on a blocking thread.
    fn execute(&self, i: usize, inputs: Vec<Arc<TensorSet>>, run: bool) -> (Outcome, NodeReport) {
        let started = Instant::now();
        let mut report = self.report(i, if run { Status::Ran } else { Status::Hit });
        report.bytes_in = inputs.iter().map(|s| total_bytes(s)).sum();
        let result = match &self.bound.recipe.nodes[i].op {
            Op::Export(o) => self.export(i, &inputs, o, &mut report).map(|()| Outcome::Written),
            _ => self.manifest(i, inputs, false).and_then(|set| {
                report.bytes_out = total_bytes(&set);
                if self.bound.recipe.nodes[i].keep && run { self.keep(i, set, &mut report) } else { Ok(set) }
                    .map(Outcome::Set)
            }),
        };
        report.duration_ms = ms(started);
        match result {
            Ok(outcome) => (outcome, report),
            Err(e) => {
                report.status = Status::Failed;
                report.error = Some(e.to_string());
                (Outcome::Failed, report)
            }
        }
    }

    /// Node `i`'s tensor set: from the node cache, or computed from `inputs`
    /// and cached. `dry` computes without caching (for `plan`).
    fn manifest(&self, i: usize, inputs: Vec<Arc<TensorSet>>, dry: bool) -> Result<Arc<TensorSet>, NodeError> {
        let key = &self.bound.keys[i];
        if let Some(entry) = self.entry(key) {
            let bytes = self.store.read_blob(&entry.manifest)?;
            self.store.touch_action(ActionKind::Node, key);
            return Ok(Arc::new(TensorSet::decode(&bytes, &entry.manifest.hex())?));
        }
        let set = self.compute(i, &inputs)?;
        if !dry && self.store.persists_tensors() {
            self.cache_manifest(i, &set)?;
        }
        Ok(Arc::new(set))
    }

    fn entry(&self, key: &Key) -> Option<NodeEntry> {
        let entry: NodeEntry = serde_json::from_slice(&self.store.get_action(ActionKind::Node, key)?).ok()?;
        self.store.has_blob(&entry.manifest).then_some(entry)
    }

    fn cache_manifest(&self, i: usize, set: &TensorSet) -> Result<(), NodeError> {
        let node = &self.bound.recipe.nodes[i];
        let encoded = set.encode().map_err(|source| NodeError::Write { path: self.store.root().into(), source })?;
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
            kept: !set.tensors.iter().any(Tensor::is_derived),
        };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| NodeError::Write { path: self.store.root().into(), source: e.into() })?;
        self.store.put_action(ActionKind::Node, &self.bound.keys[i], &json)?;
        Ok(())
    }

    /// Applies node `i`'s op: pure, apart from importance weights stored as blobs.
    fn compute(&self, i: usize, inputs: &[Arc<TensorSet>]) -> Result<TensorSet, NodeError> {
        let node: &NodeDecl = &self.bound.recipe.nodes[i];
        let input = || inputs.first().map(Arc::as_ref).ok_or_else(|| NodeError::Upstream(node.id.clone()));
        Ok(match &node.op {
            Op::Load | Op::MergeShards(_) => {
                let Some(&Source::Input(j)) = node.from.first() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let Some(bound) = self.bound.inputs[j].as_ref() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let shards = bound.shards.as_slice();
                let merge = match &node.op {
                    Op::MergeShards(o) => Some(*o),
                    _ => None,
                };
                if let Some(index) = &bound.index {
                    let models = shards.iter().map(|h| self.bound.files.model(h)).collect::<Result<Vec<_>, _>>()?;
                    let with_keys: Vec<_> = models.iter().map(|m| &**m).zip(shards.iter().copied()).collect();
                    return Ok(ops::load::apply_safetensors_shards(index, &with_keys)?);
                }
                match (merge, shards) {
                    (None, [single]) => ops::load::apply(&*self.bound.files.model(single)?, *single),
                    (Some(_), [_]) => return Err(NodeError::NotASplit(self.bound.recipe.inputs[j].path.clone())),
                    (merge, _) => {
                        let models = shards.iter().map(|h| self.bound.files.model(h)).collect::<Result<Vec<_>, _>>()?;
                        let with_keys: Vec<_> = models.iter().map(|m| &**m).zip(shards.iter().copied()).collect();
                        let options = merge.unwrap_or(ops::load::MergeOptions { keep_split_keys: false });
                        ops::load::apply_split(&with_keys, options)?
                    }
                }
            }
            Op::Dequantize(o) => ops::quantize::apply(input()?, &o.quantize_options(), None, &self.store)?,
            Op::Quantize(o) => {
                let imatrix = match node.uses.first() {
                    Some(&j) => ops::quantize::load_imatrix(&self.bound.recipe.inputs[j].path, o)?,
                    None => None,
                };
                ops::quantize::apply(input()?, o, imatrix.as_ref(), &self.store)?
            }
            Op::Filter(o) => ops::filter::apply(input()?, o),
            Op::Rename(o) => ops::rename::apply(input()?, o)?,
            Op::SetMetadata(o) => o.apply(input()?),
            Op::DeleteMetadata(o) => o.apply(input()?)?,
            Op::Assemble => ops::assemble::assemble(&inputs.iter().map(Arc::as_ref).collect::<Vec<_>>())?,
            Op::Unbundle(o) => ops::assemble::unbundle(input()?, o.part)?,
            Op::Export(_) => return Err(NodeError::Upstream(node.id.clone())),
        })
    }

    /// A new output file (its directory made), refusing to overwrite an input.
    fn create_output(&self, path: &std::path::Path) -> Result<AtomicOutput, NodeError> {
        if let Some(input) = self.bound.files.paths().find(|p| same_file(p, path)) {
            return Err(NodeError::OutputIsInput { input: input.clone(), output: path.to_owned() });
        }
        let write_err = |source| NodeError::Write { path: path.to_owned(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
        AtomicOutput::create(path).map_err(write_err)
    }

    fn materializer(&self) -> Materializer<'_> {
        Materializer { store: &self.store, files: &self.bound.files, pool: &self.pool, counters: Default::default() }
    }

    /// Puts every derived tensor of `set` in the store (`keep = true`).
    fn keep(&self, i: usize, set: Arc<TensorSet>, report: &mut NodeReport) -> Result<Arc<TensorSet>, NodeError> {
        let m = self.materializer();
        let tensors = set.tensors.iter().map(|t| m.persist(t)).collect::<Result<Vec<_>, _>>()?;
        let kept = TensorSet { tensors, ..(*set).clone() };
        self.cache_manifest(i, &kept)?;
        report.tensors_encoded = m.counters.encoded.load(Ordering::Relaxed);
        report.tensors_reused = m.counters.reused.load(Ordering::Relaxed);
        Ok(Arc::new(kept))
    }

    /// Writes node `i`'s input as the export's file (or shards) and records
    /// what was written. Every file appears only once all are complete.
    fn export(
        &self,
        i: usize,
        inputs: &[Arc<TensorSet>],
        options: &ExportOptions,
        report: &mut NodeReport,
    ) -> Result<(), NodeError> {
        let set = inputs.first().ok_or_else(|| NodeError::Upstream(self.bound.recipe.nodes[i].id.clone()))?;
        let files = ops::export::output_files(set, options)?;
        let planned: u64 = set.tensors.iter().map(Tensor::n_bytes).sum();
        let bar = self.progress.add(ProgressBar::new(planned));
        bar.set_style(
            ProgressStyle::with_template("{msg:24!} {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(self.bound.recipe.nodes[i].id.clone());
        let m = self.materializer();
        let mut written = Vec::with_capacity(files.len() + 1);
        for file in &files {
            let path = &file.path;
            let mut out = self.create_output(path)?;
            let len = match options.format {
                ExportFormat::Gguf => write_gguf_file(&m, set, file, &mut out, &bar),
                ExportFormat::SafeTensors => write_safetensors_file(&m, set, file, &mut out, &bar),
            }
            .map_err(|e| e.at(path))?;
            written.push((path.clone(), out, len, file.plan.tensors.len()));
        }
        if let Some(path) = ops::export::index_path(options) {
            let mut out = self.create_output(&path)?;
            let index = ops::export::safetensors_index(set, &files);
            out.writer().write_all(&index).map_err(|source| NodeError::Write { path: path.clone(), source })?;
            written.push((path, out, index.len() as u64, 0));
        }
        bar.finish_and_clear();
        let count = written.len();
        let mut records = Vec::with_capacity(count);
        for (path, out, len, tensors) in written {
            let write_err = |source| NodeError::Write { path: path.clone(), source };
            out.commit().map_err(write_err)?;
            report.bytes_out += len;
            report.files.push(report::FileReport { path: path.clone(), bytes: len, tensors });
            if self.store.persists_tensors() {
                let meta = std::fs::metadata(&path).map_err(write_err)?;
                let file_hash = hash_file(&path).map_err(write_err)?;
                records.push(ExportedFile { file_hash, len, fingerprints: vec![stat_key(&meta)] });
            }
        }
        if self.store.persists_tensors() {
            let entry = ExportEntry {
                blobs: Vec::new(),
                recipe: self.bound.recipe.name.clone(),
                id: self.bound.recipe.nodes[i].id.clone(),
                path: options.path.clone(),
                bytes: report.bytes_out,
                data_files: files.len(),
                files: records,
            };
            let json = serde_json::to_vec(&entry)
                .map_err(|e| NodeError::Write { path: options.path.clone(), source: e.into() })?;
            self.store.put_action(ActionKind::Export, &self.bound.keys[i], &json)?;
        }
        report.tensors_encoded = m.counters.encoded.load(Ordering::Relaxed);
        report.tensors_reused = m.counters.reused.load(Ordering::Relaxed);
        report.tensors_copied = m.counters.copied.load(Ordering::Relaxed);
        Ok(())
    }
}
