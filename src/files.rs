//! Opening files the tool does not control: regular files only.
//!
//! A path handed to us may name a FIFO (opening it for reading blocks until a
//! writer comes), a device (`/dev/zero` never ends) or a symlink into places
//! it should not lead. Every file we read that someone else could have put
//! there is opened here: without blocking, then checked with `fstat` on the
//! descriptor itself, so what is checked is what is read. Where the tool may
//! write is [`guard`]'s.

mod guard;
pub mod link;

pub use guard::{OutputPath, Replaces, WriteGuard, WriteRefused, resolve, same_file};

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// An I/O error as a message says it: in words for the usual ones, without
/// the OS's error number for the rest.
pub struct IoText<'a>(pub &'a io::Error);

impl std::fmt::Display for IoText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.kind() {
            // Our own errors of these kinds carry their own words.
            _ if self.0.get_ref().is_some() => write!(f, "{}", self.0),
            io::ErrorKind::NotFound => f.write_str("no such file or directory"),
            io::ErrorKind::PermissionDenied => f.write_str("permission denied"),
            io::ErrorKind::IsADirectory => f.write_str("is a directory"),
            io::ErrorKind::NotADirectory => f.write_str("a component of the path is not a directory"),
            _ => {
                let text = self.0.to_string();
                f.write_str(text.split(" (os error").next().unwrap_or(&text))
            }
        }
    }
}

/// An error of the `tempfile` crate without the temporary file's name it
/// appends (`… at path "/out/.quantforge-123-x.tmp"`): a message names the
/// file the user asked for, never a scratch name of ours. Any other error
/// is returned as it is.
pub fn without_temp_name(error: io::Error) -> io::Error {
    let Some(wrapped) = error.get_ref() else { return error };
    match wrapped.source().and_then(|e| e.downcast_ref::<io::Error>()).and_then(io::Error::raw_os_error) {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::from(error.kind()),
    }
}

/// Whether a symlink as the last component of a path is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// User inputs: a model linked from elsewhere is common and fine.
    Follow,
    /// Files of our own (the store): a link there was never written by us.
    Refuse,
}

/// Opens `path` for reading if it is a regular file; anything else is an
/// `InvalidInput` error saying what it is.
pub fn open_regular(path: &Path, symlinks: Symlinks) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if symlinks == Symlinks::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if symlinks == Symlinks::Refuse => {
                io::Error::new(io::ErrorKind::InvalidInput, "is a symbolic link, not a regular file")
            }
            _ => e,
        })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {}, not a regular file", describe(kind))));
    }
    Ok(file)
}

/// What a non-regular file is, for messages.
pub fn describe(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

/// Reads a whole small text file (a recipe, a JSON index) that must be a
/// regular file no larger than `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path, Symlinks::Follow)?;
    let len = file.metadata()?.len();
    if len > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {len} bytes, more than the {limit} this kind of file may hold"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a small UTF-8 text file (a chat template) as Python's text mode
/// does, its newlines universal: `\r\n` and `\r` read as `\n`.
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    let text = String::from_utf8(read_regular(path, limit)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("is not UTF-8 text: {e}")))?;
    Ok(universal_newlines(text))
}

/// `text` as Python's text mode reads it: `\r\n` and `\r` as `\n`.
pub fn universal_newlines(text: String) -> String {
    if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n") } else { text }
}

/// sha256 of a file another tool or person will check against (Hugging
/// Face and most publishers list it), hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = open_regular(path, Symlinks::Follow)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => return Ok(hex(&hasher.finalize())),
            n => hasher.update(&buf[..n]),
        }
    }
}

/// Bytes of a file [`sha256_and_blake3_file`] digests per step.
const DIGEST_CHUNK: usize = 4 << 20;

