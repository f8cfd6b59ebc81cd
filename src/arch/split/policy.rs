//! Stage 2, policy: per class and architecture, whether a tensor is split
//! (along which ggml axis), mirrored on every device, or a partial sum,
//! and which tensor's quantization block the split must respect. Every
//! exception to the common rule is a named predicate on the architecture.

use super::classify::Part;

/// How a tensor is placed across devices (ggml's `ggml_backend_meta_split_axis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Cut along ggml axis `0..=3`.
    Split(u8),
    /// Whole on every device.
    Mirrored,
    /// Every device holds a partial sum (shaped like the split of the
    /// tensor it belongs to).
    Partial,
}

/// The tensor whose type sets the block a split must not cut (ggml's
/// `tensor_axis_0`): the tensor itself, or a named one of its layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    Itself,
    /// `suffix` in the same layer, else `fallback`.
    Named {
        suffix: &'static str,
        fallback: Option<&'static str>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub axis: Axis,
    pub reference: Reference,
}

/// Whether llama.cpp implements the tensor split mode for `arch`
/// (`llm_arch_supports_sm_tensor`).
pub fn supports_tensor_split(arch: &str) -> bool {
    !matches!(
        arch,
        "grok"
            | "mpt"
            | "plamo2"
            | "minicpm3"
            | "gemma3n"
            | "mamba"
            | "mamba2"
            | "jamba"
            | "falcon-h1"
            | "olmo2"
            | "olmoe"
            | "deepseek2"
            | "deepseek32"
            | "hy_v4"
            | "dots3note"
            | "glm-dsa"
            | "bitnet"
            | "t5"
            | "nemotron_h"
            | "nemotron_h_moe"
            | "granitehybrid"
            | "minimax01"
            | "minimax-m2"
            | "minimax-m3"
            | "mistral4"
            | "kimi-linear"
            | "bailingmoe3"
            | "kimi-k3"
            | "glm5-next"
            | "qwen3tts"
            | "qwen4exp"
    )
}

/// Architectures whose every tensor is mirrored: their aliased cache
/// slots cannot be split (`LLM_ARCH_HRM_TEXT`).
pub fn mirrors_everything(arch: &str) -> bool {
    arch == "hrm_text"
}

/// Architectures whose full-attention Q projections carry a gate, doubling
/// Q's width (`TAG_SPLIT_QGATE_QWEN` in the reference).
pub fn has_qgate_split(arch: &str) -> bool {
    matches!(arch, "qwen3next" | "qwen35" | "qwen35moe" | "qwen4exp")
}

/// Of the gated architectures, those whose linear-attention value heads
/// cycle over the key heads (Qwen3.5: k0_v0, k1_v1, k0_v2, …) rather than
/// following each key head in a run (Qwen3-Next: k0_v0, k0_v1, k1_v2, …).
pub fn interleaves_value_heads(arch: &str) -> bool {
    has_qgate_split(arch) && arch != "qwen3next"
}

/// Architectures of the grouped-output attention of DeepSeek V4, whose
/// rules the planner does not model yet.
pub fn has_grouped_output_attention(arch: &str) -> bool {
    arch == "deepseek4"
}

const ATTN_OUT: Reference = Reference::Named { suffix: "attn_output.weight", fallback: Some("ssm_out.weight") };
const ATTN_OUT_ONLY: Reference = Reference::Named { suffix: "attn_output.weight", fallback: None };
const SSM_OUT: Reference = Reference::Named { suffix: "ssm_out.weight", fallback: None };
const FFN_DOWN: Reference = Reference::Named { suffix: "ffn_down.weight", fallback: Some("ffn_down_exps.weight") };

/// The policy of a tensor of class `part` and shape `dims` in `arch`.
pub fn policy(arch: &str, part: Part, dims: &[u64]) -> Policy {
    let at = |axis, reference| Policy { axis, reference };
    if mirrors_everything(arch) {
        return at(Axis::Mirrored, Reference::Itself);
    }
    match part {
        Part::AttnQ | Part::AttnKv { .. } | Part::AttnQkv | Part::AttnGate => at(Axis::Split(1), ATTN_OUT),
        Part::AttnQBias | Part::AttnKvBias { .. } | Part::AttnQkvBias => at(Axis::Split(0), ATTN_OUT),
        // One norm weight per head row: split with the heads; a norm shared
        // by all heads is mirrored.
        Part::QkNorm if dims.get(1).copied().unwrap_or(1) == 1 => at(Axis::Mirrored, ATTN_OUT_ONLY),
        Part::QkNorm => at(Axis::Split(1), ATTN_OUT_ONLY),
        Part::AttnSinks => at(Axis::Split(0), ATTN_OUT_ONLY),
        Part::AttnOut => at(Axis::Split(0), Reference::Itself),
        Part::AttnOutBias => at(Axis::Mirrored, Reference::Itself),
        Part::SsmDt | Part::SsmA => at(Axis::Split(0), SSM_OUT),
        Part::SsmAlphaBeta | Part::SsmBetaAlpha | Part::SsmConv1d => at(Axis::Split(1), SSM_OUT),
        Part::SsmOut => at(Axis::Split(0), Reference::Itself),
        Part::FfnUpOrGate { .. } | Part::FfnGateUp => at(Axis::Split(1), FFN_DOWN),
        Part::FfnUpOrGateBias { .. } => at(Axis::Split(0), FFN_DOWN),
        Part::FfnDown => at(Axis::Split(0), FFN_DOWN),
        Part::FfnDownBias => at(Axis::Mirrored, Reference::Itself),
        Part::FfnDownExpsBias => at(Axis::Partial, Reference::Named { suffix: "ffn_down_exps.weight", fallback: None }),
        Part::Output => at(Axis::Split(1), Reference::Itself),
        Part::OutputBias => at(Axis::Split(0), Reference::Itself),
        Part::Other => at(Axis::Mirrored, Reference::Itself),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_split_across_their_heads_and_norms_mirror() {
        assert_eq!(policy("llama", Part::AttnQ, &[4096, 4096]), Policy { axis: Axis::Split(1), reference: ATTN_OUT });
        assert_eq!(policy("llama", Part::FfnDown, &[11008, 4096]).axis, Axis::Split(0));
        assert_eq!(policy("qwen3", Part::QkNorm, &[128]).axis, Axis::Mirrored);
        assert_eq!(policy("qwen3", Part::QkNorm, &[128, 32]).axis, Axis::Split(1));
        assert_eq!(policy("llama", Part::Other, &[4096]).axis, Axis::Mirrored);
        assert_eq!(policy("hrm_text", Part::AttnQ, &[64, 64]).axis, Axis::Mirrored);
        assert!(!supports_tensor_split("olmo2") && supports_tensor_split("gemma3"));
    }
}
