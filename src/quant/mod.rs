//! Quantization policy: which type each tensor gets (llama-quantize's
//! mixture presets, or the size-budget planner) and the importance matrices
//! that steer the searches.

pub mod budget;
pub mod imatrix;
pub mod mixture;
pub mod plan;
pub mod prune;
