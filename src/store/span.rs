//! Blobs held as a range of another file: a tensor's bytes where an export
//! already put them, so the cache keeps no second copy of them (issue 44).
//!
//! A span entry (`actions/spans/`, keyed by the blob's hash) lists where
//! the blob's bytes lie, newest first: in a blob of the store (an export's
//! file linked in by `--link reflink` or `hardlink`, which nothing outside
//! the store changes), or in a file outside it (an export written with
//! `--link copy`, which its user may edit or delete). Either way the range
//! is checked against the blob's name whenever it is read, as a blob's own
//! file is, and a range that no longer holds the bytes is dropped: the
//! blob is then missing, and the caller computes it again.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::local::{FileIdentity, LocalStore, Located};
use super::{ActionCache, ActionKind, COPY_CHUNK, Key, Result, StoreError};
use crate::files::link::{LinkMode, hardlinks_are_safe, reflink};
use crate::files::{Symlinks, open_regular};

/// Where a span's bytes lie.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpanHost {
    /// A blob of the store: an export's file, linked in.
    Blob(Key),
    /// A file outside the store: an export kept by `--link copy`.
    File(PathBuf),
}

/// A blob's bytes as a range of a host file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Span {
    pub host: SpanHost,
    pub offset: u64,
    pub len: u64,
}

/// The span entry of one blob.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Spans {
    pub(super) spans: Vec<Span>,
}

/// Places kept per blob: a tensor several exports share is found in any.
const MAX_SPANS: usize = 4;

impl LocalStore {
    pub(super) fn spans(&self, hash: &Key) -> Spans {
        self.get_action(ActionKind::Span, hash)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn put_spans(&self, hash: &Key, spans: &Spans) -> Result<()> {
        if spans.spans.is_empty() {
            let _ = super::local::remove_any(&self.action_path(ActionKind::Span, hash));
            return Ok(());
        }
        let json = serde_json::to_vec(spans).map_err(|e| StoreError::io(self.root(), e.into()))?;
        self.put_action(ActionKind::Span, hash, &json)
    }

    /// `span`'s bytes in their host file, opened as a regular file (never
    /// through a link) when it is long enough to hold the range; not checked.
    pub(super) fn open_host(&self, span: &Span) -> Option<Located> {
        let path = match &span.host {
            SpanHost::Blob(host) => self.blob_path(host),
            SpanHost::File(path) => path.clone(),
        };
        let file = open_regular(&path, Symlinks::Refuse).ok()?;
        let meta = file.metadata().ok()?;
        (meta.len() >= span.offset.checked_add(span.len)?).then(|| Located {
            file,
            identity: FileIdentity::of(&meta),
            path,
            base: span.offset,
            len: span.len,
            span: true,
        })
    }

    /// Blob `hash` found in one of its spans, not yet checked.
    pub(super) fn locate_span(&self, hash: &Key) -> Option<Located> {
        self.spans(hash).spans.iter().find_map(|span| self.open_host(span))
    }

    /// Whether some span of `hash` has a host that can hold it (not checked).
    pub(super) fn has_span(&self, hash: &Key) -> bool {
        self.spans(hash).spans.iter().any(|span| self.open_host(span).is_some())
    }

    /// Forgets the span of `hash` in `host`, which no longer holds its bytes.
    pub(super) fn drop_span(&self, hash: &Key, host: &Path, problem: &str) {
        let mut spans = self.spans(hash);
        spans.spans.retain(|span| match &span.host {
            SpanHost::Blob(blob) => self.blob_path(blob) != host,
            SpanHost::File(path) => path != host,
        });
        // Best effort: a span left behind is checked, and dropped, again.
        let _ = self.put_spans(hash, &spans);
        self.incidents.record(format!("blob {hash}"), format!("{} no longer holds it ({problem})", host.display()));
    }

    /// Serves blob `hash` from `span` from now on and removes the blob's own
    /// file: the bytes already lie there. The span is recorded before the
    /// file goes, so a reader never finds neither; a check this process
    /// made of the blob holds for the span.
    pub(super) fn keep_span(&self, hash: &Key, span: Span) -> Result<bool> {
        if span.host == SpanHost::Blob(*hash) {
            return Ok(false);
        }
        let host = self.open_host(&span);
        let mut spans = self.spans(hash);
        spans.spans.retain(|s| s.host != span.host);
        spans.spans.insert(0, span);
        spans.spans.truncate(MAX_SPANS);
        self.put_spans(hash, &spans)?;
        if let Some(host) = &host {
            self.carry_check(hash, host);
        }
        match fs::remove_file(self.blob_path(hash)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::io(self.blob_path(hash), e)),
            _ => Ok(true),
        }
    }

