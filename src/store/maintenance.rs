//! `cache ls | du | gc | verify`: walking, sizing, collecting and checking
//! the cache directory.
//!
//! Every result entry is JSON with a `blobs` field listing each blob it needs
//! (transitively), so collection needs no knowledge of what entries mean. A
//! blob is there when its file is, or a span of it ([`super::span`]) has a
//! host; a span in a blob keeps that blob.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use std::collections::HashMap;

use super::local::{LocalStore, remove_any};
use super::span::{SpanHost, Spans};
use super::{ActionCache, ActionKind, Key, Result, Store, StoreError, fingerprint::hash_file, seal};

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::io(path, source)
}

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
    /// Its recipe's node was built since under another key.
    pub superseded: bool,
}

/// Which recipe node made a node or export entry.
#[derive(Debug, serde::Deserialize)]
struct Maker {
    recipe: String,
    id: String,
}

/// The key a [`ActionKind::Recent`] entry says its node was last built with.
#[derive(Debug, serde::Deserialize)]
struct Latest {
    key: Key,
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize, schemars::JsonSchema)]
pub struct StoreUsage {
    pub blobs: u64,
    pub blob_bytes: u64,
    pub tensor_entries: u64,
    pub node_entries: u64,
    pub export_entries: u64,
    pub temp_files: u64,
    pub temp_bytes: u64,
    pub quarantined: u64,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct GcOptions {
    /// Drop entries not used for this long.
    pub older_than: Option<Duration>,
    /// Then drop the least recently used entries until the blobs fit.
    pub max_size: Option<u64>,
    /// Say what would go, removing nothing.
    pub dry_run: bool,
    /// Drop every superseded entry (a node built since under another key).
    pub superseded: bool,
}

/// What a collection removed (or, in a dry run, would remove), and why.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, schemars::JsonSchema)]
pub struct GcReport {
    /// Nothing was removed: these are what a collection would remove.
    pub dry_run: bool,
    /// Every entry removed, by the reasons below.
    pub entries_removed: u64,
    /// Not used for `--older-than`.
    pub entries_expired: u64,
    /// Beyond `--max-size`: superseded entries first, then other entries
    /// and the latest builds of recipe nodes last, least recently used
    /// first within each.
    pub entries_evicted: u64,
    /// Superseded (`--superseded`): their node was built since under
    /// another key.
    #[serde(default)]
    pub entries_superseded: u64,
    /// Unreadable, not sealed for their key, or naming a blob the cache lacks:
    /// useless to any run.
    pub entries_broken: u64,
    /// Blobs no remaining entry names.
    pub blobs_removed: u64,
    pub bytes_freed: u64,
    /// Left by runs that were killed.
    pub temp_files_removed: u64,
    pub quarantined_removed: u64,
}

#[derive(Debug, Default, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct VerifyReport {
    pub blobs_checked: u64,
    pub bytes_checked: u64,
    pub entries_checked: u64,
    /// Blobs whose bytes do not hash to their name.
    pub corrupt_blobs: Vec<Key>,
    /// Entries that are not sealed for their key, do not parse or name a
    /// missing blob.
    pub broken_entries: Vec<PathBuf>,
    /// Files in the store that are not regular files (a link, a FIFO).
    pub special_files: Vec<PathBuf>,
    /// Entries naming tensors that were kept only in an export (`--link
    /// copy`) since deleted or edited: not a fault of the cache; the next
    /// run that needs them encodes them again, and `cache gc` removes them.
    #[serde(default)]
    pub stale_entries: u64,
    /// Whether the problems found were moved to quarantine (`--repair`).
    pub repaired: bool,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.corrupt_blobs.is_empty() && self.broken_entries.is_empty() && self.special_files.is_empty()
    }
}

/// How much a collection under `--max-size` wants to keep an entry: the
/// latest build of a recipe node most, a superseded one least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Latest,
    Other,
    Superseded,
}

pub(super) struct FileEntry {
    pub(super) path: PathBuf,
    pub(super) len: u64,
    pub(super) modified: SystemTime,
    /// A regular file (not a link, a FIFO or a device).
    pub(super) regular: bool,
}

/// Files two levels down (`dir/ab/abcd…`), with their hash names parsed.
/// Never follows a link: what is listed is what is there.
pub(super) fn sharded_files(dir: &Path) -> Result<Vec<(Key, FileEntry)>> {
    let mut out = Vec::new();
    for shard in flat_files(dir)? {
        for file in flat_files(&shard.path)? {
            let name = file.path.file_name().and_then(|n| n.to_str());
            if let Some(key) = name.and_then(Key::from_hex) {
                out.push((key, file));
            }
        }
    }
    Ok(out)
}

