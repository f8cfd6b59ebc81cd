//! `edit`: metadata and tensor-name edits written as a new GGUF file.
//!
//! Tensor bytes are copied, never decoded. With no edits the output is the
//! input's round trip: byte-identical for any file llama.cpp or gguf-py wrote.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::formats::{AtomicOutput, FormatError, ModelFile, OpenOptions, TensorDataSource, gguf, same_file};
use crate::model::{Metadata, TensorInfo, Value, ValueType};

/// The edits, applied in this order: deletions, then settings, then renames.
#[derive(Debug, Clone, Default)]
pub struct Edits {
    pub set: Vec<(String, Value)>,
    pub delete: Vec<String>,
    pub rename_tensors: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("refusing to overwrite the input: {} is {}", output.display(), input.display())]
    OutputIsInput { input: PathBuf, output: PathBuf },
    #[error("cannot delete `{0}`: no such metadata key")]
    NoSuchKey(String),
    #[error("cannot rename `{0}`: no such tensor")]
    NoSuchTensor(String),
    #[error("cannot rename `{from}` to `{to}`: a tensor of that name exists")]
    TensorExists { from: String, to: String },
    #[error("cannot set `{key}`: {reason}")]
    BadValue { key: String, reason: String },
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// Parses `KEY=TYPE:VALUE`, e.g. `general.name=str:tiny` or `llama.context_length=u32:4096`.
pub fn parse_set(text: &str) -> Result<(String, Value), String> {
    let (key, typed) = text.split_once('=').ok_or_else(|| format!("`{text}` is not KEY=TYPE:VALUE"))?;
    let (ty, value) = typed.split_once(':').ok_or_else(|| format!("`{text}` is not KEY=TYPE:VALUE"))?;
    let value_type = ValueType::from_name(ty).ok_or_else(|| {
        let names: Vec<&str> = ValueType::ALL.iter().filter(|t| **t != ValueType::Array).map(|t| t.name()).collect();
        format!("unknown type `{ty}` in `{text}` (expected one of {})", names.join(", "))
    })?;
    if key.is_empty() {
        return Err(format!("`{text}` has an empty key"));
    }
    Ok((key.to_owned(), Value::parse(value_type, value)?))
}

/// Parses `OLD=NEW`.
pub fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((old, new)) if !old.is_empty() && !new.is_empty() => Ok((old.to_owned(), new.to_owned())),
        _ => Err(format!("`{text}` is not OLD=NEW")),
    }
}

/// Applies `edits` to a model's metadata and tensor list.
pub fn apply(metadata: &mut Metadata, tensors: &mut [TensorInfo], edits: &Edits) -> Result<(), EditError> {
    for key in &edits.delete {
        metadata.remove(key).ok_or_else(|| EditError::NoSuchKey(key.clone()))?;
    }
    for (key, value) in &edits.set {
        if key == gguf::ALIGNMENT_KEY && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
            return Err(EditError::BadValue { key: key.clone(), reason: "must be a u32 power of two".into() });
        }
        metadata.set(key, value.clone());
    }
    let mut names: HashSet<String> = tensors.iter().map(|t| t.name.clone()).collect();
    for (from, to) in &edits.rename_tensors {
        if from == to {
            continue;
        }
        if names.contains(to) {
            return Err(EditError::TensorExists { from: from.clone(), to: to.clone() });
        }
        let tensor =
            tensors.iter_mut().find(|t| &t.name == from).ok_or_else(|| EditError::NoSuchTensor(from.clone()))?;
        tensor.name = to.clone();
        names.remove(from);
        names.insert(to.clone());
    }
    Ok(())
}

/// What `edit` wrote.
#[derive(Debug, Clone)]
pub struct EditSummary {
    pub bytes_written: u64,
    pub n_tensors: usize,
    pub n_keys: usize,
}

/// Reads `input`, applies `edits` and writes `output` as GGUF v3 in the
/// input's byte order. The output appears only when complete.
pub fn edit_file(input: &Path, output: &Path, edits: &Edits, open: OpenOptions) -> Result<EditSummary, EditError> {
    if same_file(input, output) {
        return Err(EditError::OutputIsInput { input: input.to_owned(), output: output.to_owned() });
    }
    let model = ModelFile::open(input, open)?;
    let mut metadata = model.metadata.clone();
    let mut tensors = model.tensors.clone();
    apply(&mut metadata, &mut tensors, edits)?;

    let write_err = |source| EditError::Write { path: output.to_owned(), source };
    let mut out = AtomicOutput::create(output).map_err(write_err)?;
    let mut data = CopyFrom { model: &model };
    let layout = gguf::write_gguf(out.writer(), model.endian, &metadata, &tensors, &mut data).map_err(write_err)?;
    out.commit().map_err(write_err)?;
    Ok(EditSummary { bytes_written: layout.file_len, n_tensors: tensors.len(), n_keys: metadata.len() })
}

/// Tensor bytes copied from the input, in the input's tensor order.
struct CopyFrom<'a> {
    model: &'a ModelFile,
}

impl TensorDataSource for CopyFrom<'_> {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> io::Result<()> {
        self.model.copy_tensor_data(&self.model.tensors[tensor_idx], out)
    }
}
