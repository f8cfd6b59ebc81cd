"""Writes the multimodal (language model + mmproj) GGUF fixtures.

usage: python3 tests/multimodal/make_fixtures.py [OUTDIR]

OUTDIR defaults to tests/data/multimodal. The output is deterministic: run it
twice and every file is byte-identical (fixed seeds, no timestamps, keys and
tensors in a fixed order).

Each fixture is a tiny model shaped like what llama.cpp's converters write for
the real model it imitates: the same `general.architecture`, the same metadata
keys in the same order with the same value types, the same tensor names, the
same ggml types for an `--outtype f16` conversion (2-D `.weight` tensors F16,
norms, biases and 1-D tensors F32, plus each converter's own overrides) and
the same shape relations, only with small widths, 1-2 layers and tiny
vocabularies. Tensor data is seeded random noise, not a working model.

Sources (llama.cpp as vendored by llama-cpp-python 0.3.36,
~/.cache/quantforge/refs/llama.cpp):

- text models: conversion/base.py (TextModel.set_gguf_parameters),
  conversion/qwenvl.py (Qwen2VLModel -> arch `qwen2vl`), conversion/llama.py
  (SmolVLM's VLlama3ForCausalLM text model and Llama 3.2 -> arch `llama`),
  conversion/qwen.py (Qwen2ForCausalLM -> `qwen2`, the LM that
  tools/mtmd/legacy-models/minicpmv-surgery.py extracts from MiniCPM-V 2.6),
  conversion/qwen3vl.py (Qwen3VLTextModel -> `qwen3vl`).
- mmproj files: conversion/base.py (MmprojModel), conversion/qwenvl.py
  (Qwen2VLVisionModel), conversion/smolvlm.py (SmolVLMModel, projector
  `idefics3`), conversion/qwen3vl.py (Qwen3VLVisionModel),
  conversion/ultravox.py (UltravoxWhisperEncoderModel),
  tools/mtmd/legacy-models/minicpmv-convert-image-encoder-to-gguf.py (MiniCPM-V
  2.6, projector `resampler`), and tools/mtmd/clip.cpp / clip-impl.h for what
  the loader requires.

fixtures.json (written next to the files) is the machine-readable description
the Rust tests assert on; README.md is regenerated from the same tables.
"""

import json
import math
import sys
import zlib
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "data" / "multimodal"

F16 = np.float16
F32 = np.float32

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # OpenAI CLIP, Qwen2/2.5-VL preprocessor
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HALF = [0.5, 0.5, 0.5]  # SigLIP (SmolVLM, MiniCPM-V legacy default, Qwen3-VL)


# ---------------------------------------------------------------------------
# writing helpers


