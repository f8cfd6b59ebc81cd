#!/usr/bin/env bash
# Fetches the reference implementations the differential tests compare
# against, outside the repository (nothing fetched is ever committed):
#
#   $QUANTFORGE_REFS/llama.cpp             llama.cpp source, from the llama-cpp-python
#                                          0.3.36 sdist (convert scripts, gguf-py, ggml)
#   $QUANTFORGE_REFS/llama.cpp/build/bin   llama-quantize, llama-gguf-split, llama-export-lora,
#                                          llama-imatrix, llama-perplexity
#                                          and libggml-base (with --build; ~6 min on 2 cores)
#
# QUANTFORGE_REFS defaults to ~/.cache/quantforge/refs. Safe to rerun: what is
# there is kept. Tests find the references through the same variable and skip
# (outside CI) when they are absent.
set -euo pipefail
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
version=0.3.36
python=${PYTHON:-python3}
build=false
[ "${1:-}" = "--build" ] && build=true

mkdir -p "$refs"
src=$refs/llama.cpp
if [ ! -f "$src/.complete-$version" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # Only llama-cpp-python itself must come as source; its build tools may be wheels.
    "$python" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$version" -d "$work"
    tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
    rm -rf "$src"
    mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$src"
    touch "$src/.complete-$version"
    echo "fetched llama.cpp (llama-cpp-python $version) into $src"
else
    echo "have $src"
fi

if $build; then
    bin=$src/build/bin
    targets=(llama-quantize llama-gguf-split llama-export-lora llama-imatrix llama-perplexity)
    missing=()
    for target in "${targets[@]}"; do
        [ -x "$bin/$target" ] || missing+=("$target")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "have ${targets[*]} in $bin"
    else
        command -v cmake >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake; }
        # The reference semantics: ggml's C evaluated as written, no fused
        # multiply-add contraction (llama.cpp issue #25353), no -march=native.
        cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
            -DCMAKE_C_FLAGS=-ffp-contract=off -DCMAKE_CXX_FLAGS=-ffp-contract=off >/dev/null
        # One retry: a parallel make has been seen to fail once and then succeed.
        for target in "${missing[@]}"; do
            cmake --build "$src/build" --target "$target" -j "$(nproc)" >/dev/null ||
                cmake --build "$src/build" --target "$target" -j 1 >/dev/null
        done
        echo "built ${missing[*]} in $bin"
    fi
fi
