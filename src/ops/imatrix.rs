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

/// The context a chunk fills when the step does not say: the size
/// published matrices are commonly computed at.
const DEFAULT_CTX: u32 = 512;

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
        let positive = |name: &str| -> Result<Option<u32>, Vec<Diagnostic>> {
            match params.int(name) {
                None => Ok(None),
                Some((n, _)) => match u32::try_from(n) {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(vec![params.error(name, format!("`{name}` must be a positive whole number, not {n}"))]),
                },
            }
        };
        Ok(ImatrixOptions {
            chunks: positive("chunks")?,
            ctx: positive("ctx")?.unwrap_or(DEFAULT_CTX),
            process_output: params.bool("process_output"),
        })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "chunks": self.chunks, "ctx": self.ctx, "process_output": self.process_output })
    }

    /// The tool's arguments for these options (the model, text, output and
    /// threads are the caller's).
    pub fn arguments(&self) -> Vec<String> {
        let mut args = vec!["-c".to_owned(), self.ctx.to_string()];
        if let Some(chunks) = self.chunks {
            args.extend(["--chunks".to_owned(), chunks.to_string()]);
        }
        if self.process_output {
            args.push("--process-output".to_owned());
        }
        args
    }
}

/// What `llama-imatrix` says of its progress: the chunk count it computes
/// over (`computing over 3 chunks, …`), then each chunk's perplexity as it
/// finishes (`[2]542.1968`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Total(u64),
    Done(u64),
}

impl Progress {
    pub fn parse(item: &str) -> Option<Progress> {
        if let Some((_, rest)) = item.split_once("computing over ") {
            return rest.split_whitespace().next()?.parse().ok().map(Progress::Total);
        }
        let (chunk, value) = item.strip_prefix('[')?.split_once(']')?;
        value.parse::<f64>().ok()?;
        chunk.parse().ok().map(Progress::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_read_from_the_tools_own_lines() {
        let total = "0.00.014.160 I compute_imatrix: computing over 3 chunks, n_ctx=64, batch_size=2048, n_seq=32";
        assert_eq!(Progress::parse(total), Some(Progress::Total(3)));
        assert_eq!(Progress::parse("[2]542.1968"), Some(Progress::Done(2)));
        assert_eq!(Progress::parse("[2] of something"), None);
        assert_eq!(Progress::parse("Final estimate: PPL = 553.5500 +/- 24.90901"), None);
    }
}
