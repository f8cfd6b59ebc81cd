#!/usr/bin/env python3
"""Compact, diffable JSON summary of a GGUF file, read with gguf-py's GGUFReader.

Usage: summarize.py FILE.gguf [OUT.json]      (stdout when OUT is omitted)

Everything that decides byte identity is in it, in file order:
  file:      size, sha256 of the whole file, GGUF version, alignment, data offset
  metadata:  every key in file order: type (u8 ... f64, bool, str, arr); scalars in
             full (f32/f64 as the exact value, so 1e-05 as f32 prints as
             9.999999747378752e-06); strings in full when short, else length,
             sha256 and a prefix; arrays as element type, length, sha256 of the
             elements' bytes exactly as serialized in the file (for string arrays:
             each u64 length + UTF-8 bytes), and the first 8 values
  tensors:   every tensor in file order: name, ggml type name, shape in ggml order
             (ne0 first, as written in the file), element count, offset relative
             to the data section, byte size, sha256 of the data bytes

Type names are tests/gguf_py/dump.py's.  Used to make tests/data/convert/*.json.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gguf_py"))
from dump import TYPE_NAMES  # noqa: E402

STRING_INLINE_MAX = 160
ARRAY_HEAD = 8


def sha256(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def scalar(value, vtype: GGUFValueType):
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(value)
    if vtype == GGUFValueType.BOOL:
        return bool(value)
    if vtype == GGUFValueType.STRING:
        return value
    return int(value)


def string_entry(s: str) -> dict:
    raw = s.encode("utf-8")
    if len(raw) <= STRING_INLINE_MAX:
        return {"value": s}
    return {"len": len(raw), "sha256": sha256(raw), "head": raw[:80].decode("utf-8", "replace")}


def field_json(field) -> dict:
    types = field.types
    entry: dict = {"key": field.name, "type": TYPE_NAMES[types[0]]}
    if types[0] == GGUFValueType.ARRAY:
        elem = types[1] if len(types) > 1 else None
        entry["element_type"] = TYPE_NAMES[elem] if elem is not None else None
        # parts: key len, key, value type, element type, count, then the elements' parts
        count = int(field.parts[4][0])
        entry["len"] = count
        entry["sha256"] = sha256(*(bytes(p.tobytes()) for p in field.parts[5:]))
        if elem is not None and elem != GGUFValueType.ARRAY:
            head = [field.contents(i) for i in range(min(count, ARRAY_HEAD))]
            entry["head"] = [scalar(v, elem) for v in head]
    elif types[0] == GGUFValueType.STRING:
        entry.update(string_entry(field.contents()))
    else:
        entry["value"] = scalar(field.contents(), types[0])
    return entry


def summarize(path: Path) -> dict:
    reader = GGUFReader(path)
    data = path.read_bytes()
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    meta = [field_json(f) for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    tensors = []
    for t in reader.tensors:
        start = int(t.data_offset)
        raw = data[start:start + int(t.n_bytes)]
        tensors.append({
            "name": t.name,
            "type": GGMLQuantizationType(int(t.tensor_type)).name,
            "shape": [int(d) for d in t.shape],
            "n_elements": int(t.n_elements),
            "offset": start - int(reader.data_offset),
            "n_bytes": int(t.n_bytes),
            "sha256": sha256(raw),
        })
    return {
        "file": {
            "size": len(data),
            "sha256": sha256(data),
            "version": version,
            "alignment": int(reader.alignment),
            "data_offset": int(reader.data_offset),
            "n_kv": len(meta),
            "n_tensors": len(tensors),
        },
        "metadata": meta,
        "tensors": tensors,
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    summary = summarize(Path(argv[1]))
    text = json.dumps(summary, indent=1, ensure_ascii=False) + "\n"
    if len(argv) == 3:
        Path(argv[2]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv))
