"""Writes GGUF files for the byte-order tests, with the pinned tree's gguf-py.

usage: python byte_order_fixtures.py GGUF_PY_DIR OUTDIR

types.gguf       little-endian: one tensor of every type gguf_convert_endian.py
                 converts (arbitrary bytes are valid blocks for the container),
                 and metadata of several kinds, arrays included
q5_k.gguf        little-endian, with a Q5_K tensor (a type it refuses)
q5_k_be.gguf     the same written big-endian by GGUFWriter
"""

import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
from gguf import GGUFEndian, GGUFValueType, GGUFWriter, GGMLQuantizationType  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

BLOCKS = [
    GGMLQuantizationType.Q1_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
    GGMLQuantizationType.TQ2_0,
    GGMLQuantizationType.MXFP4,
    GGMLQuantizationType.NVFP4,
]


def raw_blocks(rng, qtype, rows: int, blocks_per_row: int) -> np.ndarray:
    size = GGML_QUANT_SIZES[qtype][1]
    return np.frombuffer(rng.bytes(rows * blocks_per_row * size), dtype=np.uint8).reshape(rows, blocks_per_row * size)


def write(path: Path, tensors, endian=GGUFEndian.LITTLE) -> None:
    w = GGUFWriter(path, "llama", endianess=endian)
    w.add_name("byte order fixture")
    w.add_block_count(1)
    w.add_uint32("test.u32", 0x01020304)
    w.add_float32("test.f32", -1.5)
    w.add_uint64("test.u64", 0x0102030405060708)
    w.add_bool("test.bool", True)
    w.add_key_value("test.arr_u16", [1, 2, 65535], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT16)
    w.add_key_value("test.arr_f64", [0.5, -2.25], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    w.add_array("test.arr_str", ["a", "", "▁b"])
    for name, data, raw_dtype in tensors:
        w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(41)
    tensors = [
        ("t.f32", rng.standard_normal((3, 8), dtype=np.float32), None),
        ("t.f16", rng.standard_normal((2, 16)).astype(np.float16), None),
        ("t.bf16", np.frombuffer(rng.bytes(2 * 32 * 2), dtype=np.uint16).reshape(2, 32), GGMLQuantizationType.BF16),
    ]
    tensors += [(f"t.{q.name.lower()}", raw_blocks(rng, q, 3, 2), q) for q in BLOCKS]
    write(out / "types.gguf", tensors)

    q5_k = [
        ("t.f32", rng.standard_normal((2, 8), dtype=np.float32), None),
        ("t.q5_k", raw_blocks(rng, GGMLQuantizationType.Q5_K, 2, 1), GGMLQuantizationType.Q5_K),
    ]
    write(out / "q5_k.gguf", q5_k)
    write(out / "q5_k_be.gguf", q5_k, endian=GGUFEndian.BIG)


if __name__ == "__main__":
    main()
