//! How the checkpoint targets cut one input into several files: at each
//! `\0\0`, which no JSON or template file of theirs needs.

/// `bytes` cut at each `\0\0`.
pub fn split_files(bytes: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at + 1 < bytes.len() {
        if bytes[at] == 0 && bytes[at + 1] == 0 {
            parts.push(&bytes[start..at]);
            start = at + 2;
            at = start;
        } else {
            at += 1;
        }
    }
    parts.push(&bytes[start..]);
    parts
}
