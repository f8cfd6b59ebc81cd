//! `quantforge cache ls | du | gc | verify | dir | push | pull`: the local
//! cache's commands here, the remote's (`--remote`, `push`, `pull`) in `remote.rs`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::json;
use crate::files::link::LinkMode;
use crate::formats::human_bytes;
use crate::recipe::Recipe;
use std::sync::Arc;

use crate::exec::Engine;
use crate::key::Key;
use crate::store::remote::{Layered, Remote, RemoteMode, RemoteUrl, TransferReport};
use crate::store::{ActionCache, ActionKind, Store};
use crate::store::{GcOptions, LocalStore};

mod remote;

pub(super) use remote::report_transfers;
use remote::{du_remote, gc_remote, pull, push, remote_of, verify_remote};

#[derive(Debug, clap::Subcommand)]
pub(super) enum CacheCommand {
    /// List cached node results and exports, most recently used first.
    Ls {
        #[command(flatten)]
        dir: CacheDir,
        /// List the remote cache (--cache-url) instead of the local one.
        #[arg(long)]
        remote: bool,
    },
    /// Show how much the cache holds.
    Du {
        #[command(flatten)]
        dir: CacheDir,
        /// Size the remote cache (--cache-url) instead of the local one.
        #[arg(long)]
        remote: bool,
    },
    /// Remove temporary files, then entries past an age or beyond a size, then unreferenced blobs.
    Gc {
        #[command(flatten)]
        dir: CacheDir,
        /// Keep at most this much: bytes, or a number with K, M, G (10^3…) or KiB, MiB, GiB.
        #[arg(long, value_name = "SIZE", value_parser = crate::formats::parse_size)]
        max_size: Option<u64>,
        /// Remove entries not used for this long: a number with s, m, h, d or w (e.g. 30d, 2w).
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Option<Duration>,
        /// Collect the remote cache (--cache-url) instead: entries not written or read for
        /// --older-than, then blobs no remaining entry names that are as old.
        #[arg(long, requires = "older_than", conflicts_with = "max_size")]
        remote: bool,
        /// Say what would be removed, and why, removing nothing.
        #[arg(long, conflicts_with = "remote")]
        dry_run: bool,
        /// Remove every superseded entry: a result of a recipe node built since under another
        /// key (`cache ls` marks them). --max-size evicts these first either way.
        #[arg(long, conflicts_with = "remote")]
        superseded: bool,
    },
    /// Upload what a recipe's outputs are made of (the results in the local cache) to the remote.
    Push {
        /// The recipe (TOML) whose outputs' results to upload.
        recipe: PathBuf,
        #[command(flatten)]
        dir: CacheDir,
    },
    /// Download what a recipe's outputs are made of from the remote into the local cache.
    Pull {
        /// The recipe (TOML) whose outputs' results to download.
        recipe: PathBuf,
        #[command(flatten)]
        dir: CacheDir,
    },
    /// Print the cache directory a recipe (or, without one, this directory's project) uses.
    Dir {
        /// The recipe (TOML) whose cache to name.
        recipe: Option<PathBuf>,
        #[command(flatten)]
        dir: CacheDir,
    },
    /// Re-hash every blob and check every entry; fails if anything is corrupt.
    Verify {
        #[command(flatten)]
        dir: CacheDir,
        /// Move what is corrupt or broken to quarantine, so the next run recomputes it
        /// (with --remote: delete it from the remote).
        #[arg(long)]
        repair: bool,
        /// Check the remote cache (--cache-url): every blob hashed, every entry read, every
        /// blob an entry names present and sound.
        #[arg(long)]
        remote: bool,
    },
}

/// The recipe cache: `--cache-dir`, else `QUANTFORGE_CACHE`, else the
/// recipe's own (`[recipe] cache`, else `cache/` in its project root), else
/// `cache/` in the working directory's project root.
#[derive(Debug, clap::Args)]
pub(super) struct CacheDir {
    /// The cache directory (default: the recipe's `[recipe] cache`, else `cache/` in the project
    /// root: the nearest directory above the recipe holding .git or quantforge.toml).
    #[arg(long, value_name = "DIR", env = "QUANTFORGE_CACHE")]
    pub(super) cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(super) remote: RemoteArgs,
}

