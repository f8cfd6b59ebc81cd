//! Exports: writing a tensor set as GGUF or SafeTensors files (whole or
//! split) or one GGJT file, every tensor at its final offset, and the
//! export-cache entry that lets a rerun find the files still there,
//! unchanged. A written file is taken into the cache by `--link` (a reflink
//! or hard link where the file system and the trust model allow, else
//! nothing), and the encoded tensors it holds are kept as ranges of it
//! rather than as second copies; a linked file the user deleted or edited
//! is put back from the cache without encoding anything.

use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use indicatif::{ProgressBar, ProgressStyle};

use super::materialize::{Filled, MaterializeError, Materializer, Place};
use super::report::{self, NodeReport};
use super::{Engine, NodeError, Shared};
use crate::artifact::{HeaderEnd, Tensor, TensorSet};
use crate::files::link::{LinkMode, hardlinks_are_safe};
use crate::formats::{AtomicOutput, ggml_legacy, gguf};
use crate::key::Key;
use crate::model::Endian;
use crate::ops;
use crate::ops::export::{ExportFormat, ExportOptions};
use crate::store::fingerprint::{hash_file, stat_key};
use crate::store::{ActionKind, Span, SpanHost, StoreError};

/// The export-cache entry: the files an export wrote, by content and stat.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct ExportEntry {
    /// The files linked into the cache, in output order (none with `copy`).
    blobs: Vec<Key>,
    /// How the files were linked into the cache (none: as `copy`).
    #[serde(default)]
    link: Option<LinkMode>,
    recipe: String,
    /// The recipe file, resolved (none for a one-shot command's recipe).
    #[serde(default)]
    recipe_file: Option<PathBuf>,
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
    Io(io::Error),
    Materialize(MaterializeError),
    SafeTensors(crate::formats::safetensors::WriteError),
    Ggjt(ggml_legacy::GgjtError),
}

impl WriteFailure {
    fn at(self, path: &Path) -> NodeError {
        match self {
            WriteFailure::Io(source) => NodeError::Write { path: path.to_owned(), source },
            WriteFailure::Materialize(e) => NodeError::Materialize(e),
            WriteFailure::SafeTensors(e) => NodeError::SafeTensors(e),
            WriteFailure::Ggjt(e) => NodeError::Ggjt(e),
        }
    }
}

impl From<io::Error> for WriteFailure {
    fn from(e: io::Error) -> WriteFailure {
        WriteFailure::Io(e)
    }
}

impl From<MaterializeError> for WriteFailure {
    fn from(e: MaterializeError) -> WriteFailure {
        WriteFailure::Materialize(e)
    }
}

/// Where everything of one output file goes: its header, and each tensor's
/// absolute offset, in file order.
struct FileLayout<'s> {
    /// Writes the header, up to the first tensor's offset.
    header: HeaderWriter<'s>,
    file_len: u64,
    tensors: Vec<&'s Tensor>,
    offsets: Vec<u64>,
    between: Between,
    /// The tensors' bytes are swapped to big-endian once written.
    big_endian: bool,
}

/// What follows each tensor's bytes.
enum Between {
    /// Zeros up to this multiple.
    Padding(u64),
    /// These bytes after each tensor (in GGJT, the next one's header).
    Bytes(Vec<Vec<u8>>),
}

type HeaderWriter<'s> = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + 's>;

/// One GGUF file of an export, laid out as llama.cpp and gguf-py lay it out.
/// Its header is encoded as it is written: a ladder's exports in flight do
/// not each hold their own copy of a large vocabulary.
fn gguf_layout<'s>(
    set: &'s TensorSet,
    file: &'s ops::export::OutputFile,
    order: Endian,
) -> Result<FileLayout<'s>, WriteFailure> {
    let tensors: Vec<&Tensor> = file.plan.tensors.iter().map(|&t| &set.tensors[t]).collect();
    let infos: Vec<_> = tensors.iter().map(|t| t.info()).collect();
    let mut layout = gguf::layout(&file.plan.metadata, &infos)?;
    if set.header_end == HeaderEnd::AtMetadata && infos.is_empty() {
        layout = layout.ending_at_metadata();
    }
    let offsets = layout.tensor_offsets.iter().map(|o| layout.data_offset + o).collect();
    let (file_len, between) = (layout.file_len, Between::Padding(layout.alignment));
    let header =
        Box::new(move |out: &mut dyn Write| gguf::write_header(out, order, &file.plan.metadata, &infos, &layout));
    Ok(FileLayout { header, file_len, tensors, offsets, between, big_endian: order == Endian::Big })
}

