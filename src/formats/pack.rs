//! Ladder packs: one file holding a base model, an importance matrix, and
//! for each file of a quantization ladder the derivation that makes it from
//! the base, plus the bytes it does not share with that derivation (zstd).
//! `quantforge pack` writes one; `unpack` makes the files again, checking
//! each against the sha256 the pack records.
//!
//! Layout (docs/PACKS.md): [`MAGIC`], the blobs, the manifest (JSON), the
//! manifest's length (u64 little-endian), [`MAGIC`] again. A pack is read
//! as untrusted input: the manifest is bounded and every field checked
//! (blob ranges inside the blob area, piece lengths adding up to the file,
//! plain unique file names) before a byte is written, and every file made
//! is hashed and compared with its recorded sha256 before it appears.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{AtomicOutput, ModelFile, OpenOptions};
use crate::files::{OutputPath, hex};

pub const MAGIC: &[u8; 8] = b"QFPACK\x00\x01";
/// The manifest's layout version.
pub const PACK_VERSION: u32 = 1;
const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// zstd's level for stored bytes: quantized tensors gain little from more.
const ZSTD_LEVEL: i32 = 9;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    pub quantforge: String,
    pub base: PackedFile,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imatrix: Option<PackedFile>,
    pub files: Vec<LadderFile>,
}

/// A file held whole.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackedFile {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub blob: Blob,
}

/// Bytes in the pack: `length` bytes at `offset`, zstd-compressed or raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blob {
    pub offset: u64,
    pub length: u64,
    pub zstd: bool,
}

/// A file of the ladder: its derivation from the base (if any), and its
/// bytes as pieces of that derivation's output or stored ones. No pieces:
/// the derivation's output is the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderFile {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derivation: Option<Derivation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<Piece>,
}

/// `quantize [--imatrix IMATRIX --imatrix-name NAME] FLAGS… BASE OUT PRESET`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derivation {
    pub preset: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// With the pack's importance matrix, recorded in the file under this
    /// name (the path its maker gave llama-quantize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imatrix: Option<String>,
}

impl std::fmt::Display for Derivation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("quantize")?;
        if let Some(name) = &self.imatrix {
            write!(f, " --imatrix IMATRIX --imatrix-name {name}")?;
        }
        for flag in &self.flags {
            write!(f, " {flag}")?;
        }
        write!(f, " {}", self.preset)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Piece {
    /// `length` bytes of the derivation's output at `offset`.
    Derived { offset: u64, length: u64 },
    /// `length` bytes stored in the pack.
    Stored { length: u64, blob: Blob },
}

