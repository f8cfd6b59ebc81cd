//! Quantization policy: which type each tensor gets (llama-quantize's
//! mixture presets) and the importance matrices that steer the searches.

pub mod imatrix;
pub mod mixture;