/// The files directly in `dir` (none when it does not exist or is not a
/// directory). A file removed by a concurrent gc is simply not listed.
fn flat_files(dir: &Path) -> Result<Vec<FileEntry>> {
    let mut out = Vec::new();
    let files = match fs::read_dir(dir) {
        Ok(files) => files,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            return Ok(out);
        }
        Err(e) => return Err(at(dir)(e)),
    };
    for file in files {
        let path = file.map_err(at(dir))?.path();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(FileEntry { path, len: meta.len(), modified, regular: meta.is_file() });
    }
    Ok(out)
}

/// The payload of the entry file at `path` if it is sealed for `kind` and `key`.
fn read_entry(kind: ActionKind, key: &Key, file: &FileEntry) -> Option<Vec<u8>> {
    if !file.regular {
        return None;
    }
    let sealed = fs::read(&file.path).ok()?;
    seal::unseal(kind, key, &sealed).ok().map(<[u8]>::to_vec)
}

impl LocalStore {
    fn action_files(&self, kind: ActionKind) -> Result<Vec<(Key, FileEntry)>> {
        sharded_files(&self.action_dir(kind))
    }

    fn temp_files(&self) -> Result<Vec<FileEntry>> {
        flat_files(&self.tmp_dir())
    }

    pub fn usage(&self) -> Result<StoreUsage> {
        let blobs = sharded_files(&self.root().join("blobs"))?;
        let temp = self.temp_files()?;
        Ok(StoreUsage {
            blobs: blobs.len() as u64,
            blob_bytes: blobs.iter().map(|(_, f)| f.len).sum(),
            tensor_entries: self.list_actions(ActionKind::Tensor)?.len() as u64,
            node_entries: self.list_actions(ActionKind::Node)?.len() as u64,
            export_entries: self.list_actions(ActionKind::Export)?.len() as u64,
            temp_files: temp.len() as u64,
            temp_bytes: temp.iter().map(|f| f.len).sum(),
            quarantined: flat_files(&self.quarantine_dir())?.len() as u64,
        })
    }

    /// Whether the node or export entry `key` (its payload `bytes`) is
    /// superseded: the recipe node that made it was built since under
    /// another key. Never for other entries, or without a record.
    fn is_superseded(&self, kind: ActionKind, key: &Key, bytes: &[u8]) -> bool {
        if !matches!(kind, ActionKind::Node | ActionKind::Export) {
            return false;
        }
        let Ok(maker) = serde_json::from_slice::<Maker>(bytes) else { return false };
        self.get_action(ActionKind::Recent, &super::recent_key(&maker.recipe, &maker.id))
            .and_then(|b| serde_json::from_slice::<Latest>(&b).ok())
            .is_some_and(|latest| latest.key != *key)
    }

