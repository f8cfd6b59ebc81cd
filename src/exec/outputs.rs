//! Where a run may write, decided on resolved paths before anything runs.
//!
//! Every export's files (a split's whole family of shard names, a
//! SafeTensors index, an attestation beside it) are claimed up front: each
//! must pass the run's [`WriteGuard`] — inside the recipe's directory (a
//! one-shot command writes where its command line says), outside the
//! store and every input's directory, not an input, the recipe or its
//! lock under any name, absent or a regular file — and no two exports may
//! claim one file. The files a run writes besides its exports (its lock,
//! a `--report` page, an attestation) are checked against the same guard
//! and every claim, so none of them lands on another.

use std::path::{Path, PathBuf};

use crate::files::{OutputPath, Replaces, WriteGuard, resolve};
use crate::ops::Op;
use crate::ops::export::{ExportOptions, SplitMode};
use crate::recipe::Recipe;

/// An export's file, refused. A one-shot command's export has no step
/// name a user wrote, so none is said (`id` is `None`).
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {problem}", .id.as_ref().map_or_else(String::new, |id| format!("export `{id}` to ")), path.display())]
pub struct OutputError {
    pub id: Option<String>,
    pub path: PathBuf,
    pub problem: String,
}

/// A file a run writes besides its exports, refused.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {problem}", path.display())]
pub struct SideFileError {
    pub what: &'static str,
    pub path: PathBuf,
    pub problem: String,
}

/// What an existing lock file must be for a run to replace it.
pub const LOCK_FILE: Replaces = Replaces::FileStarting {
    prefix: crate::exec::provenance::lock::LOCK_HEADER.as_bytes(),
    what: "a quantforge lock file",
};
/// What an existing report must be for `--report` to replace it.
pub const REPORT_PAGE: Replaces = Replaces::FileStarting { prefix: b"<!DOCTYPE html>", what: "an HTML page" };
/// What an existing attestation must be for a new one to replace it.
pub const ATTESTATION: Replaces = Replaces::FileStarting { prefix: b"{", what: "a JSON document" };

/// Every path a run of one recipe may write, checked.
#[derive(Debug, Clone)]
pub struct RunOutputs {
    guard: WriteGuard,
    claims: Vec<(Claim, String)>,
    lock: Option<PathBuf>,
    /// The recipe is a one-shot command's: its step names are not the user's.
    one_shot: bool,
}

