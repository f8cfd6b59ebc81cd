#!/usr/bin/env bash
# The Slurm executor's overhead: a ladder of a model through
# `run --executor slurm --wait` with 2 tasks at once (1 CPU each), against a
# local `run --jobs 2` on the same machine, both from empty caches, outputs
# compared byte for byte; the shared cache the tasks meet in is a directory
# (`file://`, as on a cluster's shared file system) and then the S3 server.
# Needs scripts/slurm-cluster.sh and scripts/s3-server.sh (started here when
# down).
#
#   cargo run --release --example make-tiny-model -- models/wide-f16.gguf --wide
#   benches/slurm.sh [MODEL] [UNIT_SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(realpath "${1:-models/wide-f16.gguf}")
unit_size=${2:-4s}
rounds=${ROUNDS:-1}
bin=$(realpath target/release/quantforge)
cargo build --release --quiet
./scripts/s3-server.sh start >/dev/null
./scripts/slurm-cluster.sh start >/dev/null
eval "$(./scripts/s3-server.sh env)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/ladder.toml" <<EOF
[recipe]
name = "slurm-bench"

[input.model]
path = "$model"

[step.q]
op = "quantize"
from = "model"
preset = ["Q8_0", "Q6_K", "Q4_K_M"]

[step.out]
op = "export"
from = "q"
path = "out/model-{preset}.gguf"
EOF

secs() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.2f", e - s }'; }

for round in $(seq 1 "$rounds"); do
  for remote in file s3; do
    rm -rf "$work/out" "$work/local-cache" "$work/slurm-cache" "$work/shared"
    start=$EPOCHREALTIME
    "$bin" run "$work/ladder.toml" --jobs 2 --cache-dir "$work/local-cache" >/dev/null
    local_s=$(secs "$start")
    mv "$work/out" "$work/local-out"

    case $remote in
        file) url=file://$work/shared ;;
        s3) url=s3://$QUANTFORGE_TEST_BUCKET/slurm-bench-$(date +%s%N) ;;
    esac
    start=$EPOCHREALTIME
    "$bin" run "$work/ladder.toml" --executor slurm --wait --cache-dir "$work/slurm-cache" --cache-url "$url" \
        --unit-size "$unit_size" --cpus-per-task 1 --max-parallel 2 >"$work/slurm.log"
    slurm_s=$(secs "$start")
    units=$(grep -o '[0-9]* of [0-9]* units' "$work/slurm.log" | head -1)
    for f in "$work"/local-out/*.gguf; do
        cmp "$f" "$work/out/$(basename "$f")"
    done
    rm -rf "$work/local-out"
    awk -v l="$local_s" -v s="$slurm_s" -v u="$units" -v r="$round" -v m="$remote" 'BEGIN {
        printf "round %d, %s remote: local --jobs 2 %.2f s; slurm (2 tasks, %s) %.2f s; overhead %.2f s = %.0f%% (bytes equal)\n",
            r, m, l, u, s, s - l, 100 * (s - l) / l }'
  done
done
