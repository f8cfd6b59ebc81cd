//! Stores in memory: [`MemoryStore`] keeps everything for its lifetime (tests
//! run recipes on it to prove the seam), [`Ephemeral`] keeps only what a
//! run needs while it runs (a one-shot command without a cache).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use super::{ActionCache, ActionKind, BlobStore, BlobWriter, Incident, Incidents, Key, Result, Store, StoreError};

type Blobs = Arc<RwLock<HashMap<Key, Arc<[u8]>>>>;

/// Entries by kind and key, with when each was last used.
type Entries = RwLock<HashMap<(ActionKind, Key), (Vec<u8>, SystemTime)>>;

/// Blobs and entries in maps. Blobs are checked on every read like any
/// store's, so a test can corrupt one through [`MemoryStore::corrupt_blob`]
/// and watch it be refused.
#[derive(Default)]
pub struct MemoryStore {
    blobs: Blobs,
    actions: Entries,
    incidents: Incidents,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Replaces a blob's bytes (for tests of the trust model).
    pub fn corrupt_blob(&self, hash: &Key, bytes: &[u8]) {
        write(&self.blobs).insert(*hash, bytes.into());
    }

    /// The hashes of every blob held.
    pub fn blob_hashes(&self) -> Vec<Key> {
        read(&self.blobs).keys().copied().collect()
    }

    fn checked(&self, hash: &Key) -> Result<Arc<[u8]>> {
        let bytes = read(&self.blobs).get(hash).cloned().ok_or(StoreError::Missing(*hash))?;
        if Key::of_bytes(&bytes) != *hash {
            write(&self.blobs).remove(hash);
            let problem = "its bytes do not match its hash".to_owned();
            self.incidents.record(format!("blob {hash}"), problem.clone());
            return Err(StoreError::Corrupt { hash: *hash, problem });
        }
        Ok(bytes)
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl BlobStore for MemoryStore {
    fn has_blob(&self, hash: &Key) -> bool {
        read(&self.blobs).contains_key(hash)
    }

    fn read_blob(&self, hash: &Key) -> Result<Vec<u8>> {
        Ok(self.checked(hash)?.to_vec())
    }

    fn read_blob_range(&self, hash: &Key, offset: u64, len: u64) -> Result<Vec<u8>> {
        let bytes = self.checked(hash)?;
        let range = usize::try_from(offset).ok().zip(usize::try_from(offset + len).ok());
        match range.and_then(|(start, end)| bytes.get(start..end)) {
            Some(range) => Ok(range.to_vec()),
            None => Err(StoreError::io(
                PathBuf::from(format!("(memory) blob {hash}")),
                io::Error::new(io::ErrorKind::UnexpectedEof, "range past the end of the blob"),
            )),
        }
    }

    fn copy_blob_into(&self, hash: &Key, len: u64, out: &File, offset: u64) -> Result<()> {
        let bytes = self.checked(hash)?;
        if bytes.len() as u64 != len {
            return Err(StoreError::Misfit { hash: *hash, len: bytes.len() as u64, expected: len });
        }
        out.write_all_at(&bytes, offset).map_err(StoreError::Output)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<Key> {
        let hash = Key::of_bytes(bytes);
        write(&self.blobs).entry(hash).or_insert_with(|| bytes.into());
        Ok(hash)
    }

    fn blob_writer(&self) -> Result<Option<Box<dyn BlobWriter>>> {
        Ok(Some(Box::new(MemoryBlobWriter { bytes: Vec::new(), blobs: Arc::clone(&self.blobs) })))
    }
}

impl ActionCache for MemoryStore {
    fn get_action(&self, kind: ActionKind, key: &Key) -> Option<Vec<u8>> {
        read(&self.actions).get(&(kind, *key)).map(|(bytes, _)| bytes.clone())
    }

    fn put_action(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<()> {
        write(&self.actions).insert((kind, *key), (content.to_vec(), SystemTime::now()));
        Ok(())
    }

    fn put_action_if_absent(&self, kind: ActionKind, key: &Key, content: &[u8]) -> Result<bool> {
        let mut actions = write(&self.actions);
        if actions.contains_key(&(kind, *key)) {
            return Ok(false);
        }
        actions.insert((kind, *key), (content.to_vec(), SystemTime::now()));
        Ok(true)
    }

    fn touch_action(&self, kind: ActionKind, key: &Key) {
        if let Some((_, used)) = write(&self.actions).get_mut(&(kind, *key)) {
            *used = SystemTime::now();
        }
    }

    fn list_actions(&self, kind: ActionKind) -> Result<Vec<(Key, SystemTime)>> {
        Ok(read(&self.actions).iter().filter(|((k, _), _)| *k == kind).map(|((_, key), (_, t))| (*key, *t)).collect())
    }
}

impl Store for MemoryStore {
    fn location(&self) -> String {
        "(memory)".into()
    }

    fn take_incidents(&self) -> Vec<Incident> {
        self.incidents.take()
    }
}

/// A blob being built in memory; `blobs` is where it goes on commit.
struct MemoryBlobWriter {
    bytes: Vec<u8>,
    blobs: Blobs,
}

impl Write for MemoryBlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl BlobWriter for MemoryBlobWriter {
    fn commit(self: Box<Self>) -> Result<(Key, u64)> {
        let hash = Key::of_bytes(&self.bytes);
        let len = self.bytes.len() as u64;
        let MemoryBlobWriter { bytes, blobs } = *self;
        write(&blobs).entry(hash).or_insert_with(|| bytes.into());
        Ok((hash, len))
    }
}

/// What a one-shot command runs on without a cache: blobs put explicitly
/// (importance weights, manifests) live in memory for the run; encoded
/// tensors and action entries are not kept, so every key misses and a
/// tensor is encoded straight into the output.
#[derive(Default)]
pub struct Ephemeral {
    blobs: MemoryStore,
}

impl Ephemeral {
    pub fn new() -> Ephemeral {
        Ephemeral::default()
    }
}

impl BlobStore for Ephemeral {
    fn has_blob(&self, hash: &Key) -> bool {
        self.blobs.has_blob(hash)
    }

    fn read_blob(&self, hash: &Key) -> Result<Vec<u8>> {
        self.blobs.read_blob(hash)
    }

    fn read_blob_range(&self, hash: &Key, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.blobs.read_blob_range(hash, offset, len)
    }

    fn copy_blob_into(&self, hash: &Key, len: u64, out: &File, offset: u64) -> Result<()> {
        self.blobs.copy_blob_into(hash, len, out, offset)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<Key> {
        self.blobs.put_blob(bytes)
    }

    fn blob_writer(&self) -> Result<Option<Box<dyn BlobWriter>>> {
        Ok(None)
    }
}

impl ActionCache for Ephemeral {
    fn get_action(&self, _: ActionKind, _: &Key) -> Option<Vec<u8>> {
        None
    }

    fn put_action(&self, _: ActionKind, _: &Key, _: &[u8]) -> Result<()> {
        Ok(())
    }

    fn put_action_if_absent(&self, _: ActionKind, _: &Key, _: &[u8]) -> Result<bool> {
        Ok(true)
    }

    fn touch_action(&self, _: ActionKind, _: &Key) {}

    fn list_actions(&self, _: ActionKind) -> Result<Vec<(Key, SystemTime)>> {
        Ok(Vec::new())
    }
}

impl Store for Ephemeral {
    fn location(&self) -> String {
        "(no cache)".into()
    }

    fn keeps_results(&self) -> bool {
        false
    }

    fn take_incidents(&self) -> Vec<Incident> {
        self.blobs.take_incidents()
    }
}
