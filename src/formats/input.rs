//! What an input path names, before anything is read from it: one model
//! file; every shard of a GGUF split (any shard's name stands for the
//! whole, `PREFIX-0000i-of-0000N.gguf` as llama-gguf-split names them); a
//! sharded SafeTensors or PyTorch checkpoint (its `*.index.json`); or, for `convert`, a
//! checkpoint directory (its files), a Hugging Face Hub cache snapshot
//! among them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::safetensors::{CheckpointIndex, read_index};
use super::{FormatError, Result};

/// An input resolved to its files.
#[derive(Debug, Clone)]
pub enum InputShape {
    File(PathBuf),
    /// A GGUF split's shards, in order.
    Split(Vec<PathBuf>),
    /// A sharded checkpoint (SafeTensors or PyTorch): the index and its shards.
    CheckpointIndex(CheckpointIndex),
    /// The files of a checkpoint directory that `convert` reads, sorted.
    Directory(Vec<PathBuf>),
}

impl InputShape {
    /// Resolves `path`, a model file or a sharded one. A checkpoint
    /// directory is `convert`'s alone, which says which of its files it reads.
    pub fn resolve(path: &Path) -> Result<InputShape> {
        if path.is_dir() {
            let problem = "is a directory; only `convert` reads a checkpoint directory (give a model file)";
            return Err(FormatError::io(path, std::io::Error::other(problem)));
        }
        if is_checkpoint_index(path) {
            return Ok(InputShape::CheckpointIndex(read_index(path)?));
        }
        Ok(match shard_set(path) {
            Some(shards) => InputShape::Split(shards),
            None => InputShape::File(path.to_owned()),
        })
    }

    /// The files whose bytes the input is, in order.
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            InputShape::File(path) => vec![path.clone()],
            InputShape::Split(files) | InputShape::Directory(files) => files.clone(),
            InputShape::CheckpointIndex(index) => index.shards(),
        }
    }
}

/// `PREFIX-0000i-of-0000N.gguf` for the 0-based shard `shard` of `count`.
pub fn shard_path(prefix: &Path, shard: usize, count: usize) -> PathBuf {
    let mut name = OsString::from(prefix.as_os_str());
    name.push(format!("-{:05}-of-{:05}.gguf", shard + 1, count));
    PathBuf::from(name)
}

/// Splits a shard path into its prefix, 0-based shard index and count.
pub fn parse_shard_path(path: &Path) -> Option<(PathBuf, usize, usize)> {
    let text = path.to_str()?;
    let stem = text.strip_suffix(".gguf")?;
    // "-NNNNN-of-NNNNN": split.count is a u16, so both numbers are 5 digits.
    let split_at = stem.len().checked_sub(15)?;
    let (prefix, tail) = (stem.get(..split_at)?, stem.get(split_at..)?);
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    let (no, count) = tail.strip_prefix('-')?.split_once("-of-")?;
    if prefix.is_empty() || !digits(no) || !digits(count) {
        return None;
    }
    let (no, count): (usize, usize) = (no.parse().ok()?, count.parse().ok()?);
    (no >= 1 && no <= count).then(|| (PathBuf::from(prefix), no - 1, count))
}

/// The files of the split `path` belongs to, in shard order, when its name
/// says it is one shard of several (`PREFIX-0000i-of-0000N.gguf`, N > 1).
pub fn shard_set(path: &Path) -> Option<Vec<PathBuf>> {
    let (prefix, _, count) = parse_shard_path(path)?;
    (count > 1).then(|| (0..count).map(|no| shard_path(&prefix, no, count)).collect())
}

/// The Hugging Face Hub cache's layout: `models--ORG--NAME/snapshots/REV/`
/// holds a revision's files (links into `blobs/`), `refs/main` names the
/// revision of `main`.
const HUB_PREFIX: &str = "models--";

/// The snapshot directory `path` stands for: itself, or, for a Hub cache
/// repository directory (`models--ORG--NAME`), the revision `refs/main` names.
pub fn hub_snapshot(path: &Path) -> PathBuf {
    let is_repository = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(HUB_PREFIX));
    let main = std::fs::read_to_string(path.join("refs/main")).ok();
    match main.map(|rev| rev.trim().to_owned()) {
        Some(rev) if is_repository && !rev.is_empty() && !rev.contains(['/', '\\']) => path.join("snapshots").join(rev),
        _ => path.to_owned(),
    }
}

