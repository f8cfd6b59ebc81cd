//! Access to a model file's bytes: memory-mapped when possible, plain
//! positioned reads otherwise.
//!
//! Mapping is negotiated, not assumed: a failed `mmap` falls back to
//! reads and the [`LoadReport`] says so, so a slow load can be told apart from
//! a slow disk.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memmap2::Mmap;

use super::error::{FormatError, Result};

/// How the bytes of a file are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    Mmap,
    Read,
}

/// Whether to try memory mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    pub use_mmap: bool,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions { use_mmap: true }
    }
}

/// What loading a file cost: the start-up metrics a loader owes its user
/// (how it read the file, how long each stage took).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct LoadReport {
    pub mode: AccessMode,
    /// Why mapping was not used, when it was asked for and failed.
    pub mmap_fallback: Option<String>,
    /// Bytes parsed to build the model (headers, not tensor data).
    pub bytes_parsed: u64,
    #[serde(serialize_with = "serialize_secs")]
    #[schemars(with = "f64")]
    pub duration: Duration,
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl LoadReport {
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes_parsed as f64 / self.duration.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            AccessMode::Mmap => "mmap",
            AccessMode::Read => "read",
        };
        write!(
            f,
            "{mode}, {} parsed in {:.1} ms ({}/s)",
            human_bytes(self.bytes_parsed as f64),
            self.duration.as_secs_f64() * 1e3,
            human_bytes(self.bytes_per_second()),
        )?;
        if let Some(reason) = &self.mmap_fallback {
            write!(f, "; mmap failed, fell back to reads: {reason}")?;
        }
        Ok(())
    }
}

/// `1.5 MiB`, `253.1 MiB`, `12 B`.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{value:.0} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// `250MB`, `2GiB`, `1000`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("`{text}` is not a size"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024f64.powi(4),
        other => return Err(format!("unknown size unit `{other}` (use B, KB, MB, GB, KiB, MiB, GiB…)")),
    };
    Ok((number * scale) as u64)
}

/// See [`Source::positioned`].
pub struct PositionedReader<'a> {
    file: &'a File,
    len: u64,
    pos: u64,
}

impl Read for PositionedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PositionedReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        self.pos = target.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the file's start"))?;
        Ok(self.pos)
    }
}

/// An open model file.
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    file: File,
    len: u64,
    mmap: Option<Mmap>,
    mmap_fallback: Option<String>,
}

