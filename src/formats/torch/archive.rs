//! The zip archive `torch.save` writes: `PREFIX/data.pkl` (the pickle),
//! `PREFIX/byteorder` (`little` or `big`; absent before PyTorch 1.10, when
//! it was always little), and one record `PREFIX/data/KEY` per storage, all
//! stored uncompressed, so a storage is one run of the file's bytes. The
//! prefix is `archive` or the saved file's stem; whatever it is, it is the
//! directory holding `data.pkl`.

use std::collections::HashMap;
use std::path::Path;

use zip::{CompressionMethod, ZipArchive};

use super::super::error::{ErrorKind, FormatError, Result};
use super::super::source::Source;

/// A storage record: where its bytes start in the file and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageRecord {
    pub offset: u64,
    pub len: u64,
    /// Compressed records cannot be mapped; refused when a tensor uses one.
    pub stored: bool,
}

/// What of the archive the state dict is read from.
pub struct Archive {
    /// What the pickle is called in messages: `data.pkl`.
    pub pickle_name: &'static str,
    /// `data.pkl`'s bytes.
    pub pickle: Vec<u8>,
    /// The file offset of `data.pkl`'s first byte.
    pub pickle_offset: u64,
    /// Storage key (the `KEY` of `data/KEY`) to its record.
    pub storages: HashMap<String, StorageRecord>,
}

/// A record's name, where its bytes start, its size, and its compression.
struct Record {
    name: String,
    offset: u64,
    len: u64,
    compression: CompressionMethod,
}

pub(super) fn read(source: &Source) -> Result<Archive> {
    let path = source.path();
    let zip_error = |e: zip::result::ZipError| invalid(path, format!("not a readable zip archive: {e}"));
    let mut zip = ZipArchive::new(source.positioned()).map_err(zip_error)?;
    let mut records = Vec::with_capacity(zip.len());
    for index in 0..zip.len() {
        let file = zip.by_index_raw(index).map_err(zip_error)?;
        let name = file.name().map_err(zip_error)?.into_owned();
        let offset = file.data_start().ok_or_else(|| invalid(path, format!("record `{name}` has no data offset")))?;
        records.push(Record { name, offset, len: file.compressed_size(), compression: file.compression() });
    }

    let mut pickles = records.iter().filter(|r| r.name == "data.pkl" || r.name.ends_with("/data.pkl"));
    let (Some(pickle), None) = (pickles.next(), pickles.next()) else {
        let found = records.iter().filter(|r| r.name.ends_with("data.pkl")).count();
        return Err(invalid(
            path,
            match found {
                0 => "a zip archive without `data.pkl`: not a PyTorch checkpoint".to_string(),
                n => format!("a zip archive with {n} `data.pkl` records; torch.save writes one"),
            },
        ));
    };
    let prefix = &pickle.name[..pickle.name.len() - "data.pkl".len()];
    let pickle_bytes = stored_bytes(source, pickle)?;
    if let Some(order) = records.iter().find(|r| r.name == format!("{prefix}byteorder")) {
        let order = stored_bytes(source, order)?;
        if order != b"little" {
            return Err(FormatError::new(
                path,
                None,
                ErrorKind::Invalid(format!(
                    "the checkpoint's byteorder is `{}`; only little-endian checkpoints are read",
                    String::from_utf8_lossy(&order)
                )),
            ));
        }
    }
    let storage_prefix = format!("{prefix}data/");
    let storages = records
        .iter()
        .filter_map(|r| {
            let key = r.name.strip_prefix(&storage_prefix)?;
            let stored = r.compression == CompressionMethod::Stored;
            Some((key.to_owned(), StorageRecord { offset: r.offset, len: r.len, stored }))
        })
        .collect();
    Ok(Archive { pickle_name: "data.pkl", pickle: pickle_bytes, pickle_offset: pickle.offset, storages })
}

/// A small record's bytes (the pickle, the byte order), which must be stored.
fn stored_bytes(source: &Source, record: &Record) -> Result<Vec<u8>> {
    if record.compression != CompressionMethod::Stored {
        return Err(invalid(
            source.path(),
            format!(
                "record `{}` is compressed ({}); torch.save stores records uncompressed",
                record.name, record.compression
            ),
        ));
    }
    Ok(source.read_range(record.offset, record.len)?.into_owned())
}

fn invalid(path: &Path, message: String) -> FormatError {
    FormatError::new(path, None, ErrorKind::Invalid(message))
}
