"""Regenerates the mixture goldens: llama-quantize's per-tensor type choices.

usage: python3 tests/mixture/dry_run.py [--llama-quantize PATH] [--fixtures DIR]

To regenerate (after changing the fixtures, the runs below, or the reference):

    scripts/fetch-references.sh --build     # llama.cpp as vendored by llama-cpp-python
    python3 tests/mixture/dry_run.py        # rewrites tests/data/mixture/*.json
    cargo test --test it mixture::

It writes the fixtures of `make_fixtures.py` into a temporary directory (or
DIR, kept), runs `llama-quantize --dry-run` on every fixture for every preset
in PRESETS and every option set in OPTION_RUNS, parses the per-tensor
decisions from its log and writes one JSON file per fixture into
tests/data/mixture/. llama-quantize is looked up at
$QUANTFORGE_REFS/llama.cpp/build/bin (default ~/.cache/quantforge/refs).

A golden holds everything `tests/it/mixture.rs` needs without Python:

    fixture     the fixture's name
    metadata    [key, type, value] for every key except the tokenizer's, type
                as `ValueType::name` spells it; arrays as [key, "arr",
                element type, values]
    tensors     [name, dims in ggml order, source type], in file order; the
                tensor data lies in the same order (checked here)
    legend      one character per ggml type used below
    runs        one per llama-quantize invocation:
      options       the options, as keys of `MixtureOptions` (absent = default;
                    tensor_types as llama-quantize's NAME=TYPE strings); see
                    `args_for` for the llama-quantize arguments they become
      types         one character per tensor (file order): the type written,
                    "." where the tensor keeps its source type
      fallback_from present when a tensor fell back: per tensor, the type chosen
                    before the fallback, "." where none happened
      n_fallback    llama-quantize's "N of M tensor(s) required fallback" count
      needs_imatrix llama-quantize warned that the real run needs an imatrix
      error         instead of the above, when llama-quantize refused
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "data" / "mixture"
REFS = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))

# Every file type llama-quantize accepts by name, except the aliases (Q3_K,
# Q4_K, Q5_K) and COPY.
PRESETS = [
    "Q1_0", "Q2_0", "Q4_0", "Q4_1", "MXFP4_MOE", "Q5_0", "Q5_1",
    "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0",
    "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ3_XS", "Q3_K_S", "Q3_K_M", "Q3_K_L",
    "IQ4_NL", "IQ4_XS", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0",
    "F16", "BF16", "F32",
]  # fmt: skip

# Option combinations, each run on every fixture after the plain presets.
OPTION_RUNS = [
    {"ftype": "Q4_K_M", "pure": True},
    {"ftype": "Q2_K", "pure": True},
    {"ftype": "IQ4_XS", "pure": True},
    {"ftype": "Q4_K_M", "leave_output_tensor": True},
    {"ftype": "Q3_K_M", "leave_output_tensor": True, "output_tensor_type": "Q8_0"},
    {"ftype": "Q4_K_M", "output_tensor_type": "Q8_0"},
    {"ftype": "F16", "output_tensor_type": "Q6_K"},
    {"ftype": "Q4_K_M", "token_embedding_type": "Q8_0"},
    {"ftype": "Q2_K", "token_embedding_type": "Q6_K", "output_tensor_type": "Q5_K"},
    {"ftype": "Q5_K_S", "token_embedding_type": "Q8_0", "tensor_types": ["per_layer=q4_0"]},
    {"ftype": "BF16", "token_embedding_type": "Q8_0"},
    {"ftype": "Q4_K_M", "tensor_types": ["attn_v=q8_0", "ffn_down=q5_k"]},
    {"ftype": "Q3_K_S", "tensor_types": ["ATTN_Q=Q6_K", r"blk\.[0-9]\.=iq4_xs", r"(token_embd|output)\.weight=q4_0"]},
    {"ftype": "F16", "tensor_types": ["attn_v=q8_0"]},
    {"ftype": "Q4_0", "pure": True, "tensor_types": ["ffn_up=q8_0"]},
    {"ftype": "Q4_0", "has_imatrix": True},
    {"ftype": "Q5_0", "has_imatrix": True},
    {"ftype": "IQ4_NL", "has_imatrix": True},
    {"ftype": "IQ4_XS", "has_imatrix": True},
    {"ftype": "IQ3_XXS", "has_imatrix": True},
    {"ftype": "Q2_K_S", "has_imatrix": True},
    {"ftype": "Q3_K_M", "keep_split": True},
    {"ftype": "Q4_K_M", "keep_split": True},
]

# ggml type ids by name; Q2_0 is newer than gguf-py 0.19.
GGML_TYPE_IDS = {t.name: int(t) for t in GGMLQuantizationType} | {"Q2_0": 42}
# One character per ggml type, indexed by its id so that regenerating never
# reshuffles the codes.
CODES = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
TYPE_CODE = {name: CODES[i] for name, i in GGML_TYPE_IDS.items()}

VALUE_TYPE_NAME = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "str",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64", GGUFValueType.FLOAT64: "f64",
}  # fmt: skip

TENSOR_LINE = re.compile(
    r"^\[\s*(\d+)/\s*(\d+)\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\S+), size =\s*[\d.]+ MiB"
    r"(?: ->\s*[\d.]+ MiB \((\S+)\))?$"
)
FALLBACK_LINE = re.compile(
    r"^warning: (\S+)\s+- ncols\s+\d+ not divisible by\s+\d+ \(required for type\s+(\S+)\) "
    r"(?:\(WARNING: must use F16 due to unusual shape\) )?-> falling back to\s+(\S+)$"
)
FALLBACK_SUMMARY = re.compile(r"WARNING: (\d+) of (\d+) tensor\(s\) required fallback quantization")
NEEDS_IMATRIX = "actually completing this quantization will require an imatrix"
FAILED = re.compile(r"failed to quantize: (.*)$")


def type_name(ggml_name: str) -> str:
    """llama.cpp prints ggml's names (q4_K, iq2_xxs); the goldens use gguf-py's."""
    name = ggml_name.upper()
    assert name in TYPE_CODE, ggml_name
    return name


def describe(path: Path) -> tuple[list, list]:
    reader = GGUFReader(path)
    metadata = []
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = f.types[1]
            assert sub in VALUE_TYPE_NAME and sub != GGUFValueType.STRING, (key, sub)
            metadata.append([key, "arr", VALUE_TYPE_NAME[sub], list(f.contents())])
        else:
            metadata.append([key, VALUE_TYPE_NAME[vtype], f.contents()])
    tensors = []
    last_offset = -1
    for t in reader.tensors:
        # The Rust test orders --keep-split by position in this list.
        assert t.data_offset > last_offset, f"{path}: tensor data out of order at {t.name}"
        last_offset = t.data_offset
        tensors.append([t.name, [int(d) for d in t.shape], t.tensor_type.name])
    return metadata, tensors


def write_imatrix(path: Path) -> None:
    """A legacy-format importance matrix with one entry: llama-quantize only
    asks whether one was given (and, in a real run, for each tensor's row)."""
    name = b"blk.0.ffn_down.weight"
    values = [1.0] * 256
    with open(path, "wb") as fp:
        fp.write(struct.pack("<i", 1))
        fp.write(struct.pack("<i", len(name)) + name)
        fp.write(struct.pack("<ii", 1, len(values)))
        fp.write(struct.pack(f"<{len(values)}f", *values))


def args_for(options: dict, imatrix: Path) -> list[str]:
    args = ["--dry-run"]
    if options.get("pure"):
        args.append("--pure")
    if options.get("leave_output_tensor"):
        args.append("--leave-output-tensor")
    if "output_tensor_type" in options:
        args += ["--output-tensor-type", options["output_tensor_type"]]
    if "token_embedding_type" in options:
        args += ["--token-embedding-type", options["token_embedding_type"]]
    for spec in options.get("tensor_types", []):
        args += ["--tensor-type", spec]
    if options.get("has_imatrix"):
        args += ["--imatrix", str(imatrix)]
    if options.get("keep_split"):
        args.append("--keep-split")
    return args


def run(quantize: Path, model: Path, options: dict, imatrix: Path, tensors: list) -> dict:
    args = args_for(options, imatrix)
    proc = subprocess.run(
        [str(quantize), *args, str(model), options["ftype"]],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = (proc.stderr + proc.stdout).splitlines()
    shown = " ".join(args + [options["ftype"]])
    result: dict = {"options": options}
    if proc.returncode != 0:
        errors = [m.group(1) for line in log if (m := FAILED.search(line))]
        assert errors, f"{model.name} {shown}: llama-quantize failed without a reason:\n" + "\n".join(log[-20:])
        result["error"] = errors[0]
        return result

    index = {name: i for i, (name, _, _) in enumerate(tensors)}
    types = ["."] * len(tensors)
    fallback_from = ["."] * len(tensors)
    seen = set()
    n_fallback = 0
    needs_imatrix = False
    for line in log:
        if m := TENSOR_LINE.match(line):
            _, total, name, cur, new = m.groups()
            assert int(total) == len(tensors) and name not in seen, line
            seen.add(name)
            assert type_name(cur) == tensors[index[name]][2], line
            if new is not None:
                assert type_name(new) != type_name(cur), line
                types[index[name]] = TYPE_CODE[type_name(new)]
        elif m := FALLBACK_LINE.match(line):
            name, target, _ = m.groups()
            assert fallback_from[index[name]] == ".", line
            fallback_from[index[name]] = TYPE_CODE[type_name(target)]
        elif m := FALLBACK_SUMMARY.search(line):
            n_fallback = int(m.group(1))
            assert int(m.group(2)) == len(tensors), line
        elif NEEDS_IMATRIX in line:
            needs_imatrix = True
        elif line.startswith("warning:"):
            raise AssertionError(f"unparsed warning: {line}")
    assert seen == set(index), f"{model.name} {shown}: missing tensors {set(index) - seen}"
    assert n_fallback == sum(c != "." for c in fallback_from), f"{model.name} {shown}"

    result["types"] = "".join(types)
    if n_fallback:
        result["fallback_from"] = "".join(fallback_from)
    result["n_fallback"] = n_fallback
    result["needs_imatrix"] = needs_imatrix
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-quantize", type=Path, default=REFS / "llama.cpp" / "build" / "bin" / "llama-quantize")
    parser.add_argument("--fixtures", type=Path, help="write the fixtures here and keep them")
    opts = parser.parse_args()
    if not opts.llama_quantize.exists():
        sys.exit(f"{opts.llama_quantize} is absent; run scripts/fetch-references.sh --build")

    with tempfile.TemporaryDirectory() as tmp:
        fixture_dir = opts.fixtures or Path(tmp)
        fixture_dir.mkdir(parents=True, exist_ok=True)
        imatrix = Path(tmp) / "imatrix.dat"
        write_imatrix(imatrix)
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        runs = [{"ftype": p} for p in PRESETS] + OPTION_RUNS
        for fixture in make_fixtures.fixtures():
            model = fixture_dir / f"{fixture.name}.gguf"
            make_fixtures.write(fixture, model)
            metadata, tensors = describe(model)
            results = [run(opts.llama_quantize, model, options, imatrix, tensors) for options in runs]
            used = {ty for _, _, ty in tensors}
            for r in results:
                for key in ("types", "fallback_from"):
                    used |= {name for name, code in TYPE_CODE.items() if code in r.get(key, "")}
            golden = {
                "fixture": fixture.name,
                "metadata": metadata,
                "tensors": tensors,
                "legend": {TYPE_CODE[name]: name for name in sorted(used, key=lambda n: TYPE_CODE[n])},
                "runs": results,
            }
            out = GOLDEN_DIR / f"{fixture.name}.json"
            out.write_text(dump(golden))
            failed = sum("error" in r for r in results)
            print(f"{out.relative_to(REPO)}: {len(tensors)} tensors, {len(results)} runs ({failed} refused)")


def dump(golden: dict) -> str:
    """One line per tensor and per run: compact, yet diffs stay readable."""
    lines = ["{"]
    lines.append(f'  "fixture": {json.dumps(golden["fixture"])},')
    lines.append('  "metadata": [')
    lines.append(",\n".join(f"    {json.dumps(m)}" for m in golden["metadata"]))
    lines.append("  ],")
    lines.append('  "tensors": [')
    lines.append(",\n".join(f"    {json.dumps(t)}" for t in golden["tensors"]))
    lines.append("  ],")
    lines.append(f'  "legend": {json.dumps(golden["legend"])},')
    lines.append('  "runs": [')
    lines.append(",\n".join(f"    {json.dumps(r)}" for r in golden["runs"]))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
