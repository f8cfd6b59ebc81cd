//! One home per Hugging Face model family: everything
//! `convert_hf_to_gguf.py` does differently for it (a model class there) as
//! one descriptor — the classes it takes, the `config.json` keys it models,
//! the shared transforms its tensors go through, the tensors it generates,
//! its architecture keys and its vocabulary. A family that differs from
//! LLaMA only in names and hyperparameters is one file here (its tensor
//! names live with the rest of its layout in `arch::registry`).

mod arcee;
pub(super) mod bert;
mod cohere;
mod deepseek;
mod ernie;
mod exaone4;
mod falcon;
mod gemma;
pub(super) mod gemma3;
mod glm4;
mod gpt2;
mod gpt_oss;
mod gptneox;
mod granite;
mod granite_moe;
mod internlm2;
mod lfm2;
mod llama;
pub(super) mod llava;
mod mixtral;
mod olmo;
mod olmo2;
mod olmoe;
mod phi2;
mod phi3;
pub(super) mod pixtral;
mod qwen2;
pub(super) mod qwen2vl;
mod qwen3;
mod qwen_moe;
mod seed_oss;
mod smollm3;
mod stablelm;
mod starcoder2;

use crate::model::Metadata;

use super::config::Modelled;
use super::error::ConvertError;
use super::hparams::Hparams;
use super::tensors::ExpertPart;

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
    /// Checkpoint tensors left out, by the ending of their names: those the
    /// converter filters (`filter_tensors`), and buffers that are no weights.
    pub dropped: &'static [&'static str],
    /// Tensors computed from the configuration, written before the
    /// checkpoint's (`generate_extra_tensors`).
    pub generated: &'static [Generated],
    /// Its `{arch}.*` keys and `general.file_type`, in the converter's order
    /// (`general.quantization_version` follows for every family).
    pub keys: fn(&Hparams<'_>, &mut Metadata) -> Result<(), ConvertError>,
    pub vocab: Vocab,
}

/// The transforms families share, each named once.
#[derive(Debug, Clone, Copy)]
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
    /// Per-expert tensors stacked into one 3-D tensor a projection.
    StackExperts(&'static Experts),
    /// Fused tensors split into their projections, or their rows reordered
    /// into the layout llama.cpp reads.
    Fused(&'static [Fused]),
    /// The multi-token-prediction blocks past `num_hidden_layers`
    /// (DeepSeek-V3's), which the converter leaves out.
    DropNextTokenBlocks,
    /// 2-D tensors stored as `[in, out]` (GPT-2's Conv1D weights),
    /// transposed to ggml's `[out, in]`: those whose names end so.
    Transpose(&'static [&'static str]),
    /// The family's `filter_tensors`: a checkpoint tensor's name as the
    /// mapping reads it, or `None` for one the converter leaves out.
    Rename(fn(&str) -> Option<std::borrow::Cow<'_, str>>),
    /// 3-D tensors stored `[rows, 1, width]` (LFM2's short convolution),
    /// written 2-D: those whose names end so.
    Squeeze(&'static [&'static str]),
    /// RoBERTa's positions, which start past the padding id: the position
    /// embedding's first `pad_token_id + 1` rows dropped.
    PositionsPastPadding,
    /// Weights an MXFP4 checkpoint publishes as codes and scales
    /// (`convert::mxfp4`), written MXFP4 before any other tensor, as the
    /// converter's `generate_extra_tensors` writes them.
    Mxfp4(&'static [Mxfp4Split]),
}

/// One tensor written from an MXFP4 weight of a block.
#[derive(Debug)]
pub struct Mxfp4Split {
    /// The weight's name after `model.layers.{N}.`, without `_blocks`/`_scales`.
    pub hf: &'static str,
    /// Its GGUF name, `{N}` the block.
    pub name: &'static str,
    /// The rows of each expert it takes; all when `None`.
    pub rows: Option<crate::artifact::RowRange>,
}

/// A fused checkpoint tensor and what the converter makes of it.
#[derive(Debug)]
pub struct Fused {
    /// Its name after `model.layers.{N}.` (`attention.query_key_value`), weight or bias alike.
    pub hf: &'static str,
    /// For this config: each tensor written (its GGUF name, `{N}` the
    /// block) with the runs of the fused tensor's rows it holds, stacked in
    /// order (one run: a projection split off; several: rows reordered).
    pub pieces: fn(&serde_json::Value) -> Result<Vec<Piece>, ConvertError>,
}

/// One tensor written from a fused one.
#[derive(Debug)]
pub struct Piece {
    /// Its GGUF name, `{N}` the block.
    pub name: &'static str,
    /// The runs of the fused tensor's rows it holds, stacked in order.
    pub runs: Vec<crate::artifact::RowTransform>,
    /// Written 3-D, its rows cut into this many slices (DeepSeek's MLA
    /// projections, a slice a head); 2-D when `None`.
    pub slices: Option<u64>,
}

impl Piece {
    /// A 2-D piece of these runs.
    pub fn rows(name: &'static str, runs: Vec<crate::artifact::RowTransform>) -> Piece {
        Piece { name, runs, slices: None }
    }
}

/// How a family stores its experts: one 2-D tensor an expert and
/// projection, which the converter stacks into one `[experts, rows, cols]`
/// tensor a projection (`*_exps`), streamed a slab at a time.
#[derive(Debug, PartialEq, Eq)]
pub struct Experts {
    /// A per-expert tensor's name: `{N}` the block, `{E}` the expert, `{W}`
    /// the projection.
    pub pattern: &'static str,
    /// Each projection (`{W}`) with its stack's GGUF name (`{N}` the block),
    /// in the order the converter writes the stacks.
    pub projections: &'static [(&'static str, &'static str)],
    /// The config keys of the number of experts, first found first.
    pub count: &'static [&'static str],
}

