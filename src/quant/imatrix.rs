//! Importance matrices: llama.cpp's `imatrix` files, read into the per-tensor
//! weights that llama-quantize hands to the quantizers.
//!
//! This module owns both on-disk formats and everything llama-quantize does
//! with an imatrix before a quantizer sees it:
//!
//! - the legacy binary format (`--output-format dat`): an `i32` entry count;
//!   per entry an `i32` name length, the name, an `i32` call count `ncall`, an
//!   `i32` value count and that many `f32`s holding `sum/count * ncall`; then,
//!   optionally, an `i32` chunk count and an `i32`-length dataset name. All
//!   little-endian. There is no magic: a file that does not start with `GGUF`
//!   is read as legacy.
//! - the GGUF format: per entry `<name>.in_sum2` (F32, `[n_per_row, n_mat]`,
//!   raw sums of squared activations) and `<name>.counts` (F32, one count per
//!   matrix, i.e. per expert), plus `imatrix.datasets`, `imatrix.chunk_count`
//!   and `imatrix.chunk_size`.
//! - the arithmetic that turns sums and counts into weights (f32 throughout,
//!   in llama-quantize's order), `--include-weights`/`--exclude-weights`, the
//!   non-finite check, the per-tensor lookup with its size validation, and the
//!   `quantize.imatrix.*` keys written into the quantized model.
//!
//! Weights for a tensor of `n_per_row` columns and `n_experts` matrices are
//! `n_per_row * n_experts` floats, expert `e`'s slice at `e * n_per_row`:
//! the slice llama-quantize passes for a row is the one of the row's expert.
//!
//! The order llama-quantize applies them in: [`ImportanceMatrix::load`],
//! [`ImportanceMatrix::filter`], [`ImportanceMatrix::check_finite`]; an
//! imatrix left empty then counts as none at all; then, for each tensor that
//! is quantized, [`ImportanceMatrix::weights_for`]; and
//! [`ImportanceMatrix::apply_output_metadata`] on the output's metadata.
//!
//! Where llama.cpp would crash, abort or silently use garbage on a malformed
//! file, this module returns an error instead; each such divergence is marked
//! "llama.cpp:" in a comment. Two more: a file starting with `GGUF` that fails
//! to parse is reported as a GGUF error (llama.cpp retries it as legacy, which
//! then fails less helpfully), and a big-endian GGUF imatrix is read
//! (llama.cpp refuses it).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::formats::{ErrorKind, FormatError, ModelFile, OpenOptions, Source, detect_bytes};
use crate::model::{Array, GgufString, Metadata, TensorInfo, Value};
use crate::text::Name;
use crate::types::GgmlType;

/// Key of the imatrix file name in a quantized model.
pub const KV_QUANTIZE_IMATRIX_FILE: &str = "quantize.imatrix.file";
/// Key of the (first) dataset the imatrix was computed on.
pub const KV_QUANTIZE_IMATRIX_DATASET: &str = "quantize.imatrix.dataset";
/// Key of the number of imatrix entries used (after filtering).
pub const KV_QUANTIZE_IMATRIX_N_ENTRIES: &str = "quantize.imatrix.entries_count";
/// Key of the number of chunks the imatrix was computed on.
pub const KV_QUANTIZE_IMATRIX_N_CHUNKS: &str = "quantize.imatrix.chunks_count";

/// GGUF imatrix metadata keys, as llama-imatrix writes them.
pub const KV_IMATRIX_DATASETS: &str = "imatrix.datasets";
pub const KV_IMATRIX_CHUNK_COUNT: &str = "imatrix.chunk_count";
pub const KV_IMATRIX_CHUNK_SIZE: &str = "imatrix.chunk_size";

const SUMS_SUFFIX: &str = ".in_sum2";
const COUNTS_SUFFIX: &str = ".counts";

/// llama-quantize copies strings into a `char[128]` override, so metadata
/// strings keep at most 127 bytes.
const KV_STRING_MAX: usize = 127;

/// The two on-disk formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImatrixFormat {
    /// The original binary format (`llama-imatrix --output-format dat`).
    Legacy,
    /// The GGUF format (`llama-imatrix`'s default since 2025).
    Gguf,
}

impl ImatrixFormat {
    pub fn name(self) -> &'static str {
        match self {
            ImatrixFormat::Legacy => "legacy imatrix",
            ImatrixFormat::Gguf => "GGUF imatrix",
        }
    }
}

