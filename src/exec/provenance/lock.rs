//! The lock file: what a recipe's last complete run read and wrote, beside
//! the recipe (`recipes/x.toml` → `recipes/x.lock`), meant to be committed as
//! `Cargo.lock` and `dvc.lock` are. Each input's files and each export's
//! files with their size, blake3 and sha256 (the digest Hugging Face and
//! most publishers list), and the tool, codec and key-scheme versions that
//! decide the bytes.
//!
//! A run rewrites the lock only when something in it changed, so an
//! unchanged recipe leaves it byte for byte as it was. A lock is what other
//! people verify with, so no digest in it is taken from an earlier lock: a
//! file's sha256 is computed here once per content (by blake3 and size, which
//! the cache knows already) and remembered in the cache's `sha256` entries,
//! so a no-op rerun reads nothing to write it, and an edited sha256 is
//! corrected by the next run.
//!
//! `run --locked` refuses to start when an input no longer matches the lock
//! (in size, blake3 or sha256) and to finish when the run would change the
//! lock; `plan` reports drift.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::exec::Engine;
use crate::exec::report::{InputReport, RunReport};
use crate::files::OutputPath;
use crate::formats::AtomicOutput;
use crate::key::{KEY_SCHEME_VERSION, Key};
use crate::ops::Op;
use crate::recipe::Recipe;
use crate::store::Store;
use crate::store::fingerprint::{remember_sha256, remembered_sha256};

/// The version of the lock file's own layout.
const LOCK_VERSION: u32 = 1;

/// How every lock file begins: what a run may replace (a file at the lock's
/// path that does not begin so is not ours to overwrite).
pub const LOCK_HEADER: &str = "# Written by `quantforge run`";

