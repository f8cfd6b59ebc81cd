"""Prints what the reference implementation (Python `safetensors`) sees in a
SafeTensors file, as JSON, and writes the tensors' stored bytes to BLOB.

usage: python dump.py FILE BLOB

{"metadata": {...} or null, "tensors": [...]}, tensors in `offset_keys()`
order, each with its name, dtype, shape, `blob_offset` and `len` of its
bytes in BLOB (back to back in the same order), and for the dtypes our
reader converts, `values`: the elements decoded here, integers as numbers,
floats as the bits of the f64 they equal (exact, and -0.0 stays negative),
NaN as the string "nan".
"""

import json
import math
import struct
import sys

import numpy as np
from safetensors import deserialize, safe_open

# (exponent bits, mantissa bits, bias, which codes are not numbers)
MINIFLOATS = {
    "F8_E4M3": (4, 3, 7, "ocp_e4m3"),
    "F8_E5M2": (5, 2, 15, "ieee"),
    "F8_E4M3FNUZ": (4, 3, 8, "fnuz"),
    "F8_E5M2FNUZ": (5, 2, 16, "fnuz"),
}
INTEGERS = {"BOOL": np.bool_, "U8": np.uint8, "U16": "<u2", "U32": "<u4"}


def minifloat(code, exponent_bits, mantissa_bits, bias, specials):
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = code & ((1 << mantissa_bits) - 1)
    top = (1 << exponent_bits) - 1
    if specials == "ieee" and exponent == top:
        return sign * math.inf if mantissa == 0 else math.nan
    if specials == "ocp_e4m3" and exponent == top and mantissa == (1 << mantissa_bits) - 1:
        return math.nan
    if specials == "fnuz" and code == 0x80:
        return math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - mantissa_bits)
    return sign * math.ldexp(mantissa + (1 << mantissa_bits), exponent - bias - mantissa_bits)


def float_bits(x):
    return "nan" if math.isnan(x) else struct.unpack("<Q", struct.pack("<d", x))[0]


def values(dtype, data):
    if dtype in MINIFLOATS:
        return [float_bits(minifloat(b, *MINIFLOATS[dtype])) for b in data]
    if dtype == "F8_E8M0":
        return [float_bits(math.nan if b == 0xFF else math.ldexp(1.0, b - 127)) for b in data]
    if dtype in INTEGERS:
        return [int(v) for v in np.frombuffer(bytes(data), dtype=INTEGERS[dtype])]
    return None


def main() -> None:
    path, blob_path = sys.argv[1], sys.argv[2]
    with safe_open(path, framework="np") as f:
        order = f.offset_keys()
        metadata = f.metadata()
    with open(path, "rb") as f:
        views = dict(deserialize(f.read()))
    tensors = []
    offset = 0
    with open(blob_path, "wb") as blob:
        for name in order:
            view = views[name]
            data = bytes(view["data"])
            blob.write(data)
            entry = {"name": name, "dtype": view["dtype"], "shape": view["shape"], "blob_offset": offset, "len": len(data)}
            decoded = values(view["dtype"], data)
            if decoded is not None:
                entry["values"] = decoded
            tensors.append(entry)
            offset += len(data)
    json.dump({"metadata": metadata, "tensors": tensors}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
