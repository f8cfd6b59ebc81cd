//! Where the tool may write: the one check every output path passes, of
//! every command and every kind of file (exports, reports, locks,
//! attestations, packs, device shards, plans).
//!
//! A path's text says little: a symbolic link on the way can lead anywhere,
//! two spellings (or a hard link) can name one file, and the file already
//! there may be the user's model. So a path is resolved first (its deepest
//! existing ancestor canonicalized, the rest appended) and then refused when
//! it leaves the tree the writer may write in, lies inside a fenced
//! directory (the cache, an input's directory), is a protected file (an
//! input, the recipe, its lock, another output) under any name, is anything
//! but a regular file (a link, a FIFO, a directory, a device), or is a file
//! of another kind than the one the writer makes. What passes is an
//! [`OutputPath`], the only thing the formats' atomic outputs write to.

use std::path::{Component, Path, PathBuf};

/// Why a path may not be written, with the path as the user wrote it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", shown.display())]
pub struct WriteRefused {
    pub shown: PathBuf,
    pub problem: String,
}

/// A path [`WriteGuard::check`] let through: as written (for messages) and
/// resolved (where the bytes go, so a link swapped in later on the way is
/// not followed to a new place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPath {
    shown: PathBuf,
    resolved: PathBuf,
}

impl OutputPath {
    /// File `name` in `dir`, a directory this process made for itself
    /// (mode 0700, fresh): nothing else can have put a file or a link
    /// there, so there is nothing to check. A tool's scratch input.
    pub fn private(dir: &tempfile::TempDir, name: &str) -> OutputPath {
        let path = dir.path().join(name);
        OutputPath { shown: path.clone(), resolved: path }
    }

    pub fn shown(&self) -> &Path {
        &self.shown
    }

    pub fn resolved(&self) -> &Path {
        &self.resolved
    }
}

/// What a file already at an output path must be for the output to replace
/// it: a page replaces a page, never the model next to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaces {
    /// Any regular file (a model output replaces an older one of any kind).
    AnyFile,
    /// Only a file that begins with these bytes, described as `what`.
    FileStarting { prefix: &'static [u8], what: &'static str },
}

/// The places one command may not write, and the tree it must stay in.
#[derive(Debug, Clone, Default)]
pub struct WriteGuard {
    /// Outputs must resolve inside this directory, when set.
    root: Option<(PathBuf, String)>,
    /// Files no output may replace, under any name: (as given, resolved, what).
    files: Vec<(PathBuf, PathBuf, String)>,
    /// Directories no output may go into: (resolved, what).
    fences: Vec<(PathBuf, String)>,
}

impl WriteGuard {
    /// Outputs must stay inside `root` (`what` names it in messages:
    /// "the recipe's directory").
    pub fn within(root: &Path, what: impl Into<String>) -> WriteGuard {
        WriteGuard { root: Some((resolve(root), what.into())), ..WriteGuard::default() }
    }

    /// No output may replace `path` (`what` says what it is: "an input of
    /// the run"), whatever it is called.
    pub fn protect(&mut self, path: &Path, what: impl Into<String>) -> &mut WriteGuard {
        self.files.push((path.to_owned(), resolve(path), what.into()));
        self
    }

    /// The same guard for files a command line names anywhere (a report
    /// page, an attestation), not only inside the root.
    pub fn anywhere(&self) -> WriteGuard {
        WriteGuard { root: None, ..self.clone() }
    }

    /// Lifts the protection of `path`, for the one writer whose file it is
    /// (a run writes its own lock).
    pub fn unprotect(&mut self, path: &Path) -> &mut WriteGuard {
        let resolved = resolve(path);
        self.files.retain(|(_, protected, _)| *protected != resolved);
        self
    }

    /// No output may lie anywhere inside `dir`.
    pub fn fence(&mut self, dir: &Path, what: impl Into<String>) -> &mut WriteGuard {
        self.fences.push((resolve(dir), what.into()));
        self
    }

    /// `path` as an output that may replace only what `replaces` allows, or
    /// why it may not be written.
    pub fn check(&self, path: &Path, replaces: Replaces) -> Result<OutputPath, WriteRefused> {
        let refuse = |problem: String| WriteRefused { shown: path.to_owned(), problem };
        if path.as_os_str().is_empty() {
            return Err(refuse("an empty path".into()));
        }
        let resolved = resolve(path);
        if let Some((root, what)) = &self.root
            && !resolved.starts_with(root)
        {
            return Err(refuse(format!(
                "resolves to {}, outside {what} {} (a symbolic link on the way?)",
                resolved.display(),
                root.display()
            )));
        }
        if let Some((dir, what)) = self.fences.iter().find(|(dir, _)| resolved.starts_with(dir)) {
            return Err(refuse(format!("is inside {what} {}", dir.display())));
        }
        let existing = std::fs::symlink_metadata(path).ok();
        for (given, protected, what) in &self.files {
            let same = *protected == resolved
                || (existing.is_some() && same_file(given, path))
                || (existing.is_some() && same_file(protected, &resolved));
            if same {
                return Err(refuse(format!("is {what}; refusing to overwrite it")));
            }
        }
        if let Some(meta) = existing {
            let kind = meta.file_type();
            if kind.is_symlink() {
                let target = std::fs::read_link(path).map(|t| format!(" to {}", t.display())).unwrap_or_default();
                return Err(refuse(format!(
                    "is a symbolic link{}; an output replaces only a regular file, never what a link leads to",
                    crate::text::for_terminal(&target)
                )));
            }
            if !kind.is_file() {
                return Err(refuse(format!("is {}; an output replaces only a regular file", super::describe(kind))));
            }
            if let Replaces::FileStarting { prefix, what } = replaces
                && !starts_with(&resolved, prefix)
            {
                return Err(refuse(format!("exists and is not {what}; refusing to replace it (remove it first)")));
            }
        }
        Ok(OutputPath { shown: path.to_owned(), resolved })
    }
}

