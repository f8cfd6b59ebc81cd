#!/usr/bin/env bash
# Creates the Python environment that runs llama.cpp's convert_hf_to_gguf.py and
# the tiny-checkpoint generator (tests/convert/make_checkpoints.py), outside the
# repository (nothing here is ever committed):
#
#   $QUANTFORGE_CONVERT_VENV   default ~/.cache/quantforge/convert-venv
#
# What goes in:
#   torch==2.11.0, installed --no-deps: PyPI's only Linux wheels are CUDA builds,
#     and `import torch` needs the NVIDIA runtime libraries they link against even
#     on a CPU. So torch's own runtime requirements are then installed from its
#     metadata, at its exact pins: the pure-Python ones (sympy, networkx, jinja2,
#     fsspec, filelock, ...), cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,
#     cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2 (which brings the nvidia-*
#     runtime wheels listed in shared/REFERENCES.md plus nvrtc, nvtx, cusolver),
#     cuda-bindings, nvidia-cudnn-cu13, nvidia-cusparselt-cu13, nvidia-nccl-cu13 and
#     nvidia-nvshmem-cu13. About 4.2 GB in all. triton is left out (only
#     torch.compile on a GPU needs it).
#   transformers==4.57.6, protobuf<5, sentencepiece==0.2.0 (0.2.1+ breaks under
#     protobuf 4), tokenizers, safetensors, numpy~=2.2.6 (llama.cpp's pins).
#   gguf-py: the copy vendored in llama.cpp (fetched by scripts/fetch-references.sh),
#     put on the path with a .pth file, so the gguf that convert_hf_to_gguf.py
#     imports and the one tests/convert/summarize.py reads with are the same code.
#
# Safe to rerun: when the stamp matches and the imports work it returns at once.
# Usage: scripts/setup-convert-env.sh            (prints the venv's python path last)
set -euo pipefail

venv=${QUANTFORGE_CONVERT_VENV:-$HOME/.cache/quantforge/convert-venv}
refs=${QUANTFORGE_REFS:-$HOME/.cache/quantforge/refs}
llama=$refs/llama.cpp
python=${PYTHON:-python3}
torch_version=2.11.0

# Bump when the list below changes: a stale venv is then completed, not reused.
spec="v1 torch==$torch_version transformers==4.57.6 protobuf<5 sentencepiece==0.2.0 numpy~=2.2.6"
stamp=$venv/.quantforge-convert-env

if [ ! -f "$llama/convert_hf_to_gguf.py" ]; then
    echo "llama.cpp not found at $llama; run scripts/fetch-references.sh first" >&2
    exit 1
fi

check() {
    "$venv/bin/python" - <<'EOF' >/dev/null 2>&1
import torch, transformers, sentencepiece, tokenizers, safetensors, numpy, google.protobuf, gguf
assert torch.__version__.startswith("2.11.0"), torch.__version__
assert transformers.__version__ == "4.57.6", transformers.__version__
assert sentencepiece.__version__ == "0.2.0", sentencepiece.__version__
assert int(google.protobuf.__version__.split(".")[0]) < 5, google.protobuf.__version__
torch.zeros(2, dtype=torch.bfloat16) + 1
EOF
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] && check; then
    echo "have $venv"
    echo "$venv/bin/python"
    exit 0
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
# No pip cache: the wheels are big and are not wanted twice on disk.
export PIP_NO_CACHE_DIR=1

# 1. torch itself, without its dependency resolution.
if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('torch').startswith('$torch_version')" 2>/dev/null; then
    "${pip[@]}" install --no-deps "torch==$torch_version"
fi

# 2. Its runtime dependencies, read from its own metadata (exact pins), minus triton.
torch_deps=()
while IFS= read -r line; do
    [ -n "$line" ] && torch_deps+=("$line")
done < <("$venv/bin/python" - <<'EOF'
import importlib.metadata as m, re
for req in m.requires("torch") or []:
    spec, _, marker = req.partition(";")
    if "extra ==" in marker:
        continue
    name = re.split(r"[\s<>=!~\[(]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")
    if name == "triton":
        continue
    # The remaining markers on torch's Linux x86_64 wheel (platform_system, platform_machine)
    # all hold on the machines this runs on.
    print(spec.strip().replace(" ", ""))
EOF
)
echo "torch dependencies: ${torch_deps[*]}"
"${pip[@]}" install "${torch_deps[@]}"

# 3. The converter's and the generator's own requirements.
"${pip[@]}" install \
    "transformers==4.57.6" "protobuf>=4.21.0,<5" "sentencepiece==0.2.0" \
    tokenizers safetensors "numpy~=2.2.6" tqdm pyyaml requests

# 4. The vendored gguf-py, on the path (no build step, always the vendored code).
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$llama/gguf-py" > "$site/quantforge-gguf-py.pth"
"${pip[@]}" uninstall -y gguf >/dev/null 2>&1 || true

if ! check; then
    echo "the environment at $venv does not import as expected:" >&2
    "$venv/bin/python" -c "import torch, transformers, sentencepiece, gguf" >&2 || true
    exit 1
fi
echo "$spec" > "$stamp"
echo "ready: $venv"
echo "$venv/bin/python"