class Fixture:
    """A GGUFWriter plus a seeded generator; shapes are numpy (PyTorch) order,
    i.e. the reverse of ggml's ne[]."""

    def __init__(self, out: Path, name: str, arch: str):
        self.path = out / name
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.w = GGUFWriter(str(self.path), arch)

    def weight(self, name: str, shape, dtype=F16, scale=0.05) -> None:
        data = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)
        self.w.add_tensor(name, data)

    def bias(self, name: str, shape) -> None:
        self.weight(name, shape, F32, 0.01)

    def norm(self, name: str, n: int) -> None:
        data = (1.0 + 0.01 * self.rng.standard_normal((n,), dtype=np.float32)).astype(F32)
        self.w.add_tensor(name, data)

    def raw(self, name: str, data: np.ndarray) -> None:
        self.w.add_tensor(name, data)

    def close(self) -> None:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character table (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()

# A tiny byte-level BPE vocabulary: "\n" and printable ASCII, a few merges,
# then the model's special tokens at the end (as Qwen and SmolLM place them).
BASE_TOKENS = [B2U[10]] + [B2U[b] for b in range(32, 127)]
MERGES = ["Ċ Ċ", "Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
MERGED_TOKENS = ["ĊĊ", "Ġt", "he", "Ġthe", "in", "Ġa"]


def vocab(n_vocab: int, specials: list) -> tuple:
    normal = BASE_TOKENS + MERGED_TOKENS
    n_fill = n_vocab - len(normal) - len(specials)
    assert n_fill >= 0, "vocabulary too small for its special tokens"
    # Qwen-style padding entries fill the gap up to the embedding rows.
    pads = [f"[PAD{i}]" for i in range(n_fill)]
    tokens = normal + pads + [t for t, _ in specials]
    types = [1] * len(normal) + [4] * len(pads) + [ty for _, ty in specials]
    return tokens, types


CONTROL, USER_DEFINED = 3, 4


# ---------------------------------------------------------------------------
# language models


def write_lm(out: Path, spec: dict) -> None:
    f = Fixture(out, spec["file"], spec["arch"])
    w, a = f.w, spec["arch"]
    n_embd, n_ff, n_layer = spec["n_embd"], spec["n_ff"], spec["n_layer"]
    n_head, n_head_kv = spec["n_head"], spec["n_head_kv"]
    head_dim = spec.get("head_dim", n_embd // n_head)
    tokens, types = vocab(spec["n_vocab"], spec["specials"])
    n_vocab = len(tokens)

    # ModelBase.prepare_metadata: type, name, then set_gguf_parameters.
    w.add_type("model")
    w.add_name(spec["name"])
    w.add_uint32(f"{a}.block_count", n_layer)
    w.add_uint32(f"{a}.context_length", spec["n_ctx"])
    w.add_uint32(f"{a}.embedding_length", n_embd)
    w.add_uint32(f"{a}.feed_forward_length", n_ff)
    w.add_uint32(f"{a}.attention.head_count", n_head)
    w.add_uint32(f"{a}.attention.head_count_kv", n_head_kv)
    if "mrope_sections" in spec:
        w.add_array(f"{a}.rope.dimension_sections", spec["mrope_sections"])
    w.add_float32(f"{a}.rope.freq_base", spec["rope_theta"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", spec["rms_eps"])
    if spec.get("explicit_head_dim"):
        w.add_uint32(f"{a}.attention.key_length", head_dim)
        w.add_uint32(f"{a}.attention.value_length", head_dim)
    w.add_file_type(1)  # MOSTLY_F16
    if a == "llama":
        # LlamaModel.set_gguf_parameters
        w.add_uint32(f"{a}.vocab_size", n_vocab)
        w.add_uint32(f"{a}.rope.dimension_count", head_dim)
    if "n_deepstack" in spec:
        w.add_uint32(f"{a}.n_deepstack_layers", spec["n_deepstack"])
    w.add_quantization_version(2)

    # TextModel.prepare_metadata: the vocabulary comes last.
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", spec["pre"])
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", MERGES)
    for key, tok in spec["special_ids"].items():
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", tokens.index(tok))
    w.add_bool("tokenizer.ggml.add_bos_token", spec.get("add_bos", False))
    w.add_string("tokenizer.chat_template", spec["chat_template"])

    f.weight("token_embd.weight", (n_vocab, n_embd))
    if spec.get("rope_freqs") is not None:
        f.raw("rope_freqs.weight", spec["rope_freqs"])
    q_bias = spec.get("qkv_bias", False)
    for i in range(n_layer):
        p = f"blk.{i}"
        f.norm(f"{p}.attn_norm.weight", n_embd)
        for t, rows in (("q", n_head * head_dim), ("k", n_head_kv * head_dim), ("v", n_head_kv * head_dim)):
            f.weight(f"{p}.attn_{t}.weight", (rows, n_embd))
            if q_bias:
                f.bias(f"{p}.attn_{t}.bias", (rows,))
        if spec.get("qk_norm"):
            f.norm(f"{p}.attn_q_norm.weight", head_dim)
            f.norm(f"{p}.attn_k_norm.weight", head_dim)
        f.weight(f"{p}.attn_output.weight", (n_embd, n_head * head_dim))
        f.norm(f"{p}.ffn_norm.weight", n_embd)
        f.weight(f"{p}.ffn_gate.weight", (n_ff, n_embd))
        f.weight(f"{p}.ffn_up.weight", (n_ff, n_embd))
        f.weight(f"{p}.ffn_down.weight", (n_embd, n_ff))
    f.norm("output_norm.weight", n_embd)
    if not spec.get("tied", False):
        f.weight("output.weight", (n_vocab, n_embd))
    f.close()


def llama3_rope_freqs(head_dim: int, base: float, factor=32.0, low=1.0, high=4.0, old_ctx=8192) -> np.ndarray:
    """LlamaModel.generate_extra_tensors for rope_type llama3 (Llama 3.2)."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for fr in freqs:
        wl = 2 * math.pi / fr
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=F32)


QWEN_SPECIALS = [
    ("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
    ("<|vision_start|>", CONTROL), ("<|vision_end|>", CONTROL), ("<|vision_pad|>", CONTROL),
    ("<|image_pad|>", CONTROL), ("<|video_pad|>", CONTROL),
]
QWEN_IDS = {"eos": "<|im_end|>", "padding": "<|endoftext|>", "bos": "<|endoftext|>"}
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LMS = {
    "qwen2.5-vl": dict(
        file="qwen2.5-vl-lm.gguf", arch="qwen2vl", name="Tiny Qwen2.5 VL (text)",
        imitates="Qwen/Qwen2.5-VL-3B-Instruct text model (arch qwen2vl: 36 layers, n_embd 2048, "
                 "tied embeddings, mrope sections [16, 24, 24, 0])",
        n_embd=64, n_ff=128, n_layer=2, n_head=4, n_head_kv=2, n_ctx=128, n_vocab=128,
        mrope_sections=[2, 3, 3, 0],  # sums to head_dim / 2 = 8, like [16, 24, 24] for 128
        rope_theta=1000000.0, rms_eps=1e-6, qkv_bias=True, tied=True,
        pre="qwen2", specials=QWEN_SPECIALS, special_ids=QWEN_IDS, chat_template=QWEN_TEMPLATE,
    ),
    "qwen3-vl": dict(
        file="qwen3-vl-lm.gguf", arch="qwen3vl", name="Tiny Qwen3 VL (text)",
        imitates="Qwen/Qwen3-VL-4B-Instruct text model (arch qwen3vl: 36 layers, n_embd 2560, "
                 "head_dim 128, 3 deepstack layers, tied embeddings)",
        n_embd=64, n_ff=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, explicit_head_dim=True,
        n_ctx=128, n_vocab=128, mrope_sections=[3, 3, 2, 0],  # like [24, 20, 20] for head_dim 128
        rope_theta=5000000.0, rms_eps=1e-6, qk_norm=True, tied=True, n_deepstack=1,
        pre="qwen2", specials=QWEN_SPECIALS, special_ids=QWEN_IDS, chat_template=QWEN_TEMPLATE,
    ),
    "smolvlm": dict(
        file="smolvlm-lm.gguf", arch="llama", name="Tiny SmolVLM (text)",
        imitates="HuggingFaceTB/SmolVLM-256M-Instruct text model (VLlama3ForCausalLM -> arch llama: "
                 "30 layers, n_embd 576, 9 heads, 3 KV heads)",
        n_embd=48, n_ff=96, n_layer=2, n_head=3, n_head_kv=1, n_ctx=256, n_vocab=128,
        rope_theta=100000.0, rms_eps=1e-5, tied=True,
        pre="smollm",
        specials=[("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
                  ("<fake_token_around_image>", USER_DEFINED), ("<image>", USER_DEFINED),
                  ("<global-img>", USER_DEFINED), ("<row_1_col_1>", USER_DEFINED),
                  ("<end_of_utterance>", USER_DEFINED)],
        special_ids={"bos": "<|im_start|>", "eos": "<end_of_utterance>", "padding": "<|im_end|>"},
        chat_template="<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}: "
                      "{{ message['content'] }}<end_of_utterance>\n{% endfor %}"
                      "{% if add_generation_prompt %}Assistant:{% endif %}",
    ),
    "minicpm-v-2.6": dict(
        file="minicpm-v-2.6-lm.gguf", arch="qwen2", name="Tiny MiniCPM-V 2.6 (text)",
        imitates="openbmb/MiniCPM-V-2_6 language model as minicpmv-surgery.py extracts it "
                 "(Qwen2ForCausalLM -> arch qwen2: 28 layers, n_embd 3584, untied output)",
        # n_embd 128: clip.cpp's resampler graph hard-codes 128-wide heads
        # (models/minicpmv.cpp), so real resampler widths are multiples of 128.
        n_embd=128, n_ff=128, n_layer=1, n_head=4, n_head_kv=2, n_ctx=128, n_vocab=128,
        rope_theta=1000000.0, rms_eps=1e-6, qkv_bias=True, tied=False,
        pre="qwen2",
        specials=[("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
                  ("<image>", USER_DEFINED), ("</image>", USER_DEFINED), ("<slice>", USER_DEFINED),
                  ("</slice>", USER_DEFINED), ("<unk>", CONTROL)],
        special_ids={"eos": "<|im_end|>", "padding": "<|endoftext|>", "bos": "<|im_start|>",
                     "unknown": "<unk>"},
        chat_template=QWEN_TEMPLATE,
    ),
    "ultravox": dict(
        file="ultravox-lm.gguf", arch="llama", name="Tiny Llama 3.2 (Ultravox text model)",
        imitates="meta-llama/Llama-3.2-1B-Instruct, the text model of fixie-ai/ultravox-v0_5-llama-3_2-1b "
                 "(arch llama: 16 layers, n_embd 2048, llama3 rope_freqs, tied embeddings)",
        n_embd=80, n_ff=160, n_layer=2, n_head=5, n_head_kv=1, n_ctx=256, n_vocab=128,
        rope_theta=500000.0, rms_eps=1e-5, tied=True, add_bos=True,
        rope_freqs=llama3_rope_freqs(16, 500000.0),
        pre="llama-bpe",
        specials=[("<|begin_of_text|>", CONTROL), ("<|end_of_text|>", CONTROL),
                  ("<|start_header_id|>", CONTROL), ("<|end_header_id|>", CONTROL),
                  ("<|eot_id|>", CONTROL)],
        special_ids={"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
        chat_template="{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
                      "<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>{% endfor %}",
    ),
}


# ---------------------------------------------------------------------------
# mmproj files (general.architecture = "clip")


def mmproj_header(w: GGUFWriter, name: str, vision: dict | None = None, audio: dict | None = None,
                  n_embd_text: int = 0, encoder_flag: bool = True) -> None:
    """ModelBase.prepare_metadata + MmprojModel.set_gguf_parameters (base.py).
    encoder_flag=False leaves out clip.has_vision_encoder (a negative fixture)."""
    w.add_type("mmproj")
    w.add_name(name)
    w.add_file_type(1)
    if vision is not None:
        if encoder_flag:
            w.add_bool("clip.has_vision_encoder", True)
        w.add_uint32("clip.vision.projection_dim", n_embd_text)
        w.add_uint32("clip.vision.image_size", vision["image_size"])
        w.add_uint32("clip.vision.patch_size", vision["patch_size"])
        w.add_uint32("clip.vision.embedding_length", vision["n_embd"])
        w.add_uint32("clip.vision.feed_forward_length", vision["n_ff"])
        w.add_uint32("clip.vision.block_count", vision["n_layer"])
        w.add_uint32("clip.vision.attention.head_count", vision["n_head"])
        w.add_array("clip.vision.image_mean", vision["mean"])
        w.add_array("clip.vision.image_std", vision["std"])
    if audio is not None:
        w.add_bool("clip.has_audio_encoder", True)
        w.add_uint32("clip.audio.projection_dim", n_embd_text)
        w.add_uint32("clip.audio.embedding_length", audio["n_embd"])
        w.add_uint32("clip.audio.feed_forward_length", audio["n_ff"])
        w.add_uint32("clip.audio.block_count", audio["n_layer"])
        w.add_uint32("clip.audio.attention.head_count", audio["n_head"])


QWEN25_VISION = dict(image_size=560, patch_size=14, n_embd=32, n_ff=64, n_layer=2, n_head=2,
                     merge=2, mean=CLIP_MEAN, std=CLIP_STD, fullatt_block_indexes=[1])


def write_qwen25vl_mmproj(out: Path, file: str, n_embd_text: int, *, projector_type=True,
                          encoder_flag=True, name="Tiny Qwen2.5 VL (mmproj)") -> None:
    """Qwen2VLVisionModel for model_type qwen2_5_vl (conversion/qwenvl.py)."""
    v = QWEN25_VISION
    f = Fixture(out, file, "clip")
    w = f.w
    mmproj_header(w, name, vision=v, n_embd_text=n_embd_text, encoder_flag=encoder_flag)
    if projector_type:
        w.add_string("clip.projector_type", "qwen2.5vl_merger")
    w.add_bool("clip.use_silu", True)
    w.add_uint32("clip.vision.n_wa_pattern", v["fullatt_block_indexes"][0] + 1)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_quantization_version(2)

    h, ff, p = v["n_embd"], v["n_ff"], v["patch_size"]
    # Conv3D patch embedding (temporal_patch_size 2) split into two Conv2Ds;
    # MmprojModel.tensor_force_quant keeps both F16 for an F16 conversion.
    f.weight("v.patch_embd.weight", (h, 3, p, p))
    f.weight("v.patch_embd.weight.1", (h, 3, p, p))
    for i in range(v["n_layer"]):
        b = f"v.blk.{i}"
        for t in ("q", "k", "v"):  # split from the fused attn.qkv
            f.weight(f"{b}.attn_{t}.weight", (h, h))
            f.bias(f"{b}.attn_{t}.bias", (h,))
        f.weight(f"{b}.attn_out.weight", (h, h))
        f.bias(f"{b}.attn_out.bias", (h,))
        f.norm(f"{b}.ln1.weight", h)  # RMSNorm: no bias in 2.5-VL
        f.norm(f"{b}.ln2.weight", h)
        f.weight(f"{b}.ffn_gate.weight", (ff, h))
        f.bias(f"{b}.ffn_gate.bias", (ff,))
        f.weight(f"{b}.ffn_up.weight", (ff, h))
        f.bias(f"{b}.ffn_up.bias", (ff,))
        f.weight(f"{b}.ffn_down.weight", (h, ff))
        f.bias(f"{b}.ffn_down.bias", (h,))
    merged = h * v["merge"] ** 2
    f.norm("v.post_ln.weight", h)  # merger.ln_q
    f.weight("mm.0.weight", (merged, merged))  # merger.mlp.0
    f.bias("mm.0.bias", (merged,))
    f.weight("mm.2.weight", (n_embd_text, merged))  # merger.mlp.2: the output width
    f.bias("mm.2.bias", (n_embd_text,))
    f.close()


QWEN3_VISION = dict(n_pos=16, patch_size=16, n_embd=32, n_ff=64, n_layer=2, n_head=2, merge=2,
                    mean=HALF, std=HALF, deepstack_visual_indexes=[0])
QWEN3_VISION["image_size"] = int(QWEN3_VISION["n_pos"] ** 0.5 * QWEN3_VISION["patch_size"])


def write_qwen3vl_mmproj(out: Path, file: str, n_embd_text: int) -> None:
    """Qwen3VLVisionModel (conversion/qwen3vl.py), with one deepstack merger."""
    v = QWEN3_VISION
    f = Fixture(out, file, "clip")
    w = f.w
    mmproj_header(w, "Tiny Qwen3 VL (mmproj)", vision=v, n_embd_text=n_embd_text)
    w.add_string("clip.projector_type", "qwen3vl_merger")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.spatial_merge_size", v["merge"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    is_ds = [i in v["deepstack_visual_indexes"] for i in range(v["n_layer"])]
    w.add_array("clip.vision.is_deepstack_layers", is_ds)
    w.add_quantization_version(2)

    h, ff, p = v["n_embd"], v["n_ff"], v["patch_size"]
    merged = h * v["merge"] ** 2
    f.weight("v.patch_embd.weight", (h, 3, p, p))
    f.weight("v.patch_embd.weight.1", (h, 3, p, p))
    f.bias("v.patch_embd.bias", (h,))
    f.weight("v.position_embd.weight", (v["n_pos"], h), F32)  # V_ENC_EMBD_POS is kept F32
    for i in range(v["n_layer"]):
        b = f"v.blk.{i}"
        f.weight(f"{b}.attn_qkv.weight", (3 * h, h))
        f.bias(f"{b}.attn_qkv.bias", (3 * h,))
        f.weight(f"{b}.attn_out.weight", (h, h))
        f.bias(f"{b}.attn_out.bias", (h,))
        f.norm(f"{b}.ln1.weight", h)
        f.bias(f"{b}.ln1.bias", (h,))
        f.norm(f"{b}.ln2.weight", h)
        f.bias(f"{b}.ln2.bias", (h,))
        f.weight(f"{b}.ffn_up.weight", (ff, h))
        f.bias(f"{b}.ffn_up.bias", (ff,))
        f.weight(f"{b}.ffn_down.weight", (h, ff))
        f.bias(f"{b}.ffn_down.bias", (h,))
    for idx in v["deepstack_visual_indexes"]:
        d = f"v.deepstack.{idx}"
        f.norm(f"{d}.norm.weight", merged)  # use_postshuffle_norm: over the merged width
        f.bias(f"{d}.norm.bias", (merged,))
        f.weight(f"{d}.fc1.weight", (merged, merged))
        f.bias(f"{d}.fc1.bias", (merged,))
        f.weight(f"{d}.fc2.weight", (n_embd_text, merged))
        f.bias(f"{d}.fc2.bias", (n_embd_text,))
    f.norm("v.post_ln.weight", h)
    f.bias("v.post_ln.bias", (h,))
    f.weight("mm.0.weight", (merged, merged))
    f.bias("mm.0.bias", (merged,))
    f.weight("mm.2.weight", (n_embd_text, merged))
    f.bias("mm.2.bias", (n_embd_text,))
    f.close()


SMOLVLM_VISION = dict(image_size=64, patch_size=16, n_embd=32, n_ff=64, n_layer=2, n_head=2,
                      scale_factor=4, preproc_image_size=256, mean=HALF, std=HALF)


def write_idefics3_mmproj(out: Path, file: str, n_embd_text: int, *, projector_type=True,
                          name="Tiny SmolVLM (mmproj)") -> None:
    """SmolVLMModel (conversion/smolvlm.py): SigLIP + pixel shuffle + mm.model.fc."""
    v = SMOLVLM_VISION
    f = Fixture(out, file, "clip")
    w = f.w
    mmproj_header(w, name, vision=v, n_embd_text=n_embd_text)
    if projector_type:
        w.add_string("clip.projector_type", "idefics3")
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projector.scale_factor", v["scale_factor"])
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.preproc_image_size", v["preproc_image_size"])
    w.add_quantization_version(2)

    h, ff, p = v["n_embd"], v["n_ff"], v["patch_size"]
    n_pos = (v["image_size"] // p) ** 2
    # SmolVLMModel.tensor_force_quant: ".embeddings." tensors stay F32.
    f.weight("v.patch_embd.weight", (h, 3, p, p), F32)
    f.bias("v.patch_embd.bias", (h,))
    f.weight("v.position_embd.weight", (n_pos, h), F32)
    for i in range(v["n_layer"]):
        b = f"v.blk.{i}"
        for t in ("k", "v", "q"):
            f.weight(f"{b}.attn_{t}.weight", (h, h))
            f.bias(f"{b}.attn_{t}.bias", (h,))
        f.weight(f"{b}.attn_out.weight", (h, h))
        f.bias(f"{b}.attn_out.bias", (h,))
        f.norm(f"{b}.ln1.weight", h)
        f.bias(f"{b}.ln1.bias", (h,))
        f.weight(f"{b}.ffn_up.weight", (ff, h))  # mlp.fc1
        f.bias(f"{b}.ffn_up.bias", (ff,))
        f.weight(f"{b}.ffn_down.weight", (h, ff))  # mlp.fc2
        f.bias(f"{b}.ffn_down.bias", (h,))
        f.norm(f"{b}.ln2.weight", h)
        f.bias(f"{b}.ln2.bias", (h,))
    f.norm("v.post_ln.weight", h)
    f.bias("v.post_ln.bias", (h,))
    # connector.modality_projection.proj: Linear(h * scale_factor^2, n_embd_text, bias=False)
    f.weight("mm.model.fc.weight", (n_embd_text, h * v["scale_factor"] ** 2))
    f.close()


MINICPMV_VISION = dict(image_size=56, patch_size=14, n_embd=32, n_ff=64, n_layer=2, n_head=2,
                       pos_grid=4, query_num=16, version=3, mean=HALF, std=HALF)


def sincos_2d(embed_dim: int, grid: int) -> np.ndarray:
    """get_2d_sincos_pos_embed from the legacy MiniCPM-V converter."""
    def one_d(dim, pos):
        omega = np.arange(dim // 2, dtype=np.float32)
        omega /= dim / 2.0
        omega = 1.0 / 10000 ** omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    gh = np.arange(grid, dtype=np.float32)
    gw = np.arange(grid, dtype=np.float32)
    g = np.stack(np.meshgrid(gw, gh), axis=0).reshape([2, 1, grid, grid])
    emb = np.concatenate([one_d(embed_dim // 2, g[0]), one_d(embed_dim // 2, g[1])], axis=1)
    return emb.astype(F32)


def write_minicpmv_mmproj(out: Path, file: str, n_embd_text: int) -> None:
    """minicpmv-convert-image-encoder-to-gguf.py --minicpmv_version 3 (MiniCPM-V 2.6)."""
    v = MINICPMV_VISION
    f = Fixture(out, file, "clip")
    w = f.w
    # The legacy script writes no general.type / general.name / quantization version.
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_minicpmv_projector", True)
    w.add_file_type(1)
    w.add_description("image encoder for MiniCPM-V")
    w.add_string("clip.projector_type", "resampler")
    w.add_int32("clip.minicpmv_version", v["version"])
    w.add_uint32("clip.vision.image_size", v["image_size"])
    w.add_uint32("clip.vision.patch_size", v["patch_size"])
    w.add_uint32("clip.vision.embedding_length", v["n_embd"])
    w.add_uint32("clip.vision.feed_forward_length", v["n_ff"])
    w.add_uint32("clip.vision.projection_dim", 0)  # the legacy script always writes 0
    w.add_uint32("clip.vision.attention.head_count", v["n_head"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.block_count", v["n_layer"])
    w.add_uint32("clip.minicpmv_query_num", v["query_num"])
    w.add_array("clip.vision.image_mean", v["mean"])
    w.add_array("clip.vision.image_std", v["std"])
    w.add_bool("clip.use_gelu", True)

    e, h, ff, p = n_embd_text, v["n_embd"], v["n_ff"], v["patch_size"]
    # Resampler (projector) first, in the checkpoint's state_dict order.
    f.weight("resampler.query", (v["query_num"], e), F32, 0.02)  # not ".weight": F32
    f.raw("resampler.pos_embed_k", sincos_2d(e, v["pos_grid"]))  # 70x70 in the real file
    f.weight("resampler.proj.weight", (e, e))  # proj parameter, transposed; square
    f.weight("resampler.kv.weight", (e, h))  # kv_proj: Linear(vision width, e, bias=False)
    for t in ("q", "k", "v"):  # attn.in_proj_weight chunked
        f.weight(f"resampler.attn.{t}.weight", (e, e))
    for t in ("q", "k", "v"):  # attn.in_proj_bias chunked
        f.bias(f"resampler.attn.{t}.bias", (e,))
    f.weight("resampler.attn.out.weight", (e, e))
    f.bias("resampler.attn.out.bias", (e,))
    for ln in ("q", "kv", "post"):
        f.norm(f"resampler.ln_{ln}.weight", e)
        f.bias(f"resampler.ln_{ln}.bias", (e,))
    # SigLIP vision tower; 4-D tensors are always F16, position_embd is a 2-D
    # ".weight" and so F16 too. The legacy name mapping turns mlp.fc1 into
    # ffn_down and mlp.fc2 into ffn_up; clip.cpp swaps them back on load.
    f.weight("v.patch_embd.weight", (h, 3, p, p))
    f.bias("v.patch_embd.bias", (h,))
    f.weight("v.position_embd.weight", (v["pos_grid"] ** 2, h))
    for i in range(v["n_layer"]):
        b = f"v.blk.{i}"
        for t in ("k", "v", "q"):
            f.weight(f"{b}.attn_{t}.weight", (h, h))
            f.bias(f"{b}.attn_{t}.bias", (h,))
        f.weight(f"{b}.attn_out.weight", (h, h))
        f.bias(f"{b}.attn_out.bias", (h,))
        f.norm(f"{b}.ln1.weight", h)
        f.bias(f"{b}.ln1.bias", (h,))
        f.weight(f"{b}.ffn_down.weight", (ff, h))  # mlp.fc1 (h -> ff)
        f.bias(f"{b}.ffn_down.bias", (ff,))
        f.weight(f"{b}.ffn_up.weight", (h, ff))  # mlp.fc2 (ff -> h)
        f.bias(f"{b}.ffn_up.bias", (h,))
        f.norm(f"{b}.ln2.weight", h)
        f.bias(f"{b}.ln2.bias", (h,))
    f.norm("v.post_ln.weight", h)
    f.bias("v.post_ln.bias", (h,))
    f.close()


# n_pos stays Whisper's 1500 (30 s of audio after the stride-2 conv): clip.cpp's
# warmup encodes a 30 s chunk and asserts position_embd has that many rows.
ULTRAVOX_AUDIO = dict(n_embd=16, n_ff=64, n_layer=2, n_head=2, n_mel=128, n_pos=1500,
                      stack_factor=8, proj_hidden=64)


def write_ultravox_mmproj(out: Path, file: str, n_embd_text: int) -> None:
    """UltravoxWhisperEncoderModel (conversion/ultravox.py)."""
    a = ULTRAVOX_AUDIO
    f = Fixture(out, file, "clip")
    w = f.w
    mmproj_header(w, "Tiny Ultravox (mmproj)", audio=a, n_embd_text=n_embd_text)
    # WhisperEncoderModel writes "qwen2a", UltravoxWhisperEncoderModel then
    # overwrites it: the key keeps its first position with the new value.
    w.add_string("clip.projector_type", "ultravox")
    w.add_uint32("clip.audio.num_mel_bins", a["n_mel"])
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.audio.projector.stack_factor", a["stack_factor"])
    w.add_quantization_version(2)

    d, ff = a["n_embd"], a["n_ff"]
    # conv weights forced F16; conv biases unsqueezed to (d, 1) and F32.
    f.weight("a.conv1d.1.weight", (d, a["n_mel"], 3))
    f.bias("a.conv1d.1.bias", (d, 1))
    f.weight("a.conv1d.2.weight", (d, d, 3))
    f.bias("a.conv1d.2.bias", (d, 1))
    f.weight("a.position_embd.weight", (a["n_pos"], d), F32)  # A_ENC_EMBD_POS is kept F32
    for i in range(a["n_layer"]):
        b = f"a.blk.{i}"
        f.weight(f"{b}.attn_k.weight", (d, d))  # Whisper: no k bias
        f.weight(f"{b}.attn_v.weight", (d, d))
        f.bias(f"{b}.attn_v.bias", (d,))
        f.weight(f"{b}.attn_q.weight", (d, d))
        f.bias(f"{b}.attn_q.bias", (d,))
        f.weight(f"{b}.attn_out.weight", (d, d))
        f.bias(f"{b}.attn_out.bias", (d,))
        f.norm(f"{b}.ln1.weight", d)
        f.bias(f"{b}.ln1.bias", (d,))
        f.weight(f"{b}.ffn_up.weight", (ff, d))
        f.bias(f"{b}.ffn_up.bias", (ff,))
        f.weight(f"{b}.ffn_down.weight", (d, ff))
        f.bias(f"{b}.ffn_down.bias", (d,))
        f.norm(f"{b}.ln2.weight", d)
        f.bias(f"{b}.ln2.bias", (d,))
    f.norm("a.post_ln.weight", d)
    f.bias("a.post_ln.bias", (d,))
    stacked = d * a["stack_factor"]
    mid = a["proj_hidden"] // 2  # SwiGLU halves the hidden width
    f.weight("mm.a.mlp.1.weight", (a["proj_hidden"], stacked))  # linear_1, no bias
    f.weight("mm.a.mlp.2.weight", (n_embd_text, mid))  # linear_2: the output width
    f.norm("mm.a.norm_mid.weight", mid)  # ln_mid (RMSNorm)
    f.norm("mm.a.norm_pre.weight", stacked)  # ln_pre (RMSNorm)
    f.close()


# ---------------------------------------------------------------------------
# the catalogue

MMPROJ_TYPES_WIDTH = {
    "qwen2.5vl_merger": "mm.2.bias ne[0] (equivalently mm.2.weight ne[1])",
    "qwen3vl_merger": "mm.2.bias ne[0] * (1 + number of layers with v.deepstack.N.fc1.weight)",
    "idefics3": "mm.model.fc.weight ne[1]",
    "resampler": "resampler.proj.weight ne[0] (square: ne[0] == ne[1])",
    "ultravox": "mm.a.mlp.2.weight ne[1]",
}


def catalogue() -> tuple:
    lm = LMS
    q25, q3, smol, mcpm, uvx = (lm[k] for k in ("qwen2.5-vl", "qwen3-vl", "smolvlm", "minicpm-v-2.6", "ultravox"))
    mmprojs = [
        dict(file="qwen2.5-vl-mmproj.gguf", write=write_qwen25vl_mmproj, n_embd_text=q25["n_embd"],
             imitates="mmproj of Qwen/Qwen2.5-VL-3B-Instruct (ViT 32 layers x 1280, window attention, "
                      "2x2 patch merger to 2048)",
             role="vision", projector_type="qwen2.5vl_merger", width_tensor="mm.2.bias", width_dim=0),
        dict(file="qwen3-vl-mmproj.gguf", write=write_qwen3vl_mmproj, n_embd_text=q3["n_embd"],
             imitates="mmproj of Qwen/Qwen3-VL-4B-Instruct (ViT 24 x 1024, deepstack mergers after "
                      "layers 5, 11, 17, merger to 2560)",
             role="vision", projector_type="qwen3vl_merger", width_tensor="mm.2.bias", width_dim=0,
             width_multiplier=1 + len(QWEN3_VISION["deepstack_visual_indexes"])),
        dict(file="smolvlm-mmproj.gguf", write=write_idefics3_mmproj, n_embd_text=smol["n_embd"],
             imitates="mmproj of HuggingFaceTB/SmolVLM-256M-Instruct (SigLIP 12 x 768, pixel shuffle "
                      "scale 4, projector to 576)",
             role="vision", projector_type="idefics3", width_tensor="mm.model.fc.weight", width_dim=1),
        dict(file="minicpm-v-2.6-mmproj.gguf", write=write_minicpmv_mmproj, n_embd_text=mcpm["n_embd"],
             imitates="mmproj-model-f16.gguf of openbmb/MiniCPM-V-2_6 (SigLIP 27 x 1152, resampler "
                      "with 64 queries to 3584), legacy converter",
             role="vision", projector_type="resampler", width_tensor="resampler.proj.weight", width_dim=0),
        dict(file="ultravox-mmproj.gguf", write=write_ultravox_mmproj, n_embd_text=uvx["n_embd"],
             imitates="mmproj of fixie-ai/ultravox-v0_5-llama-3_2-1b (Whisper large-v3-turbo encoder "
                      "32 x 1280, 128 mel bins, stack factor 8, projector to 2048)",
             role="audio", projector_type="ultravox", width_tensor="mm.a.mlp.2.weight", width_dim=1),
        # negatives
        dict(file="mismatch-qwen2.5-vl-mmproj.gguf", write=write_qwen25vl_mmproj, n_embd_text=96,
             imitates="a Qwen2.5-VL mmproj converted for a wider sibling (projector output 96)",
             role="vision", projector_type="qwen2.5vl_merger", width_tensor="mm.2.bias", width_dim=0,
             kwargs=dict(name="Tiny Qwen2.5 VL, wider sibling (mmproj)")),
        dict(file="broken-no-projector-type-mmproj.gguf", write=write_idefics3_mmproj,
             n_embd_text=smol["n_embd"],
             imitates="the SmolVLM mmproj with clip.projector_type removed",
             role="vision", projector_type=None, width_tensor=None, width_dim=None,
             error="missing clip.projector_type: clip.cpp reads it as an empty string and throws "
                   "'unknown projector type'",
             kwargs=dict(projector_type=False, name="Tiny SmolVLM, no projector type (mmproj)")),
        dict(file="broken-no-encoder-mmproj.gguf", write=write_qwen25vl_mmproj, n_embd_text=q25["n_embd"],
             imitates="the Qwen2.5-VL mmproj with clip.has_vision_encoder removed (no encoder flag at all)",
             role=None, projector_type="qwen2.5vl_merger", width_tensor=None, width_dim=None,
             error="no clip.has_vision_encoder / clip.has_audio_encoder: clip_init loads neither "
                   "encoder and mtmd fails with 'Failed to load CLIP model'",
             kwargs=dict(encoder_flag=False, name="Tiny Qwen2.5 VL, no encoder flag (mmproj)")),
    ]
    for m in mmprojs:
        if m["width_tensor"] is not None:
            m["output_width"] = m["n_embd_text"] * m.get("width_multiplier", 1)
        else:
            m["output_width"] = None

    def embd_inp(spec):
        return spec["n_embd"] * (1 + spec.get("n_deepstack", 0))

    def pair(name, lmk, mm_files, fit, note, error=None):
        spec = lm[lmk]
        mms = [next(m for m in mmprojs if m["file"] == f) for f in mm_files]
        roles = {spec["file"]: "language"}
        for m in mms:
            roles[m["file"]] = m["role"]
        first = mms[0]
        entry = {
            "name": name,
            "lm": spec["file"],
            "mmproj": [m["file"] for m in mms],
            "roles": roles,
            "lm_architecture": spec["arch"],
            "lm_embedding_length": spec["n_embd"],
            "lm_embedding_input_length": embd_inp(spec),
            "projector_type": first["projector_type"],
            "expected_output_width": first["output_width"],
            "width_tensor": first["width_tensor"],
            "width_tensor_dim": first["width_dim"],
            "expect_fit": fit,
            "note": note,
        }
        if "width_multiplier" in first:
            entry["width_multiplier"] = first["width_multiplier"]
        if error is not None:
            entry["expected_error"] = error
        return entry

    pairs = [
        pair("qwen2.5-vl", "qwen2.5-vl", ["qwen2.5-vl-mmproj.gguf"], True,
             "mm.2.bias ne[0] == qwen2vl.embedding_length"),
        pair("qwen3-vl", "qwen3-vl", ["qwen3-vl-mmproj.gguf"], True,
             "deepstack: clip.cpp reports mm.2.bias ne[0] * (1 + 1 deepstack layer) = 128, "
             "llama.cpp's n_embd_inp is embedding_length * (1 + qwen3vl.n_deepstack_layers) = 128"),
        pair("smolvlm", "smolvlm", ["smolvlm-mmproj.gguf"], True,
             "mm.model.fc.weight ne[1] == llama.embedding_length"),
        pair("minicpm-v-2.6", "minicpm-v-2.6", ["minicpm-v-2.6-mmproj.gguf"], True,
             "resampler.proj.weight ne[0] == qwen2.embedding_length; clip.vision.projection_dim is 0 "
             "in legacy MiniCPM-V files and must not be trusted"),
        pair("ultravox", "ultravox", ["ultravox-mmproj.gguf"], True,
             "audio encoder: mm.a.mlp.2.weight ne[1] == llama.embedding_length"),
        pair("mismatch-qwen2.5-vl", "qwen2.5-vl", ["mismatch-qwen2.5-vl-mmproj.gguf"], False,
             "projector output 96 != embedding_length 64 (mtmd: 'mismatch between text model "
             "(n_embd = 64) and mmproj (n_embd = 96)')"),
        pair("mismatch-qwen3-vl-mmproj-on-qwen2.5-vl-lm", "qwen2.5-vl", ["qwen3-vl-mmproj.gguf"], False,
             "naive width (mm.2.bias ne[0] = 64) equals embedding_length 64, but clip.cpp's width "
             "counts the deepstack layer (128) and the qwen2vl LM has no deepstack input (64)"),
        pair("broken-no-projector-type", "smolvlm", ["broken-no-projector-type-mmproj.gguf"], False,
             "the file says it has a vision encoder but names no projector",
             error="missing clip.projector_type"),
        pair("broken-no-encoder", "qwen2.5-vl", ["broken-no-encoder-mmproj.gguf"], False,
             "a clip file with neither clip.has_vision_encoder nor clip.has_audio_encoder",
             error="no encoder flag"),
    ]
    return mmprojs, pairs


# ---------------------------------------------------------------------------
# README


def readme(out: Path, mmprojs: list, pairs: list) -> str:
    sizes = {p.name: p.stat().st_size for p in sorted(out.glob("*.gguf"))}
    lines = [
        "# Multimodal fixtures (language model + mmproj)",
        "",
        "Generated by `python3 tests/multimodal/make_fixtures.py` (deterministic: rerunning",
        "rewrites every file byte for byte; this README and `fixtures.json` included). Do not",
        "edit by hand.",
        "",
        "Tiny GGUF files shaped like llama.cpp's conversions of real multimodal models: the",
        "same `general.architecture`, metadata keys (order and value types), tensor names and",
        "F16/F32 choices as an `--outtype f16` conversion, with small widths, 1-2 layers and",
        "tiny vocabularies. Tensor data is seeded noise. An mmproj file has",
        "`general.architecture = clip`; its role comes from `clip.has_vision_encoder` /",
        "`clip.has_audio_encoder`, its projector from `clip.projector_type`, and its output",
        "width from a projector tensor (below), which must equal the language model's",
        "input embedding width. `fixtures.json` has the same facts for the tests.",
        "",
        "When generated, every pair was checked against llama.cpp's own loader",
        "(`llama_model_load_from_file` + `mtmd_init_from_file` with warmup, llama.cpp as",
        "vendored by llama-cpp-python 0.3.36): the pairs marked as fitting load and encode a",
        "warmup image or audio chunk; the others fail with the error in the table.",
        "",
        "## Language models",
        "",
        "| file | imitates | arch | embedding_length | input width | bytes |",
        "|---|---|---|---|---|---|",
    ]
    for spec in LMS.values():
        inp = spec["n_embd"] * (1 + spec.get("n_deepstack", 0))
        lines.append(f"| `{spec['file']}` | {spec['imitates']} | `{spec['arch']}` | {spec['n_embd']} | "
                     f"{inp} | {sizes[spec['file']]} |")
    lines += [
        "",
        "## mmproj files",
        "",
        "| file | imitates | role | clip.projector_type | output width | from tensor | bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in mmprojs:
        pt = f"`{m['projector_type']}`" if m["projector_type"] else "(missing)"
        width = m["output_width"] if m["output_width"] is not None else "-"
        src = MMPROJ_TYPES_WIDTH.get(m["projector_type"], "-") if m["width_tensor"] else "-"
        role = m["role"] or "(none)"
        lines.append(f"| `{m['file']}` | {m['imitates']} | {role} | {pt} | {width} | {src} | "
                     f"{sizes[m['file']]} |")
    lines += [
        "",
        "## Pairs",
        "",
        "| pair | language model | mmproj | fits | why |",
        "|---|---|---|---|---|",
    ]
    for p in pairs:
        lines.append(f"| {p['name']} | `{p['lm']}` | {', '.join('`' + f + '`' for f in p['mmproj'])} | "
                     f"{'yes' if p['expect_fit'] else 'no'} | {p['note']} |")
    lines += [
        "",
        "## Scaled-down details",
        "",
        "- Widths, layer counts, vocabularies and position tables are small; the metadata",
        "  values describe the tiny model (e.g. `clip.vision.block_count` 2), except",
        "  `clip.vision.image_size` 560 for Qwen2.5-VL (the converter's default) and",
        "  `clip.audio.num_mel_bins` 128 (Whisper large-v3).",
        "- MiniCPM-V: `resampler.pos_embed_k` is a 4x4 sin-cos table (70x70 in real files),",
        "  16 queries instead of 64; the LM is 128 wide because clip.cpp's resampler graph",
        "  uses 128-wide heads.",
        "- Ultravox: `a.position_embd.weight` keeps Whisper's 1500 rows (clip.cpp's warmup",
        "  needs them), so the audio encoder is only 16 wide.",
        f"- Total size: {sum(sizes.values())} bytes in {len(sizes)} GGUF files.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    for spec in LMS.values():
        write_lm(out, spec)
    mmprojs, pairs = catalogue()
    for m in mmprojs:
        m["write"](out, m["file"], m["n_embd_text"], **m.get("kwargs", {}))

    files = {}
    for spec in LMS.values():
        files[spec["file"]] = {
            "role": "language", "architecture": spec["arch"], "imitates": spec["imitates"],
            "embedding_length": spec["n_embd"],
            "embedding_input_length": spec["n_embd"] * (1 + spec.get("n_deepstack", 0)),
        }
    for m in mmprojs:
        entry = {
            "role": m["role"], "architecture": "clip", "imitates": m["imitates"],
            "projector_type": m["projector_type"], "output_width": m["output_width"],
            "width_tensor": m["width_tensor"], "width_tensor_dim": m["width_dim"],
        }
        if "width_multiplier" in m:
            entry["width_multiplier"] = m["width_multiplier"]
        if "error" in m:
            entry["expected_error"] = m["error"]
        files[m["file"]] = entry
    doc = {
        "generator": "tests/multimodal/make_fixtures.py",
        "files": files,
        "pairs": pairs,
    }
    (out / "fixtures.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(out, mmprojs, pairs), encoding="utf-8")


if __name__ == "__main__":
    main()
