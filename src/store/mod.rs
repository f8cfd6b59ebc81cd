//! The content-addressed store: blobs named by the blake3 of their bytes, an
//! action cache from derived keys to results, and a stat-fingerprint table
//! that saves re-hashing unchanged inputs.
//!
//! Layout under the store root:
//!
//! ```text
//! blobs/ab/abcd…        bytes whose blake3 is the file name
//! actions/KIND/ab/abcd… a small JSON result for a derived key (KIND: tensors, nodes, exports)
//! stat/ab/abcd…         content hash of a file, keyed by its (dev, inode, size, mtime, ctime)
//! recent/abcd…          the last key built for a recipe node, to explain the next miss
//! tmp/                  files being written; renamed into place when complete
//! lock                  shared by runs, exclusive for gc
//! ```
//!
//! Every file appears by rename, so a killed process leaves at worst a stray
//! file in `tmp/`, never a blob whose bytes do not match its name. Two
//! processes writing one entry write the same bytes, so the last rename wins
//! harmlessly. The store never decides what a key means: callers build keys
//! (`key`) and interpret results.

pub mod fingerprint;
pub mod key;
mod maintenance;

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use tempfile::{NamedTempFile, TempDir};

pub use key::{KEY_SCHEME_VERSION, Key, KeyBuilder};
pub use maintenance::{GcOptions, GcReport, StoreUsage, VerifyReport};

/// The kinds of action-cache entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// A derived tensor's key → the blob holding its bytes.
    Tensor,
    /// A node's key → its result manifest.
    Node,
    /// An export's key → the files it wrote.
    Export,
}

impl ActionKind {
    pub const ALL: [ActionKind; 3] = [ActionKind::Tensor, ActionKind::Node, ActionKind::Export];

    fn dir(self) -> &'static str {
        match self {
            ActionKind::Tensor => "tensors",
            ActionKind::Node => "nodes",
            ActionKind::Export => "exports",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cache {}: {source}", path.display())]
pub struct StoreError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

fn at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError { path: path.to_owned(), source }
}

/// An open store. Holds the store's lock (shared, or exclusive for
/// maintenance) for as long as it lives.
pub struct Store {
    root: PathBuf,
    _lock: File,
    persist_tensors: bool,
    _ephemeral: Option<TempDir>,
}

impl Store {
    /// Opens (creating if needed) the store at `root` for a run.
    pub fn open(root: &Path) -> Result<Store> {
        let lock = Store::prepare(root)?;
        lock.lock_shared().map_err(at(root))?;
        Ok(Store { root: root.to_owned(), _lock: lock, persist_tensors: true, _ephemeral: None })
    }

    /// Opens the store for maintenance: waits until no run holds it.
    pub fn open_exclusive(root: &Path) -> Result<Store> {
        let lock = Store::prepare(root)?;
        lock.lock().map_err(at(root))?;
        Ok(Store { root: root.to_owned(), _lock: lock, persist_tensors: true, _ephemeral: None })
    }

    /// A store in a temporary directory that keeps no tensor bytes: what a
    /// one-shot command uses when no cache is configured, so the engine's
    /// code path is the same and nothing is left behind.
    pub fn ephemeral() -> Result<Store> {
        let dir = tempfile::Builder::new().prefix("quantforge-store-").tempdir().map_err(at(Path::new("(temp)")))?;
        let mut store = Store::open(dir.path())?;
        store.persist_tensors = false;
        store._ephemeral = Some(dir);
        Ok(store)
    }

