//! `cache ls | du | gc | verify`: walking, sizing, collecting and checking
//! the store.
//!
//! Every action entry is JSON with a `blobs` field listing each blob it needs
//! (transitively), so collection needs no knowledge of what entries mean.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{ActionKind, Key, Result, Store, at, fingerprint::hash_file};

/// What every action entry holds, as far as the store is concerned.
#[derive(Debug, serde::Deserialize)]
struct Envelope {
    #[serde(default)]
    blobs: Vec<Key>,
}

/// One action entry, for `cache ls`.
#[derive(Debug)]
pub struct ListedEntry {
    pub kind: ActionKind,
    pub key: Key,
    pub modified: SystemTime,
    pub detail: serde_json::Value,
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct StoreUsage {
    pub blobs: u64,
    pub blob_bytes: u64,
    pub tensor_entries: u64,
    pub node_entries: u64,
    pub export_entries: u64,
    pub temp_files: u64,
    pub temp_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// Drop entries not used for this long.
    pub older_than: Option<Duration>,
    /// Then drop the least recently used entries until the blobs fit.
    pub max_size: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct GcReport {
    pub entries_removed: u64,
    pub blobs_removed: u64,
    pub bytes_freed: u64,
    pub temp_files_removed: u64,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct VerifyReport {
    pub blobs_checked: u64,
    pub bytes_checked: u64,
    pub entries_checked: u64,
    /// Blobs whose bytes do not hash to their name.
    pub corrupt_blobs: Vec<Key>,
    /// Entries that do not parse or name a missing blob.
    pub broken_entries: Vec<PathBuf>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.corrupt_blobs.is_empty() && self.broken_entries.is_empty()
    }
}

struct FileEntry {
    path: PathBuf,
    len: u64,
    modified: SystemTime,
}

/// Files two levels down (`dir/ab/abcd…`), with their hash names parsed.
fn sharded_files(dir: &Path) -> Result<Vec<(Key, FileEntry)>> {
    let mut out = Vec::new();
    let shards = match fs::read_dir(dir) {
        Ok(shards) => shards,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(at(dir)(e)),
    };
    for shard in shards {
        let shard = shard.map_err(at(dir))?.path();
        for file in fs::read_dir(&shard).map_err(at(&shard))? {
            let path = file.map_err(at(&shard))?.path();
            let Some(key) = path.file_name().and_then(|n| n.to_str()).and_then(Key::from_hex) else { continue };
            // A file removed by a concurrent gc is simply not listed.
            let Ok(meta) = fs::metadata(&path) else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            out.push((key, FileEntry { path, len: meta.len(), modified }));
        }
    }
    Ok(out)
}

impl Store {
    fn action_files(&self, kind: ActionKind) -> Result<Vec<(Key, FileEntry)>> {
        sharded_files(&self.root.join("actions").join(kind.dir()))
    }

    fn temp_files(&self) -> Result<Vec<FileEntry>> {
        let tmp = self.root.join("tmp");
        let mut out = Vec::new();
        for file in fs::read_dir(&tmp).map_err(at(&tmp))? {
            let path = file.map_err(at(&tmp))?.path();
            let Ok(meta) = fs::metadata(&path) else { continue };
            out.push(FileEntry { path, len: meta.len(), modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH) });
        }
        Ok(out)
    }

    pub fn usage(&self) -> Result<StoreUsage> {
        let blobs = sharded_files(&self.root.join("blobs"))?;
        let temp = self.temp_files()?;
        Ok(StoreUsage {
            blobs: blobs.len() as u64,
            blob_bytes: blobs.iter().map(|(_, f)| f.len).sum(),
            tensor_entries: self.action_files(ActionKind::Tensor)?.len() as u64,
            node_entries: self.action_files(ActionKind::Node)?.len() as u64,
            export_entries: self.action_files(ActionKind::Export)?.len() as u64,
            temp_files: temp.len() as u64,
            temp_bytes: temp.iter().map(|f| f.len).sum(),
        })
    }

    /// The node and export entries, most recently used first.
    pub fn list(&self) -> Result<Vec<ListedEntry>> {
        let mut out = Vec::new();
        for kind in [ActionKind::Node, ActionKind::Export] {
            for (key, file) in self.action_files(kind)? {
                let detail = fs::read(&file.path)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or(serde_json::Value::Null);
                out.push(ListedEntry { kind, key, modified: file.modified, detail });
            }
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.modified));
        Ok(out)
    }

