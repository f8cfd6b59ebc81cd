//! The run's input files, pinned: opened on first use, refused once their
//! stat moves; where an input tensor's rows lie in them.

use super::*;

/// An input file as it was when the run hashed it.
#[derive(Debug, Clone)]
pub struct PinnedFile {
    pub path: PathBuf,
    /// Its stat fingerprint then: while it holds, the content hash does.
    pub stat: Key,
}

/// The input files of a run, by content hash, opened on first use and
/// pinned: a file whose stat moved since it was hashed is refused, so
/// nothing computed from other bytes is ever stored under its key.
pub struct InputFiles {
    files: HashMap<Key, PinnedFile>,
    options: OpenOptions,
    open: Mutex<HashMap<Key, Arc<ModelFile>>>,
}

impl InputFiles {
    pub fn new(files: HashMap<Key, PinnedFile>, options: OpenOptions) -> InputFiles {
        InputFiles { files, options, open: Mutex::new(HashMap::new()) }
    }

    pub fn path(&self, content: &Key) -> Option<&PathBuf> {
        self.files.get(content).map(|f| &f.path)
    }

    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.values().map(|f| &f.path)
    }

    /// Each file's content hash with its stat, while it still holds.
    pub fn pins(&self) -> impl Iterator<Item = crate::store::fingerprint::Pin> + '_ {
        self.files
            .iter()
            .filter_map(|(hash, pinned)| crate::store::fingerprint::Pin::of(&pinned.path, *hash, pinned.stat))
    }

    /// The content hash the run pinned for the file at `path`.
    pub fn key_of(&self, path: &std::path::Path) -> Option<Key> {
        self.files.iter().find(|(_, f)| f.path == path).map(|(key, _)| *key)
    }

    pub fn model(&self, content: &Key) -> Result<Arc<ModelFile>, MaterializeError> {
        let pinned = self.files.get(content).ok_or(MaterializeError::UnknownInput(*content))?;
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
    pub fn load_of(&self, path: &std::path::Path) -> Option<crate::formats::LoadReport> {
        let key = self.key_of(path)?;
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&key).map(|model| model.load.clone())
    }

    /// Fails when any input's stat moved since the run hashed it.
    pub fn check_unchanged(&self) -> Result<(), MaterializeError> {
        self.files.values().try_for_each(|pinned| self.check(pinned))
    }

    fn check(&self, pinned: &PinnedFile) -> Result<(), MaterializeError> {
        match std::fs::metadata(&pinned.path) {
            Ok(meta) if stat_key(&meta) == pinned.stat => Ok(()),
            _ => Err(MaterializeError::InputChanged(pinned.path.clone())),
        }
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
