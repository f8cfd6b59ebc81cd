"""Writes the architecture-registry GGUF fixtures and their expectations.

usage: python3 tests/arch/make_fixtures.py [OUTDIR]

OUTDIR defaults to tests/data/arch. Writes one tiny GGUF per model family the
registry knows (language models, and the mmproj side of the multimodal ones),
a file with an architecture nobody knows (the generic fallback), a few broken
files a validator must reject naming the metadata key at fault, and
OUTDIR/fixtures.json describing all of them. Deterministic: rerunning rewrites
every file byte for byte (seeded noise, no timestamps, fixed order).

Each language model is shaped like what llama.cpp's converter writes for the
real model it imitates (llama.cpp as vendored by llama-cpp-python 0.3.36,
~/.cache/quantforge/refs/llama.cpp, conversion/*.py): the same
`general.architecture`, the metadata keys the converter writes, in its order
and with its value types (per-layer lists are INT32 arrays, as gguf-py writes
Python lists), the tensor names llama.cpp's `load_arch_tensors` asks for
(src/models/<arch>.cpp) with the same shape relations, and the ggml types of an
`--outtype f16` conversion (2-D and 3-D weights F16; norms, biases, 1-D
tensors, routers and LFM2's conv F32). Only the widths, layer counts and
vocabularies are tiny; free scalars (context length, RoPE base, epsilons,
softcaps, ...) keep the real model's values.

The mmproj files of the multimodal families (Qwen3-VL, SmolVLM2, MiniCPM-V,
Whisper/Ultravox) are written by tests/multimodal/make_fixtures.py's writers
(one home for mmproj shapes), with the projector output width of the language
model fixture they pair with.

tests/arch/verify_llama.py loads every language-model fixture with llama.cpp's
own loader (hyperparameters, vocabulary and every create_tensor shape check)
and compares what it reads with fixtures.json; see the notes in
docs/notes/arch-registry-research.md.

fixtures.json: {"generator", "conventions", "fixtures": [...]}; per fixture:

    file            file name in OUTDIR
    kind            "language" | "mmproj"
    family          what the registry should detect from this file alone
    handler         seed 000's handler name for that family
    architecture    general.architecture
    detected_by     which rule decides (see docs/notes/arch-registry-research.md)
    imitates        the real model the header is shaped after
    hparams         expected hyperparameters (null for mmproj and broken files)
    extra           further facts a descriptor should expose (per-layer arrays,
                    RoPE details, fused tensors, tied output, ...)
    error_key       broken files only: the metadata key the error must name
    llama_cpp       what llama.cpp's loader does with the file ("ok" or the
                    error text it fails with), checked by verify_llama.py

and "pairs": language model + mmproj pairs with whether they fit and what
mtmd_init_from_file says (checked by verify_llama.py --mtmd).
"""

import importlib.util
import json
import math
import sys
import zlib
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, RopeScalingType

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "data" / "arch"

F16 = np.float16
F32 = np.float32

# The multimodal fixture writers, loaded under their own name (both scripts are
# called make_fixtures.py).
_spec = importlib.util.spec_from_file_location(
    "multimodal_fixtures", REPO / "tests" / "multimodal" / "make_fixtures.py")
mm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mm)


def f32(x: float) -> float:
    """The float32 value a FLOAT32 key holds, as the f64 a reader widens it to."""
    return float(np.float32(x))


# ---------------------------------------------------------------------------
# writing helpers


class Model:
    """A GGUFWriter plus a seeded generator. Tensor shapes are given in ggml
    order (ne[0] first), as llama.cpp's create_tensor calls spell them."""

    def __init__(self, out: Path, file: str, arch: str):
        self.file = file
        self.arch = arch
        self.rng = np.random.default_rng(zlib.crc32(file.encode()))
        self.w = GGUFWriter(str(out / file), arch)
        self.tensors: list[tuple[str, list[int]]] = []

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def _add(self, name: str, ne: list[int], data: np.ndarray) -> None:
        self.tensors.append((name, list(ne)))
        self.w.add_tensor(name, data)

    def weight(self, name: str, ne: list[int], dtype=F16, scale=0.05) -> None:
        shape = tuple(reversed(ne))
        data = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)
        self._add(name, ne, data)

    def f32(self, name: str, ne: list[int], scale=0.01) -> None:
        self.weight(name, ne, F32, scale)

    def norm(self, name: str, n: int) -> None:
        data = (1.0 + 0.01 * self.rng.standard_normal((n,), dtype=np.float32)).astype(F32)
        self._add(name, [n], data)

    def raw(self, name: str, data: np.ndarray) -> None:
        self._add(name, list(reversed(data.shape)), data)

    def close(self) -> None:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def general(w: GGUFWriter, name: str, basename: str | None = None, finetune: str | None = None,
            version: str | None = None) -> None:
    """ModelBase.prepare_metadata: general.type, then Metadata.set_gguf_meta_model."""
    w.add_type("model")
    w.add_name(name)
    if version is not None:
        w.add_version(version)
    if finetune is not None:
        w.add_finetune(finetune)
    if basename is not None:
        w.add_basename(basename)


# Token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def spm_vocab(w: GGUFWriter, n_vocab: int, specials: list[str], ids: dict, add_bos=True,
              add_space_prefix: bool | None = None, pre: str = "default") -> None:
    """TextModel._set_vocab_sentencepiece: a SentencePiece ("llama") vocabulary.
    specials come first (their order fixes their ids), then byte tokens
    <0x00>..<0x1F> (llama.cpp looks up <0x0A> for the newline), then pieces."""
    tokens, types, scores = [], [], []
    for s in specials:
        tokens.append(s)
        types.append(UNKNOWN if s == "<unk>" else CONTROL)
        scores.append(0.0)
    for b in range(0x20):
        tokens.append(f"<0x{b:02X}>")
        types.append(BYTE)
        scores.append(0.0)
    pieces = ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "in", "er", "an", "\u2581s", "on"]
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(pieces[i] if i < len(pieces) else f"\u2581w{i}")
        types.append(NORMAL)
        scores.append(-float(i))
        i += 1
    assert len(tokens) == n_vocab
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for kind, tok in ids.items():
        getattr(w, f"add_{kind}_token_id")(tokens.index(tok))
    w.add_add_bos_token(add_bos)
    w.add_add_eos_token(False)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)


def bpe_vocab(w: GGUFWriter, n_vocab: int, pre: str, specials: list[str], ids: dict,
              add_bos: bool | None = None, chat_template: str | None = None) -> None:
    """TextModel._set_vocab_gpt2: a byte-level BPE ("gpt2") vocabulary, the
    model's special tokens at the end (tests/multimodal's tiny vocabulary)."""
    tokens, types = mm.vocab(n_vocab, [(s, CONTROL) for s in specials])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(mm.MERGES)
    for kind, tok in ids.items():
        getattr(w, f"add_{kind}_token_id")(tokens.index(tok))
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if chat_template is not None:
        w.add_chat_template(chat_template)


