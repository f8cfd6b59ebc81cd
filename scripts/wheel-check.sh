#!/usr/bin/env bash
# `pip install quantforge` (issue 44, item 13): builds the command-line
# program's wheel with maturin (`bindings = "bin"`, pyproject.toml), installs
# it into a fresh virtual environment, and runs the README's quickstart
# through the installed `quantforge`: twice (the second run all hits), its
# outputs byte for byte those of cargo's own build. CI runs it after the
# tests, reusing their build (dev profile); `--release` builds the wheel a
# user gets from `pip install .`.
#
#   scripts/wheel-check.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
profile=dev
[[ ${1:-} == --release ]] && profile=release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/build"
"$work/build/bin/pip" install --quiet --disable-pip-version-check 'maturin>=1.9,<2'
"$work/build/bin/maturin" build --profile "$profile" --out "$work/wheels"

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$work"/wheels/quantforge-*.whl
installed=$work/venv/bin/quantforge
"$installed" --version

# The quickstart in a project of its own, once through the wheel and once
# through cargo's build.
quickstart() {
    mkdir -p "$1/recipes" "$1/tests/data"
    cp recipes/quickstart.toml "$1/recipes/"
    cp tests/data/tiny-llama.gguf "$1/tests/data/"
    touch "$1/quantforge.toml"
    (cd "$1" && "$2" run recipes/quickstart.toml)
}
quickstart "$work/wheel" "$installed"
quickstart "$work/cargo" "$(realpath "target/$([[ $profile == dev ]] && echo debug || echo release)/quantforge")"
again=$(cd "$work/wheel" && "$installed" run recipes/quickstart.toml --json)
python3 - "$again" <<'PY'
import json, sys
totals = json.loads(sys.argv[1])["totals"]
assert totals["hit"] == totals["nodes"], f"the second run through the wheel was not all hits: {totals}"
PY
for file in "$work"/cargo/recipes/out/*; do
    cmp "$file" "$work/wheel/recipes/out/$(basename "$file")"
done
echo "wheel: $(basename "$work"/wheels/quantforge-*.whl) installs, and its quickstart matches cargo's build"