impl Experts {
    /// Where `name` belongs if it is one expert's tensor.
    pub(in crate::convert) fn part<'n>(&self, name: &'n str) -> Option<ExpertPart<'n>> {
        let (mut block, mut expert, mut projection) = (None, None, None);
        let mut rest = name;
        let mut pattern = self.pattern;
        while let Some(open) = pattern.find('{') {
            rest = rest.strip_prefix(&pattern[..open])?;
            let close = open + pattern[open..].find('}')?;
            let field = &pattern[open + 1..close];
            pattern = &pattern[close + 1..];
            let end = match pattern.find('{') {
                Some(next) => rest.find(&pattern[..next])?,
                None => rest.len().checked_sub(pattern.len())?,
            };
            let value = &rest[..end];
            rest = &rest[end..];
            match field {
                "N" => block = Some(value.parse().ok()?),
                "E" => expert = Some(value.parse().ok()?),
                _ => projection = self.projections.iter().any(|(w, _)| *w == value).then_some(value),
            }
        }
        (rest == pattern).then_some(())?;
        Some(ExpertPart { block: block?, expert: expert?, projection: projection? })
    }
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

/// How a family's tokenizer becomes `tokenizer.*` keys (`set_vocab`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocab {
    /// `LlamaModel`'s: `tokenizer_config.json`'s `add_prefix_space` first,
    /// then SentencePiece from `tokenizer.model` or GPT-2 BPE from
    /// `tokenizer.json`;
    /// CodeLlama's end-of-turn id for a vocabulary of 32016, no BOS for one
    /// of 49152.
    Llama,
    /// SentencePiece when the checkpoint has `tokenizer.model`, else GPT-2 BPE.
    SentencePieceOrBpe,
    /// Gemma's: SentencePiece, then the fill-in-the-middle end-of-turn id
    /// when `end_of_turn` (this one, unless `config.json` gives
    /// `eot_token_id`), then `add_space_prefix` false.
    Gemma { end_of_turn: Option<u64> },
    /// Phi-3's own SentencePiece reading (every added token by its
    /// `special` flag), or GPT-2 BPE for a `GPT2Tokenizer`.
    Phi3,
    /// GPT-2 BPE from `tokenizer.json` only (`TextModel`'s default).
    Bpe,
    /// BERT's WordPiece from `tokenizer.json`: the token-type count first,
    /// every token but the special ones written with a phantom space
    /// (`▁`) unless it continues a word (`##`, dropped).
    WordPiece,
    /// RoBERTa's: GPT-2 BPE from `tokenizer.json`, then the token-type
    /// count; BERT's WordPiece without one.
    Roberta,
    /// XLM-RoBERTa's: its SentencePiece Unigram model in fairseq's ids, as
    /// llama.cpp's T5 tokenizer reads it, with the token-type count.
    XlmRoberta,
    /// ModernBERT's: BOS, EOS and SEP added, then GPT-2 BPE.
    ModernBert,
    /// InternLM2's own SentencePiece reading: `[UNUSED…` pieces unused, a
    /// NUL piece written as 🐉, `added_tokens.json` appended, the added
    /// tokens of `tokenizer_config.json` and `tokenizer.json` put in their
    /// places, `<|im_end|>` (when added) as the end of sequence.
    InternLm2,
    /// GLM-4's: GPT-2 BPE, its end, end-of-turn, unknown and beginning ids
    /// (those the tokenizer files leave unset) its added `<|endoftext|>`,
    /// `<|user|>`, `<|endoftext|>` and `<|endoftext|>`.
    Glm4,
    /// SentencePiece, then `tokenizer_config.json`'s `add_prefix_space`
    /// (when it has one) as `add_space_prefix` (ERNIE's).
    SentencePieceThenSpacePrefix,
}

