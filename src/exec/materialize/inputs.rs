//! The run's input files, pinned: opened on first use, refused once their
//! stat moves; where an input tensor's rows lie in them. A conversion reads
//! its checkpoint through them too, so it reads nothing the run did not hash.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::convert::{CheckpointError, CheckpointFiles};
use crate::ops::convert::PinnedFiles;

/// An input file as it was when the run hashed it.
#[derive(Debug, Clone)]
pub struct PinnedFile {
    pub path: PathBuf,
    /// Its content hash.
    pub content: Key,
    /// Its stat fingerprint then: while it holds, the content hash does.
    pub stat: Key,
}

/// The input files of a run, by path and by content hash, opened on first
/// use and pinned: a file whose stat moved since it was hashed is refused,
/// so nothing computed from other bytes is ever stored under its key.
pub struct InputFiles {
    by_path: BTreeMap<PathBuf, PinnedFile>,
    /// One path for each content (several files may hold the same bytes).
    by_content: HashMap<Key, PathBuf>,
    options: OpenOptions,
    open: Mutex<HashMap<Key, Arc<ModelFile>>>,
}

impl InputFiles {
    pub fn new(files: Vec<PinnedFile>, options: OpenOptions) -> InputFiles {
        let mut by_content = HashMap::new();
        for file in &files {
            by_content.entry(file.content).or_insert_with(|| file.path.clone());
        }
        let by_path = files.into_iter().map(|file| (file.path.clone(), file)).collect();
        InputFiles { by_path, by_content, options, open: Mutex::new(HashMap::new()) }
    }

    pub fn path(&self, content: &Key) -> Option<&PathBuf> {
        self.by_content.get(content)
    }

    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.by_path.keys()
    }

    /// Each file's content hash with its stat, while it still holds.
    pub fn pins(&self) -> impl Iterator<Item = crate::store::fingerprint::Pin> + '_ {
        self.by_path
            .values()
            .filter_map(|pinned| crate::store::fingerprint::Pin::of(&pinned.path, pinned.content, pinned.stat))
    }

    /// The content hash the run pinned for the file at `path`.
    pub fn key_of(&self, path: &Path) -> Option<Key> {
        self.by_path.get(path).map(|pinned| pinned.content)
    }

    pub fn model(&self, content: &Key) -> Result<Arc<ModelFile>, MaterializeError> {
        let pinned = self
            .by_content
            .get(content)
            .and_then(|path| self.by_path.get(path))
            .ok_or(MaterializeError::UnknownInput(*content))?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(model) = open.get(content) {
            return Ok(Arc::clone(model));
        }
        // A file that fails to parse may have changed since it was hashed
        // (truncated by a copy, say): that is the error then, not its parse.
        let model = match ModelFile::open(&pinned.path, self.options) {
            Ok(model) => Arc::new(model),
            Err(e) => {
                self.check(pinned)?;
                return Err(e.into());
            }
        };
        self.check(pinned)?;
        open.insert(*content, Arc::clone(&model));
        Ok(model)
    }

    /// How the file at `path` was opened, when the run opened it.
    pub fn load_of(&self, path: &Path) -> Option<crate::formats::LoadReport> {
        let key = self.key_of(path)?;
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&key).map(|model| model.load.clone())
    }

    /// Fails when any input's stat moved since the run hashed it.
    pub fn check_unchanged(&self) -> Result<(), MaterializeError> {
        self.by_path.values().try_for_each(|pinned| self.check(pinned))
    }

    fn check(&self, pinned: &PinnedFile) -> Result<(), MaterializeError> {
        match std::fs::metadata(&pinned.path) {
            Ok(meta) if stat_key(&meta) == pinned.stat => Ok(()),
            _ => Err(MaterializeError::InputChanged(pinned.path.clone())),
        }
    }

    /// The file at `path` as the run pinned it; `None` when there is no
    /// such file, an error when there is one the run did not hash.
    fn pinned_at(&self, path: &Path) -> Result<Option<&PinnedFile>, CheckpointError> {
        match self.by_path.get(path) {
            Some(pinned) => Ok(Some(pinned)),
            None if path.exists() => Err(unpinned(path, "is not among the files the run hashed")),
            None => Ok(None),
        }
    }
}

