//! One home per Hugging Face model family: everything
//! `convert_hf_to_gguf.py` does differently for it (a model class there) as
//! one descriptor — the classes it takes, the `config.json` keys it models,
//! the shared transforms its tensors go through, the tensors it generates,
//! its architecture keys and its vocabulary. A family that differs from
//! LLaMA only in names and hyperparameters is one file here (its tensor
//! names live with the rest of its layout in `arch::registry`).

mod gemma3;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use crate::model::Metadata;

use super::config::Modelled;
use super::error::ConvertError;
use super::hparams::Hparams;

/// How one family converts.
pub struct Conversion {
    /// The `arch::registry` family whose tensor names it writes.
    pub family: &'static str,
    /// Hugging Face `architectures` classes it takes, each with the
    /// `general.architecture` the converter gives it.
    pub classes: &'static [(&'static str, &'static str)],
    /// The `config.json` keys it models.
    pub config: Modelled,
    /// What its checkpoint tensors go through on their way to the file.
    pub transforms: &'static [Transform],
    /// Tensors computed from the configuration, written before the
    /// checkpoint's (`generate_extra_tensors`).
    pub generated: &'static [Generated],
    /// Its `{arch}.*` keys and `general.file_type`, in the converter's order
    /// (`general.quantization_version` follows for every family).
    pub keys: fn(&Hparams<'_>, &mut Metadata) -> Result<(), ConvertError>,
    pub vocab: Vocab,
}

/// The transforms families share, each named once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// LLaMA's Q/K row permutation from Hugging Face's rotate-half layout
    /// to ggml's interleaved one: Q rows over the heads, K rows over the KV
    /// heads (weights and biases).
    PermuteQk,
    /// Norm weights stored as offsets from one (Gemma): one is added, in the
    /// tensor's own dtype.
    NormPlusOne,
    /// The token embedding cut to the config's `vocab_size` rows (Gemma's
    /// checkpoints pad it).
    CutEmbeddingToVocab,
}

/// Tensors a family computes from its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generated {
    /// LLaMA 3's `rope_freqs.weight`, under "llama3" rope scaling.
    Llama3RopeFreqs,
    /// Phi-3's LongRoPE `rope_factors_long`/`_short`, and the attention
    /// factor key the converter writes with them.
    LongRopeFactors,
}

/// How a family's tokenizer becomes `tokenizer.*` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocab {
    /// SentencePiece from `tokenizer.model` when the checkpoint has one,
    /// else GPT-2 BPE from `tokenizer.json` (pre-tokenizer `default_pre`
    /// unless one is given).
    SentencePieceOrBpe { space_prefix: SpacePrefix, default_pre: &'static str },
    /// Phi-3's own SentencePiece reading (every added token by its
    /// `special` flag), or GPT-2 BPE for a `GPT2Tokenizer`.
    Phi3,
    /// GPT-2 BPE from `tokenizer.json` only.
    Bpe { default_pre: &'static str },
}

/// Where a SentencePiece vocabulary's `tokenizer.ggml.add_space_prefix` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpacePrefix {
    /// Not written.
    Unset,
    /// `tokenizer_config.json`'s `add_prefix_space`, when it says.
    FromTokenizerConfig,
    /// Always false, written after the special vocabulary.
    Never,
}

/// Every family, in the order `--print-supported-models` lists them.
pub static CONVERSIONS: &[&Conversion] =
    &[&llama::CONVERSION, &qwen2::CONVERSION, &qwen3::CONVERSION, &gemma3::CONVERSION, &phi3::CONVERSION];

/// The conversion of Hugging Face class `class` and the `general.architecture` it writes.
pub fn of_class(class: &str) -> Option<(&'static Conversion, &'static str)> {
    CONVERSIONS.iter().find_map(|c| c.classes.iter().find(|(name, _)| *name == class).map(|&(_, arch)| (*c, arch)))
}

/// Every class the converter takes, with its `general.architecture`, in listing order.
pub fn supported_classes() -> impl Iterator<Item = (&'static str, &'static str)> {
    CONVERSIONS.iter().flat_map(|c| c.classes.iter().copied())
}

/// The supported classes nearest to `class` in spelling, nearest first.
pub fn nearest_classes(class: &str) -> Vec<&'static str> {
    let mut scored: Vec<(f64, &str)> = supported_classes()
        .map(|(name, _)| (strsim::jaro_winkler(&class.to_lowercase(), &name.to_lowercase()), name))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().filter(|(score, _)| *score > 0.7).take(3).map(|(_, name)| name).collect()
}

impl Conversion {
    pub fn has(&self, transform: Transform) -> bool {
        self.transforms.contains(&transform)
    }

    pub fn generates(&self, generated: Generated) -> bool {
        self.generated.contains(&generated)
    }
}