    /// The node and export entries, most recently used first.
    pub fn list(&self) -> Result<Vec<ListedEntry>> {
        let mut out = Vec::new();
        for kind in [ActionKind::Node, ActionKind::Export] {
            for (key, file) in self.action_files(kind)? {
                let payload = read_entry(kind, &key, &file);
                let superseded = payload.as_deref().is_some_and(|b| self.is_superseded(kind, &key, b));
                let detail = payload.and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(serde_json::Value::Null);
                out.push(ListedEntry { kind, key, modified: file.modified, detail, superseded });
            }
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.modified));
        Ok(out)
    }

    /// Removes temporary files, entries past their age, then the least
    /// recently used entries until the rest fits, then every blob no entry
    /// needs. Call on a store opened with [`LocalStore::open_exclusive`]: no
    /// run holds the store, so every temporary file is a dead run's.
    /// Every blob held as spans, with the store's blobs among their hosts
    /// (none for a span whose host is a file outside the store), for the
    /// spans whose host is there to hold them.
    fn spans_in_use(&self, blob_len: &HashMap<Key, u64>) -> Result<HashMap<Key, Vec<Key>>> {
        let mut out = HashMap::new();
        for (key, file) in self.action_files(ActionKind::Span)? {
            let Some(spans) = read_entry(ActionKind::Span, &key, &file)
                .and_then(|bytes| serde_json::from_slice::<Spans>(&bytes).ok())
            else {
                continue;
            };
            let mut hosts = Vec::new();
            let mut held = false;
            for span in &spans.spans {
                let end = span.offset.saturating_add(span.len);
                match &span.host {
                    SpanHost::Blob(host) if blob_len.get(host).is_some_and(|&len| len >= end) => {
                        hosts.push(*host);
                        held = true;
                    }
                    SpanHost::File(path) if fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= end) => {
                        held = true;
                    }
                    _ => {}
                }
            }
            if held {
                out.insert(key, hosts);
            }
        }
        Ok(out)
    }

    pub fn gc(&self, options: GcOptions) -> Result<GcReport> {
        let mut report = GcReport { dry_run: options.dry_run, ..GcReport::default() };
        let remove = |path: &Path| options.dry_run || remove_any(path).is_ok();
        for file in self.temp_files()? {
            if remove(&file.path) {
                report.temp_files_removed += 1;
            }
        }
        for file in flat_files(&self.quarantine_dir())? {
            if remove(&file.path) {
                report.quarantined_removed += 1;
            }
        }
        let now = SystemTime::now();
        let blobs: Vec<_> = sharded_files(&self.root().join("blobs"))?.into_iter().filter(|(_, f)| f.regular).collect();
        let blob_len: HashMap<Key, u64> = blobs.iter().map(|(k, f)| (*k, f.len)).collect();
        let spans = self.spans_in_use(&blob_len)?;
        let present = |b: &Key| blob_len.contains_key(b) || spans.contains_key(b);
        // What keeping a blob keeps: its file, or the blobs its spans lie in.
        let holding = |b: &Key| -> Vec<Key> {
            match spans.get(b) {
                Some(hosts) if !blob_len.contains_key(b) => hosts.clone(),
                _ => vec![*b],
            }
        };
        let expired =
            |f: &FileEntry| options.older_than.is_some_and(|age| now.duration_since(f.modified).is_ok_and(|d| d > age));
        // Keep entries that are sound and young enough. A result names its
        // blobs; a hint (a stat fingerprint, a digest, a run's key record)
        // names none, and is sound when it is sealed for its key.
        let mut kept = Vec::new();
        for kind in ActionKind::ALL.into_iter().filter(|&kind| kind != ActionKind::Span) {
            for (key, file) in self.action_files(kind)? {
                let payload = read_entry(kind, &key, &file);
                let rank = match payload.as_deref() {
                    Some(bytes) if self.is_superseded(kind, &key, bytes) => Rank::Superseded,
                    _ if matches!(kind, ActionKind::Node | ActionKind::Export) => Rank::Latest,
                    _ => Rank::Other,
                };
                let sound = payload.and_then(|bytes| match ActionKind::RESULTS.contains(&kind) {
                    true => serde_json::from_slice::<Envelope>(&bytes).ok().map(|e| e.blobs),
                    false => Some(Vec::new()),
                });
                let counter = match sound {
                    Some(blobs) if blobs.iter().all(present) => match (expired(&file), rank) {
                        (true, _) => &mut report.entries_expired,
                        (false, Rank::Superseded) if options.superseded => &mut report.entries_superseded,
                        (false, _) => {
                            kept.push((file, blobs, rank));
                            continue;
                        }
                    },
                    _ => &mut report.entries_broken,
                };
                if remove(&file.path) {
                    *counter += 1;
                }
            }
        }
        if let Some(max) = options.max_size {
            // What the latest builds need is kept first, what superseded ones do last.
            kept.sort_by_key(|(file, _, rank)| (*rank, std::cmp::Reverse(file.modified)));
            let mut counted = HashSet::new();
            let mut total = 0u64;
            let mut within = 0;
            for (_, blobs, _) in &kept {
                let held: Vec<Key> = blobs.iter().flat_map(holding).collect();
                let extra: u64 = held.iter().filter(|b| !counted.contains(*b)).map(|b| blob_len[b]).sum();
                if total + extra > max {
                    break;
                }
                total += extra;
                counted.extend(held);
                within += 1;
            }
            for (file, _, _) in kept.drain(within..) {
                if remove(&file.path) {
                    report.entries_evicted += 1;
                }
            }
        }
        report.entries_removed =
            report.entries_expired + report.entries_evicted + report.entries_superseded + report.entries_broken;
        let named: HashSet<Key> = kept.iter().flat_map(|(_, blobs, _)| blobs.iter().copied()).collect();
        let live: HashSet<Key> = named.iter().flat_map(holding).collect();
        // A span no kept entry needs, or that nothing holds any more, goes
        // with the blob it stood for.
        for (key, file) in self.action_files(ActionKind::Span)? {
            if !(spans.contains_key(&key) && named.contains(&key)) {
                remove(&file.path);
            }
        }
        for (key, file) in blobs {
            if !live.contains(&key) && remove(&file.path) {
                report.blobs_removed += 1;
                report.bytes_freed += file.len;
            }
        }
        Ok(report)
    }

    /// Re-hashes every blob and checks every entry; with `repair`, moves
    /// whatever is wrong to quarantine, so the next run recomputes it.
    pub fn verify(&self, repair: bool) -> Result<VerifyReport> {
        let mut report = VerifyReport { repaired: repair, ..VerifyReport::default() };
        let blobs = sharded_files(&self.root().join("blobs"))?;
        let mut present = HashSet::new();
        for (key, file) in &blobs {
            if !file.regular {
                report.special_files.push(file.path.clone());
                continue;
            }
            report.blobs_checked += 1;
            report.bytes_checked += file.len;
            if hash_file(&file.path).map_err(at(&file.path))? == *key {
                present.insert(*key);
            } else {
                report.corrupt_blobs.push(*key);
                if repair {
                    self.quarantine(&file.path, format!("blob {key}"), "its bytes do not match its hash");
                }
            }
        }
        let stale = self.verify_spans(&mut report, &mut present)?;
        for kind in ActionKind::ALL.into_iter().filter(|&kind| kind != ActionKind::Span) {
            for (key, file) in self.action_files(kind)? {
                if !file.regular {
                    report.special_files.push(file.path.clone());
                    continue;
                }
                report.entries_checked += 1;
                let payload = read_entry(kind, &key, &file);
                let sound = payload.is_some_and(|b| match kind {
                    ActionKind::Stat | ActionKind::Sha256 => {
                        std::str::from_utf8(&b).ok().and_then(Key::from_hex).is_some()
                    }
                    _ => serde_json::from_slice::<Envelope>(&b).is_ok_and(|e| {
                        let gone = e.blobs.iter().filter(|b| !present.contains(b)).collect::<Vec<_>>();
                        match gone.is_empty() {
                            true => true,
                            false if gone.iter().all(|b| stale.contains(b)) => {
                                report.stale_entries += 1;
                                true
                            }
                            false => false,
                        }
                    }),
                });
                if !sound {
                    report.broken_entries.push(file.path.clone());
                    if repair {
                        self.quarantine(&file.path, format!("{} entry {key}", kind.name()), "broken");
                    }
                }
            }
        }
        if repair {
            for path in &report.special_files {
                self.quarantine(path, format!("special file {}", path.display()), "not a regular file");
            }
            self.take_incidents();
        }
        Ok(report)
    }

    /// Hashes every span's range: a blob held in a span is there when one
    /// of its ranges holds its bytes. A span entry none of whose ranges do
    /// is stale when they all lay in exports (deleted or edited since: the
    /// blobs returned), else broken (`--repair` removes it).
    fn verify_spans(&self, report: &mut VerifyReport, present: &mut HashSet<Key>) -> Result<HashSet<Key>> {
        let mut stale = HashSet::new();
        for (key, file) in self.action_files(ActionKind::Span)? {
            if !file.regular {
                report.special_files.push(file.path.clone());
                continue;
            }
            report.entries_checked += 1;
            let spans = read_entry(ActionKind::Span, &key, &file)
                .and_then(|bytes| serde_json::from_slice::<Spans>(&bytes).ok())
                .unwrap_or_default();
            for span in &spans.spans {
                let Some(located) = self.open_host(span) else { continue };
                report.blobs_checked += 1;
                report.bytes_checked += span.len;
                if LocalStore::hash_located(&located).is_ok_and(|hash| hash == key) {
                    present.insert(key);
                    break;
                }
            }
            if present.contains(&key) {
                continue;
            }
            if !spans.spans.is_empty() && spans.spans.iter().all(|span| matches!(span.host, SpanHost::File(_))) {
                report.stale_entries += 1;
                stale.insert(key);
                continue;
            }
            report.broken_entries.push(file.path.clone());
            if report.repaired {
                self.quarantine(&file.path, format!("spans entry {key}"), "none of its ranges holds the blob");
            }
        }
        Ok(stale)
    }
}
