#!/usr/bin/env bash
# Builds issue 40's references outside git and their golden summaries in it:
#
#   tests/data/lora/adapters/NAME/        the PEFT adapters (tests/lora/make_adapters.py),
#                                         committed; rebuilt only with --adapters
#   OUTDIR/NAME-OUTTYPE.gguf              convert_lora_to_gguf.py ADAPTER --base BASE
#   tests/data/lora/NAME-OUTTYPE.json     tests/convert/summarize.py of each
#
# Usage: tests/lora/make_references.sh [OUTDIR] [--adapters]
#   OUTDIR defaults to ~/.cache/quantforge/lora-refs. Needs scripts/setup-convert-env.sh's
#   venv with `pip install peft` (0.21.2) and llama.cpp from scripts/fetch-references.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
outdir=$HOME/.cache/quantforge/lora-refs
adapters=false
for arg in "$@"; do
    case "$arg" in
        --adapters) adapters=true ;;
        *) outdir=$arg ;;
    esac
done
python=$("$repo/scripts/setup-convert-env.sh" | tail -n 1)
llama=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}/llama.cpp
checkpoints=$repo/tests/data/convert/checkpoints
golden=$repo/tests/data/lora
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
if $adapters; then
    rm -rf "$golden/adapters"
    "$python" "$here/make_adapters.py" "$checkpoints" "$golden/adapters"
fi
mkdir -p "$outdir"
for pair in llama-attn:tiny-llama-3-chat qwen2-mlp:Qwen2.5-Tiny-Instruct neox-qkv:pythia-tiny-deduped \
    falcon-qkv:falcon-tiny mixtral-experts:Mixtral-Tiny-4x8 qwen3moe-experts:Qwen3-MoE-Tiny \
    llama-embed:tiny-llama-3-chat; do
    name=${pair%%:*} base=${pair#*:}
    for outtype in f32 f16 bf16 q8_0; do
        out=$outdir/$name-$outtype.gguf
        "$python" "$llama/convert_lora_to_gguf.py" "$golden/adapters/$name" --base "$checkpoints/$base" \
            --outtype "$outtype" --outfile "$out" > "$outdir/$name-$outtype.log" 2>&1
        "$python" "$repo/tests/convert/summarize.py" "$out" "$golden/$name-$outtype.json"
        echo "$name $outtype: $(sha256sum "$out" | cut -c1-16)"
    done
done
