//! How an export and the cache share bytes (`--link`, DVC's `cache.type`):
//! a reflink (the file system shares the blocks, and either file changes
//! alone), a hard link (one file under two names, made read-only), no link
//! and no second copy (copy), or a second copy of every encoded tensor
//! (whole).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// One way of putting an export's bytes in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    /// The cache keeps a clone of the file sharing its blocks (XFS, btrfs).
    Reflink,
    /// The cache keeps the file itself under a second name, read-only.
    Hardlink,
    /// Nothing linked: the cache keeps no second copy, and finds what an
    /// export holds in the export itself, checked on every read.
    Copy,
    /// Nothing linked: the cache keeps its own copy of every encoded
    /// tensor, so it can rebuild an output without it (disk twice).
    Whole,
}

impl LinkMode {
    pub const ALL: [LinkMode; 4] = [LinkMode::Reflink, LinkMode::Hardlink, LinkMode::Copy, LinkMode::Whole];

    /// What the default tries, in order.
    pub const DEFAULT: &'static str = "reflink,hardlink,copy";
    pub const DEFAULT_MODES: [LinkMode; 3] = [LinkMode::Reflink, LinkMode::Hardlink, LinkMode::Copy];

    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Reflink => "reflink",
            LinkMode::Hardlink => "hardlink",
            LinkMode::Copy => "copy",
            LinkMode::Whole => "whole",
        }
    }

    /// A comma-separated list of modes, tried in order (`reflink,copy`).
    pub fn parse_list(text: &str) -> Result<Vec<LinkMode>, String> {
        let mut modes = Vec::new();
        for word in text.split(',').map(str::trim) {
            let mode = LinkMode::ALL.into_iter().find(|m| m.name() == word).ok_or_else(|| {
                let names: Vec<&str> = LinkMode::ALL.iter().map(|m| m.name()).collect();
                let hint = crate::spelling::nearest(word, names.iter().copied())
                    .map(|near| format!(" (did you mean `{near}`?)"))
                    .unwrap_or_default();
                format!("`{word}` is no link mode{hint}; the modes are {}", names.join(", "))
            })?;
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        Ok(modes)
    }
}

/// Clones all of `src` into `dst`, an empty file on the same file system,
/// sharing its blocks. `Ok(false)`, nothing changed, where the file system
/// cannot (ext4, tmpfs, another device).
pub fn reflink(src: &File, dst: &File) -> io::Result<bool> {
    // SAFETY: FICLONE reads one descriptor argument; both are open files we hold.
    if unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONE, src.as_raw_fd()) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EXDEV | libc::EINVAL | libc::ENOSYS) => Ok(false),
        _ => Err(error),
    }
}

/// Whether a hard link between an export and the cache keeps the cache's
/// blob from being changed through the export: the file is made read-only,
/// which binds every process but a privileged one (root ignores the mode).
pub fn hardlinks_are_safe() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_keeps_its_order_and_names_a_misspelling() {
        assert_eq!(LinkMode::parse_list("copy, reflink").unwrap(), [LinkMode::Copy, LinkMode::Reflink]);
        assert_eq!(LinkMode::parse_list(LinkMode::DEFAULT).unwrap(), LinkMode::DEFAULT_MODES);
        let error = LinkMode::parse_list("reflnk").unwrap_err();
        assert!(error.contains("did you mean `reflink`"), "{error}");
    }
}
