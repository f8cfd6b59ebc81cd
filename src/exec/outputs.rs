//! Where exports may write, decided on resolved paths before anything runs.
//!
//! A path's text says little: a symlinked directory inside the output tree
//! can lead anywhere, two spellings can name one file, and a split's shard
//! names can meet a plain export's. So every path an export claims is
//! resolved (its deepest existing ancestor canonicalized, the rest appended)
//! and must be inside the recipe's directory (for a recipe file; a one-shot
//! command writes where its command line says), outside the store, not an
//! input or the recipe itself, absent or a regular file, and claimed by no
//! other export.

use std::path::{Component, Path, PathBuf};

use crate::ops::Op;
use crate::ops::export::{ExportFormat, ExportOptions};
use crate::recipe::Recipe;

#[derive(Debug, thiserror::Error)]
#[error("export `{id}` to {}: {problem}", path.display())]
pub struct OutputError {
    pub id: String,
    pub path: PathBuf,
    pub problem: String,
}

/// What an export writes: one file, or a split's family of shards
/// (`PREFIX-NNNNN-of-NNNNN.EXT`, however many there turn out to be).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    File(PathBuf),
    Shards { prefix: PathBuf, extension: &'static str },
}

/// Checks every export of `recipe` against the rules above. `store` is the
/// store's directory when it has one; `inputs` are the run's input files.
pub(super) fn check_exports<'a>(
    recipe: &Recipe,
    store: Option<&Path>,
    inputs: impl Iterator<Item = &'a PathBuf>,
) -> Result<(), OutputError> {
    let root = match &recipe.source {
        Some(source) => {
            let dir = source.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            Some(resolve(dir))
        }
        None => None,
    };
    let store = store.map(resolve);
    let inputs: Vec<PathBuf> = inputs.map(|p| resolve(p)).collect();
    let recipe_file = recipe.source.as_deref().map(resolve);
    let mut claimed: Vec<(Claim, &str)> = Vec::new();
    for node in &recipe.nodes {
        let Op::Export(options) = &node.op else { continue };
        for (claim, shown) in claims(options) {
            let fail = |problem: String| OutputError { id: node.id.clone(), path: shown.clone(), problem };
            let resolved = match &claim {
                Claim::File(path) | Claim::Shards { prefix: path, .. } => path,
            };
            if let Some(root) = &root
                && !resolved.starts_with(root)
            {
                return Err(fail(format!(
                    "resolves to {}, outside the recipe's directory {} (a symbolic link on the way?)",
                    resolved.display(),
                    root.display()
                )));
            }
            if let Some(store) = &store
                && resolved.starts_with(store)
            {
                return Err(fail(format!("is inside the cache {}", store.display())));
            }
            if let Claim::File(path) = &claim {
                if inputs.contains(path) {
                    return Err(fail("is an input of the run; refusing to overwrite the input".into()));
                }
                if recipe_file.as_ref() == Some(path) {
                    return Err(fail("is the recipe itself; refusing to overwrite it".into()));
                }
                if let Ok(meta) = std::fs::symlink_metadata(path)
                    && !meta.is_file()
                {
                    let kind = crate::files::describe(meta.file_type());
                    return Err(fail(format!("is {kind}; an export replaces only a regular file")));
                }
            }
            if let Some((_, other)) = claimed.iter().find(|(c, _)| overlaps(c, &claim)) {
                return Err(fail(format!("`{other}` writes there too; give each export its own path")));
            }
            claimed.push((claim, &node.id));
        }
    }
    Ok(())
}

/// Removes what killed runs left beside this recipe's exports (each
/// export's directory is swept when a file is written there too, but a run
/// whose exports are all up to date writes none).
pub(super) fn sweep(recipe: &Recipe) {
    let mut dirs: Vec<&Path> = recipe
        .nodes
        .iter()
        .filter_map(|node| match &node.op {
            Op::Export(options) => options.path.parent(),
            _ => None,
        })
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
        return paths.into_iter().map(|path| (Claim::File(resolve(&path)), path)).collect();
    }
    let extension = match options.format {
        ExportFormat::Gguf => "gguf",
        ExportFormat::SafeTensors => "safetensors",
    };
    let suffix = format!(".{extension}");
    let text = path.as_os_str().to_string_lossy();
    let prefix = PathBuf::from(text.strip_suffix(suffix.as_str()).unwrap_or(&text));
    let mut out = vec![(Claim::Shards { prefix: resolve(&prefix), extension }, path.clone())];
    out.extend(crate::ops::export::index_path(options).map(|index| (Claim::File(resolve(&index)), index.clone())));
    out
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
}
