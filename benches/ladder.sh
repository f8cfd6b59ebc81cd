#!/usr/bin/env bash
# The ladder side by side (issue 23): a five-preset recipe (Q8_0, Q6_K,
# Q5_K_M, Q4_K_M, Q3_K_M) run cold by quantforge, against the same five
# llama-quantize runs back to back, bytes compared preset by preset.
#
#   benches/ladder.sh INPUT.gguf [THREADS...]
#   FLAGS="--imatrix M.gguf" benches/ladder.sh …   the matrix, for both tools
#
# quantforge is built in release mode first; llama-quantize comes from
# scripts/fetch-references.sh --build. Each round starts from an empty cache;
# ROUNDS (default 3) rounds alternate the two, and the medians are printed
# (each round's numbers go to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
input=$(realpath "$1")
shift
threads=("${@:-1 2}")
read -r -a flags <<< "${FLAGS:-}"
presets=(Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M)
rounds=${ROUNDS:-3}
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
llama=$refs/llama.cpp/build/bin/llama-quantize
ours=$(realpath target/release/quantforge)
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The recipe reads the input (and the matrix) through links beside it:
# recipe paths are relative to the recipe.
ln -s "$input" "$work/base.gguf"
imatrix_line=""
imatrix_input=""
if [[ ${#flags[@]} -ge 2 && ${flags[0]} == --imatrix ]]; then
    ln -s "$(realpath "${flags[1]}")" "$work/imatrix.gguf"
    imatrix_input=$'[input.imatrix]\npath = "imatrix.gguf"\n'
    imatrix_line='imatrix = "imatrix"'
    # The output records the matrix as each tool was given it: the same spelling for both.
    flags=(--imatrix imatrix.gguf)
fi
list=$(printf '"%s", ' "${presets[@]}")
cat > "$work/ladder.toml" <<TOML
[recipe]
name = "ladder"

[input.base]
path = "base.gguf"
$imatrix_input
[step.q]
op = "quantize"
from = "base"
preset = [${list%, }]
$imatrix_line

[step.out]
op = "export"
from = "q"
path = "out/m-{preset}.gguf"
TOML

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for t in ${threads[*]}; do
    : > "$work/runs.$t"
    for round in $(seq "$rounds"); do
        # Each round a cache of its own, all removed at the end: removing the
        # last round's ~1,400 files just before this one's would make ext4
        # (without a journal, as on the machines measured) skip every
        # recently deleted inode when allocating one — a quarter of the
        # samples of a profiled round went there.
        rm -rf "$work/out" "$work/theirs"
        mkdir -p "$work/theirs"
        /usr/bin/time -f '%e %U %S %M' -o "$work/time.ours" \
            "$ours" run "$work/ladder.toml" --cache-dir "$work/cache.$t.$round" -j "$t" -q >/dev/null 2>&1
        : > "$work/time.theirs"
        for p in "${presets[@]}"; do
            (cd "$work" && /usr/bin/time -a -f '%e %U %S %M' -o "$work/time.theirs" \
                "$llama" "${flags[@]}" "$input" "$work/theirs/m-$p.gguf" "$p" "$t" >/dev/null 2>&1)
        done
        for p in "${presets[@]}"; do
            cmp -s "$work/out/m-$p.gguf" "$work/theirs/m-$p.gguf" || { echo "outputs differ for $p" >&2; exit 1; }
        done
        # One line per round: our wall, CPU and RSS, then the five runs' summed wall and CPU and largest RSS.
        read -r ow ou os orss < "$work/time.ours"
        awk -v ow="$ow" -v oc="$(echo "$ou + $os" | bc)" -v orss="$orss" '
            { wall += $1; cpu += $2 + $3; if ($4 > rss) rss = $4 }
            END { print ow, oc, orss, wall, cpu, rss }' "$work/time.theirs" | tee -a "$work/runs.$t" >&2
    done
    col() { awk -v c="$1" '{ print $c }' "$work/runs.$t" | median; }
    awk -v t="$t" -v ow="$(col 1)" -v oc="$(col 2)" -v orss="$(col 3)" -v tw="$(col 4)" -v tc="$(col 5)" \
        -v trss="$(col 6)" 'BEGIN {
            printf "ladder threads=%s wall_s   quantforge %8.2f  llama-quantize x5 %8.2f  ratio %.2f\n", t, ow, tw, tw / ow
            printf "ladder threads=%s cpu_s    quantforge %8.2f  llama-quantize x5 %8.2f  ratio %.2f\n", t, oc, tc, tc / oc
            printf "ladder threads=%s peak_rss quantforge %8d  llama-quantize    %8d KiB\n", t, orss, trss
        }'
done
