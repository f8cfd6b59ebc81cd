//! The architecture registry: one descriptor per model family, as data, and
//! the detection that picks one for a file.
//!
//! A descriptor says what llama.cpp calls the family (`general.architecture`,
//! which is also its metadata key prefix, or the mmproj projector types that
//! belong to it), how its layout differs from the common one (norm epsilon
//! key, rotary pairing, fused projections, the final norm's name, tied
//! output) and how its main tensors are named in Hugging Face checkpoints.
//! Roles of tensors come from the names llama.cpp uses for every
//! architecture ([`role_of`]). Detection goes from the surest evidence to the
//! weakest, as a faithful importer must: the architecture
//! string, then secondary checks (experts, name hints), then a scan for
//! tensor-name signatures, then the generic fallback that keeps every tensor
//! by its raw name.

use super::clip::{Encoder, projector_type};
use crate::model::{Metadata, TensorInfo};

/// A model family and what is known of its layout.
#[derive(Debug, PartialEq)]
pub struct Family {
    /// Stable identifier (`llama`, `mixtral`, `gemma3`, …), as `inspect` shows it.
    pub id: &'static str,
    /// Name for people.
    pub name: &'static str,
    /// The `general.architecture` strings that are this family's alone.
    pub architectures: &'static [&'static str],
    /// Architecture strings it shares with another family, claimed only
    /// with evidence: a positive expert count ([`Family::has_experts`]) or a
    /// name hint.
    pub refines: &'static [&'static str],
    /// `clip.projector_type` values of its mmproj files.
    pub projectors: &'static [&'static str],
    /// Lower-case fragments of `general.name`/`general.basename` that claim a
    /// shared architecture string for this family.
    pub name_hints: &'static [&'static str],
    /// Whether a positive expert count claims a shared architecture string.
    pub has_experts: bool,
    /// Tensor names only this family uses (the scan's evidence).
    pub signatures: &'static [&'static str],
    pub layout: Layout,
}

/// Where a family's layout departs from the common decoder.
#[derive(Debug, PartialEq)]
pub struct Layout {
    pub norm_epsilon: NormEpsilon,
    pub rope: Rope,
    /// Tensors holding several projections side by side along `ne[1]`.
    pub fused: &'static [Fused],
    /// The final norm's name (LFM2 stores it as `token_embd_norm`).
    pub output_norm: &'static str,
    pub output: Output,
    /// Hugging Face ↔ GGUF names of the main tensors, `{N}` for the block.
    pub hf_names: &'static [&'static [(&'static str, &'static str)]],
    /// Which layers llama.cpp's loader marks sliding-window or recurrent.
    pub layers: LayerKinds,
}

/// Which of a model's layers llama.cpp's loader marks as sliding-window
/// attention (`is_swa`) or recurrent (`is_recr`); all other layers are full
/// attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKinds {
    Uniform,
    /// Sliding-window layers in a period, as `load_swa_pattern` marks them:
    /// `ARCH.attention.sliding_window_pattern` when the file has it (a flag
    /// per layer, or the period), else `period`; the full-attention layer
    /// comes last in each period, or first with `dense_first`.
    SlidingWindow {
        period: u32,
        dense_first: bool,
        when: WindowRule,
    },
    /// Layers without KV heads are recurrent (LFM2's convolutions); with a
    /// positive `ARCH.attention.sliding_window` the others slide.
    RecurrentWithoutKvHeads,
    /// Linear-attention (gated delta net) layers between full-attention
    /// ones (Qwen3-Next, Qwen3.5): `ARCH.attention.recurrent_layers` when
    /// the file has it (a flag per layer), else all but every
    /// `ARCH.full_attention_interval`-th layer (default 4) recur.
    LinearAttention,
}

/// When a family's sliding-window pattern applies, by
/// `ARCH.attention.sliding_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowRule {
    Always,
    /// Only with a window given and positive (Gemma 3, OLMo 2).
    Positive,
    /// Unless a window of 0 is given (LLaMA 4).
    UnlessZero,
}

/// The metadata key (after `ARCH.attention.`) llama.cpp reads the norm epsilon from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormEpsilon {
    Rms,
    Layer,
}

impl NormEpsilon {
    pub fn key_suffix(self) -> &'static str {
        match self {
            NormEpsilon::Rms => "attention.layer_norm_rms_epsilon",
            NormEpsilon::Layer => "attention.layer_norm_epsilon",
        }
    }
}

/// How rotary embeddings pair dimensions: `Norm` pairs neighbours, so
/// checkpoints that rotate halves have their Q/K rows permuted on conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rope {
    Norm,
    Neox,
    /// Multi-section RoPE (`rope.dimension_sections`), the sections side by side.
    Mrope,
    /// Interleaved multi-section RoPE (`rope.dimension_sections`).
    Imrope,
    None,
}

/// Whether `output.weight` is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Optional: absent means tied to `token_embd.weight`.
    MayTie,
    /// Never read: always tied.
    AlwaysTied,
    /// Required.
    Own,
}

/// A tensor that holds several projections, in order along `ne[1]`.
#[derive(Debug, PartialEq)]
pub struct Fused {
    /// The tensor's name within a block (`attn_qkv`, `ffn_up`).
    pub tensor: &'static str,
    pub parts: &'static [&'static str],
}

const QKV: Fused = Fused { tensor: "attn_qkv", parts: &["q", "k", "v"] };
const GATE_UP: Fused = Fused { tensor: "ffn_up", parts: &["gate", "up"] };

const COMMON: Layout = Layout {
    norm_epsilon: NormEpsilon::Rms,
    rope: Rope::Norm,
    fused: &[],
    output_norm: "output_norm",
    output: Output::MayTie,
    hf_names: &[DECODER_NAMES],
    layers: LayerKinds::Uniform,
};