/// The GGJT v3 file of an export, which must read back as the set.
fn ggjt_layout<'s>(set: &'s TensorSet, file: &ops::export::OutputFile) -> Result<FileLayout<'s>, WriteFailure> {
    let tensors: Vec<&Tensor> = file.plan.tensors.iter().map(|&t| &set.tensors[t]).collect();
    let infos: Vec<_> = tensors.iter().map(|t| t.info()).collect();
    let layout =
        ggml_legacy::ggjt_layout(&file.plan.metadata, &infos, set.legacy.as_deref()).map_err(WriteFailure::Ggjt)?;
    Ok(FileLayout {
        tensors,
        offsets: layout.tensor_offsets,
        file_len: layout.file_len,
        header: Box::new(move |out: &mut dyn Write| out.write_all(&layout.header)),
        between: Between::Bytes(layout.after),
        big_endian: false,
    })
}

/// One SafeTensors file of an export, as the Python package lays it out.
/// The set's `safetensors.metadata.*` keys become `__metadata__` (none: no
/// `__metadata__`); other metadata has no place.
fn safetensors_layout<'s>(set: &'s TensorSet, file: &ops::export::OutputFile) -> Result<FileLayout<'s>, WriteFailure> {
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
    let data = layout.header.len() as u64;
    Ok(FileLayout {
        tensors: layout.order.iter().map(|&e| tensors[e]).collect(),
        offsets: layout.order.iter().map(|&e| data + layout.data_offsets[e].0).collect(),
        file_len: layout.file_len,
        header: Box::new(move |out: &mut dyn Write| out.write_all(&layout.header)),
        between: Between::Padding(1),
        big_endian: false,
    })
}

/// The layout of one file of an export in `format`, GGUF's in byte `order`.
fn layout_of<'s>(
    set: &'s TensorSet,
    file: &'s ops::export::OutputFile,
    format: ExportFormat,
    order: Endian,
) -> Result<FileLayout<'s>, WriteFailure> {
    match format {
        ExportFormat::Gguf => gguf_layout(set, file, order),
        ExportFormat::SafeTensors => safetensors_layout(set, file),
        ExportFormat::Ggjt => ggjt_layout(set, file),
    }
}

/// Each tensor of a written file with its offset there.
type Placed<'s> = Vec<(&'s Tensor, u64)>;

/// A file of an export written, not yet committed.
struct Written<'s> {
    path: PathBuf,
    out: AtomicOutput,
    len: u64,
    /// How many tensors it holds.
    tensors: usize,
    placed: Placed<'s>,
}

/// Writes one output file; returns its length, and where each tensor lies
/// in it as the store holds its bytes (none when they were swapped). The
/// layout is known, so the file's blocks are reserved first and every
/// tensor goes straight to its offset, its padding written after it, in
/// file order.
fn write_file<'s>(
    m: &Materializer<'_>,
    layout: FileLayout<'s>,
    out: &mut AtomicOutput,
    bar: &ExportProgress,
) -> Result<(u64, Placed<'s>), WriteFailure> {
    out.preallocate(layout.file_len)?;
    m.prefetch(&layout.tensors);
    (layout.header)(out.writer())?;
    let file = out.file()?;
    place_all(m, &layout.tensors, &layout.offsets, (&layout.between, layout.big_endian), file, bar)?;
    // Every byte was placed by its layout; a file of another length holds
    // bytes nothing checked, and is never committed.
    let len = file.metadata()?.len();
    if len != layout.file_len {
        let problem = format!("the file is {len} bytes where its layout has {}", layout.file_len);
        return Err(std::io::Error::other(problem).into());
    }
    let placed = match layout.big_endian {
        true => Vec::new(),
        false => layout.tensors.into_iter().zip(layout.offsets).collect(),
    };
    Ok((layout.file_len, placed))
}

