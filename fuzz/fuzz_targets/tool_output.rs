//! What llama.cpp's tools print, as `imatrix` and `evaluate` steps read it:
//! any text gives a chunk count, an evaluation (finite, and kept whole by
//! the step's result) or a named problem — never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::ops::evaluate::Evaluation;
use quantforge::tools::Progress;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.split(['\n', ',']) {
        let _ = Progress::parse(line);
    }
    // What is read is kept whole in the step's result.
    if let Ok(evaluation) = Evaluation::parse(text, 1, 8.0) {
        assert_eq!(Evaluation::from_set(&evaluation.to_set()), Some(evaluation));
    }
});
