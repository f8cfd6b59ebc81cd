#!/usr/bin/env bash
# Seconds per GB and peak RSS of `quantize` as the model grows: the 4096-wide
# synthetic model (examples/make-tiny-model --wide) with more and more layers,
# each quantized with the page cache warm and then cold (dropped first, when
# this user may: /proc/sys/vm/drop_caches).
#
#   benches/scale.sh [PRESET] [THREADS] [LAYERS...]     default: Q4_K_M 2 1 3 12 26
#
# The models (0.6 to 10.8 GB) are written under $SCALE_DIR (default
# models/scale, git-ignored) and removed afterwards unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-Q4_K_M}
threads=${2:-2}
shift $(($# < 2 ? $# : 2))
layers=("${@:-1 3 12 26}")
dir=${SCALE_DIR:-models/scale}
ours=target/release/quantforge
cargo build --release --quiet --bin quantforge --example make-tiny-model
mkdir -p "$dir"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$dir"' EXIT

drop_caches() { sync && echo 1 2>/dev/null > /proc/sys/vm/drop_caches; }

printf '%-8s %10s %6s %10s %10s %10s\n' layers GB cache wall_s s_per_GB rss_MiB
for n in ${layers[*]}; do
    model=$dir/wide-$n.gguf
    [ -f "$model" ] || target/release/examples/make-tiny-model "$model" --wide --layers "$n" >/dev/null
    gb=$(stat -c %s "$model" | awk '{ printf "%.2f", $1 / 1e9 }')
    for cache in warm cold; do
        if [ $cache = warm ]; then
            cat "$model" > /dev/null
        elif ! drop_caches; then
            continue
        fi
        /usr/bin/time -f '%e %M' -o "$dir/time" "$ours" quantize "$model" "$dir/out.gguf" "$preset" "$threads" \
            >/dev/null 2>&1
        read -r wall rss < "$dir/time"
        awk -v n="$n" -v gb="$gb" -v c=$cache -v w="$wall" -v r="$rss" \
            'BEGIN { printf "%-8s %10s %6s %10.2f %10.2f %10d\n", n, gb, c, w, w / gb, r / 1024 }'
        rm -f "$dir/out.gguf"
    done
done