/// True when both paths name one existing file (same device and inode), so
/// writing the second would destroy the first.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn starts_with(path: &Path, prefix: &[u8]) -> bool {
    use std::io::Read;
    let Ok(file) = super::open_regular(path, super::Symlinks::Refuse) else { return false };
    let mut head = Vec::with_capacity(prefix.len());
    file.take(prefix.len() as u64).read_to_end(&mut head).is_ok() && head == prefix
}

/// `path` made absolute with every symbolic link resolved, for a path that
/// may not exist yet: the deepest existing ancestor is canonicalized and the
/// rest (which holds no link, since it does not exist) appended.
pub fn resolve(path: &Path) -> PathBuf {
    let absolute = match path.is_absolute() {
        true => path.to_owned(),
        false => std::env::current_dir().unwrap_or_default().join(path),
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other),
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(guard: &WriteGuard, path: &Path) -> String {
        guard.check(path, Replaces::AnyFile).unwrap_err().problem
    }

    #[test]
    fn resolve_follows_links_in_existing_parents_only() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("inside")).unwrap();
        std::os::unix::fs::symlink("/tmp", real.join("link")).unwrap();
        assert_eq!(resolve(&real.join("inside/new/file.gguf")), real.join("inside/new/file.gguf"));
        assert_eq!(resolve(&real.join("link/x.gguf")), Path::new("/tmp").canonicalize().unwrap().join("x.gguf"));
        assert_eq!(resolve(&real.join("inside/../y.gguf")), real.join("y.gguf"));
    }

    #[test]
    fn protected_files_are_refused_under_every_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("model.gguf"), b"GGUF").unwrap();
        std::fs::hard_link(d.join("model.gguf"), d.join("hard.gguf")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let mut guard = WriteGuard::within(d, "the recipe's directory");
        guard.protect(&d.join("model.gguf"), "an input of the run");
        for path in ["model.gguf", "sub/../model.gguf", "./model.gguf", "hard.gguf"] {
            assert_eq!(refused(&guard, &d.join(path)), "is an input of the run; refusing to overwrite it", "{path}");
        }
        assert!(guard.check(&d.join("new.gguf"), Replaces::AnyFile).is_ok());
    }

    #[test]
    fn fences_roots_links_and_special_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("cache/blobs")).unwrap();
        std::fs::write(d.join("target"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("link.gguf")).unwrap();
        std::os::unix::fs::symlink("/tmp", d.join("out")).unwrap();
        let mut guard = WriteGuard::within(d, "the recipe's directory");
        guard.fence(&d.join("cache"), "the cache");
        assert!(refused(&guard, &d.join("cache/blobs/x")).starts_with("is inside the cache"));
        assert!(refused(&guard, &d.join("out/x.gguf")).contains("outside the recipe's directory"));
        assert!(refused(&guard, &d.join("link.gguf")).starts_with("is a symbolic link to"));
        assert!(refused(&guard, &d.join("cache")).starts_with("is inside the cache"));
        assert_eq!(refused(&WriteGuard::default(), d), "is a directory; an output replaces only a regular file");
        assert_eq!(refused(&WriteGuard::default(), Path::new("")), "an empty path");
        let devnull = refused(&WriteGuard::default(), Path::new("/dev/null"));
        assert_eq!(devnull, "is a character device; an output replaces only a regular file");
    }

    #[test]
    fn a_page_replaces_only_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let (page, model) = (dir.path().join("page.html"), dir.path().join("model.gguf"));
        std::fs::write(&page, b"<!DOCTYPE html>\n<html>").unwrap();
        std::fs::write(&model, b"GGUF\x03\0\0\0").unwrap();
        let replaces = Replaces::FileStarting { prefix: b"<!DOCTYPE html>", what: "an HTML page" };
        let guard = WriteGuard::default();
        assert!(guard.check(&page, replaces).is_ok());
        assert!(guard.check(&dir.path().join("new.html"), replaces).is_ok());
        let problem = guard.check(&model, replaces).unwrap_err().problem;
        assert_eq!(problem, "exists and is not an HTML page; refusing to replace it (remove it first)");
    }
}