/// The names every LLaMA-shaped checkpoint shares.
const DECODER_NAMES: &[(&str, &str)] = &[
    ("token_embd", "model.embed_tokens"),
    ("output", "lm_head"),
    ("output_norm", "model.norm"),
    ("blk.{N}.attn_norm", "model.layers.{N}.input_layernorm"),
    ("blk.{N}.attn_q", "model.layers.{N}.self_attn.q_proj"),
    ("blk.{N}.attn_k", "model.layers.{N}.self_attn.k_proj"),
    ("blk.{N}.attn_v", "model.layers.{N}.self_attn.v_proj"),
    ("blk.{N}.attn_output", "model.layers.{N}.self_attn.o_proj"),
    ("blk.{N}.ffn_gate", "model.layers.{N}.mlp.gate_proj"),
    ("blk.{N}.ffn_up", "model.layers.{N}.mlp.up_proj"),
    ("blk.{N}.ffn_down", "model.layers.{N}.mlp.down_proj"),
];
const PRE_FFN_NORM: &[(&str, &str)] = &[("blk.{N}.ffn_norm", "model.layers.{N}.post_attention_layernorm")];
/// Gemma 2/3 and OLMo 2 norm around both halves of a block: HF's
/// `post_attention_layernorm` is a post-norm there, not the FFN's pre-norm.
const SANDWICH_NORMS: &[(&str, &str)] = &[
    ("blk.{N}.post_attention_norm", "model.layers.{N}.post_attention_layernorm"),
    ("blk.{N}.ffn_norm", "model.layers.{N}.pre_feedforward_layernorm"),
    ("blk.{N}.post_ffw_norm", "model.layers.{N}.post_feedforward_layernorm"),
];
/// Seed-OSS and GPT-OSS name the FFN's pre-norm as llama.cpp's post-attention norm.
const SEED_OSS_NORMS: &[(&str, &str)] = &[("blk.{N}.post_attention_norm", "model.layers.{N}.post_attention_layernorm")];
const QK_NORMS: &[(&str, &str)] = &[
    ("blk.{N}.attn_q_norm", "model.layers.{N}.self_attn.q_norm"),
    ("blk.{N}.attn_k_norm", "model.layers.{N}.self_attn.k_norm"),
];
const MIXTRAL_EXPERTS: &[(&str, &str)] = &[
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.block_sparse_moe.gate"),
    ("blk.{N}.ffn_norm", "model.layers.{N}.post_attention_layernorm"),
];
/// Qwen-style mixture of experts: the router, a shared expert and its gate
/// (the per-expert tensors stack into `*_exps`: `convert::family`).
const QWEN_MOE_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.mlp.gate"),
    ("blk.{N}.ffn_gate_shexp", "model.layers.{N}.mlp.shared_expert.gate_proj"),
    ("blk.{N}.ffn_up_shexp", "model.layers.{N}.mlp.shared_expert.up_proj"),
    ("blk.{N}.ffn_down_shexp", "model.layers.{N}.mlp.shared_expert.down_proj"),
    ("blk.{N}.ffn_gate_inp_shexp", "model.layers.{N}.mlp.shared_expert_gate"),
];
/// GPT-OSS: the attention sinks, the router (the stacked experts are split
/// and transposed: `convert::family::gpt_oss`).
const GPT_OSS_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.attn_sinks", "model.layers.{N}.self_attn.sinks"),
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.mlp.router"),
];
/// ERNIE 4.5 MoE: the router, the score-correction bias and the shared
/// experts (the per-expert tensors stack into `*_exps`: `convert::family`).
const ERNIE_MOE_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.mlp.gate"),
    ("blk.{N}.exp_probs_b.bias", "model.layers.{N}.mlp.moe_statics.e_score_correction_bias"),
    ("blk.{N}.ffn_gate_shexp", "model.layers.{N}.mlp.shared_experts.gate_proj"),
    ("blk.{N}.ffn_up_shexp", "model.layers.{N}.mlp.shared_experts.up_proj"),
    ("blk.{N}.ffn_down_shexp", "model.layers.{N}.mlp.shared_experts.down_proj"),
];
/// GPT-NeoX (Pythia): its own names throughout, Q/K/V fused by head.
const GPTNEOX_NAMES: &[(&str, &str)] = &[
    ("token_embd", "gpt_neox.embed_in"),
    ("output", "embed_out"),
    ("output_norm", "gpt_neox.final_layer_norm"),
    ("blk.{N}.attn_norm", "gpt_neox.layers.{N}.input_layernorm"),
    ("blk.{N}.ffn_norm", "gpt_neox.layers.{N}.post_attention_layernorm"),
    ("blk.{N}.attn_qkv", "gpt_neox.layers.{N}.attention.query_key_value"),
    ("blk.{N}.attn_output", "gpt_neox.layers.{N}.attention.dense"),
    ("blk.{N}.ffn_up", "gpt_neox.layers.{N}.mlp.dense_h_to_4h"),
    ("blk.{N}.ffn_down", "gpt_neox.layers.{N}.mlp.dense_4h_to_h"),
];
/// Falcon: its own names; Falcon-40B's two norms a block.
const FALCON_NAMES: &[(&str, &str)] = &[
    ("token_embd", "transformer.word_embeddings"),
    ("output", "lm_head"),
    ("output_norm", "transformer.ln_f"),
    ("blk.{N}.attn_norm", "transformer.h.{N}.input_layernorm"),
    ("blk.{N}.attn_norm_2", "transformer.h.{N}.ln_attn"),
    ("blk.{N}.attn_norm", "transformer.h.{N}.ln_mlp"),
    ("blk.{N}.attn_qkv", "transformer.h.{N}.self_attention.query_key_value"),
    ("blk.{N}.attn_output", "transformer.h.{N}.self_attention.dense"),
    ("blk.{N}.ffn_up", "transformer.h.{N}.mlp.dense_h_to_4h"),
    ("blk.{N}.ffn_down", "transformer.h.{N}.mlp.dense_4h_to_h"),
];
/// DeepSeek-V2/V3: latent attention (queries through a low-rank pair or
/// not, keys and values through one compressed projection), a router with
/// V3's score bias, shared experts beside the stacked ones.
const DEEPSEEK2_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.attn_q_a", "model.layers.{N}.self_attn.q_a_proj"),
    ("blk.{N}.attn_q_a_norm", "model.layers.{N}.self_attn.q_a_layernorm"),
    ("blk.{N}.attn_q_b", "model.layers.{N}.self_attn.q_b_proj"),
    ("blk.{N}.attn_kv_a_mqa", "model.layers.{N}.self_attn.kv_a_proj_with_mqa"),
    ("blk.{N}.attn_kv_a_norm", "model.layers.{N}.self_attn.kv_a_layernorm"),
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.mlp.gate"),
    ("blk.{N}.exp_probs_b.bias", "model.layers.{N}.mlp.gate.e_score_correction_bias"),
    ("blk.{N}.ffn_gate_shexp", "model.layers.{N}.mlp.shared_experts.gate_proj"),
    ("blk.{N}.ffn_up_shexp", "model.layers.{N}.mlp.shared_experts.up_proj"),
    ("blk.{N}.ffn_down_shexp", "model.layers.{N}.mlp.shared_experts.down_proj"),
];
/// GPT-2: learned positions, Q/K/V fused, every name its own (with and
/// without the `transformer.` of `GPT2LMHeadModel`).
const GPT2_NAMES: &[(&str, &str)] = &[
    ("token_embd", "transformer.wte"),
    ("position_embd", "transformer.wpe"),
    ("output_norm", "transformer.ln_f"),
    ("output", "lm_head"),
    ("blk.{N}.attn_norm", "transformer.h.{N}.ln_1"),
    ("blk.{N}.attn_qkv", "transformer.h.{N}.attn.c_attn"),
    ("blk.{N}.attn_output", "transformer.h.{N}.attn.c_proj"),
    ("blk.{N}.ffn_norm", "transformer.h.{N}.ln_2"),
    ("blk.{N}.ffn_up", "transformer.h.{N}.mlp.c_fc"),
    ("blk.{N}.ffn_down", "transformer.h.{N}.mlp.c_proj"),
    ("token_embd", "wte"),
    ("position_embd", "wpe"),
    ("output_norm", "ln_f"),
    ("blk.{N}.attn_norm", "h.{N}.ln_1"),
    ("blk.{N}.attn_qkv", "h.{N}.attn.c_attn"),
    ("blk.{N}.attn_output", "h.{N}.attn.c_proj"),
    ("blk.{N}.ffn_norm", "h.{N}.ln_2"),
    ("blk.{N}.ffn_up", "h.{N}.mlp.c_fc"),
    ("blk.{N}.ffn_down", "h.{N}.mlp.c_proj"),
];
/// BERT: an encoder of post-norm blocks, learned positions and token types,
/// a LayerNorm over the embeddings (names after the converter strips
/// `bert.`).
const BERT_NAMES: &[(&str, &str)] = &[
    ("token_embd", "embeddings.word_embeddings"),
    ("token_types", "embeddings.token_type_embeddings"),
    ("position_embd", "embeddings.position_embeddings"),
    ("token_embd_norm", "embeddings.LayerNorm"),
    ("blk.{N}.attn_q", "encoder.layer.{N}.attention.self.query"),
    ("blk.{N}.attn_k", "encoder.layer.{N}.attention.self.key"),
    ("blk.{N}.attn_v", "encoder.layer.{N}.attention.self.value"),
    ("blk.{N}.attn_output", "encoder.layer.{N}.attention.output.dense"),
    ("blk.{N}.attn_output_norm", "encoder.layer.{N}.attention.output.LayerNorm"),
    ("blk.{N}.ffn_up", "encoder.layer.{N}.intermediate.dense"),
    ("blk.{N}.ffn_down", "encoder.layer.{N}.output.dense"),
    ("blk.{N}.layer_output_norm", "encoder.layer.{N}.output.LayerNorm"),
];
/// ModernBERT: fused Q/K/V and GLU pair, pre-norms (none before the
/// first block's attention), a final norm.
const MODERN_BERT_NAMES: &[(&str, &str)] = &[
    ("token_embd", "embeddings.tok_embeddings"),
    ("token_embd_norm", "embeddings.norm"),
    ("output_norm", "final_norm"),
    ("blk.{N}.attn_norm", "layers.{N}.attn_norm"),
    ("blk.{N}.attn_qkv", "layers.{N}.attn.Wqkv"),
    ("blk.{N}.attn_output", "layers.{N}.attn.Wo"),
    ("blk.{N}.ffn_norm", "layers.{N}.mlp_norm"),
    ("blk.{N}.ffn_up", "layers.{N}.mlp.Wi"),
    ("blk.{N}.ffn_down", "layers.{N}.mlp.Wo"),
];
/// Nomic BERT: fused Q/K/V, a SwiGLU feed-forward, rotary positions.
const NOMIC_BERT_NAMES: &[(&str, &str)] = &[
    ("token_embd", "embeddings.word_embeddings"),
    ("token_types", "embeddings.token_type_embeddings"),
    ("token_embd_norm", "emb_ln"),
    ("blk.{N}.attn_qkv", "encoder.layers.{N}.attn.Wqkv"),
    ("blk.{N}.attn_output", "encoder.layers.{N}.attn.out_proj"),
    ("blk.{N}.attn_output_norm", "encoder.layers.{N}.norm1"),
    ("blk.{N}.ffn_up", "encoder.layers.{N}.mlp.fc11"),
    ("blk.{N}.ffn_gate", "encoder.layers.{N}.mlp.fc12"),
    ("blk.{N}.ffn_down", "encoder.layers.{N}.mlp.fc2"),
    ("blk.{N}.layer_output_norm", "encoder.layers.{N}.norm2"),
];
/// DistilBERT: BERT's blocks under names of its own, no token types.
const DISTILBERT_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.attn_q", "transformer.layer.{N}.attention.q_lin"),
    ("blk.{N}.attn_k", "transformer.layer.{N}.attention.k_lin"),
    ("blk.{N}.attn_v", "transformer.layer.{N}.attention.v_lin"),
    ("blk.{N}.attn_output", "transformer.layer.{N}.attention.out_lin"),
    ("blk.{N}.attn_output_norm", "transformer.layer.{N}.sa_layer_norm"),
    ("blk.{N}.ffn_up", "transformer.layer.{N}.ffn.lin1"),
    ("blk.{N}.ffn_down", "transformer.layer.{N}.ffn.lin2"),
    ("blk.{N}.layer_output_norm", "transformer.layer.{N}.output_layer_norm"),
];
/// Phi-2: a parallel block around one LayerNorm, a GELU MLP.
const PHI2_NAMES: &[(&str, &str)] = &[
    ("output_norm", "model.final_layernorm"),
    ("blk.{N}.attn_output", "model.layers.{N}.self_attn.dense"),
    ("blk.{N}.ffn_up", "model.layers.{N}.mlp.fc1"),
    ("blk.{N}.ffn_down", "model.layers.{N}.mlp.fc2"),
];
/// Granite MoE's experts: a router, and the down projections already stacked.
const GRANITE_MOE_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.ffn_gate_inp", "model.layers.{N}.block_sparse_moe.router.layer"),
    ("blk.{N}.ffn_down_exps", "model.layers.{N}.block_sparse_moe.output_linear"),
];
/// StarCoder 2's GELU MLP.
const STARCODER2_NAMES: &[(&str, &str)] =
    &[("blk.{N}.ffn_up", "model.layers.{N}.mlp.c_fc"), ("blk.{N}.ffn_down", "model.layers.{N}.mlp.c_proj")];