/// An export's progress bar, one line whatever the terminal's width (the
/// bar takes what the rest leaves): the file's name, bytes written of the
/// total, rate, and the time left at that rate. Encodes move it slab by
/// slab, so a large tensor does not hold it still.
struct ExportProgress {
    bar: ProgressBar,
    /// Bytes of the tensor being placed already counted slab by slab.
    streamed: std::sync::atomic::AtomicU64,
}

/// The export's label (`export FILE`), at most this many columns.
const LABEL_COLUMNS: usize = 28;

impl ExportProgress {
    /// The bar of an export writing `path`, labelled with its file name.
    fn new(bar: ProgressBar, path: &Path) -> ExportProgress {
        let template = format!(
            "{{msg:{LABEL_COLUMNS}!}} {{wide_bar}} {{bytes:>9}}/{{total_bytes:<9}} {{binary_bytes_per_sec:>11}} {{eta:>3}}"
        );
        bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
        let name = path.file_name().unwrap_or(path.as_os_str()).to_string_lossy();
        let label = format!("export {}", crate::text::for_terminal(&name));
        bar.set_message(crate::text::shorten(&label, LABEL_COLUMNS).into_owned());
        ExportProgress { bar, streamed: Default::default() }
    }

    /// `len` bytes of the tensor being placed were written.
    fn stream(&self, len: u64) {
        self.streamed.fetch_add(len, Ordering::Relaxed);
        self.bar.inc(len);
    }

    /// Tensors of `bytes` in all were placed: what their slabs did not count yet.
    fn advance(&self, bytes: u64) {
        let streamed = self.streamed.swap(0, Ordering::Relaxed);
        self.bar.inc(bytes.saturating_sub(streamed));
    }

    /// Every byte written: the bar's last frame says so (draws are
    /// throttled, so the last advance may not have been drawn), then it goes.
    fn done(&self) {
        self.bar.finish();
        self.bar.finish_and_clear();
    }
}

/// Puts each tensor's bytes at its offset (increasing), what follows each
/// after it: runs that lie in an input file as they will lie here (only
/// zeros between) in one copy each, other existing bytes copied, the rest
/// encoded; each swapped to big-endian when `big_endian`.
fn place_all(
    m: &Materializer<'_>,
    tensors: &[&Tensor],
    offsets: &[u64],
    (between, big_endian): (&Between, bool),
    output: &std::fs::File,
    bar: &ExportProgress,
) -> Result<(), WriteFailure> {
    let mut k = 0;
    while k < tensors.len() {
        let copied = match between {
            Between::Padding(_) if !big_endian => m.copy_run_at(&tensors[k..], &offsets[k..], output)?,
            _ => 0,
        };
        let n = if big_endian {
            place_big_endian(m, tensors[k], offsets[k], output)?;
            1
        } else if copied > 0 {
            copied
        } else {
            place(m, tensors[k], offsets[k], output)?;
            1
        };
        let last = k + n - 1;
        let end = offsets[last] + tensors[last].n_bytes();
        match between {
            Between::Padding(alignment) => write_zeros_at(output, end, gguf::align_up(end, *alignment) - end)?,
            Between::Bytes(after) => output.write_all_at(&after[last], end)?,
        }
        bar.advance(tensors[k..=last].iter().map(|t| t.n_bytes()).sum());
        k += n;
    }
    Ok(())
}

/// Puts one tensor's bytes (little-endian) at `offset`: nothing to do if
/// another export's encode put them there, copied if they exist, encoded
/// if not.
fn place(m: &Materializer<'_>, tensor: &Tensor, offset: u64, output: &std::fs::File) -> Result<(), WriteFailure> {
    if !m.placed_by_another(tensor, Place::of(output, offset)) && !m.copy_at(tensor, output, offset)? {
        m.encode_at(tensor, output, offset)?;
    }
    Ok(())
}

