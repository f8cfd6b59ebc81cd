//! Turning tensor descriptors into bytes: copies from input files and blobs,
//! and conversions run a slab of rows at a time on the worker pool.
//!
//! A conversion whose result is in the store is copied from its blob. One
//! that is not is computed, written where it is wanted and, when the store
//! keeps tensors, teed into a new blob under its key, so the next run reuses
//! it. A chain of conversions is computed slab by slab through every link;
//! only the last link's bytes are written anywhere.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rayon::prelude::*;

use crate::artifact::{LoraDelta, Tensor, TensorData, TensorSet};
use crate::backend::{Backend, Slab, SlabError};
use crate::convert::WeightScale;
use crate::formats::{FormatError, ModelFile, OpenOptions};
use crate::key::Key;
use crate::model::{AxisCut, ElementConversion, StoredLayout, TensorInfo};
use crate::quant::budget::{BudgetError, RowSource};
use crate::quant::plan::importance_from_blob;
use crate::store::fingerprint::stat_key;
use crate::store::{ActionKind, BlobWriter, Store, StoreError};
use crate::text::Name;
use crate::types::GgmlType;

/// Rows converted per slab: bounds memory at about this many f32 values per
/// worker while keeping every worker busy on small tensors.
pub(super) const SLAB_ELEMENTS: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum MaterializeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Codec { tensor: String, source: crate::codecs::CodecError },
    #[error("tensor `{}` row {row} holds {value}; llama.cpp refuses to quantize non-finite weights too", Name(.tensor))]
    NonFinite { tensor: String, row: usize, value: f32 },
    #[error("tensor `{}`: {}", Name(.tensor), crate::files::IoText(.source))]
    Io { tensor: String, source: io::Error },
    #[error("no input file has content hash {0}")]
    UnknownInput(Key),
    #[error("tensor `{}`: {source}", Name(.tensor))]
    Checkpoint { tensor: String, source: Box<crate::convert::ConvertError> },
    #[error("input {} changed during the run; nothing computed from it was kept (run again)", .0.display())]
    InputChanged(PathBuf),
}

/// What the tensors written so far cost, as cargo tells Compiling from
/// Fresh: each conversion computed in this run is `encoded` once, for the
/// first node that needs it (a sibling encoded alongside another node's
/// tensor counts for its own node); a later node copying it again counts it
/// `shared`; only bytes from an earlier run count as `reused`.
#[derive(Debug, Default)]
pub struct Counters {
    pub encoded: AtomicU64,
    pub shared: AtomicU64,
    pub reused: AtomicU64,
    pub copied: AtomicU64,
    /// Source tensors read and decoded for conversions: one for a tensor
    /// and the siblings encoded with it.
    pub decoded: AtomicU64,
    /// The backends that ran conversions, by name.
    pub backends: Mutex<std::collections::BTreeSet<String>>,
}

/// The backends of a run: each node's, by node key, and the one for
/// conversions whose node is not in this run.
pub struct Backends {
    pub by_node: HashMap<Key, Arc<dyn Backend>>,
    pub fallback: Arc<dyn Backend>,
}

impl Backends {
    /// The backend that runs `producer`'s conversions.
    pub fn of(&self, producer: Option<&Key>) -> &dyn Backend {
        producer.and_then(|k| self.by_node.get(k)).map_or(&*self.fallback, |b| &**b)
    }
}

/// An input file as it was when the run hashed it.
#[derive(Debug, Clone)]
pub struct PinnedFile {
    pub path: PathBuf,
    /// Its stat fingerprint then: while it holds, the content hash does.
    pub stat: Key,
}

/// The input files of a run, by content hash, opened on first use and
/// pinned: a file whose stat moved since it was hashed is refused, so
/// nothing computed from other bytes is ever stored under its key.
pub struct InputFiles {
    files: HashMap<Key, PinnedFile>,
    options: OpenOptions,
    open: Mutex<HashMap<Key, Arc<ModelFile>>>,
}

impl InputFiles {
    pub fn new(files: HashMap<Key, PinnedFile>, options: OpenOptions) -> InputFiles {
        InputFiles { files, options, open: Mutex::new(HashMap::new()) }
    }

