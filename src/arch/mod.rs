//! Facts about model architectures that decide whether files belong
//! together, as llama.cpp reads them from metadata and tensor shapes. Pure
//! functions of a file's metadata and tensor descriptors; no I/O.
//!
//! [`registry`] holds one descriptor per model family and detects a file's
//! family; [`quant_rules`] names the architecture-conditional decisions of
//! llama.cpp's quantizer. [`hparams`] reads a language model's hyperparameters and checks them
//! against its tensors. [`clip`] owns llama.cpp's multimodal projector files ("mmproj"): which part
//! of a multimodal model a file is, and whether a projector's output fits the
//! language model's input.

pub mod clip;
pub mod hparams;
pub mod quant_rules;
pub mod registry;
pub mod split;