    fn prepare(root: &Path) -> Result<File> {
        for dir in ["blobs", "actions", "stat", "recent", "tmp"] {
            fs::create_dir_all(root.join(dir)).map_err(at(root))?;
        }
        let tag = root.join("CACHEDIR.TAG");
        if !tag.exists() {
            let text = "Signature: 8a477f597d28d172789f06886806bc55\n# quantforge cache: safe to delete.\n";
            write_atomically(&root.join("tmp"), &tag, text.as_bytes())?;
        }
        let lock_path = root.join("lock");
        File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(at(&lock_path))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether derived tensors are kept (false for an ephemeral store).
    pub fn persists_tensors(&self) -> bool {
        self.persist_tensors
    }

    pub fn blob_path(&self, hash: &Key) -> PathBuf {
        sharded(&self.root.join("blobs"), hash)
    }

    pub fn has_blob(&self, hash: &Key) -> bool {
        self.blob_path(hash).is_file()
    }

    /// Stores `bytes` and returns their hash.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<Key> {
        let hash = Key::of_bytes(bytes);
        let path = self.blob_path(&hash);
        if !path.is_file() {
            write_atomically(&self.root.join("tmp"), &path, bytes)?;
        }
        Ok(hash)
    }

    pub fn read_blob(&self, hash: &Key) -> Result<Vec<u8>> {
        let path = self.blob_path(hash);
        fs::read(&path).map_err(at(&path))
    }

    /// Starts a blob whose hash is known only when it is complete.
    pub fn blob_writer(&self) -> Result<BlobWriter> {
        let tmp = self.root.join("tmp");
        let file = NamedTempFile::with_prefix_in("blob-", &tmp).map_err(at(&tmp))?;
        Ok(BlobWriter { file: BufWriter::with_capacity(1 << 20, file), hasher: blake3::Hasher::new(), len: 0 })
    }

    /// Moves a completed blob into place under its hash.
    pub fn commit_blob(&self, writer: BlobWriter) -> Result<(Key, u64)> {
        let BlobWriter { file, hasher, len } = writer;
        let hash = Key(*hasher.finalize().as_bytes());
        let path = self.blob_path(&hash);
        let tmp = self.root.join("tmp");
        let file = file.into_inner().map_err(|e| StoreError { path: tmp.clone(), source: e.into_error() })?;
        create_parent(&path)?;
        file.persist(&path).map_err(|e| StoreError { path: path.clone(), source: e.error })?;
        Ok((hash, len))
    }

    pub fn action_path(&self, kind: ActionKind, key: &Key) -> PathBuf {
        sharded(&self.root.join("actions").join(kind.dir()), key)
    }

    /// The result recorded for `key`, if any.
    pub fn get_action(&self, kind: ActionKind, key: &Key) -> Option<Vec<u8>> {
        fs::read(self.action_path(kind, key)).ok()
    }

    pub fn put_action(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<()> {
        write_atomically(&self.root.join("tmp"), &self.action_path(kind, key), content)
    }

    /// Marks an entry as used now, so age-based gc keeps what runs still use.
    pub fn touch_action(&self, kind: ActionKind, key: &Key) {
        if let Ok(file) = File::options().write(true).open(self.action_path(kind, key)) {
            // Best effort: an entry that cannot be touched is only collected sooner.
            let _ = file.set_modified(std::time::SystemTime::now());
        }
    }

    pub fn recent_path(&self, node: &Key) -> PathBuf {
        self.root.join("recent").join(node.hex())
    }

    pub fn put_recent(&self, node: &Key, content: &[u8]) -> Result<()> {
        write_atomically(&self.root.join("tmp"), &self.recent_path(node), content)
    }

    pub fn get_recent(&self, node: &Key) -> Option<Vec<u8>> {
        fs::read(self.recent_path(node)).ok()
    }
}

/// A blob being written: hashes as it goes.
pub struct BlobWriter {
    file: BufWriter<NamedTempFile>,
    hasher: blake3::Hasher,
    len: u64,
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn sharded(dir: &Path, key: &Key) -> PathBuf {
    let hex = key.hex();
    dir.join(&hex[..2]).join(hex)
}

fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) => fs::create_dir_all(parent).map_err(at(parent)),
        None => Ok(()),
    }
}

/// Writes `bytes` to a temporary file in `tmp` and renames it to `path`.
fn write_atomically(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    create_parent(path)?;
    let mut file = NamedTempFile::with_prefix_in("entry-", tmp).map_err(at(tmp))?;
    file.write_all(bytes).map_err(at(tmp))?;
    file.persist(path).map_err(|e| StoreError { path: path.to_owned(), source: e.error })?;
    Ok(())
}
