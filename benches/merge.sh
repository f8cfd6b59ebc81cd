#!/usr/bin/env bash
# Merge throughput against cp: the same bytes, page cache warm, alternating.
#
#   benches/merge.sh MODEL.gguf [MAX_SIZE]       # e.g. models/gemma-f16.gguf 100M
#
# Splits MODEL with quantforge (MAX_SIZE per shard, default 100M), then
# ROUNDS times (default 5): `cp MODEL` and `quantforge merge SHARD` into the
# same directory, each followed by removing its output and preceded by an
# untimed `sync`. Prints the median and best
# wall times, every time measured, and merge throughput as a fraction of cp's. The merged file is
# checked to equal MODEL byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1
max_size=${2:-100M}
rounds=${ROUNDS:-5}
ours=target/release/quantforge
cargo build --release --quiet
work=$(mktemp -d -p "$(dirname "$model")")
trap 'rm -rf "$work"' EXIT

"$ours" split "$model" "$work/shard" --max-size "$max_size" >/dev/null
first=$(ls "$work"/shard-00001-of-*.gguf)
cat "$model" "$work"/shard-* >/dev/null   # warm the page cache

seconds() {
    local start=$EPOCHREALTIME
    "$@" >/dev/null 2>&1
    awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f\n", b - a }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
best() { sort -n | head -1; }

: > "$work/cp"; : > "$work/merge"
# Each timed command starts with no dirty pages pending (sync, untimed), so
# neither pays for writing back the other's output.
for _ in $(seq "$rounds"); do
    sync
    seconds cp "$model" "$work/copy.gguf" >> "$work/cp"
    rm -f "$work/copy.gguf"
    sync
    seconds "$ours" merge "$first" "$work/merged.gguf" >> "$work/merge"
    cmp -s "$model" "$work/merged.gguf" || { echo "merge differs from the original" >&2; exit 1; }
    rm -f "$work/merged.gguf"
done
bytes=$(stat -c %s "$model")
echo "$bytes bytes in $(ls "$work"/shard-* | wc -l) shards, $rounds rounds"
for stat in median best; do
    awk -v s="$stat" -v c="$($stat < "$work/cp")" -v m="$($stat < "$work/merge")" -v b="$bytes" 'BEGIN {
        printf "%-6s cp %.3f s (%.2f GB/s), merge %.3f s (%.2f GB/s), merge/cp throughput %.2f\n",
            s, c, b / c / 1e9, m, b / m / 1e9, c / m
    }'
done
echo "cp:    $(sort -n "$work/cp" | tr '\n' ' ')"
echo "merge: $(sort -n "$work/merge" | tr '\n' ' ')"