/// How exports share their bytes with the cache.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct LinkArgs {
    /// How the cache takes in what an export writes, the first of MODES that works here:
    /// reflink (a clone sharing the file's blocks, on XFS or btrfs), hardlink (the file
    /// itself, made read-only; never as root, who could still write it), copy (no second
    /// copy: the cache finds the encoded tensors in the export, checked on every read),
    /// whole (a second copy of every encoded tensor: the cache alone rebuilds any output).
    #[arg(long, value_name = "MODES", env = "QUANTFORGE_LINK", default_value = LinkMode::DEFAULT,
          value_parser = parse_link_modes)]
    pub(super) link: LinkModes,
}

/// Link modes in the order they are tried.
#[derive(Debug, Clone)]
pub(super) struct LinkModes(pub(super) Vec<LinkMode>);

fn parse_link_modes(text: &str) -> Result<LinkModes, String> {
    LinkMode::parse_list(text).map(LinkModes)
}

impl CacheDir {
    /// The cache directory for `recipe` (or, without one, for the working directory).
    pub(super) fn path(&self, recipe: Option<&Recipe>) -> PathBuf {
        match (&self.cache_dir, recipe) {
            (Some(dir), _) => dir.clone(),
            (None, Some(recipe)) => recipe.default_cache_dir(),
            (None, None) => crate::recipe::project_root(std::path::Path::new(".")).join("cache"),
        }
    }
}

/// A shared cache behind the local one.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct RemoteArgs {
    /// A shared cache behind the local one: s3://BUCKET/PREFIX (the client is configured by
    /// AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    /// AWS_ALLOW_HTTP) or file:///DIR. Overrides a recipe's `[recipe] remote`.
    // Parsed here, not by clap, whose error would repeat a URL that may hold a secret.
    #[arg(long, value_name = "URL", env = "QUANTFORGE_CACHE_URL", hide_env_values = true)]
    pub(super) cache_url: Option<String>,
    /// Fail when the remote cache cannot be used (default: warn and go on with the local cache).
    #[arg(long)]
    pub(super) remote_required: bool,
}

impl RemoteArgs {
    /// The remote to use: the command line's, else the recipe's.
    pub(super) fn remote(&self, recipe: Option<&Recipe>) -> anyhow::Result<Option<(RemoteUrl, RemoteMode)>> {
        let url = match &self.cache_url {
            Some(text) => Some(RemoteUrl::parse(text)?),
            None => recipe.and_then(|r| r.remote.clone()),
        };
        let mode = if self.remote_required { RemoteMode::Required } else { RemoteMode::BestEffort };
        Ok(url.map(|url| (url, mode)))
    }
}

/// A cache entry as `cache ls` shows it.
fn cache_entry(
    kind: ActionKind,
    key: &Key,
    modified: SystemTime,
    detail: &serde_json::Value,
    superseded: bool,
) -> json::CacheEntry {
    let text = |name: &str| detail.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    json::CacheEntry {
        kind: kind.name(),
        key: key.hex(),
        age_seconds: SystemTime::now().duration_since(modified).unwrap_or_default().as_secs(),
        bytes: detail.get("bytes").or(detail.get("len")).and_then(|v| v.as_u64()),
        recipe: text("recipe"),
        id: text("id"),
        path: text("path"),
        superseded,
    }
}

