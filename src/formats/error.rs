//! The one error type for reading and writing model files.
//!
//! Every error names the file; errors about content also name the byte offset
//! where the reader found the problem and what it expected there.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::text::Name;
use crate::types::GgmlType;

/// An error while reading or writing a model file.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {kind}", path.display(), offset.map(|o| format!(": at byte {o}")).unwrap_or_default())]
pub struct FormatError {
    pub path: PathBuf,
    /// Byte offset of the problem in the file, where one applies.
    pub offset: Option<u64>,
    pub kind: ErrorKind,
    /// Where in loading the model it failed, once known.
    pub stage: Option<LoadStage>,
}

/// The stages of loading a model (the start-up metrics): a failure
/// report names the one it happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoadStage {
    /// Opening the file and mapping it (a failed map falls back to reads and is no failure).
    Mapping,
    /// Parsing the container's header: metadata and tensor descriptors.
    Header,
    /// Checking where the tensors lie: alignment, bounds, overlaps.
    Placement,
    /// Reading tensor bytes.
    Read,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    #[error("{}", crate::files::IoText(.0))]
    Io(#[from] io::Error),
    #[error(
        "unknown file format: the first bytes are {first_bytes} (expected GGUF, GGML/GGMF/GGJT, SafeTensors, PyTorch or ONNX)"
    )]
    UnknownFormat { first_bytes: HexBytes },
    #[error("unsupported {format} version {version} (supported: {supported})")]
    UnsupportedVersion { format: &'static str, version: u32, supported: &'static str },
    #[error("file ends early: {what} needs {needed} bytes, {available} left")]
    Truncated { what: String, needed: u64, available: u64 },
    #[error("{what} claims {count} entries, but only {available} bytes remain (each needs at least {min_each})")]
    CountTooLarge { what: String, count: u64, min_each: u64, available: u64 },
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 { what: String },
    #[error("unknown metadata value type {id} for {what}")]
    UnknownValueType { id: u32, what: String },
    #[error("invalid bool value {value} for {what} (expected 0 or 1)")]
    InvalidBool { value: u8, what: String },
    #[error("duplicate metadata key `{}`", Name(.key))]
    DuplicateKey { key: String },
    #[error("metadata key `{}` has type {found}, expected {expected}", Name(.key))]
    WrongValueType { key: String, expected: &'static str, found: String },
    #[error("general.alignment is {alignment}; it must be a non-zero power of two")]
    BadAlignment { alignment: u64 },
    #[error("tensor `{}` has unknown type id {id}", Name(.tensor))]
    UnknownTensorType { tensor: String, id: u32 },
    #[error("tensor `{}` has type {name} (id {id}), which ggml has removed", Name(.tensor))]
    RemovedTensorType { tensor: String, id: u32, name: &'static str },
    #[error(transparent)]
    NoBigEndianLayout(#[from] crate::formats::gguf::NoBigEndianLayout),
    #[error("tensor `{}` has {n_dims} dimensions (expected 1 to {max})", Name(.tensor))]
    BadDimensionCount { tensor: String, n_dims: u64, max: u64 },
    #[error("tensor `{}` shape {shape:?} has more elements than fit in 63 bits", Name(.tensor))]
    ElementCountOverflow { tensor: String, shape: Vec<u64> },
    #[error("tensor `{}` rows of {row} elements are not a multiple of the {ty} block size {block}", Name(.tensor))]
    RowNotBlockMultiple { tensor: String, row: u64, ty: GgmlType, block: u64 },
    #[error("duplicate tensor name `{}`", Name(.tensor))]
    DuplicateTensor { tensor: String },
    #[error("tensor `{}` data offset {offset} is not a multiple of the alignment {alignment}", Name(.tensor))]
    MisalignedTensor { tensor: String, offset: u64, alignment: u64 },
    #[error("tensor `{}` data [{start}, {end}) lies outside the file ({file_len} bytes)", Name(.tensor))]
    TensorOutOfBounds { tensor: String, start: u64, end: u64, file_len: u64 },
    #[error("tensor `{}` data overlaps tensor `{}`", Name(.tensor), Name(.other))]
    TensorOverlap { tensor: String, other: String },
    #[error("{0}")]
    Invalid(String),
}

impl FormatError {
    pub fn new(path: &Path, offset: Option<u64>, kind: ErrorKind) -> FormatError {
        FormatError { path: path.to_owned(), offset, kind, stage: None }
    }

    /// The error as failing in `stage`, unless an inner step already said where.
    pub fn in_stage(mut self, stage: LoadStage) -> FormatError {
        self.stage.get_or_insert(stage);
        self
    }

    /// Failing while reading the header: in placement when the header is
    /// sound but a tensor lies wrong.
    pub fn in_header(self) -> FormatError {
        let stage = match self.kind {
            ErrorKind::MisalignedTensor { .. }
            | ErrorKind::TensorOutOfBounds { .. }
            | ErrorKind::TensorOverlap { .. } => LoadStage::Placement,
            _ => LoadStage::Header,
        };
        self.in_stage(stage)
    }

    pub fn at(path: &Path, offset: u64, kind: ErrorKind) -> FormatError {
        FormatError::new(path, Some(offset), kind)
    }

    pub fn io(path: &Path, error: io::Error) -> FormatError {
        FormatError::new(path, None, ErrorKind::Io(error))
    }
}

/// Bytes shown as hex and, where printable, as text: `47 47 55 46 ("GGUF")`.
#[derive(Debug, Clone)]
pub struct HexBytes(pub Vec<u8>);

impl fmt::Display for HexBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(empty file)");
        }
        let hex: Vec<String> = self.0.iter().map(|b| format!("{b:02x}")).collect();
        let text: String =
            self.0.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        write!(f, "{} (\"{text}\")", hex.join(" "))
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
