//! The content-addressed store, behind two seams: [`BlobStore`] (bytes
//! named by their blake3) and [`ActionCache`] (small results named by a
//! derived key). The engine sees only [`Store`], both together.
//!
//! Implementations: [`LocalStore`], the cache directory; [`MemoryStore`],
//! for tests and embedding; [`Ephemeral`], what a one-shot command runs on
//! when no cache is asked for (it keeps nothing past the run).
//!
//! The trust model (ARCHITECTURE.md, "Trust"): a store trusts nothing it has
//! not hashed. A blob is checked against its name every time it is read or
//! copied; an action entry is sealed with a checksum over its kind, its key
//! and its bytes, so an entry copied under another key, edited, or holding
//! another entry's fields is refused. A bad blob or entry is moved to
//! quarantine, reported once as an [`Incident`], and treated as absent: the
//! caller recomputes it. Nothing outside this module builds a store path.

pub mod fingerprint;
mod local;
mod maintenance;
mod memory;
pub mod remote;
mod seal;
pub mod span;

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::key::{Key, KeyBuilder};
pub use local::LocalStore;
pub use maintenance::{GcOptions, GcReport, ListedEntry, StoreUsage, VerifyReport};
pub use memory::{Ephemeral, MemoryStore};
pub use span::{Span, SpanHost};

use crate::files::link::LinkMode;

/// The store a run uses: the cache directory (if any) in front of the
/// remote (if any); with neither, an [`Ephemeral`] store.
pub fn open(
    dir: Option<&std::path::Path>,
    remote: Option<(&remote::RemoteUrl, remote::RemoteMode)>,
) -> std::result::Result<std::sync::Arc<dyn Store>, OpenError> {
    use std::sync::Arc;
    Ok(match (dir, remote) {
        (Some(dir), None) => Arc::new(LocalStore::open(dir)?),
        (None, None) => Arc::new(Ephemeral::new()),
        (Some(dir), Some((url, mode))) => Arc::new(remote::Layered::open(LocalStore::open(dir)?, url, mode)?),
        (None, Some((url, mode))) => Arc::new(remote::Layered::scratch(url, mode)?),
    })
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Remote(#[from] remote::LayeredError),
}

/// Every store keeps the bytes ops make.
impl<S: Store + ?Sized> crate::artifact::BlobSink for S {
    fn put_blob(&self, bytes: &[u8]) -> std::result::Result<Key, crate::artifact::BlobSinkError> {
        BlobStore::put_blob(self, bytes).map_err(|e| crate::artifact::BlobSinkError(Box::new(e)))
    }
}

/// The key of the [`ActionKind::Recent`] entry of node `id` of `recipe`:
/// what its latest build's key was. A node or export entry of that node
/// under another key is superseded.
pub fn recent_key(recipe: &str, id: &str) -> Key {
    KeyBuilder::new("recent").str(recipe).str(id).finish()
}

/// The kinds of action-cache entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// A derived tensor's key → the blob holding its bytes.
    Tensor,
    /// A node's key → its result manifest.
    Node,
    /// An export's key → the files it wrote.
    Export,
    /// A file's stat fingerprint → its content hash.
    Stat,
    /// A recipe node's identity → the key parts it was last built with.
    Recent,
    /// Compiled GPU kernels → the blob holding their PTX (this machine's
    /// compute capability and NVRTC: never shared with a remote).
    Kernel,
    /// A file content's blake3 and size → its sha256, computed here (what
    /// lock files and attestations state).
    Sha256,
    /// A blob's hash → the ranges of other files that hold its bytes
    /// ([`span`]).
    Span,
}

impl ActionKind {
    pub const ALL: [ActionKind; 8] = [
        ActionKind::Tensor,
        ActionKind::Node,
        ActionKind::Export,
        ActionKind::Stat,
        ActionKind::Recent,
        ActionKind::Kernel,
        ActionKind::Sha256,
        ActionKind::Span,
    ];

    /// The kinds whose entries name blobs (the rest are hints).
    pub const RESULTS: [ActionKind; 3] = [ActionKind::Tensor, ActionKind::Node, ActionKind::Export];

    pub fn name(self) -> &'static str {
        match self {
            ActionKind::Tensor => "tensors",
            ActionKind::Node => "nodes",
            ActionKind::Export => "exports",
            ActionKind::Stat => "stat",
            ActionKind::Recent => "recent",
            ActionKind::Kernel => "kernels",
            ActionKind::Sha256 => "sha256",
            ActionKind::Span => "spans",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cache {}: {}", path.display(), crate::files::IoText(source))]
    Io { path: PathBuf, source: io::Error },
    /// A blob whose bytes do not hash to its name (or that is not a regular
    /// file): quarantined; the caller recomputes what it held.
    #[error("cache blob {hash} is corrupt ({problem}); it was quarantined")]
    Corrupt { hash: Key, problem: String },
    #[error("cache blob {0} is missing")]
    Missing(Key),
    /// A sound blob of another length than the bytes it was asked for (an
    /// entry naming the wrong blob): nothing was written; the caller
    /// recomputes what it needed.
    #[error("cache blob {hash} holds {len} bytes where {expected} were expected")]
    Misfit { hash: Key, len: u64, expected: u64 },
    /// Writing a blob's bytes into the output failed (a full disk, say).
    #[error("writing the output: {}", crate::files::IoText(.0))]
    Output(io::Error),
}

impl StoreError {
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> StoreError {
        StoreError::Io { path: path.into(), source }
    }

    /// Whether the blob is unusable as stored, so the caller should compute
    /// its bytes again rather than fail.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. } | StoreError::Missing(_) | StoreError::Misfit { .. })
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Bytes named by their blake3. Every read checks the bytes against the name.
pub trait BlobStore: Send + Sync {
    /// Whether a blob is stored under `hash` (not yet checked).
    fn has_blob(&self, hash: &Key) -> bool;

