#!/usr/bin/env bash
# Peak memory of `quantforge convert` on a Qwen2-shaped checkpoint of 136M
# parameters (hidden 1024, 12 layers, 16 heads / 4 KV, f16, 272 MB), made
# here from random numbers with numpy and safetensors (the tokenizer and
# the rest of the directory are the tiny Qwen2.5 fixture's). Prints wall
# time and peak RSS per outtype for each binary given (default: this
# tree's release build).
#
#   benches/convert-rss.sh [BINARY...]
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("${@:-target/release/quantforge}")
[ $# -gt 0 ] || cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ckpt=$work/qwen2-136m
cp -r tests/data/convert/checkpoints/Qwen2.5-Tiny-Instruct "$ckpt"
python3 - "$ckpt" <<'PY'
import json, sys
import numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
config = json.load(open(f"{d}/config.json"))
hidden, inter, layers, heads, kv = 1024, 2816, 12, 16, 4
config.update(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
              num_key_value_heads=kv, layer_types=["full_attention"] * layers, max_window_layers=layers, dtype="float16")
json.dump(config, open(f"{d}/config.json", "w"), indent=2)
rng = np.random.default_rng(0)
w = lambda *shape: (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
head_dim = hidden // heads
t = {"model.embed_tokens.weight": w(config["vocab_size"], hidden), "model.norm.weight": w(hidden)}
for i in range(layers):
    p = f"model.layers.{i}."
    t |= {p + "input_layernorm.weight": w(hidden), p + "post_attention_layernorm.weight": w(hidden),
          p + "mlp.down_proj.weight": w(hidden, inter), p + "mlp.gate_proj.weight": w(inter, hidden),
          p + "mlp.up_proj.weight": w(inter, hidden), p + "self_attn.o_proj.weight": w(hidden, hidden),
          p + "self_attn.q_proj.weight": w(hidden, hidden), p + "self_attn.q_proj.bias": w(hidden),
          p + "self_attn.k_proj.weight": w(kv * head_dim, hidden), p + "self_attn.k_proj.bias": w(kv * head_dim),
          p + "self_attn.v_proj.weight": w(kv * head_dim, hidden), p + "self_attn.v_proj.bias": w(kv * head_dim)}
save_file(t, f"{d}/model.safetensors", metadata={"format": "pt"})
PY
echo "checkpoint: $(du -sh "$ckpt/model.safetensors" | cut -f1)"
for outtype in f16 q8_0 Q4_K_M; do
    for bin in "${bins[@]}"; do
        /usr/bin/time -f '%e %M' -o "$work/time" "$bin" convert "$ckpt" "$work/out.gguf" --outtype "$outtype" 2>/dev/null
        read -r wall rss < "$work/time"
        echo "$outtype  $bin  wall ${wall} s  peak RSS $((rss / 1024)) MiB  sha $(sha256sum "$work/out.gguf" | cut -c1-12)"
    done
done
