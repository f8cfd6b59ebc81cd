#!/usr/bin/env bash
# `quantforge convert` of a mixture of experts beside llama.cpp's
# convert_hf_to_gguf.py: a Qwen2-MoE-shaped BF16 checkpoint of 64 experts a
# layer (hidden 1024, expert MLP 512, a shared expert of 1024, 2 layers;
# each stacked `ffn_*_exps` tensor 64 × 512 × 1024 = 33.5M values, 64 MiB at
# f16), made here from random numbers (the tokenizer and the rest of the
# directory are the tiny Qwen1.5-MoE fixture's). Wall time and peak RSS of
# each, the bytes compared, and peak RSS against the largest stacked tensor
# (the target: at most twice it). Runs are made one after another, in one call.
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
echo "checkpoint: $(du -sh "$ckpt/model.safetensors" | cut -f1)"
stacked_mib=$(( 64 * 512 * 1024 * 2 / 1048576 ))

timed() { # label command...: one run: wall seconds and peak RSS (MiB)
    local label=$1
    shift
    sync
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1
    read -r wall rss < "$work/time"
    echo "$label: ${wall} s, peak RSS $((rss / 1024)) MiB ($(( rss / 1024 * 100 / stacked_mib ))% of a ${stacked_mib} MiB stacked tensor)"
}
timed quantforge "$bin" convert "$ckpt" "$work/out.gguf" --outtype f16
if [ -x "$python" ]; then
    export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    timed reference "$python" tests/convert/reference_convert.py "$ckpt" --outtype f16 --outfile "$work/ref.gguf"
    cmp -s "$work/out.gguf" "$work/ref.gguf" && echo "bytes: identical" || echo "bytes: DIFFERENT"
fi
