//! The cache directory.
//!
//! ```text
//! blobs/ab/abcd…           bytes whose blake3 is the file name
//! actions/KIND/ab/abcd…    a sealed entry for a derived key (KIND: tensors,
//!                          nodes, exports, stat, recent, kernels, sha256,
//!                          spans: a blob kept as a range of another file)
//! quarantine/              blobs and entries found corrupt (gc empties it)
//! tmp/                     files being written; renamed into place when complete
//! lock                     shared by runs, exclusive for gc
//! ```
//!
//! Every file appears by rename, so a killed process leaves at worst a stray
//! file in `tmp/` (gc removes those of dead runs), never a blob whose bytes
//! do not match its name. Two processes writing one entry write the same
//! bytes, so the last rename wins harmlessly. Files are created with the
//! umask's permissions, so a group-shared cache works for every member; a
//! read-only cache can be read, verified and used by an up-to-date run.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tempfile::NamedTempFile;

use super::{
    ActionCache, ActionKind, BlobStore, BlobWriter, COPY_CHUNK, Incident, Incidents, Key, Result, Store, StoreError,
    seal,
};
use crate::files::{Symlinks, open_regular};

/// An open cache directory. Holds the store's lock (shared, or exclusive for
/// maintenance) for as long as it lives.
pub struct LocalStore {
    root: PathBuf,
    _lock: File,
    pub(super) incidents: Incidents,
    checked: Checked,
}

/// Blobs hashed whole in this process (or as they were written), by the
/// identity of their file then and where in it they lie; shared with the
/// store's blob writers.
type Checked = Arc<Mutex<HashMap<Key, (FileIdentity, u64)>>>;

/// A blob's bytes found: its own file, or a range of a span's host.
pub(super) struct Located {
    pub(super) file: File,
    pub(super) identity: FileIdentity,
    /// The file, for messages.
    pub(super) path: PathBuf,
    /// Where the bytes start in `file`, and how many there are.
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) span: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileIdentity {
    pub(super) fn of(meta: &fs::Metadata) -> FileIdentity {
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        FileIdentity { dev: meta.dev(), ino: meta.ino(), len: meta.size(), mtime_ns }
    }
}

const DIRS: [&str; 4] = ["blobs", "actions", "quarantine", "tmp"];

fn at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::io(path, source)
}

impl LocalStore {
    /// Opens (creating if needed) the store at `root` for a run, removing
    /// the temporary files that killed processes of this host left.
    pub fn open(root: &Path) -> Result<LocalStore> {
        LocalStore::prepare(root)?;
        let store = LocalStore::lock(root, false)?;
        sweep_dead_temporaries(&store.tmp_dir());
        Ok(store)
    }

    /// Opens an existing store for reading (`cache ls`, `verify`, `plan`):
    /// never creates one, works on a read-only cache.
    pub fn open_existing(root: &Path) -> Result<LocalStore> {
        LocalStore::check_exists(root)?;
        LocalStore::lock(root, false)
    }

    /// Opens the store for maintenance: waits until no run holds it.
    pub fn open_exclusive(root: &Path) -> Result<LocalStore> {
        LocalStore::check_exists(root)?;
        LocalStore::lock(root, true)
    }

    /// Whether `root` holds a cache (one `open_existing` would open).
    pub fn exists_at(root: &Path) -> bool {
        root.join("blobs").is_dir()
    }

    fn check_exists(root: &Path) -> Result<()> {
        if LocalStore::exists_at(root) {
            return Ok(());
        }
        let problem = match root.exists() {
            true => "exists but is not a quantforge cache (no blobs/ directory)",
            false => "no cache here (a run makes one; `quantforge cache dir RECIPE` says where a recipe's is)",
        };
        Err(StoreError::io(root, io::Error::new(io::ErrorKind::NotFound, problem)))
    }