/// An error while reading or applying an importance matrix.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {kind}", path.display(), offset.map(|o| format!(": at byte {o}")).unwrap_or_default())]
pub struct ImatrixError {
    /// The imatrix file.
    pub path: PathBuf,
    /// Byte offset of the problem in the file, where one applies.
    pub offset: Option<u64>,
    pub kind: ImatrixErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ImatrixErrorKind {
    /// A container-level problem: truncation, bad GGUF header, I/O.
    #[error("{0}")]
    Format(ErrorKind),
    #[error("no importance data: {what} is {count} (expected at least 1)")]
    NoEntries { what: &'static str, count: i64 },
    #[error("{what} is {value} (expected {expected})")]
    BadField { what: String, value: i64, expected: &'static str },
    #[error("invalid entry name: {what} is not valid UTF-8")]
    InvalidName { what: String },
    #[error("this is a {format} model file, not an importance matrix")]
    NotAnImatrix { format: &'static str },
    #[error("entry `{entry}` has a `{present}` tensor but no `{missing}` tensor")]
    MissingPair { entry: String, present: String, missing: String },
    #[error("tensor `{}` has type {found}; imatrix sums and counts must be F32", Name(.tensor))]
    WrongTensorType { tensor: String, found: GgmlType },
    #[error("tensor `{}` has no elements; an entry needs at least one count", Name(.tensor))]
    NoCounts { tensor: String },
    #[error(
        "entry `{entry}` has {sums} sums for {counts} counts; the sums must be a whole number of rows per count (expected a multiple of {counts})"
    )]
    SumsNotRows { entry: String, sums: u64, counts: u64 },
    #[error("metadata key `{}` has type {found}, expected u32", Name(.key))]
    WrongValueType { key: &'static str, found: &'static str },
    #[error("missing imatrix metadata (no {missing}): this GGUF file is not an importance matrix from llama-imatrix")]
    MissingMetadata { missing: String },
    #[error(
        "imatrix entry `{tensor}` has {found} values, but the tensor needs {expected} ({n_per_row} per row x {n_experts} experts): was the imatrix computed for another model?"
    )]
    SizeMismatch { tensor: String, found: u64, expected: u64, n_per_row: u64, n_experts: u64 },
    #[error("imatrix entry `{entry}` holds the non-finite value {value} at index {index}")]
    NonFinite { entry: String, index: usize, value: f32 },
    #[error(
        "{count} imatrix entries name no tensor of the model (the first: {}): was the imatrix computed for another model?",
        first.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    )]
    UnknownTensors { count: usize, first: Vec<String> },
}

impl ImatrixError {
    fn new(path: &Path, offset: Option<u64>, kind: ImatrixErrorKind) -> ImatrixError {
        ImatrixError { path: path.to_owned(), offset, kind }
    }
}

impl From<FormatError> for ImatrixError {
    fn from(e: FormatError) -> ImatrixError {
        ImatrixError { path: e.path, offset: e.offset, kind: ImatrixErrorKind::Format(e.kind) }
    }
}

type Result<T, E = ImatrixError> = std::result::Result<T, E>;

/// An importance matrix: per tensor name, the weights llama-quantize hands to
/// the quantizers, plus what the file says about how it was computed.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportanceMatrix {
    /// The path as given to [`ImportanceMatrix::load`]; llama-quantize records
    /// it verbatim in `quantize.imatrix.file`.
    path: PathBuf,
    format: ImatrixFormat,
    /// Ordered by name, so iteration (and any error about "the first" entry)
    /// is deterministic.
    entries: BTreeMap<String, Vec<f32>>,
    datasets: Vec<GgufString>,
    /// llama.cpp keeps this in an `int32_t`, also when GGUF stores a `u32`.
    chunk_count: i32,
    chunk_size: i32,
}

impl ImportanceMatrix {
    /// Reads an imatrix in either format, told apart by the `GGUF` magic.
    pub fn load(path: &Path) -> Result<ImportanceMatrix> {
        let source = Source::open(path, OpenOptions::default())?;
        let head = source.read_range(0, source.len().min(16))?;
        if head.starts_with(&crate::formats::gguf::MAGIC) {
            drop(head);
            drop(source);
            return load_gguf(path);
        }
        match load_legacy(path, &source) {
            Ok(imatrix) => Ok(imatrix),
            // A legacy imatrix has no magic, so a model file given by mistake
            // would fail with a confusing count; name what it is instead.
            Err(e) => match detect_bytes(&head) {
                Some(format) => {
                    Err(ImatrixError::new(path, None, ImatrixErrorKind::NotAnImatrix { format: format.name() }))
                }
                None => Err(e),
            },
        }
    }

