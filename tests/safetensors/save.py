"""Saves tensors described in JSON with the reference implementation, so a
test can compare our writer's bytes with its.

usage: python save.py SPEC OUT

SPEC: {"tensors": [{"name", "dtype" (a SafeTensors name), "shape", "hex"}],
"metadata": {...} or null}. All-numpy dtypes go through
`safetensors.numpy.save_file`, others through `TensorSpec` and
`serialize_file`, which `save_file` calls.
"""

import json
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file

NUMPY = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
    "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}
SPEC_NAMES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    out, metadata = sys.argv[2], spec["metadata"]
    buffers = {t["name"]: np.frombuffer(bytes.fromhex(t["hex"]), dtype=np.uint8).copy() for t in spec["tensors"]}
    if all(t["dtype"] in NUMPY for t in spec["tensors"]):
        arrays = {
            t["name"]: buffers[t["name"]].view(NUMPY[t["dtype"]]).reshape(t["shape"]) for t in spec["tensors"]
        }
        save_file(arrays, out, metadata=metadata)
    else:
        specs = {}
        for t in spec["tensors"]:
            buf = buffers[t["name"]]
            dtype = SPEC_NAMES.get(t["dtype"]) or np.dtype(NUMPY[t["dtype"]]).name
            specs[t["name"]] = TensorSpec(dtype=dtype, shape=t["shape"], data_ptr=buf.ctypes.data, data_len=buf.nbytes)
        serialize_file(specs, out, metadata=metadata)


if __name__ == "__main__":
    main()
