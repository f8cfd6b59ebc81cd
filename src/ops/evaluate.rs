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

/// The context a chunk fills when the step does not say.
const DEFAULT_CTX: u32 = 512;

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
        let positive = |name: &str| -> Result<Option<u32>, Vec<Diagnostic>> {
            match params.int(name) {
                None => Ok(None),
                Some((n, _)) => match u32::try_from(n) {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(vec![params.error(name, format!("`{name}` must be a positive whole number, not {n}"))]),
                },
            }
        };
        Ok(EvaluateOptions { ctx: positive("ctx")?.unwrap_or(DEFAULT_CTX), chunks: positive("chunks")? })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "ctx": self.ctx, "chunks": self.chunks })
    }

    /// The tool's arguments for these options (the model, text, logits file
    /// and threads are the caller's).
    pub fn arguments(&self) -> Vec<String> {
        let mut args = vec!["-c".to_owned(), self.ctx.to_string()];
        if let Some(chunks) = self.chunks {
            args.extend(["--chunks".to_owned(), chunks.to_string()]);
        }
        args
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
    pub fn parse(printed: &str, bytes: u64, bits_per_weight: f64) -> Result<Evaluation, String> {
        let find = |label: &str| -> Result<(f64, f64), String> {
            let line = printed
                .lines()
                .find(|l| l.starts_with(label) && l[label.len()..].trim_start().starts_with(':'))
                .ok_or_else(|| format!("no `{label}` line"))?;
            let value = line[label.len()..].trim_start()[1..].trim();
            let number = |text: &str| {
                text.trim().trim_end_matches('%').trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or(())
            };
            let unreadable = || format!("`{}` does not read as a finite number", line.trim());
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
        assert_eq!(Evaluation::parse(&missing, 0, 0.0).unwrap_err(), "no `Same top p` line");
        for garbage in ["nan?", "nan", "inf"] {
            let garbled = PRINTED.replace("0.001687", garbage);
            let err = Evaluation::parse(&garbled, 0, 0.0).unwrap_err();
            assert!(err.contains(&format!("Mean    KLD:   {garbage} ±   0.000008")), "{err}");
        }
    }

    #[test]
    fn an_evaluation_is_kept_whole_in_its_result() {
        let e = Evaluation::parse(PRINTED, 900, 4.9).unwrap();
        assert_eq!(Evaluation::from_set(&e.to_set()), Some(e));
    }
}