    /// Reads an imatrix in GGUF layout held elsewhere than in a file (a
    /// recipe step's result): its metadata and tensors, and each tensor's
    /// bytes from `data`. `name` stands for the file in errors, and is what
    /// a model quantized with it records.
    pub fn from_parts(
        name: &Path,
        metadata: &Metadata,
        tensors: &[TensorInfo],
        data: &dyn Fn(&TensorInfo) -> Result<Vec<u8>>,
    ) -> Result<ImportanceMatrix> {
        from_gguf_parts(name, metadata, tensors, data)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn format(&self) -> ImatrixFormat {
        self.format
    }

    /// Number of entries (after [`ImportanceMatrix::filter`]).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// An empty imatrix (for instance after filtering everything out) is, to
    /// llama-quantize, no imatrix at all: no weights, no metadata keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry names, in byte order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The weights of an entry, without checking them against a tensor.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.entries.get(name).map(Vec::as_slice)
    }

    /// Datasets the imatrix was computed on (GGUF: all of `imatrix.datasets`;
    /// legacy: the one trailing name, when present).
    pub fn datasets(&self) -> &[GgufString] {
        &self.datasets
    }

    /// Chunks the imatrix was computed on, as llama.cpp holds it (`int32_t`;
    /// 0 when the file does not say).
    pub fn chunk_count(&self) -> i32 {
        self.chunk_count
    }

    /// Tokens per chunk (GGUF only; 0 for legacy files).
    pub fn chunk_size(&self) -> i32 {
        self.chunk_size
    }

    /// llama-quantize's `--exclude-weights` then `--include-weights`: a name
    /// matches a pattern when it contains it as a substring (an empty pattern
    /// matches everything). Excluded names are dropped; if `include` is not
    /// empty, only names matching one of its patterns are kept.
    /// (llama-quantize refuses both lists at once; that is the caller's check.)
    pub fn filter(&mut self, include: &[String], exclude: &[String]) {
        if !exclude.is_empty() {
            self.entries.retain(|name, _| !exclude.iter().any(|p| name.contains(p.as_str())));
        }
        if !include.is_empty() {
            self.entries.retain(|name, _| include.iter().any(|p| name.contains(p.as_str())));
        }
    }

    /// llama-quantize refuses an imatrix holding a NaN or infinity anywhere,
    /// whether or not the entry is used; it checks after filtering, so call
    /// this after [`ImportanceMatrix::filter`] and before quantizing.
    pub fn check_finite(&self) -> Result<()> {
        for (name, weights) in &self.entries {
            if let Some((index, &value)) = weights.iter().enumerate().find(|(_, w)| !w.is_finite()) {
                return Err(self.error(ImatrixErrorKind::NonFinite { entry: name.clone(), index, value }));
            }
        }
        Ok(())
    }

    /// The weights for `tensor`, as llama-quantize looks them up:
    /// - no entry of that name: `Ok(None)` (llama-quantize logs "did not find
    ///   weights" and quantizes without);
    /// - `n_per_row * n_experts` values (`ne[0] * ne[2]`): `Ok(Some(weights))`,
    ///   expert `e`'s slice at `e * n_per_row`;
    /// - any other size: an error, except for the token embeddings
    ///   (`token_embd.weight`, `per_layer_token_embd.weight`), which are then
    ///   quantized without weights (`Ok(None)`).
    ///
    /// With pruned layers, look up the tensor under its source-model name.
    pub fn weights_for(&self, tensor: &TensorInfo) -> Result<Option<&[f32]>> {
        let Some(weights) = self.entries.get(&tensor.name) else {
            return Ok(None);
        };
        let n_per_row = tensor.dims.first().copied().unwrap_or(1);
        let n_experts = tensor.dims.get(2).copied().unwrap_or(1);
        let expected = n_per_row.saturating_mul(n_experts);
        if weights.len() as u64 == expected {
            return Ok(Some(weights));
        }
        // An imatrix never covers the embeddings' lookup (it is not a matrix
        // multiplication), so llama.cpp lets a stale entry for them pass.
        if matches!(tensor.name.as_str(), "token_embd.weight" | "per_layer_token_embd.weight") {
            return Ok(None);
        }
        Err(self.error(ImatrixErrorKind::SizeMismatch {
            tensor: tensor.name.clone(),
            found: weights.len() as u64,
            expected,
            n_per_row,
            n_experts,
        }))
    }

