#!/usr/bin/env python3
"""Fixtures the split planner needs beyond tests/data/arch, written with that
folder's generator (tests/arch/make_fixtures.py):

- mimo-like.gguf: a LLaMA-architecture model with a fused attn_qkv whose key
  heads are wider than its value heads (24 and 16, MiMo's 192:128), which
  llama.cpp cuts as three segments (Q, K, V) so each device gets whole heads.
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


if __name__ == "__main__":
    mimo_like(HERE.parent / "data" / "split")
