//! The lock file: what a recipe's last complete run read and wrote, beside
//! the recipe (`recipes/x.toml` → `recipes/x.lock`), meant to be committed as
//! `Cargo.lock` and `dvc.lock` are. Each input's files and each export's
//! files with their size, blake3 and sha256 (the digest Hugging Face and
//! most publishers list), and the tool, codec and key-scheme versions that
//! decide the bytes.
//!
//! A run rewrites the lock only when something in it changed, so an
//! unchanged recipe leaves it byte for byte as it was. sha256 is computed
//! only for a file whose blake3 (which the cache knows already) the old lock
//! does not list, so a no-op rerun reads nothing to write it.
//!
//! `run --locked` refuses to start when an input no longer matches the lock
//! and to finish when the run would change the lock; `plan` reports drift.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::Engine;
use super::report::{InputReport, RunReport};
use crate::formats::AtomicOutput;
use crate::ops::Op;
use crate::recipe::Recipe;
use crate::store::{KEY_SCHEME_VERSION, Key};

/// The version of the lock file's own layout.
const LOCK_VERSION: u32 = 1;

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
    #[error("lock {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
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
/// when they match. Exports are not looked at: they are what a run makes.
pub fn input_drift(lock: &Lock, recipe: &Recipe, inputs: &[InputReport]) -> Vec<String> {
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

/// The lock a complete, successful run of `recipe` stands for, reusing
/// `previous`'s sha256 for every file whose blake3 it already lists.
pub fn of_run(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    previous: Option<&Lock>,
) -> Result<Lock, LockError> {
    of_part(engine, recipe, report, previous, |_| true, |_| true)
}

/// The part of the lock export node `export` stands on: the inputs upstream
/// of it, and its files.
pub fn of_export(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    previous: Option<&Lock>,
    export: usize,
) -> Result<Lock, LockError> {
    let (_, inputs) = recipe.upstream(export);
    let names: Vec<&str> = inputs.iter().map(|&j| recipe.inputs[j].name.as_str()).collect();
    of_part(engine, recipe, report, previous, |name| names.contains(&name), |i| i == export)
}

fn of_part(
    engine: &Engine,
    recipe: &Recipe,
    report: &RunReport,
    previous: Option<&Lock>,
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
        previous,
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

/// Writes `lock` beside `recipe` unless the file there already says the
/// same; true when it wrote.
pub fn write(recipe: &Recipe, lock: &Lock) -> Result<bool, LockError> {
    let path = lock_path(recipe)?;
    let text = format!(
        "# Written by `quantforge run`: what {} last read and wrote. Commit it beside the recipe.\n{}",
        recipe.source.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy()).unwrap_or_default(),
        toml::to_string(lock).map_err(|e| LockError::Write { path: path.clone(), source: std::io::Error::other(e) })?
    );
    if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    let write_err = |source| LockError::Write { path: path.clone(), source };
    let mut out = AtomicOutput::create(&path).map_err(write_err)?;
    out.writer().write_all(text.as_bytes()).map_err(write_err)?;
    out.commit().map_err(write_err)?;
    Ok(true)
}

/// The sha256 of each file, by (blake3, size): `previous`'s where it lists
/// the same content, the others read, side by side on the engine's pool.
fn sha256_of<'a>(
    engine: &Engine,
    previous: Option<&Lock>,
    files: impl Iterator<Item = &'a (PathBuf, u64, String)>,
) -> Result<HashMap<(String, u64), String>, LockError> {
    use rayon::prelude::*;
    let mut known: HashMap<(String, u64), String> = previous
        .into_iter()
        .flat_map(|lock| lock.inputs.iter().flat_map(|i| &i.files).chain(lock.exports.iter().flat_map(|e| &e.files)))
        .map(|f| ((f.blake3.clone(), f.size), f.sha256.clone()))
        .collect();
    let unknown: Vec<&(PathBuf, u64, String)> =
        files.filter(|(_, size, blake3)| !known.contains_key(&(blake3.clone(), *size))).collect();
    let read: Vec<((String, u64), String)> = engine.pool().install(|| {
        unknown
            .par_iter()
            .map(|(path, size, blake3)| Ok(((blake3.clone(), *size), sha256_file(path)?)))
            .collect::<Result<_, LockError>>()
    })?;
    known.extend(read);
    Ok(known)
}

fn sha256_file(path: &Path) -> Result<String, LockError> {
    crate::files::sha256_file(path).map_err(|source| LockError::Hash { path: path.to_owned(), source })
}

fn recipe_dir(recipe: &Recipe) -> PathBuf {
    let dir = recipe.source.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
    crate::exec::outputs::resolve(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
}

/// `path` relative to the recipe's directory `dir` (both resolved; `..`
/// where it lies outside), so a lock reads the same on every machine.
pub(super) fn relative(dir: &Path, path: &Path) -> String {
    let resolved = crate::exec::outputs::resolve(path);
    let shared = dir.components().zip(resolved.components()).take_while(|(a, b)| a == b).count();
    let up = dir.components().skip(shared).map(|_| std::path::Component::ParentDir);
    let down = resolved.components().skip(shared);
    up.chain(down).collect::<PathBuf>().to_string_lossy().into_owned()
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}