    /// Fails when some entry names no tensor of the model. Stricter than
    /// llama-quantize, which ignores such entries: an entry for a tensor the
    /// model lacks means the imatrix was made for a different model.
    pub fn check_names(&self, tensors: &[TensorInfo]) -> Result<()> {
        let known: std::collections::HashSet<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        let unknown: Vec<&String> = self.entries.keys().filter(|name| !known.contains(name.as_str())).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let first = unknown.iter().take(3).map(|s| s.to_string()).collect();
        Err(self.error(ImatrixErrorKind::UnknownTensors { count: unknown.len(), first }))
    }

    /// Records the matrix in a quantized model as `name` instead of the path
    /// it was read from.
    pub fn record_as(&mut self, name: &Path) {
        self.path = name.to_owned();
    }

    /// The `quantize.imatrix.*` keys llama-quantize writes, in its order:
    /// the file name as given and the first dataset (each cut to 127 bytes),
    /// the entry count (after filtering) and, when positive, the chunk count,
    /// both as `u32`. Nothing at all when the imatrix is empty.
    pub fn output_metadata(&self) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        if self.entries.is_empty() {
            return out;
        }
        let kv_string = |bytes: &[u8]| Value::String(GgufString::from_bytes(c_string(bytes, KV_STRING_MAX).to_vec()));
        out.push((KV_QUANTIZE_IMATRIX_FILE, kv_string(self.path.as_os_str().as_bytes())));
        if let Some(first) = self.datasets.first() {
            out.push((KV_QUANTIZE_IMATRIX_DATASET, kv_string(first.as_bytes())));
        }
        // llama-quantize stores integer overrides as `(uint32_t) abs(i64)`.
        out.push((KV_QUANTIZE_IMATRIX_N_ENTRIES, Value::U32(self.entries.len() as u32)));
        if self.chunk_count > 0 {
            out.push((KV_QUANTIZE_IMATRIX_N_CHUNKS, Value::U32(self.chunk_count as u32)));
        }
        out
    }

    /// Sets [`ImportanceMatrix::output_metadata`] in `metadata` as gguf's
    /// setters do: an existing key is removed and the key appended at the end.
    pub fn apply_output_metadata(&self, metadata: &mut Metadata) {
        for (key, value) in self.output_metadata() {
            metadata.set_last(key, value);
        }
    }

    fn error(&self, kind: ImatrixErrorKind) -> ImatrixError {
        ImatrixError::new(&self.path, None, kind)
    }
}

/// `bytes` up to the first NUL and at most `max` bytes: what survives a trip
/// through a C string (and `strncpy` into a fixed buffer).
fn c_string(bytes: &[u8], max: usize) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()).min(max);
    &bytes[..end]
}

/// glibc's `lroundf` on x86-64: round half away from zero; NaN, infinities
/// and magnitudes of 2^63 or more give `i64::MIN` (the conversion's
/// "integer indefinite"), which llama-quantize then treats as no data.
fn lround(x: f32) -> i64 {
    const LIMIT: f32 = (1u64 << 63) as f32;
    if x.is_finite() && x.abs() < LIMIT { x.round() as i64 } else { i64::MIN }
}

/// llama-quantize's weights for a GGUF entry: for each count, its row of
/// sums divided by the count as f32, or all ones when the count is not
/// positive (an expert no token was routed to).
fn gguf_weights(sums: impl Iterator<Item = f32>, counts: &[i64], n_per_row: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(counts.len() * n_per_row);
    let mut sums = sums;
    for &count in counts {
        let count = count as f32;
        for sum in sums.by_ref().take(n_per_row) {
            out.push(if count > 0.0 { sum / count } else { 1.0 });
        }
    }
    out
}

/// llama-quantize's weights for a legacy entry: the stored `sum/count*ncall`
/// divided by `ncall` (an `int64_t`, so converted to f32), or the stored
/// values as they are when `ncall` is not positive.
fn legacy_weights(stored: impl Iterator<Item = f32>, ncall: i32) -> Vec<f32> {
    if ncall > 0 {
        let ncall = i64::from(ncall) as f32;
        stored.map(|v| v / ncall).collect()
    } else {
        stored.collect()
    }
}

/// Little-endian f32s (a big-endian file's tensors are swapped on read).
fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A bounds-checked cursor over a mapped (or read) file.
struct Cursor<'a> {
    source: &'a Source,
    path: &'a Path,
    pos: u64,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        self.source.len().saturating_sub(self.pos)
    }

    fn error(&self, kind: ImatrixErrorKind) -> ImatrixError {
        ImatrixError::new(self.path, Some(self.pos), kind)
    }

    /// The next `n` bytes, after checking the file holds them.
    fn take(&mut self, n: u64, what: &dyn fmt::Display) -> Result<Cow<'a, [u8]>> {
        if n > self.remaining() {
            return Err(self.error(ImatrixErrorKind::Format(ErrorKind::Truncated {
                what: what.to_string(),
                needed: n,
                available: self.remaining(),
            })));
        }
        let bytes = self.source.read_range(self.pos, n)?;
        self.pos += n;
        Ok(bytes)
    }

    fn i32(&mut self, what: &dyn fmt::Display) -> Result<i32> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A field of a legacy entry, for error messages; formatted only on error.