/// Puts one tensor's bytes big-endian at `offset`: a big-endian input's as
/// they are stored, any other's placed little-endian and swapped in place a
/// slab at a time (the slabs come back from the page cache).
fn place_big_endian(
    m: &Materializer<'_>,
    tensor: &Tensor,
    offset: u64,
    output: &std::fs::File,
) -> Result<(), WriteFailure> {
    if m.copy_big_endian_input_at(tensor, output, offset)? {
        return Ok(());
    }
    let swap = gguf::ByteSwap::of(tensor.ggml_type).ok_or_else(|| {
        io::Error::other(gguf::NoBigEndianLayout { tensor: tensor.name.clone(), ggml_type: tensor.ggml_type })
    })?;
    place(m, tensor, offset, output)?;
    const SLAB_BYTES: u64 = 1 << 20;
    let block = tensor.ggml_type.type_size();
    let step = (SLAB_BYTES / block).max(1) * block;
    let len = tensor.n_bytes();
    let mut slab = Vec::new();
    let mut done = 0;
    while done < len {
        slab.resize(step.min(len - done) as usize, 0);
        output.read_exact_at(&mut slab, offset + done)?;
        swap.apply(&mut slab);
        output.write_all_at(&slab, offset + done)?;
        done += slab.len() as u64;
    }
    Ok(())
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

/// The files the export keyed `key` last wrote, in output order, with their
/// sizes and blake3, as `store` recorded them; `None` without a record.
pub(super) fn exported_files(
    store: &dyn crate::store::Store,
    key: &Key,
    options: &ExportOptions,
) -> Option<Vec<(PathBuf, u64, Key)>> {
    let entry: ExportEntry = serde_json::from_slice(&store.get_action(ActionKind::Export, key)?).ok()?;
    let paths = ops::export::all_paths(options, entry.data_files);
    (paths.len() == entry.files.len())
        .then(|| paths.into_iter().zip(&entry.files).map(|(path, f)| (path, f.len, f.file_hash)).collect())
}

/// A file put back from the cache, ready to appear.
enum Restored {
    Written(AtomicOutput),
    /// A hard link to the cache's blob, made at the checked path.
    Link(crate::files::OutputPath, PathBuf),
}

/// A store call's result as a restore takes it: `None` where the blob is
/// unusable as stored (the export is written again instead).
fn usable<T>(result: Result<T, StoreError>) -> Result<Option<T>, NodeError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_recoverable() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The most output files prepared at once: each holds two descriptors
/// open until its export commits, and a ladder of split exports must not
/// run the process out of them (an export not prepared writes as before).
const MAX_PREPARED_FILES: usize = 128;

/// Fingerprints kept per export entry (one per place the file was written).
const MAX_FINGERPRINTS: usize = 16;

impl Engine {
    /// The files an export last wrote, in output order, with their sizes and
    /// blake3, as the store recorded them; `None` without a record.
    pub(super) fn exported_files(&self, key: &Key, options: &ExportOptions) -> Option<Vec<(PathBuf, u64, Key)>> {
        exported_files(&*self.store, key, options)
    }

    /// The recipe files whose exports wrote `output` (their export path),
    /// as the store recorded them.
    pub fn recipes_that_exported(&self, output: &Path) -> Vec<PathBuf> {
        let wanted = crate::files::resolve(output);
        let keys = self.store.list_actions(ActionKind::Export).unwrap_or_default();
        let mut recipes: Vec<PathBuf> = keys
            .iter()
            .filter_map(|(key, _)| {
                serde_json::from_slice::<ExportEntry>(&self.store.get_action(ActionKind::Export, key)?).ok()
            })
            .filter(|entry| crate::files::resolve(&entry.path) == wanted)
            .filter_map(|entry| entry.recipe_file)
            .collect();
        recipes.sort();
        recipes.dedup();
        recipes
    }

    /// True when every file this export wrote before still holds its bytes:
    /// its stat is one we recorded, or its content hashes to what we wrote.
    pub(super) fn export_is_fresh(&self, key: &Key, options: &ExportOptions) -> bool {
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

impl Shared {
    /// The blake3 of the output file at `path` (`len` bytes), from one read
    /// that also gives the cache its sha256 when the run's lock will ask
    /// (`Engine::with_sha256_of_files`).
    fn hash_output(&self, path: &Path, len: u64) -> io::Result<Key> {
        if !self.sha256_of_files {
            return hash_file(path);
        }
        let (hash, read) = crate::store::fingerprint::hash_file_and_sha256(&*self.store, path)?;
        if read != len {
            return Err(io::Error::other(format!("{len} bytes were written, {read} read back")));
        }
        Ok(hash)
    }

    /// Keeps the tensors `placed` in the committed `file` as ranges of it
    /// (`host`, none where the store keeps blobs whole), so their bytes lie
    /// on disk once: the store's copies give way to the ranges, and the
    /// tensors encoders wrote straight into the file (`filled`) are recorded so
    /// (or, without a host, stored as blobs read back from it). Best
    /// effort: what cannot be kept so stays as it was, or is encoded again
    /// by a later run.
    fn keep_placed(
        &self,
        m: &Materializer<'_>,
        placed: &[(&Tensor, u64)],
        (file, filled): (&std::fs::File, &Filled),
        host: Option<&SpanHost>,
    ) {
        let origin = Place::of(file, 0);
        for &(tensor, offset) in placed {
            let span = |host: &SpanHost| Span { host: host.clone(), offset, len: tensor.n_bytes() };
            let filled_with = origin.and_then(|origin| filled.get(&(tensor.key, origin.at(offset))).copied());
            let kept = match (filled_with, host) {
                (Some(hash), Some(host)) => match self.store.keep_as_span(&hash, span(host)) {
                    Ok(true) => m.record_entry(tensor, hash, tensor.n_bytes()),
                    Ok(false) => m.store_from_file(tensor, file, offset, hash),
                    Err(e) => Err(e.into()),
                },
                (Some(hash), None) => m.store_from_file(tensor, file, offset, hash),
                (None, Some(host)) => match m.stored_blob(tensor) {
                    Some(blob) => self.store.keep_as_span(&blob, span(host)).map(drop).map_err(Into::into),
                    None => Ok(()),
                },
                (None, None) => Ok(()),
            };
            if let Err(e) = kept {
                tracing::debug!("cache: tensor `{}` not kept as a range of its export: {e}", tensor.name);
            }
        }
    }

    /// Prepares the exports this run writes from node `producer`'s `set`
    /// ([`Self::prepare_export`]).
    pub(super) fn prepare_exports_of(&self, producer: usize, set: &Arc<TensorSet>) {
        let nodes = &self.bound.recipe.nodes;
        for (i, node) in nodes.iter().enumerate() {
            if self.writes.get(i) == Some(&true) && node.from == [crate::recipe::Source::Node(producer)] {
                self.prepare_export(i, set);
            }
        }
    }

    /// Prepares export `i`'s files as soon as its input `set` is known,
    /// long before its turn: each made (temporary, its length reserved)
    /// and each encoded tensor's place in it registered, so that another
    /// export encoding one of them writes it there as well
    /// ([`Destinations`]). Only an export that will write its files (none
    /// recorded to put back), little-endian, into a store that keeps
    /// results; best effort: one not prepared makes its files when its
    /// turn comes, and any error is met there.
    ///
    /// [`Destinations`]: super::materialize::Destinations
    fn prepare_export(&self, i: usize, set: &TensorSet) {
        let ops::Op::Export(options) = &self.bound.recipe.nodes[i].op else { return };
        let recorded = !self.rebuild && self.store.get_action(ActionKind::Export, &self.bound.keys[i]).is_some();
        let big_endian = options.byte_order.unwrap_or(set.endian) == Endian::Big;
        if !self.store.keeps_results() || self.link.is_empty() || recorded || big_endian {
            return;
        }
        let Ok(ops::export::Output { set, files }) = ops::export::output_files(set, options) else { return };
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if prepared.values().map(Vec::len).sum::<usize>() + files.len() > MAX_PREPARED_FILES {
            return;
        }
        let mut outputs = Vec::with_capacity(files.len());
        let mut places = Vec::with_capacity(files.len());
        for file in &files {
            let Ok(layout) = layout_of(&set, file, options.format, Endian::Little) else { return };
            let Ok(mut out) = self.create_output(i, &file.path) else { return };
            let handle = out.preallocate(layout.file_len).and_then(|()| out.file()?.try_clone());
            let Ok(handle) = handle else { return };
            let encoded: Vec<(Key, u64)> = (layout.tensors.iter().zip(&layout.offsets))
                .filter(|(t, _)| t.is_derived())
                .map(|(t, &offset)| (t.key, offset))
                .collect();
            places.push((Arc::new(handle), encoded));
            outputs.push(out);
        }
        for (file, encoded) in places {
            self.destinations.register(i, &file, encoded);
        }
        prepared.insert(i, outputs);
    }

    /// Puts back the files export `i` last wrote from the cache, when it
    /// linked every one of them in (`reflink`, `hardlink`): by the same
    /// link where the file system allows, else copied, each blob checked
    /// first. False (nothing written) without such an entry.
    fn restore(
        &self,
        i: usize,
        options: &ExportOptions,
        files: &[ops::export::OutputFile],
        report: &mut NodeReport,
    ) -> Result<bool, NodeError> {
        let key = &self.bound.keys[i];
        let Some(entry) =
            self.store.get_action(ActionKind::Export, key).and_then(|b| serde_json::from_slice::<ExportEntry>(&b).ok())
        else {
            return Ok(false);
        };
        let paths = ops::export::all_paths(options, entry.data_files);
        let linked = entry.link.is_some() && entry.blobs.len() == entry.files.len() && paths.len() == entry.files.len();
        if self.rebuild || !linked || !self.store.has_blobs(&entry.blobs) {
            return Ok(false);
        }
        let mut restored = Vec::with_capacity(paths.len());
        for ((path, file), blob) in paths.iter().zip(&entry.files).zip(&entry.blobs) {
            let write_err = |source| NodeError::Write { path: path.clone(), source };
            if entry.link == Some(LinkMode::Hardlink) && hardlinks_are_safe() {
                let Some(target) = usable(self.store.blob_to_link(blob))? else { return Ok(false) };
                if let Some(target) = target {
                    let id = &self.bound.recipe.nodes[i].id;
                    let checked = self.bound.outputs.export_file(id, path, crate::files::Replaces::AnyFile)?;
                    restored.push((path.clone(), Restored::Link(checked, target), file.len));
                    continue;
                }
            }
            let mut out = self.create_output(i, path)?;
            let reflinked = match entry.link {
                Some(LinkMode::Reflink) => self.store.reflink_blob_into(blob, out.file().map_err(write_err)?),
                _ => Ok(false),
            };
            let Some(reflinked) = usable(reflinked)? else { return Ok(false) };
            if !reflinked {
                let copied = self.store.copy_blob_into(blob, file.len, out.file().map_err(write_err)?, 0);
                if usable(copied)?.is_none() {
                    return Ok(false);
                }
            }
            restored.push((path.clone(), Restored::Written(out), file.len));
        }
        // Every file appears only once all are ready, as a written export's.
        for (j, (path, file, len)) in restored.into_iter().enumerate() {
            let write_err = |source| NodeError::Write { path: path.clone(), source };
            match file {
                Restored::Written(out) => drop(out.commit().map_err(write_err)?),
                Restored::Link(checked, target) => {
                    crate::formats::link_into_place(&target, &checked).map_err(write_err)?
                }
            }
            report.bytes_out += len;
            // An index file past the data files holds no tensor.
            let tensors = files.get(j).map_or(0, |f| f.plan.tensors.len());
            let mut file_report = report::FileReport::new(path, len, tensors);
            (file_report.link, file_report.restored) = (entry.link, true);
            report.files.push(file_report);
        }
        self.store.touch_action(ActionKind::Export, key);
        Ok(true)
    }

    /// Writes `set` whole as GGUF file `name` in `dir`, for a tool to read:
    /// no cache entry, no link, nothing reported but its progress.
    pub(super) fn write_scratch(
        &self,
        set: &TensorSet,
        dir: &tempfile::TempDir,
        name: &str,
    ) -> Result<PathBuf, NodeError> {
        let destination = crate::files::OutputPath::private(dir, name);
        let path = destination.resolved().to_owned();
        let options = ExportOptions {
            path: path.clone(),
            format: ExportFormat::Gguf,
            split: ops::export::SplitMode::Whole,
            attest: false,
            byte_order: None,
        };
        let ops::export::Output { set, files } = ops::export::output_files(set, &options)?;
        let write_err = |source| NodeError::Write { path: path.clone(), source };
        let mut out = AtomicOutput::create(&destination).map_err(write_err)?;
        let file = files.first().ok_or_else(|| write_err(io::Error::other("no file was planned")))?;
        let planned = file.plan.tensors.iter().map(|&t| set.tensors[t].n_bytes()).sum();
        let bar = ExportProgress::new(self.progress.add(ProgressBar::new(planned)), &path);
        let layout = gguf_layout(&set, file, set.endian);
        layout.and_then(|layout| write_file(&self.materializer(), layout, &mut out, &bar)).map_err(|e| e.at(&path))?;
        bar.done();
        out.commit().map_err(write_err)?;
        Ok(path)
    }

    /// A new output file of export node `i` (its directory made), checked
    /// again by the run's guard as it is created.
    fn create_output(&self, i: usize, path: &Path) -> Result<AtomicOutput, NodeError> {
        let id = &self.bound.recipe.nodes[i].id;
        let checked = self.bound.outputs.export_file(id, path, crate::files::Replaces::AnyFile)?;
        AtomicOutput::create(&checked).map_err(|source| NodeError::Write { path: path.to_owned(), source })
    }

    /// Commits the files export `i` wrote (`data_files` of them hold
    /// tensors; encoders `filled` some of their places) and, where the
    /// store keeps results, hashes each, takes it into the cache by the
    /// run's link mode, keeps its tensors as ranges of it and records the
    /// export.
    fn commit_files(
        &self,
        i: usize,
        m: &Materializer<'_>,
        options: &ExportOptions,
        (data_files, written): (usize, Vec<Written<'_>>),
        filled: &Filled,
        report: &mut NodeReport,
    ) -> Result<(), NodeError> {
        // An input that moved under the run may have fed these bytes.
        self.bound.files.check_unchanged()?;
        let mut records = Vec::with_capacity(written.len());
        let (mut linked, mut link) = (Vec::new(), None);
        for Written { path, out, len, tensors, placed } in written {
            let write_err = |source| NodeError::Write { path: path.clone(), source };
            let committed = out.commit().map_err(write_err)?;
            report.bytes_out += len;
            let mut file_report = report::FileReport::new(path.clone(), len, tensors);
            if self.store.keeps_results() {
                let file_hash = self.hash_output(&path, len).map_err(write_err)?;
                let mode = match self.link.is_empty() {
                    // Scratch: nothing of the cache may depend on this file.
                    true => LinkMode::Whole,
                    false => self.store.adopt_file(&path, &file_hash, &self.link)?,
                };
                let host = match mode {
                    LinkMode::Whole => None,
                    LinkMode::Copy => Some(SpanHost::File(crate::files::resolve(&path))),
                    LinkMode::Reflink | LinkMode::Hardlink => {
                        linked.push(file_hash);
                        Some(SpanHost::Blob(file_hash))
                    }
                };
                self.keep_placed(m, &placed, (&committed, filled), host.as_ref());
                // After the link: a hard link made the file read-only.
                let meta = std::fs::metadata(&path).map_err(write_err)?;
                records.push(ExportedFile { file_hash, len, fingerprints: vec![stat_key(&meta)] });
                file_report.link = Some(mode);
                link = Some(mode);
            }
            report.files.push(file_report);
        }
        if !self.store.keeps_results() {
            return Ok(());
        }
        // Linked only when every file is: a restore puts back all or none.
        let whole = linked.len() == records.len();
        let entry = ExportEntry {
            blobs: if whole { linked } else { Vec::new() },
            link: link.filter(|_| whole),
            recipe: self.bound.recipe.name.clone(),
            recipe_file: self.bound.recipe.source.as_deref().map(crate::files::resolve),
            id: self.bound.recipe.nodes[i].id.clone(),
            // Resolved: `attest` may ask from any directory.
            path: crate::files::resolve(&options.path),
            bytes: report.bytes_out,
            data_files,
            files: records,
        };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| NodeError::Write { path: options.path.clone(), source: e.into() })?;
        self.store.put_action(ActionKind::Export, &self.bound.keys[i], &json)?;
        Ok(())
    }

    /// Writes node `i`'s input as the export's file (or shards) in worker
    /// `slot`, given back once they are written, and records what was
    /// written. Every file appears only once all are complete.
    pub(super) fn export(
        &self,
        i: usize,
        inputs: &[Arc<TensorSet>],
        options: &ExportOptions,
        report: &mut NodeReport,
        slot: Option<super::compute::Slot>,
    ) -> Result<(), NodeError> {
        let set = inputs.first().ok_or_else(|| NodeError::Upstream(self.bound.recipe.nodes[i].id.clone()))?;
        let ops::export::Output { set, files } = ops::export::output_files(set, options)?;
        if self.restore(i, options, &files, report)? {
            return Ok(());
        }
        let set = &*set;
        let m = self.materializer();
        let order = options.byte_order.unwrap_or(set.endian);
        if order == Endian::Big && options.format == ExportFormat::Gguf {
            // Refused before any file is made; a big-endian input's own bytes need no swap.
            let mut swapped = Vec::new();
            for tensor in &set.tensors {
                if !m.is_big_endian_input(tensor)? {
                    swapped.push((tensor.name.as_str(), tensor.ggml_type));
                }
            }
            gguf::check_big_endian(swapped)?;
        }
        let planned: u64 = files.iter().flat_map(|f| &f.plan.tensors).map(|&t| set.tensors[t].n_bytes()).sum();
        let bar = ExportProgress::new(self.progress.add(ProgressBar::new(planned)), &options.path);
        let stream = |len| bar.stream(len);
        let m = Materializer { on_written: Some(&stream), ..m };
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner()).remove(&i);
        let mut prepared = prepared.filter(|outs| outs.len() == files.len()).into_iter().flatten();
        let mut written = Vec::with_capacity(files.len() + 1);
        for file in &files {
            let path = &file.path;
            let mut out = match prepared.next() {
                Some(out) => out,
                None => self.create_output(i, path)?,
            };
            let (len, placed) = layout_of(set, file, options.format, order)
                .and_then(|layout| write_file(&m, layout, &mut out, &bar))
                .map_err(|e| e.at(path))?;
            written.push(Written { path: path.clone(), out, len, tensors: file.plan.tensors.len(), placed });
        }
        if let Some(path) = ops::export::index_path(options) {
            let mut out = self.create_output(i, &path)?;
            let index = ops::export::safetensors_index(set, &files);
            out.writer().write_all(&index).map_err(|source| NodeError::Write { path: path.clone(), source })?;
            written.push(Written { path, out, len: index.len() as u64, tensors: 0, placed: Vec::new() });
        }
        bar.done();
        let filled = self.destinations.complete(i);
        // Hashing and recording the files is no worker's work: the next
        // export encodes meanwhile, rather than a core waiting on a digest.
        drop(slot);
        self.commit_files(i, &m, options, (files.len(), written), &filled, report)?;
        report.tensors_encoded = m.counters.encoded.load(Ordering::Relaxed);
        report.tensors_shared = m.counters.shared.load(Ordering::Relaxed);
        report.tensors_reused = m.counters.reused.load(Ordering::Relaxed);
        report.tensors_copied = m.counters.copied.load(Ordering::Relaxed);
        report.tensors_decoded = m.counters.decoded.load(Ordering::Relaxed);
        let used = m.counters.backends.lock().unwrap_or_else(|e| e.into_inner());
        if !used.is_empty() {
            report.backend = used.iter().cloned().collect::<Vec<_>>().join("+");
        }
        Ok(())
    }
}
