"""Writes SafeTensors files with the reference implementation (Python
`safetensors`), for tests/it/safetensors.rs to read.

usage: python make_fixtures.py DIR

Every dtype numpy has goes through `safetensors.numpy.save_file`; the ones it
lacks (BF16, the FP8 family, F4) through `TensorSpec` and `serialize_file`,
the call `save_file` itself ends in, so no torch is needed. Files:

  numpy_all      every numpy dtype we read, scalar and empty shapes, metadata
  writable       only dtypes we write (no scalars), so ours must re-save it
                 byte for byte; several metadata keys in a random order
  raw_all        BF16 and every code of each FP8 dtype, no metadata
  empty          no tensors, metadata only
  refused_u64, refused_c64, refused_f4   one tensor of a dtype ggml lacks
"""

import os
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file


def spec(dtype, shape, array):
    """A TensorSpec over `array`'s bytes; the caller keeps `array` alive."""
    return TensorSpec(dtype=dtype, shape=list(shape), data_ptr=array.ctypes.data, data_len=array.nbytes)


def main() -> None:
    out = sys.argv[1]
    rng = np.random.default_rng(20240601)

    def path(name):
        return os.path.join(out, name + ".safetensors")

    numpy_all = {
        "f32.matrix": rng.standard_normal((3, 5)).astype(np.float32),
        "f64.vector": rng.standard_normal(7),
        "f16.4d": rng.standard_normal((2, 1, 3, 2)).astype(np.float16),
        "i64.positions": np.arange(12, dtype=np.int64).reshape(1, 12) - 3,
        "i32": rng.integers(-(2**31), 2**31, size=(4, 2), dtype=np.int32),
        "i16": rng.integers(-(2**15), 2**15, size=(5,), dtype=np.int16),
        "i8": np.arange(-128, 128, dtype=np.int8).reshape(16, 16),
        "u8": np.arange(256, dtype=np.uint8).reshape(2, 128),
        "u16": np.array([0, 1, 255, 256, 32768, 65535], dtype=np.uint16).reshape(3, 2),
        "u32": np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint32),
        "bool": np.array([[True, False, True], [False, False, True]]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "naïve ✓ \"quoted\"": np.ones(2, dtype=np.float32),
    }
    save_file(numpy_all, path("numpy_all"), metadata={"format": "np", "note": "é \"q\"\n\ttab"})

    writable = {
        "model.embed.weight": rng.standard_normal((6, 4)).astype(np.float32),
        "model.layers.10.w": rng.standard_normal((2, 3)).astype(np.float16),
        "model.layers.9.w": rng.standard_normal((2, 3)).astype(np.float16),
        "Model.Upper": rng.standard_normal(3),
        "ids": np.arange(5, dtype=np.int64),
        "i32": np.arange(-2, 2, dtype=np.int32),
        "i16": np.arange(3, dtype=np.int16),
        "i8": np.arange(-1, 2, dtype=np.int8),
    }
    bf16 = rng.integers(0, 2**16, size=(2, 3), dtype=np.uint16)
    specs = {name: spec(a.dtype.name, a.shape, a) for name, a in writable.items()}
    specs["bf16.weight"] = spec("bfloat16", bf16.shape, bf16)
    metadata = {"format": "pt", "a": "1", "zz": "last?", "ünï": "cödé"}
    serialize_file(specs, path("writable"), metadata=metadata)

    codes = np.arange(256, dtype=np.uint8)
    raw_specs = {
        "fp8.e4m3": spec("float8_e4m3fn", (16, 16), codes),
        "fp8.e5m2": spec("float8_e5m2", (256,), codes),
        "fp8.e4m3fnuz": spec("float8_e4m3fnuz", (2, 128), codes),
        "fp8.e5m2fnuz": spec("float8_e5m2fnuz", (4, 64), codes),
        "fp8.e8m0": spec("float8_e8m0fnu", (256,), codes),
        "bf16": spec("bfloat16", bf16.shape, bf16),
    }
    serialize_file(raw_specs, path("raw_all"))

    save_file({}, path("empty"), metadata={"only": "metadata"})
    save_file({"big": np.arange(3, dtype=np.uint64)}, path("refused_u64"))
    save_file({"complex": np.ones(2, dtype=np.complex64)}, path("refused_c64"))
    serialize_file({"fp4": spec("float4_e2m1fn_x2", (2,), codes[:2])}, path("refused_f4"))


if __name__ == "__main__":
    main()