const PHI3_NAMES: &[(&str, &str)] = &[
    ("blk.{N}.attn_qkv", "model.layers.{N}.self_attn.qkv_proj"),
    ("blk.{N}.ffn_up", "model.layers.{N}.mlp.gate_up_proj"),
];
/// InternLM2: LLaMA's blocks under names of its own, Q/K/V fused by KV group.
const INTERNLM2_NAMES: &[(&str, &str)] = &[
    ("token_embd", "model.tok_embeddings"),
    ("output", "output"),
    ("output_norm", "model.norm"),
    ("blk.{N}.attn_norm", "model.layers.{N}.attention_norm"),
    ("blk.{N}.attn_output", "model.layers.{N}.attention.wo"),
    ("blk.{N}.ffn_norm", "model.layers.{N}.ffn_norm"),
    ("blk.{N}.ffn_gate", "model.layers.{N}.feed_forward.w1"),
    ("blk.{N}.ffn_up", "model.layers.{N}.feed_forward.w3"),
    ("blk.{N}.ffn_down", "model.layers.{N}.feed_forward.w2"),
];
const CHATGLM_NAMES: &[(&str, &str)] = &[
    ("token_embd", "transformer.embedding.word_embeddings"),
    ("output", "transformer.output_layer"),
    ("output_norm", "transformer.encoder.final_layernorm"),
    ("blk.{N}.attn_norm", "transformer.encoder.layers.{N}.input_layernorm"),
    ("blk.{N}.attn_qkv", "transformer.encoder.layers.{N}.self_attention.query_key_value"),
    ("blk.{N}.attn_output", "transformer.encoder.layers.{N}.self_attention.dense"),
    ("blk.{N}.ffn_norm", "transformer.encoder.layers.{N}.post_attention_layernorm"),
    ("blk.{N}.ffn_up", "transformer.encoder.layers.{N}.mlp.dense_h_to_4h"),
    ("blk.{N}.ffn_down", "transformer.encoder.layers.{N}.mlp.dense_4h_to_h"),
];
const GLM4_NORMS: &[(&str, &str)] = &[
    ("blk.{N}.post_attention_norm", "model.layers.{N}.post_self_attn_layernorm"),
    ("blk.{N}.ffn_norm", "model.layers.{N}.post_attention_layernorm"),
    ("blk.{N}.post_ffw_norm", "model.layers.{N}.post_mlp_layernorm"),
    ("blk.{N}.ffn_up", "model.layers.{N}.mlp.gate_up_proj"),
];
const LFM2_NAMES: &[(&str, &str)] = &[
    ("token_embd", "model.embed_tokens"),
    ("token_embd_norm", "model.embedding_norm"),
    ("blk.{N}.attn_norm", "model.layers.{N}.operator_norm"),
    ("blk.{N}.ffn_norm", "model.layers.{N}.ffn_norm"),
    ("blk.{N}.attn_q", "model.layers.{N}.self_attn.q_proj"),
    ("blk.{N}.attn_k", "model.layers.{N}.self_attn.k_proj"),
    ("blk.{N}.attn_v", "model.layers.{N}.self_attn.v_proj"),
    ("blk.{N}.attn_output", "model.layers.{N}.self_attn.out_proj"),
    ("blk.{N}.attn_q_norm", "model.layers.{N}.self_attn.q_layernorm"),
    ("blk.{N}.attn_k_norm", "model.layers.{N}.self_attn.k_layernorm"),
    ("blk.{N}.shortconv.conv", "model.layers.{N}.conv.conv"),
    ("blk.{N}.shortconv.in_proj", "model.layers.{N}.conv.in_proj"),
    ("blk.{N}.shortconv.out_proj", "model.layers.{N}.conv.out_proj"),
    ("blk.{N}.ffn_gate", "model.layers.{N}.feed_forward.w1"),
    ("blk.{N}.ffn_up", "model.layers.{N}.feed_forward.w3"),
    ("blk.{N}.ffn_down", "model.layers.{N}.feed_forward.w2"),
];
const OPENELM_NAMES: &[(&str, &str)] = &[
    ("token_embd", "transformer.token_embeddings"),
    ("output_norm", "transformer.norm"),
    ("blk.{N}.attn_norm", "transformer.layers.{N}.attn_norm"),
    ("blk.{N}.attn_qkv", "transformer.layers.{N}.attn.qkv_proj"),
    ("blk.{N}.attn_q_norm", "transformer.layers.{N}.attn.q_norm"),
    ("blk.{N}.attn_k_norm", "transformer.layers.{N}.attn.k_norm"),
    ("blk.{N}.attn_output", "transformer.layers.{N}.attn.out_proj"),
    ("blk.{N}.ffn_norm", "transformer.layers.{N}.ffn_norm"),
    ("blk.{N}.ffn_down", "transformer.layers.{N}.ffn.proj_2"),
];
const WHISPER_NAMES: &[(&str, &str)] = &[
    ("a.conv1d.1", "encoder.conv1"),
    ("a.conv1d.2", "encoder.conv2"),
    ("a.position_embd", "encoder.embed_positions"),
    ("a.blk.{N}.attn_q", "encoder.layers.{N}.self_attn.q_proj"),
    ("a.blk.{N}.attn_k", "encoder.layers.{N}.self_attn.k_proj"),
    ("a.blk.{N}.attn_v", "encoder.layers.{N}.self_attn.v_proj"),
    ("a.blk.{N}.attn_out", "encoder.layers.{N}.self_attn.out_proj"),
    ("a.blk.{N}.ln1", "encoder.layers.{N}.self_attn_layer_norm"),
    ("a.blk.{N}.ln2", "encoder.layers.{N}.final_layer_norm"),
    ("a.blk.{N}.ffn_up", "encoder.layers.{N}.fc1"),
    ("a.blk.{N}.ffn_down", "encoder.layers.{N}.fc2"),
    ("a.post_ln", "encoder.layer_norm"),
];

