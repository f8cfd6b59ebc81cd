#!/usr/bin/env python3
"""Each BPE or WordPiece fixture's pre-tokenizer check hash, as convert_hf_to_gguf.py
computes it.

Usage: pre_hashes.py [OUT.json]   (default tests/data/convert/pre_tokenizers/check_hashes.json)

For every checkpoint under tests/data/convert/checkpoints whose reference
(`<name>-f16.json`) has `tokenizer.ggml.model` "gpt2" or "bert" -- the vocabularies
the converter names through `TextModel.get_vocab_base_pre` -- this loads the
tokenizer with `transformers.AutoTokenizer` as `get_vocab_base` does, encodes the
converter's own check text, and records the sha256 of `str(ids)` and what the
unmodified `get_vocab_base_pre` answers for it (null where it raises: a vocabulary
trained here is in no table, and reference_convert.py named it).

It also records VARIANTS: a fixture's tokenizer with some `tokenizer_config.json`
(and `config.json`) keys set or removed, each one an edit transformers makes to the
`tokenizers` pipeline before encoding (a class that rebuilds the post-processor from
`add_bos_token`/`add_eos_token`, the base class's `add_prefix_space` reset, BERT's
normalizer flags, the class found from `model_type`).

tests/it/convert.rs holds quantforge's hash of each fixture and variant to this file.
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
from hashlib import sha256
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "convert"


# name: (fixture, tokenizer_config keys to set, keys to remove, config.json keys to set)
VARIANTS = {
    "llama-class": ("Qwen2.5-Tiny-Instruct", {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|im_start|>"},
                    ["add_prefix_space"], {}),
    "llama-class-bos-eos": ("Qwen2.5-Tiny-Instruct", {"tokenizer_class": "LlamaTokenizer", "bos_token": "<|im_start|>",
                                                     "add_eos_token": True, "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "lstrip": False,
                                                                   "normalized": False, "rstrip": False, "single_word": False, "special": True}},
                            ["add_prefix_space"], {}),
    "llama-class-no-bos": ("Qwen2.5-Tiny-Instruct", {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|im_start|>",
                                                    "add_bos_token": False},
                           ["add_prefix_space"], {}),
    "cohere-by-model-type": ("Qwen2.5-Tiny-Instruct", {"bos_token": "<|im_start|>"}, ["tokenizer_class"],
                             {"model_type": "cohere"}),
    "plain-by-model-type": ("Qwen2.5-Tiny-Instruct", {}, ["tokenizer_class"], {}),
    "gpt-neox-class-bos": ("pythia-tiny-deduped", {"tokenizer_class": "GPTNeoXTokenizerFast", "add_bos_token": True}, [], {}),
    "gpt-neox-by-model-type": ("pythia-tiny-deduped", {"add_eos_token": True}, ["tokenizer_class"], {}),
    "byte-level-prefix-space": ("gpt2-tiny", {"add_prefix_space": True}, [], {}),
    "gemma-class-prefix-space": ("gpt2-tiny", {"tokenizer_class": "GemmaTokenizerFast", "add_prefix_space": True,
                                               "bos_token": "<|endoftext|>"}, [], {}),
    "code-llama-class": ("gpt2-tiny", {"tokenizer_class": "CodeLlamaTokenizerFast", "bos_token": "<|endoftext|>",
                                       "add_eos_token": True, "eos_token": "<|endoftext|>"}, [], {}),
    "bert-cased": ("bge-tiny-en", {"do_lower_case": False}, [], {}),
    "bert-strip-accents": ("bge-tiny-en", {"strip_accents": True, "tokenize_chinese_chars": False}, [], {}),
}


def variant_dir(root: Path, name: str) -> Path:
    """The fixture's tokenizer files and config in ROOT/NAME, with the variant's edits."""
    fixture, set_keys, remove_keys, config_keys = VARIANTS[name]
    source = DATA / "checkpoints" / fixture
    out = root / name
    out.mkdir()
    for file in ("tokenizer.json", "special_tokens_map.json"):
        if (source / file).is_file():
            (out / file).write_bytes((source / file).read_bytes())
    tokenizer_config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config.update(set_keys)
    for key in remove_keys:
        tokenizer_config.pop(key)
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config.update(config_keys)
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return out


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA / "pre_tokenizers" / "check_hashes.json"
    refs = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))
    sys.path.insert(0, str(refs / "llama.cpp"))
    import conversion.base as base  # noqa: E402
    from transformers import AutoTokenizer  # noqa: E402

    get_pre = base.TextModel.get_vocab_base_pre
    source = inspect.getsource(get_pre)
    start = source.index("chktxt = ") + len("chktxt = ")
    check_text = eval(source[start:source.index("\n", start)])  # the literal the converter encodes

    def check(directory: Path) -> dict:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        chkhsh = sha256(str(tokenizer.encode(check_text)).encode()).hexdigest()
        try:
            name = get_pre(None, tokenizer)
        except NotImplementedError:
            name = None
        return {"class": type(tokenizer).__name__, "hash": chkhsh, "pre": name}

    hashes = {}
    for checkpoint in sorted(p for p in (DATA / "checkpoints").iterdir() if p.is_dir()):
        golden = json.loads((DATA / f"{checkpoint.name}-f16.json").read_text(encoding="utf-8"))
        model = next((m["value"] for m in golden["metadata"] if m["key"] == "tokenizer.ggml.model"), None)
        if model not in ("gpt2", "bert"):
            continue
        hashes[checkpoint.name] = check(checkpoint)
    variants = {}
    with tempfile.TemporaryDirectory() as root:
        for name, (fixture, set_keys, remove_keys, config_keys) in VARIANTS.items():
            variants[name] = {"fixture": fixture, "set": set_keys, "remove": remove_keys, "config": config_keys,
                              **check(variant_dir(Path(root), name))}
    document = {"checkpoints": hashes, "variants": variants}
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(hashes)} checkpoints, {len(variants)} variants -> {out}")


if __name__ == "__main__":
    main()