LLAMA2_SPECIALS = ["<unk>", "<s>", "</s>"]
LLAMA2_IDS = {"bos": "<s>", "eos": "</s>", "unk": "<unk>"}
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_IDS = {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"}
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_IDS = {"eos": "<|im_end|>", "pad": "<|endoftext|>", "bos": "<|endoftext|>"}
CHATML = mm.QWEN_TEMPLATE


# ---------------------------------------------------------------------------
# layer builders (shapes exactly as src/models/<arch>.cpp create_tensor asks)


def attn(m: Model, i: int, n_embd: int, n_q: int, n_kv: int, *, bias=False, out_bias=False) -> None:
    """create_tensor_qkv with separate Q/K/V (llama-model.cpp:3396), attn_output."""
    p = f"blk.{i}"
    m.weight(f"{p}.attn_q.weight", [n_embd, n_q])
    m.weight(f"{p}.attn_k.weight", [n_embd, n_kv])
    m.weight(f"{p}.attn_v.weight", [n_embd, n_kv])
    if bias:
        m.f32(f"{p}.attn_q.bias", [n_q])
        m.f32(f"{p}.attn_k.bias", [n_kv])
        m.f32(f"{p}.attn_v.bias", [n_kv])
    m.weight(f"{p}.attn_output.weight", [n_q, n_embd])
    if out_bias:
        m.f32(f"{p}.attn_output.bias", [n_embd])


def swiglu(m: Model, i: int, n_embd: int, n_ff: int) -> None:
    p = f"blk.{i}"
    m.weight(f"{p}.ffn_gate.weight", [n_embd, n_ff])
    m.weight(f"{p}.ffn_up.weight", [n_embd, n_ff])
    m.weight(f"{p}.ffn_down.weight", [n_ff, n_embd])


def experts(m: Model, i: int, n_embd: int, n_ff: int, n_expert: int) -> None:
    """Router (F32, never quantized) and stacked experts [.., .., n_expert]."""
    p = f"blk.{i}"
    m.f32(f"{p}.ffn_gate_inp.weight", [n_embd, n_expert], 0.05)
    m.weight(f"{p}.ffn_gate_exps.weight", [n_embd, n_ff, n_expert])
    m.weight(f"{p}.ffn_down_exps.weight", [n_ff, n_embd, n_expert])
    m.weight(f"{p}.ffn_up_exps.weight", [n_embd, n_ff, n_expert])


def base_params(m: Model, *, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv=None, rope_theta=None,
                rms_eps=None, norm_eps=None, n_expert=None, n_expert_used=None, head_dim=None,
                rope_scaling=None, mrope=None, rope_theta_swa=None) -> None:
    """TextModel.set_gguf_parameters (conversion/base.py:1434), in its order."""
    w = m.w
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    if n_head_kv is not None:
        w.add_head_count_kv(n_head_kv)
    if rope_scaling is not None:
        rope_scaling(w)
    if mrope is not None:
        w.add_rope_dimension_sections(mrope)
    if rope_theta is not None:
        w.add_rope_freq_base(rope_theta)
    if rope_theta_swa is not None:
        w.add_rope_freq_base_swa(rope_theta_swa)
    if rms_eps is not None:
        w.add_layer_norm_rms_eps(rms_eps)
    if norm_eps is not None:
        w.add_layer_norm_eps(norm_eps)
    if n_expert is not None:
        w.add_expert_count(n_expert)
    if n_expert_used is not None:
        w.add_expert_used_count(n_expert_used)
    if head_dim is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(1)  # MOSTLY_F16


def hp(*, n_embd, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx, n_ff, rope_theta, eps,
       n_expert=None, n_expert_used=None) -> dict:
    return {
        "embedding_length": n_embd,
        "block_count": n_layer,
        "head_count": n_head,
        "head_count_kv": n_head_kv,
        "head_dim": head_dim,
        "vocab_size": n_vocab,
        "context_length": n_ctx,
        "feed_forward_length": n_ff,
        "rope_freq_base": None if rope_theta is None else f32(rope_theta),
        "norm_epsilon": None if eps is None else f32(eps),
        "expert_count": n_expert,
        "expert_used_count": n_expert_used,
    }


V = 128  # vocabulary of every fixture


# ---------------------------------------------------------------------------
# language models


def llama_like(out: Path, file: str, *, name, basename=None, finetune=None, version=None, n_embd=32,
               n_head=4, n_head_kv=1, n_ff=64, n_layer=2, n_ctx=131072, rope_theta=500000.0,
               rms_eps=1e-5, vocab="bpe", pre="llama-bpe", specials=LLAMA3_SPECIALS, ids=LLAMA3_IDS,
               rope_freqs=False, n_expert=None, n_expert_used=None, tied=False, arch="llama",
               head_dim=None, extra_params=None) -> tuple[Model, dict]:
    """LlamaModel (conversion/llama.py:33) -> src/models/llama.cpp; also
    Mistral/Mixtral/SmolVLM2 (same class) and Ministral 3 (arch mistral3)."""
    m = Model(out, file, arch)
    hd = head_dim or n_embd // n_head
    general(m.w, name, basename, finetune, version)
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=rope_theta, rms_eps=rms_eps, n_expert=n_expert,
                n_expert_used=n_expert_used, head_dim=head_dim,
                rope_scaling=(extra_params or {}).get("rope_scaling"))
    m.w.add_vocab_size(V)  # LlamaModel.set_gguf_parameters
    m.w.add_rope_dimension_count(hd)
    if extra_params and "after" in extra_params:
        extra_params["after"](m.w)
    m.w.add_quantization_version(2)
    if vocab == "spm":
        spm_vocab(m.w, V, specials, ids)
    else:
        bpe_vocab(m.w, V, pre, specials, ids, add_bos=True)

    if rope_freqs:
        # generate_extra_tensors for rope_type llama3 (Llama 3.1+): n_rot/2 factors
        m.raw("rope_freqs.weight", mm.llama3_rope_freqs(hd, rope_theta))
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        if n_expert:
            experts(m, i, n_embd, n_ff, n_expert)
        else:
            swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    if not tied:
        m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=rope_theta, eps=rms_eps,
                 n_expert=n_expert, n_expert_used=n_expert_used)


def llama4(out: Path, file: str) -> tuple[Model, dict]:
    """Llama4Model (conversion/llama.py:379) -> src/models/llama4.cpp. Every
    n_moe_layer_step-th layer is MoE (16 routed experts + one shared expert of
    expert_feed_forward_length), the others dense with feed_forward_length."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_ff_exp, n_expert, n_layer = 32, 4, 2, 8, 64, 16, 16, 2
    m = Model(out, file, "llama4")
    general(m.w, "Llama 4 Maverick 17B 128E Instruct", "Llama-4", "Instruct")
    base_params(m, n_layer=n_layer, n_ctx=1048576, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=500000.0, rms_eps=1e-5, n_expert=n_expert,
                n_expert_used=1, head_dim=hd)
    m.w.add_vocab_size(V)
    m.w.add_rope_dimension_count(hd)
    m.w.add_interleave_moe_layer_step(2)
    m.w.add_expert_feed_forward_length(n_ff_exp)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "llama4", ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"],
              {"bos": "<|begin_of_text|>", "eos": "<|eot|>"}, add_bos=True)
    m.raw("rope_freqs.weight", mm.llama3_rope_freqs(hd, 500000.0, factor=16.0))
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        if (i + 1) % 2 == 0:  # is_moe_layer (llama4.cpp:62)
            experts(m, i, n_embd, n_ff_exp, n_expert)
            m.weight(f"{p}.ffn_gate_shexp.weight", [n_embd, n_ff_exp])
            m.weight(f"{p}.ffn_down_shexp.weight", [n_ff_exp, n_embd])
            m.weight(f"{p}.ffn_up_shexp.weight", [n_embd, n_ff_exp])
        else:
            swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=1048576, n_ff=n_ff, rope_theta=500000.0, eps=1e-5,
                 n_expert=n_expert, n_expert_used=1)


def gemma2(out: Path, file: str) -> tuple[Model, dict]:
    """Gemma2Model (conversion/gemma.py:76, its own key order, no RoPE base)
    -> src/models/gemma2.cpp. Tied output; head_dim 16 while 32/4 = 8, as the
    real 2B has 256 while 2304/8 = 288."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_layer, n_ctx = 32, 4, 2, 16, 64, 2, 8192
    m = Model(out, file, "gemma2")
    w = m.w
    general(w, "Gemma 2 2b It", "gemma-2", "it")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_file_type(1)
    w.add_attn_logit_softcapping(50.0)
    w.add_final_logit_softcapping(30.0)
    w.add_sliding_window(4096)
    w.add_quantization_version(2)
    spm_vocab(w, V, ["<pad>", "<eos>", "<bos>", "<unk>"],
              {"bos": "<bos>", "eos": "<eos>", "unk": "<unk>", "pad": "<pad>"}, add_space_prefix=False)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd)
        m.norm(f"{p}.post_attention_norm.weight", n_embd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
        m.norm(f"{p}.post_ffw_norm.weight", n_embd)
    m.norm("output_norm.weight", n_embd)
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=None, eps=1e-6)