const fn family(
    id: &'static str,
    name: &'static str,
    architectures: &'static [&'static str],
    layout: Layout,
) -> Family {
    Family {
        id,
        name,
        architectures,
        refines: &[],
        projectors: &[],
        name_hints: &[],
        has_experts: false,
        signatures: &[],
        layout,
    }
}

/// Every family, most specific first within a shared architecture string.
pub static FAMILIES: &[Family] = &[
    Family {
        refines: &["llama"],
        has_experts: true,
        ..family("mixtral", "Mixtral", &[], Layout { hf_names: &[DECODER_NAMES, MIXTRAL_EXPERTS], ..COMMON })
    },
    Family {
        refines: &["llama"],
        projectors: &["idefics3"],
        name_hints: &["smolvlm"],
        ..family("smolvlm2", "SmolVLM2", &[], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON })
    },
    Family {
        refines: &["llama"],
        projectors: &["pixtral"],
        name_hints: &["mistral", "ministral", "codestral", "devstral", "magistral", "mathstral", "pixtral"],
        ..family("mistral", "Mistral", &["mistral3"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON })
    },
    family("llama", "LLaMA 1/2/3", &["llama"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON }),
    family(
        "llama4",
        "LLaMA 4",
        &["llama4"],
        Layout {
            hf_names: &[DECODER_NAMES, PRE_FFN_NORM],
            layers: LayerKinds::SlidingWindow { period: 4, dense_first: false, when: WindowRule::UnlessZero },
            ..COMMON
        },
    ),
    family(
        "gemma2",
        "Gemma 2",
        &["gemma2"],
        Layout {
            rope: Rope::Neox,
            output: Output::AlwaysTied,
            hf_names: &[DECODER_NAMES, SANDWICH_NORMS],
            layers: LayerKinds::SlidingWindow { period: 2, dense_first: false, when: WindowRule::Always },
            ..COMMON
        },
    ),
    family(
        "gpt-oss",
        "GPT-OSS",
        &["gpt-oss"],
        Layout {
            rope: Rope::Neox,
            hf_names: &[DECODER_NAMES, SEED_OSS_NORMS, GPT_OSS_NAMES],
            layers: LayerKinds::SlidingWindow { period: 2, dense_first: false, when: WindowRule::Always },
            ..COMMON
        },
    ),
    Family {
        projectors: &["gemma3"],
        ..family(
            "gemma3",
            "Gemma 3",
            &["gemma3"],
            Layout {
                rope: Rope::Neox,
                hf_names: &[DECODER_NAMES, SANDWICH_NORMS, QK_NORMS],
                layers: LayerKinds::SlidingWindow { period: 6, dense_first: false, when: WindowRule::Positive },
                ..COMMON
            },
        )
    },
    Family {
        signatures: &["rope_factors_long.weight"],
        ..family(
            "phi3",
            "Phi-3",
            &["phi3"],
            Layout {
                rope: Rope::Neox,
                fused: &[QKV, GATE_UP],
                hf_names: &[DECODER_NAMES, PRE_FFN_NORM, PHI3_NAMES],
                ..COMMON
            },
        )
    },
    family("internlm2", "InternLM2", &["internlm2"], Layout { hf_names: &[INTERNLM2_NAMES], ..COMMON }),
    family("chatglm", "ChatGLM", &["chatglm"], Layout { fused: &[QKV, GATE_UP], hf_names: &[CHATGLM_NAMES], ..COMMON }),
    family(
        "glm4",
        "GLM-4",
        &["glm4"],
        Layout { fused: &[QKV, GATE_UP], hf_names: &[DECODER_NAMES, GLM4_NORMS], ..COMMON },
    ),
    family(
        "exaone4",
        "EXAONE 4",
        &["exaone4"],
        Layout {
            rope: Rope::Neox,
            hf_names: &[DECODER_NAMES, SANDWICH_NORMS, QK_NORMS],
            layers: LayerKinds::SlidingWindow { period: 4, dense_first: false, when: WindowRule::Positive },
            ..COMMON
        },
    ),
    family("arcee", "Arcee", &["arcee"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON }),
    family(
        "seed_oss",
        "Seed-OSS",
        &["seed_oss"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, SEED_OSS_NORMS], ..COMMON },
    ),
    family("granite", "Granite", &["granite"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON }),
    Family {
        signatures: &["blk.0.shortconv.conv.weight"],
        ..family(
            "lfm2",
            "LFM2",
            &["lfm2"],
            Layout {
                rope: Rope::Neox,
                output_norm: "token_embd_norm",
                hf_names: &[LFM2_NAMES],
                layers: LayerKinds::RecurrentWithoutKvHeads,
                ..COMMON
            },
        )
    },
    family(
        "nemotron",
        "Nemotron",
        &["nemotron"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            output: Output::Own,
            hf_names: &[DECODER_NAMES, PRE_FFN_NORM],
            ..COMMON
        },
    ),
    family(
        "olmo",
        "OLMo",
        &["olmo"],
        Layout { norm_epsilon: NormEpsilon::Layer, hf_names: &[DECODER_NAMES], ..COMMON },
    ),
    family(
        "olmo2",
        "OLMo 2",
        &["olmo2"],
        Layout {
            rope: Rope::Neox,
            output: Output::Own,
            hf_names: &[DECODER_NAMES, SANDWICH_NORMS, QK_NORMS],
            layers: LayerKinds::SlidingWindow { period: 4, dense_first: false, when: WindowRule::Positive },
            ..COMMON
        },
    ),
    family(
        "openelm",
        "OpenELM",
        &["openelm"],
        Layout { rope: Rope::Neox, fused: &[QKV], output: Output::AlwaysTied, hf_names: &[OPENELM_NAMES], ..COMMON },
    ),
    family(
        "qwen2",
        "Qwen2",
        &["qwen2"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON },
    ),
    Family {
        projectors: &["qwen2vl_merger", "qwen2.5vl_merger"],
        ..family(
            "qwen2vl",
            "Qwen2-VL",
            &["qwen2vl"],
            Layout { rope: Rope::Mrope, hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON },
        )
    },
    family(
        "qwen2moe",
        "Qwen2-MoE",
        &["qwen2moe"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QWEN_MOE_NAMES], ..COMMON },
    ),
    family(
        "qwen3moe",
        "Qwen3-MoE",
        &["qwen3moe"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QK_NORMS, QWEN_MOE_NAMES], ..COMMON },
    ),
    family(
        "olmoe",
        "OLMoE",
        &["olmoe"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QK_NORMS, QWEN_MOE_NAMES], ..COMMON },
    ),
    family(
        "gemma",
        "Gemma",
        &["gemma"],
        Layout { rope: Rope::Neox, output: Output::AlwaysTied, hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON },
    ),
    family(
        "starcoder2",
        "StarCoder 2",
        &["starcoder2"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            hf_names: &[DECODER_NAMES, PRE_FFN_NORM, STARCODER2_NAMES],
            ..COMMON
        },
    ),
    family("smollm3", "SmolLM3", &["smollm3"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON }),
    family(
        "gptneox",
        "GPT-NeoX",
        &["gptneox"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            fused: &[QKV],
            hf_names: &[GPTNEOX_NAMES],
            ..COMMON
        },
    ),
    family(
        "deepseek2",
        "DeepSeek-V2/V3",
        &["deepseek2"],
        Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM, DEEPSEEK2_NAMES], ..COMMON },
    ),
    family(
        "gpt2",
        "GPT-2",
        &["gpt2"],
        Layout { norm_epsilon: NormEpsilon::Layer, rope: Rope::None, fused: &[QKV], hf_names: &[GPT2_NAMES], ..COMMON },
    ),
    family(
        "bert",
        "BERT",
        &["bert"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::None,
            hf_names: &[BERT_NAMES, DISTILBERT_NAMES],
            ..COMMON
        },
    ),
    family(
        "modern-bert",
        "ModernBERT",
        &["modern-bert"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            fused: &[QKV, GATE_UP],
            hf_names: &[MODERN_BERT_NAMES],
            layers: LayerKinds::SlidingWindow { period: 3, dense_first: true, when: WindowRule::Positive },
            ..COMMON
        },
    ),
    family(
        "nomic-bert",
        "Nomic BERT",
        &["nomic-bert"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            fused: &[QKV],
            hf_names: &[NOMIC_BERT_NAMES],
            ..COMMON
        },
    ),
    family(
        "phi2",
        "Phi-2",
        &["phi2"],
        Layout { norm_epsilon: NormEpsilon::Layer, rope: Rope::Neox, hf_names: &[DECODER_NAMES, PHI2_NAMES], ..COMMON },
    ),
    family(
        "stablelm",
        "StableLM",
        &["stablelm"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QK_NORMS],
            ..COMMON
        },
    ),
    family(
        "command-r",
        "Command-R",
        &["command-r"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            output: Output::AlwaysTied,
            hf_names: &[DECODER_NAMES, QK_NORMS],
            ..COMMON
        },
    ),
    family(
        "cohere2",
        "Cohere 2",
        &["cohere2"],
        Layout { norm_epsilon: NormEpsilon::Layer, output: Output::AlwaysTied, hf_names: &[DECODER_NAMES], ..COMMON },
    ),
    family(
        "granitemoe",
        "Granite MoE",
        &["granitemoe"],
        Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM, GRANITE_MOE_NAMES], ..COMMON },
    ),
    family("ernie4_5", "ERNIE 4.5", &["ernie4_5"], Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM], ..COMMON }),
    family(
        "ernie4_5-moe",
        "ERNIE 4.5 MoE",
        &["ernie4_5-moe"],
        Layout { hf_names: &[DECODER_NAMES, PRE_FFN_NORM, ERNIE_MOE_NAMES], ..COMMON },
    ),
    family(
        "falcon",
        "Falcon",
        &["falcon"],
        Layout {
            norm_epsilon: NormEpsilon::Layer,
            rope: Rope::Neox,
            fused: &[QKV],
            hf_names: &[FALCON_NAMES],
            ..COMMON
        },
    ),
    family(
        "qwen3",
        "Qwen3",
        &["qwen3"],
        Layout { rope: Rope::Neox, hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QK_NORMS], ..COMMON },
    ),
    family(
        "qwen3next",
        "Qwen3-Next",
        &["qwen3next"],
        Layout { rope: Rope::Neox, layers: LayerKinds::LinearAttention, hf_names: &[], ..COMMON },
    ),
    family(
        "qwen35",
        "Qwen3.5",
        &["qwen35", "qwen35moe"],
        Layout { rope: Rope::Imrope, layers: LayerKinds::LinearAttention, hf_names: &[], ..COMMON },
    ),
    Family {
        projectors: &["qwen3vl_merger"],
        ..family(
            "qwen3vl",
            "Qwen3-VL",
            &["qwen3vl"],
            Layout { rope: Rope::Imrope, hf_names: &[DECODER_NAMES, PRE_FFN_NORM, QK_NORMS], ..COMMON },
        )
    },
    Family {
        projectors: &["resampler", "minicpmv4_6"],
        ..family("minicpmv", "MiniCPM-V", &[], Layout { rope: Rope::None, hf_names: &[], ..COMMON })
    },
    Family {
        projectors: &["ultravox", "qwen2a", "voxtral", "glma", "meralion", "musicflamingo"],
        signatures: &["a.conv1d.1.weight"],
        ..family(
            "whisper",
            "Whisper (audio encoder)",
            &[],
            Layout { rope: Rope::None, hf_names: &[WHISPER_NAMES], ..COMMON },
        )
    },
];