impl Source {
    pub fn open(path: &Path, options: OpenOptions) -> Result<Source> {
        let file =
            crate::files::open_regular(path, crate::files::Symlinks::Follow).map_err(|e| FormatError::io(path, e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        let (mmap, mmap_fallback) = if options.use_mmap && len > 0 {
            // SAFETY: the map is read-only. A file truncated under us by
            // another process makes a read past its new end raise SIGBUS,
            // which `cli::signals` turns into a clear error and exit 1 (no
            // output is committed; `--no-mmap` avoids the map entirely).
            match unsafe { Mmap::map(&file) } {
                Ok(map) => {
                    // Tensors are read front to back, once: read ahead more, keep less.
                    let _ = map.advise(memmap2::Advice::Sequential);
                    (Some(map), None)
                }
                Err(e) => {
                    tracing::info!("cannot map {} ({e}); reading it instead", path.display());
                    (None, Some(e.to_string()))
                }
            }
        } else {
            (None, None)
        };
        Ok(Source { path: path.to_owned(), file, len, mmap, mmap_fallback })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn mode(&self) -> AccessMode {
        if self.mmap.is_some() { AccessMode::Mmap } else { AccessMode::Read }
    }

    pub fn mmap_fallback(&self) -> Option<&str> {
        self.mmap_fallback.as_deref()
    }

    /// The whole file in memory, when it is mapped.
    pub fn mapped(&self) -> Option<&[u8]> {
        self.mmap.as_deref()
    }

    /// A buffered sequential reader of the file from its start, for parsing
    /// the header of a file that is not mapped (see [`Source::mapped`]).
    pub fn stream(&self) -> Result<Box<dyn Read + '_>> {
        let mut file = &self.file;
        file.seek(SeekFrom::Start(0)).map_err(|e| FormatError::io(&self.path, e))?;
        Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
    }

    /// A `Read + Seek` over the file by positioned reads, for parsers that
    /// need random access (a zip's central directory), mapped or not.
    pub fn positioned(&self) -> BufReader<PositionedReader<'_>> {
        BufReader::with_capacity(1 << 14, PositionedReader { file: &self.file, len: self.len, pos: 0 })
    }

    /// The bytes `[offset, offset + len)`, borrowed from the map when there
    /// is one. The caller has checked the range against [`Source::len`].
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len);
        let Some(end) = end else {
            return Err(FormatError::at(
                &self.path,
                offset,
                super::ErrorKind::Truncated {
                    what: "tensor data".into(),
                    needed: len,
                    available: self.len.saturating_sub(offset),
                },
            ));
        };
        match &self.mmap {
            Some(map) => Ok(Cow::Borrowed(&map[offset as usize..end as usize])),
            None => {
                let mut buf = vec![0u8; len as usize];
                self.file.read_exact_at(&mut buf, offset).map_err(|e| FormatError::io(&self.path, e))?;
                Ok(Cow::Owned(buf))
            }
        }
    }

    /// Tells the kernel the mapped pages of `[offset, offset + len)` will not
    /// be read again, so they leave this process's resident memory: a
    /// streaming pass over a model then stays near one slab, not the whole
    /// file. Without a map, nothing is resident to release.
    pub fn release_range(&self, offset: u64, len: u64) {
        let Some(map) = &self.mmap else { return };
        if offset.saturating_add(len).min(self.len) <= offset {
            return;
        }
        // A fault maps more than its page: the cached pages of its aligned
        // window (`fault_around_bytes`, 64 KiB), and the whole page-cache
        // folio it lands in (up to 2 MiB, PMD-aligned, where the file
        // system reads ahead in large folios). So a range's reads also map
        // pages of ranges released before it: the folio reaching back into
        // the slab before, and the window reaching into the tensor after
        // (each kept a tensor's edge resident: RSS grew with the model).
        // Behind, everything is finished; ahead only the window goes, as
        // the next slab's pages were just read ahead for it.
        const LARGEST_FOLIO: u64 = 2 << 20;
        const FAULT_AROUND: u64 = 64 << 10;
        let end = offset.saturating_add(len).saturating_add(FAULT_AROUND).min(self.len);
        let offset = offset.saturating_sub(LARGEST_FOLIO);
        // SAFETY: the map is a read-only view of a file we never write, so
        // dropping its pages changes no byte a live borrow can see: the next
        // access faults the same bytes back in from the file. The advice is
        // a hint; failing costs memory, never correctness.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset as usize, (end - offset) as usize)
        };
    }

    /// Brings `[offset, offset + len)` close ahead of its use, so that a
    /// slab's bytes are at hand when its encoding starts: a mapped range's
    /// pages are mapped into this process (read from the disk where the page
    /// cache lacks them) by a thread that would otherwise wait; a file that
    /// is not mapped is only advised to the kernel. Reads nothing past the
    /// file's end.
    pub fn read_ahead_range(&self, offset: u64, len: u64) {
        let end = offset.saturating_add(len).min(self.len);
        if end <= offset {
            return;
        }
        match &self.mmap {
            Some(map) => {
                let (offset, len) = (offset as usize, (end - offset) as usize);
                // One call maps the range's pages (reading those not yet in the
                // page cache); kernels before 5.14 lack it: a load per page then.
                if map.advise_range(memmap2::Advice::PopulateRead, offset, len).is_err() {
                    let touched = map[offset..offset + len].iter().step_by(4096).fold(0u8, |x, &b| x ^ b);
                    std::hint::black_box(touched);
                }
            }
            None => {
                use std::os::fd::AsRawFd;
                let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(end - offset)) else { return };
                // SAFETY: advice on an open descriptor; it reads nothing into our memory.
                unsafe { libc::posix_fadvise(self.file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
            }
        }
    }

    /// Copies `[offset, offset + len)` into `out` at `out_offset`, one copy
    /// made by the kernel (see [`copy_file_at`]); copies into one file can
    /// run in parallel.
    pub fn copy_range_to_file_at(&self, offset: u64, len: u64, out: &File, out_offset: u64) -> io::Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "range past the end of the file"));
        }
        copy_file_at(&self.file, offset, out, out_offset, len)
    }

    /// `io::copy` from the file itself.
    fn copy_from_file(&self, offset: u64, len: u64, out: &mut dyn Write) -> io::Result<()> {
        let mut file = &self.file;
        file.seek(SeekFrom::Start(offset))?;
        let copied = io::copy(&mut file.take(len), out)?;
        if copied != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while copying"));
        }
        Ok(())
    }

    /// Copies `[offset, offset + len)` to `out` without holding more than a
    /// small buffer when the file is not mapped.
    pub fn copy_range(&self, offset: u64, len: u64, out: &mut dyn Write) -> io::Result<()> {
        match &self.mmap {
            Some(_) => {
                let bytes = self.read_range(offset, len).map_err(io::Error::other)?;
                out.write_all(&bytes)
            }
            None => self.copy_from_file(offset, len, out),
        }
    }
}

