//! `cache ls | du | verify | gc --remote`: the remote's contents, checked
//! and collected.
//!
//! Collection is safe beside running writers because nothing young is
//! removed: an entry goes when it has not been written (or refreshed by a
//! reader, see `layered`) for the given age, and a blob only when no
//! remaining entry names it *and* it is itself that old. A writer that found
//! an old blob present and named it in a new entry while gc removed it
//! leaves an entry naming a missing blob: readers check that every named
//! blob exists, so the entry is a miss, the result is recomputed and the
//! blob uploaded again — a race costs work, never a wrong byte.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;

use super::{CONCURRENCY, Listed, Remote, Result, named_blobs};
use crate::key::Key;
use crate::store::{ActionKind, seal};

#[derive(Debug, Default, Clone, Copy, serde::Serialize, schemars::JsonSchema)]
pub struct RemoteUsage {
    pub blobs: u64,
    pub blob_bytes: u64,
    pub tensor_entries: u64,
    pub node_entries: u64,
    pub export_entries: u64,
}

#[derive(Debug, Default, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct RemoteVerifyReport {
    pub blobs_checked: u64,
    pub bytes_checked: u64,
    pub entries_checked: u64,
    /// Blobs whose bytes do not hash to their name.
    pub corrupt_blobs: Vec<Key>,
    /// Entries that are not sealed for their key or do not parse.
    pub broken_entries: Vec<String>,
    /// Entries naming a blob the remote lacks or holds corrupt.
    pub incomplete_entries: Vec<String>,
    /// Whether what was found was deleted (`--repair`).
    pub repaired: bool,
}

impl RemoteVerifyReport {
    pub fn is_clean(&self) -> bool {
        self.corrupt_blobs.is_empty() && self.broken_entries.is_empty() && self.incomplete_entries.is_empty()
    }
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize, schemars::JsonSchema)]
pub struct RemoteGcReport {
    pub entries_removed: u64,
    pub blobs_removed: u64,
    pub bytes_freed: u64,
}

/// A remote entry, read and unsealed (`None` when it is broken).
struct ReadEntry {
    kind: ActionKind,
    listed: Listed,
    content: Option<Vec<u8>>,
}

impl ReadEntry {
    fn name(&self) -> String {
        format!("{} entry {}", self.kind.name(), self.listed.key)
    }
}

impl Remote {
    pub fn usage(&self) -> Result<RemoteUsage> {
        let blobs = self.list_blobs()?;
        let count = |kind| self.list_entries(kind).map(|e| e.len() as u64);
        Ok(RemoteUsage {
            blobs: blobs.len() as u64,
            blob_bytes: blobs.iter().map(|b| b.size).sum(),
            tensor_entries: count(ActionKind::Tensor)?,
            node_entries: count(ActionKind::Node)?,
            export_entries: count(ActionKind::Export)?,
        })
    }

    /// Node and export entries (what `cache ls` shows), newest first, with
    /// their contents.
    pub fn listing(&self) -> Result<Vec<(ActionKind, Listed, serde_json::Value)>> {
        let mut out = Vec::new();
        for kind in [ActionKind::Node, ActionKind::Export] {
            for entry in self.read_entries(kind)? {
                let detail = entry.content.as_deref().and_then(|c| serde_json::from_slice(c).ok());
                out.push((kind, entry.listed, detail.unwrap_or(serde_json::Value::Null)));
            }
        }
        out.sort_by_key(|(_, listed, _)| std::cmp::Reverse(listed.modified));
        Ok(out)
    }