/// The directory a model argument names: the path itself when something is
/// there, else, when it reads as a Hugging Face repo id (`ORG/NAME`, with
/// `@REVISION` if given), that repository's snapshot in the local Hub cache
/// ([`hub_repo_snapshot`]); else the path as given, for the caller to
/// report missing.
pub fn model_path(path: &Path) -> std::result::Result<PathBuf, String> {
    if path.exists() {
        return Ok(path.to_owned());
    }
    match path.to_str().map(hub_repo_snapshot) {
        Some(Ok(Some(snapshot))) => Ok(snapshot),
        Some(Err(e)) => Err(e),
        _ => Ok(path.to_owned()),
    }
}

/// Where huggingface_hub keeps its cache: `HF_HUB_CACHE` (or the older
/// `HUGGINGFACE_HUB_CACHE`), else `hub/` in `HF_HOME`, else in
/// `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`; `~` expanded
/// as it expands it.
pub fn hub_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(|v| expand_home(PathBuf::from(v)));
    if let Some(dir) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
        return Some(dir);
    }
    let home = var("HF_HOME").or_else(|| {
        let cache = var("XDG_CACHE_HOME").or_else(|| Some(var("HOME")?.join(".cache")))?;
        Some(cache.join("huggingface"))
    })?;
    Some(home.join("hub"))
}

fn expand_home(path: PathBuf) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path,
    }
}

/// The snapshot of repo id `spec` (`ORG/NAME` or `ORG/NAME@REVISION`) in
/// the local Hub cache, as huggingface_hub finds it: the repository in
/// `models--ORG--NAME`, the revision (default `main`) a branch or tag names
/// in `refs/`, or a commit's own `snapshots/` directory. `Ok(None)` when
/// `spec` is not a repo id, or names no revision and the repository is not
/// cached (a path that is not there, then); an error when it is cached but
/// the revision is not, or an explicit revision cannot be found.
pub fn hub_repo_snapshot(spec: &str) -> std::result::Result<Option<PathBuf>, String> {
    let (repo, revision) = match spec.rsplit_once('@') {
        Some((repo, revision)) => (repo, Some(revision)),
        None => (spec, None),
    };
    let is_part = |part: &str| {
        !part.is_empty()
            && part.len() <= 96
            && part.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !part.starts_with(['-', '.'])
            && !part.ends_with(['-', '.'])
            && !part.contains("--")
            && !part.contains("..")
    };
    let Some((org, name)) = repo.split_once('/').filter(|(org, name)| is_part(org) && is_part(name)) else {
        return Ok(None);
    };
    let valid_revision = |r: &str| !r.is_empty() && !r.split('/').any(|p| p.is_empty() || p == "." || p == "..");
    if revision.is_some_and(|r| !valid_revision(r)) {
        return Err(format!("`{spec}`: `{}` is not a revision", revision.unwrap_or_default()));
    }
    let Some(cache) = hub_cache_dir() else { return Ok(None) };
    let repository = cache.join(format!("{HUB_PREFIX}{org}--{name}"));
    if !repository.is_dir() {
        return match revision {
            None => Ok(None),
            Some(_) => Err(format!("`{spec}`: the Hugging Face cache ({}) has no `{repo}`", cache.display())),
        };
    }
    let revision = revision.unwrap_or("main");
    let commit = match std::fs::read_to_string(repository.join("refs").join(revision)) {
        Ok(commit) => commit.trim().to_owned(),
        Err(_) => revision.to_owned(),
    };
    let snapshot = repository.join("snapshots").join(&commit);
    if commit.contains(['/', '\\']) || !snapshot.is_dir() {
        return Err(format!(
            "`{spec}`: the Hugging Face cache has `{repo}` ({}) but not its revision `{revision}`",
            repository.display()
        ));
    }
    Ok(Some(snapshot))
}

/// The repository's name (`NAME` of `models--ORG--NAME`) when `dir` is a
/// snapshot in a Hub cache: what the directory would be called had the
/// repository been cloned, which the converter names the model after.
pub fn hub_model_name(dir: &Path) -> Option<String> {
    let absolute = std::path::absolute(dir).ok()?;
    let mut up = absolute.ancestors().skip(1);
    let (snapshots, repository) = (up.next()?, up.next()?);
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    let name = repository.file_name()?.to_str()?.strip_prefix(HUB_PREFIX)?;
    name.rsplit("--").next().filter(|n| !n.is_empty()).map(str::to_owned)
}

/// Whether `path` names the index of a sharded checkpoint
/// (`model.safetensors.index.json`, `pytorch_model.bin.index.json`, …).
pub fn is_checkpoint_index(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".index.json"))
}
