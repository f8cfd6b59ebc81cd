//! The integration tests, one binary (as ripgrep's and cargo's): one module
//! a subject, the helpers they share in `common`. Run one subject with
//! `cargo test --test it SUBJECT::`.

mod common;

mod arch;
mod assemble;
mod attest;
mod backends;
mod budget;
mod byte_order;
mod cli;
mod codec_iq4_ternary;
mod codec_iq_grid;
mod codecs;
mod codecs_gguf_py;
mod codecs_simd;
mod convert;
mod cuda_kernels;
mod device_split;
mod docs_commands;
mod errors;
mod gguf_py;
mod imatrix;
mod json;
mod legacy;
mod link_modes;
mod lock;
mod lora;
mod malformed;
mod memory_store;
mod mixture;
mod new_metadata;
mod onnx;
mod pack;
mod progress;
mod quality;
mod quantize_llama;
mod recipes;
mod remote;
mod report;
mod safetensors;
mod sentencepiece;
mod slurm;
mod split;
mod store_conformance;
mod tidy;
mod torch;
mod trust;
mod verify;