def gemma3(out: Path, file: str) -> tuple[Model, dict]:
    """Gemma3Model (conversion/gemma.py:128) -> src/models/gemma3.cpp; keys in
    the order of the real models/gemma-f16.gguf (Gemma 3 270M). Tied output,
    per-head q/k norms, head_dim 16 while 32/4 = 8 (real: 256 vs 640/4)."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_layer, n_ctx = 32, 4, 1, 16, 64, 2, 32768
    m = Model(out, file, "gemma3")
    w = m.w
    general(w, "Gemma 3 270m", "gemma-3")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1000000.0)
    w.add_sliding_window(512)
    w.add_head_count_kv(n_head_kv)
    w.add_file_type(1)
    w.add_quantization_version(2)
    spm_vocab(w, V, ["<pad>", "<eos>", "<bos>", "<unk>"],
              {"bos": "<bos>", "eos": "<eos>", "unk": "<unk>", "pad": "<pad>"}, add_space_prefix=False)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd)
        m.norm(f"{p}.attn_q_norm.weight", hd)
        m.norm(f"{p}.attn_k_norm.weight", hd)
        m.norm(f"{p}.post_attention_norm.weight", n_embd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
        m.norm(f"{p}.post_ffw_norm.weight", n_embd)
    m.norm("output_norm.weight", n_embd)
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=1000000.0, eps=1e-6)


def phi3(out: Path, file: str) -> tuple[Model, dict]:
    """Phi3MiniModel (conversion/phi.py:41, its own key order) ->
    src/models/phi3.cpp. Fused attn_qkv [n_embd, n_embd + 2*n_embd_gqa] and
    fused gate+up in ffn_up [n_embd, 2*n_ff]; the 128k variant's LongRoPE
    factors rope_factors_{long,short} [n_rot/2]."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx, n_ctx_orig = 32, 4, 4, 64, 2, 131072, 4096
    hd = n_embd // n_head
    m = Model(out, file, "phi3")
    w = m.w
    general(w, "Phi 3 Mini 128k Instruct", "Phi-3", "instruct")
    w.add_context_length(n_ctx)
    w.add_rope_scaling_orig_ctx_len(n_ctx_orig)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(1)
    w.add_sliding_window(262144)
    scale = n_ctx / n_ctx_orig
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(n_ctx_orig)))
    w.add_quantization_version(2)
    spm_vocab(w, V, ["<unk>", "<s>", "</s>"], {"bos": "<s>", "eos": "</s>", "unk": "<unk>"}, add_bos=False)
    long = np.linspace(1.0, 8.0, hd // 2, dtype=F32)
    m.raw("rope_factors_long.weight", long)
    m.raw("rope_factors_short.weight", np.ones(hd // 2, dtype=F32))
    m.weight("token_embd.weight", [n_embd, V])
    n_kv = n_head_kv * hd
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        m.weight(f"{p}.attn_qkv.weight", [n_embd, n_embd + 2 * n_kv])
        m.weight(f"{p}.attn_output.weight", [n_embd, n_embd])
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        m.weight(f"{p}.ffn_up.weight", [n_embd, 2 * n_ff])
        m.weight(f"{p}.ffn_down.weight", [n_ff, n_embd])
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=10000.0, eps=1e-5)


def chatglm(out: Path, file: str) -> tuple[Model, dict]:
    """ChatGLMModel (conversion/chatglm.py, GLM-4-9B-chat / ChatGLM3 layout)
    -> src/models/chatglm.cpp: fused attn_qkv with bias, fused gate+up in
    ffn_up [n_embd, 2*n_ff], half-width RoPE (rope.dimension_count = head/2),
    tokenizer.ggml.add_bos_token written among the model parameters."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 32, 4, 1, 64, 2, 131072
    hd = n_embd // n_head
    m = Model(out, file, "chatglm")
    w = m.w
    general(w, "Glm 4 9b Chat", "glm-4", "chat")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1.5625e-07)
    w.add_file_type(1)
    w.add_rope_dimension_count(int(hd * 0.5))
    w.add_add_bos_token(False)
    w.add_rope_freq_base(10000.0 * 500)  # rope_ratio 500
    w.add_quantization_version(2)
    bpe_vocab(w, V, "chatglm-bpe", ["<|endoftext|>", "[gMASK]", "<sop>", "<|user|>", "<|assistant|>"],
              {"eos": "<|endoftext|>", "eot": "<|user|>", "unk": "<|endoftext|>"})
    m.weight("token_embd.weight", [n_embd, V])
    n_qkv = n_embd + 2 * n_head_kv * hd
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        m.weight(f"{p}.attn_qkv.weight", [n_embd, n_qkv])
        m.f32(f"{p}.attn_qkv.bias", [n_qkv])
        m.weight(f"{p}.attn_output.weight", [n_embd, n_embd])
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        m.weight(f"{p}.ffn_up.weight", [n_embd, 2 * n_ff])
        m.weight(f"{p}.ffn_down.weight", [n_ff, n_embd])
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=5000000.0, eps=1.5625e-07)


def glm4(out: Path, file: str) -> tuple[Model, dict]:
    """Glm4Model (conversion/glm.py:19, GLM-4-9B-0414) -> src/models/glm4.cpp:
    separate Q/K/V with biases, post-attention and post-FFN norms, fused
    gate+up in ffn_up [n_embd, 2*n_ff], half-width RoPE."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_layer, n_ctx = 32, 4, 1, 8, 64, 2, 32768
    m = Model(out, file, "glm4")
    general(m.w, "GLM 4 9B 0414", "GLM-4", version="0414")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=10000.0, rms_eps=1e-5, head_dim=hd)
    m.w.add_rope_dimension_count(int(hd * 0.5))
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "glm4", ["<|endoftext|>", "[gMASK]", "<sop>", "<|user|>", "<|assistant|>"],
              {"eos": "<|endoftext|>", "eot": "<|user|>", "unk": "<|endoftext|>", "bos": "<|endoftext|>"})
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd, bias=True)
        m.norm(f"{p}.post_attention_norm.weight", n_embd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        m.weight(f"{p}.ffn_up.weight", [n_embd, 2 * n_ff])
        m.weight(f"{p}.ffn_down.weight", [n_ff, n_embd])
        m.norm(f"{p}.post_ffw_norm.weight", n_embd)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=10000.0, eps=1e-5)