    fn prepare(root: &Path) -> Result<()> {
        for dir in DIRS {
            fs::create_dir_all(root.join(dir)).map_err(at(root))?;
        }
        let tag = root.join("CACHEDIR.TAG");
        if !tag.exists() {
            let text = "Signature: 8a477f597d28d172789f06886806bc55\n# quantforge cache: safe to delete.\n";
            write_atomically(&root.join("tmp"), &tag, text.as_bytes())?;
        }
        Ok(())
    }

    fn lock(root: &Path, exclusive: bool) -> Result<LocalStore> {
        let lock_path = root.join("lock");
        // A read-only cache (or one owned by another member of the group)
        // still takes a lock: flock works on a descriptor opened for reading.
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .or_else(|_| File::open(&lock_path))
            .map_err(at(&lock_path))?;
        match exclusive {
            true => lock.lock(),
            false => lock.lock_shared(),
        }
        .map_err(at(root))?;
        Ok(LocalStore {
            root: root.to_owned(),
            _lock: lock,
            incidents: Incidents::default(),
            checked: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn blob_path(&self, hash: &Key) -> PathBuf {
        sharded(&self.root.join("blobs"), hash)
    }

    pub(super) fn action_dir(&self, kind: ActionKind) -> PathBuf {
        self.root.join("actions").join(kind.name())
    }

    pub(super) fn action_path(&self, kind: ActionKind, key: &Key) -> PathBuf {
        sharded(&self.action_dir(kind), key)
    }

    pub(super) fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub(super) fn quarantine_dir(&self) -> PathBuf {
        self.root.join("quarantine")
    }

    /// Moves a bad file out of the way (deleting it when the move fails), so
    /// it is never read again; the first report of each is kept.
    pub(super) fn quarantine(&self, path: &Path, what: String, problem: &str) {
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("{}-{}-{stamp}", what.replace(' ', "-"), std::process::id());
        if fs::rename(path, self.quarantine_dir().join(name)).is_err() {
            // Best effort: on a read-only cache the bad file stays, and every
            // run reports and skips it again.
            let _ = remove_any(path);
        }
        self.incidents.record(what, problem);
    }

    fn corrupt(&self, hash: &Key, path: &Path, problem: String) -> StoreError {
        self.quarantine(path, format!("blob {hash}"), &problem);
        StoreError::Corrupt { hash: *hash, problem }
    }

    /// The blob's file, opened as a regular file (never through a link).
    fn open_blob(&self, hash: &Key) -> Result<(File, fs::Metadata)> {
        let path = self.blob_path(hash);
        match open_regular(&path, Symlinks::Refuse) {
            Ok(file) => {
                let meta = file.metadata().map_err(at(&path))?;
                Ok((file, meta))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StoreError::Missing(*hash)),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(self.corrupt(hash, &path, e.to_string())),
            Err(e) => Err(StoreError::io(path, e)),
        }
    }

    /// Where blob `hash`'s bytes are: its own file, else one of its spans.
    pub(super) fn locate(&self, hash: &Key) -> Result<Located> {
        match self.open_blob(hash) {
            Ok((file, meta)) => Ok(Located {
                file,
                identity: FileIdentity::of(&meta),
                path: self.blob_path(hash),
                base: 0,
                len: meta.len(),
                span: false,
            }),
            Err(StoreError::Missing(_)) => self.locate_span(hash).ok_or(StoreError::Missing(*hash)),
            Err(e) => Err(e),
        }
    }

    /// The problem of located bytes that do not hash to `hash`: a blob's
    /// own file is quarantined; a span is dropped (its host may be an
    /// export someone edited, and holds other blobs).
    fn mismatch(&self, hash: &Key, located: &Located) -> StoreError {
        let problem = "its bytes do not match its hash".to_string();
        match located.span {
            false => self.corrupt(hash, &located.path, problem),
            true => {
                self.drop_span(hash, &located.path, "its bytes there do not match its hash");
                StoreError::Missing(*hash)
            }
        }
    }

    /// Hashes located bytes whole, unless this process already did for the
    /// same file and range.
    pub(super) fn check_located(&self, hash: &Key, located: &Located) -> Result<()> {
        let mut checked = lock(&self.checked);
        if checked.get(hash) == Some(&(located.identity, located.base)) {
            return Ok(());
        }
        match LocalStore::hash_located(located) {
            Ok(actual) if actual == *hash => {}
            Ok(_) => return Err(self.mismatch(hash, located)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(self.mismatch(hash, located)),
            Err(e) => return Err(StoreError::io(&located.path, e)),
        }
        checked.insert(*hash, (located.identity, located.base));
        Ok(())
    }
}

impl LocalStore {
    /// Carries this process's check of blob `hash` over to `located`: the
    /// same bytes, placed there by this process (an export's range), so
    /// reading them from there needs no second check either.
    pub(super) fn carry_check(&self, hash: &Key, located: &Located) {
        let mut checked = lock(&self.checked);
        if checked.contains_key(hash) {
            checked.insert(*hash, (located.identity, located.base));
        }
    }

    /// The file holding the blob, where in it the blob starts, and its
    /// length, for a reader that checks it itself.
    pub(super) fn blob_file(&self, hash: &Key) -> Result<(File, u64, u64)> {
        self.locate(hash).map(|located| (located.file, located.base, located.len))
    }

    /// Stores a blob that `fill` writes into a new file (at any offsets, in
    /// any order) and hashes as it writes, if that hash is `expected`; a file
    /// that does not match is discarded and reported as
    /// [`StoreError::Corrupt`] (never stored).
    pub(super) fn import_blob<E>(
        &self,
        expected: &Key,
        fill: impl FnOnce(&File) -> std::result::Result<(u64, Key), E>,
    ) -> std::result::Result<u64, Imported<E>> {
        let tmp = self.tmp_dir();
        let file = temp_file("fetch-", &tmp).map_err(Imported::Store)?;
        let (len, actual) = fill(file.as_file()).map_err(Imported::Fill)?;
        if actual != *expected {
            let problem = format!("its bytes hash to {}", actual.short());
            return Err(Imported::Store(StoreError::Corrupt { hash: *expected, problem }));
        }
        let path = self.blob_path(expected);
        create_parent(&path).map_err(Imported::Store)?;
        let file = file.persist(&path).map_err(|e| Imported::Store(StoreError::io(&path, e.error)))?;
        // Hashed as it was written: as good as a check of the whole file.
        if let Ok(meta) = file.metadata() {
            lock(&self.checked).insert(*expected, (FileIdentity::of(&meta), 0));
        }
        Ok(len)
    }
}

/// Why [`LocalStore::import_blob`] stored nothing.
pub(super) enum Imported<E> {
    Fill(E),
    Store(StoreError),
}

impl BlobStore for LocalStore {
    fn has_blob(&self, hash: &Key) -> bool {
        let path = self.blob_path(hash);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => true,
            // A directory, link or FIFO where a blob belongs was never
            // written by us: out of the way, so the blob can be stored again.
            Ok(meta) => {
                let problem = format!("is {}, not a regular file", crate::files::describe(meta.file_type()));
                self.quarantine(&path, format!("blob {hash}"), &problem);
                self.has_span(hash)
            }
            Err(_) => self.has_span(hash),
        }
    }

    fn read_blob(&self, hash: &Key) -> Result<Vec<u8>> {
        let located = self.locate(hash)?;
        let mut bytes = vec![0u8; located.len as usize];
        located.file.read_exact_at(&mut bytes, located.base).map_err(at(&located.path))?;
        if Key::of_bytes(&bytes) != *hash {
            return Err(self.mismatch(hash, &located));
        }
        Ok(bytes)
    }

    fn read_blob_range(&self, hash: &Key, offset: u64, len: u64) -> Result<Vec<u8>> {
        let located = self.locate(hash)?;
        self.check_located(hash, &located)?;
        if offset.checked_add(len).is_none_or(|end| end > located.len) {
            return Err(StoreError::Misfit { hash: *hash, len: located.len, expected: offset.saturating_add(len) });
        }
        let mut buf = vec![0u8; len as usize];
        located.file.read_exact_at(&mut buf, located.base + offset).map_err(at(&located.path))?;
        Ok(buf)
    }

    fn copy_blob_into(&self, hash: &Key, len: u64, out: &File, offset: u64) -> Result<()> {
        let located = self.locate(hash)?;
        if located.len != len {
            // Appended to, cut short, or another tensor's: which, its hash says.
            self.check_located(hash, &located)?;
            return Err(StoreError::Misfit { hash: *hash, len: located.len, expected: len });
        }
        if lock(&self.checked).get(hash) == Some(&(located.identity, located.base)) {
            // Checked whole in this process and unchanged since: a kernel copy.
            crate::formats::copy_file_at(&located.file, located.base, out, offset, len).map_err(StoreError::Output)?;
            return Ok(());
        }
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; (len as usize).clamp(1, COPY_CHUNK)];
        let mut done = 0u64;
        while done < len {
            let want = buf.len().min(usize::try_from(len - done).unwrap_or(usize::MAX));
            let n = match located.file.read_at(&mut buf[..want], located.base + done) {
                // Cut short since it was opened: the hash below fails.
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(StoreError::io(&located.path, e)),
            };
            hasher.update(&buf[..n]);
            out.write_all_at(&buf[..n], offset + done).map_err(StoreError::Output)?;
            done += n as u64;
        }
        if done != len || Key(*hasher.finalize().as_bytes()) != *hash {
            return Err(self.mismatch(hash, &located));
        }
        lock(&self.checked).insert(*hash, (located.identity, located.base));
        Ok(())
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<Key> {
        let hash = Key::of_bytes(bytes);
        let path = self.blob_path(&hash);
        if !path.is_file() {
            write_atomically(&self.tmp_dir(), &path, bytes)?;
        }
        Ok(hash)
    }

    fn blob_writer(&self) -> Result<Option<Box<dyn BlobWriter>>> {
        let tmp = self.tmp_dir();
        let file = temp_file("blob-", &tmp)?;
        Ok(Some(Box::new(LocalBlobWriter {
            file: BufWriter::with_capacity(1 << 20, file),
            hasher: blake3::Hasher::new(),
            len: 0,
            blobs: self.root.join("blobs"),
            checked: Arc::clone(&self.checked),
        })))
    }
}

impl ActionCache for LocalStore {
    fn get_action(&self, kind: ActionKind, key: &Key) -> Option<Vec<u8>> {
        let path = self.action_path(kind, key);
        let sealed = match open_regular(&path, Symlinks::Refuse) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).ok()?;
                bytes
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                self.quarantine(&path, format!("{} entry {key}", kind.name()), &e.to_string());
                return None;
            }
            Err(_) => return None,
        };
        match seal::unseal(kind, key, &sealed) {
            Ok(payload) => Some(payload.to_vec()),
            Err(problem) => {
                self.quarantine(&path, format!("{} entry {key}", kind.name()), problem);
                None
            }
        }
    }

