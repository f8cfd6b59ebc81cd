#!/usr/bin/env bash
# `quantforge convert` of two mixtures of experts beside llama.cpp's
# convert_hf_to_gguf.py, each made here from random numbers (the tokenizer
# and the rest of the directory are a tiny fixture's):
#
# - a Qwen2-MoE-shaped BF16 checkpoint of 64 experts a layer (hidden 1024,
#   expert MLP 512, a shared expert of 1024, 2 layers; each stacked
#   `ffn_*_exps` tensor 64 × 512 × 1024 = 33.5M values, 64 MiB at f16),
#   converted to f16;
# - GPT-OSS as OpenAI publishes it: two blocks of gpt-oss-20b's shape
#   (hidden 2880, 32 experts of 2880, 64 query heads and 8 KV heads of 64),
#   the experts' MXFP4 codes and scales random bytes, the rest BF16; each
#   stacked gate or up tensor 32 × 2880 × 2880 values (134 MiB of MXFP4),
#   converted to bf16 with the experts kept MXFP4.
#
# Wall time and peak RSS of each, the bytes compared, and peak RSS against
# the largest stacked tensor (the target: at most twice it). Runs are made
# one after another, in one call.
#
#   benches/convert-moe.sh [BINARY]      (default: this tree's release build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/quantforge}
[ $# -gt 0 ] || cargo build --release --quiet
python=${QUANTFORGE_CONVERT_VENV:-$HOME/.cache/quantforge/convert-venv}/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ckpt=$work/Qwen1.5-MoE-Bench
cp -r tests/data/convert/checkpoints/Qwen1.5-MoE-Tiny "$ckpt"
rm -f "$ckpt"/model*.safetensors "$ckpt"/model.safetensors.index.json
python3 - "$ckpt" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
config = json.load(open(f"{d}/config.json"))
hidden, inter, moe, shared, experts, layers, heads = 1024, 2048, 512, 1024, 64, 2, 16
config.update(hidden_size=hidden, intermediate_size=inter, moe_intermediate_size=moe,
              shared_expert_intermediate_size=shared, num_experts=experts, num_experts_per_tok=4,
              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads, dtype="bfloat16")
json.dump(config, open(f"{d}/config.json", "w"), indent=2)
rng = np.random.default_rng(0)
def bf16(*shape):
    bits = (rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
vocab = config["vocab_size"]
t = {"model.embed_tokens.weight": bf16(vocab, hidden), "model.norm.weight": bf16(hidden),
     "lm_head.weight": bf16(vocab, hidden)}
for i in range(layers):
    p = f"model.layers.{i}."
    t |= {p + "input_layernorm.weight": bf16(hidden), p + "post_attention_layernorm.weight": bf16(hidden),
          p + "mlp.gate.weight": bf16(experts, hidden), p + "mlp.shared_expert_gate.weight": bf16(1, hidden),
          p + "mlp.shared_expert.gate_proj.weight": bf16(shared, hidden),
          p + "mlp.shared_expert.up_proj.weight": bf16(shared, hidden),
          p + "mlp.shared_expert.down_proj.weight": bf16(hidden, shared)}
    for name, shape in [("q_proj", (hidden, hidden)), ("k_proj", (hidden, hidden)), ("v_proj", (hidden, hidden))]:
        t[p + f"self_attn.{name}.weight"] = bf16(*shape)
        t[p + f"self_attn.{name}.bias"] = bf16(shape[0])
    t[p + "self_attn.o_proj.weight"] = bf16(hidden, hidden)
    for e in range(experts):
        q = p + f"mlp.experts.{e}."
        t |= {q + "gate_proj.weight": bf16(moe, hidden), q + "up_proj.weight": bf16(moe, hidden),
              q + "down_proj.weight": bf16(hidden, moe)}
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name, a in t.items():
    header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(f"{d}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for a in t.values():
        f.write(a.tobytes())
print(f"{sum(a.size for a in t.values()) / 1e6:.1f}M parameters")
PY
timed() { # label stacked-MiB command...: one run: wall seconds and peak RSS (MiB)
    local label=$1 stacked_mib=$2
    shift 2
    sync
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1
    read -r wall rss < "$work/time"
    echo "$label: ${wall} s, peak RSS $((rss / 1024)) MiB ($(( rss / 1024 * 100 / stacked_mib ))% of a ${stacked_mib} MiB stacked tensor)"
}

compare() { # checkpoint outtype stacked-MiB [convert options...]: both converters, the bytes compared
    local ckpt=$1 outtype=$2 stacked_mib=$3
    shift 3
    echo "$(basename "$ckpt"): $(du -sh "$ckpt/model.safetensors" | cut -f1)"
    timed quantforge "$stacked_mib" "$bin" convert "$ckpt" "$work/out.gguf" --outtype "$outtype" "$@"
    if [ -x "$python" ]; then
        OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
            timed reference "$stacked_mib" "$python" tests/convert/reference_convert.py "$ckpt" \
            --outtype "$outtype" --outfile "$work/ref.gguf"
        cmp -s "$work/out.gguf" "$work/ref.gguf" && echo "bytes: identical" || echo "bytes: DIFFERENT"
    fi
}

gptoss=$work/gpt-oss-bench
cp -r tests/data/convert/checkpoints/gpt-oss-tiny-mxfp4 "$gptoss"
rm -f "$gptoss"/model*.safetensors "$gptoss"/model.safetensors.index.json
python3 - "$gptoss" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
config = json.load(open(f"{d}/config.json"))
hidden, ff, experts, layers, heads, kv_heads, head_dim = 2880, 2880, 32, 2, 64, 8, 64
config.update(hidden_size=hidden, intermediate_size=ff, num_local_experts=experts, num_experts_per_tok=4,
              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
              layer_types=["sliding_attention", "full_attention"][:layers])
json.dump(config, open(f"{d}/config.json", "w"), indent=2)
rng = np.random.default_rng(0)
def bf16(*shape):
    bits = (rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
def codes(*shape):
    return rng.integers(0, 256, shape, dtype=np.uint8)
def exponents(*shape):
    return rng.integers(118, 126, shape, dtype=np.uint8)
vocab = config["vocab_size"]
t = {"model.embed_tokens.weight": bf16(vocab, hidden), "model.norm.weight": bf16(hidden),
     "lm_head.weight": bf16(vocab, hidden)}
for i in range(layers):
    p = f"model.layers.{i}."
    t |= {p + "input_layernorm.weight": bf16(hidden), p + "post_attention_layernorm.weight": bf16(hidden),
          p + "mlp.router.weight": bf16(experts, hidden), p + "mlp.router.bias": bf16(experts),
          p + "self_attn.sinks": bf16(heads),
          p + "mlp.experts.gate_up_proj_blocks": codes(experts, 2 * ff, hidden // 32, 16),
          p + "mlp.experts.gate_up_proj_scales": exponents(experts, 2 * ff, hidden // 32),
          p + "mlp.experts.gate_up_proj_bias": bf16(experts, 2 * ff),
          p + "mlp.experts.down_proj_blocks": codes(experts, hidden, ff // 32, 16),
          p + "mlp.experts.down_proj_scales": exponents(experts, hidden, ff // 32),
          p + "mlp.experts.down_proj_bias": bf16(experts, hidden)}
    for name, rows in [("q_proj", heads * head_dim), ("k_proj", kv_heads * head_dim), ("v_proj", kv_heads * head_dim)]:
        t[p + f"self_attn.{name}.weight"] = bf16(rows, hidden)
        t[p + f"self_attn.{name}.bias"] = bf16(rows)
    t[p + "self_attn.o_proj.weight"] = bf16(hidden, heads * head_dim)
    t[p + "self_attn.o_proj.bias"] = bf16(hidden)
t = dict(sorted(t.items()))
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name, a in t.items():
    dtype = "U8" if a.dtype == np.uint8 else "BF16"
    header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(f"{d}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for a in t.values():
        f.write(a.tobytes())
PY

compare "$ckpt" f16 $(( 64 * 512 * 1024 * 2 / 1048576 )) --pre qwen2
compare "$gptoss" bf16 $(( 32 * 2880 * 2880 / 32 * 17 / 1048576 )) --pre gpt-4o
