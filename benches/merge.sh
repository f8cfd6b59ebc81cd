#!/usr/bin/env bash
# Merge throughput against cp, and split and merge against llama-gguf-split:
# the same bytes, page cache warm, alternating.
#
#   benches/merge.sh MODEL.gguf [MAX_SIZE]       # e.g. models/gemma-f16.gguf 100M
#
# Splits MODEL with quantforge (MAX_SIZE per shard, default 100M), then
# ROUNDS times (default 5): `cp MODEL` and `quantforge merge SHARD` into the
# same directory and, where scripts/fetch-references.sh built it,
# `llama-gguf-split --merge` and both tools' `--split`. Every timed command
# is preceded by an untimed `sync` and followed by removing its output.
# Prints the median and best wall times (bash's EPOCHREALTIME) and every
# time measured. Each round checks the merge equals MODEL byte for byte, and
# the first checks the two tools' shards are identical.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1
max_size=${2:-100M}
rounds=${ROUNDS:-5}
ours=target/release/quantforge
llama=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}/llama.cpp/build/bin/llama-gguf-split
[ -x "$llama" ] || llama=
cargo build --release --quiet
work=$(mktemp -d -p "$(dirname "$model")")
trap 'rm -rf "$work"' EXIT

"$ours" split "$model" "$work/shard" --max-size "$max_size" >/dev/null
first=$(ls "$work"/shard-00001-of-*.gguf)
cat "$model" "$work"/shard-* >/dev/null   # warm the page cache

# Appends the wall time of a command, run after an untimed sync (so no run
# pays for writing back another's output), to the file named first.
timed() {
    local record=$1 start
    shift
    sync
    start=$EPOCHREALTIME
    "$@" >/dev/null 2>&1
    awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f\n", b - a }' >> "$work/$record"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
best() { sort -n | head -1; }

for round in $(seq "$rounds"); do
    timed cp cp "$model" "$work/copy.gguf"
    rm -f "$work/copy.gguf"
    timed merge "$ours" merge "$first" "$work/merged.gguf"
    cmp -s "$model" "$work/merged.gguf" || { echo "merge differs from the original" >&2; exit 1; }
    rm -f "$work/merged.gguf"
    [ -n "$llama" ] || continue
    timed llama-merge "$llama" --merge "$first" "$work/merged.gguf"
    rm -f "$work/merged.gguf"
    mkdir -p "$work/ours" "$work/theirs"
    timed split "$ours" split "$model" "$work/ours/s" --max-size "$max_size"
    timed llama-split "$llama" --split --split-max-size "$max_size" "$model" "$work/theirs/s"
    if [ "$round" = 1 ]; then
        diff -rq "$work/ours" "$work/theirs" || { echo "split differs from llama-gguf-split's" >&2; exit 1; }
    fi
    rm -rf "$work/ours" "$work/theirs"
done

bytes=$(stat -c %s "$model")
echo "$bytes bytes in $(ls "$work"/shard-* | wc -l) shards, $rounds rounds"
# Prints median and best of two records and the ratio of the first's time to
# the second's (> 1: the second is faster).
compare() {
    local theirs=$1 ours=$2 what=$3
    for stat in median best; do
        awk -v s="$stat" -v t="$($stat < "$work/$theirs")" -v o="$($stat < "$work/$ours")" -v b="$bytes" \
            -v what="$what" -v a="$theirs" -v c="$ours" 'BEGIN {
            printf "%-6s %s %.3f s (%.2f GB/s), %s %.3f s (%.2f GB/s), %s %.2f\n",
                s, a, t, b / t / 1e9, c, o, b / o / 1e9, what, t / o
        }'
    done
}
compare cp merge "merge/cp throughput"
if [ -n "$llama" ]; then
    compare llama-merge merge "llama-gguf-split --merge time / ours"
    compare llama-split split "llama-gguf-split --split time / ours"
fi
for record in cp merge llama-merge split llama-split; do
    [ -s "$work/$record" ] && printf '%-12s %s\n' "$record:" "$(sort -n "$work/$record" | tr '\n' ' ')"
done
exit 0
