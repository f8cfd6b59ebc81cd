//! The local cache in front of a remote one: reads go through the local
//! cache (a remote hit is copied into it, checked), results are written to
//! both.
//!
//! Only result entries (tensors, nodes, exports) and the blobs they name go
//! to the remote: stat fingerprints and recent-build hints describe this
//! machine. An entry is published only after every blob it names is
//! complete on the remote, so a run killed at any moment leaves no entry
//! that names a missing blob.
//!
//! A remote that fails (unreachable, refusing, timing out after retries) is
//! reported once and left alone for the rest of the run, which goes on with
//! the local cache — unless the remote is [`RemoteMode::Required`], in which
//! case the run reports the failure as an error.

use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::{Remote, RemoteError, RemoteUrl, UrlError, named_blobs};
use crate::key::Key;
use crate::store::local::Imported;
use crate::store::{
    ActionCache, ActionKind, BlobStore, BlobWriter, Incident, Incidents, LocalStore, Result, Store, StoreError, seal,
};

/// Whether a run may go on without its remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteMode {
    /// A remote that fails is a warning; the run goes on locally.
    BestEffort,
    /// A remote that fails is an error.
    Required,
}

/// What moved between this machine and the remote during a run.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct TransferReport {
    pub location: String,
    pub blobs_fetched: u64,
    pub bytes_fetched: u64,
    /// Wall time spent fetching blobs (overlapping fetches counted once).
    pub fetch_seconds: f64,
    pub entries_fetched: u64,
    pub blobs_uploaded: u64,
    pub bytes_uploaded: u64,
    pub entries_published: u64,
    /// Why the remote was left alone, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// An entry read from the remote is written again when it is this old, so