impl RunOutputs {
    /// Checks every export of `recipe` against the rules above. `store` is
    /// the store's directory when it has one; `inputs` are the run's input
    /// files.
    pub fn check<'a>(
        recipe: &Recipe,
        store: Option<&Path>,
        inputs: impl Iterator<Item = &'a PathBuf>,
    ) -> Result<RunOutputs, OutputError> {
        let mut guard = match &recipe.source {
            Some(source) => WriteGuard::within(&directory_of(source), "the recipe's directory"),
            None => WriteGuard::default(),
        };
        if let Some(store) = store {
            guard.fence(store, "the cache");
        }
        for input in inputs {
            guard.protect(input, "an input of the run");
        }
        // A checkpoint directory: its config and tokenizer files are read
        // too (an output may go beside them, as the converter's does).
        for input in recipe.inputs.iter().filter(|input| input.path.is_dir()) {
            for entry in std::fs::read_dir(&input.path).into_iter().flatten().flatten() {
                guard.protect(&entry.path(), format!("a file of input `{}`", input.name));
            }
        }
        let lock = recipe.source.as_deref().map(|source| source.with_extension("lock"));
        if let Some(source) = &recipe.source {
            guard.protect(source, "the recipe itself");
        }
        if let Some(lock) = &lock {
            guard.protect(lock, "the recipe's lock file");
        }
        let one_shot = recipe.source.is_none();
        let mut claimed: Vec<(Claim, String)> = Vec::new();
        for node in &recipe.nodes {
            let Op::Export(options) = &node.op else { continue };
            let id = (!one_shot).then(|| node.id.clone());
            for (claim, shown) in claims(options) {
                let fail = |problem: String| OutputError { id: id.clone(), path: shown.clone(), problem };
                let checked = match &claim {
                    Claim::File(_) => shown.clone(),
                    // The family's directory stands for its shards: each is
                    // checked again when it is written.
                    Claim::Shards { prefix, .. } => prefix.with_file_name("shard.check"),
                };
                guard.check(&checked, Replaces::AnyFile).map_err(|e| fail(e.problem))?;
                if let Some((_, other)) = claimed.iter().find(|(c, _)| overlaps(c, &claim)) {
                    return Err(fail(format!("`{other}` writes there too; give each export its own path")));
                }
                claimed.push((claim, node.id.clone()));
            }
        }
        Ok(RunOutputs { guard, claims: claimed, lock, one_shot })
    }

    /// A file of export `id` (or the attestation beside it), checked again
    /// as it is created: a file or link may have appeared there since the
    /// run was planned.
    pub fn export_file(&self, id: &str, path: &Path, replaces: Replaces) -> Result<OutputPath, OutputError> {
        self.guard.check(path, replaces).map_err(|e| OutputError {
            id: (!self.one_shot).then(|| id.to_owned()),
            path: path.to_owned(),
            problem: e.problem,
        })
    }

    /// The recipe's lock file, which only a file of its kind may be.
    pub fn lock_file(&self) -> Result<OutputPath, SideFileError> {
        let Some(lock) = &self.lock else {
            return Err(SideFileError {
                what: "lock",
                path: PathBuf::new(),
                problem: "the recipe has no file, so no lock beside it".into(),
            });
        };
        let mut guard = self.guard.clone();
        guard.unprotect(lock);
        self.side_file_with(&guard, lock, "lock", LOCK_FILE)
    }

    /// A file the run writes besides its exports where its command line
    /// says (`what`: "report"), which may be none of the files the guard
    /// protects, no export's and not the lock; it replaces only a file of
    /// its own kind.
    pub fn side_file(&self, path: &Path, what: &'static str, replaces: Replaces) -> Result<OutputPath, SideFileError> {
        self.side_file_with(&self.guard.anywhere(), path, what, replaces)
    }

    fn side_file_with(
        &self,
        guard: &WriteGuard,
        path: &Path,
        what: &'static str,
        replaces: Replaces,
    ) -> Result<OutputPath, SideFileError> {
        let fail = |problem: String| SideFileError { what, path: path.to_owned(), problem };
        let file = Claim::File(resolve(path));
        if let Some((_, id)) = self.claims.iter().find(|(claim, _)| overlaps(claim, &file)) {
            return Err(fail(format!("is written by export `{id}`; give the {what} its own path")));
        }
        guard.check(path, replaces).map_err(|e| fail(e.problem))
    }
}

fn directory_of(file: &Path) -> PathBuf {
    file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned()
}

/// What an export writes: one file, or a split's family of shards
/// (`PREFIX-NNNNN-of-NNNNN.EXT`, however many there turn out to be).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    File(PathBuf),
    Shards { prefix: PathBuf, extension: &'static str },
}

