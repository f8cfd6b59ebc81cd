#!/usr/bin/env python3
"""Writes the chat-template cases of tests/data/convert/chat-templates/cases.json as
checkpoints: each a copy of its fixture with `tokenizer_config.json` keys set or removed
and template files deleted or written (as bytes: the \\r in them stays).

Usage: chat_template_cases.py CHECKPOINTS OUTDIR   (OUTDIR/<case>/ for every case)

make_references.sh converts them with the converter; tests/it/convert.rs builds the same
directories from the same file.
"""
import json
import shutil
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "data" / "convert" / "chat-templates" / "cases.json"


def main() -> None:
    checkpoints, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    for name, case in json.loads(CASES.read_text(encoding="utf-8")).items():
        target = outdir / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(checkpoints / case["checkpoint"], target)
        config_path = target / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config.update(case["set"])
        for key in case["remove"]:
            config.pop(key, None)
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        for file in case["delete"]:
            (target / file).unlink()
        for file, text in case["files"].items():
            (target / file).parent.mkdir(parents=True, exist_ok=True)
            (target / file).write_bytes(text.encode("utf-8"))
        print(target)


if __name__ == "__main__":
    main()
