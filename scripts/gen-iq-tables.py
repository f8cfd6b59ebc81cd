#!/usr/bin/env python3
"""Generates src/codecs/iq_tables.rs: the IQ grid tables of the ggml format.

The tables are format data, not code: a block of IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S, IQ1_S or IQ1_M stores indices into them. They are read from
ggml's own definitions (ggml/src/ggml-common.h of the llama.cpp reference
fetched by scripts/fetch-references.sh) and cross-checked against the
independently packed copies in gguf-py (gguf-py/gguf/quants.py of the same
tree); any disagreement is an error and nothing is written.

usage:
    python3 scripts/gen-iq-tables.py           write src/codecs/iq_tables.rs
    python3 scripts/gen-iq-tables.py --check   exit 1 if the file is out of date

QUANTFORGE_REFS selects the references (default ~/.cache/quantforge/refs).
The output depends only on the tables, so reruns are byte-identical.
"""

import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "src/codecs/iq_tables.rs"

# (C name, Rust name, Rust element type, element count, doc line)
TABLES = [
    ("kmask_iq2xs", "KMASK_IQ2XS", "u8", 8, "bit j of a sign byte; set means element j is negated."),
    ("ksigns_iq2xs", "KSIGNS_IQ2XS", "u8", 128,
     "seven stored sign bits to eight; bit 7 makes the count of negatives even."),
    ("iq2xxs_grid", "IQ2XXS_GRID", "u64", 256, "IQ2_XXS points, 8 magnitudes (bytes, little-endian) each."),
    ("iq2xs_grid", "IQ2XS_GRID", "u64", 512, "IQ2_XS points, 8 magnitudes (bytes, little-endian) each."),
    ("iq2s_grid", "IQ2S_GRID", "u64", 1024, "IQ2_S points, 8 magnitudes (bytes, little-endian) each."),
    ("iq3xxs_grid", "IQ3XXS_GRID", "u32", 256, "IQ3_XXS points, 4 magnitudes (bytes, little-endian) each."),
    ("iq3s_grid", "IQ3S_GRID", "u32", 512, "IQ3_S points, 4 magnitudes (bytes, little-endian) each."),
    ("iq1s_grid", "IQ1S_GRID", "u64", 2048,
     "IQ1_S and IQ1_M points, 8 values in {-1, 0, 1} (i8 bytes, little-endian) each."),
]

# gguf-py class holding each grid (packed 2 or 3 bits per value, mapped
# through grid_map) — the cross-check.
GGUF_PY_GRIDS = {
    "iq2xxs_grid": "IQ2_XXS", "iq2xs_grid": "IQ2_XS", "iq2s_grid": "IQ2_S",
    "iq3xxs_grid": "IQ3_XXS", "iq3s_grid": "IQ3_S", "iq1s_grid": "IQ1_S",
}

PER_LINE = {"u8": 16, "u32": 8, "u64": 4}
DIGITS = {"u8": 2, "u32": 8, "u64": 16}
C_TYPES = {"u8": "uint8_t", "u32": "uint32_t", "u64": "uint64_t"}


def refs() -> Path:
    return Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache/quantforge/refs")) / "llama.cpp"


def read_c_tables(header: str) -> dict[str, list[int]]:
    tables = {}
    pattern = re.compile(r"^GGML_TABLE_BEGIN\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\w+\s*\)(.*?)GGML_TABLE_END\(\)", re.S | re.M)
    for c_type, name, body in pattern.findall(header):
        if name in tables:
            sys.exit(f"{name} is defined twice in ggml-common.h")
        tables[name] = (c_type, [int(tok, 0) for tok in re.findall(r"0x[0-9a-fA-F]+|\d+", body)])
    out = {}
    for c_name, _, ty, count, _ in TABLES:
        if c_name not in tables:
            sys.exit(f"{c_name} not found in ggml-common.h")
        c_type, values = tables[c_name]
        if c_type != C_TYPES[ty] or len(values) != count:
            sys.exit(f"{c_name}: expected {count} x {C_TYPES[ty]}, found {len(values)} x {c_type}")
        out[c_name] = values
    return out


def read_delta(header: str) -> str:
    m = re.search(r"#define\s+IQ1S_DELTA\s+([0-9.]+)f\b", header)
    if not m:
        sys.exit("IQ1S_DELTA not found in ggml-common.h")
    return m.group(1)


def cross_check(tables: dict[str, list[int]], delta: str) -> None:
    """The same values through gguf-py's independent encoding of them."""
    sys.path.insert(0, str(refs() / "gguf-py"))
    import numpy as np
    from gguf import quants

    for c_name, cls_name in GGUF_PY_GRIDS.items():
        cls = getattr(quants, cls_name)
        cls.init_grid()
        points = np.asarray(cls.grid).reshape(cls.grid_shape).astype(np.int64)
        width = cls.grid_shape[1]
        packed = [sum((int(v) & 0xFF) << (8 * j) for j, v in enumerate(point)) for point in points]
        if packed != tables[c_name]:
            sys.exit(f"{c_name}: ggml-common.h and gguf-py's {cls_name} disagree ({width} values per point)")
    if list(quants.IQ2_XXS.ksigns) != tables["ksigns_iq2xs"]:
        sys.exit("ksigns_iq2xs: ggml-common.h and gguf-py disagree")
    if float(quants.IQ1_S.delta) != float(delta):
        sys.exit("IQ1S_DELTA: ggml-common.h and gguf-py disagree")
    if tables["kmask_iq2xs"] != [1 << j for j in range(8)]:
        sys.exit("kmask_iq2xs is not the bit masks")


def render(tables: dict[str, list[int]], delta: str) -> str:
    lines = [
        "//! The published IQ grid tables of the ggml format, as ggml's",
        "//! `ggml-common.h` defines them (cross-checked against gguf-py): the",
        "//! lattice points and sign patterns that IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,",
        "//! IQ3_S, IQ1_S and IQ1_M blocks index into.",
        "//!",
        "//! Generated by `scripts/gen-iq-tables.py`; do not edit by hand.",
        "",
        "/// The offset added to every IQ1_S and IQ1_M grid value, negated by the",
        "/// block's delta sign bit (ggml's `IQ1S_DELTA`, used by both types' decoders).",
        f"pub(crate) const IQ1S_DELTA: f32 = {delta};",
    ]
    for c_name, rust_name, ty, count, doc in TABLES:
        values = tables[c_name]
        lines += ["", f"/// `{c_name}`: {doc}", "#[rustfmt::skip]"]
        lines.append(f"pub(crate) static {rust_name}: [{ty}; {count}] = [")
        per_line, digits = PER_LINE[ty], DIGITS[ty]
        for start in range(0, count, per_line):
            row = values[start:start + per_line]
            lines.append("    " + " ".join(f"0x{v:0{digits}x}," for v in row))
        lines.append("];")
    return "\n".join(lines) + "\n"


def main() -> None:
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        sys.exit(__doc__)
    header = (refs() / "ggml/src/ggml-common.h").read_text()
    tables = read_c_tables(header)
    delta = read_delta(header)
    cross_check(tables, delta)
    text = render(tables, delta)
    if check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"{OUT.relative_to(REPO)} is out of date; run scripts/gen-iq-tables.py")
        print(f"{OUT.relative_to(REPO)} is up to date")
    else:
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
