#!/usr/bin/env bash
# The headline check: on Gemma 3 270M, quantforge and llama-quantize write
# identical files for every preset from F16, with and without an importance
# matrix, and for OTHER_PRESETS (default Q4_K_M Q8_0 Q6_K) from BF16 and F32.
# (CI runs a subset, tests/it/quantize_llama.rs.)
#
#   scripts/verify-gemma.sh [PRESET...]      # the presets tried from F16
#
# Needs models/ (scripts/fetch-models.sh) and the reference build
# (scripts/fetch-references.sh --build). Prints one line per comparison and
# exits non-zero if any differs.
set -euo pipefail
cd "$(dirname "$0")/.."
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
llama=$refs/llama.cpp/build/bin/llama-quantize
ours=target/release/quantforge
imatrix=tests/data/imatrix/gemma-3-270m.imatrix.gguf
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q8_0
    Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M
    TQ1_0 TQ2_0 MXFP4_MOE Q1_0 Q2_0 F16 BF16 F32)
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

same() { # LABEL A B
    if cmp -s "$2" "$3"; then echo "identical  $1"; else echo "DIFFERENT  $1"; failed=1; fi
}

# Float versions of the model, made by our dequantize and checked against
# llama-quantize's own conversion of the same Q4_K_M file.
for t in f16 bf16 f32; do
    "$ours" dequantize models/gemma-3-270m-q4_k_m.gguf "$work/gemma-$t.gguf" --type "$t" 2>/dev/null
    "$llama" --allow-requantize models/gemma-3-270m-q4_k_m.gguf "$work/ref-$t.gguf" "${t^^}" 2 >/dev/null 2>&1
    same "dequantize Q4_K_M -> $t" "$work/gemma-$t.gguf" "$work/ref-$t.gguf"
done

read -r -a others <<< "${OTHER_PRESETS:-Q4_K_M Q8_0 Q6_K}"
for input in f16 bf16 f32; do
    if [ "$input" = f16 ]; then list=("${presets[@]}"); else list=("${others[@]}"); fi
    for preset in "${list[@]}"; do
        for flags in "" "--imatrix $imatrix"; do
            # shellcheck disable=SC2086
            if "$llama" $flags "$work/gemma-$input.gguf" "$work/theirs.gguf" "$preset" 2 >/dev/null 2>&1; then
                "$ours" quantize $flags "$work/gemma-$input.gguf" "$work/ours.gguf" "$preset" 2 2>/dev/null
                same "$input -> $preset ${flags:+with imatrix}" "$work/ours.gguf" "$work/theirs.gguf"
            else
                echo "refused    $input -> $preset ${flags:+with imatrix} (llama-quantize refuses it)"
            fi
        done
    done
done
exit $failed
