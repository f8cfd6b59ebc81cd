//! Finding the CUDA driver and NVRTC before cudarc touches them: cudarc
//! panics when a library it loads is missing, so every entry point asks
//! here first, and a missing library is a message.
//!
//! cudarc opens the libraries by name (`libnvrtc.so.13`, …), as the dynamic
//! loader finds them. Directories in `QUANTFORGE_CUDA_LIBS` (`:`-separated:
//! a toolkit's `lib64`, or pip's `site-packages/nvidia/cu13/lib`) are
//! searched first: their libraries are opened by path, and the loader then
//! hands cudarc the library already loaded under that name.

use std::ffi::CString;
use std::path::Path;
use std::sync::Once;

/// Directories searched before the loader's own.
pub const LIB_DIRS_ENV: &str = "QUANTFORGE_CUDA_LIBS";

/// NVRTC opens its builtins by name when it compiles, so they are opened too.
const FAMILIES: [&str; 3] = ["libnvrtc-builtins.so", "libnvrtc.so", "libcuda.so"];

fn preload() {
    static PRELOAD: Once = Once::new();
    PRELOAD.call_once(|| {
        let Some(dirs) = std::env::var_os(LIB_DIRS_ENV) else { return };
        for dir in std::env::split_paths(&dirs) {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let mut names: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| is_main_library(p)).collect();
            names.sort();
            names.iter().for_each(|path| open(path));
        }
    });
}

/// `libnvrtc.so.13`, its builtins or `libcuda.so.1`; not the alternates.
fn is_main_library(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    FAMILIES.iter().any(|family| name.strip_prefix(family).is_some_and(|rest| rest.is_empty() || rest.starts_with('.')))
}

fn open(path: &Path) {
    let Ok(text) = CString::new(path.as_os_str().as_encoded_bytes()) else { return };
    // SAFETY: dlopen of a path; the handle is kept for the process's life,
    // as cudarc keeps the libraries it opens.
    let handle = unsafe { libc::dlopen(text.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        tracing::debug!("cuda: could not open {}", path.display());
    }
}

/// Ok when the driver library can be loaded.
pub fn driver() -> Result<(), String> {
    preload();
    // SAFETY: cudarc's probe only tries to open the library by its names.
    match unsafe { cudarc::driver::sys::is_culib_present() } {
        true => Ok(()),
        false => Err("no CUDA driver library (libcuda.so) on this machine".into()),
    }
}

/// Ok when NVRTC can be loaded.
pub fn nvrtc() -> Result<(), String> {
    preload();
    // SAFETY: as above.
    match unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        true => Ok(()),
        false => Err(format!(
            "no NVRTC library (libnvrtc.so.13 or .12): install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`, \
             and name its lib directory in {LIB_DIRS_ENV} if the loader does not find it"
        )),
    }
}
