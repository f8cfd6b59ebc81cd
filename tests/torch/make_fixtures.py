#!/usr/bin/env python3
"""Builds the PyTorch checkpoint fixtures of tests/it/torch.rs with torch itself.

Usage: make_fixtures.py OUTDIR   (tests/data/torch; needs torch, e.g. the
convert venv: ~/.cache/quantforge/convert-venv/bin/python)

Writes, with a fixed seed:
  state.pt       torch.save of a state dict holding every dtype quantforge
                 reads, a transposed view, a row view (storage offset), a
                 broadcast (stride 0) view, tied weights (one storage, two
                 names), a Parameter, a scalar, an empty tensor and a 4-D one;
  legacy.pt      the state dict of state.pt (less the dtypes the format
                 predates) in the format before PyTorch 1.6
                 (_use_new_zipfile_serialization=False);
  archive.pt     a state dict saved through a file object (record prefix
                 `archive/`, not the file's stem), with nested dicts and
                 scalar values (read as metadata);
  expected.json  for every tensor of both: its ggml type, ggml dims, and the
                 sha256 of the bytes torch.load(weights_only=True) gives,
                 converted by torch to the type ggml holds it as (uint8 to
                 int16, bool to int8, fp8 to float16, e8m0 to float32...);
                 and the metadata expected of archive.pt;
  evil-*.pt      checkpoints that would run code or exhaust memory if loaded
                 with pickle: each must be refused, and the file its payload
                 would create (/tmp/quantforge-pwned-NAME) must not exist.
"""

import hashlib
import io
import json
import pickle
import struct
import sys
import zipfile
from pathlib import Path

import torch

# dtype -> (the type torch converts it to for comparison, ggml type name)
GGML_OF = {
    torch.float64: (torch.float64, "F64"),
    torch.float32: (torch.float32, "F32"),
    torch.float16: (torch.float16, "F16"),
    torch.bfloat16: (torch.bfloat16, "BF16"),
    torch.int64: (torch.int64, "I64"),
    torch.int32: (torch.int32, "I32"),
    torch.int16: (torch.int16, "I16"),
    torch.int8: (torch.int8, "I8"),
    torch.uint8: (torch.int16, "I16"),
    torch.bool: (torch.int8, "I8"),
    torch.uint16: (torch.int32, "I32"),
    torch.uint32: (torch.int64, "I64"),
    torch.float8_e4m3fn: (torch.float16, "F16"),
    torch.float8_e5m2: (torch.float16, "F16"),
    torch.float8_e4m3fnuz: (torch.float16, "F16"),
    torch.float8_e5m2fnuz: (torch.float16, "F16"),
    torch.float8_e8m0fnu: (torch.float32, "F32"),
}


def tensor_bytes(t: torch.Tensor) -> bytes:
    target, _ = GGML_OF[t.dtype]
    if t.dtype in (torch.uint16, torch.uint32):
        # torch cannot cast these on the CPU; widen through numpy.
        import numpy as np
        wide = np.int32 if t.dtype == torch.uint16 else np.int64
        return t.contiguous().numpy().astype(wide).tobytes()
    t = t.to(target).contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def describe(state: dict) -> list:
    return [
        {
            "name": name,
            "type": GGML_OF[t.dtype][1],
            "dims": list(reversed(t.shape)) or [1],
            "sha256": hashlib.sha256(tensor_bytes(t)).hexdigest(),
        }
        for name, t in state.items()
    ]


