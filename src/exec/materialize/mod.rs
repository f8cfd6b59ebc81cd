//! Turning tensor descriptors into bytes: copies from input files and blobs,
//! and conversions run a slab of rows at a time on the worker pool.
//!
//! A conversion whose result is in the store is copied from its blob. One
//! that is not is computed, written where it is wanted and, when the store
//! keeps tensors, teed into every prepared export that holds it too (which
//! records it as a range of its file when it commits) or, where none does,
//! into a new blob under its key, so the next run reuses it. A chain of
//! conversions is computed slab by slab through every link; only the last
//! link's bytes are written anywhere.

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

mod claims;
mod destinations;
mod encode;
mod inputs;
mod rows;

use claims::{Claim, ClaimGuard};
pub use claims::{Fanout, InFlight};
pub use destinations::{Destinations, Filled, Place};
use encode::Holder;
pub use inputs::{InputFiles, PinnedFile};
pub use rows::SetRows;
use rows::{row_bytes, rows_of, slab_rows};

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
    pub destinations: &'a Destinations,
    pub counters: Counters,
    /// The most bytes of one tensor's rows held at once (`--max-buffer-size`):
    /// slabs shrink to fit it, down to one row.
    pub buffer_limit: Option<u64>,
    /// Told the length of each slab an encode writes to its output, as it
    /// is written: progress within a tensor.
    pub on_written: Option<&'a (dyn Fn(u64) + Sync)>,
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
            TensorData::Convert { .. } | TensorData::Merged { .. } | TensorData::Mxfp4 { .. } => {
                match self.cached(tensor) {
                    Some(hash) => (hash, true),
                    None => return Ok(false),
                }
            }
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
            None => self.encode(tensor, &mut io::sink(), Holder::Blob),
        }
    }

    /// Whether another export's encode already put `tensor`'s bytes at
    /// `place` of a prepared file (counted as found stored).
    pub fn placed_by_another(&self, tensor: &Tensor, place: Option<Place>) -> bool {
        let placed = place.and_then(|place| self.destinations.written(&tensor.key, place)).is_some();
        if placed {
            self.count_stored(tensor);
        }
        placed
    }

    /// Copies `tensor`'s bytes into `out` at `place` from a prepared export
    /// that an encoder of this run filled with them and that has not
    /// committed yet (so the store has no blob of them); false when none
    /// holds them. `place`, if prepared, then holds them as written there.
    pub(super) fn copy_placed(
        &self,
        tensor: &Tensor,
        out: &File,
        place: Option<Place>,
    ) -> Result<bool, MaterializeError> {
        let (Some(place), Some((from, offset, hash))) = (place, self.destinations.any_written(&tensor.key)) else {
            return Ok(false);
        };
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        crate::formats::copy_file_at(&from, offset, out, place.offset, tensor.n_bytes()).map_err(io_err)?;
        self.destinations.mark_written(&tensor.key, &[place], hash);
        self.count_stored(tensor);
        Ok(true)
    }

    /// Stores the `tensor`'s bytes at `offset` of `file` as a blob under its
    /// key, if they still hash to `expected` (what was written there).
    pub fn store_from_file(
        &self,
        tensor: &Tensor,
        file: &File,
        offset: u64,
        expected: Key,
    ) -> Result<(), MaterializeError> {
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        let Some(mut blob) = self.store.blob_writer()? else { return Ok(()) };
        let len = tensor.n_bytes();
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        let mut done = 0;
        while done < len {
            let n = buf.len().min((len - done) as usize);
            file.read_exact_at(&mut buf[..n], offset + done).map_err(io_err)?;
            blob.write_all(&buf[..n]).map_err(io_err)?;
            done += n as u64;
        }
        let (hash, len) = blob.commit()?;
        if hash != expected {
            return Err(io_err(io::Error::other("its bytes changed in the export after they were written")));
        }
        self.record_entry(tensor, hash, len)
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
