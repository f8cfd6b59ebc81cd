"""Prints what gguf-py's GGUFReader sees in a GGUF file, as JSON.

usage: python dump.py FILE

Metadata keys in file order with their value type names (ours: u8 … f64,
bool, str, arr) and values (arrays in full; nested arrays as their element
type only, which GGUFReader cannot decode); tensors with name, type id,
shape in ggml order, absolute data offset and byte size.
"""

import json
import sys

from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8",
    GGUFValueType.UINT16: "u16", GGUFValueType.INT16: "i16",
    GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool",
    GGUFValueType.STRING: "str", GGUFValueType.ARRAY: "arr",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def field_json(field):
    types = [TYPE_NAMES[t] for t in field.types]
    entry = {"key": field.name, "type": types[0]}
    if types[0] == "arr":
        entry["element_type"] = types[1]
        if types[1] != "arr":
            entry["value"] = field.contents()
    else:
        entry["value"] = field.contents()
    return entry


def main() -> None:
    reader = GGUFReader(sys.argv[1])
    out = {
        "endian": "big" if reader.endianess.name == "BIG" else "little",
        "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset),
        "metadata": [field_json(f) for f in reader.fields.values() if not f.name.startswith("GGUF.")],
        "tensors": [
            {
                "name": t.name,
                "type": int(t.tensor_type),
                "shape": [int(d) for d in t.shape],
                "offset": int(t.data_offset),
                "bytes": int(t.n_bytes),
            }
            for t in reader.tensors
        ],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