    /// Hashes every blob and reads every entry; with `repair`, deletes the
    /// corrupt blobs and the entries that are broken or name a blob that is
    /// missing or corrupt (the next run recomputes and uploads them).
    pub fn verify(&self, repair: bool) -> Result<RemoteVerifyReport> {
        let mut report = RemoteVerifyReport { repaired: repair, ..RemoteVerifyReport::default() };
        let blobs = self.list_blobs()?;
        let mut good: HashSet<Key> = HashSet::new();
        for (listed, actual) in self.hash_blobs(&blobs)? {
            report.blobs_checked += 1;
            report.bytes_checked += listed.size;
            match actual == Some(listed.key) {
                true => drop(good.insert(listed.key)),
                false => report.corrupt_blobs.push(listed.key),
            }
        }
        let mut doomed = Vec::new();
        for kind in ActionKind::RESULTS {
            for entry in self.read_entries(kind)? {
                report.entries_checked += 1;
                let named = entry.content.as_deref().and_then(named_blobs);
                match named {
                    None => report.broken_entries.push(entry.name()),
                    Some(named) if !named.iter().all(|b| good.contains(b)) => {
                        report.incomplete_entries.push(entry.name())
                    }
                    Some(_) => continue,
                }
                doomed.push((kind, entry.listed.key));
            }
        }
        if repair {
            // Entries first: a blob is never gone while an entry names it.
            for (kind, key) in &doomed {
                self.delete_entry(*kind, key)?;
            }
            for hash in &report.corrupt_blobs {
                self.delete_blob(hash)?;
            }
        }
        Ok(report)
    }

    /// Removes entries older than `older_than`, then blobs that no remaining
    /// entry names and that are older than that too.
    pub fn gc(&self, older_than: Duration) -> Result<RemoteGcReport> {
        let cutoff = SystemTime::now().checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut report = RemoteGcReport::default();
        let mut named: HashSet<Key> = HashSet::new();
        for kind in ActionKind::RESULTS {
            for entry in self.read_entries(kind)? {
                if entry.listed.modified < cutoff {
                    self.delete_entry(kind, &entry.listed.key)?;
                    report.entries_removed += 1;
                } else if let Some(blobs) = entry.content.as_deref().and_then(named_blobs) {
                    named.extend(blobs);
                }
            }
        }
        for blob in self.list_blobs()? {
            if blob.modified < cutoff && !named.contains(&blob.key) {
                self.delete_blob(&blob.key)?;
                report.blobs_removed += 1;
                report.bytes_freed += blob.size;
            }
        }
        Ok(report)
    }

    /// Every entry of `kind`, read and unsealed, several at a time.
    fn read_entries(&self, kind: ActionKind) -> Result<Vec<ReadEntry>> {
        let listed = self.list_entries(kind)?;
        let objects = self.client()?.objects.clone();
        let paths: Vec<_> = listed.iter().map(|l| (*l, self.action_path(kind, &l.key))).collect();
        let got = self.client()?.wait(async move {
            futures::stream::iter(paths)
                .map(|(listed, path)| {
                    let objects = objects.clone();
                    async move {
                        match objects.get(&path).await {
                            Ok(got) => Ok(Some((listed, got.bytes().await?.to_vec()))),
                            // Removed since it was listed.
                            Err(object_store::Error::NotFound { .. }) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await
        });
        let got = got.map_err(|e| self.object_error(e))?;
        Ok(got
            .into_iter()
            .flatten()
            .map(|(listed, sealed)| {
                let content = seal::unseal(kind, &listed.key, &sealed).ok().map(<[u8]>::to_vec);
                ReadEntry { kind, listed, content }
            })
            .collect())
    }

    /// Each blob's actual hash, streamed (`None` when it vanished).
    fn hash_blobs(&self, blobs: &[Listed]) -> Result<Vec<(Listed, Option<Key>)>> {
        let objects = self.client()?.objects.clone();
        let paths: Vec<_> = blobs.iter().map(|b| (*b, self.blob_path(&b.key))).collect();
        let hashed = self.client()?.wait(async move {
            futures::stream::iter(paths)
                .map(|(listed, path)| {
                    let objects = objects.clone();
                    async move {
                        let got = match objects.get(&path).await {
                            Ok(got) => got,
                            Err(object_store::Error::NotFound { .. }) => return Ok((listed, None)),
                            Err(e) => return Err(e),
                        };
                        let mut hasher = blake3::Hasher::new();
                        let mut stream = got.into_stream();
                        while let Some(chunk) = stream.try_next().await? {
                            hasher.update(&chunk);
                        }
                        Ok((listed, Some(Key(*hasher.finalize().as_bytes()))))
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await
        });
        hashed.map_err(|e| self.object_error(e))
    }
}
