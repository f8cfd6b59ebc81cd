"""Golden summaries of the SentencePiece models in tests/data/convert/sentencepiece,
read by the `sentencepiece` package itself (its protobuf ModelProto), for
tests/it/sentencepiece.rs. The models are the tokenizers of the tiny checkpoints
made by make_checkpoints.py. Regenerate (with the convert environment of
scripts/setup-convert-env.sh):

    ~/.cache/quantforge/convert-venv/bin/python tests/convert/sentencepiece_golden.py
"""

import json
import pathlib
import struct

from sentencepiece import sentencepiece_model_pb2 as pb

TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}

here = pathlib.Path(__file__).resolve().parent.parent / "data" / "convert" / "sentencepiece"
for path in sorted(here.glob("*.model")):
    model = pb.ModelProto()
    model.ParseFromString(path.read_bytes())
    spec = model.trainer_spec
    summary = {
        "pieces": [
            # Scores as f32 bit patterns: exact, and -0.0 survives.
            {"piece": p.piece, "score_bits": struct.unpack("<I", struct.pack("<f", p.score))[0], "type": TYPES[p.type]}
            for p in model.pieces
        ],
        "trainer": {
            "model_type": spec.model_type,
            "vocab_size": spec.vocab_size,
            "byte_fallback": spec.byte_fallback,
            "unk_id": spec.unk_id,
            "bos_id": spec.bos_id,
            "eos_id": spec.eos_id,
            "pad_id": spec.pad_id,
        },
    }
    path.with_suffix(".json").write_text(json.dumps(summary, ensure_ascii=False, indent=0) + "\n")
    print(f"{path.name}: {len(model.pieces)} pieces")