struct EntryField<'a> {
    what: &'static str,
    index: i32,
    name: Option<&'a str>,
}

impl fmt::Display for EntryField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} of entry {}", self.what, self.index)?;
        match self.name {
            Some(name) => write!(f, " (`{name}`)"),
            None => Ok(()),
        }
    }
}

/// Reads the legacy format, accepting exactly what llama.cpp accepts.
fn load_legacy(path: &Path, source: &Source) -> Result<ImportanceMatrix> {
    let mut cur = Cursor { source, path, pos: 0 };
    let n_entries = cur.i32(&"the entry count")?;
    if n_entries < 1 {
        return Err(ImatrixError::new(
            path,
            Some(0),
            ImatrixErrorKind::NoEntries { what: "the entry count", count: n_entries.into() },
        ));
    }
    // Each entry takes at least a name length, ncall, nval and one value.
    const MIN_ENTRY: u64 = 16;
    if n_entries as u64 * MIN_ENTRY > cur.remaining() {
        return Err(ImatrixError::new(
            path,
            Some(0),
            ImatrixErrorKind::Format(ErrorKind::CountTooLarge {
                what: "the entry count".into(),
                count: n_entries as u64,
                min_each: MIN_ENTRY,
                available: cur.remaining(),
            }),
        ));
    }
    let mut entries = BTreeMap::new();
    for index in 1..=n_entries {
        let field = |what, name| EntryField { what, index, name };
        let len_at = cur.pos;
        let len = cur.i32(&field("name length", None))?;
        if len < 0 {
            // llama.cpp: writes out of bounds or throws bad_alloc.
            return Err(ImatrixError::new(
                path,
                Some(len_at),
                ImatrixErrorKind::BadField {
                    what: field("name length", None).to_string(),
                    value: len.into(),
                    expected: "0 or more",
                },
            ));
        }
        let raw_name = cur.take(len as u64, &field("name", None))?;
        // llama.cpp builds the name as a C string: it ends at the first NUL.
        // llama.cpp: takes any bytes; a name that is not UTF-8 could never
        // match a tensor here, so say so.
        let name = std::str::from_utf8(c_string(&raw_name, usize::MAX)).map_err(|_| {
            ImatrixError::new(
                path,
                Some(len_at + 4),
                ImatrixErrorKind::InvalidName { what: field("name", None).to_string() },
            )
        })?;
        let ncall = cur.i32(&field("call count", Some(name)))?;
        let nval_at = cur.pos;
        let nval = cur.i32(&field("value count", Some(name)))?;
        if nval < 1 {
            return Err(ImatrixError::new(
                path,
                Some(nval_at),
                ImatrixErrorKind::BadField {
                    what: field("value count", Some(name)).to_string(),
                    value: nval.into(),
                    expected: "1 or more",
                },
            ));
        }
        let data = cur.take(nval as u64 * 4, &field("values", Some(name)))?;
        // A repeated name replaces the earlier entry, as in llama.cpp's map.
        entries.insert(name.to_owned(), legacy_weights(f32s(&data), ncall));
    }

    // The trailer is optional, and llama.cpp reads whatever of it is there:
    // a short chunk count keeps the bytes it got, a dataset name that does
    // not fit is dropped.
    let mut chunk_count = 0;
    let mut datasets = Vec::new();
    if cur.remaining() > 0 {
        let have = cur.remaining().min(4);
        let bytes = cur.take(have, &"the chunk count")?;
        let mut word = [0u8; 4];
        word[..bytes.len()].copy_from_slice(&bytes);
        chunk_count = i32::from_le_bytes(word);
        if have == 4 && cur.remaining() >= 4 {
            let len = cur.i32(&"the dataset name length")?;
            if len > 0 && len as u64 <= cur.remaining() {
                let name = cur.take(len as u64, &"the dataset name")?;
                datasets.push(GgufString::from_bytes(c_string(&name, usize::MAX).to_vec()));
            }
        }
    }
    Ok(ImportanceMatrix {
        path: path.to_owned(),
        format: ImatrixFormat::Legacy,
        entries,
        datasets,
        chunk_count,
        chunk_size: 0,
    })
}

