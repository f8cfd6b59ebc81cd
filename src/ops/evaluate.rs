//! `evaluate`: how far a quantized model is from the model it was made
//! from, as llama.cpp's `llama-perplexity` measures it over an evaluation
//! text (see [`crate::tools`]): the base's logits computed once
//! (`--kl-divergence-base`, the hidden `kld-base` node every evaluation of
//! that base shares), then per quantized model its perplexity and the KL
//! divergence of its token distributions from the base's
//! (`--kl-divergence`), read from what the tool prints into an
//! [`Evaluation`].

use crate::artifact::{HeaderEnd, TensorSet};
use crate::model::{Endian, Metadata, Value};
use crate::ops::imatrix::{DEFAULT_CTX, chunk_arguments};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const SPEC: OpSpec = OpSpec::new(
    "evaluate",
    1,
    &[
        ParamSpec::required("base", ParamKind::Model),
        ParamSpec::required("text", ParamKind::InputName),
        ParamSpec::optional("ctx", ParamKind::Int),
        ParamSpec::optional("chunks", ParamKind::Int),
    ],
);

/// The base model's logits over the text, made for the `evaluate` steps
/// that name it; no recipe writes this op.
pub const BASE_SPEC: OpSpec = OpSpec::new("kld-base", 1, &[]);

/// What an evaluation asks of `llama-perplexity`; both fields change its
/// result, and a base's logits serve only evaluations with the same ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EvaluateOptions {
    /// `-c`: tokens per chunk.
    pub ctx: u32,
    /// `--chunks`: at most this many chunks of the text (all when `None`).
    pub chunks: Option<u32>,
}

impl EvaluateOptions {
    pub fn from_params(params: &Params) -> Result<EvaluateOptions, Vec<Diagnostic>> {
        Ok(EvaluateOptions { ctx: params.positive("ctx")?.unwrap_or(DEFAULT_CTX), chunks: params.positive("chunks")? })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "ctx": self.ctx, "chunks": self.chunks })
    }

    /// The tool's arguments for these options (the model, text, logits file
    /// and threads are the caller's).
    pub fn arguments(&self) -> Vec<String> {
        chunk_arguments(self.ctx, self.chunks)
    }
}

/// The bytes of a logits file's header (`--kl-divergence-base`): the magic
/// `_logits_`, then the context, vocabulary and chunk counts (`i32`).
pub const LOGITS_HEADER: usize = 20;

/// Checks a logits file `llama-perplexity --kl-divergence-base` wrote for
/// chunks of `ctx` tokens: its header, and that it is `len` bytes long as
/// the header makes it (every chunk's tokens as `i32`, then for the scored
/// second half of each chunk every token's log-probabilities as `u16`,
/// the vocabulary rounded up to even plus four).
pub fn check_logits(header: &[u8; LOGITS_HEADER], len: u64, ctx: u32) -> Result<(), String> {
    if &header[..8] != b"_logits_" {
        return Err("it does not start with `_logits_`".into());
    }
    let field = |at: usize| i32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
    let (n_ctx, n_vocab, n_chunk) = (field(8), field(12), field(16));
    if i64::from(n_ctx) != i64::from(ctx) || n_vocab <= 0 || n_chunk <= 0 {
        return Err(format!("its header says {n_ctx} tokens a chunk, {n_vocab} tokens, {n_chunk} chunks"));
    }
    // In u128: no header's counts overflow it.
    let (n_ctx, n_vocab, n_chunk) = (n_ctx as u128, n_vocab as u128, n_chunk as u128);
    let scored = n_ctx - 1 - n_ctx / 2;
    let row = 2 * n_vocab.div_ceil(2) + 4;
    let expected = LOGITS_HEADER as u128 + n_chunk * n_ctx * 4 + n_chunk * scored * row * 2;
    match u128::from(len) == expected {
        true => Ok(()),
        false => Err(format!("it is {len} bytes where its header makes {expected}")),
    }
}