/// The fallback: every tensor kept by its raw name, roles from the names
/// llama.cpp uses everywhere where they match.
pub static GENERIC: Family = family("generic", "generic", &[], Layout { hf_names: &[], ..COMMON });

/// Which rule picked the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DetectedBy {
    /// `general.architecture` alone.
    Architecture,
    /// The architecture string and a positive expert count.
    ArchitectureAndExperts,
    /// The architecture string and a name hint (`general.name`/`basename`).
    ArchitectureAndName,
    /// An mmproj's `clip.projector_type`.
    ProjectorType,
    /// Tensor names only one family uses.
    Scan,
    Fallback,
}

impl DetectedBy {
    pub fn describe(self) -> &'static str {
        match self {
            DetectedBy::Architecture => "general.architecture",
            DetectedBy::ArchitectureAndExperts => "general.architecture and its expert count",
            DetectedBy::ArchitectureAndName => "general.architecture and the model's name",
            DetectedBy::ProjectorType => "clip.projector_type",
            DetectedBy::Scan => "tensor names",
            DetectedBy::Fallback => "fallback: no family claims it",
        }
    }
}

/// The family a file belongs to and how that was decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    pub family: &'static Family,
    pub by: DetectedBy,
}

/// Detects a file's family from its metadata and tensor names.
pub fn detect(metadata: &Metadata, tensors: &[TensorInfo]) -> Detection {
    let architecture = metadata.get_str("general.architecture");
    if architecture == Some("clip") {
        let projectors: Vec<&str> =
            [Encoder::Vision, Encoder::Audio].iter().filter_map(|&e| projector_type(metadata, e).ok()).collect();
        if let Some(family) = FAMILIES.iter().find(|f| projectors.iter().any(|p| f.projectors.contains(p))) {
            return Detection { family, by: DetectedBy::ProjectorType };
        }
    } else if let Some(architecture) = architecture {
        let refining = || FAMILIES.iter().filter(|f| f.refines.contains(&architecture));
        if has_experts(metadata, architecture, tensors)
            && let Some(family) = refining().find(|f| f.has_experts)
        {
            return Detection { family, by: DetectedBy::ArchitectureAndExperts };
        }
        let names: Vec<String> = ["general.name", "general.basename"]
            .iter()
            .filter_map(|k| metadata.get_str(k))
            .map(str::to_ascii_lowercase)
            .collect();
        let hinted = |f: &&Family| f.name_hints.iter().any(|hint| names.iter().any(|n| n.contains(hint)));
        if let Some(family) = refining().find(hinted) {
            return Detection { family, by: DetectedBy::ArchitectureAndName };
        }
        if let Some(family) = FAMILIES.iter().find(|f| f.architectures.contains(&architecture)) {
            return Detection { family, by: DetectedBy::Architecture };
        }
    }
    let scanned = FAMILIES.iter().find(|f| f.signatures.iter().any(|s| tensors.iter().any(|t| t.name == *s)));
    match scanned {
        Some(family) => Detection { family, by: DetectedBy::Scan },
        None => Detection { family: &GENERIC, by: DetectedBy::Fallback },
    }
}