def granite(out: Path, file: str) -> tuple[Model, dict]:
    """GraniteModel (conversion/granite.py:19, a LlamaModel) ->
    src/models/granite.cpp, which requires granite.logit_scale; tied output."""
    def after(w):
        w.add_attention_scale(0.015625)
        w.add_embedding_scale(12.0)
        w.add_residual_scale(0.22)
        w.add_logit_scale(8.0)
    return llama_like(out, file, arch="granite", name="Granite 3.3 2b Instruct", basename="granite-3.3",
                      finetune="instruct", n_ctx=131072, rope_theta=10000000.0, pre="refact",
                      specials=["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>"],
                      ids={"bos": "<|end_of_text|>", "eos": "<|end_of_text|>", "pad": "<|end_of_text|>"},
                      tied=True, extra_params={"after": after})


LFM2_LAYER_TYPES = ["conv", "conv", "full_attention", "conv"]


def lfm2(out: Path, file: str) -> tuple[Model, dict]:
    """LFM2Model (conversion/lfm2.py:17) -> src/models/lfm2.cpp. Hybrid: a
    layer whose head_count_kv entry is 0 is a short-convolution layer
    (shortconv.conv [l_cache, n_embd], in_proj [n_embd, 3*n_embd], out_proj);
    the others are attention layers with per-head q/k norms. The final norm is
    stored as token_embd_norm (LLM_TENSOR_OUTPUT_NORM_LFM2). Tied output."""
    n_embd, n_head, n_kv, n_ff, l_cache, n_ctx = 32, 4, 2, 64, 3, 128000
    n_layer = len(LFM2_LAYER_TYPES)
    hd = n_embd // n_head
    kv_arr = [n_kv if t != "conv" else 0 for t in LFM2_LAYER_TYPES]
    m = Model(out, file, "lfm2")
    w = m.w
    general(w, "LFM2 350M", "LFM2")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=kv_arr, rope_theta=1000000.0, rms_eps=1e-5)
    w.add_vocab_size(V)
    w.add_shortconv_l_cache(l_cache)
    w.add_quantization_version(2)
    bpe_vocab(w, V, "lfm2", ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              {"bos": "<|startoftext|>", "eos": "<|im_end|>", "pad": "<|pad|>"}, add_bos=True)
    m.weight("token_embd.weight", [n_embd, V])
    for i, t in enumerate(LFM2_LAYER_TYPES):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)  # operator_norm
        if t == "conv":
            m.f32(f"{p}.shortconv.conv.weight", [l_cache, n_embd], 0.05)
            m.weight(f"{p}.shortconv.in_proj.weight", [n_embd, 3 * n_embd])
            m.weight(f"{p}.shortconv.out_proj.weight", [n_embd, n_embd])
        else:
            attn(m, i, n_embd, n_embd, n_kv * hd)
            m.norm(f"{p}.attn_q_norm.weight", hd)
            m.norm(f"{p}.attn_k_norm.weight", hd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
    m.norm("token_embd_norm.weight", n_embd)
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=kv_arr[0], head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=1000000.0, eps=1e-5)


def nemotron(out: Path, file: str) -> tuple[Model, dict]:
    """NemotronModel (conversion/nemotron.py:157, Minitron-4B) ->
    src/models/nemotron.cpp: LayerNorm with bias (norm weights +1), squared-ReLU
    FFN without gate, partial RoPE (rope.dimension_count = 0.5 * head), output
    required. The converter writes norm_eps twice: as layer_norm_rms_epsilon
    (base.py) and as layer_norm_epsilon (the one llama.cpp reads)."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 32, 4, 2, 64, 2, 4096
    hd = n_embd // n_head
    m = Model(out, file, "nemotron")
    w = m.w
    general(w, "Minitron 4B Base", "Minitron", "Base")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=10000.0, rms_eps=1e-5)
    w.add_vocab_size(V)
    w.add_layer_norm_eps(1e-5)
    w.add_rope_dimension_count(int(0.5 * n_embd) // n_head)
    w.add_rope_scaling_type(RopeScalingType.NONE)
    w.add_quantization_version(2)
    spm_vocab(w, V, ["<pad>", "<unk>", "<s>", "</s>"], {"bos": "<s>", "eos": "</s>"})
    w.add_pad_token_id(0)  # NemotronModel.set_vocab
    w.add_unk_token_id(1)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        m.f32(f"{p}.attn_norm.bias", [n_embd])
        attn(m, i, n_embd, n_embd, n_head_kv * hd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        m.f32(f"{p}.ffn_norm.bias", [n_embd])
        m.weight(f"{p}.ffn_up.weight", [n_embd, n_ff])
        m.weight(f"{p}.ffn_down.weight", [n_ff, n_embd])
    m.norm("output_norm.weight", n_embd)
    m.f32("output_norm.bias", [n_embd])
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=10000.0, eps=1e-5)


def olmo(out: Path, file: str) -> tuple[Model, dict]:
    """OlmoModel (conversion/olmo.py:18, OLMo-1.7-7B-hf) -> src/models/olmo.cpp:
    non-parametric LayerNorm, so not a single norm tensor; layer_norm_epsilon
    and clamp_kqv; Q/K permuted like LLaMA."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 32, 4, 4, 64, 2, 4096
    hd = n_embd // n_head
    m = Model(out, file, "olmo")
    w = m.w
    general(w, "OLMo 1.7 7B Hf", "OLMo-1.7")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=10000.0)
    w.add_layer_norm_eps(1e-5)
    w.add_clamp_kqv(8.0)
    w.add_quantization_version(2)
    bpe_vocab(w, V, "olmo", ["<|endoftext|>", "<|padding|>"],
              {"eos": "<|endoftext|>", "pad": "<|padding|>"})
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        attn(m, i, n_embd, n_embd, n_head_kv * hd)
        swiglu(m, i, n_embd, n_ff)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=10000.0, eps=1e-5)


def olmo2(out: Path, file: str) -> tuple[Model, dict]:
    """Olmo2Model (conversion/olmo.py:51) -> src/models/olmo2.cpp: post-norm
    blocks (no attn_norm/ffn_norm), attn_q_norm over the whole width [n_embd],
    attn_k_norm over n_head_kv * (n_embd / n_head); output required."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 32, 4, 2, 64, 2, 4096
    hd = n_embd // n_head
    m = Model(out, file, "olmo2")
    general(m.w, "OLMo 2 1124 7B Instruct", "OLMo-2-1124", "Instruct")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=500000.0, rms_eps=1e-6)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "dbrx", ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"],
              {"eos": "<|endoftext|>", "pad": "<|pad|>", "bos": "<|endoftext|>"})
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        attn(m, i, n_embd, n_embd, n_head_kv * hd)
        m.norm(f"{p}.attn_q_norm.weight", n_embd)
        m.norm(f"{p}.attn_k_norm.weight", n_head_kv * hd)
        m.norm(f"{p}.post_attention_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
        m.norm(f"{p}.post_ffw_norm.weight", n_embd)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=500000.0, eps=1e-6)


OPENELM = dict(n_embd=40, head_dim=16, q_heads=[3, 4, 5], kv_heads=[1, 2, 5], ffn=[48, 64, 80])


def openelm(out: Path, file: str) -> tuple[Model, dict]:
    """OpenELMModel (conversion/openelm.py, its own key order) ->
    src/models/openelm.cpp: head_count, head_count_kv and feed_forward_length
    are per-layer INT32 arrays; key_length fixes the head size (40 is not a
    multiple of 3 heads, as 1280 is not of OpenELM-270M's 12); fused attn_qkv
    [n_embd, (n_head(i) + 2*n_head_kv(i)) * head_dim] per layer; tied output."""
    c = OPENELM
    n_embd, hd = c["n_embd"], c["head_dim"]
    n_layer = len(c["q_heads"])
    m = Model(out, file, "openelm")
    w = m.w
    general(w, "OpenELM 270M Instruct", "OpenELM", "Instruct")
    w.add_block_count(n_layer)
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["q_heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(hd)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_file_type(1)
    w.add_quantization_version(2)
    spm_vocab(w, V, LLAMA2_SPECIALS, LLAMA2_IDS)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        q, kv, ff = c["q_heads"][i], c["kv_heads"][i], c["ffn"][i]
        m.norm(f"{p}.attn_norm.weight", n_embd)
        m.weight(f"{p}.attn_qkv.weight", [n_embd, (q + 2 * kv) * hd])
        m.norm(f"{p}.attn_q_norm.weight", hd)
        m.norm(f"{p}.attn_k_norm.weight", hd)
        m.weight(f"{p}.attn_output.weight", [q * hd, n_embd])
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, ff)
    m.norm("output_norm.weight", n_embd)
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=c["q_heads"][0], n_head_kv=c["kv_heads"][0],
                 head_dim=hd, n_vocab=V, n_ctx=2048, n_ff=c["ffn"][0], rope_theta=10000.0, eps=1e-6)


def qwen2(out: Path, file: str) -> tuple[Model, dict]:
    """Qwen2Model (conversion/qwen.py:57, Qwen2.5-7B-Instruct) ->
    src/models/qwen2.cpp: Q/K/V biases, untied output."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 32, 4, 1, 64, 2, 32768
    hd = n_embd // n_head
    m = Model(out, file, "qwen2")
    general(m.w, "Qwen2.5 7B Instruct", "Qwen2.5", "Instruct")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=1000000.0, rms_eps=1e-6)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "qwen2", QWEN_SPECIALS, QWEN_IDS, add_bos=False, chat_template=CHATML)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_embd, n_head_kv * hd, bias=True)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=1000000.0, eps=1e-6)


