#!/usr/bin/env bash
# What a rerun costs: the Gemma ladder (recipes/gemma-ladder.toml) run once
# on an empty cache, then again with nothing changed (ROUNDS times), then
# with its outputs deleted so every export is assembled from cached blobs
# (ROUNDS times: each blob is checked against its hash as it is copied).
# Prints wall milliseconds per case, median of the rounds, for each binary
# given (default: this tree's release build), alternating between them.
#
#   benches/rerun.sh [BINARY...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
bins=("${@:-target/release/quantforge}")
[ $# -gt 0 ] || cargo build --release --quiet
recipe=recipes/gemma-ladder.toml
out=recipes/out
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wall_ms CMD...: runs it, prints its wall time in ms.
wall_ms() {
    local start=$EPOCHREALTIME
    "$@" >/dev/null
    awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", (e - s) * 1000 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for i in "${!bins[@]}"; do
    rm -rf "$out"
    echo "${bins[$i]}: first run $(wall_ms "${bins[$i]}" run "$recipe" --cache-dir "$work/cache$i") ms"
done
for case in noop assemble; do
    for i in "${!bins[@]}"; do : > "$work/$case.$i"; done
    for _ in $(seq "$rounds"); do
        for i in "${!bins[@]}"; do
            [ "$case" = assemble ] && rm -rf "$out"
            wall_ms "${bins[$i]}" run "$recipe" --cache-dir "$work/cache$i" >> "$work/$case.$i"
        done
    done
    for i in "${!bins[@]}"; do
        echo "${bins[$i]}: $case median $(median < "$work/$case.$i") ms (of $(tr '\n' ' ' < "$work/$case.$i"))"
    done
done
rm -rf "$out"
