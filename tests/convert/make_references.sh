#!/usr/bin/env bash
# Builds the reference GGUFs for the HF -> GGUF converter tests, outside git:
#
#   OUTDIR/checkpoints/<name>/          tiny HF checkpoints (tests/convert/make_checkpoints.py)
#   OUTDIR/gguf/<name>-<outtype>.gguf   llama.cpp's convert_hf_to_gguf.py output, through
#                                       tests/convert/reference_convert.py
#   OUTDIR/summaries/<name>-<outtype>.json   tests/convert/summarize.py of each GGUF
#   OUTDIR/logs/<name>-<outtype>.log    the converter's log
#
# for every checkpoint and every outtype in f16 bf16 f32 q8_0; the multimodal ones' vision
# towers with --mmproj (OUTDIR/summaries/mmproj/; LLaVA-1.5's with llama.cpp's legacy
# scripts, tests/convert/reference_llava_legacy.py); and a few with --vocab-only,
# a model card and --metadata, and the --split-* flags (OUTDIR/splits/<case>/, every shard);
# and the real all-MiniLM-L6-v2 (summaries/real/). The fixtures' pre-tokenizer check
# hashes are tests/convert/pre_hashes.py's (tests/data/convert/pre_tokenizers/check_hashes.json).
#
# Usage: tests/convert/make_references.sh [OUTDIR] [--update-golden]
#   OUTDIR defaults to ~/.cache/quantforge/convert-refs.
#   The summaries are compared with the committed ones in tests/data/convert/ and any
#   difference is reported (exit 1); --update-golden copies them there instead.
#
# Needs the environment from scripts/setup-convert-env.sh (run here; fast when present)
# and llama.cpp from scripts/fetch-references.sh. Exits non-zero when any conversion fails.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
outdir=""
update_golden=false
for arg in "$@"; do
    case "$arg" in
        --update-golden) update_golden=true ;;
        -*) echo "unknown option $arg" >&2; exit 2 ;;
        *) outdir=$arg ;;
    esac
done
outdir=${outdir:-$HOME/.cache/quantforge/convert-refs}
golden=$repo/tests/data/convert
outtypes=(f16 bf16 f32 q8_0)

python=$("$repo/scripts/setup-convert-env.sh" | tail -n 1)
# One thread: the machines are small and shared; the outputs do not depend on it.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
# Keep the converter off the network (it never needs it for local directories).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

mkdir -p "$outdir"/{checkpoints,gguf,summaries,logs}
"$python" "$here/make_checkpoints.py" "$outdir/checkpoints"
"$python" "$here/make_fp8_checkpoints.py" "$outdir/checkpoints"

