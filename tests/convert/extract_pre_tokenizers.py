#!/usr/bin/env python3
"""Carries convert_hf_to_gguf.py's pre-tokenizer facts over as data.

Usage: extract_pre_tokenizers.py [LLAMA_CPP_DIR]

`TextModel.get_vocab_base_pre` (conversion/base.py, the block between its
"Start get_vocab_base_pre" and "End get_vocab_base_pre" markers) encodes a fixed
check text and looks the sha256 of the token-id list up in a chain of `if`s.
This writes the two facts quantforge reads (src/convert/pre_tokenizer.rs):

  src/convert/pre_tokenizer/check_text.txt   the check text, its exact bytes
  src/convert/pre_tokenizer/hashes.tsv       hash, name, reference checkpoint

The chain is `if`, not `elif`: where a hash appears twice the later name wins,
so the table keeps one row per hash, the last one's. Rows are in the chain's
order of first appearance. Nothing is edited by hand.

LLAMA_CPP_DIR defaults to $QUANTFORGE_REFS/llama.cpp (~/.cache/quantforge/refs).
"""
from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

ROW = re.compile(r'if chkhsh == "([0-9a-f]{64})":\n\s*# ref: (\S+)\n\s*res = "([^"]+)"\n')


def main() -> None:
    refs = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))
    llama = Path(sys.argv[1]) if len(sys.argv) > 1 else refs / "llama.cpp"
    source = (llama / "conversion" / "base.py").read_text(encoding="utf-8")
    start = source.index("# Marker: Start get_vocab_base_pre")
    block = source[start:source.index("# Marker: End get_vocab_base_pre")]

    literal = re.search(r"^\s*chktxt = (.+)$", block, re.MULTILINE).group(1)
    check_text = ast.literal_eval(literal)

    rows: dict[str, tuple[str, str]] = {}
    for hash_, ref, name in ROW.findall(block):
        rows[hash_] = (name, ref)
    if len(ROW.findall(block)) != block.count("if chkhsh =="):
        sys.exit("a hash row has a shape this script does not read")

    out = Path(__file__).resolve().parents[2] / "src" / "convert" / "pre_tokenizer"
    out.mkdir(exist_ok=True)
    (out / "check_text.txt").write_bytes(check_text.encode("utf-8"))
    lines = [f"{hash_}\t{name}\t{ref}\n" for hash_, (name, ref) in rows.items()]
    (out / "hashes.tsv").write_text("".join(lines), encoding="utf-8")
    print(f"{len(rows)} hashes ({block.count('if chkhsh ==')} rows), check text {len(check_text)} characters")


if __name__ == "__main__":
    main()