/// A quantized model against its base, as `llama-perplexity
/// --kl-divergence` prints it (each number as printed), with the model's
/// size. Perplexities are means over the text with their uncertainty; KL
/// divergences are per token, in nats; `same_top_p` is the percentage of
/// tokens whose most likely next token is the base's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Evaluation {
    /// Mean PPL(Q) and its ±.
    pub ppl: f64,
    pub ppl_error: f64,
    /// Mean PPL(base) and its ±.
    pub ppl_base: f64,
    pub ppl_base_error: f64,
    /// Mean ln(PPL(Q)/PPL(base)) and its ±.
    pub ln_ppl_ratio: f64,
    pub ln_ppl_ratio_error: f64,
    /// Mean KLD and its ±.
    pub kld_mean: f64,
    pub kld_mean_error: f64,
    pub kld_median: f64,
    /// The 99th percentile (`99.0%   KLD`).
    pub kld_p99: f64,
    pub kld_max: f64,
    /// RMS Δp, percent, and its ±.
    pub rms_dp: f64,
    pub rms_dp_error: f64,
    /// Same top p, percent, and its ±.
    pub same_top_p: f64,
    pub same_top_p_error: f64,
    /// The model's tensor bytes, and bits per weight over all its tensors.
    pub bytes: u64,
    pub bits_per_weight: f64,
}

impl Evaluation {
    /// The statistics `llama-perplexity --kl-divergence` printed on stdout;
    /// an error names the line it lacks or could not read (a `nan` too: a
    /// model whose measures are not numbers has none).
    pub fn parse(printed: &str, bytes: u64, bits_per_weight: f64) -> Result<Evaluation, StatisticsError> {
        let find = |label: &str| -> Result<(f64, f64), StatisticsError> {
            let line = printed
                .lines()
                .find(|l| l.starts_with(label) && l[label.len()..].trim_start().starts_with(':'))
                .ok_or_else(|| StatisticsError::Missing(label.to_owned()))?;
            let value = line[label.len()..].trim_start()[1..].trim();
            let number = |text: &str| {
                text.trim().trim_end_matches('%').trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or(())
            };
            let unreadable = || StatisticsError::Unreadable(line.trim().to_owned());
            match value.split_once('±') {
                Some((v, e)) => Ok((number(v).map_err(|_| unreadable())?, number(e).map_err(|_| unreadable())?)),
                None => Ok((number(value).map_err(|_| unreadable())?, 0.0)),
            }
        };
        let (ppl, ppl_error) = find("Mean PPL(Q)")?;
        let (ppl_base, ppl_base_error) = find("Mean PPL(base)")?;
        let (ln_ppl_ratio, ln_ppl_ratio_error) = find("Mean ln(PPL(Q)/PPL(base))")?;
        let (kld_mean, kld_mean_error) = find("Mean    KLD")?;
        let (rms_dp, rms_dp_error) = find("RMS Δp")?;
        let (same_top_p, same_top_p_error) = find("Same top p")?;
        Ok(Evaluation {
            ppl,
            ppl_error,
            ppl_base,
            ppl_base_error,
            ln_ppl_ratio,
            ln_ppl_ratio_error,
            kld_mean,
            kld_mean_error,
            kld_median: find("Median  KLD")?.0,
            kld_p99: find("99.0%   KLD")?.0,
            kld_max: find("Maximum KLD")?.0,
            rms_dp,
            rms_dp_error,
            same_top_p,
            same_top_p_error,
            bytes,
            bits_per_weight,
        })
    }
}

/// Why what `llama-perplexity` printed gives no [`Evaluation`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatisticsError {
    /// A statistic's line is not there (llama.cpp's logger may lose the last
    /// lines: the same run prints them again).
    #[error("no `{0}` line")]
    Missing(String),
    /// It is there but holds no finite number (the same run prints it again).
    #[error("`{0}` does not read as a finite number")]
    Unreadable(String),
}

/// The metadata key of an evaluation's result set: the [`Evaluation`] as JSON.
const EVALUATION_KEY: &str = "quantforge.evaluation";

