//! What a run says of itself for others to check: the lock file (the
//! inputs and results a recipe was built from, `lock`), the provenance
//! attestation of an export (an in-toto Statement, `attest`) and its
//! signature envelope (DSSE, `dsse`).

pub mod attest;
pub mod dsse;
pub mod lock;