impl Piece {
    pub fn length(&self) -> u64 {
        match *self {
            Piece::Derived { length, .. } | Piece::Stored { length, .. } => length,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a quantforge pack: {problem}", path.display())]
    Malformed { path: PathBuf, problem: String },
    #[error("{name}: made {size} bytes with sha256 {sha256}; the pack records {expected}")]
    Mismatch { name: String, size: u64, sha256: String, expected: String },
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> PackError + '_ {
    move |source| PackError::Io { path: path.to_owned(), source }
}

/// Where a claimed file's bytes come from, relative to a derived file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// `length` bytes at `offset` of the derived file.
    Derived { offset: u64, length: u64 },
    /// `length` bytes at `offset` of the claimed file itself.
    Literal { offset: u64, length: u64 },
}

/// The claimed file as spans of the derived file and literal bytes: its
/// header, each tensor's data (matched by name) and the padding after it,
/// each taken from the derived file where the bytes are the same there.
/// Files that do not open as models are one literal span.
pub fn delta(claimed: &Path, derived: &Path) -> Result<Vec<Span>, PackError> {
    let len = std::fs::metadata(claimed).map_err(io_at(claimed))?.len();
    let whole = vec![Span::Literal { offset: 0, length: len }];
    let options = OpenOptions::default();
    let (Ok(a), Ok(b)) = (ModelFile::open(claimed, options), ModelFile::open(derived, options)) else {
        return Ok(whole);
    };
    let (fa, fb) = (open(claimed)?, open(derived)?);
    let b_len = fb.metadata().map_err(io_at(derived))?.len();
    let same = |a_off: u64, b_off: u64, length: u64| -> Result<bool, PackError> {
        if b_off.checked_add(length).is_none_or(|end| end > b_len) {
            return Ok(false);
        }
        Ok(common_prefix(&fa, a_off, &fb, b_off, length).map_err(io_at(claimed))? == length)
    };
    let mut tensors: Vec<_> = a.tensors.iter().collect();
    tensors.sort_by_key(|t| t.file_offset);
    let b_first = b.tensors.iter().map(|t| t.file_offset).min().unwrap_or(b_len);
    let mut spans = Vec::new();
    let mut push = |span: Span| match (spans.last_mut(), span) {
        (Some(Span::Derived { offset, length }), Span::Derived { offset: next, length: more })
            if *offset + *length == next =>
        {
            *length += more
        }
        (Some(Span::Literal { offset, length }), Span::Literal { offset: next, length: more })
            if *offset + *length == next =>
        {
            *length += more
        }
        _ => spans.push(span),
    };
    // The header (everything before the first tensor's data): as much of
    // its start as the derived header shares (the metadata, when only tensor
    // types differ), the rest stored.
    let header = tensors.first().map_or(len, |t| t.file_offset);
    let shared = common_prefix(&fa, 0, &fb, 0, header.min(b_first)).map_err(io_at(claimed))?;
    if shared > 0 {
        push(Span::Derived { offset: 0, length: shared });
    }
    if shared < header {
        push(Span::Literal { offset: shared, length: header - shared });
    }
    for (k, tensor) in tensors.iter().enumerate() {
        let end = tensors.get(k + 1).map_or(len, |next| next.file_offset);
        let data_end = (tensor.file_offset + tensor.stored_len).min(end);
        let matched = b.tensors.iter().find(|t| t.name == tensor.name && t.stored_len == tensor.stored_len);
        let (data, derived_end) = match matched {
            Some(t) if same(tensor.file_offset, t.file_offset, tensor.stored_len)? => (
                Span::Derived { offset: t.file_offset, length: data_end - tensor.file_offset },
                Some(t.file_offset + tensor.stored_len),
            ),
            _ => (Span::Literal { offset: tensor.file_offset, length: data_end - tensor.file_offset }, None),
        };
        push(data);
        let padding = end - data_end;
        if padding > 0 {
            push(match derived_end {
                Some(at) if same(data_end, at, padding)? => Span::Derived { offset: at, length: padding },
                _ => Span::Literal { offset: data_end, length: padding },
            });
        }
    }
    Ok(spans)
}

/// Bytes a delta stores rather than derives.
pub fn literal_bytes(spans: &[Span]) -> u64 {
    spans.iter().map(|s| if let Span::Literal { length, .. } = *s { length } else { 0 }).sum()
}

/// How many of the `length` bytes at `a_off` in `a` and `b_off` in `b` are
/// equal before the first that differs.
fn common_prefix(a: &File, a_off: u64, b: &File, b_off: u64, length: u64) -> io::Result<u64> {
    const CHUNK: u64 = 1 << 20;
    let (mut ba, mut bb) = (vec![0u8; CHUNK as usize], vec![0u8; CHUNK as usize]);
    let mut done = 0;
    while done < length {
        let n = (length - done).min(CHUNK) as usize;
        a.read_exact_at(&mut ba[..n], a_off + done)?;
        b.read_exact_at(&mut bb[..n], b_off + done)?;
        if let Some(at) = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y) {
            return Ok(done + at as u64);
        }
        done += n as u64;
    }
    Ok(length)
}

fn open(path: &Path) -> Result<File, PackError> {
    crate::files::open_regular(path, crate::files::Symlinks::Follow).map_err(io_at(path))
}

/// A pack being written: blobs appended as they come, the manifest last.
pub struct PackWriter {
    path: PathBuf,
    out: AtomicOutput,
    offset: u64,
}