    /// Takes the finished file at `path` into the store as blob `hash`
    /// without writing its bytes again, by the first of `modes` this file
    /// system and this process allow. `Copy` (or nothing allowed): the store
    /// keeps no copy, and spans point at the file itself.
    pub(super) fn adopt(&self, path: &Path, hash: &Key, modes: &[LinkMode]) -> Result<LinkMode> {
        let blob = self.blob_path(hash);
        for &mode in modes {
            match mode {
                LinkMode::Reflink => {
                    if blob.is_file() {
                        return Ok(mode);
                    }
                    let source = open_regular(path, Symlinks::Refuse).map_err(|e| StoreError::io(path, e))?;
                    let clone = super::local::temp_file("blob-", &self.tmp_dir())?;
                    if reflink(&source, clone.as_file()).map_err(|e| StoreError::io(path, e))? {
                        super::local::create_parent(&blob)?;
                        clone.persist(&blob).map_err(|e| StoreError::io(&blob, e.error))?;
                        return Ok(mode);
                    }
                }
                LinkMode::Hardlink if hardlinks_are_safe() => {
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(path, fs::Permissions::from_mode(0o444))
                        .map_err(|e| StoreError::io(path, e))?;
                    if blob.is_file() {
                        return Ok(mode);
                    }
                    super::local::create_parent(&blob)?;
                    match fs::hard_link(path, &blob) {
                        Ok(()) => return Ok(mode),
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(mode),
                        // Another file system, or one without links: the next mode.
                        Err(_) => {}
                    }
                }
                LinkMode::Hardlink => {}
                LinkMode::Copy | LinkMode::Whole => return Ok(mode),
            }
        }
        Ok(LinkMode::Copy)
    }

    /// Blob `hash`'s own file, checked whole; `None` when the store holds
    /// it only as a span (another file's range cannot be linked to).
    pub(super) fn own_checked(&self, hash: &Key) -> Result<Option<Located>> {
        let located = self.locate(hash)?;
        if located.span {
            return Ok(None);
        }
        self.check_located(hash, &located)?;
        Ok(Some(located))
    }

    /// Puts blob `hash` (checked whole first) into `out`, an empty file, by
    /// a reflink; false where the file system cannot (the caller copies).
    pub(super) fn reflink_blob(&self, hash: &Key, out: &File) -> Result<bool> {
        match self.own_checked(hash)? {
            Some(located) => reflink(&located.file, out).map_err(StoreError::Output),
            None => Ok(false),
        }
    }

    /// The blake3 of the located bytes, read whole.
    pub(super) fn hash_located(located: &Located) -> io::Result<Key> {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; (located.len as usize).clamp(1, COPY_CHUNK)];
        let mut done = 0u64;
        while done < located.len {
            let want = buf.len().min(usize::try_from(located.len - done).unwrap_or(usize::MAX));
            let n = located.file.read_at(&mut buf[..want], located.base + done)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "cut short while read"));
            }
            hasher.update(&buf[..n]);
            done += n as u64;
        }
        Ok(Key(*hasher.finalize().as_bytes()))
    }
}
