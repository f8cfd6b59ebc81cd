#!/usr/bin/env python3
"""Re-saves six tiny checkpoints as `pytorch_model.bin` with transformers.

Usage: make_bin_checkpoints.py   (run from the repository root with the
convert venv: ~/.cache/quantforge/convert-venv/bin/python)

For each checkpoint under tests/data/convert/checkpoints named below, loads
the model with transformers and saves it with
`save_pretrained(safe_serialization=False)` (the sharded ones sharded again,
with `pytorch_model.bin.index.json`), keeping only the weight files under
tests/data/convert/bin/NAME: tests/it/convert.rs puts them beside the
checkpoint's other files. Then converts each `.bin` checkpoint with
llama.cpp's convert_hf_to_gguf.py (tests/convert/reference_convert.py) to
every outtype and records the sha256 of each output in
tests/data/convert/bin/expected.json: quantforge's conversion must write
those bytes. (They differ from the conversions of the SafeTensors
checkpoints in tensor order only: the converter takes a `.bin` shard's
tensors in its state dict's order, a SafeTensors shard's sorted by name.)
"""

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

# name -> max_shard_size (None: one file)
CHECKPOINTS = {
    "tiny-llama-3-chat": None,
    "Mistral-Tiny-180K-v0.3": "60KB",
    "Qwen2.5-Tiny-Instruct": None,
    "qwen3": "60KB",
    "gemma-3-tiny-it": None,
    "Phi-3-mini-4k-instruct": None,
}

ROOT = Path("tests/data/convert")


def is_weights(path: Path) -> bool:
    return path.name.startswith(("model", "pytorch_model")) and (
        path.suffix in (".safetensors", ".bin") or path.name.endswith(".index.json")
    )


OUTTYPES = ["f32", "f16", "bf16", "q8_0"]


def convert(model_dir: Path, outtype: str, out: Path) -> bytes:
    script = Path(__file__).with_name("reference_convert.py")
    subprocess.run([sys.executable, str(script), str(model_dir), "--outtype", outtype, "--outfile", str(out)],
                   check=True, capture_output=True)
    return out.read_bytes()


def main() -> None:
    expected = {}
    for name, shard in CHECKPOINTS.items():
        source = ROOT / "checkpoints" / name
        model = AutoModelForCausalLM.from_pretrained(source, torch_dtype="auto")
        target = ROOT / "bin" / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with tempfile.TemporaryDirectory() as tmp:
            saved = Path(tmp) / "saved"
            kwargs = {"safe_serialization": False}
            if shard:
                kwargs["max_shard_size"] = shard
            model.save_pretrained(saved, **kwargs)
            for f in saved.iterdir():
                if f.name.startswith("pytorch_model"):
                    shutil.copy(f, target / f.name)

            # The same checkpoint with .bin weights, named as the original.
            bin_dir = Path(tmp) / "bin" / name
            bin_dir.mkdir(parents=True)
            for f in source.iterdir():
                if not is_weights(f):
                    shutil.copy(f, bin_dir / f.name)
            for f in target.iterdir():
                shutil.copy(f, bin_dir / f.name)
            expected[name] = {
                outtype: hashlib.sha256(convert(bin_dir, outtype, Path(tmp) / f"{outtype}.gguf")).hexdigest()
                for outtype in OUTTYPES
            }
            print(f"{name}: {sorted(f.name for f in target.iterdir())}")
    (ROOT / "bin" / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