impl PackWriter {
    pub fn create(path: &OutputPath) -> Result<PackWriter, PackError> {
        let shown = path.shown();
        let mut out = AtomicOutput::create(path).map_err(io_at(shown))?;
        out.writer().write_all(MAGIC).map_err(io_at(shown))?;
        Ok(PackWriter { path: shown.to_owned(), out, offset: MAGIC.len() as u64 })
    }

    /// Appends `source` whole and raw; the file as the manifest lists it.
    pub fn add_file(&mut self, source: &Path, name: String) -> Result<PackedFile, PackError> {
        let mut input = open(source)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let start = self.offset;
        loop {
            let n = input.read(&mut buf).map_err(io_at(source))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            self.out.writer().write_all(&buf[..n]).map_err(io_at(&self.path))?;
            self.offset += n as u64;
        }
        let blob = Blob { offset: start, length: self.offset - start, zstd: false };
        Ok(PackedFile { name, size: blob.length, sha256: hex(&hasher.finalize()), blob })
    }

    /// Appends `claimed`'s literal spans zstd-compressed (consecutive ones
    /// together); the file's pieces.
    pub fn add_spans(&mut self, claimed: &Path, spans: &[Span]) -> Result<Vec<Piece>, PackError> {
        let file = open(claimed)?;
        let mut pieces = Vec::with_capacity(spans.len());
        for span in spans {
            pieces.push(match *span {
                Span::Derived { offset, length } => Piece::Derived { offset, length },
                Span::Literal { offset, length } => {
                    let mut bytes = vec![0u8; usize::try_from(length).expect("a span fits in memory")];
                    file.read_exact_at(&mut bytes, offset).map_err(io_at(claimed))?;
                    Piece::Stored { length, blob: self.add_compressed(&bytes)? }
                }
            });
        }
        Ok(pieces)
    }

    fn add_compressed(&mut self, bytes: &[u8]) -> Result<Blob, PackError> {
        let compressed = zstd::bulk::compress(bytes, ZSTD_LEVEL).map_err(io_at(&self.path))?;
        self.out.writer().write_all(&compressed).map_err(io_at(&self.path))?;
        let blob = Blob { offset: self.offset, length: compressed.len() as u64, zstd: true };
        self.offset += blob.length;
        Ok(blob)
    }

    /// Writes the manifest and the trailer, and moves the pack into place.
    pub fn finish(mut self, manifest: &Manifest) -> Result<u64, PackError> {
        let json = serde_json::to_vec(manifest).expect("a manifest is plain data");
        let w = self.out.writer();
        let io = io_at(&self.path);
        w.write_all(&json).map_err(&io)?;
        w.write_all(&(json.len() as u64).to_le_bytes()).map_err(&io)?;
        w.write_all(MAGIC).map_err(&io)?;
        self.out.commit().map_err(&io)?;
        Ok(self.offset + json.len() as u64 + 16)
    }
}

/// A pack opened for reading, its manifest checked.
pub struct Pack {
    path: PathBuf,
    file: File,
    pub manifest: Manifest,
}

impl Pack {
    pub fn open(path: &Path) -> Result<Pack, PackError> {
        let file = open(path)?;
        let len = file.metadata().map_err(io_at(path))?.len();
        let read_at = |buf: &mut [u8], offset: u64| file.read_exact_at(buf, offset);
        let manifest =
            read_manifest(&read_at, len).map_err(|problem| PackError::Malformed { path: path.into(), problem })?;
        Ok(Pack { path: path.to_owned(), file, manifest })
    }

    /// Writes the base (or the importance matrix) to `out`, checked.
    pub fn extract(&self, packed: &PackedFile, out: &OutputPath) -> Result<(), PackError> {
        let mut writer = CheckedOutput::create(out, &packed.name)?;
        self.copy_blob(&packed.blob, packed.size, &mut writer)?;
        writer.commit(packed.size, &packed.sha256)
    }

