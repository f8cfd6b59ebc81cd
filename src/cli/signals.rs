//! Faults turned into messages.
//!
//! Input files are mapped; when another process truncates one during a run
//! (`cp` over it, say), reading a page past its new end raises SIGBUS. The
//! default action kills the process with no word. Nothing under an output's
//! name is ever partial (outputs are renamed into place when complete), so
//! the right answer is to say what happened and exit 1.

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