/// The size of a memory page, which file offsets are compared against.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the running system.
    *PAGE.get_or_init(|| u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1))
}

/// Copies `len` bytes of `src` from `src_offset` to `dst` at `dst_offset`,
/// one copy made by the kernel where the file systems allow, else through a
/// buffer. Neither file's position is used or moved.
///
/// Where both offsets sit at the same place in a page, that is
/// copy_file_range: a file system that shares extents copies nothing, and
/// elsewhere the kernel splices whole pages. Where they do not (a tensor
/// moving to another 32-byte-aligned place), copy_file_range's splice
/// writes 64 KiB at a time, each write starting and ending inside a page, so
/// the same splice runs through a pipe of [`SPLICE_PIPE`] bytes instead
/// (ext4, 543 MB: 0.10 s against 0.18 s, docs/PERFORMANCE.md).
pub fn copy_file_at(src: &File, src_offset: u64, dst: &File, dst_offset: u64, len: u64) -> io::Result<()> {
    let page = page_size();
    if src_offset % page != dst_offset % page {
        match splice_at(src, src_offset, dst, dst_offset, len) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            done => return done,
        }
    }
    copy_piece(src, src_offset, dst, dst_offset, len)
}

/// Bytes a pipe carries per splice when copying at shifted page offsets:
/// larger writes cost less each, up to about this size; beyond it, ext4
/// gains little and a write's pages come more often from memory the host
/// must first fault in (docs/PERFORMANCE.md).
const SPLICE_PIPE: usize = 512 << 10;

/// Splices `len` bytes of `src` at `src_offset` through a pipe into `dst` at
/// `dst_offset`. `Unsupported` when the files cannot be spliced and nothing
/// was moved, so the caller can copy another way.
fn splice_at(src: &File, mut src_offset: u64, dst: &File, mut dst_offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let offset = |o: u64| i64::try_from(o).map_err(|_| io::Error::other("file offset beyond i64"));
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours alone.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a pipe we own; failing leaves the default size.
    let capacity = match unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETPIPE_SZ, SPLICE_PIPE as libc::c_int) } {
        n if n > 0 => n as u64,
        _ => 1 << 16,
    };
    let mut moved = 0;
    while moved < len {
        let mut off_in = offset(src_offset)?;
        let want = capacity.min(len - moved) as usize;
        // SAFETY: open descriptors borrowed for the call; `off_in` is a local
        // the kernel updates.
        let n =
            unsafe { libc::splice(src.as_raw_fd(), &mut off_in, write_end.as_raw_fd(), std::ptr::null_mut(), want, 0) };
        let mut pending = match n {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while copying")),
            n if n > 0 => n as u64,
            _ => match splice_error(moved) {
                Some(error) => return Err(error),
                None => continue,
            },
        };
        src_offset += pending;
        while pending > 0 {
            let mut off_out = offset(dst_offset)?;
            // SAFETY: as above, with `off_out`.
            let n = unsafe {
                libc::splice(
                    read_end.as_raw_fd(),
                    std::ptr::null_mut(),
                    dst.as_raw_fd(),
                    &mut off_out,
                    pending as usize,
                    0,
                )
            };
            match n {
                0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "the output took no bytes")),
                n if n > 0 => {
                    (pending, dst_offset, moved) = (pending - n as u64, dst_offset + n as u64, moved + n as u64)
                }
                _ => match splice_error(moved) {
                    Some(error) => return Err(error),
                    None => continue,
                },
            }
        }
    }
    Ok(())
}