failed=()
n=0
# reference LABEL SUMMARY CHECKPOINT CONVERTER-ARGS...: the converter's output
# into gguf/LABEL.gguf (its log in logs/LABEL.log), summarized into SUMMARY. The
# converter is $converter (reference_convert.py unless set for the call).
reference() {
    local label=$1 summary=$2 ckpt=$3
    shift 3
    local out=$outdir/gguf/$label.gguf log=$outdir/logs/$label.log
    rm -f "$out"
    if "$python" "$here/${converter:-reference_convert.py}" "$ckpt" "$@" --outfile "$out" >"$log" 2>&1 && [ -s "$out" ]; then
        "$python" "$here/summarize.py" "$out" "$summary"
        n=$((n + 1))
        echo "ok   $label ($(stat -c %s "$out") bytes)"
    else
        failed+=("$label")
        echo "FAIL $label (see $log)"
    fi
}
for ckpt in "$outdir"/checkpoints/*/; do
    name=$(basename "$ckpt")
    for t in "${outtypes[@]}"; do
        reference "$name-$t" "$outdir/summaries/$name-$t.json" "$ckpt" --outtype "$t"
    done
done
# --vocab-only: one checkpoint of each vocabulary kind and of generated tensors' keys.
vocab_only=(tiny-llama-3-chat Phi-3-mini-128k-instruct Qwen3-MoE-Tiny gemma-3-tiny-it DeepSeek-V3-Tiny)
mkdir -p "$outdir/summaries/vocab-only"
for name in "${vocab_only[@]}"; do
    reference "$name-vocab-only-f16" "$outdir/summaries/vocab-only/$name-f16.json" "$outdir/checkpoints/$name" \
        --outtype f16 --vocab-only
done
# --mmproj: the vision tower of each multimodal checkpoint, at every outtype.
mmproj=(gemma-3-tiny-vl-it pixtral-tiny Mistral-Small-3.1-Tiny-Instruct Qwen2-VL-Tiny-Instruct Qwen2.5-VL-Tiny-Instruct)
mkdir -p "$outdir/summaries/mmproj"
for name in "${mmproj[@]}"; do
    for t in "${outtypes[@]}"; do
        reference "$name-mmproj-$t" "$outdir/summaries/mmproj/$name-$t.json" "$outdir/checkpoints/$name" \
            --outtype "$t" --mmproj
    done
done
# --mmproj of LLaVA-1.5 (a CLIP tower), which convert_hf_to_gguf.py does not convert:
# llama.cpp's legacy LLaVA scripts (reference_llava_legacy.py), at the two outtypes they write.
for t in f16 f32; do
    converter=reference_llava_legacy.py reference "llava-1.5-tiny-hf-mmproj-$t" \
        "$outdir/summaries/mmproj/llava-1.5-tiny-hf-$t.json" "$outdir/checkpoints/llava-1.5-tiny-hf" --outtype "$t"
done
# A model card and the converter's --metadata / --model-name, on SmolLM3-Tiny
# copied beside tests/data/convert/cards/README.md.
cards=$repo/tests/data/convert/cards
carded=$outdir/cards/SmolLM3-Tiny
rm -rf "$carded" && mkdir -p "$carded" "$outdir/summaries/cards"
cp "$outdir"/checkpoints/SmolLM3-Tiny/* "$cards/README.md" "$carded"/
metadata=(--metadata "$cards/metadata.json")
reference cards-card-f16 "$outdir/summaries/cards/card-f16.json" "$carded" --outtype f16
reference cards-override-f16 "$outdir/summaries/cards/override-f16.json" "$carded" --outtype f16 "${metadata[@]}"
reference cards-override-named-f16 "$outdir/summaries/cards/override-named-f16.json" "$carded" --outtype f16 \
    "${metadata[@]}" --model-name "Named On The Line" --vocab-only
# The converter's --split-max-tensors / --split-max-size / --no-tensor-first-split:
# every shard it writes (name, size, sha256) in splits/CASE.json.
mkdir -p "$outdir/summaries/splits"
split_reference() {
    local case=$1 name=$2 outfile=$3
    shift 3
    local dir=$outdir/splits/$case log=$outdir/logs/split-$case.log
    rm -rf "$dir" && mkdir -p "$dir"
    if "$python" "$here/reference_convert.py" "$outdir/checkpoints/$name" "$@" --outfile "$dir/$outfile" >"$log" 2>&1; then
        "$python" - "$dir" "$outdir/summaries/splits/$case.json" "$name" "$outfile" "$@" <<'PY'
import hashlib, json, sys
from pathlib import Path
out, golden, checkpoint, outfile, *args = sys.argv[1:]
files = [{"name": f.name, "size": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
         for f in sorted(Path(out).iterdir())]
summary = {"checkpoint": checkpoint, "outfile": outfile, "args": args, "files": files}
Path(golden).write_text(json.dumps(summary, indent=1) + "\n")
PY
        n=$((n + 1))
        echo "ok   split $case ($(ls "$dir" | wc -l) files)"
    else
        failed+=("split-$case")
        echo "FAIL split $case (see $log)"
    fi
}
split_reference max-tensors Qwen3-MoE-Tiny tiny.gguf --outtype f16 --split-max-tensors 10
split_reference max-size Qwen3-MoE-Tiny tiny.gguf --outtype q8_0 --split-max-size 20K
split_reference both-limits Qwen3-MoE-Tiny tiny.gguf --outtype bf16 --split-max-size 30K --split-max-tensors 7
split_reference no-tensor-first Qwen3-MoE-Tiny tiny.gguf --outtype f16 --split-max-tensors 30 --no-tensor-first-split
split_reference one-shard tiny-llama-3-chat tiny.gguf --outtype f16 --split-max-tensors 1000
split_reference other-extension DeepSeek-V3-Tiny tiny.bin --outtype f32 --split-max-size 100K
# Chat templates in every form SpecialVocab reads (tests/data/convert/chat-templates/cases.json).
mkdir -p "$outdir/summaries/chat-templates" "$outdir/chat-templates"
"$python" "$here/chat_template_cases.py" "$outdir/checkpoints" "$outdir/chat-templates" >/dev/null
for case_dir in "$outdir"/chat-templates/*/; do
    case=$(basename "$case_dir")
    reference "chat-templates-$case-f16" "$outdir/summaries/chat-templates/$case-f16.json" "$case_dir" \
        --outtype f16 --vocab-only
done
# A real checkpoint, whose tokenizer the converter knows by its check hash (no
# pre-tokenizer patch takes part): all-MiniLM-L6-v2 from scripts/fetch-minilm.sh.
mkdir -p "$outdir/summaries/real"
"$repo/scripts/fetch-minilm.sh" >/dev/null
for t in "${outtypes[@]}"; do
    reference "all-MiniLM-L6-v2-$t" "$outdir/summaries/real/all-MiniLM-L6-v2-$t.json" "$repo/models/minilm" --outtype "$t"
done
echo "$n conversions succeeded, ${#failed[@]} failed${failed:+: ${failed[*]}}"

status=0
[ ${#failed[@]} -eq 0 ] || status=1
if $update_golden; then
    mkdir -p "$golden"
    cp "$outdir"/summaries/*.json "$golden"/
    mkdir -p "$golden/vocab-only" "$golden/mmproj" "$golden/cards" "$golden/splits" "$golden/real" "$golden/chat-templates"
    cp "$outdir"/summaries/vocab-only/*.json "$golden/vocab-only"/
    cp "$outdir"/summaries/mmproj/*.json "$golden/mmproj"/
    cp "$outdir"/summaries/real/*.json "$golden/real"/
    cp "$outdir"/summaries/chat-templates/*.json "$golden/chat-templates"/
    cp "$outdir"/summaries/cards/*.json "$golden/cards"/
    cp "$outdir"/summaries/splits/*.json "$golden/splits"/
    echo "updated $golden"
elif [ -d "$golden" ]; then
    differ=0
    for s in "$outdir"/summaries/*.json "$outdir"/summaries/{vocab-only,mmproj,cards,splits,real,chat-templates}/*.json; do
        g=$golden/${s#"$outdir"/summaries/}
        if [ ! -f "$g" ]; then
            echo "no golden summary for $(basename "$s")"
            differ=1
        elif ! cmp -s "$s" "$g"; then
            echo "summary differs from golden: $(basename "$s")"
            diff -u "$g" "$s" | head -40 || true
            differ=1
        fi
    done
    if [ $differ -eq 0 ]; then
        echo "all summaries match $golden"
    else
        status=1
    fi
fi
exit $status
