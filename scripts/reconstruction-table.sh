#!/usr/bin/env bash
# The reconstruction-error table of docs/RECONSTRUCTION.md: quantizes an F16
# model to each preset with quantforge, then `quantforge diff` against the
# F16 source, printing one markdown row per preset (size, bits per weight,
# MAE, RMSE, max abs error, cosine similarity over all tensors).
#
#   scripts/reconstruction-table.sh MODEL-F16.gguf [PRESET...]
set -euo pipefail
cd "$(dirname "$0")/.."
input=$1
shift
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(Q2_K Q3_K_M Q4_0 Q4_K_M IQ4_XS Q5_K_M Q6_K Q8_0)
cargo build --release --quiet
ours=target/release/quantforge
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| preset | size (MiB) | bits/weight | MAE | RMSE | max abs error | cosine |"
echo "|---|---|---|---|---|---|---|"
for preset in "${presets[@]}"; do
    "$ours" quantize "$input" "$work/q.gguf" "$preset" 2>/dev/null
    "$ours" diff "$input" "$work/q.gguf" --json > "$work/diff.json"
    bpw=$("$ours" inspect "$work/q.gguf" --json 2>/dev/null |
        python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["bits_per_weight"])')
    python3 - "$preset" "$(stat -c %s "$work/q.gguf")" "$bpw" "$work/diff.json" <<'PY'
import json, sys
preset, size, bpw, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = json.load(open(path))["total"]
print(f"| {preset} | {size / 2**20:.1f} | {bpw} | {t['mae']:.3e} | {t['rmse']:.3e} | {t['max_abs_error']:.3e} | {t['cosine']:.6f} |")
PY
done