/// sha256 and blake3 (hex) of a file and its length, from one read: the
/// two digests of a chunk on two cores side by side, the next chunk read
/// meanwhile (sha256 runs at half blake3's speed, so the read and blake3
/// together take about as long as sha256 alone).
pub fn sha256_and_blake3_file(path: &Path) -> io::Result<(String, String, u64)> {
    use sha2::Digest;
    let mut file = open_regular(path, Symlinks::Follow)?;
    let (mut sha256, mut blake3) = (sha2::Sha256::new(), blake3::Hasher::new());
    let (mut chunk, mut next) = (vec![0u8; DIGEST_CHUNK], vec![0u8; DIGEST_CHUNK]);
    let mut filled = read_full(&mut file, &mut chunk)?;
    let mut len = 0u64;
    while filled > 0 {
        let bytes = &chunk[..filled];
        let (_, read) = rayon::join(
            || sha256.update(bytes),
            || {
                blake3.update(bytes);
                read_full(&mut file, &mut next)
            },
        );
        len += filled as u64;
        filled = read?;
        std::mem::swap(&mut chunk, &mut next);
    }
    Ok((hex(&sha256.finalize()), blake3.finalize().to_hex().to_string(), len))
}

/// Reads until `buf` is full or the file ends; how many bytes it holds.
pub fn read_full(file: &mut impl io::Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Whether process `pid` of this machine still runs.
pub fn process_is_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    exists || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// This process as `pPID@HOST`, for the names of temporary files in a
/// directory several machines may share (a cache on NFS): only a process of
/// this host can be found dead by its pid.
pub fn process_tag() -> String {
    format!("p{}@{}", std::process::id(), host_name())
}

/// The `pPID@HOST` of [`process_tag`] in `name`, when it is this host's.
pub fn tagged_pid(name: &str) -> Option<libc::pid_t> {
    let (before, _) = name.split_once(&format!("@{}-", host_name()))?;
    before.rsplit_once("-p")?.1.parse().ok()
}

/// The host's name, in the characters a file name may always hold.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if ok { &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())] } else { b"host" };
    name.iter().map(|&b| if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' { b as char } else { '_' }).collect()
}

/// sha256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Bytes as lowercase hex, as digests are written.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_digests_of_a_file_read_in_chunks_are_its_bytes_digests() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 1, DIGEST_CHUNK - 1, DIGEST_CHUNK, DIGEST_CHUNK + 1, 2 * DIGEST_CHUNK + 123] {
            let bytes: Vec<u8> = (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
            let path = dir.path().join(format!("{len}.bin"));
            std::fs::write(&path, &bytes).unwrap();
            let (sha256, blake3, read) = sha256_and_blake3_file(&path).unwrap();
            assert_eq!(sha256, hex(&sha2::Sha256::digest(&bytes)), "{len} bytes");
            assert_eq!(blake3, blake3::hash(&bytes).to_hex().as_str(), "{len} bytes");
            assert_eq!(read, len as u64);
        }
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_regular(&fifo, Symlinks::Follow).unwrap_err();
        assert_eq!(err.to_string(), "is a FIFO, not a regular file");
        let err = open_regular(Path::new("/dev/zero"), Symlinks::Follow).unwrap_err();
        assert_eq!(err.to_string(), "is a character device, not a regular file");
        let err = open_regular(dir.path(), Symlinks::Follow).unwrap_err();
        assert!(err.to_string().contains("directory") || err.raw_os_error() == Some(libc::EISDIR), "{err}");
    }

    #[test]
    fn symlinks_are_refused_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"bytes").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_regular(&link, Symlinks::Follow).is_ok());
        let err = open_regular(&link, Symlinks::Refuse).unwrap_err();
        assert_eq!(err.to_string(), "is a symbolic link, not a regular file");
    }

    #[test]
    fn read_regular_bounds_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 100]).unwrap();
        assert_eq!(read_regular(&path, 100).unwrap().len(), 100);
        assert!(read_regular(&path, 99).unwrap_err().to_string().contains("more than the 99"));
    }
}