def qwen3_like(out: Path, file: str, arch: str, *, name, basename, n_ctx, rope_theta, mrope=None,
               n_deepstack=None, mrope_override=None) -> tuple[Model, dict]:
    """Qwen3Model (conversion/qwen.py:161) -> src/models/qwen3.cpp, and
    Qwen3VLTextModel (conversion/qwen3vl.py:282) -> src/models/qwen3vl.cpp:
    explicit head_dim (16 while 32/4 = 8; Qwen3-0.6B: 128 while 1024/16 = 64),
    per-head q/k norms, tied output; qwen3vl adds rope.dimension_sections
    (required) and n_deepstack_layers."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_layer = 32, 4, 2, 16, 64, 2
    m = Model(out, file, arch)
    general(m.w, name, basename)
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=rope_theta, rms_eps=1e-6, head_dim=hd,
                mrope=mrope_override or mrope)
    if n_deepstack is not None:
        m.w.add_num_deepstack_layers(n_deepstack)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "qwen2", QWEN_SPECIALS + ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"],
              QWEN_IDS, add_bos=False, chat_template=CHATML)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_head * hd, n_head_kv * hd)
        m.norm(f"{p}.attn_k_norm.weight", hd)
        m.norm(f"{p}.attn_q_norm.weight", hd)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=rope_theta, eps=1e-6)


QWEN3VL_SECTIONS = [3, 3, 2, 0]  # sums to head_dim / 2 = 8, like [24, 20, 20, 0] for 128


def minicpmv_lm(out: Path, file: str) -> tuple[Model, dict]:
    """MiniCPM-V 2.6's language model as minicpmv-surgery.py extracts it and
    Qwen2Model converts it (arch qwen2). 128 wide because clip.cpp's resampler
    graph uses 128-wide heads, so the projector output is a multiple of 128."""
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = 128, 4, 1, 32, 1, 32768
    hd = n_embd // n_head
    m = Model(out, file, "qwen2")
    general(m.w, "MiniCPM V 2_6", "MiniCPM-V")
    base_params(m, n_layer=n_layer, n_ctx=n_ctx, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                n_head_kv=n_head_kv, rope_theta=1000000.0, rms_eps=1e-6)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "qwen2", QWEN_SPECIALS + ["<image>", "</image>", "<slice>", "</slice>"],
              QWEN_IDS, add_bos=False, chat_template=CHATML)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_embd, n_head_kv * hd, bias=True)
        m.norm(f"{p}.ffn_norm.weight", n_embd)
        swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=hd,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=1000000.0, eps=1e-6)


def unknown_arch(out: Path, file: str) -> tuple[Model, dict]:
    """An architecture string neither llama.cpp nor the registry knows: the
    generic fallback must keep every tensor under its raw name. Standard
    `ARCH.*` keys are present, so generic hyperparameter reading still works;
    the per-block tensors are not llama.cpp's usual names."""
    arch = "tinyformer"
    n_embd, n_head, n_ff, n_layer, n_ctx = 32, 4, 64, 2, 2048
    m = Model(out, file, arch)
    w = m.w
    general(w, "Tinyformer 1M (made up)", "Tinyformer")
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-5)
    w.add_uint32(f"{arch}.mixer.state_size", 16)
    w.add_file_type(1)
    w.add_quantization_version(2)
    spm_vocab(w, V, LLAMA2_SPECIALS, LLAMA2_IDS)
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        p = f"blk.{i}"
        m.norm(f"{p}.norm.weight", n_embd)
        m.weight(f"{p}.mixer.in_proj.weight", [n_embd, 3 * n_embd])
        m.f32(f"{p}.mixer.decay", [16, n_embd])
        m.weight(f"{p}.mixer.out_proj.weight", [n_embd, n_embd])
        m.weight(f"{p}.mlp.fc1.weight", [n_embd, n_ff])
        m.weight(f"{p}.mlp.fc2.weight", [n_ff, n_embd])
    m.norm("final_norm.weight", n_embd)
    m.weight("lm_head.weight", [n_embd, V])
    m.close()
    return m, hp(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head, head_dim=n_embd // n_head,
                 n_vocab=V, n_ctx=n_ctx, n_ff=n_ff, rope_theta=None, eps=1e-5)


# ---------------------------------------------------------------------------
# broken files


def broken_llama3(out: Path, file: str, edited: str, *, n_layer=2, n_head=4, n_head_kv=1,
                  n_kv=8) -> Model:
    """LLaMA 3 tensors (width 32, heads of 8, `n_kv` K and V rows, 2 blocks)
    under metadata with one hyperparameter edited to disagree with them."""
    m = Model(out, file, "llama")
    general(m.w, f"Llama 3.1 8B Instruct, {edited} edited", "Llama-3.1")
    base_params(m, n_layer=n_layer, n_ctx=131072, n_embd=32, n_ff=64, n_head=n_head, n_head_kv=n_head_kv,
                rope_theta=500000.0, rms_eps=1e-5)
    m.w.add_vocab_size(V)
    m.w.add_rope_dimension_count(8)
    m.w.add_quantization_version(2)
    bpe_vocab(m.w, V, "llama-bpe", LLAMA3_SPECIALS, LLAMA3_IDS, add_bos=True)
    llama_body(m, n_embd=32, n_q=32, n_kv=n_kv, n_ff=64, n_layer=2)
    return m


def broken_head_count(out: Path, file: str) -> Model:
    """Metadata claims 5 heads: 5 does not divide the width 32 and there is
    no key_length to say otherwise."""
    return broken_llama3(out, file, "head count", n_head=5)


def broken_head_count_kv(out: Path, file: str) -> Model:
    """4 heads with 3 KV heads: 3 does not divide 4 (attn_k is sized for 2)."""
    return broken_llama3(out, file, "KV head count", n_head_kv=3, n_kv=16)


