//! The architecture-conditional decisions of llama.cpp's quantizer
//! (`llama-quant.cpp`), each a named predicate, so the mixture presets ask
//! by name and no architecture list is repeated.

/// Files of this architecture carry no language-model hyperparameters:
/// llama.cpp's `clip` (mmproj) architecture is a quantize-only stub whose
/// loader reads no key, so its layer count is 0.
pub fn has_no_language_hparams(arch: &str) -> bool {
    arch == "clip"
}

/// Falcon's output tensor (and a tied token embedding) is always Q8_0, and
/// its `ffn_down`/`attn_output` follow their own ladders.
pub fn uses_falcon_rules(arch: &str) -> bool {
    arch == "falcon"
}

/// Under MXFP4_MOE, only 3-D FFN tensors become MXFP4 (BailingMoE 3's
/// attention projections are 3-D too).
pub fn mxfp4_only_for_ffn_experts(arch: &str) -> bool {
    arch == "bailingmoe3"
}

/// GLM-5-next tensors never quantized, beyond those of every architecture.
pub fn keeps_unquantized(arch: &str, name: &str) -> bool {
    const PARTS: &[&str] = &[
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ];
    arch == "glm5-next" && PARTS.iter().any(|part| name.contains(part))
}

/// GLM-5-next tensors never quantized below Q8_0.
pub fn q8_0_floor(arch: &str, name: &str) -> bool {
    const PARTS: &[&str] = &["attn_q_a", "attn_q_b", "nextn.eh_proj"];
    arch == "glm5-next" && PARTS.iter().any(|part| name.contains(part))
}

/// llama.cpp's "70B" model type (set per architecture by its loader), whose
/// `attn_v` is small enough to get more bits: 80 layers (68 for JAIS-2), and
/// for LLaMA grouped KV heads and not 8 experts. `n_layer` excludes MTP layers.
pub fn is_70b(arch: &str, n_layer: u32, n_head: u32, n_head_kv: u32, n_expert: u32) -> bool {
    match arch {
        "llama" => n_expert != 8 && n_layer == 80 && n_head != n_head_kv,
        "qwen2" | "deci" | "olmo" => n_layer == 80,
        "jais2" => n_layer == 68,
        _ => false,
    }
}
