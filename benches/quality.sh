#!/usr/bin/env bash
# recipes/gemma-quality.toml side by side (issue 42): the recipe run cold by
# quantforge, against the same llama.cpp commands a user runs by hand in a
# shell script — the F16 decoding, llama-imatrix, seven llama-quantize runs
# with the matrix, the base's logits and seven llama-perplexity
# --kl-divergence runs — and then its no-op rerun.
#
#   benches/quality.sh                 (after scripts/fetch-models.sh and
#                                       scripts/fetch-references.sh --build)
#
# Both sides use every core: quantforge its default jobs, the tools -t $(nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
bin=$refs/llama.cpp/build/bin
gemma=$(realpath models/gemma-3-270m-q4_k_m.gguf)
calibration=/usr/share/common-licenses/GPL-3
evaluation=/usr/share/common-licenses/Apache-2.0
presets=(Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M IQ4_XS IQ3_S)
threads=$(nproc)
cargo build --release --quiet
ours=$(realpath target/release/quantforge)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

seconds() { date +%s.%N; }

# By hand. llama-perplexity's logger may drop its statistics at exit
# (llama.cpp #22142): a run without them is run again, as the recipe does.
start=$(seconds)
(
    cd "$work"
    "$bin/llama-quantize" --allow-requantize "$gemma" f16.gguf F16 "$threads" >/dev/null 2>&1
    "$bin/llama-imatrix" -m f16.gguf -f "$calibration" -o imatrix.gguf -c 512 -t "$threads" >/dev/null 2>&1
    for preset in "${presets[@]}"; do
        "$bin/llama-quantize" --imatrix imatrix.gguf f16.gguf "gemma-$preset.gguf" "$preset" "$threads" >/dev/null 2>&1
    done
    "$bin/llama-perplexity" -m f16.gguf -f "$evaluation" -c 512 --kl-divergence-base base.kld -t "$threads" >/dev/null 2>&1
    for preset in "${presets[@]}"; do
        for _ in 1 2 3; do
            "$bin/llama-perplexity" -m "gemma-$preset.gguf" --kl-divergence-base base.kld --kl-divergence \
                -c 512 -t "$threads" 2>/dev/null >"$preset.txt"
            grep -q "Same top p:" "$preset.txt" && break
        done
    done
)
by_hand=$(echo "$(seconds) - $start" | bc)

# The recipe, cold, from its own directory tree (the model linked in).
mkdir -p "$work/project/recipes" "$work/project/models"
cp recipes/gemma-quality.toml "$work/project/recipes/"
ln -s "$gemma" "$work/project/models/"
start=$(seconds)
"$ours" -q run "$work/project/recipes/gemma-quality.toml" --cache-dir "$work/cache" >/dev/null
cold=$(echo "$(seconds) - $start" | bc)
start=$(seconds)
"$ours" -q run "$work/project/recipes/gemma-quality.toml" --cache-dir "$work/cache" >/dev/null
rerun=$(echo "$(seconds) - $start" | bc)

printf 'by hand (shell script): %.1f s\nquantforge cold:        %.1f s (%.2f of by hand)\nquantforge no-op rerun: %.3f s\n' \
    "$by_hand" "$cold" "$(echo "$cold / $by_hand" | bc -l)" "$rerun"