def broken_block_count(out: Path, file: str) -> Model:
    """block_count 3, but the tensors stop at blk.1."""
    return broken_llama3(out, file, "block count", n_layer=3)


def broken_expert_count(out: Path, file: str) -> Model:
    """Mixtral header claiming 8 experts over expert tensors (and routers) of 4."""
    m = Model(out, file, "llama")
    general(m.w, "Mixtral 8x7B Instruct v0.1, expert count edited", "Mixtral", "Instruct", "v0.1")
    base_params(m, n_layer=2, n_ctx=32768, n_embd=32, n_ff=16, n_head=4, n_head_kv=1,
                rope_theta=1000000.0, rms_eps=1e-5, n_expert=8, n_expert_used=2)
    m.w.add_vocab_size(V)
    m.w.add_rope_dimension_count(8)
    m.w.add_quantization_version(2)
    spm_vocab(m.w, V, LLAMA2_SPECIALS, LLAMA2_IDS)
    llama_body(m, n_embd=32, n_q=32, n_kv=8, n_ff=16, n_layer=2, n_expert=4)
    return m


def llama_body(m: Model, *, n_embd, n_q, n_kv, n_ff, n_layer, n_expert=None) -> None:
    m.weight("token_embd.weight", [n_embd, V])
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", n_embd)
        attn(m, i, n_embd, n_q, n_kv)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        if n_expert:
            experts(m, i, n_embd, n_ff, n_expert)
        else:
            swiglu(m, i, n_embd, n_ff)
    m.norm("output_norm.weight", n_embd)
    m.weight("output.weight", [n_embd, V])
    m.close()


# ---------------------------------------------------------------------------
# the catalogue


def lm(family, handler, detected_by, imitates, build, extra=None, **more):
    return dict(kind="language", family=family, handler=handler, detected_by=detected_by,
                imitates=imitates, build=build, extra=extra or {}, **more)