/// Removes what killed runs left beside this recipe's exports and in its
/// directory (a `verify`'s scratch): each export's directory is swept when
/// a file is written there too, but a run whose exports are all up to date
/// writes none.
pub(super) fn sweep(recipe: &Recipe) {
    let mut dirs: Vec<&Path> = recipe
        .nodes
        .iter()
        .filter_map(|node| match &node.op {
            Op::Export(options) => options.path.parent(),
            _ => None,
        })
        .chain(recipe.source.as_deref().and_then(Path::parent))
        .map(|dir| if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs.into_iter().for_each(crate::formats::remove_dead_temporaries);
}

/// The claims of one export, resolved, each with the path as written.
fn claims(options: &ExportOptions) -> Vec<(Claim, PathBuf)> {
    let path = &options.path;
    if let Some(count) = crate::ops::export::known_file_count(options) {
        let paths = crate::ops::export::all_paths(options, count);
        let mut out: Vec<(Claim, PathBuf)> =
            paths.into_iter().map(|path| (Claim::File(resolve(&path)), path)).collect();
        out.extend(attestation(options));
        return out;
    }
    let extension = options.format.extension();
    let prefix = crate::ops::export::shard_prefix(options);
    let mut out = vec![(Claim::Shards { prefix: resolve(&prefix), extension }, path.clone())];
    if let SplitMode::Writer(_) = options.split {
        // A model that fits one shard is written as the plain file.
        out.push((Claim::File(resolve(path)), path.clone()));
    }
    out.extend(crate::ops::export::index_path(options).map(|index| (Claim::File(resolve(&index)), index.clone())));
    out.extend(attestation(options));
    out
}

/// The attestation an export writes beside its file, when it asks for one.
fn attestation(options: &ExportOptions) -> Option<(Claim, PathBuf)> {
    options.attest.then(|| {
        let path = crate::exec::provenance::attest::attestation_path(options);
        (Claim::File(resolve(&path)), path)
    })
}

fn overlaps(a: &Claim, b: &Claim) -> bool {
    match (a, b) {
        (Claim::File(x), Claim::File(y)) => x == y,
        (Claim::Shards { prefix, extension }, Claim::File(file))
        | (Claim::File(file), Claim::Shards { prefix, extension }) => is_shard_of(file, prefix, extension),
        (Claim::Shards { prefix: p, extension: e }, Claim::Shards { prefix: q, extension: f }) => p == q && e == f,
    }
}

/// Whether `file` is named `PREFIX-NNNNN-of-NNNNN.EXT`.
fn is_shard_of(file: &Path, prefix: &Path, extension: &str) -> bool {
    let (Some(name), Some(stem)) = (file.file_name(), prefix.file_name()) else { return false };
    if file.parent() != prefix.parent() {
        return false;
    }
    let (name, stem) = (name.to_string_lossy(), stem.to_string_lossy());
    let Some(rest) = name.strip_prefix(&*stem).and_then(|r| r.strip_suffix(&format!(".{extension}"))) else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() == 15
        && b[0] == b'-'
        && b[1..6].iter().all(u8::is_ascii_digit)
        && &b[6..10] == b"-of-"
        && b[10..].iter().all(u8::is_ascii_digit)
}

/// The export node of `recipe` that writes `file`: its path, or one of its
/// split's shards.
pub fn find_export(recipe: &Recipe, file: &Path) -> Option<usize> {
    let wanted = resolve(file);
    let shard = crate::formats::parse_shard_path(file);
    recipe.nodes.iter().position(|node| {
        let Op::Export(options) = &node.op else { return false };
        if let Some(count) = crate::ops::export::known_file_count(options) {
            return crate::ops::export::all_paths(options, count).iter().any(|path| resolve(path) == wanted);
        }
        let as_shard = shard.as_ref().map(|(_, no, count)| crate::ops::export::output_path(options, *no, *count));
        resolve(&options.path) == wanted || as_shard.is_some_and(|path| resolve(&path) == wanted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_recognised() {
        let prefix = Path::new("/o/model");
        assert!(is_shard_of(Path::new("/o/model-00001-of-00003.gguf"), prefix, "gguf"));
        assert!(!is_shard_of(Path::new("/o/model-00001-of-00003.safetensors"), prefix, "gguf"));
        assert!(!is_shard_of(Path::new("/o/model.gguf"), prefix, "gguf"));
        assert!(!is_shard_of(Path::new("/p/model-00001-of-00003.gguf"), prefix, "gguf"));
        assert!(!is_shard_of(Path::new("/o/model-0001-of-00003.gguf"), prefix, "gguf"));
    }
}