    /// Makes `file` at `out` from its pieces, `derived` being its
    /// derivation's output (when it has one), and checks its sha256.
    pub fn assemble(&self, file: &LadderFile, derived: Option<&Path>, out: &OutputPath) -> Result<(), PackError> {
        let mut writer = CheckedOutput::create(out, &file.name)?;
        let derived = derived.map(|path| Ok::<_, PackError>((path, open(path)?))).transpose()?;
        let copy_derived = |writer: &mut CheckedOutput, offset: u64, length: u64| {
            let Some((path, source)) = &derived else {
                return Err(self.malformed(format!("{}: a derived piece without a derivation", file.name)));
            };
            copy_range(source, offset, length, writer).map_err(io_at(path))
        };
        match file.pieces.is_empty() {
            true => {
                let len =
                    derived.as_ref().map_or(Ok(0), |(path, f)| f.metadata().map(|m| m.len()).map_err(io_at(path)))?;
                copy_derived(&mut writer, 0, len)?;
            }
            false => {
                for piece in &file.pieces {
                    match *piece {
                        Piece::Derived { offset, length } => copy_derived(&mut writer, offset, length)?,
                        Piece::Stored { length, blob } => self.copy_blob(&blob, length, &mut writer)?,
                    }
                }
            }
        }
        writer.commit(file.size, &file.sha256)
    }

    fn copy_blob(&self, blob: &Blob, size: u64, writer: &mut CheckedOutput) -> Result<(), PackError> {
        if !blob.zstd {
            return copy_range(&self.file, blob.offset, blob.length, writer).map_err(io_at(&self.path));
        }
        let mut compressed = vec![0u8; blob.length as usize];
        self.file.read_exact_at(&mut compressed, blob.offset).map_err(io_at(&self.path))?;
        let capacity = usize::try_from(size).map_err(|_| self.malformed("a stored piece too large".into()))?;
        let bytes = zstd::bulk::decompress(&compressed, capacity)
            .map_err(|e| self.malformed(format!("the blob at {}: {e}", blob.offset)))?;
        if bytes.len() as u64 != size {
            return Err(self.malformed(format!("the blob at {} holds {} bytes, not {size}", blob.offset, bytes.len())));
        }
        writer.write_all(&bytes).map_err(io_at(&self.path))
    }

    fn malformed(&self, problem: String) -> PackError {
        PackError::Malformed { path: self.path.clone(), problem }
    }
}

/// Reads and checks the manifest of a pack of `len` bytes, read through
/// `read_at` (bytes at an offset).
fn read_manifest(read_at: &dyn Fn(&mut [u8], u64) -> io::Result<()>, len: u64) -> Result<Manifest, String> {
    let magic = MAGIC.len() as u64;
    if len < 2 * magic + 8 {
        return Err(format!("{len} bytes, too short"));
    }
    let mut head = [0u8; 8];
    let mut tail = [0u8; 16];
    read_at(&mut head, 0).map_err(|e| e.to_string())?;
    read_at(&mut tail, len - 16).map_err(|e| e.to_string())?;
    if &head != MAGIC || &tail[8..] != MAGIC {
        return Err("no QFPACK magic at its start and end".into());
    }
    let manifest_len = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    let blobs_end =
        (len - 16).checked_sub(manifest_len).filter(|&end| end >= magic && manifest_len <= MAX_MANIFEST_BYTES);
    let Some(blobs_end) = blobs_end else {
        return Err(format!("a manifest of {manifest_len} bytes does not fit"));
    };
    let mut json = vec![0u8; manifest_len as usize];
    read_at(&mut json, blobs_end).map_err(|e| e.to_string())?;
    let manifest: Manifest = serde_json::from_slice(&json).map_err(|e| format!("manifest at byte {blobs_end}: {e}"))?;
    check_manifest(&manifest, magic, blobs_end)?;
    Ok(manifest)
}