fn print_entries(out: &mut dyn Write, entries: &[json::CacheEntry]) -> io::Result<()> {
    if entries.is_empty() {
        return writeln!(out, "no node or export entries");
    }
    writeln!(
        out,
        "{:12}  {:>12}  {:7}  {:>10}  {:10}  RECIPE/NODE  OUTPUT",
        "KEY", "LAST USED", "KIND", "SIZE", "STATE"
    )?;
    for entry in entries {
        let unknown = || "?".to_owned();
        writeln!(
            out,
            "{}  {:>8} ago  {:7}  {:>10}  {:10}  {}/{}  {}",
            &entry.key[..12],
            format_age(Duration::from_secs(entry.age_seconds)),
            entry.kind,
            entry.bytes.map_or(String::new(), |b| human_bytes(b as f64)),
            if entry.superseded { "superseded" } else { "latest" },
            entry.recipe.clone().unwrap_or_else(unknown),
            entry.id.clone().unwrap_or_else(unknown),
            entry.path.as_deref().unwrap_or(""),
        )?;
    }
    let superseded = entries.iter().filter(|e| e.superseded).count();
    if superseded > 0 {
        writeln!(out, "{superseded} superseded (`cache gc --superseded` removes them)")?;
    }
    Ok(())
}

pub(super) fn run(command: CacheCommand, json: bool) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match command {
        CacheCommand::Ls { dir, remote } => ls(&dir, remote, json, &mut out)?,
        CacheCommand::Du { dir, remote: true } => du_remote(&dir, json, &mut out)?,
        CacheCommand::Gc { dir, older_than: Some(age), remote: true, .. } => gc_remote(&dir, age, json, &mut out)?,
        CacheCommand::Verify { dir, repair, remote: true } => verify_remote(&dir, repair, json, &mut out)?,
        CacheCommand::Dir { recipe, dir } => print_dir(recipe.as_deref(), &dir, json, &mut out)?,
        CacheCommand::Push { recipe, dir } => push(&recipe, &dir, json, &mut out)?,
        CacheCommand::Pull { recipe, dir } => pull(&recipe, &dir, json, &mut out)?,
        CacheCommand::Du { dir, remote: false } => du_local(&dir, json, &mut out)?,
        CacheCommand::Gc { dir, max_size, older_than, dry_run, superseded, .. } => {
            gc_local(&dir, max_size, older_than, dry_run, superseded, json, &mut out)?
        }
        CacheCommand::Verify { dir, repair, remote: false } => verify_local(&dir, repair, json, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// `cache ls`: the local cache's entries (or `--remote`'s), most recently used first.
fn ls(dir: &CacheDir, remote: bool, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let entries: Vec<json::CacheEntry> = match remote {
        true => remote_of(dir)?
            .listing()?
            .iter()
            .map(|(kind, listed, detail)| cache_entry(*kind, &listed.key, listed.modified, detail, false))
            .collect(),
        false => LocalStore::open_existing(&dir.path(None))?
            .list()?
            .iter()
            .map(|e| cache_entry(e.kind, &e.key, e.modified, &e.detail, e.superseded))
            .collect(),
    };
    match json {
        true => json::print(&entries)?,
        false => print_entries(out, &entries)?,
    }
    Ok(())
}

/// `cache dir`: the cache directory a recipe (or this project) uses.
fn print_dir(recipe: Option<&Path>, dir: &CacheDir, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let recipe = recipe.map(Recipe::load).transpose()?;
    let path = dir.path(recipe.as_ref());
    let path = std::path::absolute(&path).unwrap_or(path);
    match json {
        true => json::print(&json::CacheDir { path })?,
        false => writeln!(out, "{}", path.display())?,
    }
    Ok(())
}

/// `cache du`: what the local cache holds.
fn du_local(dir: &CacheDir, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let usage = LocalStore::open_existing(&dir.path(None))?.usage()?;
    if json {
        return json::print(&usage);
    }
    writeln!(out, "{}: {} in {} blobs", dir.path(None).display(), human_bytes(usage.blob_bytes as f64), usage.blobs)?;
    writeln!(
        out,
        "entries: {} tensors, {} nodes, {} exports; {} temporary files ({}); {} quarantined",
        usage.tensor_entries,
        usage.node_entries,
        usage.export_entries,
        usage.temp_files,
        human_bytes(usage.temp_bytes as f64),
        usage.quarantined
    )?;
    Ok(())
}

/// `cache gc`: temporary files, then entries past an age or beyond a size, then unreferenced blobs.
fn gc_local(
    dir: &CacheDir,
    max_size: Option<u64>,
    older_than: Option<Duration>,
    dry_run: bool,
    superseded: bool,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let store = LocalStore::open_exclusive(&dir.path(None))?;
    let report = store.gc(GcOptions { older_than, max_size, dry_run, superseded })?;
    if json {
        return json::print(&report);
    }
    let mut why = Vec::new();
    if let Some(age) = older_than {
        why.push(format!("{} unused for {}", report.entries_expired, age_text(age)));
    }
    if superseded {
        why.push(format!("{} superseded", report.entries_superseded));
    }
    if let Some(max) = max_size {
        why.push(format!("{} beyond {}", report.entries_evicted, human_bytes(max as f64)));
    }
    why.push(format!("{} broken", report.entries_broken));
    writeln!(
        out,
        "{} {} ({}), {} no entry names ({}), {} of killed runs, {}",
        if dry_run { "would remove" } else { "removed" },
        match report.entries_removed {
            1 => "1 entry".to_owned(),
            n => format!("{n} entries"),
        },
        why.join(", "),
        crate::text::count(report.blobs_removed, "blob"),
        human_bytes(report.bytes_freed as f64),
        crate::text::count(report.temp_files_removed, "temporary file"),
        crate::text::count(report.quarantined_removed, "quarantined file"),
    )?;
    Ok(())
}

/// `cache verify`: fails when something is corrupt and not repaired.
fn verify_local(dir: &CacheDir, repair: bool, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = match repair {
        true => LocalStore::open_exclusive(&dir.path(None))?,
        false => LocalStore::open_existing(&dir.path(None))?,
    };
    let report = store.verify(repair)?;
    if json {
        json::print(&report)?;
    } else {
        for key in &report.corrupt_blobs {
            writeln!(out, "corrupt blob {key}")?;
        }
        for path in &report.broken_entries {
            writeln!(out, "broken entry {}", path.display())?;
        }
        for path in &report.special_files {
            writeln!(out, "not a regular file: {}", path.display())?;
        }
        writeln!(
            out,
            "checked {} blobs ({}) and {} entries",
            report.blobs_checked,
            human_bytes(report.bytes_checked as f64),
            report.entries_checked
        )?;
        if report.stale_entries > 0 {
            writeln!(
                out,
                "{} entries name tensors kept only in exports since deleted or edited: \
                 the next run that needs them encodes them again (`cache gc` removes these)",
                report.stale_entries
            )?;
        }
    }
    out.flush()?;
    if !report.is_clean() && !repair {
        anyhow::bail!(
            "the cache has {} corrupt blobs, {} broken entries and {} special files \
             (`quantforge cache verify --repair` quarantines them)",
            report.corrupt_blobs.len(),
            report.broken_entries.len(),
            report.special_files.len()
        );
    }
    Ok(())
}

fn format_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `90s`, `15m`, `12h`, `30d`, `2w`.
/// An age as `--older-than` takes it, in its largest whole unit (`30d`).
fn age_text(age: Duration) -> String {
    let seconds = age.as_secs();
    let units = [("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)];
    match units.iter().find(|(_, size)| seconds > 0 && seconds.is_multiple_of(*size)) {
        Some((unit, size)) => format!("{}{unit}", seconds / size),
        None => format!("{seconds}s"),
    }
}

fn parse_age(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = t.split_at(t.len().saturating_sub(1));
    let n: u64 = number.parse().map_err(|_| format!("`{text}` is not an age like 2w, 30d or 12h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "w" => n * 7 * 86400,
        _ => return Err(format!("`{text}` is not an age like 2w, 30d or 12h")),
    };
    Ok(Duration::from_secs(seconds))
}
