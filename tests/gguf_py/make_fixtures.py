"""Writes GGUF files with gguf-py's GGUFWriter, for the differential tests.

usage: python make_fixtures.py OUTDIR

Covers every metadata value type (scalars, arrays of each, nested arrays),
both byte orders, a custom alignment, a file with no tensors and tensors of
several ggml types (quantized ones as raw blocks).
"""

import sys
from pathlib import Path

import numpy as np
from gguf import GGUFEndian, GGUFValueType, GGUFWriter, GGMLQuantizationType, quants


def add_every_value_type(w: GGUFWriter) -> None:
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", 2.718281828459045)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.str", "héllo wörld ▁ 🦀")
    w.add_string("test.empty_str", "")
    for name, vtype, values in [
        ("u8", GGUFValueType.UINT8, [0, 1, 255]),
        ("i8", GGUFValueType.INT8, [-128, 0, 127]),
        ("u16", GGUFValueType.UINT16, [0, 65535]),
        ("i16", GGUFValueType.INT16, [-32768, 32767]),
        ("u32", GGUFValueType.UINT32, [0, 4294967295]),
        ("i32", GGUFValueType.INT32, [-2147483648, 2147483647]),
        ("f32", GGUFValueType.FLOAT32, [0.5, -1.25, 3.0e-8]),
        ("u64", GGUFValueType.UINT64, [0, 18446744073709551615]),
        ("i64", GGUFValueType.INT64, [-9223372036854775808, 9223372036854775807]),
        ("f64", GGUFValueType.FLOAT64, [1.0e300, -2.5]),
        ("bool", GGUFValueType.BOOL, [True, False, True]),
        ("str", GGUFValueType.STRING, ["a", "", "▁b", "ü"]),
    ]:
        w.add_key_value(f"test.arr_{name}", values, GGUFValueType.ARRAY, sub_type=vtype)
    w.add_array("test.arr_nested", [[1, 2, 3], [4], [5, 6]])


def add_tensors(w: GGUFWriter) -> None:
    rng = np.random.default_rng(7)
    w.add_tensor("t.f32", rng.standard_normal((3, 5), dtype=np.float32))
    w.add_tensor("t.f16", rng.standard_normal((2, 8)).astype(np.float16))
    w.add_tensor("t.f64", rng.standard_normal((4,)))
    w.add_tensor("t.i8", np.arange(-8, 8, dtype=np.int8))
    w.add_tensor("t.i16", np.arange(-8, 8, dtype=np.int16).reshape(2, 8))
    w.add_tensor("t.i32", np.arange(6, dtype=np.int32).reshape(1, 2, 3))
    w.add_tensor("t.i64", np.arange(4, dtype=np.int64).reshape(2, 2))
    for qtype in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.BF16):
        data = rng.standard_normal((4, 64), dtype=np.float32)
        w.add_tensor(f"t.{qtype.name.lower()}", quants.quantize(data, qtype), raw_dtype=qtype)
    # K-quant blocks: arbitrary bytes are valid blocks for the container.
    block = np.frombuffer(rng.bytes(144 * 2), dtype=np.uint8).reshape(1, 288)
    w.add_tensor("t.q4_k", block, raw_dtype=GGMLQuantizationType.Q4_K)


def write(path: Path, *, endian=GGUFEndian.LITTLE, alignment=None, tensors=True) -> None:
    w = GGUFWriter(path, "llama", endianess=endian)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    add_every_value_type(w)
    if tensors:
        add_tensors(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "every_type_le.gguf")
    write(out / "every_type_be.gguf", endian=GGUFEndian.BIG)
    write(out / "alignment_64.gguf", alignment=64)
    write(out / "no_tensors.gguf", tensors=False)


if __name__ == "__main__":
    main()
