//! Format detection by magic bytes, never by file extension.

use std::path::Path;

use super::error::{ErrorKind, FormatError, HexBytes, Result};
use super::ggml_legacy::LegacyVariant;
use super::source::{OpenOptions, Source};

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetectedFormat {
    Gguf,
    GgmlLegacy(LegacyVariant),
    SafeTensors,
    /// A zip archive: what `torch.save` writes.
    PyTorchZip,
    /// What `torch.save` wrote before PyTorch 1.6: pickles, then storages.
    PyTorchLegacy,
    /// A serialized ONNX `ModelProto` (protobuf has no magic; see
    /// `onnx::looks_like_model`).
    Onnx,
}

impl DetectedFormat {
    pub fn name(self) -> &'static str {
        match self {
            DetectedFormat::Gguf => "GGUF",
            DetectedFormat::GgmlLegacy(variant) => variant.name(),
            DetectedFormat::SafeTensors => "SafeTensors",
            DetectedFormat::PyTorchZip => "PyTorch zip",
            DetectedFormat::PyTorchLegacy => "PyTorch (legacy)",
            DetectedFormat::Onnx => "ONNX",
        }
    }
}

/// Detects the format of `head`, the first (up to 16) bytes of a file.
pub fn detect_bytes(head: &[u8]) -> Option<DetectedFormat> {
    if head.starts_with(&super::gguf::MAGIC) {
        return Some(DetectedFormat::Gguf);
    }
    if head.starts_with(b"PK\x03\x04") {
        return Some(DetectedFormat::PyTorchZip);
    }
    if head.starts_with(&super::torch::LEGACY_MAGIC) {
        return Some(DetectedFormat::PyTorchLegacy);
    }
    let word = |range: std::ops::Range<usize>| head.get(range);
    if let Some(magic) = word(0..4) {
        let magic = u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]);
        if let Some(variant) = LegacyVariant::from_magic(magic) {
            return Some(DetectedFormat::GgmlLegacy(variant));
        }
    }
    // SafeTensors: a little-endian u64 header length, then a JSON object.
    // Any length is taken as one, so the reader can say what is wrong with it
    // (a cut-off download, a corrupt length) instead of "unknown format".
    if let (Some(len), Some(b'{')) = (word(0..8), head.get(8)) {
        let header_len = u64::from_le_bytes(len.try_into().ok()?);
        if header_len >= 2 {
            return Some(DetectedFormat::SafeTensors);
        }
    }
    super::onnx::looks_like_model(head).then_some(DetectedFormat::Onnx)
}

/// Detects the format of the file at `path`.
pub fn detect(path: &Path) -> Result<DetectedFormat> {
    let source = Source::open(path, OpenOptions { use_mmap: false })?;
    let head = source.read_range(0, source.len().min(16))?;
    detect_bytes(&head)
        .ok_or_else(|| FormatError::at(path, 0, ErrorKind::UnknownFormat { first_bytes: HexBytes(head.to_vec()) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics() {
        assert_eq!(detect_bytes(b"GGUF\x03\0\0\0"), Some(DetectedFormat::Gguf));
        assert_eq!(detect_bytes(b"tjgg\x03\0\0\0"), Some(DetectedFormat::GgmlLegacy(LegacyVariant::Ggjt)));
        assert_eq!(detect_bytes(b"fmgg\x01\0\0\0"), Some(DetectedFormat::GgmlLegacy(LegacyVariant::Ggmf)));
        assert_eq!(detect_bytes(b"lmgg\0\0\0\0"), Some(DetectedFormat::GgmlLegacy(LegacyVariant::Ggml)));
        assert_eq!(detect_bytes(b"PK\x03\x04rest"), Some(DetectedFormat::PyTorchZip));
        assert_eq!(detect_bytes(b"\x10\0\0\0\0\0\0\0{\"a\":1}"), Some(DetectedFormat::SafeTensors));
        assert_eq!(detect_bytes(b"\x00\xe1\xf5\x05\0\0\0\0{"), Some(DetectedFormat::SafeTensors));
        assert_eq!(detect_bytes(b"\x01\xe1\xf5\x05\0\0\0\0{"), Some(DetectedFormat::SafeTensors));
        assert_eq!(detect_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff{"), Some(DetectedFormat::SafeTensors));
        assert_eq!(detect_bytes(b"\x01\0\0\0\0\0\0\0{"), None);
        assert_eq!(detect_bytes(b"\x08\x08\x12\x07pytorch"), Some(DetectedFormat::Onnx));
        assert_eq!(detect_bytes(b"\x08\x0a\x3a\x90\x01"), Some(DetectedFormat::Onnx));
        assert_eq!(detect_bytes(b"\x08\x00\x12"), None);
        assert_eq!(detect_bytes(b"hello world"), None);
        assert_eq!(detect_bytes(b""), None);
    }
}
