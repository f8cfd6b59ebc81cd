#!/usr/bin/env bash
# lora-merge side by side (issue 40): a rank-64 LoRA adapter over every
# attention projection of the 1.3 GB F16 synthetic model
# (`make-tiny-model --wide`), merged by `quantforge lora-merge` and by
# `llama-export-lora`, wall time and peak RSS (GNU time) each, the outputs
# compared byte for byte; then the recipe `base → lora-merge → quantize
# Q4_K_M → export` cold, and again after the adapter changes.
#
#   benches/lora_merge.sh          (after scripts/fetch-references.sh --build;
#                                   gguf-py from pip writes the adapter)
set -euo pipefail
cd "$(dirname "$0")/.."
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
export_lora=$refs/llama.cpp/build/bin/llama-export-lora
threads=$(nproc)
cargo build --release --quiet --bin quantforge --example make-tiny-model
ours=$(realpath target/release/quantforge)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

target/release/examples/make-tiny-model "$work/wide.gguf" --wide >/dev/null

# A rank-64 adapter over attn_q/k/v/output of both layers, as
# convert_lora_to_gguf.py writes one (F16 halves, alpha 128), seeded.
adapter() {
    python3 - "$work/wide.gguf" "$1" "$2" <<'EOF'
import sys
import numpy as np
import gguf

base, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
reader = gguf.GGUFReader(base)
rng = np.random.default_rng(seed)
writer = gguf.GGUFWriter(out, "llama")
writer.add_type("adapter")
writer.add_string("adapter.type", "lora")
writer.add_float32("adapter.lora.alpha", 128.0)
rank = 64
for tensor in reader.tensors:
    name = tensor.name
    if not any(p in name for p in ("attn_q.", "attn_k.", "attn_v.", "attn_output.")):
        continue
    cols, rows = (int(d) for d in tensor.shape[:2])  # ggml order: row length first
    a = (rng.standard_normal((rank, cols)) * 0.02).astype(np.float16)
    b = (rng.standard_normal((rows, rank)) * 0.02).astype(np.float16)
    writer.add_tensor(name + ".lora_a", a)
    writer.add_tensor(name + ".lora_b", b)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
EOF
}
adapter "$work/adapter.gguf" 1
adapter "$work/adapter2.gguf" 2

measure() {  # LABEL COMMAND…: wall seconds and peak RSS
    local label=$1
    shift
    sync
    /usr/bin/time -f "$label %e s %M KiB" "$@" >"$work/stdout" 2>"$work/time.txt" || { cat "$work/time.txt"; exit 1; }
    tail -n 1 "$work/time.txt"
}

cat "$work/wide.gguf" "$work/adapter.gguf" >/dev/null   # warm the page cache
measure "llama-export-lora" "$export_lora" -m "$work/wide.gguf" --lora "$work/adapter.gguf" \
    -o "$work/reference.gguf" -t "$threads"
measure "quantforge lora-merge" "$ours" -q lora-merge "$work/wide.gguf" "$work/ours.gguf" \
    --lora "$work/adapter.gguf" -t "$threads"
cmp "$work/reference.gguf" "$work/ours.gguf" && echo "outputs identical"
rm -f "$work/reference.gguf" "$work/ours.gguf"

cp "$work/adapter.gguf" "$work/a.gguf"
cat > "$work/merge.toml" <<'EOF'
[input.base]
path = "wide.gguf"

[input.a]
path = "a.gguf"

[step.merged]
op = "lora-merge"
from = ["base", "a"]

[step.q]
op = "quantize"
from = "merged"
preset = "Q4_K_M"

[step.out]
op = "export"
from = "q"
path = "wide-Q4_K_M.gguf"
EOF
encoded() {  # what the last run's --json document says it encoded
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["totals"]; print("  tensors encoded:", t["tensors_encoded"], "from cache:", t["tensors_reused"])' "$work/stdout"
}
measure "recipe cold" "$ours" -q run "$work/merge.toml" --cache-dir "$work/cache" -j "$threads" --json
encoded
cp "$work/adapter2.gguf" "$work/a.gguf"
measure "recipe after a new adapter" "$ours" -q run "$work/merge.toml" --cache-dir "$work/cache" -j "$threads" --json
encoded
