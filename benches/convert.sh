#!/usr/bin/env bash
# `quantforge convert` side by side with llama.cpp's convert_hf_to_gguf.py on
# a LLaMA-shaped BF16 checkpoint of 252.5M parameters (hidden 1024, 16
# layers, 16 heads / 8 KV, MLP 4096; 505 MB), made here from random numbers
# (the tokenizer and the rest of the directory are the tiny LLaMA 3
# fixture's). For each outtype: wall time and peak RSS of each binary given
# (default: this tree's release build) and of the reference when its
# environment is there (scripts/setup-convert-env.sh), whether the bytes are
# the same, and for bf16 — a copy of the checkpoint's tensors — `cp` of the
# output beside it. Ratios are of runs made one after another, in one call.
#
#   benches/convert.sh [BINARY...]      ROUNDS=2 (alternating; each run's time is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("${@:-target/release/quantforge}")
[ $# -gt 0 ] || cargo build --release --quiet
rounds=${ROUNDS:-2}
python=${QUANTFORGE_CONVERT_VENV:-$HOME/.cache/quantforge/convert-venv}/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ckpt=$work/llama-252m
cp -r tests/data/convert/checkpoints/tiny-llama-3-chat "$ckpt"
python3 - "$ckpt" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
config = json.load(open(f"{d}/config.json"))
hidden, inter, layers, heads, kv = 1024, 4096, 16, 16, 8
head_dim = hidden // heads
config.update(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
              num_key_value_heads=kv, head_dim=head_dim, dtype="bfloat16")
json.dump(config, open(f"{d}/config.json", "w"), indent=2)
rng = np.random.default_rng(0)
def bf16(*shape):
    # Round to nearest even, as torch does; the values are finite.
    bits = (rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
vocab = config["vocab_size"]
t = {"model.embed_tokens.weight": bf16(vocab, hidden), "model.norm.weight": bf16(hidden),
     "lm_head.weight": bf16(vocab, hidden)}
for i in range(layers):
    p = f"model.layers.{i}."
    t |= {p + "input_layernorm.weight": bf16(hidden), p + "post_attention_layernorm.weight": bf16(hidden),
          p + "mlp.down_proj.weight": bf16(hidden, inter), p + "mlp.gate_proj.weight": bf16(inter, hidden),
          p + "mlp.up_proj.weight": bf16(inter, hidden), p + "self_attn.o_proj.weight": bf16(hidden, hidden),
          p + "self_attn.q_proj.weight": bf16(hidden, hidden),
          p + "self_attn.k_proj.weight": bf16(kv * head_dim, hidden),
          p + "self_attn.v_proj.weight": bf16(kv * head_dim, hidden)}
# safetensors by hand: numpy has no bfloat16 for safetensors.numpy to name.
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

timed() { # label command...: one run, "label wall rss" appended to $work/runs
    local label=$1
    shift
    # Replacing a file whose pages are still being written back costs more
    # than writing it: every run writes a new file onto a quiet disk.
    rm -f "$work/ref.gguf" "$work/out.gguf" "$work/copy.gguf"
    sync
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1
    read -r wall rss < "$work/time"
    echo "$label $wall $((rss / 1024))" | tee -a "$work/runs"
}
for outtype in f16 q8_0 bf16; do
    : > "$work/runs"
    same=""
    for _ in $(seq "$rounds"); do
        if [ -x "$python" ]; then
            timed reference "$python" tests/convert/reference_convert.py "$ckpt" --outtype "$outtype" \
                --outfile "$work/ref.gguf"
        fi
        [ ! -f "$work/ref.gguf" ] || mv "$work/ref.gguf" "$work/kept-ref.gguf"
        for bin in "${bins[@]}"; do
            timed "$bin" "$bin" convert "$ckpt" "$work/out.gguf" --outtype "$outtype"
            [ ! -f "$work/kept-ref.gguf" ] || cmp -s "$work/kept-ref.gguf" "$work/out.gguf" || same="DIFFERENT"
        done
        if [ "$outtype" = bf16 ]; then
            mv "$work/out.gguf" "$work/kept-out.gguf"
            timed cp cp "$work/kept-out.gguf" "$work/copy.gguf"
        fi
    done
    [ ! -f "$work/kept-ref.gguf" ] || same=${same:-identical}
    echo "== $outtype (label, best wall s, peak RSS MiB) ${same:+bytes: $same}"
    sort -k1,1 -k2,2n "$work/runs" | awk '!seen[$1]++ { printf "   %-40s %6.2f s %6d MiB\n", $1, $2, $3 }'
    rm -f "$work"/*.gguf
done
