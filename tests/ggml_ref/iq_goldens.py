"""Golden decode vectors for the IQ grid types (IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), from ggml's own dequantizers via ggml_ref.py,
and gguf-py's decoder for tests/it/codec_iq_grid.rs.

usage:
    python iq_goldens.py golden OUTDIR          write OUTDIR/<TYPE>.decode.qfgd
    python iq_goldens.py check FILE...          re-decode each file's blocks with
                                                ggml; exit 1 on a mismatch
    python iq_goldens.py gguf-py TYPE_ID IN OUT decode the raw blocks in IN with
                                                gguf-py, write f32 LE to OUT

Each golden file holds 8 blocks: 4 of random bytes whose f16 scale is set
to a finite value (one zero, one subnormal, two moderate), then 4 that ggml
quantized from random rows (importance of ones where the type takes one).

Golden file layout (little-endian):
    b"QFGD", u32 version (1), u32 ggml type id, u32 n_elements,
    u8 encoded[ggml_row_size(type, n_elements)], f32 decoded[n_elements]
"""

import struct
import sys
from pathlib import Path

import numpy as np

import ggml_ref

MAGIC = b"QFGD"
VERSION = 1
QK_K = 256

# (name, ggml type id, whether quantizing takes an importance vector)
TYPES = [
    ("IQ2_XXS", 16, True), ("IQ2_XS", 17, True), ("IQ2_S", 22, True), ("IQ3_XXS", 18, False),
    ("IQ3_S", 21, False), ("IQ1_S", 19, True), ("IQ1_M", 29, True),
]
IQ1_M = 29

# f16 scales for the random blocks: zero, a subnormal, two moderate values.
SCALES = [0x0000, 0x8003, 0x2e66, 0xb8cd]


def with_scale(type_id: int, block: bytearray, bits: int) -> None:
    """Sets a random block's f16 scale: the first two bytes, except IQ1_M,
    whose scale is the top nibbles of its last four u16."""
    if type_id == IQ1_M:
        base = len(block) - QK_K // 32
        for k in range(4):
            i = base + 2 * k + 1
            block[i] = (block[i] & 0x0F) | (((bits >> (4 * k)) & 0xF) << 4)
    else:
        block[0:2] = struct.pack("<H", bits)


def golden_blocks(type_id: int, takes_importance: bool, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    type_size = ggml_ref.lib().ggml_row_size(type_id, QK_K)
    blocks = b""
    for bits in SCALES:
        block = bytearray(rng.integers(0, 256, type_size, dtype=np.uint8).tobytes())
        with_scale(type_id, block, bits)
        blocks += bytes(block)
    rows = (rng.standard_normal((1, 4 * QK_K)) * np.repeat([0.01, 0.5, 3.0, 100.0], QK_K)).astype(np.float32)
    importance = np.ones(rows.shape[1], dtype=np.float32) if takes_importance else None
    return blocks + ggml_ref.quantize(type_id, rows, importance)


def write_golden(path: Path, type_id: int, encoded: bytes) -> None:
    n = len(encoded) // ggml_ref.lib().ggml_row_size(type_id, QK_K) * QK_K
    decoded = ggml_ref.dequantize(type_id, encoded, n)
    path.write_bytes(MAGIC + struct.pack("<3I", VERSION, type_id, n) + encoded + decoded.astype("<f4").tobytes())


def read_golden(path: Path):
    data = Path(path).read_bytes()
    assert data[:4] == MAGIC, path
    version, type_id, n = struct.unpack_from("<3I", data, 4)
    assert version == VERSION, path
    encoded = data[16:len(data) - 4 * n]
    decoded = np.frombuffer(data, "<f4", n, len(data) - 4 * n)
    return type_id, encoded, decoded


def gguf_py_decode(type_id: int, encoded: bytes) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    blocks = np.frombuffer(encoded, dtype=np.uint8)
    return quants.dequantize(blocks, GGMLQuantizationType(type_id)).astype("<f4").reshape(-1)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "golden":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for seed, (name, type_id, takes_importance) in enumerate(TYPES):
            write_golden(out / f"{name}.decode.qfgd", type_id, golden_blocks(type_id, takes_importance, 2000 + seed))
    elif command == "check":
        failed = False
        for path in sys.argv[2:]:
            type_id, encoded, decoded = read_golden(path)
            again = ggml_ref.dequantize(type_id, encoded, decoded.size)
            if not np.array_equal(again.view(np.uint32), decoded.view(np.uint32)):
                print(f"{path}: ggml disagrees with the golden file")
                failed = True
        sys.exit(1 if failed else 0)
    elif command == "gguf-py":
        type_id, src, dst = int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
        dst.write_bytes(gguf_py_decode(type_id, src.read_bytes()).tobytes())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
