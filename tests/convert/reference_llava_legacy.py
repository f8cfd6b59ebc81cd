#!/usr/bin/env python3
"""Runs llama.cpp's legacy LLaVA converter, unchanged, on a LLaVA-1.5 checkpoint (a
`LlavaForConditionalGeneration` with a CLIP vision tower), as llama.cpp's
docs/multimodal/llava.md says for llava-1.6 and llava-1.5 in SafeTensors:

  1. tools/mtmd/legacy-models/llava_surgery_v2.py -C -m MODEL: the tower's tensors into
     MODEL/llava.clip, the projector's into MODEL/llava.projector;
  2. llava.clip as pytorch_model.bin in a directory of its own, with "a fitting vit
     configuration": the checkpoint's vision_config as CLIPVisionConfig writes it whole;
  3. tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py -m VIT --llava-projector
     VIT/llava.projector --clip-model-is-vision, with the image processor's mean and std
     (--image-mean / --image-std) and --use-f32 for f32.

Usage: reference_llava_legacy.py MODEL_DIR --outtype f16|f32 --outfile PATH

The checkpoint is copied first (the surgery writes into the model directory); the vit
directory has the checkpoint's name, which the script writes as general.name.
The llama.cpp tree is $QUANTFORGE_REFS/llama.cpp (default ~/.cache/quantforge/refs); its
gguf-py is the one the scripts import, as convert_hf_to_gguf.py imports it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--outtype", choices=["f16", "f32"], required=True)
    ap.add_argument("--outfile", type=Path, required=True)
    args = ap.parse_args()

    refs = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))
    legacy = refs / "llama.cpp" / "tools" / "mtmd" / "legacy-models"
    if not legacy.is_dir():
        sys.exit(f"{legacy} not found; run scripts/fetch-references.sh")
    env = {**os.environ, "PYTHONPATH": str(refs / "llama.cpp" / "gguf-py")}

    from transformers import CLIPVisionConfig

    name = args.model.resolve().name
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model" / name
        shutil.copytree(args.model, model)
        run = lambda *cmd: subprocess.run([sys.executable, *map(str, cmd)], check=True, env=env, cwd=tmp)
        run(legacy / "llava_surgery_v2.py", "-C", "-m", model)
        vit = Path(tmp) / "vit" / name
        vit.mkdir(parents=True)
        shutil.copy(model / "llava.clip", vit / "pytorch_model.bin")
        shutil.copy(model / "llava.projector", vit / "llava.projector")
        config = json.loads((model / "config.json").read_text(encoding="utf-8"))
        CLIPVisionConfig(**config["vision_config"]).to_json_file(vit / "config.json", use_diff=False)
        processor = json.loads((model / "preprocessor_config.json").read_text(encoding="utf-8"))
        out = Path(tmp) / "out"
        run(legacy / "convert_image_encoder_to_gguf.py", "-m", vit, "--llava-projector", vit / "llava.projector",
            "--clip-model-is-vision", "--output-dir", out,
            "--image-mean", *processor["image_mean"], "--image-std", *processor["image_std"],
            *(["--use-f32"] if args.outtype == "f32" else []))
        shutil.move(out / f"mmproj-model-{args.outtype}.gguf", args.outfile)


if __name__ == "__main__":
    main()