    /// Whether every one of `hashes` is stored (a remote store asks for them
    /// together).
    fn has_blobs(&self, hashes: &[Key]) -> bool {
        hashes.iter().all(|h| self.has_blob(h))
    }

    /// The whole blob, checked.
    fn read_blob(&self, hash: &Key) -> Result<Vec<u8>>;

    /// `len` bytes at `offset` of a blob checked whole before its first use
    /// in this process.
    fn read_blob_range(&self, hash: &Key, offset: u64, len: u64) -> Result<Vec<u8>>;

    /// Copies the whole blob, which must be `len` bytes long, into `out` at
    /// `offset`, checking it as it goes. A blob of any other length is
    /// refused before a byte is written (so nothing lands past the range);
    /// on [`StoreError::Corrupt`] the `len` bytes already written there are
    /// garbage: the caller writes the range again.
    fn copy_blob_into(&self, hash: &Key, len: u64, out: &File, offset: u64) -> Result<()>;

    /// Stores `bytes` (kept for at least the run) and returns their hash.
    fn put_blob(&self, bytes: &[u8]) -> Result<Key>;

    /// Starts a blob whose hash is known only when it is complete; `None`
    /// from a store that keeps no encoded tensors (they go to the output only).
    fn blob_writer(&self) -> Result<Option<Box<dyn BlobWriter>>>;

    /// Says which blobs are about to be read, so a store that must bring
    /// them from afar can fetch them together. Best effort.
    fn prefetch_blobs(&self, _hashes: &[Key]) {}
}

/// A blob being written; it hashes as it goes.
pub trait BlobWriter: Write + Send {
    /// Moves the complete blob into place under its hash.
    fn commit(self: Box<Self>) -> Result<(Key, u64)>;
}

/// Small results by derived key. What comes back is what was put under that
/// kind and key, or nothing: a store refuses an entry it cannot vouch for.
pub trait ActionCache: Send + Sync {
    fn get_action(&self, kind: ActionKind, key: &Key) -> Option<Vec<u8>>;

    /// Records `content` under `key`, replacing what was there.
    fn put_action(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<()>;

    /// Records `content` unless an entry exists; true when this call wrote it.
    fn put_action_if_absent(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<bool>;

    /// Marks an entry as used now, so age-based gc keeps what runs still use.
    fn touch_action(&self, kind: ActionKind, key: &Key);

    /// Every entry of `kind`, with when it was last used.
    fn list_actions(&self, kind: ActionKind) -> Result<Vec<(Key, SystemTime)>>;

    /// Says which entries (and so the blobs they name) are about to be
    /// read, so a store that must bring them from afar can fetch them
    /// together. Best effort.
    fn prefetch_actions(&self, _kind: ActionKind, _keys: &[Key]) {}
}

/// What the engine runs on.
pub trait Store: BlobStore + ActionCache {
    /// Where the store lives, for messages (never holds a secret).
    fn location(&self) -> String;

    /// The store's directory on this machine, if it has one: exports must
    /// never write into it.
    fn directory(&self) -> Option<&std::path::Path> {
        None
    }

    /// Whether results outlive the run. Lets the engine skip work only a
    /// lasting store needs (hashing outputs, content-hashing inputs).
    fn keeps_results(&self) -> bool {
        true
    }

    /// The problems found (and quarantined) since the last call.
    fn take_incidents(&self) -> Vec<Incident>;

    /// What moved to and from a remote store so far, for a store with one.
    fn transfers(&self) -> Option<remote::TransferReport> {
        None
    }

    /// Takes the finished file at `path` (whose bytes hash to `hash`) in
    /// as a blob without writing its bytes again, by the first of `modes`
    /// that works here; [`LinkMode::Copy`] when none does,
    /// [`LinkMode::Whole`] from a store that keeps its blobs whole (a remote
    /// cache's, one in memory) or when asked to.
    fn adopt_file(&self, _path: &std::path::Path, _hash: &Key, _modes: &[LinkMode]) -> Result<LinkMode> {
        Ok(LinkMode::Whole)
    }

    /// Serves blob `hash` from `span` from now on, dropping the blob's own
    /// copy: its bytes already lie there. False from a store that keeps
    /// its blobs whole.
    fn keep_as_span(&self, _hash: &Key, _span: Span) -> Result<bool> {
        Ok(false)
    }

    /// Puts blob `hash`, checked, into `out` (an empty file) as a reflink;
    /// false where that cannot be done (the caller copies).
    fn reflink_blob_into(&self, _hash: &Key, _out: &File) -> Result<bool> {
        Ok(false)
    }

    /// The path of blob `hash`'s own file, checked, for a hard link to it.
    fn blob_to_link(&self, _hash: &Key) -> Result<Option<PathBuf>> {
        Ok(None)
    }
}

/// A corrupt blob or entry found while running, quarantined.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Incident {
    /// `blob HASH` or `KIND entry KEY`.
    pub what: String,
    pub problem: String,
}

impl std::fmt::Display for Incident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}; quarantined, recomputed", self.what, self.problem)
    }
}

/// The incidents a store has seen, each reported once.
#[derive(Debug, Default)]
struct Incidents(Mutex<Vec<Incident>>);

impl Incidents {
    fn record(&self, what: String, problem: impl Into<String>) {
        let incident = Incident { what, problem: problem.into() };
        tracing::debug!("cache: {incident}");
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(&incident) {
            seen.push(incident);
        }
    }

    fn take(&self) -> Vec<Incident> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Bytes per step when a blob is checked while it is copied.
const COPY_CHUNK: usize = 256 << 10;