/// A positive `ARCH.expert_count`, or, without the key, expert tensors.
fn has_experts(metadata: &Metadata, architecture: &str, tensors: &[TensorInfo]) -> bool {
    match metadata.get(&format!("{architecture}.expert_count")).and_then(|v| v.as_u64()) {
        Some(n) => n > 0,
        None => tensors.iter().any(|t| t.name.ends_with("_exps.weight")),
    }
}

/// What a tensor is for, from the names llama.cpp gives tensors in every
/// architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    TokenEmbedding,
    Output,
    OutputNorm,
    Attention,
    AttentionNorm,
    Ffn,
    FfnNorm,
    /// An expert's FFN (`*_exps`, `*_shexp`).
    Expert,
    /// An expert router (`ffn_gate_inp`).
    Router,
    /// RoPE frequency factors.
    Rope,
    /// Convolution or state-space mixers.
    Mixer,
    /// Vision or audio encoder tensors of an mmproj, and its projector.
    Encoder,
    Other,
}

/// The role of tensor `name` in a file of `family`.
pub fn role_of(family: &Family, name: &str) -> Role {
    let base = name.strip_suffix(".weight").or_else(|| name.strip_suffix(".bias")).unwrap_or(name);
    if base == family.layout.output_norm {
        return Role::OutputNorm;
    }
    let part = match base.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, part)| part),
        None => base,
    };
    if ["v.", "a.", "mm.", "resampler."].iter().any(|p| name.starts_with(p)) {
        return Role::Encoder;
    }
    match part {
        "token_embd" | "per_layer_token_embd" | "token_embd_norm" => Role::TokenEmbedding,
        "output" | "cls.output" => Role::Output,
        "output_norm" => Role::OutputNorm,
        "rope_freqs" | "rope_factors_long" | "rope_factors_short" => Role::Rope,
        "attn_norm" | "attn_norm_2" | "attn_q_norm" | "attn_k_norm" | "post_attention_norm" => Role::AttentionNorm,
        "ffn_norm" | "post_ffw_norm" => Role::FfnNorm,
        "ffn_gate_inp" | "ffn_gate_inp_shexp" => Role::Router,
        p if p.ends_with("_exps") || p.ends_with("_shexp") => Role::Expert,
        p if p.starts_with("attn_") => Role::Attention,
        p if p.starts_with("ffn_") => Role::Ffn,
        p if p.starts_with("shortconv.") || p.starts_with("ssm_") => Role::Mixer,
        _ => Role::Other,
    }
}