def flatten(state: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value
    return out


def state_dict() -> dict:
    g = torch.Generator().manual_seed(20261201)
    base = torch.randn(4, 6, generator=g)
    state = {
        "f64": torch.randn(3, 5, generator=g, dtype=torch.float64),
        "f32": torch.randn(2, 3, 4, generator=g),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(2, 9, generator=g).bfloat16(),
        "i64": torch.randint(-(2**62), 2**62, (5,), generator=g, dtype=torch.int64),
        "i32": torch.randint(-(2**31), 2**31 - 1, (2, 2), generator=g, dtype=torch.int32),
        "i16": torch.randint(-(2**15), 2**15 - 1, (6,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-128, 127, (3, 3), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (10,), generator=g, dtype=torch.uint8),
        "bool": torch.randn(8, generator=g) > 0,
        "u16": torch.randint(0, 2**16 - 1, (4,), generator=g, dtype=torch.int32).to(torch.uint16),
        "u32": torch.randint(0, 2**31 - 1, (4,), generator=g, dtype=torch.int64).to(torch.uint32),
        "f8_e4m3fn": torch.randn(16, generator=g).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.randn(16, generator=g).to(torch.float8_e5m2),
        "f8_e4m3fnuz": torch.randn(16, generator=g).to(torch.float8_e4m3fnuz),
        "f8_e5m2fnuz": torch.randn(16, generator=g).to(torch.float8_e5m2fnuz),
        "f8_e8m0fnu": (torch.rand(8, generator=g) * 1000 + 1e-3).to(torch.float8_e8m0fnu),
        "matrix": base,
        "transposed": base.t(),
        "row": base[2],
        "column": base[:, 1],
        "broadcast": torch.randn(3, 1, generator=g).expand(3, 4),
        "tied.a": None,
        "tied.b": None,
        "parameter": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "four_d": torch.randn(2, 1, 3, 2, generator=g).half(),
        "u8_view": torch.randint(0, 255, (3, 4), generator=g, dtype=torch.uint8).t(),
    }
    shared = torch.randn(5, 2, generator=g)
    state["tied.a"] = shared
    state["tied.b"] = shared
    return state


def zip_with_pickle(path: Path, pickle_bytes: bytes, storages: dict) -> None:
    """A torch.save-shaped archive around a hand-made pickle (no timestamps,
    so the fixture is the same bytes every time it is made)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        stem = path.stem

        def record(name, data):
            z.writestr(zipfile.ZipInfo(f"{stem}/{name}", date_time=(1980, 1, 1, 0, 0, 0)), data)

        record("data.pkl", pickle_bytes)
        record("byteorder", "little")
        for key, data in storages.items():
            record(f"data/{key}", data)
        record("version", "3\n")


class Payload:
    """Unpickling this calls os.system: what torch.load without weights_only does."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        import os
        return (os.system, (self.command,))


class Eval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        import builtins
        return (builtins.eval, (self.code,))


def evil(out: Path) -> list:
    names = []

    def save(name, obj):
        torch.save(obj, out / f"evil-{name}.pt")
        names.append(name)

    save("system", {"w": torch.zeros(2), "x": Payload(f"touch /tmp/quantforge-pwned-system")})
    save("eval", {"x": Eval("open('/tmp/quantforge-pwned-eval', 'w').close()")})

    # GLOBAL + REDUCE written by hand, with STACK_GLOBAL.
    raw = (b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00"
           b"\x8c\x02os\x8c\x06system\x93"
           b"\x8c\x21touch /tmp/quantforge-pwned-stack\x85R.")
    zip_with_pickle(out / "evil-stack.pt", raw, {})
    names.append("stack")

    # A global in torch's own namespace that is not a state dict's: torch.load.
    raw = b"\x80\x02ctorch\nload\n\x8c\x26/tmp/quantforge-pwned-torch-load/x.pt\x85R."
    zip_with_pickle(out / "evil-torch-load.pt", raw, {})
    names.append("torch-load")

    # A memo bomb: dict k holds dict k-1 twice, 15 deep (2^15 paths to the bottom).
    bomb = bytearray(b"\x80\x02}q\x00")
    for level in range(1, 16):
        bomb += b"}" + b"r" + struct.pack("<I", level) + b"("
        bomb += b"X\x01\x00\x00\x00a" + b"j" + struct.pack("<I", level - 1)
        bomb += b"X\x01\x00\x00\x00b" + b"j" + struct.pack("<I", level - 1)
        bomb += b"u0"
    bomb += b"j" + struct.pack("<I", 15) + b"."
    zip_with_pickle(out / "evil-memo-bomb.pt", bytes(bomb), {})
    names.append("memo-bomb")

    # Nesting: 100,000 TUPLE1s, then a list appended into itself.
    zip_with_pickle(out / "evil-deep.pt", b"\x80\x02}(X\x01\x00\x00\x00xN" + b"\x85" * 100_000 + b"u.", {})
    names.append("deep")
    zip_with_pickle(out / "evil-cycle.pt", b"\x80\x02}(X\x01\x00\x00\x00x]q\x00h\x00au.", {})
    names.append("cycle")

    # Huge declared sizes: a 4 GiB string, and a storage claiming 2^40 floats.
    zip_with_pickle(out / "evil-huge-string.pt", b"\x80\x02X\xff\xff\xff\xff.", {})
    names.append("huge-string")
    sd = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, sd)
    with zipfile.ZipFile(sd) as z:
        pkl = z.read("archive/data.pkl")
    pkl = pkl.replace(b"K\x04t", b"\x8a\x06\x00\x00\x00\x00\x00\x01t", 1)
    zip_with_pickle(out / "evil-huge-storage.pt", pkl, {"0": bytes(16)})
    names.append("huge-storage")
    return names


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    state = state_dict()
    torch.save(state, out / "state.pt")

    # The legacy format has no untyped storages: no uint16/uint32/float8.
    legacy = {k: v for k, v in state.items() if v.dtype not in (
        torch.uint16, torch.uint32, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
        torch.float8_e5m2fnuz, torch.float8_e8m0fnu)}
    torch.save(legacy, out / "legacy.pt", _use_new_zipfile_serialization=False)

    nested = {
        "state_dict": {"encoder": {"weight": torch.randn(3, 2, generator=torch.Generator().manual_seed(7))},
                       "bias": torch.arange(3, dtype=torch.int64)},
        "epoch": 3,
        "name": "tiny",
        "lr": 0.5,
        "frozen": True,
    }
    buffer = io.BytesIO()
    torch.save(nested, buffer)
    (out / "archive.pt").write_bytes(buffer.getvalue())

    # Every value as torch reads it back, not as it was made.
    loaded = torch.load(out / "state.pt", weights_only=True)
    loaded_nested = torch.load(out / "archive.pt", weights_only=True)
    expected = {
        "state.pt": {"tensors": describe(loaded), "metadata": {}},
        "legacy.pt": {"tensors": describe(torch.load(out / "legacy.pt", weights_only=True)), "metadata": {}},
        "archive.pt": {
            "tensors": describe(flatten(loaded_nested)),
            "metadata": {f"pytorch.{k}": v for k, v in loaded_nested.items() if not isinstance(v, dict)},
        },
        "evil": evil(out),
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
