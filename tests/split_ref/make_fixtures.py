#!/usr/bin/env python3
"""Fixtures the split planner needs beyond tests/data/arch, written with that
folder's generator (tests/arch/make_fixtures.py):

- mimo-like.gguf: a LLaMA-architecture model with a fused attn_qkv whose key
  heads are wider than its value heads (24 and 16, MiMo's 192:128), which
  llama.cpp cuts as three segments (Q, K, V) so each device gets whole heads.
- qwen3next-like.gguf: Qwen3-Next's hybrid (src/models/qwen3next.cpp): three
  linear-attention layers (fused Q/K/V heads of the gated delta net, its
  gate, convolution, ssm_ba, ssm_out) then a full-attention one whose Q
  carries its gate; routed and shared experts.
- qwen35-like.gguf: Qwen3.5 (src/models/qwen35.cpp), dense: layers alternate
  (full_attention_interval 2), the full-attention ones with a fused QKV, the
  linear ones with twice as many value heads as key heads (ssm_alpha and
  ssm_beta apart).
Both mixers are 256 wide in keys so that their 128-aligned cuts land
between devices.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "arch"))

import make_fixtures as fx  # noqa: E402


def mimo_like(out: pathlib.Path) -> None:
    n_embd, n_head, n_head_kv, d_k, d_v, n_ff, n_layer = 64, 16, 8, 24, 16, 32, 2
    m = fx.Model(out, "mimo-like.gguf", "llama")
    fx.general(m.w, "MiMo-like")
    fx.base_params(m, n_layer=n_layer, n_ctx=4096, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                   n_head_kv=n_head_kv, rope_theta=10000.0, rms_eps=1e-5)
    m.w.add_key_length(d_k)
    m.w.add_value_length(d_v)
    m.w.add_vocab_size(fx.V)
    m.w.add_rope_dimension_count(d_k)
    m.w.add_quantization_version(2)
    fx.bpe_vocab(m.w, fx.V, "llama-bpe", fx.LLAMA3_SPECIALS, fx.LLAMA3_IDS, add_bos=True)
    m.weight("token_embd.weight", [n_embd, fx.V])
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", n_embd)
        m.weight(f"blk.{i}.attn_qkv.weight", [n_embd, n_head * d_k + n_head_kv * (d_k + d_v)])
        m.weight(f"blk.{i}.attn_output.weight", [n_head * d_k, n_embd])
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        fx.swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, fx.V])
    m.close()


def gated_attention(m, i: int, n_embd: int, n_head: int, n_head_kv: int, hd: int, *, fused: bool) -> None:
    """A full-attention layer whose Q is doubled by its gate (create_tensor_qkv
    with n_embd_head_k * n_head * 2), with per-head Q/K norms."""
    p = f"blk.{i}"
    q, kv = 2 * n_head * hd, n_head_kv * hd
    if fused:
        m.weight(f"{p}.attn_qkv.weight", [n_embd, q + 2 * kv])
    else:
        m.weight(f"{p}.attn_q.weight", [n_embd, q])
        m.weight(f"{p}.attn_k.weight", [n_embd, kv])
        m.weight(f"{p}.attn_v.weight", [n_embd, kv])
    m.weight(f"{p}.attn_output.weight", [n_head * hd, n_embd])
    m.norm(f"{p}.attn_q_norm.weight", hd)
    m.norm(f"{p}.attn_k_norm.weight", hd)


def delta_net(m, i: int, n_embd: int, *, d_state: int, n_k: int, n_v: int, d_conv: int, ba: bool) -> None:
    """A linear-attention layer: key_dim = d_state * n_k, value_dim = d_state * n_v."""
    p = f"blk.{i}"
    key_dim, value_dim = d_state * n_k, d_state * n_v
    m.weight(f"{p}.attn_qkv.weight", [n_embd, 2 * key_dim + value_dim])
    m.weight(f"{p}.attn_gate.weight", [n_embd, value_dim])
    m.f32(f"{p}.ssm_conv1d.weight", [d_conv, 2 * key_dim + value_dim])
    m.f32(f"{p}.ssm_dt.bias", [n_v])
    m.f32(f"{p}.ssm_a", [n_v])
    if ba:
        m.weight(f"{p}.ssm_ba.weight", [n_embd, 2 * n_v])
    else:
        m.weight(f"{p}.ssm_beta.weight", [n_embd, n_v])
        m.weight(f"{p}.ssm_alpha.weight", [n_embd, n_v])
    m.norm(f"{p}.ssm_norm.weight", d_state)
    m.weight(f"{p}.ssm_out.weight", [value_dim, n_embd])


def ssm_params(m, *, d_state: int, n_k: int, n_v: int, d_conv: int) -> None:
    m.w.add_ssm_conv_kernel(d_conv)
    m.w.add_ssm_inner_size(d_state * n_v)
    m.w.add_ssm_state_size(d_state)
    m.w.add_ssm_time_step_rank(n_v)
    m.w.add_ssm_group_count(n_k)


def qwen_hybrid(out: pathlib.Path, file: str, arch: str, name: str, *, n_layer: int, n_k: int, n_v: int,
                interval: int | None, moe: bool, mrope: list[int] | None) -> None:
    n_embd, n_head, n_head_kv, hd, n_ff, d_state, d_conv = 16, 4, 2, 32, 256, 32, 4
    n_expert, n_ff_exp = 2, 128
    m = fx.Model(out, file, arch)
    fx.general(m.w, name)
    fx.base_params(m, n_layer=n_layer, n_ctx=4096, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                   n_head_kv=n_head_kv, rope_theta=10000000.0, rms_eps=1e-6, head_dim=hd, mrope=mrope,
                   n_expert=n_expert if moe else None, n_expert_used=1 if moe else None)
    if moe:
        m.w.add_expert_feed_forward_length(n_ff_exp)
        m.w.add_expert_shared_feed_forward_length(n_ff_exp)
    ssm_params(m, d_state=d_state, n_k=n_k, n_v=n_v, d_conv=d_conv)
    if interval is not None:
        m.w.add_full_attention_interval(interval)
    m.w.add_quantization_version(2)
    fx.bpe_vocab(m.w, fx.V, "qwen2", fx.QWEN_SPECIALS, fx.QWEN_IDS, add_bos=False)
    m.weight("token_embd.weight", [n_embd, fx.V])
    every = interval or 4
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        m.norm(f"{p}.post_attention_norm.weight", n_embd)
        if (i + 1) % every != 0:
            delta_net(m, i, n_embd, d_state=d_state, n_k=n_k, n_v=n_v, d_conv=d_conv, ba=moe)
        else:
            gated_attention(m, i, n_embd, n_head, n_head_kv, hd, fused=not moe)
        if moe:
            fx.experts(m, i, n_embd, n_ff_exp, n_expert)
            m.f32(f"{p}.ffn_gate_inp_shexp.weight", [n_embd], 0.05)
            m.weight(f"{p}.ffn_gate_shexp.weight", [n_embd, n_ff_exp])
            m.weight(f"{p}.ffn_up_shexp.weight", [n_embd, n_ff_exp])
            m.weight(f"{p}.ffn_down_shexp.weight", [n_ff_exp, n_embd])
        else:
            fx.swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, fx.V])
    m.close()


if __name__ == "__main__":
    split = HERE.parent / "data" / "split"
    mimo_like(split)
    qwen_hybrid(split, "qwen3next-like.gguf", "qwen3next", "Qwen3-Next-like", n_layer=4, n_k=8, n_v=8,
                interval=None, moe=True, mrope=None)
    qwen_hybrid(split, "qwen35-like.gguf", "qwen35", "Qwen3.5-like", n_layer=4, n_k=8, n_v=16,
                interval=2, moe=False, mrope=[4, 6, 6, 0])