/// `N` of a `blk.N.…` tensor name.
pub fn block_of(name: &str) -> Option<u64> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The Hugging Face name of GGUF tensor `name` (`.weight`/`.bias` kept).
pub fn hf_name(family: &Family, name: &str) -> Option<String> {
    translate(family.layout.hf_names, name, |(gguf, hf)| (gguf, hf))
}

/// The GGUF name of Hugging Face tensor `name`.
pub fn gguf_name(family: &Family, name: &str) -> Option<String> {
    gguf_name_in(family.layout.hf_names, name)
}

/// The GGUF name of Hugging Face tensor `name` in `tables` of (GGUF, Hugging
/// Face) name pairs.
pub fn gguf_name_in(tables: &[&[NamePair]], name: &str) -> Option<String> {
    translate(tables, name, |(gguf, hf)| (hf, gguf))
}

/// A GGUF name and the Hugging Face name it is written from, `{N}` the block.
pub type NamePair = (&'static str, &'static str);

/// Maps `name` through the tables; later entries win, so a family's own
/// names override the shared ones.
fn translate(tables: &[&[NamePair]], name: &str, direction: impl Fn(NamePair) -> NamePair) -> Option<String> {
    let (stem, suffix) = match name.rsplit_once('.') {
        Some((stem, suffix @ ("weight" | "bias"))) => (stem, Some(suffix)),
        _ => (name, None),
    };
    let mapped = tables.iter().flat_map(|table| table.iter()).rev().find_map(|&entry| {
        let (from, to) = direction(entry);
        match_pattern(from, stem).map(|block| match block {
            Some(n) => to.replace("{N}", n),
            None => to.to_owned(),
        })
    })?;
    Some(match suffix {
        Some(suffix) => format!("{mapped}.{suffix}"),
        None => mapped,
    })
}