fn unpinned(path: &Path, problem: &str) -> CheckpointError {
    CheckpointError::Io { path: path.to_owned(), source: io::Error::other(problem) }
}

fn changed(error: MaterializeError, path: &Path) -> CheckpointError {
    match error {
        MaterializeError::Format(e) => CheckpointError::Format(e),
        _ => unpinned(path, "changed during the run; nothing computed from it was kept (run again)"),
    }
}

impl CheckpointFiles for InputFiles {
    fn read(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckpointError> {
        let Some(pinned) = self.pinned_at(path)? else { return Ok(None) };
        let bytes = crate::files::read_regular(path, limit)
            .map_err(|source| CheckpointError::Io { path: path.to_owned(), source })?;
        self.check(pinned).map_err(|e| changed(e, path))?;
        Ok(Some(bytes))
    }

    fn model(&self, path: &Path) -> Result<Arc<ModelFile>, CheckpointError> {
        let pinned = self.pinned_at(path)?.ok_or_else(|| unpinned(path, "no such file"))?;
        InputFiles::model(self, &pinned.content).map_err(|e| changed(e, path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
        Ok(self.by_path.keys().filter(|path| path.parent() == Some(dir)).cloned().collect())
    }
}

impl PinnedFiles for InputFiles {
    fn key_of(&self, path: &Path) -> Option<Key> {
        InputFiles::key_of(self, path)
    }
}

impl Materializer<'_> {
    pub(super) fn big_endian_input(
        &self,
        tensor: &Tensor,
    ) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        self.stored_input(tensor, |layout| {
            matches!(layout, StoredLayout::Converted(ElementConversion::FromBigEndian(_)))
        })
    }

    /// The input file and range holding `tensor`'s bytes as they are, if any.
    pub(super) fn input_range(&self, tensor: &Tensor) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        self.stored_input(tensor, |layout| matches!(layout, StoredLayout::Native))
    }

    /// The input file and stored range of `tensor`, when it is an input's
    /// tensor stored in a layout `wanted` takes.
    pub(super) fn stored_input(
        &self,
        tensor: &Tensor,
        wanted: fn(&StoredLayout) -> bool,
    ) -> Result<Option<(Arc<ModelFile>, u64, u64)>, MaterializeError> {
        let TensorData::Input { file, index } = &tensor.data else { return Ok(None) };
        let model = self.files.model(file)?;
        let info = self.input_info(&model, *index, tensor)?;
        let (offset, len, keep) = (info.file_offset, info.stored_len, wanted(&info.layout));
        Ok(keep.then_some((model, offset, len)))
    }

    /// Rows `first..first + n` of `tensor`, the `index`th tensor of input
    /// `model`, where they lie (mapped, or read).
    pub(super) fn input_rows<'m>(
        &self,
        model: &'m ModelFile,
        index: usize,
        tensor: &Tensor,
        first: usize,
        n: usize,
    ) -> Result<std::borrow::Cow<'m, [u8]>, MaterializeError> {
        let info = self.input_info(model, index, tensor)?;
        let row = row_bytes(tensor) as u64;
        Ok(model.tensor_data_range(info, first as u64 * row, n as u64 * row)?)
    }

    pub(super) fn input_info<'m>(
        &self,
        model: &'m ModelFile,
        index: usize,
        tensor: &Tensor,
    ) -> Result<&'m crate::model::TensorInfo, MaterializeError> {
        model.tensors.get(index).filter(|t| t.dims == tensor.dims && t.ggml_type == tensor.ggml_type).ok_or_else(|| {
            MaterializeError::Io {
                tensor: tensor.name.clone(),
                source: io::Error::other(format!("{} has no tensor {index}", model.path().display())),
            }
        })
    }
}
