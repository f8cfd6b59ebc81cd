#!/usr/bin/env bash
# The CUDA backend on a GPU: every file it writes byte-identical to the
# CPU's, and how fast (docs/CUDA.md, docs/PERFORMANCE.md).
#
#   scripts/gpu-check.sh prepare   here, with Rust: release binaries into target/gpu-check/ (~40 MB)
#   scripts/gpu-check.sh run       on the GPU machine (no Rust, no network): the device tool's
#                                  run(command="scripts/gpu-check.sh run", carry=["target/gpu-check"])
#
# `run` checks the carried binary starts there (a C library mismatch says so
# first), lists the backends, generates the 4096-wide synthetic model and a
# 26-layer one (10.8 GB) with the project's generator, quantizes them to
# Q4_K_M, Q6_K and Q8_0 on `cuda` and on `cpu` (all cores), compares the
# files byte for byte, times both (and the device's four lanes against one,
# and `auto`, which leaves small slabs to the CPU),
# and measures the decode kernels' GB/s against a device-to-device copy by
# PyTorch in the same run. Under 4 minutes
# on 16 cores and one H200. Results go to stdout and to $OUT/gpu-check.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/gpu-check

case "${1:-}" in
prepare)
    cargo build --release --bin quantforge --example make-tiny-model
    mkdir -p "$BIN"
    cp target/release/quantforge target/release/examples/make-tiny-model "$BIN/"
    ls -la "$BIN"
    ;;
run)
    OUT=${OUT:-/tmp/gpu-check-out}
    WORK=${WORK:-/tmp/gpu-check}
    mkdir -p "$OUT" "$WORK"
    exec > >(tee "$OUT/gpu-check.txt") 2>&1
    Q=$BIN/quantforge
    if ! "$Q" --version > "$WORK/version.txt" 2> "$WORK/start.txt"; then
        echo "FAIL: the carried binary does not start on this machine:"
        cat "$WORK/start.txt"
        ldd "$Q" || true
        exit 1
    fi
    head -1 "$WORK/version.txt"
    # NVRTC: the toolkit's, or the one PyTorch's wheels bring.
    QUANTFORGE_CUDA_LIBS=$(python3 -c '
import glob, os, site
dirs = [d for p in site.getsitepackages() for d in glob.glob(os.path.join(p, "nvidia", "*", "lib"))]
dirs += ["/usr/local/cuda/lib64"]
print(":".join(d for d in dirs if glob.glob(os.path.join(d, "libnvrtc.so*"))))' 2>/dev/null || true)
    export QUANTFORGE_CUDA_LIBS
    "$Q" backends
    "$Q" backends --bench

    python3 - <<'PY' || echo "PyTorch copy: unavailable"
import torch
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
b.copy_(a); torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(20):
    b.copy_(a)
end.record(); torch.cuda.synchronize()
seconds = start.elapsed_time(end) / 1000 / 20
print(f"PyTorch device-to-device copy: {2 * n / seconds / 1e9:.1f} GB/s (read + write)")
PY

    BIN_GEN=$BIN/make-tiny-model
    "$BIN_GEN" "$WORK/wide.gguf" --wide
    "$BIN_GEN" "$WORK/big.gguf" --wide --layers 26
    status=0
    quantize() { # MODEL PRESET BACKEND
        local out="$WORK/$1-$2-$3.gguf" start end
        start=$(date +%s.%N)
        if ! "$Q" -q --backend "$3" quantize "$WORK/$1.gguf" "$out" "$2" "$(nproc)" > "$WORK/quantize.log" 2>&1; then
            cat "$WORK/quantize.log" >&2
            return 1
        fi
        end=$(date +%s.%N)
        awk "BEGIN { print $end - $start }"
    }
    for job in wide:Q4_K_M wide:Q6_K wide:Q8_0 big:Q4_K_M; do
        model=${job%%:*} preset=${job##*:}
        cuda=$(quantize "$model" "$preset" cuda)
        cpu=$(quantize "$model" "$preset" cpu)
        if cmp -s "$WORK/$model-$preset-cuda.gguf" "$WORK/$model-$preset-cpu.gguf"; then same=identical; else same=DIFFER; status=1; fi
        printf '%-5s %-7s cuda %7.2f s  cpu %7.2f s  cpu/cuda %5.2f  bytes %s\n' \
            "$model" "$preset" "$cuda" "$cpu" "$(awk "BEGIN { print $cpu / $cuda }")" "$same"
        rm -f "$WORK/$model-$preset-cuda.gguf" "$WORK/$model-$preset-cpu.gguf"
    done
    # `auto`: the device for matrices, the CPU for norms; the same bytes.
    auto=$(quantize wide Q4_K_M auto)
    cpu=$(quantize wide Q4_K_M cpu)
    if cmp -s "$WORK/wide-Q4_K_M-auto.gguf" "$WORK/wide-Q4_K_M-cpu.gguf"; then same=identical; else same=DIFFER; status=1; fi
    printf 'wide  Q4_K_M  auto %7.2f s  cpu %7.2f s  bytes %s\n' "$auto" "$cpu" "$same"
    rm -f "$WORK/wide-Q4_K_M-auto.gguf" "$WORK/wide-Q4_K_M-cpu.gguf"
    # The lanes' overlap: the wide model's Q8_0 (transfer-bound) on one lane
    # against the default four, bytes compared with the four lanes' file.
    four=$(quantize wide Q8_0 cuda) && mv "$WORK/wide-Q8_0-cuda.gguf" "$WORK/four.gguf"
    one=$(QUANTFORGE_CUDA_LANES=1 quantize wide Q8_0 cuda)
    if cmp -s "$WORK/wide-Q8_0-cuda.gguf" "$WORK/four.gguf"; then same=identical; else same=DIFFER; status=1; fi
    printf 'wide  Q8_0    1 lane %7.2f s  4 lanes %7.2f s  bytes %s\n' "$one" "$four" "$same"
    exit $status
    ;;
*)
    echo "usage: scripts/gpu-check.sh prepare|run" >&2
    exit 2
    ;;
esac
