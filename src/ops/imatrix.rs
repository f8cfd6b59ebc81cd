//! `imatrix`: an importance matrix over a calibration text, computed by
//! llama.cpp's `llama-imatrix` (see [`crate::tools`]) from the step's model.
//! Its result is the tool's GGUF file as a tensor set: a `quantize` step
//! takes it by name (`imatrix = "STEP"`), an `export` writes it out.

use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec::new(
    "imatrix",
    1,
    &[
        ParamSpec::required("corpus", ParamKind::InputName),
        ParamSpec::optional("chunks", ParamKind::Int),
        ParamSpec::optional("ctx", ParamKind::Int),
        ParamSpec::optional("process_output", ParamKind::Bool),
    ],
);

/// What the step asks of `llama-imatrix`; every field changes its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImatrixOptions {
    /// `--chunks`: at most this many chunks of the text (all when `None`).
    pub chunks: Option<u32>,
    /// `-c`: tokens per chunk.
    pub ctx: u32,
    /// `--process-output`: collect data for the output tensor too.
    pub process_output: bool,
}

impl ImatrixOptions {
    pub fn from_params(params: &Params) -> Result<ImatrixOptions, Vec<Diagnostic>> {
        Ok(ImatrixOptions {
            chunks: params.positive("chunks")?,
            ctx: params.positive("ctx")?.unwrap_or(DEFAULT_CTX),
            process_output: params.bool("process_output"),
        })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "chunks": self.chunks, "ctx": self.ctx, "process_output": self.process_output })
    }

    /// The tool's arguments for these options (the model, text, output and
    /// threads are the caller's).
    pub fn arguments(&self) -> Vec<String> {
        let mut args = chunk_arguments(self.ctx, self.chunks);
        if self.process_output {
            args.push("--process-output".to_owned());
        }
        args
    }
}

/// The context a chunk fills when a step does not say: the size published
/// matrices and perplexities are commonly computed at.
pub const DEFAULT_CTX: u32 = 512;

/// How llama.cpp's tools are told how to cut a text: `-c CTX`, and
/// `--chunks N` when not all of it.
pub fn chunk_arguments(ctx: u32, chunks: Option<u32>) -> Vec<String> {
    let mut args = vec!["-c".to_owned(), ctx.to_string()];
    if let Some(chunks) = chunks {
        args.extend(["--chunks".to_owned(), chunks.to_string()]);
    }
    args
}