impl Evaluation {
    /// The result of an `evaluate` node: no tensors, the evaluation in its
    /// metadata (so the cache keeps it as it keeps any node's result).
    pub fn to_set(&self) -> TensorSet {
        let mut metadata = Metadata::new();
        let json = serde_json::to_string(self).unwrap_or_default();
        metadata.set(EVALUATION_KEY, Value::string(&json));
        TensorSet {
            endian: Endian::Little,
            metadata,
            tensors: Vec::new(),
            header_end: HeaderEnd::Aligned,
            legacy: None,
        }
    }

    /// The evaluation an `evaluate` node's result holds.
    pub fn from_set(set: &TensorSet) -> Option<Evaluation> {
        serde_json::from_str(set.metadata.get(EVALUATION_KEY)?.as_str()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statistics llama-perplexity printed for the tiny model's Q4_K_M.
    const PRINTED: &str = "\
====== Perplexity statistics ======
Mean PPL(Q)                   : 549.005432 ±   8.291643
Mean PPL(base)                : 553.275118 ±   8.598612
Cor(ln(PPL(Q)), ln(PPL(base))):  99.38%
Mean ln(PPL(Q)/PPL(base))     :  -0.007747 ±   0.001755
Mean PPL(Q)/PPL(base)         :   0.992283 ±   0.001742

====== KL divergence statistics ======
Mean    KLD:   0.001687 ±   0.000008
Maximum KLD:   0.002189
99.9%   KLD:   0.002189
99.0%   KLD:   0.002189
Median  KLD:   0.001694
Minimum KLD:   0.001238

====== Token probability statistics ======
Mean    Δp:  0.001 ± 0.000 %
RMS Δp    :  0.013 ± 0.000 %
Same top p: 78.581 ± 1.475 %
";

    #[test]
    fn every_statistic_is_read_as_printed() {
        let e = Evaluation::parse(PRINTED, 900, 4.9).unwrap();
        assert_eq!((e.ppl, e.ppl_error, e.ppl_base), (549.005432, 8.291643, 553.275118));
        assert_eq!((e.ln_ppl_ratio, e.ln_ppl_ratio_error), (-0.007747, 0.001755));
        assert_eq!(
            (e.kld_mean, e.kld_mean_error, e.kld_median, e.kld_p99, e.kld_max),
            (0.001687, 0.000008, 0.001694, 0.002189, 0.002189)
        );
        assert_eq!((e.rms_dp, e.same_top_p, e.same_top_p_error), (0.013, 78.581, 1.475));
    }

    #[test]
    fn a_missing_or_garbled_statistic_is_named() {
        let missing = PRINTED.replace("Same top p", "Other");
        assert_eq!(Evaluation::parse(&missing, 0, 0.0).unwrap_err().to_string(), "no `Same top p` line");
        for garbage in ["nan?", "nan", "inf"] {
            let garbled = PRINTED.replace("0.001687", garbage);
            let err = Evaluation::parse(&garbled, 0, 0.0).unwrap_err().to_string();
            assert!(err.contains(&format!("Mean    KLD:   {garbage} ±   0.000008")), "{err}");
        }
    }

    #[test]
    fn a_logits_file_is_checked_against_its_header() {
        // The tiny model's over 25 chunks of 64 tokens, 512-token vocabulary.
        let mut header = [0u8; LOGITS_HEADER];
        header[..8].copy_from_slice(b"_logits_");
        for (at, value) in [(8, 64i32), (12, 512), (16, 25)] {
            header[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        assert_eq!(check_logits(&header, 806_220, 64), Ok(()));
        assert!(check_logits(&header, 806_219, 64).unwrap_err().contains("makes 806220"));
        assert!(check_logits(&header, 806_220, 128).unwrap_err().contains("64 tokens a chunk"));
        header[0] = b'x';
        assert!(check_logits(&header, 806_220, 64).is_err());
    }

    #[test]
    fn an_evaluation_is_kept_whole_in_its_result() {
        let e = Evaluation::parse(PRINTED, 900, 4.9).unwrap();
        assert_eq!(Evaluation::from_set(&e.to_set()), Some(e));
    }
}
