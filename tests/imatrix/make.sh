#!/usr/bin/env bash
# Regenerates tests/data/imatrix/: real importance matrices for the tiny test
# model (tests/data/tiny-llama.gguf), in both of llama-imatrix's formats, from
# the same text, so tests/it/imatrix.rs can check that both load to the weights
# llama-quantize would use.
#
# Needs the reference llama.cpp (scripts/fetch-references.sh --build: the
# llama-cpp-python 0.3.36 sources) with llama-imatrix built as well:
#   cmake --build "$QUANTFORGE_REFS/llama.cpp/build" --target llama-imatrix -j2
# LLAMA_CPP overrides where that llama.cpp is.
#
# The text (text.txt, beside this script) is made of words of the tiny model's
# synthetic vocabulary. 3 chunks of 64 tokens: a chunk count that is not a power
# of two, so the legacy format's multiply and divide by ncall are real f32
# roundings rather than exponent shifts.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
llama_cpp=${LLAMA_CPP:-${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}/llama.cpp}
imatrix=$llama_cpp/build/bin/llama-imatrix
out=$repo/tests/data/imatrix

if [[ ! -x $imatrix ]]; then
    echo "error: $imatrix is missing; build it with: cmake --build $llama_cpp/build --target llama-imatrix -j2" >&2
    exit 1
fi
mkdir -p "$out"

# Run from here so the files record the dataset as plain `text.txt`.
cd "$here"
for format in gguf dat; do
    dest=$out/tiny-llama.imatrix.$format
    log=$(mktemp)
    if ! "$imatrix" -m "$repo/tests/data/tiny-llama.gguf" -f text.txt -o "$dest" --output-format "$format" \
        -c 64 --chunks 3 -t 2 --no-ppl --process-output >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    rm -f "$log"
    echo "wrote $dest ($(wc -c <"$dest") bytes)"
done