    fn put_action(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<()> {
        write_atomically(&self.tmp_dir(), &self.action_path(kind, key), &seal::seal(kind, key, content))
    }

    fn put_action_if_absent(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<bool> {
        let path = self.action_path(kind, key);
        create_parent(&path)?;
        let tmp = self.tmp_dir();
        let mut file = temp_file("entry-", &tmp)?;
        file.write_all(&seal::seal(kind, key, content)).map_err(at(&tmp))?;
        match file.persist_noclobber(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(StoreError::io(path, e.error)),
        }
    }

    fn touch_action(&self, kind: ActionKind, key: &Key) {
        if let Ok(file) = File::options().write(true).open(self.action_path(kind, key)) {
            // Best effort: an entry that cannot be touched is only collected sooner.
            let _ = file.set_modified(SystemTime::now());
        }
    }

    fn list_actions(&self, kind: ActionKind) -> Result<Vec<(Key, SystemTime)>> {
        Ok(super::maintenance::sharded_files(&self.action_dir(kind))?
            .into_iter()
            .map(|(key, file)| (key, file.modified))
            .collect())
    }
}

impl Store for LocalStore {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn directory(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn take_incidents(&self) -> Vec<Incident> {
        self.incidents.take()
    }

    fn adopt_file(
        &self,
        path: &Path,
        hash: &Key,
        modes: &[crate::files::link::LinkMode],
    ) -> Result<crate::files::link::LinkMode> {
        self.adopt(path, hash, modes)
    }

    fn keep_as_span(&self, hash: &Key, span: super::Span) -> Result<bool> {
        self.keep_span(hash, span)
    }

    fn reflink_blob_into(&self, hash: &Key, out: &File) -> Result<bool> {
        self.reflink_blob(hash, out)
    }

    fn blob_to_link(&self, hash: &Key) -> Result<Option<PathBuf>> {
        Ok(self.own_checked(hash)?.map(|located| located.path))
    }
}

struct LocalBlobWriter {
    file: BufWriter<NamedTempFile>,
    hasher: blake3::Hasher,
    len: u64,
    blobs: PathBuf,
    /// The store's checked blobs: this one is, by the hash taken as it was
    /// written.
    checked: Checked,
}

impl Write for LocalBlobWriter {
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

impl BlobWriter for LocalBlobWriter {
    fn commit(self: Box<Self>) -> Result<(Key, u64)> {
        let LocalBlobWriter { file, hasher, len, blobs, checked } = *self;
        let hash = Key(*hasher.finalize().as_bytes());
        let path = sharded(&blobs, &hash);
        let file = file.into_inner().map_err(|e| StoreError::io(&blobs, e.into_error()))?;
        create_parent(&path)?;
        let file = file.persist(&path).map_err(|e| StoreError::io(&path, e.error))?;
        // Hashed as it was written, as an imported blob is: its first copy
        // out is a kernel copy, not a second read and hash.
        if let Ok(meta) = file.metadata() {
            lock(&checked).insert(hash, (FileIdentity::of(&meta), 0));
        }
        Ok((hash, len))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn sharded(dir: &Path, key: &Key) -> PathBuf {
    let hex = key.hex();
    dir.join(&hex[..2]).join(hex)
}

pub(super) fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) => fs::create_dir_all(parent).map_err(at(parent)),
        None => Ok(()),
    }
}

/// A temporary file in `tmp` with the umask's permissions (tempfile's
/// default of 0600 would lock the rest of a group out of a shared cache),
/// named `PREFIXpPID@HOST-…` so that a later run on this host can tell its
/// writer is gone.
pub(super) fn temp_file(prefix: &str, tmp: &Path) -> Result<NamedTempFile> {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", crate::files::process_tag()))
        .permissions(fs::Permissions::from_mode(0o666))
        .tempfile_in(tmp)
        .map_err(|e| StoreError::io(tmp, crate::files::without_temp_name(e)))
}

/// Removes what is at `path`, never following a link: a file, a link, or a
/// directory with everything in it.
pub(super) fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path)?.is_dir() {
        true => fs::remove_dir_all(path),
        false => fs::remove_file(path),
    }
}

/// Removes the files in `tmp` whose writer was a process of this host that
/// no longer runs (best effort; `cache gc` removes the rest).
fn sweep_dead_temporaries(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else { return };
    for entry in entries.flatten() {
        let dead = entry.file_name().to_str().and_then(crate::files::tagged_pid).is_some_and(|pid| {
            !crate::files::process_is_alive(pid) && entry.file_type().is_ok_and(|kind| kind.is_file())
        });
        if dead {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes `bytes` to a temporary file in `tmp` and renames it to `path`.
fn write_atomically(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    create_parent(path)?;
    let mut file = temp_file("entry-", tmp)?;
    file.write_all(bytes).map_err(at(tmp))?;
    file.persist(path).map_err(|e| StoreError::io(path, e.error))?;
    Ok(())
}
