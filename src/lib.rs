//! quantforge: a build system for model weights.
//!
//! The library is organised by stage of the data flow described in
//! `ARCHITECTURE.md`: [`recipe`] reads and validates recipes, [`exec`] keys
//! and schedules their nodes over the content-addressed [`store`], [`ops`]
//! are the operations nodes apply to [`artifact`] tensor sets, [`codecs`]
//! and [`quant`] decide and produce tensor bytes, [`formats`] reads and
//! writes containers of the [`model`] and [`types`] it describes, and
//! [`cli`] is the thin binary on top.

pub mod arch;
pub mod artifact;
pub mod backend;
pub mod cli;
pub mod codecs;
pub mod convert;
pub mod examine;
pub mod exec;
pub mod files;
pub mod formats;
pub mod key;
pub mod model;
pub mod ops;
pub mod params;
pub mod quant;
pub mod recipe;
pub mod remote_url;
pub mod slurm;
pub mod spelling;
pub mod store;
pub mod synth;
pub mod text;
pub mod tools;
pub mod types;