    pub fn path(&self, content: &Key) -> Option<&PathBuf> {
        self.files.get(content).map(|f| &f.path)
    }

    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.values().map(|f| &f.path)
    }

    /// Each file's content hash with its stat, while it still holds.
    pub fn pins(&self) -> impl Iterator<Item = crate::store::fingerprint::Pin> + '_ {
        self.files
            .iter()
            .filter_map(|(hash, pinned)| crate::store::fingerprint::Pin::of(&pinned.path, *hash, pinned.stat))
    }

    /// The content hash the run pinned for the file at `path`.
    pub fn key_of(&self, path: &std::path::Path) -> Option<Key> {
        self.files.iter().find(|(_, f)| f.path == path).map(|(key, _)| *key)
    }

    pub fn model(&self, content: &Key) -> Result<Arc<ModelFile>, MaterializeError> {
        let pinned = self.files.get(content).ok_or(MaterializeError::UnknownInput(*content))?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(model) = open.get(content) {
            return Ok(Arc::clone(model));
        }
        // A file that fails to parse may have changed since it was hashed
        // (truncated by a copy, say): that is the error then, not its parse.
        let model = match ModelFile::open(&pinned.path, self.options) {
            Ok(model) => Arc::new(model),
            Err(e) => {
                self.check(pinned)?;
                return Err(e.into());
            }
        };
        self.check(pinned)?;
        open.insert(*content, Arc::clone(&model));
        Ok(model)
    }

    /// How the file at `path` was opened, when the run opened it.
    pub fn load_of(&self, path: &std::path::Path) -> Option<crate::formats::LoadReport> {
        let key = self.key_of(path)?;
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&key).map(|model| model.load.clone())
    }

    /// Fails when any input's stat moved since the run hashed it.
    pub fn check_unchanged(&self) -> Result<(), MaterializeError> {
        self.files.values().try_for_each(|pinned| self.check(pinned))
    }

    fn check(&self, pinned: &PinnedFile) -> Result<(), MaterializeError> {
        match std::fs::metadata(&pinned.path) {
            Ok(meta) if stat_key(&meta) == pinned.stat => Ok(()),
            _ => Err(MaterializeError::InputChanged(pinned.path.clone())),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TensorEntry {
    blob: Key,
    len: u64,
    blobs: Vec<Key>,
}

pub struct Materializer<'a> {
    pub store: &'a dyn Store,
    pub files: &'a InputFiles,
    pub backends: &'a Backends,
    pub pool: &'a rayon::ThreadPool,
    /// Encode derived tensors even when the store has them (`--force`).
    pub rebuild: bool,
    pub in_flight: &'a InFlight,
    pub fanout: &'a Fanout,
    pub counters: Counters,
    /// The most bytes of one tensor's rows held at once (`--max-buffer-size`):
    /// slabs shrink to fit it, down to one row.
    pub buffer_limit: Option<u64>,
    /// Told the length of each slab an encode writes to its output, as it
    /// is written: progress within a tensor.
    pub on_written: Option<&'a (dyn Fn(u64) + Sync)>,
}

/// The conversions in the run's tensor sets, by the key of the tensor each
/// converts. A ladder's presets convert the same input tensors to several
/// types; encoding one computes every sibling no node has claimed yet with
/// it, reading and decoding each slab of the input once, and stores them
/// for the exports that need them.
#[derive(Default)]
pub struct Fanout {
    by_source: Mutex<HashMap<Key, Vec<Tensor>>>,
}

impl Fanout {
    /// Notes the conversions of a set a node produced.
    pub fn register(&self, tensors: &[Tensor]) {
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        for t in tensors {
            let TensorData::Convert { from, .. } = &t.data else { continue };
            let siblings = by_source.entry(from.key).or_default();
            if !siblings.iter().any(|s| s.key == t.key) {
                siblings.push(t.clone());
            }
        }
    }

    /// The other conversions of `tensor`'s source.
    fn siblings(&self, tensor: &Tensor) -> Vec<Tensor> {
        let TensorData::Convert { from, .. } = &tensor.data else { return Vec::new() };
        let by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        by_source
            .get(&from.key)
            .map_or_else(Vec::new, |all| all.iter().filter(|s| s.key != tensor.key).cloned().collect())
    }
}

/// The conversions some node of the run is encoding, and those it has
/// encoded, by key: an export that needs one being encoded waits for it and
/// copies its blob rather than encode it a second time (two exports of one
/// quantization, a ladder's shared tensors).
///
/// Only a node's own thread waits, never a worker of the pool: encodes run
/// their slabs on the pool, so a waiting worker could hold up the very
/// encode it waits for. A thread waits only while it claims nothing, so no
/// two wait on each other.
#[derive(Default)]
pub struct InFlight {
    state: Mutex<InFlightState>,
    finished: Condvar,
}

#[derive(Default)]
struct InFlightState {
    encoding: HashSet<Key>,
    /// Encoded this run: in the store even under `--force`.
    encoded: HashSet<Key>,
    /// Counted as encoded by some node's counters.
    credited: HashSet<Key>,
}

/// What [`InFlight::claim`] found.
enum Claim<'a> {
    /// This thread encodes it; others wait until the guard drops.
    Mine(ClaimGuard<'a>),
    /// Another node encoded it while this one waited.
    Encoded,
    /// Nothing to wait for, or no waiting here: encode it.
    Alone,
}

struct ClaimGuard<'a> {
    in_flight: &'a InFlight,
    key: Key,
    done: bool,
}

impl InFlight {
    fn claim(&self, key: Key) -> Claim<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.encoded.contains(&key) {
            return Claim::Encoded;
        }
        if !state.encoding.contains(&key) {
            state.encoding.insert(key);
            return Claim::Mine(ClaimGuard { in_flight: self, key, done: false });
        }
        if rayon::current_thread_index().is_some() {
            return Claim::Alone;
        }
        while state.encoding.contains(&key) {
            state = self.finished.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        match state.encoded.contains(&key) {
            true => Claim::Encoded,
            false => Claim::Alone,
        }
    }

    /// Claims `key` when nobody encodes or has encoded it, never waiting.
    fn try_claim(&self, key: Key) -> Option<ClaimGuard<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.encoded.contains(&key) || !state.encoding.insert(key) {
            return None;
        }
        Some(ClaimGuard { in_flight: self, key, done: false })
    }

    fn encoded_this_run(&self, key: &Key) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).encoded.contains(key)
    }

    /// Whether `key` was encoded in this run or is being encoded: a node
    /// that finds it stored while its encoder still holds the claim (the
    /// entry is written before the claim is released) counts it as this
    /// run's work, never as an earlier run's.
    fn made_this_run(&self, key: &Key) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.encoded.contains(key) || state.encoding.contains(key)
    }

    /// Marks `key` counted as encoded; false when a node counted it before.
    fn credit(&self, key: Key) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).credited.insert(key)
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.in_flight.state.lock().unwrap_or_else(|e| e.into_inner());
        state.encoding.remove(&self.key);
        if self.done {
            state.encoded.insert(self.key);
        }
        drop(state);
        self.in_flight.finished.notify_all();
    }
}

