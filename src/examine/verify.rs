//! Whether two model files are the same bytes, and when they are not, the
//! first place they part in the terms a user can act on: a metadata key, a
//! tensor's name, type or shape, the first differing byte of a tensor's
//! data, or a byte outside every tensor (padding, layout).

use std::io::Read;
use std::path::Path;

use crate::examine::inspect::value_text;
use crate::formats::{FormatError, ModelFile, OpenOptions};
use crate::text::Name;

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// `None` when `claimed` and `derived` hold the same bytes; otherwise the
/// first difference, worded for `claimed`'s owner.
pub fn first_difference(claimed: &Path, derived: &Path) -> Result<Option<String>, VerifyError> {
    let Some(offset) = first_differing_byte(claimed, derived)? else { return Ok(None) };
    let options = OpenOptions::default();
    let (Ok(a), Ok(b)) = (ModelFile::open(claimed, options), ModelFile::open(derived, options)) else {
        return Ok(Some(format!("the files differ from byte {offset}")));
    };
    for ((ka, va), (kb, vb)) in a.metadata.iter().zip(b.metadata.iter()) {
        if ka != kb {
            return Ok(Some(format!("metadata key `{}` where the derivation has `{}`", Name(ka), Name(kb))));
        }
        if !va.is_identical(vb) {
            let (mut ta, mut tb) = (value_text(ka, va), value_text(kb, vb));
            // The same text of two types: say the types.
            if ta == tb {
                (ta, tb) = (format!("{ta} ({})", va.value_type().name()), format!("{tb} ({})", vb.value_type().name()));
            }
            return Ok(Some(format!("metadata key `{}` is {}; the derivation has {}", Name(ka), Name(&ta), Name(&tb))));
        }
    }
    if a.metadata.len() != b.metadata.len() {
        return Ok(Some(format!("{} metadata keys; the derivation has {}", a.metadata.len(), b.metadata.len())));
    }
    for (ta, tb) in a.tensors.iter().zip(&b.tensors) {
        if ta.name != tb.name {
            return Ok(Some(format!("tensor `{}` where the derivation has `{}`", Name(&ta.name), Name(&tb.name))));
        }
        if ta.ggml_type != tb.ggml_type || ta.dims != tb.dims {
            return Ok(Some(format!(
                "tensor `{}` is {} {:?}; the derivation makes it {} {:?}",
                Name(&ta.name),
                ta.ggml_type.name(),
                ta.dims,
                tb.ggml_type.name(),
                tb.dims
            )));
        }
        let (da, db) = (a.tensor_data(ta)?, b.tensor_data(tb)?);
        if let Some(at) = da.iter().zip(db.iter()).position(|(x, y)| x != y) {
            return Ok(Some(format!(
                "tensor `{}` ({}): its bytes differ from byte {at} of {}",
                Name(&ta.name),
                ta.ggml_type.name(),
                da.len()
            )));
        }
    }
    if a.tensors.len() != b.tensors.len() {
        return Ok(Some(format!("{} tensors; the derivation has {}", a.tensors.len(), b.tensors.len())));
    }
    Ok(Some(format!("the files differ at byte {offset}, outside every tensor's data (padding or layout)")))
}

/// The first offset at which the files differ (a length difference counts,
/// at the shorter one's end); `None` when they are equal.
fn first_differing_byte(a: &Path, b: &Path) -> Result<Option<u64>, VerifyError> {
    let open = |path: &Path| {
        crate::files::open_regular(path, crate::files::Symlinks::Follow)
            .map_err(|source| VerifyError::Io { path: path.to_owned(), source })
    };
    let (mut fa, mut fb) = (open(a)?, open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut offset = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(|source| VerifyError::Io { path: a.to_owned(), source })?;
        let nb = read_full(&mut fb, &mut bb).map_err(|source| VerifyError::Io { path: b.to_owned(), source })?;
        if let Some(at) = ba[..na].iter().zip(&bb[..nb]).position(|(x, y)| x != y) {
            return Ok(Some(offset + at as u64));
        }
        if na != nb {
            return Ok(Some(offset + na.min(nb) as u64));
        }
        if na == 0 {
            return Ok(None);
        }
        offset += na as u64;
    }
}

/// Fills `buf` unless the file ends first; the bytes read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}