/// Whether `name` matches `pattern`, and the block number `{N}` stood for.
fn match_pattern<'n>(pattern: &str, name: &'n str) -> Option<Option<&'n str>> {
    let Some((before, after)) = pattern.split_once("{N}") else {
        return (pattern == name).then_some(None);
    };
    let digits = name.strip_prefix(before)?.strip_suffix(after)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(Some(digits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_architecture_string_has_one_owner() {
        let mut owned: Vec<_> = FAMILIES.iter().flat_map(|f| f.architectures).collect();
        owned.sort_unstable();
        let len = owned.len();
        owned.dedup();
        assert_eq!(owned.len(), len);
        for family in FAMILIES {
            for shared in family.refines {
                assert!(owned.contains(&shared), "{} refines {shared}, which no family owns", family.id);
            }
        }
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<_> = FAMILIES.iter().map(|f| f.id).chain([GENERIC.id]).collect();
        ids.sort_unstable();
        let len = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), len);
    }

    #[test]
    fn names_translate_both_ways() {
        for family in FAMILIES {
            for table in family.layout.hf_names {
                for (gguf, hf) in table.iter() {
                    let (gguf, hf) = (gguf.replace("{N}", "7"), hf.replace("{N}", "7"));
                    let expected_hf = hf_name(family, &format!("{gguf}.weight"));
                    let back = expected_hf.as_deref().and_then(|h| gguf_name(family, h));
                    assert_eq!(back, Some(format!("{gguf}.weight")), "{} {gguf}", family.id);
                    // A family's own entries shadow shared ones, so from the HF side only
                    // the translation must be stable, not the entry itself.
                    let g = gguf_name(family, &format!("{hf}.weight"));
                    let again = g.as_deref().and_then(|g| hf_name(family, g)).and_then(|h| gguf_name(family, &h));
                    assert_eq!(again, g, "{} {hf}", family.id);
                }
            }
        }
    }

    #[test]
    fn family_specific_names_win() {
        let gemma = FAMILIES.iter().find(|f| f.id == "gemma3").unwrap();
        assert_eq!(
            gguf_name(gemma, "model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("blk.3.post_attention_norm.weight")
        );
        let qwen = FAMILIES.iter().find(|f| f.id == "qwen2").unwrap();
        assert_eq!(
            gguf_name(qwen, "model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("blk.3.ffn_norm.weight")
        );
        assert_eq!(hf_name(qwen, "blk.12.attn_q.bias").as_deref(), Some("model.layers.12.self_attn.q_proj.bias"));
        assert_eq!(gguf_name(qwen, "model.layers.x.self_attn.q_proj.weight"), None);
    }

    #[test]
    fn roles_follow_llama_cpp_names() {
        let lfm2 = FAMILIES.iter().find(|f| f.id == "lfm2").unwrap();
        assert_eq!(role_of(lfm2, "token_embd_norm.weight"), Role::OutputNorm);
        assert_eq!(role_of(&GENERIC, "token_embd_norm.weight"), Role::TokenEmbedding);
        assert_eq!(role_of(&GENERIC, "blk.0.ffn_up_exps.weight"), Role::Expert);
        assert_eq!(role_of(&GENERIC, "blk.0.ffn_gate_inp.weight"), Role::Router);
        assert_eq!(role_of(&GENERIC, "blk.0.attn_qkv.bias"), Role::Attention);
        assert_eq!(role_of(&GENERIC, "blk.0.post_ffw_norm.weight"), Role::FfnNorm);
        assert_eq!(role_of(&GENERIC, "v.blk.0.attn_q.weight"), Role::Encoder);
        assert_eq!(role_of(&GENERIC, "blk.1.mixer.decay"), Role::Other);
    }
}
