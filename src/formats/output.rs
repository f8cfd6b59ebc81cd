//! Output files that appear whole or not at all.
//!
//! Bytes go to a temporary file beside the destination, which is renamed into
//! place only on [`AtomicOutput::commit`]; an error or a kill leaves no
//! partial file under the destination name. A temporary file's name carries
//! its process id (`.quantforge-PID-XXXXXX.tmp`), so the next output made in
//! that directory removes those of processes that no longer run.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::files::OutputPath;

pub struct AtomicOutput {
    destination: PathBuf,
    writer: BufWriter<NamedTempFile>,
}

impl AtomicOutput {
    /// Starts the file that will appear at `destination` (its directories
    /// made first), which [`crate::files::WriteGuard`] let through.
    pub fn create(destination: &OutputPath) -> io::Result<AtomicOutput> {
        let destination = destination.resolved();
        let dir = match destination.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir)?;
        remove_dead_temporaries(dir);
        let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
        let temp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(crate::files::without_temp_name)?;
        Ok(AtomicOutput { destination: destination.to_owned(), writer: BufWriter::with_capacity(1 << 20, temp) })
    }

    pub fn writer(&mut self) -> &mut dyn Write {
        &mut self.writer
    }

    /// The file itself, with everything written so far flushed, for copies
    /// the kernel can do file to file (`std::io::copy` uses copy_file_range).
    /// Write through [`AtomicOutput::writer`] again only after this borrow ends.
    pub fn file(&mut self) -> io::Result<&mut File> {
        self.writer.flush()?;
        Ok(self.writer.get_mut().as_file_mut())
    }

    /// Reserves the file's final length before its bytes are written: the
    /// blocks allocated in one call, not page by page as writes land (ext4:
    /// merge/cp throughput 0.88 before, 1.07 after, docs/PERFORMANCE.md),
    /// and a full disk reported before any byte is written. Where the file system cannot preallocate, blocks are
    /// allocated as the writes land, as without this call.
    pub fn preallocate(&mut self, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let Ok(len) = libc::off_t::try_from(len) else { return Ok(()) };
        if len == 0 {
            return Ok(());
        }
        let file = self.file()?;
        // SAFETY: a plain system call on a descriptor this output owns.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(()),
            _ => Err(error),
        }
    }

    /// Flushes and renames the file into place. Not synced: like `cp`, the
    /// file is whole or absent if the process dies, and on power loss it is
    /// as durable as the filesystem makes renamed files (outputs can be
    /// rebuilt; a sync would double the cost of a merge).
    pub fn commit(self) -> io::Result<File> {
        use std::os::unix::fs::PermissionsExt;
        let temp = self.writer.into_inner().map_err(io::IntoInnerError::into_error)?;
        // Temporary files are created private; a model file is not a secret.
        temp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
        temp.persist(&self.destination).map_err(|e| e.error)
    }
}

const TEMP_PREFIX: &str = ".quantforge-";

/// Puts a hard link to `target` at `destination` (a path the write guard
/// let through), replacing what is there in one rename.
pub fn link_into_place(target: &Path, destination: &OutputPath) -> io::Result<()> {
    let destination = destination.resolved();
    let dir = match destination.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let temp = dir.join(format!("{TEMP_PREFIX}{}-link{stamp}.tmp", std::process::id()));
    std::fs::hard_link(target, &temp)?;
    std::fs::rename(&temp, destination).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// A scratch directory in `parent` for the files a command makes on its way
/// to its outputs (a derivation to compare or to diff against), removed when
/// dropped; named as temporary outputs are, so one a killed process left
/// is swept like them.
pub fn scratch_dir(parent: &Path) -> io::Result<tempfile::TempDir> {
    remove_dead_temporaries(parent);
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    tempfile::Builder::new().prefix(&prefix).suffix(".tmp").tempdir_in(parent).map_err(crate::files::without_temp_name)
}

/// Removes the temporary outputs and scratch directories that killed runs
/// left in `dir` (best effort: what cannot be read or removed stays for the
/// next time).
pub fn remove_dead_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        if !rest.ends_with(".tmp") || crate::files::process_is_alive(pid) {
            continue;
        }
        // Never through a link: only what a run of ours made here.
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => {
                let _ = std::fs::remove_dir_all(entry.path());
            }
            Ok(kind) if kind.is_file() => {
                let _ = std::fs::remove_file(entry.path());
            }
            _ => {}
        }
    }
}

/// Passes writes through and counts the bytes, so a writer of a container
/// can check each tensor wrote the length its header promised.
pub(crate) struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    pub(crate) count: u64,
}

impl<'a> CountingWriter<'a> {
    pub(crate) fn new(inner: &'a mut dyn Write) -> CountingWriter<'a> {
        CountingWriter { inner, count: 0 }
    }
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