/// A file's content as the cache knows it (blake3 hex, size) → its sha256.
pub type Sha256s = HashMap<(String, u64), String>;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    pub quantforge: String,
    pub codec_version: u32,
    pub key_scheme: u32,
    #[serde(rename = "input", default)]
    pub inputs: Vec<LockedInput>,
    #[serde(rename = "export", default)]
    pub exports: Vec<LockedExport>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedInput {
    pub name: String,
    /// Relative to the recipe's directory when inside it.
    pub path: String,
    #[serde(rename = "file")]
    pub files: Vec<LockedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedExport {
    pub step: String,
    pub path: String,
    #[serde(rename = "file")]
    pub files: Vec<LockedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedFile {
    pub path: String,
    pub size: u64,
    pub blake3: String,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock {}: {problem}", path.display())]
    Read { path: PathBuf, problem: String },
    #[error("lock {}: {}", path.display(), crate::files::IoText(source))]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Hash { path: PathBuf, source: std::io::Error },
    #[error("the recipe has no file, so no lock beside it")]
    NoRecipeFile,
}

/// `recipes/x.toml` → `recipes/x.lock`.
pub fn lock_path(recipe: &Recipe) -> Result<PathBuf, LockError> {
    recipe.source.as_ref().map(|source| source.with_extension("lock")).ok_or(LockError::NoRecipeFile)
}

/// The lock beside `recipe`, or `None` when there is none.
pub fn read(recipe: &Recipe) -> Result<Option<Lock>, LockError> {
    const MAX_LOCK_BYTES: u64 = 64 << 20;
    let path = lock_path(recipe)?;
    if !path.exists() {
        return Ok(None);
    }
    let problem = |problem: String| LockError::Read { path: path.clone(), problem };
    let bytes = crate::files::read_regular(&path, MAX_LOCK_BYTES).map_err(|e| problem(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| problem("not UTF-8".into()))?;
    let lock: Lock = toml::from_str(&text).map_err(|e| problem(e.to_string()))?;
    if lock.version != LOCK_VERSION {
        return Err(problem(format!("lock version {}; this quantforge reads version {LOCK_VERSION}", lock.version)));
    }
    Ok(Some(lock))
}

/// How the current inputs and tool differ from `lock`, one line each; empty
/// when they match. `sha256` holds what is known of the inputs' sha256s
/// (all of them for `run --locked`, which computes what the cache does not
/// know; `plan` compares those the cache knows). Exports are not looked at:
/// they are what a run makes.
pub fn input_drift(lock: &Lock, recipe: &Recipe, inputs: &[InputReport], sha256: &Sha256s) -> Vec<String> {
    let mut drift = version_drift(lock);
    let dir = recipe_dir(recipe);
    for input in inputs {
        let Some(locked) = lock.inputs.iter().find(|l| l.name == input.name) else {
            drift.push(format!("input `{}` is not in the lock", input.name));
            continue;
        };
        let current: Vec<(String, u64, &str)> =
            input.files.iter().map(|f| (relative(&dir, &f.path), f.bytes, f.blake3.as_str())).collect();
        let was: Vec<(String, u64, &str)> =
            locked.files.iter().map(|f| (f.path.clone(), f.size, f.blake3.as_str())).collect();
        if current == was {
            let sha256_of = |f: &LockedFile| sha256.get(&(f.blake3.clone(), f.size));
            let changed = locked.files.iter().find(|f| sha256_of(f).is_some_and(|known| *known != f.sha256));
            if let Some(file) = changed {
                drift.push(format!(
                    "input `{}` ({}) has sha256 {}; the lock has sha256 {} (the same blake3: the lock was edited)",
                    input.name,
                    file.path,
                    sha256_of(file).map_or("", String::as_str),
                    file.sha256
                ));
            }
            continue;
        }
        let changed = current.iter().zip(&was).find(|(a, b)| a != b);
        drift.push(match changed {
            Some(((path, size, blake3), (_, was_size, was_blake3))) => format!(
                "input `{}` ({path}) changed: {size} bytes, blake3 {} (the lock has {was_size} bytes, blake3 {})",
                input.name,
                short(blake3),
                short(was_blake3)
            ),
            None => format!("input `{}` has {} files; the lock has {}", input.name, current.len(), was.len()),
        });
    }
    for locked in &lock.inputs {
        if !inputs.iter().any(|i| i.name == locked.name) {
            drift.push(format!("input `{}` is in the lock but not used by the recipe", locked.name));
        }
    }
    drift
}

fn version_drift(lock: &Lock) -> Vec<String> {
    let mut drift = Vec::new();
    if lock.codec_version != crate::codecs::CODEC_VERSION {
        drift.push(format!(
            "the lock was written with codec version {}; this quantforge has {}",
            lock.codec_version,
            crate::codecs::CODEC_VERSION
        ));
    }
    if lock.key_scheme != KEY_SCHEME_VERSION {
        drift.push(format!(
            "the lock was written with cache key scheme {}; this quantforge has {KEY_SCHEME_VERSION}",
            lock.key_scheme
        ));
    }
    drift
}

/// The lock a complete, successful run of `recipe` stands for.
pub fn of_run(engine: &Engine, recipe: &Recipe, report: &RunReport) -> Result<Lock, LockError> {
    of_part(engine, recipe, report, |_| true, |_| true)
}

/// The part of the lock export node `export` stands on: the inputs upstream
/// of it, and its files.
pub fn of_export(engine: &Engine, recipe: &Recipe, report: &RunReport, export: usize) -> Result<Lock, LockError> {
    let (_, inputs) = recipe.upstream(export);
    let names: Vec<&str> = inputs.iter().map(|&j| recipe.inputs[j].name.as_str()).collect();
    of_part(engine, recipe, report, |name| names.contains(&name), |i| i == export)
}

fn of_part(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    keep_input: impl Fn(&str) -> bool,
    keep_export: impl Fn(usize) -> bool,
) -> Result<Lock, LockError> {
    let dir = recipe_dir(recipe);
    // (path, size, blake3) of every file the lock lists, inputs' then exports'.
    type Files = Vec<(PathBuf, u64, String)>;
    let input_files: Vec<(&InputReport, Files)> = report
        .inputs
        .iter()
        .filter(|input| keep_input(&input.name))
        .map(|input| (input, input.files.iter().map(|f| (f.path.clone(), f.bytes, f.blake3.clone())).collect()))
        .collect();
    let mut export_files: Vec<(&str, &Path, Files)> = Vec::new();
    for (i, (node, node_report)) in recipe.nodes.iter().zip(&report.nodes).enumerate() {
        let Op::Export(options) = &node.op else { continue };
        if !keep_export(i) {
            continue;
        }
        let recorded = Key::from_hex(&node_report.key).and_then(|key| engine.exported_files(&key, options));
        let Some(recorded) = recorded else { continue };
        let files = recorded.into_iter().map(|(path, size, blake3)| (path, size, blake3.hex())).collect();
        export_files.push((&node.id, &options.path, files));
    }
    let sha256 = sha256_of(
        engine,
        input_files.iter().flat_map(|(_, files)| files).chain(export_files.iter().flat_map(|(_, _, files)| files)),
    )?;
    let locked = |files: Files| -> Vec<LockedFile> {
        files
            .into_iter()
            .map(|(path, size, blake3)| LockedFile {
                path: relative(&dir, &path),
                size,
                sha256: sha256[&(blake3.clone(), size)].clone(),
                blake3,
            })
            .collect()
    };
    let inputs = input_files
        .into_iter()
        .map(|(input, files)| LockedInput {
            name: input.name.clone(),
            path: relative(&dir, &input.path),
            files: locked(files),
        })
        .collect();
    let exports = export_files
        .into_iter()
        .map(|(step, path, files)| LockedExport {
            step: step.to_owned(),
            path: relative(&dir, path),
            files: locked(files),
        })
        .collect();
    Ok(Lock {
        version: LOCK_VERSION,
        quantforge: env!("CARGO_PKG_VERSION").to_owned(),
        codec_version: crate::codecs::CODEC_VERSION,
        key_scheme: KEY_SCHEME_VERSION,
        inputs,
        exports,
    })
}

/// The first way `new` differs from `old`, for `run --locked`.
pub fn first_difference(old: &Lock, new: &Lock) -> Option<String> {
    if let Some(drift) = version_drift(old).into_iter().next() {
        return Some(drift);
    }
    for export in &new.exports {
        let Some(locked) = old.exports.iter().find(|e| e.step == export.step) else {
            return Some(format!("export `{}` is not in the lock", export.step));
        };
        if let Some((file, was)) = export.files.iter().zip(&locked.files).find(|(a, b)| a != b) {
            return Some(format!(
                "export `{}` wrote {} with sha256 {} ({} bytes); the lock has sha256 {} ({} bytes)",
                export.step, file.path, file.sha256, file.size, was.sha256, was.size
            ));
        }
        if export.files.len() != locked.files.len() {
            return Some(format!(
                "export `{}` wrote {} files; the lock has {}",
                export.step,
                export.files.len(),
                locked.files.len()
            ));
        }
    }
    (old != new).then(|| "the lock's inputs or exports differ from this run's".to_owned())
}

/// Writes `lock` to `path` (the recipe's lock, as the run's outputs let it
/// through) unless the file there already says the same; true when it wrote.
pub fn write(recipe: &Recipe, lock: &Lock, path: &OutputPath) -> Result<bool, LockError> {
    let text = format!(
        "{LOCK_HEADER}: what {} last read and wrote. Commit it beside the recipe.\n{}",
        recipe.source.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy()).unwrap_or_default(),
        toml::to_string(lock)
            .map_err(|e| LockError::Write { path: path.shown().to_owned(), source: std::io::Error::other(e) })?
    );
    if std::fs::read(path.resolved()).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    let write_err = |source| LockError::Write { path: path.shown().to_owned(), source };
    let mut out = AtomicOutput::create(path).map_err(write_err)?;
    out.writer().write_all(text.as_bytes()).map_err(write_err)?;
    out.commit().map_err(write_err)?;
    Ok(true)
}

/// The sha256 of each file, by (blake3, size): the cache's where it knows
/// the content, the others read (side by side on the engine's pool) and
/// remembered.
fn sha256_of<'a>(
    engine: &Engine,
    files: impl Iterator<Item = &'a (PathBuf, u64, String)>,
) -> Result<Sha256s, LockError> {
    use rayon::prelude::*;
    let store = engine.store();
    let mut known = Sha256s::new();
    let mut unknown: Vec<&(PathBuf, u64, String)> = Vec::new();
    for file in files {
        let (_, size, blake3) = file;
        let content = (blake3.clone(), *size);
        if known.contains_key(&content) {
            continue;
        }
        match remembered_sha256(store, blake3, *size) {
            Some(sha256) => {
                known.insert(content, sha256);
            }
            None => unknown.push(file),
        }
    }
    unknown.sort_by_key(|(_, size, blake3)| (blake3.clone(), *size));
    unknown.dedup_by_key(|(_, size, blake3)| (blake3.clone(), *size));
    let read: Vec<((String, u64), String)> = engine.pool().install(|| {
        unknown
            .par_iter()
            .map(|(path, size, blake3)| {
                let sha256 = sha256_file(path, blake3, *size)?;
                remember_sha256(store, blake3, *size, &sha256);
                Ok(((blake3.clone(), *size), sha256))
            })
            .collect::<Result<_, LockError>>()
    })?;
    known.extend(read);
    Ok(known)
}

/// The sha256 of every file of `inputs`, computing those the cache does not
/// know (for `run --locked`).
pub fn input_sha256s(engine: &Engine, inputs: &[InputReport]) -> Result<Sha256s, LockError> {
    let files: Vec<(PathBuf, u64, String)> =
        inputs.iter().flat_map(|i| &i.files).map(|f| (f.path.clone(), f.bytes, f.blake3.clone())).collect();
    sha256_of(engine, files.iter())
}

/// The sha256s of `inputs`' files the cache knows, reading nothing (for `plan`).
pub fn known_sha256s(store: &dyn Store, inputs: &[InputReport]) -> Sha256s {
    let files = inputs.iter().flat_map(|i| &i.files);
    files.filter_map(|f| Some(((f.blake3.clone(), f.bytes), remembered_sha256(store, &f.blake3, f.bytes)?))).collect()
}

/// The sha256 of the file at `path`, which must still be the content the
/// run saw (size and blake3, hashed in the same pass): a file changed since
/// is an error, never a digest of other bytes under the old name.
fn sha256_file(path: &Path, blake3: &str, size: u64) -> Result<String, LockError> {
    let hash_err = |source| LockError::Hash { path: path.to_owned(), source };
    let (sha256, seen_blake3, seen_size) = crate::files::sha256_and_blake3_file(path).map_err(hash_err)?;
    if seen_blake3 != blake3 || seen_size != size {
        return Err(hash_err(std::io::Error::other(format!(
            "changed since the run read it ({seen_size} bytes, blake3 {}; the run saw {size} bytes, blake3 {})",
            short(&seen_blake3),
            short(blake3)
        ))));
    }
    Ok(sha256)
}

fn recipe_dir(recipe: &Recipe) -> PathBuf {
    let dir = recipe.source.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
    crate::files::resolve(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
}

/// `path` relative to the recipe's directory `dir` (both resolved; `..`
/// where it lies outside), so a lock reads the same on every machine.
pub fn relative(dir: &Path, path: &Path) -> String {
    let resolved = crate::files::resolve(path);
    let shared = dir.components().zip(resolved.components()).take_while(|(a, b)| a == b).count();
    let up = dir.components().skip(shared).map(|_| std::path::Component::ParentDir);
    let down = resolved.components().skip(shared);
    up.chain(down).collect::<PathBuf>().to_string_lossy().into_owned()
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}