/// Reads the GGUF format, with llama.cpp's checks in llama.cpp's order.
fn load_gguf(path: &Path) -> Result<ImportanceMatrix> {
    let model = ModelFile::open(path, OpenOptions::default())?;
    let data = |t: &TensorInfo| -> Result<Vec<u8>> { Ok(model.tensor_data(t)?.into_owned()) };
    from_gguf_parts(path, &model.metadata, &model.tensors, &data)
}

/// An imatrix in llama-imatrix's GGUF layout, from its metadata and
/// tensors, whatever holds their bytes (`data`); `path` names it in errors
/// and in what a quantized model records.
fn from_gguf_parts(
    path: &Path,
    md: &Metadata,
    tensors: &[TensorInfo],
    data: &dyn Fn(&TensorInfo) -> Result<Vec<u8>>,
) -> Result<ImportanceMatrix> {
    let err = |kind| ImatrixError::new(path, None, kind);
    if tensors.is_empty() {
        return Err(err(ImatrixErrorKind::NoEntries { what: "the tensor count", count: 0 }));
    }

    let mut datasets = Vec::new();
    if let Some(Value::Array(Array::String(names))) = md.get(KV_IMATRIX_DATASETS) {
        datasets = names.iter().map(|n| GgufString::from_bytes(c_string(n, usize::MAX).to_vec())).collect();
    }
    // llama.cpp asserts these are u32 (and aborts otherwise), then keeps
    // them in `int32_t`s.
    let u32_key = |key: &'static str| -> Result<Option<i32>> {
        match md.get(key) {
            None => Ok(None),
            Some(Value::U32(v)) => Ok(Some(*v as i32)),
            Some(other) => Err(err(ImatrixErrorKind::WrongValueType { key, found: other.value_type().name() })),
        }
    };
    let chunk_count = u32_key(KV_IMATRIX_CHUNK_COUNT)?;
    let chunk_size = u32_key(KV_IMATRIX_CHUNK_SIZE)?;

    // Pair `<name>.in_sum2` with `<name>.counts`; other tensors are ignored.
    let mut pairs: BTreeMap<&str, (Option<&TensorInfo>, Option<&TensorInfo>)> = BTreeMap::new();
    for t in tensors.iter().filter(|t| !t.name.is_empty()) {
        if let Some(name) = t.name.strip_suffix(SUMS_SUFFIX) {
            pairs.entry(name).or_default().0 = Some(t);
        } else if let Some(name) = t.name.strip_suffix(COUNTS_SUFFIX) {
            pairs.entry(name).or_default().1 = Some(t);
        }
    }

    let mut entries = BTreeMap::new();
    for (name, pair) in pairs {
        let (sums, counts) = match pair {
            (Some(s), Some(c)) => (s, c),
            (s, _) => {
                let (present, missing) =
                    if s.is_some() { (SUMS_SUFFIX, COUNTS_SUFFIX) } else { (COUNTS_SUFFIX, SUMS_SUFFIX) };
                return Err(err(ImatrixErrorKind::MissingPair {
                    entry: name.to_owned(),
                    present: format!("{name}{present}"),
                    missing: format!("{name}{missing}"),
                }));
            }
        };
        for t in [sums, counts] {
            if t.ggml_type != GgmlType::F32 {
                return Err(err(ImatrixErrorKind::WrongTensorType { tensor: t.name.clone(), found: t.ggml_type }));
            }
        }
        let (n_sums, n_counts) = (sums.n_elements(), counts.n_elements());
        // llama.cpp: divides by zero.
        if n_counts == 0 {
            return Err(err(ImatrixErrorKind::NoCounts { tensor: counts.name.clone() }));
        }
        // llama.cpp: leaves the remainder at 0, silently.
        if n_sums % n_counts != 0 {
            return Err(err(ImatrixErrorKind::SumsNotRows { entry: name.to_owned(), sums: n_sums, counts: n_counts }));
        }
        let counts_data = data(counts)?;
        let counts: Vec<i64> = f32s(&counts_data).map(lround).collect();
        let sums_data = data(sums)?;
        let n_per_row = (n_sums / n_counts) as usize;
        entries.insert(name.to_owned(), gguf_weights(f32s(&sums_data), &counts, n_per_row));
    }

    let missing: Vec<String> = [KV_IMATRIX_DATASETS, KV_IMATRIX_CHUNK_COUNT, KV_IMATRIX_CHUNK_SIZE]
        .into_iter()
        .filter(|key| !md.contains_key(key))
        .map(|key| format!("`{key}`"))
        .collect();
    if !missing.is_empty() {
        return Err(err(ImatrixErrorKind::MissingMetadata { missing: missing.join(", ") }));
    }
    Ok(ImportanceMatrix {
        path: path.to_owned(),
        format: ImatrixFormat::Gguf,
        entries,
        datasets,
        chunk_count: chunk_count.unwrap_or(0),
        chunk_size: chunk_size.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, dims: &[u64]) -> TensorInfo {
        TensorInfo::new(name, dims.to_vec(), GgmlType::F16)
    }

    fn imatrix(entries: &[(&str, Vec<f32>)]) -> ImportanceMatrix {
        ImportanceMatrix {
            path: PathBuf::from("test.imatrix"),
            format: ImatrixFormat::Gguf,
            entries: entries.iter().map(|(n, w)| (n.to_string(), w.clone())).collect(),
            datasets: vec![],
            chunk_count: 0,
            chunk_size: 0,
        }
    }

    #[test]
    fn lround_matches_glibc_on_x86_64() {
        assert_eq!(lround(0.5), 1);
        assert_eq!(lround(1.5), 2);
        assert_eq!(lround(2.5), 3);
        assert_eq!(lround(-0.5), -1);
        assert_eq!(lround(-2.5), -3);
        assert_eq!(lround(0.49999997), 0);
        assert_eq!(lround(16_777_216.0), 16_777_216);
        assert_eq!(lround(9.2233715e18), 9_223_371_487_098_961_920);
        assert_eq!(lround(9.223_372e18), i64::MIN);
        assert_eq!(lround(-9.223_372e18), i64::MIN);
        assert_eq!(lround(f32::NAN), i64::MIN);
        assert_eq!(lround(f32::INFINITY), i64::MIN);
        assert_eq!(lround(f32::NEG_INFINITY), i64::MIN);
    }

    #[test]
    fn gguf_arithmetic_is_f32_division_per_count() {
        let sums = [3.0f32, 1.0, 0.1, 7.0, 5.0, 6.0];
        let w = gguf_weights(sums.iter().copied(), &[3, 0, 7], 2);
        assert_eq!(w, vec![3.0 / 3.0, 1.0f32 / 3.0, 1.0, 1.0, 5.0f32 / 7.0, 6.0f32 / 7.0]);
        // A count beyond f32's integers is rounded as `(float) int64_t` does.
        let w = gguf_weights([1.0f32].into_iter(), &[16_777_217], 1);
        assert_eq!(w, vec![1.0f32 / 16_777_216.0]);
        // Negative counts (and lround's i64::MIN) mean "no data".
        assert_eq!(gguf_weights([9.0f32].into_iter(), &[i64::MIN], 1), vec![1.0]);
        assert_eq!(gguf_weights([9.0f32].into_iter(), &[-2], 1), vec![1.0]);
    }

    #[test]
    fn legacy_arithmetic_divides_by_ncall() {
        let stored = [3.0f32, 0.7, 1e-3];
        assert_eq!(legacy_weights(stored.iter().copied(), 3), vec![1.0, 0.7f32 / 3.0, 1e-3f32 / 3.0]);
        assert_eq!(legacy_weights(stored.iter().copied(), 0), stored.to_vec());
        assert_eq!(legacy_weights(stored.iter().copied(), -4), stored.to_vec());
        let big = i32::MAX;
        assert_eq!(legacy_weights([1.0f32].into_iter(), big), vec![1.0 / 2_147_483_648.0f32]);
    }

    #[test]
    fn c_strings_stop_at_nul_and_length() {
        assert_eq!(c_string(b"abc\0def", usize::MAX), b"abc");
        assert_eq!(c_string(b"abcdef", 4), b"abcd");
        assert_eq!(c_string(b"", 4), b"");
    }

    #[test]
    fn filter_is_substring_based_exclude_then_include() {
        let names = ["blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "output.weight"];
        let base = imatrix(&names.iter().map(|n| (*n, vec![1.0])).collect::<Vec<_>>());
        let run = |include: &[&str], exclude: &[&str]| {
            let mut m = base.clone();
            let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            m.filter(&owned(include), &owned(exclude));
            m.names().map(str::to_owned).collect::<Vec<_>>()
        };
        assert_eq!(run(&[], &[]), names);
        assert_eq!(run(&[], &["ffn_down"]), ["blk.0.attn_q.weight", "output.weight"]);
        assert_eq!(run(&["blk.1.", "output"], &[]), ["blk.1.ffn_down.weight", "output.weight"]);
        assert_eq!(run(&["ffn", "down"], &[]), ["blk.0.ffn_down.weight", "blk.1.ffn_down.weight"]);
        assert_eq!(run(&["nothing"], &[]), Vec::<String>::new());
        assert_eq!(run(&[], &[""]), Vec::<String>::new());
        assert_eq!(run(&["weight"], &["blk.0"]), ["blk.1.ffn_down.weight", "output.weight"]);
    }

    #[test]
    fn lookup_validates_size_like_llama_quantize() {
        let m = imatrix(&[
            ("a.weight", vec![1.0; 4]),
            ("moe.weight", vec![1.0; 12]),
            ("token_embd.weight", vec![1.0; 3]),
            ("b.weight", vec![1.0; 3]),
        ]);
        assert_eq!(m.weights_for(&tensor("a.weight", &[4, 8])).unwrap().map(<[f32]>::len), Some(4));
        assert_eq!(m.weights_for(&tensor("moe.weight", &[4, 8, 3])).unwrap().map(<[f32]>::len), Some(12));
        assert_eq!(m.weights_for(&tensor("missing.weight", &[4, 8])).unwrap(), None);
        assert_eq!(m.weights_for(&tensor("token_embd.weight", &[4, 8])).unwrap(), None);
        let e = m.weights_for(&tensor("b.weight", &[4, 8])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "test.imatrix: imatrix entry `b.weight` has 3 values, but the tensor needs 4 (4 per row x 1 experts): \
             was the imatrix computed for another model?"
        );
        // A 4-D tensor: ne[3] plays no part, as in llama.cpp.
        assert!(m.weights_for(&tensor("moe.weight", &[4, 2, 3, 5])).unwrap().is_some());
    }

    #[test]
    fn output_metadata_follows_llama_quantize() {
        let mut m = imatrix(&[("a.weight", vec![1.0])]);
        m.path = PathBuf::from("x".repeat(200));
        m.datasets = vec![GgufString::from("d1.txt"), GgufString::from("d2.txt")];
        m.chunk_count = 7;
        let md = m.output_metadata();
        assert_eq!(md[0], (KV_QUANTIZE_IMATRIX_FILE, Value::string(&"x".repeat(127))));
        assert_eq!(md[1], (KV_QUANTIZE_IMATRIX_DATASET, Value::string("d1.txt")));
        assert_eq!(md[2], (KV_QUANTIZE_IMATRIX_N_ENTRIES, Value::U32(1)));
        assert_eq!(md[3], (KV_QUANTIZE_IMATRIX_N_CHUNKS, Value::U32(7)));
        assert_eq!(md.len(), 4);

        m.chunk_count = -5;
        m.datasets.clear();
        let keys: Vec<_> = m.output_metadata().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [KV_QUANTIZE_IMATRIX_FILE, KV_QUANTIZE_IMATRIX_N_ENTRIES]);

        m.filter(&[], &["a".into()]);
        assert!(m.output_metadata().is_empty());
    }

    #[test]
    fn apply_moves_existing_keys_to_the_end() {
        let m = imatrix(&[("a.weight", vec![1.0])]);
        let mut md = Metadata::new();
        md.set(KV_QUANTIZE_IMATRIX_FILE, Value::string("old"));
        md.set("general.name", Value::string("n"));
        m.apply_output_metadata(&mut md);
        let keys: Vec<_> = md.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["general.name", KV_QUANTIZE_IMATRIX_FILE, KV_QUANTIZE_IMATRIX_N_ENTRIES]);
        assert_eq!(md.get_str(KV_QUANTIZE_IMATRIX_FILE), Some("test.imatrix"));
    }

    #[test]
    fn non_finite_values_are_refused_after_filtering() {
        let mut m = imatrix(&[("a.weight", vec![1.0, f32::NAN]), ("b.weight", vec![2.0])]);
        let e = m.check_finite().unwrap_err();
        assert_eq!(e.to_string(), "test.imatrix: imatrix entry `a.weight` holds the non-finite value NaN at index 1");
        m.filter(&[], &["a.".into()]);
        m.check_finite().unwrap();
    }

    #[test]
    fn names_must_all_be_tensors_of_the_model() {
        let m = imatrix(&[("a.weight", vec![1.0]), ("x.weight", vec![1.0]), ("y.weight", vec![1.0])]);
        m.check_names(&[tensor("a.weight", &[1]), tensor("x.weight", &[1]), tensor("y.weight", &[1])]).unwrap();
        let e = m.check_names(&[tensor("a.weight", &[1])]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "test.imatrix: 2 imatrix entries name no tensor of the model (the first: `x.weight`, `y.weight`): \
             was the imatrix computed for another model?"
        );
    }
}
