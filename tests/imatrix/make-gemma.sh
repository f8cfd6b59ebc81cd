#!/usr/bin/env bash
# Regenerates tests/data/imatrix/gemma-3-270m.imatrix.gguf: a real importance
# matrix for Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, from
# scripts/fetch-models.sh), collected by llama-imatrix over this repository's
# own documentation (4 chunks of 128 tokens), for the byte-identity tests of
# the importance-matrix path on a real model.
#
# Needs llama-imatrix from the reference llama.cpp (see make.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
llama_cpp=${LLAMA_CPP:-${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}/llama.cpp}
imatrix=$llama_cpp/build/bin/llama-imatrix
# A fixed file name, so the dataset name recorded in the file is `docs.txt`.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$repo/README.md" "$repo/ARCHITECTURE.md" "$repo/docs/CODECS.md" > "$work/docs.txt"
cd "$work"
"$imatrix" -m "$repo/models/gemma-3-270m-q4_k_m.gguf" -f docs.txt \
    -o "$repo/tests/data/imatrix/gemma-3-270m.imatrix.gguf" \
    -c 128 --chunks 4 -t 2 --no-ppl >/dev/null 2>&1