/// Every family, in the order `--print-supported-models` lists them.
pub static CONVERSIONS: &[&Conversion] = &[
    &llama::CONVERSION,
    &mixtral::CONVERSION,
    &qwen2::CONVERSION,
    &qwen2vl::CONVERSION,
    &qwen_moe::QWEN2_MOE,
    &qwen3::CONVERSION,
    &qwen_moe::QWEN3_MOE,
    &gemma::GEMMA,
    &gemma::GEMMA2,
    &gemma3::CONVERSION,
    &phi3::CONVERSION,
    &starcoder2::CONVERSION,
    &olmo2::CONVERSION,
    &olmo2::OLMO3,
    &olmoe::CONVERSION,
    &granite::CONVERSION,
    &granite_moe::CONVERSION,
    &smollm3::CONVERSION,
    &olmo::CONVERSION,
    &cohere::COMMAND_R,
    &cohere::COHERE2,
    &phi2::CONVERSION,
    &stablelm::CONVERSION,
    &gptneox::CONVERSION,
    &ernie::CONVERSION,
    &falcon::CONVERSION,
    &gpt2::CONVERSION,
    &deepseek::DEEPSEEK_V2,
    &deepseek::DEEPSEEK_V3,
    &bert::CONVERSION,
    &bert::DISTILBERT,
    &bert::ROBERTA,
    &glm4::CONVERSION,
    &lfm2::CONVERSION,
    &exaone4::CONVERSION,
    &bert::NOMIC_BERT,
    &bert::XLM_ROBERTA,
    &internlm2::CONVERSION,
    &bert::MODERN_BERT,
    &arcee::CONVERSION,
    &seed_oss::CONVERSION,
    &gpt_oss::CONVERSION,
    &ernie::MOE,
];

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
        let same = |t: &Transform| std::mem::discriminant(t) == std::mem::discriminant(&transform);
        self.transforms.iter().any(same)
    }

    pub fn generates(&self, generated: Generated) -> bool {
        self.generated.contains(&generated)
    }

    /// The fused tensors it splits or reorders.
    pub fn fused(&self) -> &'static [Fused] {
        self.transforms
            .iter()
            .find_map(|t| match t {
                Transform::Fused(fused) => Some(*fused),
                _ => None,
            })
            .unwrap_or(&[])
    }

    /// Whether its checkpoint tensor `hf` is stored transposed.
    pub fn transposes(&self, hf: &str) -> bool {
        self.transforms.iter().any(|t| matches!(t, Transform::Transpose(ends) if ends.iter().any(|e| hf.ends_with(e))))
    }

    /// Whether its checkpoint tensor `hf` loses a unit dimension.
    pub fn squeezes(&self, hf: &str) -> bool {
        self.transforms.iter().any(|t| matches!(t, Transform::Squeeze(ends) if ends.iter().any(|e| hf.ends_with(e))))
    }

    /// Checkpoint tensor `hf` under the name the mapping reads, or `None`
    /// when the family leaves it out.
    pub fn renamed<'a>(&self, hf: &'a str) -> Option<std::borrow::Cow<'a, str>> {
        let rename = self.transforms.iter().find_map(|t| match t {
            Transform::Rename(rename) => Some(*rename),
            _ => None,
        });
        match rename {
            Some(rename) => rename(hf),
            None => Some(std::borrow::Cow::Borrowed(hf)),
        }
    }

    /// The tensors it writes from an MXFP4 weight.
    pub fn mxfp4_splits(&self) -> &'static [Mxfp4Split] {
        self.transforms
            .iter()
            .find_map(|t| match t {
                Transform::Mxfp4(splits) => Some(*splits),
                _ => None,
            })
            .unwrap_or(&[])
    }

    /// How its experts are stored, if it has any.
    pub fn experts(&self) -> Option<&'static Experts> {
        self.transforms.iter().find_map(|t| match t {
            Transform::StackExperts(experts) => Some(*experts),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXTRAL: Experts = Experts {
        pattern: "model.layers.{N}.block_sparse_moe.experts.{E}.{W}.weight",
        projections: &[("w1", "blk.{N}.ffn_gate_exps"), ("w2", "blk.{N}.ffn_down_exps")],
        count: &["num_local_experts"],
    };

    #[test]
    fn expert_names_are_read_by_pattern() {
        let part = MIXTRAL.part("model.layers.12.block_sparse_moe.experts.3.w2.weight").unwrap();
        assert_eq!((part.block, part.expert, part.projection), (12, 3, "w2"));
        for other in [
            "model.layers.12.block_sparse_moe.experts.3.w9.weight",
            "model.layers.x.block_sparse_moe.experts.3.w1.weight",
            "model.layers.1.block_sparse_moe.experts.3.w1.bias",
            "model.layers.1.block_sparse_moe.gate.weight",
        ] {
            assert!(MIXTRAL.part(other).is_none(), "{other}");
        }
    }

    #[test]
    fn every_class_has_one_conversion() {
        let mut classes: Vec<&str> = supported_classes().map(|(class, _)| class).collect();
        let n = classes.len();
        classes.sort_unstable();
        classes.dedup();
        assert_eq!(classes.len(), n, "a class is claimed twice");
    }
}
