//! Where a conversion reads a checkpoint's files: every read of a
//! checkpoint directory goes through [`CheckpointFiles`], so a recipe's run
//! can hand the converter exactly the files it hashed (each checked unchanged
//! as it is read) and nothing its key does not cover; [`files_read`] says
//! which files those are.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::CheckpointError;
use crate::formats::{ModelFile, OpenOptions};

/// The most a checkpoint's JSON or text file may hold (a large vocabulary's
/// `tokenizer.json` runs to tens of megabytes).
pub const TEXT_LIMIT: u64 = 1 << 30;

/// Opens a checkpoint's files.
pub trait CheckpointFiles: Send + Sync {
    /// `path`'s bytes, at most `limit` of them; `None` when there is no
    /// such file.
    fn read(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckpointError>;

    /// The weights file at `path`, its header read.
    fn model(&self, path: &Path) -> Result<Arc<ModelFile>, CheckpointError>;

    /// The regular files directly in `dir`, sorted by name; none when there
    /// is no such directory.
    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError>;
}

/// The file system as it stands: for reading a checkpoint outside a run.
pub struct OnDisk;

impl CheckpointFiles for OnDisk {
    fn read(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckpointError> {
        match crate::files::read_regular(path, limit) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CheckpointError::Io { path: path.to_owned(), source }),
        }
    }

    fn model(&self, path: &Path) -> Result<Arc<ModelFile>, CheckpointError> {
        Ok(Arc::new(ModelFile::open(path, OpenOptions::default())?))
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
        regular_files(dir).map_err(|source| CheckpointError::Io { path: dir.to_owned(), source })
    }
}

/// The regular files directly in `dir` (symlinks followed), sorted; none
/// when there is no such directory.
fn regular_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Whether a conversion may read `file` in the checkpoint's subdirectory
/// `dir`: a named chat template, or a sentence-transformers module's
/// settings (`1_Pooling/config.json`, the pooling mode).
fn read_below(dir: &str, file: &str) -> bool {
    match dir {
        "additional_chat_templates" => file.ends_with(".jinja"),
        _ => file == "config.json",
    }
}

/// Every file converting the checkpoint in `dir` may read, sorted: what a
/// run hashes into the input's key.
pub fn files_read(dir: &Path) -> crate::formats::Result<Vec<PathBuf>> {
    let io = |e| crate::formats::FormatError::io(dir, e);
    let mut files = regular_files(dir).map_err(io)?;
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let sub = entry.map_err(io)?.path();
        let Some(sub_name) = sub.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
        // Hidden directories (`.git`, the Hub client's `.cache`) are never read.
        if sub_name.starts_with('.') || !sub.is_dir() {
            continue;
        }
        let wanted =
            |file: &PathBuf| file.file_name().and_then(|n| n.to_str()).is_some_and(|n| read_below(&sub_name, n));
        files.extend(
            regular_files(&sub).map_err(|e| crate::formats::FormatError::io(&sub, e))?.into_iter().filter(wanted),
        );
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_hashes_the_directory_and_what_a_conversion_reads_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            "config.json",
            "model.safetensors",
            "1_Pooling/config.json",
            "1_Pooling/notes.txt",
            "additional_chat_templates/rag.jinja",
            "additional_chat_templates/README.md",
            "onnx/model.onnx",
            ".git/config.json",
        ];
        for file in files {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, file).unwrap();
        }
        let read: Vec<String> = files_read(dir.path())
            .unwrap()
            .iter()
            .map(|path| path.strip_prefix(dir.path()).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            read,
            ["1_Pooling/config.json", "additional_chat_templates/rag.jinja", "config.json", "model.safetensors"]
        );
    }
}
