//! quantforge: a build system for model weights.
//!
//! The library is organised by stage of the data flow described in
//! `ARCHITECTURE.md`: [`types`] knows every ggml tensor type, [`model`] is the
//! in-memory view of a model file, [`formats`] reads and writes containers,
//! [`ops`] are the operations the command line exposes, and [`cli`] is the thin
//! binary on top.

pub mod artifact;
pub mod cli;
pub mod codecs;
pub mod exec;
pub mod formats;
pub mod model;
pub mod ops;
pub mod quant;
pub mod recipe;
pub mod store;
pub mod synth;
pub mod types;