/// Why the splice just made failed, after `moved` bytes: `None` when it
/// was interrupted (make it again), `Unsupported` when these files cannot be
/// spliced and nothing has moved yet.
fn splice_error(moved: u64) -> Option<io::Error> {
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EINTR) => None,
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) if moved == 0 => {
            Some(io::Error::new(io::ErrorKind::Unsupported, error))
        }
        _ => Some(error),
    }
}

fn copy_piece(src: &File, src_offset: u64, dst: &File, dst_offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let offset = |o: u64| i64::try_from(o).map_err(|_| io::Error::other("file offset beyond i64"));
    let (mut off_in, mut off_out, mut left) = (offset(src_offset)?, offset(dst_offset)?, len);
    while left > 0 {
        let chunk = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
        // SAFETY: both descriptors are open files borrowed for the call, and
        // the offsets are valid pointers to locals the kernel updates.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, chunk, 0) };
        match n {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while copying")),
            n if n > 0 => left -= n as u64,
            _ => {
                let error = io::Error::last_os_error();
                match error.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // Across file systems, or where the call is missing.
                    Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => {
                        return copy_through_buffer(src, off_in as u64, dst, off_out as u64, left);
                    }
                    _ => return Err(error),
                }
            }
        }
    }
    Ok(())
}

fn copy_through_buffer(
    src: &File,
    mut src_offset: u64,
    dst: &File,
    mut dst_offset: u64,
    mut left: u64,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (1 << 20).min(usize::try_from(left).unwrap_or(usize::MAX))];
    while left > 0 {
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        src.read_exact_at(&mut buf[..n], src_offset)?;
        dst.write_all_at(&buf[..n], dst_offset)?;
        (src_offset, dst_offset, left) = (src_offset + n as u64, dst_offset + n as u64, left - n as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a range reaches another file gives its bytes: offsets in
    /// the same place of a page (copy_file_range) or not (a splice through
    /// our pipe, several pipefuls long), mapped or not.
    #[test]
    fn ranges_copy_exactly_at_any_page_phase() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        let bytes: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        for use_mmap in [true, false] {
            let source = Source::open(&path, OpenOptions { use_mmap }).unwrap();
            for (offset, len, out_offset) in [(4096, 4_500_000, 8192), (100, 4_999_900, 7), (33, 1, 0), (0, 0, 5)] {
                let out = tempfile::tempfile().unwrap();
                source.copy_range_to_file_at(offset, len, &out, out_offset).unwrap();
                let mut copied = vec![0u8; len as usize];
                out.read_exact_at(&mut copied, out_offset).unwrap();
                assert!(copied == bytes[offset as usize..][..len as usize], "{use_mmap} {offset} {len} {out_offset}");
                let written = if len == 0 { 0 } else { out_offset + len };
                assert_eq!(out.metadata().unwrap().len(), written);
            }
            let out = tempfile::tempfile().unwrap();
            assert!(source.copy_range_to_file_at(4_999_999, 2, &out, 0).is_err());
        }
    }

    /// Reading ahead is a hint: any range, past the end or overflowing
    /// included, reads nothing outside the file and changes no byte read.
    #[test]
    fn reading_ahead_stays_inside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        for use_mmap in [true, false] {
            let source = Source::open(&path, OpenOptions { use_mmap }).unwrap();
            for (offset, len) in [(0, 10_000), (9_999, 5_000), (10_000, 1), (50_000, 10), (u64::MAX - 1, 100), (3, 0)] {
                source.read_ahead_range(offset, len);
            }
            assert!(source.read_range(0, 10_000).unwrap().iter().all(|&b| b == 7));
        }
    }
}
