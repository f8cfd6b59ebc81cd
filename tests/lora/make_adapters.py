"""Tiny PEFT LoRA adapters over the converter's tiny checkpoints, seeded and
reproducible (issue 40's fixtures), written to OUTDIR/NAME/.

    python make_adapters.py CHECKPOINTS_DIR OUTDIR

Each adapter's B matrices are random (PEFT starts them at zero, which would
make every merge a no-op): `init_lora_weights=False`.
"""
import json
import os
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ADAPTERS = {
    # Attention projections of a LLaMA 3 (Q/K rows permuted by the converter).
    "llama-attn": ("tiny-llama-3-chat", dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])),
    # The MLP of a Qwen2 with a per-module rank and alpha equal to lora_alpha where given.
    "qwen2-mlp": (
        "Qwen2.5-Tiny-Instruct",
        dict(
            r=8,
            lora_alpha=32,
            target_modules=["q_proj", "gate_proj", "up_proj", "down_proj"],
            rank_pattern={"down_proj": 4, "q_proj": 16},
            alpha_pattern={"q_proj": 32},
        ),
    ),
    # Fused projections the converter rewrites: GPT-NeoX's QKV rows regrouped by projection,
    # Falcon's by query group (each adapter's B follows its weight's rows).
    "neox-qkv": ("pythia-tiny-deduped", dict(r=8, lora_alpha=16, target_modules=["query_key_value", "dense"])),
    "falcon-qkv": ("falcon-tiny", dict(r=8, lora_alpha=16, target_modules=["query_key_value"])),
    # Per-expert weights, stacked a block at a time (Mixtral's w1/w2/w3 with an attention
    # projection between the blocks' stacks; Qwen3-MoE's gate/up/down).
    "mixtral-experts": ("Mixtral-Tiny-4x8", dict(r=8, lora_alpha=16, target_modules=["w1", "w2", "w3", "q_proj"])),
    "qwen3moe-experts": ("Qwen3-MoE-Tiny", dict(r=8, lora_alpha=16, target_modules=["gate_proj", "up_proj", "down_proj"])),
    # The token embedding (PEFT's lora_embedding_A/B; llama.cpp stores its A transposed).
    "llama-embed": ("tiny-llama-3-chat", dict(r=8, lora_alpha=16, target_modules=["embed_tokens", "q_proj"])),
    # A different alpha for one module: quantforge refuses it (one alpha a file).
    "qwen2-alpha": (
        "Qwen2.5-Tiny-Instruct",
        dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], alpha_pattern={"v_proj": 8}),
    ),
}


def main(checkpoints: Path, outdir: Path) -> None:
    outdir = outdir.resolve()
    # Loaded by relative name: the model cards PEFT writes name the base so, not by a path here.
    os.chdir(checkpoints)
    for name, (base, config) in ADAPTERS.items():
        torch.manual_seed(42)
        model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
        peft = get_peft_model(model, LoraConfig(init_lora_weights=False, **config))
        peft.save_pretrained(outdir / name)
        # PEFT writes target_modules from a set, in an order that changes from run to run.
        config_path = outdir / name / "adapter_config.json"
        config = json.loads(config_path.read_text())
        config["target_modules"] = sorted(config["target_modules"])
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
        print(f"wrote {outdir / name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