def catalogue():
    L = []
    L.append(lm("llama", "LLaMA", "architecture",
                "meta-llama/Llama-2-7b-hf (arch llama: 32 layers, n_embd 4096, 32 heads = 32 KV heads, "
                "SentencePiece vocabulary, no rope_freqs); LLaMA 1 differs only in ctx 2048 and eps 1e-6",
                lambda o, f: llama_like(o, f, name="Llama 2 7b Hf", basename="Llama-2", n_head_kv=4,
                                        n_ctx=4096, rope_theta=10000.0, vocab="spm",
                                        specials=LLAMA2_SPECIALS, ids=LLAMA2_IDS),
                file="llama2.gguf"))
    L.append(lm("llama", "LLaMA", "architecture",
                "meta-llama/Llama-3.1-8B-Instruct (arch llama: 32 layers, n_embd 4096, 32 heads, 8 KV heads, "
                "rope_freqs.weight from rope_type llama3, byte-level BPE llama-bpe)",
                lambda o, f: llama_like(o, f, name="Meta Llama 3.1 8B Instruct", basename="Meta-Llama-3.1",
                                        finetune="Instruct", rope_freqs=True),
                extra={"rope_freqs": True}, file="llama3.gguf"))
    L.append(lm("llama4", "Llama4", "architecture",
                "meta-llama/Llama-4-Maverick-17B-128E-Instruct text model (arch llama4: MoE every 2nd layer, "
                "routed experts + 1 shared expert of expert_feed_forward_length, dense layers of "
                "feed_forward_length, head_dim 128, rope_freqs); 16 experts as in Scout",
                llama4, file="llama4.gguf",
                extra={"interleave_moe_layer_step": 2, "expert_feed_forward_length": 16,
                       "moe_layers": [1], "expert_shared": True, "rope_freqs": True}))
    L.append(lm("mistral", "Mistral", "architecture+name",
                "mistralai/Mistral-7B-Instruct-v0.3 (MistralForCausalLM -> LlamaModel -> arch llama: "
                "32 layers, n_embd 4096, 8 KV heads, rope 1e6, SentencePiece 32768)",
                lambda o, f: llama_like(o, f, name="Mistral 7B Instruct v0.3", basename="Mistral",
                                        finetune="Instruct", version="v0.3", n_ctx=32768,
                                        rope_theta=1000000.0, vocab="spm", specials=LLAMA2_SPECIALS,
                                        ids=LLAMA2_IDS),
                file="mistral.gguf", family_by_architecture_only="llama"))

    def ministral_after(w):
        w.add_rope_scaling_yarn_log_mul(1.0)
        w.add_attn_temperature_scale(0.1)

    def ministral_yarn(w):
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(16.0)
        w.add_rope_scaling_orig_ctx_len(16384)
        w.add_rope_scaling_yarn_beta_fast(32.0)
        w.add_rope_scaling_yarn_beta_slow(1.0)

    L.append(lm("mistral", "Mistral", "architecture",
                "mistralai/Ministral-3-3B-Instruct (Mistral3Model.Ministral3Model -> arch mistral3: YaRN "
                "x16 from 16384, attention temperature scale, head_dim 128 > 3072/32, tied output, tekken)",
                lambda o, f: llama_like(o, f, arch="mistral3", name="Ministral 3 3B Instruct 2512",
                                        basename="Ministral-3", finetune="Instruct", n_ctx=262144,
                                        rope_theta=1000000.0, head_dim=16, pre="tekken",
                                        specials=["<unk>", "<s>", "</s>"],
                                        ids={"bos": "<s>", "eos": "</s>", "unk": "<unk>"}, tied=True,
                                        extra_params={"rope_scaling": ministral_yarn, "after": ministral_after}),
                file="mistral3.gguf",
                extra={"rope_scaling": {"type": "yarn", "factor": 16.0, "original_context_length": 16384}}))
    L.append(lm("mixtral", "Mistral", "architecture+expert_count",
                "mistralai/Mixtral-8x7B-Instruct-v0.1 (MixtralForCausalLM -> LlamaModel -> arch llama with "
                "expert_count 8, expert_used_count 2, stacked ffn_*_exps, router ffn_gate_inp)",
                lambda o, f: llama_like(o, f, name="Mixtral 8x7B Instruct v0.1", basename="Mixtral",
                                        finetune="Instruct", version="v0.1", n_ff=16, n_ctx=32768,
                                        rope_theta=1000000.0, vocab="spm", specials=LLAMA2_SPECIALS,
                                        ids=LLAMA2_IDS, n_expert=8, n_expert_used=2),
                file="mixtral.gguf", family_by_architecture_only="llama"))
    L.append(lm("gemma2", "Gemma", "architecture",
                "google/gemma-2-2b-it (arch gemma2: 26 layers, n_embd 2304, 8 heads, 4 KV heads, head_dim 256, "
                "softcaps 50/30, sliding window 4096, tied output, no rope.freq_base key)",
                gemma2, file="gemma2.gguf",
                extra={"tied_output": True, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
                       "final_logit_softcapping": 30.0}))
    L.append(lm("gemma3", "Gemma", "architecture",
                "google/gemma-3-270m (arch gemma3: 18 layers, n_embd 640, 4 heads, 1 KV head, head_dim 256, "
                "sliding window 512, tied output); same key order as models/gemma-f16.gguf",
                gemma3, file="gemma3.gguf", extra={"tied_output": True, "sliding_window": 512}))
    L.append(lm("phi3", "Phi", "architecture",
                "microsoft/Phi-3-mini-128k-instruct (arch phi3: fused attn_qkv, fused gate+up in ffn_up, "
                "LongRoPE rope_factors_long/short, original context 4096)",
                phi3, file="phi3.gguf",
                extra={"fused_qkv": True, "fused_gate_up": True, "rope_factors": ["rope_factors_long.weight",
                                                                                 "rope_factors_short.weight"],
                       "rope_dimension_count": 8, "sliding_window": 262144}))
    L.append(lm("chatglm", "GLM", "architecture",
                "zai-org/glm-4-9b-chat (ChatGLMModel -> arch chatglm: fused attn_qkv with bias, fused "
                "gate+up, 2 KV groups of 32 heads, half-width RoPE, rope_ratio 500)",
                chatglm, file="chatglm.gguf",
                extra={"fused_qkv": True, "qkv_bias": True, "fused_gate_up": True, "rope_dimension_count": 4}))
    L.append(lm("glm4", "GLM", "architecture",
                "zai-org/GLM-4-9B-0414 (Glm4Model -> arch glm4: Q/K/V biases, post-attention and post-FFN "
                "norms, fused gate+up, half-width RoPE)",
                glm4, file="glm4.gguf",
                extra={"fused_gate_up": True, "qkv_bias": True, "rope_dimension_count": 4}))
    L.append(lm("granite", "Granite", "architecture",
                "ibm-granite/granite-3.3-2b-instruct (GraniteModel -> arch granite: LLaMA tensors plus "
                "attention/embedding/residual/logit scales; logit_scale is required by llama.cpp)",
                granite, file="granite.gguf",
                extra={"tied_output": True, "logit_scale": 8.0, "attention_scale": 0.015625,
                       "embedding_scale": 12.0, "residual_scale": f32(0.22)}))
    L.append(lm("lfm2", "LFM2", "architecture",
                "LiquidAI/LFM2-350M (arch lfm2: hybrid of short-convolution and attention layers, chosen per "
                "layer by head_count_kv[i] == 0; final norm named token_embd_norm; tied output)",
                lfm2, file="lfm2.gguf",
                extra={"per_layer": {"head_count_kv": [2 if t != "conv" else 0 for t in LFM2_LAYER_TYPES]},
                       "layer_types": LFM2_LAYER_TYPES, "shortconv_l_cache": 3, "tied_output": True,
                       "output_norm": "token_embd_norm.weight"}))
    L.append(lm("nemotron", "Nemotron", "architecture",
                "nvidia/Minitron-4B-Base (arch nemotron: LayerNorm with bias, ReLU^2 FFN without gate, "
                "partial RoPE 0.5)",
                nemotron, file="nemotron.gguf",
                extra={"rope_dimension_count": 4, "norm": "layernorm", "ffn": "up_down"}))
    L.append(lm("olmo", "OLMo", "architecture",
                "allenai/OLMo-1.7-7B-hf (arch olmo: no norm tensors at all, layer_norm_epsilon, clamp_kqv 8)",
                olmo, file="olmo.gguf", extra={"norm": "non-parametric", "clamp_kqv": 8.0}))
    L.append(lm("olmo2", "OLMo", "architecture",
                "allenai/OLMo-2-1124-7B-Instruct (arch olmo2: post-norm blocks, q_norm over n_embd, k_norm "
                "over n_head_kv * head_dim); GQA here (OLMo 2 32B has it, 7B is MHA)",
                olmo2, file="olmo2.gguf", extra={"attn_q_norm_width": 32, "attn_k_norm_width": 16}))
    L.append(lm("openelm", "OpenELM", "architecture",
                "apple/OpenELM-270M-Instruct (arch openelm: per-layer head counts and FFN widths as INT32 "
                "arrays, fused attn_qkv per layer, key_length 64 while 1280/12 is not whole, tied output)",
                openelm, file="openelm.gguf",
                extra={"per_layer": {"head_count": OPENELM["q_heads"], "head_count_kv": OPENELM["kv_heads"],
                                     "feed_forward_length": OPENELM["ffn"]},
                       "fused_qkv": True, "tied_output": True}))
    L.append(lm("qwen2", "Qwen", "architecture",
                "Qwen/Qwen2.5-7B-Instruct (arch qwen2: Q/K/V biases, 7 heads per KV head, untied output)",
                qwen2, file="qwen2.gguf", extra={"qkv_bias": True}))
    L.append(lm("qwen3", "Qwen", "architecture",
                "Qwen/Qwen3-0.6B (arch qwen3: head_dim 128 while 1024/16 = 64, per-head q/k norms, tied)",
                lambda o, f: qwen3_like(o, f, "qwen3", name="Qwen3 0.6B", basename="Qwen3", n_ctx=40960,
                                        rope_theta=1000000.0),
                file="qwen3.gguf", extra={"tied_output": True}))
    L.append(lm("qwen3vl", "Qwen3VL", "architecture",
                "Qwen/Qwen3-VL-4B-Instruct text model (arch qwen3vl: M-RoPE sections [24, 20, 20, 0] over "
                "head_dim 128, 3 deepstack layers, tied output)",
                lambda o, f: qwen3_like(o, f, "qwen3vl", name="Qwen3 VL 4B Instruct", basename="Qwen3-VL",
                                        n_ctx=262144, rope_theta=5000000.0, mrope=QWEN3VL_SECTIONS,
                                        n_deepstack=1),
                file="qwen3vl-lm.gguf",
                extra={"rope_dimension_sections": QWEN3VL_SECTIONS, "n_deepstack_layers": 1,
                       "embedding_input_length": 64, "mmproj": "qwen3vl-mmproj.gguf"}))
    L.append(lm("smolvlm2", "SmolVLM2", "architecture+name",
                "HuggingFaceTB/SmolVLM2-256M-Video-Instruct text model (VLlama3ForCausalLM -> arch llama: "
                "30 layers, n_embd 576, 9 heads, 3 KV heads, rope 1e5, tied)",
                lambda o, f: llama_like(o, f, name="SmolVLM2 256M Video Instruct", basename="SmolVLM2",
                                        finetune="Video-Instruct", n_embd=48, n_head=3, n_head_kv=1, n_ff=64,
                                        n_ctx=8192, rope_theta=100000.0, pre="smollm",
                                        specials=["<|endoftext|>", "<|im_start|>", "<end_of_utterance>"],
                                        ids={"bos": "<|im_start|>", "eos": "<end_of_utterance>"}, tied=True),
                file="smolvlm2-lm.gguf", family_by_architecture_only="llama",
                extra={"mmproj": "smolvlm2-mmproj.gguf"}))
    L.append(lm("qwen2", "Qwen", "architecture",
                "openbmb/MiniCPM-V-2_6 language model (minicpmv-surgery.py, then Qwen2Model -> arch qwen2); "
                "the family shows only in its mmproj",
                minicpmv_lm, file="minicpmv-lm.gguf", model_family="minicpmv",
                extra={"mmproj": "minicpmv-mmproj.gguf"}))
    L.append(lm("generic", "Generic", "fallback",
                "no real model: general.architecture 'tinyformer', unknown to llama.cpp and to the registry",
                unknown_arch, file="unknown-arch.gguf",
                extra={"raw_tensor_names": ["blk.0.mixer.in_proj.weight", "blk.0.mixer.decay",
                                            "final_norm.weight", "lm_head.weight"]}))
    return L


