#!/usr/bin/env bash
# Side by side: quantforge quantize vs llama-quantize on the same input, same
# preset, same thread count, run alternately (ROUNDS times each), printing
# wall time, CPU time and peak RSS per run and the median ratios.
#
#   benches/compare.sh INPUT.gguf PRESET [THREADS...]
#   FLAGS="--imatrix M.gguf" benches/compare.sh …   flags given to both tools
#
# quantforge is built in release mode first; llama-quantize comes from
# scripts/fetch-references.sh --build. Outputs are compared byte for byte
# after every pair of runs: a speed-up that changed the bytes is no speed-up.
set -euo pipefail
cd "$(dirname "$0")/.."
input=$1
preset=$2
shift 2
threads=("${@:-1 2}")
read -r -a flags <<< "${FLAGS:-}"
rounds=${ROUNDS:-3}
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
llama=$refs/llama.cpp/build/bin/llama-quantize
ours=target/release/quantforge
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# measure NAME CMD...: prints "wall cpu rss_kib" for one run.
measure() {
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >/dev/null 2>&1
    awk '{ printf "%.3f %.3f %d\n", $1, $2 + $3, $4 }' "$work/time"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for t in ${threads[*]}; do
    : > "$work/ours.$t"
    : > "$work/theirs.$t"
    for _ in $(seq "$rounds"); do
        measure "$ours" quantize "${flags[@]}" "$input" "$work/ours.gguf" "$preset" "$t" >> "$work/ours.$t"
        measure "$llama" "${flags[@]}" "$input" "$work/theirs.gguf" "$preset" "$t" >> "$work/theirs.$t"
        cmp -s "$work/ours.gguf" "$work/theirs.gguf" || { echo "outputs differ for $preset" >&2; exit 1; }
    done
    for col in 1 2 3; do
        o=$(cut -d' ' -f$col "$work/ours.$t" | median)
        l=$(cut -d' ' -f$col "$work/theirs.$t" | median)
        name=$(echo "wall_s cpu_s peak_rss_kib" | cut -d' ' -f$col)
        awk -v n="$name" -v t="$t" -v o="$o" -v l="$l" -v p="$preset" \
            'BEGIN { printf "%-8s threads=%s %-13s quantforge %10s  llama-quantize %10s  ratio (llama/ours) %.2f\n", p, t, n, o, l, l / o }'
    done
done
