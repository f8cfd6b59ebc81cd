"""Writes GGUF files for the metadata-edit tests, with the pinned tree's gguf-py.

usage: python metadata_fixtures.py GGUF_PY_DIR OUTDIR

base.gguf        a few keys (an array among them) and one F32 tensor
arrays.gguf      base.gguf with `general.tags` replaced in place and an array
                 of every GGUF element type appended, nested arrays included;
                 `edit --set` with ARRAYS (printed one per line on stdout, in
                 order) must write these bytes from base.gguf
"""

import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
from gguf import GGUFValueType as T, GGUFWriter  # noqa: E402

# (key, element type, values, how `--set` writes it)
ARRAYS = [
    ("test.u8", T.UINT8, [0, 255], "arr[u8]:0,255"),
    ("test.i8", T.INT8, [-128, 127], "arr[i8]:[-128, 127]"),
    ("test.u16", T.UINT16, [65535], "arr[u16]:65535"),
    ("test.i16", T.INT16, [-32768, 1], "arr[i16]:-32768,1"),
    ("test.u32", T.UINT32, [4294967295, 0], "arr[u32]:[4294967295,0]"),
    ("test.i32", T.INT32, [-1, 2, 3], "arr[i32]:-1,2,3"),
    ("test.u64", T.UINT64, [18446744073709551615], "arr[u64]:18446744073709551615"),
    ("test.i64", T.INT64, [-9223372036854775808], "arr[i64]:[-9223372036854775808]"),
    ("test.f32", T.FLOAT32, [0.1, -2.5, 1e30], "arr[f32]:0.1,-2.5,1e30"),
    ("test.f64", T.FLOAT64, [0.1, 1e-300], "arr[f64]:[0.1, 1e-300]"),
    ("test.bool", T.BOOL, [True, False], "arr[bool]:true,false"),
    ("test.str", T.STRING, ["a", "b,c", "\u00e9 \"q\""], 'arr[str]:["a", "b,c", "\\u00e9 \\"q\\""]'),
    ("test.nested", T.ARRAY, [[1, 2], [3]], "arr[arr[i32]]:[[1,2],[3]]"),
]


def write(path: Path, arrays) -> None:
    w = GGUFWriter(path, "llama")
    w.add_name("metadata fixture")
    w.add_key_value("general.tags", ["new", "tags"] if arrays else ["old"], T.ARRAY, sub_type=T.STRING)
    w.add_uint32("llama.context_length", 64)
    for key, element, values, _ in arrays:
        w.add_key_value(key, values, T.ARRAY, sub_type=None if element == T.ARRAY else element)
    w.add_tensor("t", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


out = Path(sys.argv[2])
write(out / "base.gguf", [])
write(out / "arrays.gguf", ARRAYS)
print("general.tags=arr[str]:new,tags")
for key, _, _, written in ARRAYS:
    print(f"{key}={written}")