/// `cache gc --remote --older-than` sees when it was last used.
const REFRESH_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Fetches at once while prefetching (each large blob also fetches its
/// parts in parallel).
const PREFETCH_THREADS: usize = 8;

pub struct Layered {
    local: LocalStore,
    /// The directory of a local cache made for this run only, removed with it.
    _scratch: Option<tempfile::TempDir>,
    remote: Remote,
    failure: OnceLock<String>,
    /// Whether the remote answered when first asked.
    probed: OnceLock<bool>,
    /// Blobs known to be complete on the remote.
    present: Mutex<HashSet<Key>>,
    /// Blobs found bad on the remote: not used, written over on upload.
    bad_blobs: Mutex<HashSet<Key>>,
    /// Entries found broken on the remote: replaced when next published.
    bad_entries: Mutex<HashSet<(ActionKind, Key)>>,
    /// Blobs being fetched now: a second reader waits for the first fetch.
    fetching: (Mutex<HashSet<Key>>, Condvar),
    incidents: Incidents,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    blobs_fetched: AtomicU64,
    bytes_fetched: AtomicU64,
    entries_fetched: AtomicU64,
    blobs_uploaded: AtomicU64,
    bytes_uploaded: AtomicU64,
    entries_published: AtomicU64,
    /// Fetches running now, and when the current busy period began.
    fetching: Mutex<(usize, Option<Instant>)>,
    fetch_nanos: AtomicU64,
}

impl Layered {
    /// `local` in front of the remote at `url`. A required remote is asked
    /// now whether it answers (an error if not); a best-effort one when it is
    /// first needed (reported and left alone if not).
    pub fn open(local: LocalStore, url: &RemoteUrl, mode: RemoteMode) -> Result<Layered, LayeredError> {
        Layered::with_local(local, None, url, mode)
    }

    /// The remote at `url` behind a local cache that lasts for this run
    /// only (a one-shot command without `--cache-dir`), in a scratch
    /// directory a killed run's successor sweeps.
    pub fn scratch(url: &RemoteUrl, mode: RemoteMode) -> Result<Layered, LayeredError> {
        let dir = crate::formats::scratch_dir(&std::env::temp_dir()).map_err(LayeredError::Scratch)?;
        let local = LocalStore::open(dir.path()).map_err(|e| LayeredError::Scratch(std::io::Error::other(e)))?;
        Layered::with_local(local, Some(dir), url, mode)
    }

    fn with_local(
        local: LocalStore,
        scratch: Option<tempfile::TempDir>,
        url: &RemoteUrl,
        mode: RemoteMode,
    ) -> Result<Layered, LayeredError> {
        let remote = Remote::new(url)?;
        let layered = Layered {
            local,
            _scratch: scratch,
            remote,
            failure: OnceLock::new(),
            probed: OnceLock::new(),
            present: Mutex::default(),
            bad_blobs: Mutex::default(),
            bad_entries: Mutex::default(),
            fetching: Default::default(),
            incidents: Incidents::default(),
            stats: Stats::default(),
        };
        // A required remote must answer before any work; a best-effort one
        // is first asked when it is needed, so a run that finds everything
        // in the local cache sends nothing.
        if mode == RemoteMode::Required {
            layered.remote.probe().map_err(LayeredError::Unreachable)?;
            let _ = layered.probed.set(true);
        }
        Ok(layered)
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Whether the remote may be used: it answered when first asked and has
    /// not failed since.
    fn up(&self) -> bool {
        let answered = *self.probed.get_or_init(|| match self.remote.probe() {
            Ok(()) => true,
            Err(e) => {
                self.fail(e);
                false
            }
        });
        answered && self.failure.get().is_none()
    }

    fn fail(&self, error: RemoteError) {
        tracing::debug!("remote: {error}; the local cache goes on alone");
        let _ = self.failure.set(error.to_string());
    }

    /// Publishes a local entry (and the blobs it names) on the remote;
    /// false when the local cache lacks it.
    pub fn push(&self, kind: ActionKind, key: &Key) -> bool {
        let Some(content) = self.local.get_action(kind, key) else { return false };
        self.publish(kind, key, &content);
        true
    }

    /// Whether the remote holds `hash` (a blob found there is not asked
    /// about again).
    fn remote_has(&self, hash: &Key) -> bool {
        if lock(&self.present).contains(hash) {
            return true;
        }
        if !self.up() || lock(&self.bad_blobs).contains(hash) {
            return false;
        }
        match self.remote.blob_size(hash) {
            Ok(Some(_)) => {
                lock(&self.present).insert(*hash);
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Makes sure the local cache holds `hash`, fetching and checking it
    /// from the remote if needed.
    fn fetch(&self, hash: &Key) -> Result<()> {
        let (fetching, done) = &self.fetching;
        let mut now = lock(fetching);
        while now.contains(hash) {
            now = done.wait(now).unwrap_or_else(|e| e.into_inner());
        }
        if self.local.has_blob(hash) {
            return Ok(());
        }
        if !self.up() || lock(&self.bad_blobs).contains(hash) {
            return Err(StoreError::Missing(*hash));
        }
        now.insert(*hash);
        drop(now);
        let fetched = self.download(hash);
        lock(fetching).remove(hash);
        done.notify_all();
        fetched
    }

    fn download(&self, hash: &Key) -> Result<()> {
        let _timing = self.stats.start_fetch();
        let fetched = self.local.import_blob(hash, |file: &File| match self.remote.download_blob(hash, file) {
            Ok(Some(downloaded)) => Ok(downloaded),
            Ok(None) => Err(None),
            Err(e) => Err(Some(e)),
        });
        match fetched {
            Ok(len) => {
                tracing::debug!("remote: fetched blob {} ({len} bytes)", hash.short());
                self.stats.blobs_fetched.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes_fetched.fetch_add(len, Ordering::Relaxed);
                Ok(())
            }
            Err(Imported::Fill(None)) => {
                lock(&self.present).remove(hash);
                Err(StoreError::Missing(*hash))
            }
            Err(Imported::Fill(Some(RemoteError::Corrupt { problem, .. })))
            | Err(Imported::Store(StoreError::Corrupt { problem, .. })) => Err(self.remote_blob_corrupt(hash, problem)),
            Err(Imported::Fill(Some(e))) => {
                self.fail(e);
                Err(StoreError::Missing(*hash))
            }
            Err(Imported::Store(e)) => Err(e),
        }
    }

    /// A remote blob that does not hold its bytes: not used, reported, and
    /// written over when its bytes are next uploaded.
    fn remote_blob_corrupt(&self, hash: &Key, problem: String) -> StoreError {
        lock(&self.present).remove(hash);
        lock(&self.bad_blobs).insert(*hash);
        self.incidents.record(format!("remote blob {hash}"), problem.clone());
        StoreError::Corrupt { hash: *hash, problem }
    }

    /// Uploads `hash` from the local cache unless the remote has it.
    fn upload(&self, hash: &Key) -> Result<(), RemoteError> {
        let overwrite = lock(&self.bad_blobs).contains(hash);
        if !overwrite && self.remote_has(hash) {
            return Ok(());
        }
        let (file, base, len) = self.local.blob_file(hash).map_err(|e| RemoteError::Local {
            location: self.local.location(),
            source: std::io::Error::other(e.to_string()),
        })?;
        self.remote.upload_blob(hash, file, base, len)?;
        tracing::debug!("remote: uploaded blob {} ({len} bytes)", hash.short());
        lock(&self.bad_blobs).remove(hash);
        lock(&self.present).insert(*hash);
        self.stats.blobs_uploaded.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_uploaded.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Puts a result entry on the remote after every blob it names. Where
    /// another writer got there first, its entry stands (same key, same
    /// result) unless it is broken, which this one then replaces.
    fn publish(&self, kind: ActionKind, key: &Key, content: &[u8]) {
        if !ActionKind::RESULTS.contains(&kind) || !self.up() {
            return;
        }
        let Some(blobs) = named_blobs(content) else { return };
        for blob in &blobs {
            match self.upload(blob) {
                Ok(()) => {}
                // The local copy is bad: the local cache reports it when it
                // is next read; the entry is not published.
                Err(RemoteError::Corrupt { .. } | RemoteError::Local { .. }) => return,
                Err(e) => return self.fail(e),
            }
        }
        let sealed = seal::seal(kind, key, content);
        let broken = lock(&self.bad_entries).remove(&(kind, *key));
        let result = match broken {
            true => self.remote.replace_entry(kind, key, sealed).map(|()| true),
            false => self.remote.create_entry(kind, key, sealed.clone()).and_then(|created| {
                if created || self.remote_entry(kind, key).is_some() {
                    return Ok(created);
                }
                self.remote.replace_entry(kind, key, sealed).map(|()| true)
            }),
        };
        match result {
            Ok(true) => {
                tracing::debug!("remote: published {} entry {}", kind.name(), key.short());
                self.stats.entries_published.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(e) => self.fail(e),
        }
    }

    /// A remote entry, unsealed; a broken one is reported and remembered so
    /// the next publish replaces it.
    fn remote_entry(&self, kind: ActionKind, key: &Key) -> Option<(Vec<u8>, SystemTime)> {
        let (sealed, modified) = match self.remote.get_entry(kind, key) {
            Ok(found) => found?,
            Err(e) => {
                self.fail(e);
                return None;
            }
        };
        match seal::unseal(kind, key, &sealed) {
            Ok(content) => Some((content.to_vec(), modified)),
            Err(problem) => {
                lock(&self.bad_entries).insert((kind, *key));
                self.incidents.record(format!("remote {} entry {key}", kind.name()), problem);
                None
            }
        }
    }

    /// Runs `each` over `items` on a few threads (fetches wait on the
    /// network, not the CPU).
    fn in_parallel(&self, items: &[Key], each: impl Fn(&Key) + Sync) {
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..PREFETCH_THREADS.min(items.len()) {
                scope.spawn(|| {
                    while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if !self.up() {
                            return;
                        }
                        each(item);
                    }
                });
            }
        });
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LayeredError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("the remote cache does not answer: {0}")]
    Unreachable(RemoteError),
    #[error("cannot make a local cache for this run: {}", crate::files::IoText(.0))]
    Scratch(std::io::Error),
}

impl Stats {
    fn start_fetch(&self) -> FetchTiming<'_> {
        let mut busy = lock(&self.fetching);
        busy.0 += 1;
        busy.1.get_or_insert_with(Instant::now);
        FetchTiming(self)
    }
}

/// Counts wall time while at least one fetch runs.
struct FetchTiming<'a>(&'a Stats);

impl Drop for FetchTiming<'_> {
    fn drop(&mut self) {
        let mut busy = lock(&self.0.fetching);
        busy.0 -= 1;
        if busy.0 == 0
            && let Some(since) = busy.1.take()
        {
            self.0.fetch_nanos.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl BlobStore for Layered {
    fn has_blob(&self, hash: &Key) -> bool {
        self.local.has_blob(hash) || self.remote_has(hash)
    }

    fn has_blobs(&self, hashes: &[Key]) -> bool {
        let elsewhere: Vec<Key> = hashes.iter().filter(|h| !self.local.has_blob(h)).copied().collect();
        if elsewhere.is_empty() {
            return true;
        }
        let missing = AtomicUsize::new(0);
        self.in_parallel(&elsewhere, |hash| {
            if !self.remote_has(hash) {
                missing.fetch_add(1, Ordering::Relaxed);
            }
        });
        // A remote that failed meanwhile stopped the asking early.
        missing.into_inner() == 0 && self.up()
    }

    fn read_blob(&self, hash: &Key) -> Result<Vec<u8>> {
        self.fetch(hash)?;
        self.local.read_blob(hash)
    }

    fn read_blob_range(&self, hash: &Key, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.fetch(hash)?;
        self.local.read_blob_range(hash, offset, len)
    }

    fn copy_blob_into(&self, hash: &Key, len: u64, out: &File, offset: u64) -> Result<()> {
        self.fetch(hash)?;
        self.local.copy_blob_into(hash, len, out, offset)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<Key> {
        self.local.put_blob(bytes)
    }

    fn blob_writer(&self) -> Result<Option<Box<dyn BlobWriter>>> {
        self.local.blob_writer()
    }

    fn prefetch_blobs(&self, hashes: &[Key]) {
        let mut missing: Vec<Key> = hashes.iter().filter(|h| !self.local.has_blob(h)).copied().collect();
        missing.sort_unstable_by_key(|h| h.0);
        missing.dedup();
        // Best effort: a blob that fails here is fetched (and reported) when read.
        self.in_parallel(&missing, |hash| drop(self.fetch(hash)));
    }
}

impl ActionCache for Layered {
    fn get_action(&self, kind: ActionKind, key: &Key) -> Option<Vec<u8>> {
        if let Some(content) = self.local.get_action(kind, key) {
            return Some(content);
        }
        if !ActionKind::RESULTS.contains(&kind) || !self.up() {
            return None;
        }
        let (content, modified) = self.remote_entry(kind, key)?;
        tracing::debug!("remote: fetched {} entry {}", kind.name(), key.short());
        self.stats.entries_fetched.fetch_add(1, Ordering::Relaxed);
        // Best effort: without a local copy the next run asks the remote again.
        let _ = self.local.put_action(kind, key, &content);
        if SystemTime::now().duration_since(modified).unwrap_or_default() > REFRESH_AFTER {
            let _ = self.remote.replace_entry(kind, key, seal::seal(kind, key, &content));
        }
        Some(content)
    }

    fn put_action(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<()> {
        self.local.put_action(kind, key, content)?;
        self.publish(kind, key, content);
        Ok(())
    }

    fn put_action_if_absent(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<bool> {
        let wrote = self.local.put_action_if_absent(kind, key, content)?;
        self.publish(kind, key, content);
        Ok(wrote)
    }

    fn touch_action(&self, kind: ActionKind, key: &Key) {
        self.local.touch_action(kind, key);
    }

    fn list_actions(&self, kind: ActionKind) -> Result<Vec<(Key, SystemTime)>> {
        self.local.list_actions(kind)
    }

    fn prefetch_actions(&self, kind: ActionKind, keys: &[Key]) {
        if !ActionKind::RESULTS.contains(&kind) || !self.up() {
            return;
        }
        let entries: Vec<Option<Vec<u8>>> = keys.iter().map(|k| self.local.get_action(kind, k)).collect();
        let missing: Vec<Key> = keys.iter().zip(&entries).filter(|(_, e)| e.is_none()).map(|(k, _)| *k).collect();
        self.in_parallel(&missing, |key| drop(self.get_action(kind, key)));
        let blobs: Vec<Key> = keys
            .iter()
            .zip(entries)
            .filter_map(|(key, entry)| entry.or_else(|| self.local.get_action(kind, key)))
            .filter_map(|content| named_blobs(&content))
            .flatten()
            .collect();
        self.prefetch_blobs(&blobs);
    }
}

impl Store for Layered {
    fn location(&self) -> String {
        format!("{} in front of {}", self.local.location(), self.remote.location())
    }

    fn directory(&self) -> Option<&Path> {
        self.local.directory()
    }

    fn take_incidents(&self) -> Vec<Incident> {
        let mut incidents = self.local.take_incidents();
        incidents.extend(self.incidents.take());
        incidents
    }

    fn transfers(&self) -> Option<TransferReport> {
        let s = &self.stats;
        Some(TransferReport {
            location: self.remote.location().to_owned(),
            blobs_fetched: s.blobs_fetched.load(Ordering::Relaxed),
            bytes_fetched: s.bytes_fetched.load(Ordering::Relaxed),
            fetch_seconds: s.fetch_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            entries_fetched: s.entries_fetched.load(Ordering::Relaxed),
            blobs_uploaded: s.blobs_uploaded.load(Ordering::Relaxed),
            bytes_uploaded: s.bytes_uploaded.load(Ordering::Relaxed),
            entries_published: s.entries_published.load(Ordering::Relaxed),
            failure: self.failure.get().cloned(),
        })
    }
}