MMPROJ = [
    dict(file="qwen3vl-mmproj.gguf", family="qwen3vl", handler="Qwen3VL", lm="qwen3vl-lm.gguf",
         writer=mm.write_qwen3vl_mmproj, projector_type="qwen3vl_merger", role="vision",
         imitates="mmproj of Qwen/Qwen3-VL-4B-Instruct (tests/multimodal writer)"),
    dict(file="smolvlm2-mmproj.gguf", family="smolvlm2", handler="SmolVLM2", lm="smolvlm2-lm.gguf",
         writer=mm.write_idefics3_mmproj, projector_type="idefics3", role="vision",
         imitates="mmproj of HuggingFaceTB/SmolVLM2-256M-Video-Instruct (SigLIP + pixel shuffle, "
                  "tests/multimodal writer)"),
    dict(file="minicpmv-mmproj.gguf", family="minicpmv", handler="MiniCPMV", lm="minicpmv-lm.gguf",
         writer=mm.write_minicpmv_mmproj, projector_type="resampler", role="vision",
         imitates="mmproj-model-f16.gguf of openbmb/MiniCPM-V-2_6 (legacy converter, "
                  "tests/multimodal writer)"),
    dict(file="whisper-mmproj.gguf", family="whisper", handler="Whisper", lm="llama3.gguf",
         writer=mm.write_ultravox_mmproj, projector_type="ultravox", role="audio",
         imitates="mmproj of fixie-ai/ultravox-v0_5-llama-3_2-1b: Whisper large-v3-turbo encoder as "
                  "llama.cpp keeps it (clip, audio encoder, tests/multimodal writer)"),
]


BROKEN = [
    dict(file="broken-head-count.gguf", build=broken_head_count, family="llama", handler="LLaMA",
         architecture="llama", error_key="llama.attention.head_count",
         why="5 heads do not divide embedding_length 32 and there is no attention.key_length; the tensors "
             "are those of 4 heads of 8",
         llama_cpp="invalid n_rot: 8, expected 6"),
    dict(file="broken-head-count-kv.gguf", build=broken_head_count_kv, family="llama", handler="LLaMA",
         architecture="llama", error_key="llama.attention.head_count_kv",
         why="3 KV heads do not divide 4 heads (blk.0.attn_k.weight is [32, 16], 2 KV heads of 8)",
         llama_cpp="tensor 'blk.0.attn_k.weight' has wrong shape; expected     32,     24, got     32,     16"),
    dict(file="broken-expert-count.gguf", build=broken_expert_count, family="mixtral", handler="Mistral",
         architecture="llama", detected_by="architecture+expert_count", error_key="llama.expert_count",
         why="expert_count 8, but ffn_gate_inp/ffn_*_exps hold 4 experts (ne[2] = 4)",
         llama_cpp="tensor 'blk.0.ffn_gate_inp.weight' has wrong shape; expected     32,      8, got     32,      4"),
    dict(file="broken-rope-sections.gguf", family="qwen3vl", handler="Qwen3VL", architecture="qwen3vl",
         build=lambda o, f: qwen3_like(o, f, "qwen3vl", name="Qwen3 VL 4B Instruct, sections edited",
                                       basename="Qwen3-VL", n_ctx=262144, rope_theta=5000000.0,
                                       mrope_override=[8, 8, 8, 0], n_deepstack=1)[0],
         error_key="qwen3vl.rope.dimension_sections",
         why="sections [8, 8, 8, 0] rotate 24 pairs = 48 dimensions of a 16-wide head (must sum to "
             "head_dim / 2 = 8)",
         llama_cpp="ok"),
    dict(file="broken-block-count.gguf", build=broken_block_count, family="llama", handler="LLaMA",
         architecture="llama", error_key="llama.block_count",
         why="block_count 3, but the tensors name blocks 0 and 1 only",
         llama_cpp="tensor 'blk.2.attn_norm.weight' not found"),
]

# Language model + mmproj pairs, as mtmd_init_from_file (with warmup) judges
# them (verify_llama.py --mtmd checks it).
PAIRS = [
    dict(lm="qwen3vl-lm.gguf", mmproj="qwen3vl-mmproj.gguf", fits=True, mtmd="ok",
         why="mm.2.bias ne[0] * (1 + 1 deepstack layer) = 64 = embedding_length * (1 + n_deepstack_layers)"),
    dict(lm="smolvlm2-lm.gguf", mmproj="smolvlm2-mmproj.gguf", fits=True, mtmd="ok",
         why="mm.model.fc.weight ne[1] = 48 = llama.embedding_length"),
    dict(lm="minicpmv-lm.gguf", mmproj="minicpmv-mmproj.gguf", fits=True, mtmd="ok",
         why="resampler.proj.weight ne[0] = 128 = qwen2.embedding_length"),
    dict(lm="llama3.gguf", mmproj="whisper-mmproj.gguf", fits=True, mtmd="ok",
         why="audio: mm.a.mlp.2.weight ne[1] = 32 = llama.embedding_length"),
    dict(lm="qwen3.gguf", mmproj="qwen3vl-mmproj.gguf", fits=False,
         mtmd="mismatch between text model (n_embd = 32) and mmproj (n_embd = 64)",
         why="a qwen3 LM has no deepstack input: 32 != 32 * (1 + 1)"),
]

# llama.cpp's verdict on the good language models (verify_llama.py checks it).
LLAMA_CPP_OK = "ok"


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    fixtures = []
    widths = {}
    for spec in catalogue():
        m, hparams = spec["build"](out, spec["file"])
        widths[spec["file"]] = hparams["embedding_length"]
        entry = {
            "file": spec["file"], "kind": "language", "family": spec["family"], "handler": spec["handler"],
            "architecture": m.arch, "detected_by": spec["detected_by"], "imitates": spec["imitates"],
        }
        for k in ("family_by_architecture_only", "model_family"):
            if k in spec:
                entry[k] = spec[k]
        entry["hparams"] = hparams
        entry["extra"] = spec["extra"]
        entry["llama_cpp"] = "unknown model architecture: 'tinyformer'" if m.arch == "tinyformer" else LLAMA_CPP_OK
        fixtures.append(entry)
    for spec in MMPROJ:
        n_embd_text = widths[spec["lm"]]
        spec["writer"](out, spec["file"], n_embd_text)
        fixtures.append({
            "file": spec["file"], "kind": "mmproj", "family": spec["family"], "handler": spec["handler"],
            "architecture": "clip", "detected_by": "clip.projector_type", "imitates": spec["imitates"],
            "hparams": None,
            "extra": {"projector_type": spec["projector_type"], "role": spec["role"], "pairs_with": spec["lm"],
                      "language_embedding_length": n_embd_text},
            "llama_cpp": "CLIP cannot be used as main model, use it with --mmproj instead",
        })
    for spec in BROKEN:
        spec["build"](out, spec["file"])
        fixtures.append({
            "file": spec["file"], "kind": "language", "family": spec["family"], "handler": spec["handler"],
            "architecture": spec["architecture"], "detected_by": spec.get("detected_by", "architecture"),
            "imitates": spec["why"],
            "hparams": None, "error_key": spec["error_key"], "extra": {}, "llama_cpp": spec["llama_cpp"],
        })
    doc = {
        "generator": "tests/arch/make_fixtures.py",
        "conventions": {
            "hparams": "scalars as llama.cpp's hparams accessors return them without a layer index: for a "
                       "per-layer array key the value of layer 0 (the whole array is in extra.per_layer)",
            "head_dim": "ARCH.attention.key_length if present, else embedding_length / head_count",
            "vocab_size": "token_embd.weight ne[1]",
            "norm_epsilon": "ARCH.attention.layer_norm_rms_epsilon if present, else "
                            "ARCH.attention.layer_norm_epsilon; float32 values widened to f64",
            "null": "the key is absent",
            "llama_cpp": "what llama_model_load_from_file does with the file (see verify_llama.py)",
        },
        "fixtures": fixtures,
        "pairs": PAIRS,
    }
    (out / "fixtures.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
