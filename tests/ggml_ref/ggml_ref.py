"""ggml's own quantizers and dequantizers, called through ctypes.

The library is the reference build made by scripts/fetch-references.sh
(libggml-base.so, compiled with -ffp-contract=off and no -march=native).

usage:
    python ggml_ref.py golden OUTDIR   write the golden vectors (tests/data/golden)
    python ggml_ref.py check FILE...   re-derive each golden file's expected bytes
                                       and dequantized values; exit 1 on a mismatch

Golden file layout (little-endian), one file per type and mode:
    b"QFGV", u32 version (1), u32 ggml type id, u32 n_rows, u32 n_per_row,
    u32 has_importance, f32 input[n_rows * n_per_row],
    f32 importance[n_per_row] (when has_importance),
    u8 encoded[row_size * n_rows], f32 decoded[n_rows * n_per_row]
"""

import ctypes
import os
import struct
import sys
from pathlib import Path

import numpy as np

MAGIC = b"QFGV"
VERSION = 1


def library() -> ctypes.CDLL:
    refs = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache/quantforge/refs"))
    lib = ctypes.CDLL(str(refs / "llama.cpp/build/bin/libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
    ]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return lib


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


LIB = None


def lib() -> ctypes.CDLL:
    global LIB
    if LIB is None:
        LIB = library()
    return LIB


Q8_K = 15


def quantize(type_id: int, rows: np.ndarray, importance: np.ndarray | None) -> bytes:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n_rows, n_per_row = rows.shape
    row_size = lib().ggml_row_size(type_id, n_per_row)
    out = ctypes.create_string_buffer(row_size * n_rows)
    if type_id == Q8_K:
        # Not a storage type: ggml_quantize_chunk refuses it and its traits
        # carry no converters, but the exported row functions exist.
        lib().quantize_row_q8_K_ref(ctypes.c_void_p(rows.ctypes.data), out, ctypes.c_int64(rows.size))
        return out.raw
    imp = None
    if importance is not None:
        importance = np.ascontiguousarray(importance, dtype=np.float32)
        imp = importance.ctypes.data
    written = lib().ggml_quantize_chunk(type_id, rows.ctypes.data, out, 0, n_rows, n_per_row, imp)
    assert written == row_size * n_rows
    return out.raw


def dequantize(type_id: int, data: bytes, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float32)
    buf = ctypes.create_string_buffer(data, len(data))
    if type_id == Q8_K:
        lib().dequantize_row_q8_K(buf, ctypes.c_void_p(out.ctypes.data), ctypes.c_int64(n))
        return out
    traits = lib().ggml_get_type_traits(type_id).contents
    TO_FLOAT(traits.to_float)(ctypes.addressof(buf), out.ctypes.data, n)
    return out


# (name, ggml type id, row length): rows are a multiple of each type's block.
TYPES = [
    ("F16", 1, 256), ("BF16", 30, 256), ("Q4_0", 2, 256), ("Q4_1", 3, 256),
    ("Q5_0", 6, 256), ("Q5_1", 7, 256), ("Q8_0", 8, 256), ("Q2_K", 10, 512),
    ("Q3_K", 11, 512), ("Q4_K", 12, 512), ("Q5_K", 13, 512), ("Q6_K", 14, 512),
    ("Q8_K", 15, 512), ("IQ4_NL", 20, 256), ("IQ4_XS", 23, 512), ("TQ1_0", 34, 512),
    ("TQ2_0", 35, 512), ("MXFP4", 39, 256), ("IQ2_XXS", 16, 512), ("IQ2_XS", 17, 512),
    ("IQ2_S", 22, 512), ("IQ3_XXS", 18, 512), ("IQ3_S", 21, 512), ("IQ1_S", 19, 512),
    ("IQ1_M", 29, 512), ("Q1_0", 41, 512), ("Q2_0", 42, 512),
]

# ggml refuses to quantize these without an importance vector.
NEEDS_IMPORTANCE = ("IQ2_XXS", "IQ2_XS", "IQ1_S")


def golden_rows(n_per_row: int, seed: int) -> np.ndarray:
    """Rows that exercise the searches: plain normal weights, outliers, a
    zero block, a constant block, tiny (subnormal-scale) and huge values,
    all-positive and all-negative rows, exact ties of the rounding."""
    rng = np.random.default_rng(seed)
    rows = [
        rng.standard_normal(n_per_row) * 0.02,
        rng.standard_normal(n_per_row),
        np.where(rng.random(n_per_row) < 0.01, 1.0, 0.02) * rng.standard_normal(n_per_row),
        np.concatenate([np.zeros(n_per_row // 2), rng.standard_normal(n_per_row // 2)]),
        np.full(n_per_row, 0.375),
        rng.standard_normal(n_per_row) * 1e-38,
        rng.standard_normal(n_per_row) * 1e4,
        np.abs(rng.standard_normal(n_per_row)),
        -np.abs(rng.standard_normal(n_per_row)),
        np.round(rng.standard_normal(n_per_row) * 8) / 16,
    ]
    return np.stack(rows).astype(np.float32)


def grid_rows(n_per_row: int, seed: int) -> np.ndarray:
    """golden_rows, then rows for the IQ grid searches: zero and tiny
    (below their 1e-8 threshold) groups between ordinary ones inside a
    super-block, and rows whose groups hold odd counts of negatives."""
    rng = np.random.default_rng(seed)
    groups = n_per_row // 32
    zero_every_third = rng.standard_normal((groups, 32)) * 0.05
    zero_every_third[1::3] = 0.0
    tiny_between = rng.standard_normal((groups, 32))
    tiny_between[::2] *= 1e-9
    odd_negatives = np.abs(rng.standard_normal(n_per_row))
    odd_negatives[::7] *= -1
    rows = [zero_every_third.ravel(), tiny_between.ravel(), odd_negatives, rng.standard_normal(n_per_row) ** 3]
    return np.concatenate([golden_rows(n_per_row, seed), np.stack(rows).astype(np.float32)])


def low_bit_rows(n_per_row: int, seed: int) -> np.ndarray:
    """golden_rows, then rows for Q1_0 and Q2_0: subnormal values whose
    largest magnitude has no finite reciprocal (Q2_0's scale then turns
    every level into C's out-of-range conversion), and signed zeros
    (Q1_0 keeps -0.0 as not negative)."""
    rng = np.random.default_rng(seed)
    signed_zeros = np.where(np.arange(n_per_row) % 2 == 0, 0.0, -0.0)
    signed_zeros[::5] = rng.standard_normal(n_per_row)[::5]
    rows = [rng.standard_normal(n_per_row) * 1e-40, signed_zeros]
    return np.concatenate([golden_rows(n_per_row, seed), np.stack(rows).astype(np.float32)])


def write_golden(path: Path, type_id: int, rows: np.ndarray, importance: np.ndarray | None) -> None:
    encoded = quantize(type_id, rows, importance)
    decoded = dequantize(type_id, encoded, rows.size)
    n_rows, n_per_row = rows.shape
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<5I", VERSION, type_id, n_rows, n_per_row, importance is not None))
        f.write(rows.astype("<f4").tobytes())
        if importance is not None:
            f.write(importance.astype("<f4").tobytes())
        f.write(encoded)
        f.write(decoded.astype("<f4").tobytes())


def read_golden(path: Path):
    data = Path(path).read_bytes()
    assert data[:4] == MAGIC
    version, type_id, n_rows, n_per_row, has_imp = struct.unpack_from("<5I", data, 4)
    assert version == VERSION
    offset = 24
    n = n_rows * n_per_row
    rows = np.frombuffer(data, "<f4", n, offset).reshape(n_rows, n_per_row)
    offset += 4 * n
    importance = None
    if has_imp:
        importance = np.frombuffer(data, "<f4", n_per_row, offset)
        offset += 4 * n_per_row
    encoded_len = len(data) - offset - 4 * n
    encoded = data[offset:offset + encoded_len]
    decoded = np.frombuffer(data, "<f4", n, offset + encoded_len)
    return type_id, rows, importance, encoded, decoded


def main() -> None:
    command = sys.argv[1]
    if command == "golden":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for seed, (name, type_id, n_per_row) in enumerate(TYPES):
            if name.startswith(("IQ1", "IQ2", "IQ3")):
                rows = grid_rows(n_per_row, seed)
            elif name in ("Q1_0", "Q2_0"):
                rows = low_bit_rows(n_per_row, seed)
            else:
                rows = golden_rows(n_per_row, seed)
            if name not in NEEDS_IMPORTANCE:
                write_golden(out / f"{name}.plain.qfgv", type_id, rows, None)
            if name not in ("F16", "BF16", "Q8_0", "Q8_K", "TQ1_0", "TQ2_0", "MXFP4"):
                importance = np.random.default_rng(1000 + seed).random(n_per_row).astype(np.float32) ** 2 * 5
                write_golden(out / f"{name}.imatrix.qfgv", type_id, rows, importance)
    elif command == "check":
        failed = False
        for path in sys.argv[2:]:
            type_id, rows, importance, encoded, decoded = read_golden(path)
            again = quantize(type_id, rows, importance)
            if again != encoded or not np.array_equal(dequantize(type_id, encoded, rows.size).view(np.uint32), decoded.view(np.uint32)):
                print(f"{path}: ggml disagrees with the golden file")
                failed = True
        sys.exit(1 if failed else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
