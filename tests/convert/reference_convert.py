#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py unchanged, with one patch for BPE tokenizers
trained here.

Usage: reference_convert.py [--pre NAME] MODEL_DIR --outtype TYPE --outfile PATH [other convert args]

Why a patch: for a GPT-2-style (byte-level BPE) tokenizer, convert_hf_to_gguf.py
(conversion/base.py, TextModel.get_vocab_base_pre) encodes a fixed check string
with the checkpoint's tokenizer, hashes the token ids (sha256 of str(list)), and
looks the hash up in a table of known released tokenizers to pick the value of
`tokenizer.ggml.pre`.  A vocabulary trained here has the right pre-tokenizer
(Qwen2's split regex + byte-level) but different merges, so its hash is in no
table and the converter raises NotImplementedError("BPE pre-tokenizer was not
recognized").

What is patched, and nothing else:
  conversion.base.TextModel.get_vocab_base_pre -- wrapped.  The original runs
  first; if it recognizes the hash, its answer is kept.  Only when it raises
  NotImplementedError does the wrapper return a fixed name: the --pre argument
  if given, else the name the real family uses, chosen from config.json's
  architectures[0] (Qwen2ForCausalLM / Qwen3ForCausalLM -> "qwen2", which is what
  the converter returns for Qwen1.5/Qwen2/Qwen2.5/Qwen3 releases).  The hash is
  logged.  No other function, file or key is touched: every byte of the output
  except that one string is what the unpatched converter writes.

SentencePiece checkpoints (llama, mistral, gemma3, phi3) never reach this
function; for them the wrapper is a plain pass-through.

The llama.cpp tree is $QUANTFORGE_REFS/llama.cpp (default ~/.cache/quantforge/refs).
"""
from __future__ import annotations

import json
import logging
import os
import runpy
import sys
from pathlib import Path

# The tokenizer.ggml.pre value the real family's released tokenizers get.
PRE_BY_ARCH = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama-bpe",      # Llama 3 style BPE (not used by the fixtures)
    "MistralForCausalLM": "tekken",       # Mistral Nemo style BPE (not used by the fixtures)
    "Qwen2MoeForCausalLM": "qwen2",
    "Qwen3MoeForCausalLM": "qwen2",
    "OlmoeForCausalLM": "olmo",           # OLMoE-1B-7B's GPT-NeoX-style vocabulary
    "Olmo2ForCausalLM": "dbrx",           # OLMo 2's cl100k-style vocabulary
    "Starcoder2ForCausalLM": "starcoder",
    "GraniteForCausalLM": "refact",       # Granite 3's StarCoder-style vocabulary
    "SmolLM3ForCausalLM": "llama-bpe",    # SmolLM3's Llama 3 vocabulary
    "GPTNeoXForCausalLM": "gpt-2",
    "GraniteMoeForCausalLM": "refact",
    "OlmoForCausalLM": "olmo",
    "CohereForCausalLM": "command-r",
    "Cohere2ForCausalLM": "command-r",
    "PhiForCausalLM": "phi-2",
    "StableLmForCausalLM": "stablelm2",
    "FalconForCausalLM": "falcon",
    "GPT2LMHeadModel": "gpt-2",
    "DeepseekV2ForCausalLM": "deepseek-llm",
    "DeepseekV3ForCausalLM": "deepseek-v3",
    "BertModel": "bert-bge",               # BAAI/bge-small-en-v1.5's WordPiece vocabulary
    "RobertaModel": "roberta-bpe",
    "DistilBertModel": "bert-bge",
    "Glm4ForCausalLM": "glm4",
    "Lfm2ForCausalLM": "lfm2",
    "Exaone4ForCausalLM": "exaone4",
    "NomicBertModel": "bert-bge",
    "ModernBertModel": "modern-bert",
    "Olmo3ForCausalLM": "dbrx",
    "ArceeForCausalLM": "afmoe",
    "SeedOssForCausalLM": "seed-coder",
    "GptOssForCausalLM": "gpt-4o",        # o200k_harmony, GPT-4o's pre-tokenizer
    "LlavaForConditionalGeneration": "pixtral",
    "Mistral3ForConditionalGeneration": "tekken",   # Mistral Small 3.1's
    "Qwen2VLForConditionalGeneration": "qwen2",
    "Qwen2_5_VLForConditionalGeneration": "qwen2",   # Pixtral 12B's tekken vocabulary
}


def main() -> None:
    argv = sys.argv[1:]
    pre_override = None
    if len(argv) >= 2 and argv[0] == "--pre":
        pre_override = argv[1]
        argv = argv[2:]

    refs = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))
    llama = refs / "llama.cpp"
    script = llama / "convert_hf_to_gguf.py"
    if not script.is_file():
        sys.exit(f"{script} not found; run scripts/fetch-references.sh")

    # What `python convert_hf_to_gguf.py` would have on sys.path: its own directory first
    # (for the `conversion` package); it inserts gguf-py itself.
    sys.path.insert(0, str(llama))
    import conversion.base as base  # noqa: E402

    model_dir = next((Path(a) for a in argv if not a.startswith("-") and Path(a).is_dir()), None)
    arch = None
    if model_dir is not None and (model_dir / "config.json").is_file():
        arches = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("architectures") or [None]
        arch = arches[0]

    original = base.TextModel.get_vocab_base_pre
    log = logging.getLogger("reference_convert")

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            from hashlib import sha256
            name = pre_override or PRE_BY_ARCH.get(arch or "")
            if name is None:
                raise
            # Recompute the hash the converter printed, for the log only.
            import inspect
            src = inspect.getsource(original)
            start = src.index("chktxt = ") + len("chktxt = ")
            text = eval(src[start:src.index("\n", start)])  # the literal assigned to chktxt
            chkhsh = sha256(str(tokenizer.encode(text)).encode()).hexdigest()
            log.warning("reference_convert: unknown BPE pre-tokenizer hash %s; using tokenizer.ggml.pre = %r "
                        "(architecture %s)", chkhsh, name, arch)
            return name

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre

    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