    /// Removes temporary files, entries past their age, then the least
    /// recently used entries until the rest fits, then every blob no entry
    /// needs. Call on a store opened with [`Store::open_exclusive`].
    pub fn gc(&self, options: GcOptions) -> Result<GcReport> {
        let mut report = GcReport::default();
        for file in self.temp_files()? {
            if fs::remove_file(&file.path).is_ok() {
                report.temp_files_removed += 1;
            }
        }
        let now = SystemTime::now();
        let mut entries = Vec::new();
        for kind in ActionKind::ALL {
            for (_, file) in self.action_files(kind)? {
                let blobs = fs::read(&file.path)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Envelope>(&b).ok())
                    .map(|e| e.blobs);
                entries.push((file, blobs));
            }
        }
        let blobs = sharded_files(&self.root.join("blobs"))?;
        let blob_len: std::collections::HashMap<Key, u64> = blobs.iter().map(|(k, f)| (*k, f.len)).collect();
        let expired =
            |f: &FileEntry| options.older_than.is_some_and(|age| now.duration_since(f.modified).is_ok_and(|d| d > age));
        // Keep entries that parse, are young enough and whose blobs all exist.
        let mut kept = Vec::new();
        for (file, blobs) in entries {
            match blobs {
                Some(blobs) if !expired(&file) && blobs.iter().all(|b| blob_len.contains_key(b)) => {
                    kept.push((file, blobs))
                }
                _ => {
                    if fs::remove_file(&file.path).is_ok() {
                        report.entries_removed += 1;
                    }
                }
            }
        }
        if let Some(max) = options.max_size {
            kept.sort_by_key(|(file, _)| std::cmp::Reverse(file.modified));
            let mut counted = HashSet::new();
            let mut total = 0u64;
            let mut within = 0;
            for (_, blobs) in &kept {
                let extra: u64 = blobs.iter().filter(|b| !counted.contains(*b)).map(|b| blob_len[b]).sum();
                if total + extra > max {
                    break;
                }
                total += extra;
                counted.extend(blobs.iter().copied());
                within += 1;
            }
            for (file, _) in kept.drain(within..) {
                if fs::remove_file(&file.path).is_ok() {
                    report.entries_removed += 1;
                }
            }
        }
        let live: HashSet<Key> = kept.iter().flat_map(|(_, blobs)| blobs.iter().copied()).collect();
        for (key, file) in blobs {
            if !live.contains(&key) && fs::remove_file(&file.path).is_ok() {
                report.blobs_removed += 1;
                report.bytes_freed += file.len;
            }
        }
        Ok(report)
    }

    /// Re-hashes every blob and checks every entry.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        let blobs = sharded_files(&self.root.join("blobs"))?;
        let present: HashSet<Key> = blobs.iter().map(|(k, _)| *k).collect();
        for (key, file) in &blobs {
            report.blobs_checked += 1;
            report.bytes_checked += file.len;
            if hash_file(&file.path).map_err(at(&file.path))? != *key {
                report.corrupt_blobs.push(*key);
            }
        }
        for kind in ActionKind::ALL {
            for (_, file) in self.action_files(kind)? {
                report.entries_checked += 1;
                let envelope = fs::read(&file.path).ok().and_then(|b| serde_json::from_slice::<Envelope>(&b).ok());
                if !envelope.is_some_and(|e| e.blobs.iter().all(|b| present.contains(b))) {
                    report.broken_entries.push(file.path.clone());
                }
            }
        }
        Ok(report)
    }
}
