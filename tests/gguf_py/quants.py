"""gguf-py's quantizers and dequantizers, for the codec differential tests.

usage:
    python quants.py dequantize TYPE_ID IN OUT           IN: encoded blocks; OUT: f32 values
    python quants.py quantize TYPE_ID N_PER_ROW IN OUT   IN: f32 rows; OUT: encoded blocks
"""

import sys

import numpy as np
from gguf import GGMLQuantizationType, quants


def main() -> None:
    command, type_id = sys.argv[1], GGMLQuantizationType(int(sys.argv[2]))
    if command == "dequantize":
        blocks = np.fromfile(sys.argv[3], dtype=np.uint8)
        quants.dequantize(blocks, type_id).astype("<f4").tofile(sys.argv[4])
    elif command == "quantize":
        n_per_row = int(sys.argv[3])
        rows = np.fromfile(sys.argv[4], dtype="<f4").reshape(-1, n_per_row)
        np.asarray(quants.quantize(rows, type_id)).astype(np.uint8).tofile(sys.argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