impl Materializer<'_> {
    /// Copies `tensor`'s bytes into `out` at `offset` if they already exist
    /// (an input range, file to file in the kernel, or a blob, checked as it
    /// is copied); false when they must be encoded — also when the cached
    /// blob turns out corrupt (the store quarantined it). Safe to call for
    /// many tensors of one file at once.
    pub fn copy_at(&self, tensor: &Tensor, out: &File, offset: u64) -> Result<bool, MaterializeError> {
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        let (hash, recomputable) = match &tensor.data {
            TensorData::Input { file, index } => {
                let model = self.files.model(file)?;
                let info = self.input_info(&model, *index, tensor)?;
                model.copy_tensor_data_to_file_at(info, out, offset).map_err(io_err)?;
                self.counters.copied.fetch_add(1, Ordering::Relaxed);
                return Ok(true);
            }
            TensorData::Blob { hash } => (*hash, false),
            TensorData::Checkpoint { .. } | TensorData::Stacked { .. } => return Ok(false),
            TensorData::Convert { .. } | TensorData::Merged { .. } => match self.cached(tensor) {
                Some(hash) => (hash, true),
                None => return Ok(false),
            },
            TensorData::Slice { from, .. } => {
                self.write_slice(tensor, from, &mut PositionedWriter { file: out, offset })?;
                return Ok(true);
            }
        };
        match self.store.copy_blob_into(&hash, tensor.n_bytes(), out, offset) {
            Ok(()) => {
                self.count_stored(tensor);
                Ok(true)
            }
            Err(e) if recomputable && e.is_recoverable() => {
                tracing::debug!("cache: tensor `{}` not copied ({e}); encoding it again", tensor.name);
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Tells the store which entries and blobs these tensors' bytes will
    /// come from, so a remote store fetches them together, not one by one.
    pub fn prefetch(&self, tensors: &[&Tensor]) {
        let derived: Vec<Key> = tensors
            .iter()
            .filter_map(|t| match &t.data {
                TensorData::Convert { .. } => Some(t.key),
                TensorData::Slice { from, .. } if from.is_derived() => Some(from.key),
                _ => None,
            })
            .collect();
        self.store.prefetch_actions(ActionKind::Tensor, &derived);
        let blobs: Vec<Key> = tensors
            .iter()
            .filter_map(|t| match t.data {
                TensorData::Blob { hash } => Some(hash),
                _ => None,
            })
            .collect();
        self.store.prefetch_blobs(&blobs);
    }

    /// Copies, with one copy, the longest run at the head of `tensors` whose
    /// bytes lie in one input file exactly as they are to lie in `out` (at
    /// `offsets`): unchanged, spaced alike, only zeros between them — a
    /// merged shard's whole data section, say. Returns how many it wrote; 0
    /// when the first's bytes are not in an input file as they are.
    pub fn copy_run_at(&self, tensors: &[&Tensor], offsets: &[u64], out: &File) -> Result<usize, MaterializeError> {
        let (Some(first), Some(&out_start)) = (tensors.first(), offsets.first()) else { return Ok(0) };
        let Some((model, start, len)) = self.input_range(first)? else { return Ok(0) };
        let mut end = start + len;
        let mut n = 1;
        while let (Some(tensor), Some(&out_offset)) = (tensors.get(n), offsets.get(n)) {
            let Some((next, offset, len)) = self.input_range(tensor)? else { break };
            let spaced_alike = offset.checked_sub(start) == out_offset.checked_sub(out_start) && offset >= end;
            if !Arc::ptr_eq(&model, &next) || !spaced_alike || !model.is_zero_range(end, offset - end)? {
                break;
            }
            (end, n) = (offset + len, n + 1);
        }
        let io_err = |source| MaterializeError::Io { tensor: first.name.clone(), source };
        model.copy_range_to_file_at(start, end - start, out, out_start).map_err(io_err)?;
        self.counters.copied.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Copies `tensor`'s bytes into `out` at `offset` as its input file
    /// stores them when that file is big-endian (a big-endian file written
    /// from a big-endian one: nothing swapped twice, and a type with no
    /// swap passes through); false for any other tensor.
    pub fn copy_big_endian_input_at(&self, tensor: &Tensor, out: &File, offset: u64) -> Result<bool, MaterializeError> {
        let Some((model, start, len)) = self.big_endian_input(tensor)? else { return Ok(false) };
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        model.copy_range_to_file_at(start, len, out, offset).map_err(io_err)?;
        self.counters.copied.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Whether `tensor`'s bytes are a big-endian input file's, as stored.
    pub fn is_big_endian_input(&self, tensor: &Tensor) -> Result<bool, MaterializeError> {
        Ok(self.big_endian_input(tensor)?.is_some())
    }

    fn big_endian_input(&self, tensor: &Tensor) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        self.stored_input(tensor, |layout| {
            matches!(layout, StoredLayout::Converted(ElementConversion::FromBigEndian(_)))
        })
    }

    /// The input file and range holding `tensor`'s bytes as they are, if any.
    fn input_range(&self, tensor: &Tensor) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        self.stored_input(tensor, |layout| matches!(layout, StoredLayout::Native))
    }

    /// The input file and stored range of `tensor`, when it is an input's
    /// tensor stored in a layout `wanted` takes.
    fn stored_input(
        &self,
        tensor: &Tensor,
        wanted: fn(&StoredLayout) -> bool,
    ) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        let TensorData::Input { file, index } = &tensor.data else { return Ok(None) };
        let model = self.files.model(file)?;
        let info = self.input_info(&model, *index, tensor)?;
        let (offset, len, keep) = (info.file_offset, info.stored_len, wanted(&info.layout));
        Ok(keep.then_some((model, offset, len)))
    }

    /// Encodes `tensor` into `out` at `offset` (and a blob), or, when
    /// another node encodes it meanwhile, copies that node's blob.
    pub fn encode_at(&self, tensor: &Tensor, out: &File, offset: u64) -> Result<(), MaterializeError> {
        let mut claim = match self.claim(tensor) {
            Claim::Encoded if self.copy_at(tensor, out, offset)? => return Ok(()),
            Claim::Mine(guard) => Some(guard),
            Claim::Encoded | Claim::Alone => None,
        };
        self.encode(tensor, &mut PositionedWriter { file: out, offset })?;
        if let Some(guard) = &mut claim {
            guard.done = true;
        }
        Ok(())
    }

    /// Claims a conversion before encoding it, when its bytes will be in
    /// the store for others to copy.
    fn claim(&self, tensor: &Tensor) -> Claim<'_> {
        match self.store.keeps_results() && tensor.is_derived() {
            true => self.in_flight.claim(tensor.key),
            false => Claim::Alone,
        }
    }

    /// Rows `first..first + n` of a stacked tensor: each part's rows in turn.
    fn stacked_rows(
        &self,
        tensor: &Tensor,
        parts: &[Tensor],
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        let mut out = Vec::with_capacity(n * row_bytes(tensor));
        // A 1-D tensor is one row: its parts' elements one after another.
        if tensor.dims.len() < 2 {
            for part in parts {
                out.extend_from_slice(&self.rows(part, 0, 1)?);
            }
            return Ok(out);
        }
        for (part, from, rows) in part_rows(parts, first, n) {
            out.extend_from_slice(&self.rows(part, from, rows)?);
        }
        Ok(out)
    }

    /// Writes a slice cut from `from`'s bytes a slab at a time. A
    /// conversion is computed whole and stored first (when the store keeps
    /// results), so the devices' slices of it cost one encode between them
    /// and a rerun cuts them from the cache.
    fn write_slice(&self, tensor: &Tensor, from: &Tensor, out: &mut dyn Write) -> Result<(), MaterializeError> {
        if self.store.keeps_results() && from.is_derived() && self.cached(from).is_none() {
            match self.claim(from) {
                Claim::Encoded => {}
                Claim::Mine(mut guard) => {
                    self.encode(from, &mut io::sink())?;
                    guard.done = true;
                }
                Claim::Alone => self.encode(from, &mut io::sink())?,
            }
        }
        for (first, rows) in self.slabs(tensor, from) {
            let bytes = self.rows(tensor, first, rows)?;
            out.write_all(&bytes).map_err(|source| MaterializeError::Io { tensor: tensor.name.clone(), source })?;
        }
        self.counters.copied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rows `first..first + n` of a slice of `from`: parts of each of
    /// `from`'s rows for a cut along axis 0, runs of its rows for another.
    fn slice_rows(
        &self,
        tensor: &Tensor,
        from: &Tensor,
        cut: &AxisCut,
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        let whole = from.info();
        let misfit = || MaterializeError::Io {
            tensor: tensor.name.clone(),
            source: io::Error::other(format!("its slice {cut:?} does not fit its dimensions {:?}", whole.dims)),
        };
        if cut.axis == 0 {
            let rows = TensorInfo::new(whole.name.clone(), vec![whole.dims[0], n as u64], whole.ggml_type);
            let source = self.rows(from, first, n)?;
            self.release(from, first, n);
            return cut.cut(&rows, &source).ok_or_else(misfit);
        }
        let mut bytes = Vec::with_capacity(n * row_bytes(tensor));
        let (wanted, end) = (first as u64, (first + n) as u64);
        let mut run_start = 0;
        for (from_first, count) in cut.row_runs(&whole).ok_or_else(misfit)? {
            let run_end = run_start + count;
            let (lo, hi) = (wanted.max(run_start), end.min(run_end));
            if lo < hi {
                let (row, rows) = ((from_first + lo - run_start) as usize, (hi - lo) as usize);
                bytes.extend_from_slice(&self.rows(from, row, rows)?);
                self.release(from, row, rows);
            }
            if run_end >= end {
                break;
            }
            run_start = run_end;
        }
        Ok(bytes)
    }

    /// Puts a derived tensor's bytes in the store under its key, for a step
    /// that keeps its result. The descriptor stays a conversion, so a kept
    /// blob found corrupt later is computed again, never a dead end.
    pub fn persist(&self, tensor: &Tensor) -> Result<(), MaterializeError> {
        if !tensor.is_derived() {
            return Ok(());
        }
        match self.cached(tensor) {
            Some(_) => {
                self.count_stored(tensor);
                Ok(())
            }
            None => self.encode(tensor, &mut io::sink()),
        }
    }

    /// Counts a tensor whose bytes were found stored: encoded in this run
    /// (for this node, alongside another's; or shared, when a node counted
    /// it already), or reused from an earlier run.
    fn count_stored(&self, tensor: &Tensor) {
        let TensorData::Convert { producer, .. } = &tensor.data else {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !self.in_flight.made_this_run(&tensor.key) {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let counter = if self.in_flight.credit(tensor.key) { &self.counters.encoded } else { &self.counters.shared };
        counter.fetch_add(1, Ordering::Relaxed);
        // The report names the backend that computed it.
        let name = self.backends.of(producer.as_ref()).name();
        self.counters.backends.lock().unwrap_or_else(|e| e.into_inner()).insert(name);
    }

    /// Counts a tensor this node encoded itself (work done, whoever else
    /// may have needed it).
    fn count_encoded(&self, tensor: &Tensor) {
        self.in_flight.credit(tensor.key);
        self.counters.encoded.fetch_add(1, Ordering::Relaxed);
    }

    /// True when a derived tensor's bytes are in the store.
    pub fn is_cached(&self, tensor: &Tensor) -> bool {
        self.cached(tensor).is_some()
    }

    /// The blob holding `tensor`'s bytes in the store: a derived tensor's,
    /// or the blob a converted tensor was stored as.
    pub fn stored_blob(&self, tensor: &Tensor) -> Option<Key> {
        match &tensor.data {
            TensorData::Blob { hash } => Some(*hash),
            TensorData::Convert { .. } => self.lookup(tensor),
            _ => None,
        }
    }

    /// The blob holding a derived tensor's bytes, if the store has it,
    /// its entry marked used.
    fn cached(&self, tensor: &Tensor) -> Option<Key> {
        let blob = self.lookup(tensor)?;
        self.store.touch_action(ActionKind::Tensor, &tensor.key);
        Some(blob)
    }

    /// [`Self::cached`] without marking the entry used: for a tensor this
    /// run has already taken.
    fn lookup(&self, tensor: &Tensor) -> Option<Key> {
        if self.rebuild && !self.in_flight.encoded_this_run(&tensor.key) {
            return None;
        }
        let entry: TensorEntry =
            serde_json::from_slice(&self.store.get_action(ActionKind::Tensor, &tensor.key)?).ok()?;
        (entry.len == tensor.n_bytes() && self.store.has_blob(&entry.blob)).then_some(entry.blob)
    }

    /// Rows `first..first + n` of `tensor`, the `index`th tensor of input
    /// `model`, where they lie (mapped, or read).
    fn input_rows<'m>(
        &self,
        model: &'m ModelFile,
        index: usize,
        tensor: &Tensor,
        first: usize,
        n: usize,
    ) -> Result<std::borrow::Cow<'m, [u8]>, MaterializeError> {
        let info = self.input_info(model, index, tensor)?;
        let row = row_bytes(tensor) as u64;
        Ok(model.tensor_data_range(info, first as u64 * row, n as u64 * row)?)
    }

    fn input_info<'m>(
        &self,
        model: &'m ModelFile,
        index: usize,
        tensor: &Tensor,
    ) -> Result<&'m crate::model::TensorInfo, MaterializeError> {
        model.tensors.get(index).filter(|t| t.dims == tensor.dims && t.ggml_type == tensor.ggml_type).ok_or_else(|| {
            MaterializeError::Io {
                tensor: tensor.name.clone(),
                source: io::Error::other(format!("{} has no tensor {index}", model.path().display())),
            }
        })
    }

    /// The siblings of `tensor` ([`Fanout`]) this thread may encode with
    /// it: not in the store, claimed from every other node. Only where the
    /// store keeps results, which is how the others get them.
    fn claim_siblings(&self, tensor: &Tensor) -> Vec<(Tensor, ClaimGuard<'_>)> {
        if !self.store.keeps_results() {
            return Vec::new();
        }
        self.fanout
            .siblings(tensor)
            .into_iter()
            .filter(|s| self.cached(s).is_none())
            .filter_map(|s| self.in_flight.try_claim(s.key).map(|guard| (s, guard)))
            .collect()
    }

    /// Computes a conversion slab by slab into `out` (and a blob), with
    /// its unclaimed siblings.
    fn encode(&self, tensor: &Tensor, out: &mut dyn Write) -> Result<(), MaterializeError> {
        let siblings = self.claim_siblings(tensor);
        if !siblings.is_empty() {
            return self.encode_with_siblings(tensor, siblings, out);
        }
        self.counters
            .decoded
            .fetch_add(u64::from(matches!(tensor.data, TensorData::Convert { .. })), Ordering::Relaxed);
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        let mut blob = self.store.blob_writer()?;
        self.pipelined(
            tensor,
            tensor,
            |first, rows| {
                let bytes = self.rows(tensor, first, rows)?;
                self.release(tensor, first, rows);
                Ok(bytes)
            },
            |bytes| {
                out.write_all(&bytes).map_err(io_err)?;
                self.written(bytes.len());
                if let Some(blob) = &mut blob {
                    blob.write_all(&bytes).map_err(io_err)?;
                }
                Ok(())
            },
        )?;
        if let Some(blob) = blob {
            // Credited to this node before others can find it stored.
            self.in_flight.credit(tensor.key);
            self.record(tensor, blob)?;
        }
        self.count_encoded(tensor);
        Ok(())
    }

    fn written(&self, len: usize) {
        if let Some(on_written) = self.on_written {
            on_written(len as u64);
        }
    }

    /// The slabs `tensor` is computed in from `source`: (first row, rows),
    /// front to back.
    fn slabs(&self, tensor: &Tensor, source: &Tensor) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (n_per_row, n_rows) = rows_of(tensor);
        let held_per_row = row_bytes(source) + 4 * n_per_row + row_bytes(tensor);
        let slab_rows = slab_rows(n_per_row, held_per_row, self.buffer_limit);
        (0..n_rows).step_by(slab_rows).map(move |first| (first, slab_rows.min(n_rows - first)))
    }

    /// Computes `tensor` slab by slab from `source`'s rows on the pool with
    /// `compute` (first row, rows), while this thread reads the input of the
    /// slab after ahead and hands the slab before to `write`: loading the
    /// next slab's input and writing a slab (and hashing it into a blob)
    /// overlap encoding, instead of stalling the pool or leaving it idle.
    fn pipelined<T: Send>(
        &self,
        tensor: &Tensor,
        source: &Tensor,
        compute: impl Fn(usize, usize) -> Result<T, MaterializeError> + Sync,
        mut write: impl FnMut(T) -> Result<(), MaterializeError>,
    ) -> Result<(), MaterializeError> {
        let mut computed_before: Option<T> = None;
        for slab in self.slabs(tensor, source).map(Some).chain([None]) {
            let mut computed = None;
            self.pool.in_place_scope(|scope| {
                if let Some((first, rows)) = slab {
                    let (compute, computed) = (&compute, &mut computed);
                    scope.spawn(move |_| *computed = Some(compute(first, rows)));
                    self.read_ahead(source, first + rows, rows);
                }
                computed_before.take().map_or(Ok(()), &mut write)
            })?;
            computed_before = computed.transpose()?;
        }
        Ok(())
    }

    /// Commits a derived tensor's blob and records it under the tensor's key.
    fn record(&self, tensor: &Tensor, blob: Box<dyn BlobWriter>) -> Result<(), MaterializeError> {
        let (hash, len) = blob.commit()?;
        // Bytes computed from an input that moved under the run are never
        // recorded under a key derived from its old content.
        self.files.check_unchanged()?;
        let entry = TensorEntry { blob: hash, len, blobs: vec![hash] };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| MaterializeError::Io { tensor: tensor.name.clone(), source: e.into() })?;
        // An entry already there names these same bytes (a key names its
        // bytes by derivation): the first writer's stands.
        self.store.put_action_if_absent(ActionKind::Tensor, &tensor.key, &json)?;
        if self.store.keeps_results() {
            super::TENSORS_KEPT.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Self::encode`] of `tensor` and the siblings claimed for it: each
    /// slab of their source read and decoded once, then encoded to every
    /// one's type, each into its blob (and `tensor`'s into `out` too).
    fn encode_with_siblings(
        &self,
        tensor: &Tensor,
        siblings: Vec<(Tensor, ClaimGuard<'_>)>,
        out: &mut dyn Write,
    ) -> Result<(), MaterializeError> {
        let TensorData::Convert { from, producer, .. } = &tensor.data else {
            unreachable!("only conversions have siblings")
        };
        let (siblings, mut guards): (Vec<Tensor>, Vec<ClaimGuard<'_>>) = siblings.into_iter().unzip();
        let targets: Vec<&Tensor> = std::iter::once(tensor).chain(&siblings).collect();
        let mut blobs = Vec::with_capacity(targets.len());
        let mut importances = Vec::with_capacity(targets.len());
        for t in &targets {
            let TensorData::Convert { importance, .. } = &t.data else { unreachable!("a sibling is a conversion") };
            importances.push(match importance {
                Some(hash) => Some(importance_from_blob(&self.store.read_blob(hash)?)),
                None => None,
            });
            blobs.push(self.store.blob_writer()?.ok_or_else(|| MaterializeError::Io {
                tensor: t.name.clone(),
                source: io::Error::other("the store keeps no results"),
            })?);
        }
        self.pipelined(
            tensor,
            from,
            |first, rows| {
                let values = self.decoded_rows(from, producer.as_ref(), first, rows)?;
                self.release(from, first, rows);
                // The targets side by side on the pool, each spreading its rows too.
                self.pool.install(|| {
                    targets
                        .par_iter()
                        .zip(&importances)
                        .map(|(target, importance)| {
                            let TensorData::Convert { producer, .. } = &target.data else {
                                unreachable!("a conversion")
                            };
                            let values = bytemuck::cast_slice(&values);
                            self.convert_rows(
                                target,
                                GgmlType::F32,
                                producer.as_ref(),
                                values,
                                first,
                                importance.as_deref(),
                            )
                        })
                        .collect::<Result<Vec<Vec<u8>>, MaterializeError>>()
                })
            },
            |encoded| {
                for (k, ((target, blob), bytes)) in targets.iter().zip(&mut blobs).zip(encoded).enumerate() {
                    let io_err = |source| MaterializeError::Io { tensor: target.name.clone(), source };
                    if k == 0 {
                        out.write_all(&bytes).map_err(io_err)?;
                        self.written(bytes.len());
                    }
                    blob.write_all(&bytes).map_err(io_err)?;
                }
                Ok(())
            },
        )?;
        // `tensor` is credited to this node before others can find it stored;
        // the siblings count for the nodes that copy them.
        self.in_flight.credit(tensor.key);
        for (target, blob) in targets.iter().zip(blobs) {
            self.record(target, blob)?;
        }
        for guard in &mut guards {
            guard.done = true;
        }
        // The siblings count for the nodes that copy them.
        self.count_encoded(tensor);
        self.counters.decoded.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rows `first..first + n` of `tensor` decoded to f32 on `producer`'s backend.
    fn decoded_rows(
        &self,
        tensor: &Tensor,
        producer: Option<&Key>,
        first: usize,
        n: usize,
    ) -> Result<Vec<f32>, MaterializeError> {
        let (n_per_row, _) = rows_of(tensor);
        // An input's rows are decoded where they are mapped, not copied first.
        let model;
        let source = match &tensor.data {
            TensorData::Input { file, index } => {
                model = self.files.model(file)?;
                self.input_rows(&model, *index, tensor, first, n)?
            }
            _ => self.rows(tensor, first, n)?.into(),
        };
        let slab = Slab {
            from: tensor.ggml_type,
            to: GgmlType::F32,
            n_per_row,
            first_row: first,
            rows_per_expert: 1,
            source: &source,
            importance: None,
            row_numbers: None,
        };
        let mut values = vec![0f32; n * n_per_row];
        let backend = self.backends.of(producer);
        self.pool
            .install(|| backend.decode(&slab, &mut values))
            .map_err(|source| MaterializeError::Codec { tensor: tensor.name.clone(), source })?;
        Ok(values)
    }

    /// All of a small tensor's bytes, in its type, at once (an importance
    /// matrix's sums and counts).
    pub fn whole(&self, tensor: &Tensor) -> Result<Vec<u8>, MaterializeError> {
        self.rows(tensor, 0, rows_of(tensor).1)
    }

    /// Rows `first..first + n` of `tensor`, in its type.
    fn rows(&self, tensor: &Tensor, first: usize, n: usize) -> Result<Vec<u8>, MaterializeError> {
        let row_bytes = row_bytes(tensor);
        let (offset, len) = ((first * row_bytes) as u64, (n * row_bytes) as u64);
        match &tensor.data {
            TensorData::Input { file, index } => {
                let model = self.files.model(file)?;
                Ok(self.input_rows(&model, *index, tensor, first, n)?.into_owned())
            }
            TensorData::Blob { hash } => Ok(self.store.read_blob_range(hash, offset, len)?),
            TensorData::Checkpoint { file, index, transform, scale } => {
                let model = self.files.model(file)?;
                // A checkpoint tensor names no node: the run's default backend decodes it.
                let backend = &*self.backends.fallback;
                let source = model.tensors.get(*index).ok_or_else(|| MaterializeError::Io {
                    tensor: tensor.name.clone(),
                    source: io::Error::other(format!("{} has no tensor {index}", model.path().display())),
                })?;
                let checkpoint_error =
                    |e| MaterializeError::Checkpoint { tensor: tensor.name.clone(), source: Box::new(e) };
                let scale = match scale {
                    Some(scale) => {
                        let scales = self.files.model(&scale.file)?;
                        let read = WeightScale::read(source, &scales, scale.index, scale.block, backend);
                        Some(read.map_err(checkpoint_error)?)
                    }
                    None => None,
                };
                let (n_per_row, _) = rows_of(tensor);
                let mut values = vec![0f32; n * n_per_row];
                crate::convert::checkpoint_rows(&model, source, transform, scale.as_ref(), first, backend, &mut values)
                    .map_err(checkpoint_error)?;
                // f32 rows in the host order: little-endian, as the codecs assume.
                Ok(bytemuck::cast_slice(&values).to_vec())
            }
            TensorData::Convert { from, importance, producer } => {
                if let Some(hash) = self.cached(tensor) {
                    match self.store.read_blob_range(&hash, offset, len) {
                        Ok(bytes) => return Ok(bytes),
                        // Quarantined: computed below instead.
                        Err(e) if e.is_recoverable() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let weights = match importance {
                    Some(hash) => Some(importance_from_blob(&self.store.read_blob(hash)?)),
                    None => None,
                };
                // Straight from an input: convert from the mapped bytes, no copy.
                if let TensorData::Input { file, index } = &from.data {
                    let model = self.files.model(file)?;
                    let source = self.input_rows(&model, *index, from, first, n)?;
                    return self.convert_rows(
                        tensor,
                        from.ggml_type,
                        producer.as_ref(),
                        &source,
                        first,
                        weights.as_deref(),
                    );
                }
                // Reordered at most: converted from the stored bytes, not
                // through an f32 copy of them; kept as they are when stored
                // in the tensor's type and finite (what came back unchanged
                // through f32; the conversion refuses the others).
                if let TensorData::Checkpoint { file, index, transform, scale: None } = &from.data {
                    let model = self.files.model(file)?;
                    let checkpoint_error =
                        |e| MaterializeError::Checkpoint { tensor: tensor.name.clone(), source: Box::new(e) };
                    if let Some(source) = model.tensors.get(*index)
                        && let Some(stored) =
                            crate::convert::checkpoint_rows_as_stored(&model, source, transform, first, n)
                                .map_err(checkpoint_error)?
                    {
                        if source.ggml_type == tensor.ggml_type
                            && crate::codecs::all_finite(tensor.ggml_type, &stored) == Some(true)
                        {
                            return Ok(stored.into_owned());
                        }
                        let producer = producer.as_ref();
                        return self.convert_rows(
                            tensor,
                            source.ggml_type,
                            producer,
                            &stored,
                            first,
                            weights.as_deref(),
                        );
                    }
                }
                let source = self.rows(from, first, n)?;
                self.convert_rows(tensor, from.ggml_type, producer.as_ref(), &source, first, weights.as_deref())
            }
            TensorData::Slice { from, cut } => self.slice_rows(tensor, from, cut, first, n),
            TensorData::Stacked { parts } => self.stacked_rows(tensor, parts, first, n),
            TensorData::Merged { base, deltas } => self.merged_rows(tensor, base, deltas, first, n),
        }
    }

    /// Rows `first..first + n` of a merged tensor: the base's rows in f32,
    /// each delta added, encoded to the tensor's type.
    fn merged_rows(
        &self,
        tensor: &Tensor,
        base: &Tensor,
        deltas: &[LoraDelta],
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        use crate::ops::lora_merge::{add_delta, add_embedding_delta};
        let (n_per_row, _) = rows_of(tensor);
        let mut values = self.decoded_rows(base, None, first, n)?;
        for delta in deltas {
            let (rank, b_rows) = rows_of(&delta.b);
            if delta.token_embedding {
                let a_rows = self.decoded_rows(&delta.a, None, first, n)?;
                let b = self.decoded_rows(&delta.b, None, 0, b_rows)?;
                self.pool.install(|| add_embedding_delta(&mut values, &a_rows, &b, rank, delta.scale()));
                continue;
            }
            // Rows of a stack of experts: each expert's run with its own A.
            let per_expert = delta.b.dims[1] as usize;
            let mut row = first;
            while row < first + n {
                let expert = row / per_expert;
                let end = ((expert + 1) * per_expert).min(first + n);
                let a = self.decoded_rows(&delta.a, None, expert * rank, rank)?;
                let b = self.decoded_rows(&delta.b, None, row, end - row)?;
                let rows = &mut values[(row - first) * n_per_row..(end - first) * n_per_row];
                self.pool.install(|| add_delta(rows, &a, &b, rank, delta.scale()));
                row = end;
            }
        }
        let mut encoded = vec![0u8; n * row_bytes(tensor)];
        self.pool
            .install(|| {
                encoded
                    .par_chunks_mut(row_bytes(tensor).max(1))
                    .zip(values.par_chunks(n_per_row.max(1)))
                    .try_for_each(|(out, row)| crate::codecs::quantize_row(tensor.ggml_type, row, None, out))
            })
            .map_err(|source| MaterializeError::Codec { tensor: tensor.name.clone(), source })?;
        Ok(encoded)
    }

    /// Converts whole rows of type `from` (starting at row `first`) to
    /// `tensor`'s type on the backend of the node that made the conversion.
    fn convert_rows(
        &self,
        tensor: &Tensor,
        from: GgmlType,
        producer: Option<&Key>,
        source: &[u8],
        first: usize,
        importance: Option<&[f32]>,
    ) -> Result<Vec<u8>, MaterializeError> {
        let (n_per_row, _) = rows_of(tensor);
        let slab = Slab {
            from,
            to: tensor.ggml_type,
            n_per_row,
            first_row: first,
            rows_per_expert: tensor.dims.get(1).copied().unwrap_or(1).max(1) as usize,
            source,
            importance,
            row_numbers: None,
        };
        let mut encoded = vec![0u8; slab.rows() * row_bytes(tensor)];
        let backend = self.backends.of(producer);
        self.pool.install(|| backend.convert(&slab, &mut encoded)).map_err(|e| match e {
            SlabError::Codec(source) => MaterializeError::Codec { tensor: tensor.name.clone(), source },
            SlabError::NonFinite { row, value } => {
                MaterializeError::NonFinite { tensor: tensor.name.clone(), row, value }
            }
        })?;
        self.counters.backends.lock().unwrap_or_else(|e| e.into_inner()).insert(backend.ran_on(&slab, true));
        Ok(encoded)
    }

    /// Lets the kernel drop input pages a slab has consumed.
    fn release(&self, tensor: &Tensor, first: usize, n: usize) {
        self.with_input_rows(tensor, first, n, &|model, info, offset, len| {
            model.release_tensor_range(info, offset, len)
        });
    }

    /// Reads the input of a slab to come ahead (see [`ModelFile::read_ahead_tensor_range`]).
    fn read_ahead(&self, tensor: &Tensor, first: usize, n: usize) {
        self.with_input_rows(tensor, first, n, &|model, info, offset, len| {
            model.read_ahead_tensor_range(info, offset, len)
        });
    }

    /// Calls `with` on the input file, tensor and byte range that rows
    /// `first..first + n` of `tensor` are computed from, when one input
    /// tensor's rows are (or each part's, of a stacked tensor).
    fn with_input_rows(
        &self,
        tensor: &Tensor,
        first: usize,
        n: usize,
        with: &dyn Fn(&ModelFile, &TensorInfo, u64, u64),
    ) {
        match &tensor.data {
            TensorData::Convert { from, .. } => self.with_input_rows(from, first, n, with),
            TensorData::Input { file, index } => {
                if let Ok(model) = self.files.model(file)
                    && let Some(info) = model.tensors.get(*index)
                {
                    let row = row_bytes(tensor) as u64;
                    with(&model, info, first as u64 * row, n as u64 * row);
                }
            }
            // A range of a fused tensor reads rows spread over it: no one range to name.
            TensorData::Checkpoint { transform, .. } if transform.rows.is_some() => {}
            TensorData::Checkpoint { file, index, .. } => {
                if let Ok(model) = self.files.model(file)
                    && let Some(info) = model.tensors.get(*index)
                {
                    let row = info.ggml_type.row_size(info.dims[0]).unwrap_or(0);
                    with(&model, info, first as u64 * row, n as u64 * row);
                }
            }
            TensorData::Stacked { parts } if tensor.dims.len() < 2 => {
                parts.iter().for_each(|part| self.with_input_rows(part, 0, 1, with));
            }
            TensorData::Stacked { parts } => {
                for (part, from, n) in part_rows(parts, first, n) {
                    self.with_input_rows(part, from, n, with);
                }
            }
            // All of each A is read for every slab: only the rows of the base and of each B are the slab's.
            TensorData::Merged { base, deltas } => {
                self.with_input_rows(base, first, n, with);
                deltas.iter().for_each(|delta| self.with_input_rows(&delta.b, first, n, with));
            }
            // A slice's rows are its source's, released as they are cut; a blob is the store's.
            TensorData::Blob { .. } | TensorData::Slice { .. } => {}
        }
    }
}

/// A step's tensor set as the budget planner reads it: the sampled rows
/// computed as an export would compute them (conversions included), decoded.
pub struct SetRows<'a> {
    pub materializer: &'a Materializer<'a>,
    pub set: &'a TensorSet,
}

impl RowSource for SetRows<'_> {
    fn rows(&self, index: usize, rows: &[usize], backend: &dyn Backend, out: &mut [f32]) -> Result<(), BudgetError> {
        let tensor = &self.set.tensors[index];
        let (n_per_row, _) = rows_of(tensor);
        for (&r, out) in rows.iter().zip(out.chunks_exact_mut(n_per_row)) {
            let encoded = self
                .materializer
                .rows(tensor, r, 1)
                .map_err(|e| BudgetError::Rows { tensor: tensor.name.clone(), source: Box::new(e) })?;
            let slab = Slab {
                from: tensor.ggml_type,
                to: tensor.ggml_type,
                n_per_row,
                first_row: r,
                rows_per_expert: 1,
                source: &encoded,
                importance: None,
                row_numbers: None,
            };
            backend.decode(&slab, out).map_err(|source| BudgetError::Codec { tensor: tensor.name.clone(), source })?;
            self.materializer.release(tensor, r, 1);
        }
        Ok(())
    }
}

/// (elements per row, rows).
/// The parts of a stacked tensor that rows `first..first + n` fall in:
/// each part with its first row and the number of its rows taken.
fn part_rows(parts: &[Tensor], first: usize, n: usize) -> impl Iterator<Item = (&Tensor, usize, usize)> {
    let mut start = 0;
    parts.iter().filter_map(move |part| {
        let rows = rows_of(part).1;
        let (part_start, part_end) = (start, start + rows);
        start = part_end;
        let (from, to) = (first.max(part_start), (first + n).min(part_end));
        (from < to).then(|| (part, from - part_start, to - from))
    })
}

fn rows_of(tensor: &Tensor) -> (usize, usize) {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1) as usize;
    let n_elements = tensor.info().n_elements() as usize;
    (n_per_row, n_elements.checked_div(n_per_row).unwrap_or(0))
}

/// Rows per slab: [`SLAB_ELEMENTS`] values, or fewer under a buffer limit.
/// Three slabs are alive at once (one read ahead, one computed, one
/// written), each holding `held_per_row` bytes a row (as read, as f32 and
/// as encoded), so a slab takes a third of the limit; never less than a row.
fn slab_rows(n_per_row: usize, held_per_row: usize, buffer_limit: Option<u64>) -> usize {
    let rows = (SLAB_ELEMENTS / n_per_row.max(1)).max(1);
    match buffer_limit {
        Some(limit) => rows.min((limit / 3 / held_per_row.max(1) as u64).max(1) as usize),
        None => rows,
    }
}

fn row_bytes(tensor: &Tensor) -> usize {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1);
    tensor.ggml_type.row_size(n_per_row).unwrap_or(0) as usize
}

/// Writes at increasing offsets of a file without moving its position.
struct PositionedWriter<'a> {
    file: &'a File,
    offset: u64,
}

impl Write for PositionedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_limit_shrinks_slabs_to_a_third_of_it_and_never_below_a_row() {
        // Gemma's token embeddings, F16 to Q4_K: 640 values a row.
        let held = 2 * 640 + 4 * 640 + 360;
        assert_eq!(slab_rows(640, held, None), SLAB_ELEMENTS / 640);
        assert_eq!(slab_rows(640, held, Some(1 << 20)), (1 << 20) / 3 / held);
        assert_eq!(slab_rows(640, held, Some(1 << 40)), SLAB_ELEMENTS / 640);
        assert_eq!(slab_rows(1 << 22, 7 << 22, Some(1 << 20)), 1);
    }
}