/// The checked manifest of a pack held in memory (for the fuzzer).
pub fn manifest_of(pack: &[u8]) -> Result<Manifest, String> {
    let read_at = |buf: &mut [u8], offset: u64| {
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let bytes = pack.get(start..).and_then(|rest| rest.get(..buf.len()));
        let bytes = bytes.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    };
    read_manifest(&read_at, pack.len() as u64)
}

fn check_manifest(manifest: &Manifest, blobs_start: u64, blobs_end: u64) -> Result<(), String> {
    if manifest.version != PACK_VERSION {
        return Err(format!("pack version {}; this quantforge reads version {PACK_VERSION}", manifest.version));
    }
    let blob_ok = |blob: &Blob, size: u64| {
        let inside = blob.offset >= blobs_start && blob.offset.checked_add(blob.length).is_some_and(|e| e <= blobs_end);
        inside && (blob.zstd || blob.length == size)
    };
    let whole = manifest.imatrix.iter().chain([&manifest.base]);
    let mut names: Vec<&str> = Vec::new();
    for packed in whole {
        if !blob_ok(&packed.blob, packed.size) {
            return Err(format!("{}: its blob lies outside the pack's blobs", packed.name));
        }
        names.push(&packed.name);
    }
    for file in &manifest.files {
        let mut total = 0u64;
        for piece in &file.pieces {
            if let Piece::Stored { length, blob } = piece
                && !blob_ok(blob, *length)
            {
                return Err(format!("{}: a piece's blob lies outside the pack's blobs", file.name));
            }
            total = total.checked_add(piece.length()).ok_or_else(|| format!("{}: pieces overflow", file.name))?;
        }
        if !file.pieces.is_empty() && total != file.size {
            return Err(format!("{}: pieces of {total} bytes for a file of {}", file.name, file.size));
        }
        if file.pieces.is_empty() && file.derivation.is_none() {
            return Err(format!("{}: neither a derivation nor pieces", file.name));
        }
        if file.derivation.is_none() && file.pieces.iter().any(|p| matches!(p, Piece::Derived { .. })) {
            return Err(format!("{}: a derived piece without a derivation", file.name));
        }
        if file.derivation.as_ref().is_some_and(|d| d.imatrix.is_some()) && manifest.imatrix.is_none() {
            return Err(format!("{}: derived with an importance matrix the pack does not hold", file.name));
        }
        names.push(&file.name);
    }
    for (i, name) in names.iter().enumerate() {
        let plain = Path::new(name).file_name().is_some_and(|n| n == std::ffi::OsStr::new(name));
        if !plain || name.starts_with('.') {
            return Err(format!("`{name}` is not a plain file name"));
        }
        if names[..i].contains(name) {
            return Err(format!("`{name}` is named twice"));
        }
    }
    Ok(())
}

fn copy_range(source: &File, offset: u64, length: u64, out: &mut CheckedOutput) -> io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(length as usize)];
    let mut done = 0;
    while done < length {
        let n = (length - done).min(buf.len() as u64) as usize;
        source.read_exact_at(&mut buf[..n], offset + done)?;
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// An output that hashes what it is given and appears only when its size
/// and sha256 are the expected ones.
struct CheckedOutput {
    path: PathBuf,
    name: String,
    out: AtomicOutput,
    hasher: Sha256,
    size: u64,
}

impl CheckedOutput {
    fn create(path: &OutputPath, name: &str) -> Result<CheckedOutput, PackError> {
        let shown = path.shown();
        let out = AtomicOutput::create(path).map_err(io_at(shown))?;
        Ok(CheckedOutput { path: shown.to_owned(), name: name.to_owned(), out, hasher: Sha256::new(), size: 0 })
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        self.out.writer().write_all(bytes)
    }

    fn commit(self, size: u64, sha256: &str) -> Result<(), PackError> {
        let made = hex(&self.hasher.finalize());
        if self.size != size || made != sha256 {
            return Err(PackError::Mismatch {
                name: self.name,
                size: self.size,
                sha256: made,
                expected: sha256.into(),
            });
        }
        self.out.commit().map_err(io_at(&self.path))?;
        Ok(())
    }
}
