#!/usr/bin/env python3
"""FP8 checkpoints as DeepSeek-V3 and Qwen3-FP8 publish them, made from two tiny fixtures.

Usage: make_fp8_checkpoints.py [CHECKPOINTS]   (with the convert venv:
~/.cache/quantforge/convert-venv/bin/python; CHECKPOINTS defaults to
tests/data/convert/checkpoints; make_references.sh runs it on its own)

For each fixture under CHECKPOINTS named below, writes NAME-FP8 beside
it: every `*_proj.weight` of a block (attention, MLA, MLP and expert projections; not the
embeddings, norms, router or output) quantized to float8_e4m3fn a block of
`weight_block_size` = [32, 48] elements at a time (the scale is the block's max |w| / 448,
stored f32 as `X.weight_scale_inv`, so that w ~= fp8 * scale_inv), and config.json's
`quantization_config` = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method":
"fp8", "weight_block_size": [32, 48]}. The blocks do not divide the 64-wide rows, so the
converter's cut of the repeated scales is exercised. The shards keep the fixture's layout;
in the Qwen3 one each scale goes into the shard after its weight's, so a weight and its
scale are read from different files. Deterministic: no randomness, same bytes each run.
"""

import json
import math
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CHECKPOINTS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data/convert/checkpoints"
BLOCK = [32, 48]
FIXTURES = {"DeepSeek-V3-Tiny": False, "qwen3": True}  # name: scales in the next shard


def quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = weight.float()
    rows, cols = w.shape[-2], w.shape[-1]
    grid = (math.ceil(rows / BLOCK[0]), math.ceil(cols / BLOCK[1]))
    scale = torch.empty(*w.shape[:-2], *grid, dtype=torch.float32)
    q = torch.empty_like(w, dtype=torch.float8_e4m3fn)
    for i in range(grid[0]):
        for j in range(grid[1]):
            r = slice(i * BLOCK[0], (i + 1) * BLOCK[0])
            c = slice(j * BLOCK[1], (j + 1) * BLOCK[1])
            block = w[..., r, c]
            s = block.abs().amax(dim=(-2, -1)).clamp(min=1e-12) / 448.0
            scale[..., i, j] = s
            q[..., r, c] = (block / s[..., None, None]).to(torch.float8_e4m3fn)
    return q, scale


def main() -> None:
    for fixture, next_shard in FIXTURES.items():
        source = CHECKPOINTS / fixture
        target = CHECKPOINTS / f"{fixture}-FP8"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
        index = json.loads((source / "model.safetensors.index.json").read_text())
        files = sorted(set(index["weight_map"].values()))
        shards = {f: load_file(source / f) for f in files}
        out = {f: {} for f in files}
        for f, tensors in shards.items():
            for name, tensor in tensors.items():
                if ".layers." in name and name.endswith("_proj.weight") and tensor.dim() >= 2:
                    q, scale = quantized(tensor)
                    out[f][name] = q
                    scale_file = files[(files.index(f) + 1) % len(files)] if next_shard else f
                    out[scale_file][name + "_scale_inv"] = scale
                else:
                    out[f][name] = tensor
        weight_map = {}
        for f, tensors in out.items():
            save_file(tensors, target / f, metadata={"format": "pt"})
            weight_map.update({name: f for name in tensors})
        size = sum((target / f).stat().st_size for f in files)
        (target / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))}, indent=2)
            + "\n"
        )
        config = json.loads((source / "config.json").read_text())
        config["quantization_config"] = {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": BLOCK,
        }
        (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        print(f"{target}: {sum(n.endswith('_scale_inv') for n in weight_map)} FP8 weights")


if __name__ == "__main__":
    main()
