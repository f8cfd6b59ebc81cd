//! Faults and interrupts turned into messages.
//!
//! Input files are mapped; when another process truncates one during a run
//! (`cp` over it, say), reading a page past its new end raises SIGBUS. The
//! default action kills the process with no word. Nothing under an output's
//! name is ever partial (outputs are renamed into place when complete), so
//! the right answer is to say what happened and exit 1.
//!
//! Ctrl-C (SIGINT) during a command that builds something says what was
//! kept and how to resume, then exits 130 as a shell expects.

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

/// What Ctrl-C says before and after the count of tensors kept.
static INTERRUPTED: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();

/// From now on, Ctrl-C says what was kept in `cache` (none: nothing is)
/// and how to resume. The first call's cache is the one named.
pub(crate) fn on_interrupt(cache: Option<&Path>) {
    let note = match cache {
        Some(dir) => (
            b"\ninterrupted: ".to_vec(),
            format!(
                " tensors finished in this run are kept in the cache ({}); run the same command again to \
                 resume: nothing kept is encoded again. No output was half-written: each appears whole or \
                 not at all.\n",
                crate::text::for_terminal(&dir.display().to_string())
            )
            .into_bytes(),
        ),
        None => (
            b"\ninterrupted: no output was half-written (each appears whole or not at all), and nothing \
              was kept: without a cache a rerun starts over (--cache-dir DIR keeps finished tensors, so \
              that a rerun resumes)\n"
                .to_vec(),
            Vec::new(),
        ),
    };
    if INTERRUPTED.set(note).is_err() {
        return;
    }
    extern "C" fn on_sigint(_: libc::c_int) {
        let Some((before, after)) = INTERRUPTED.get() else { return };
        let write = |bytes: &[u8]| {
            // SAFETY: write(2) is async-signal-safe; the bytes outlive the call.
            unsafe { libc::write(libc::STDERR_FILENO, bytes.as_ptr().cast(), bytes.len()) };
        };
        write(before);
        if !after.is_empty() {
            let mut digits = [0u8; 20];
            let mut n = crate::exec::TENSORS_KEPT.load(Ordering::Relaxed);
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            write(&digits[at..]);
            write(after);
        }
        // SAFETY: _exit(2) is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    // SAFETY: as for SIGBUS below: a plain handler calling only
    // async-signal-safe functions (an atomic load, write, _exit).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}

/// Installs the SIGBUS handler.
pub(super) fn install() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MESSAGE: &[u8] = b"error: an input file was truncated while it was being read (SIGBUS on its \
            mapping); no output was written under its name. Run again once the input is complete, or pass \
            --no-mmap to read inputs without a mapping.\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(libc::STDERR_FILENO, MESSAGE.as_ptr().cast(), MESSAGE.len());
            libc::_exit(1);
        }
    }
    // SAFETY: a zeroed sigaction with an empty mask and a plain handler is
    // valid; the handler only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}
