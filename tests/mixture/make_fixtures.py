"""Writes the GGUF fixtures the mixture goldens are made from.

usage: python3 tests/mixture/make_fixtures.py OUTDIR

Each fixture is a model header shaped like a real model (names, shapes,
source types and the metadata llama.cpp reads to load hyperparameters), with
a data section of zeros. The data is never written: the file is extended with
a hole (a sparse file), so a 47B-parameter Mixtral header costs a few hundred
kilobytes on disk. `llama-quantize --dry-run` reads no tensor bytes, but its
loader insists that every tensor lies inside the file, hence the holes.

What each fixture is there for:

- tiny-llama: the repository's own `tests/data/tiny-llama.gguf` (copied).
- llama3-8b: 32 layers, GQA 8 (32 heads, 4 KV heads), untied output; layers in
  the lexicographic order of a sorted safetensors index (0, 1, 10, ...), which
  differs from llama.cpp's numeric order.
- llama-70b: 80 layers with GQA 8, llama.cpp's "70B" model type (attn_v gets
  more bits); reduced to the tensors the 70B rules read (attn_k, attn_v,
  ffn_down, the embeddings and the output).
- gemma3-270m: the real Gemma 3 270M header in F16; rows of 640 make every
  256-block type fall back; no output.weight (tied embeddings); GQA 4.
- mixtral-8x7b: llama architecture with 8 experts (llama.cpp special-cases
  exactly 8), 3-D `ffn_*_exps` tensors.
- gpt-oss-20b: 32 experts, rows of 2880 (K-quant fallback inside experts),
  BF16 sources, 2-D expert biases, attention sinks; the MXFP4_MOE target.
- falcon-7b: fused `attn_qkv`, the falcon special cases, rows of 4544.
- bert-base: position embeddings and token types (never quantized), no output
  tensor (tied).
- oddities: every name and shape rule on a small llama: layers written in
  reverse, a per-layer KV-head array, a layer-less `blk.x.` name, rows of 100
  (even Q8_0 falls back to F16), 1-D shapes stored as 2-D, a 3-D non-expert
  tensor, an already-Q8_0 tensor, a 5-character name (llama.cpp's "ends with
  weight" test accepts every 5-byte name), per_layer_token_embd, attn_kv_b,
  and names from the never-quantize list.
"""

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

REPO = Path(__file__).resolve().parents[2]
TINY_LLAMA = REPO / "tests" / "data" / "tiny-llama.gguf"


@dataclass
class Fixture:
    name: str
    arch: str
    # (key, value type, value); arrays as (key, V.ARRAY, (element type, values)).
    kv: list = field(default_factory=list)
    # (name, dims in ggml order, type)
    tensors: list = field(default_factory=list)
    # A file to copy instead of writing one.
    source: Path | None = None

    def t(self, name: str, dims: list[int], ty: Q = Q.F16) -> None:
        self.tensors.append((name, dims, ty))

    def norm(self, name: str, n: int) -> None:
        self.tensors.append((name, [n], Q.F32))


def common_kv(arch: str, name: str, *, ctx: int, embd: int, layers: int, ff: int, heads: int, kv_heads) -> list:
    kv = [
        ("general.name", V.STRING, name),
        ("general.file_type", V.UINT32, 1),
        (f"{arch}.context_length", V.UINT32, ctx),
        (f"{arch}.embedding_length", V.UINT32, embd),
        (f"{arch}.block_count", V.UINT32, layers),
        (f"{arch}.feed_forward_length", V.UINT32, ff),
        (f"{arch}.attention.head_count", V.UINT32, heads),
    ]
    if isinstance(kv_heads, list):
        kv.append((f"{arch}.attention.head_count_kv", V.ARRAY, (V.UINT32, kv_heads)))
    else:
        kv.append((f"{arch}.attention.head_count_kv", V.UINT32, kv_heads))
    return kv


def llama_layer(f: Fixture, i: int, embd: int, kv_dim: int, ff: int) -> None:
    # Per layer in the order of the Hugging Face names (input_layernorm,
    # mlp.*, post_attention_layernorm, self_attn.*), as the converter meets them.
    f.norm(f"blk.{i}.attn_norm.weight", embd)
    f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
    f.t(f"blk.{i}.ffn_gate.weight", [embd, ff])
    f.t(f"blk.{i}.ffn_up.weight", [embd, ff])
    f.norm(f"blk.{i}.ffn_norm.weight", embd)
    f.t(f"blk.{i}.attn_k.weight", [embd, kv_dim])
    f.t(f"blk.{i}.attn_output.weight", [embd, embd])
    f.t(f"blk.{i}.attn_q.weight", [embd, embd])
    f.t(f"blk.{i}.attn_v.weight", [embd, kv_dim])


def llama3_8b() -> Fixture:
    f = Fixture("llama3-8b", "llama")
    embd, ff, vocab, layers = 4096, 14336, 128256, 32
    f.kv = common_kv("llama", "Llama-3-8B-like", ctx=8192, embd=embd, layers=layers, ff=ff, heads=32, kv_heads=4)
    f.kv += [
        ("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5),
        ("llama.rope.freq_base", V.FLOAT32, 500000.0),
        ("llama.rope.dimension_count", V.UINT32, 128),
        ("llama.vocab_size", V.UINT32, vocab),
    ]
    f.t("token_embd.weight", [embd, vocab])
    for i in sorted(range(layers), key=str):
        llama_layer(f, i, embd, 512, ff)
    f.norm("output_norm.weight", embd)
    f.t("output.weight", [embd, vocab])
    return f


def llama_70b() -> Fixture:
    f = Fixture("llama-70b", "llama")
    embd, ff, vocab, layers = 8192, 28672, 128256, 80
    f.kv = common_kv("llama", "Llama-70B-like", ctx=8192, embd=embd, layers=layers, ff=ff, heads=64, kv_heads=8)
    f.kv += [
        ("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5),
        ("llama.rope.freq_base", V.FLOAT32, 500000.0),
        ("llama.vocab_size", V.UINT32, vocab),
    ]
    f.t("token_embd.weight", [embd, vocab])
    for i in range(layers):
        f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
        f.t(f"blk.{i}.attn_k.weight", [embd, 1024])
        f.t(f"blk.{i}.attn_v.weight", [embd, 1024])
    f.norm("output_norm.weight", embd)
    f.t("output.weight", [embd, vocab])
    return f


def gemma3_270m() -> Fixture:
    f = Fixture("gemma3-270m", "gemma3")
    embd, ff, vocab, layers, head = 640, 2048, 262144, 18, 256
    f.kv = common_kv("gemma3", "Gemma 3 270m", ctx=32768, embd=embd, layers=layers, ff=ff, heads=4, kv_heads=1)
    f.kv += [
        ("gemma3.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-6),
        ("gemma3.attention.key_length", V.UINT32, head),
        ("gemma3.attention.value_length", V.UINT32, head),
        ("gemma3.rope.freq_base", V.FLOAT32, 1000000.0),
        ("gemma3.attention.sliding_window", V.UINT32, 512),
    ]
    f.t("token_embd.weight", [embd, vocab])
    for i in range(layers):
        f.norm(f"blk.{i}.attn_norm.weight", embd)
        f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
        f.t(f"blk.{i}.ffn_gate.weight", [embd, ff])
        f.t(f"blk.{i}.ffn_up.weight", [embd, ff])
        f.norm(f"blk.{i}.post_attention_norm.weight", embd)
        f.norm(f"blk.{i}.post_ffw_norm.weight", embd)
        f.norm(f"blk.{i}.ffn_norm.weight", embd)
        f.norm(f"blk.{i}.attn_k_norm.weight", head)
        f.t(f"blk.{i}.attn_k.weight", [embd, head])
        f.t(f"blk.{i}.attn_output.weight", [4 * head, embd])
        f.norm(f"blk.{i}.attn_q_norm.weight", head)
        f.t(f"blk.{i}.attn_q.weight", [embd, 4 * head])
        f.t(f"blk.{i}.attn_v.weight", [embd, head])
    f.norm("output_norm.weight", embd)
    return f


def mixtral_8x7b() -> Fixture:
    f = Fixture("mixtral-8x7b", "llama")
    embd, ff, vocab, layers, n_expert = 4096, 14336, 32000, 32, 8
    f.kv = common_kv("llama", "Mixtral-8x7B-like", ctx=32768, embd=embd, layers=layers, ff=ff, heads=32, kv_heads=8)
    f.kv += [
        ("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5),
        ("llama.rope.freq_base", V.FLOAT32, 1000000.0),
        ("llama.expert_count", V.UINT32, n_expert),
        ("llama.expert_used_count", V.UINT32, 2),
        ("llama.vocab_size", V.UINT32, vocab),
    ]
    f.t("token_embd.weight", [embd, vocab])
    for i in range(layers):
        f.norm(f"blk.{i}.attn_norm.weight", embd)
        f.t(f"blk.{i}.attn_q.weight", [embd, embd])
        f.t(f"blk.{i}.attn_k.weight", [embd, 1024])
        f.t(f"blk.{i}.attn_v.weight", [embd, 1024])
        f.t(f"blk.{i}.attn_output.weight", [embd, embd])
        f.norm(f"blk.{i}.ffn_norm.weight", embd)
        f.t(f"blk.{i}.ffn_gate_inp.weight", [embd, n_expert], Q.F32)
        f.t(f"blk.{i}.ffn_gate_exps.weight", [embd, ff, n_expert])
        f.t(f"blk.{i}.ffn_down_exps.weight", [ff, embd, n_expert])
        f.t(f"blk.{i}.ffn_up_exps.weight", [embd, ff, n_expert])
    f.norm("output_norm.weight", embd)
    f.t("output.weight", [embd, vocab])
    return f


def gpt_oss_20b() -> Fixture:
    f = Fixture("gpt-oss-20b", "gpt-oss")
    embd, vocab, layers, n_expert, head = 2880, 201088, 24, 32, 64
    f.kv = common_kv("gpt-oss", "gpt-oss-20b-like", ctx=131072, embd=embd, layers=layers, ff=embd, heads=64, kv_heads=8)
    f.kv += [
        ("gpt-oss.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5),
        ("gpt-oss.attention.key_length", V.UINT32, head),
        ("gpt-oss.attention.value_length", V.UINT32, head),
        ("gpt-oss.attention.sliding_window", V.UINT32, 128),
        ("gpt-oss.rope.freq_base", V.FLOAT32, 150000.0),
        ("gpt-oss.expert_count", V.UINT32, n_expert),
        ("gpt-oss.expert_used_count", V.UINT32, 4),
        ("gpt-oss.expert_feed_forward_length", V.UINT32, embd),
    ]
    f.t("token_embd.weight", [embd, vocab], Q.BF16)
    for i in range(layers):
        f.norm(f"blk.{i}.attn_norm.weight", embd)
        f.t(f"blk.{i}.attn_q.weight", [embd, 64 * head], Q.BF16)
        f.t(f"blk.{i}.attn_k.weight", [embd, 8 * head], Q.BF16)
        f.t(f"blk.{i}.attn_v.weight", [embd, 8 * head], Q.BF16)
        f.t(f"blk.{i}.attn_output.weight", [64 * head, embd], Q.BF16)
        f.norm(f"blk.{i}.attn_sinks.weight", 64)
        f.norm(f"blk.{i}.post_attention_norm.weight", embd)
        f.t(f"blk.{i}.ffn_gate_inp.weight", [embd, n_expert], Q.F32)
        f.t(f"blk.{i}.ffn_gate_exps.weight", [embd, embd, n_expert], Q.BF16)
        f.t(f"blk.{i}.ffn_gate_exps.bias", [embd, n_expert], Q.F32)
        f.t(f"blk.{i}.ffn_up_exps.weight", [embd, embd, n_expert], Q.BF16)
        f.t(f"blk.{i}.ffn_up_exps.bias", [embd, n_expert], Q.F32)
        f.t(f"blk.{i}.ffn_down_exps.weight", [embd, embd, n_expert], Q.BF16)
        f.t(f"blk.{i}.ffn_down_exps.bias", [embd, n_expert], Q.F32)
    f.norm("output_norm.weight", embd)
    f.t("output.weight", [embd, vocab], Q.BF16)
    return f


def falcon_7b() -> Fixture:
    f = Fixture("falcon-7b", "falcon")
    embd, ff, vocab, layers = 4544, 18176, 65024, 32
    f.kv = common_kv("falcon", "Falcon-7B-like", ctx=2048, embd=embd, layers=layers, ff=ff, heads=71, kv_heads=1)
    f.kv += [("falcon.attention.layer_norm_epsilon", V.FLOAT32, 1e-5)]
    f.t("token_embd.weight", [embd, vocab])
    for i in range(layers):
        f.norm(f"blk.{i}.attn_norm.weight", embd)
        f.norm(f"blk.{i}.attn_norm.bias", embd)
        f.t(f"blk.{i}.attn_qkv.weight", [embd, embd + 2 * 64])
        f.t(f"blk.{i}.attn_output.weight", [embd, embd])
        f.t(f"blk.{i}.ffn_up.weight", [embd, ff])
        f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
    f.norm("output_norm.weight", embd)
    f.norm("output_norm.bias", embd)
    f.t("output.weight", [embd, vocab])
    return f


def bert_base() -> Fixture:
    f = Fixture("bert-base", "bert")
    embd, ff, vocab, layers = 768, 3072, 30522, 12
    f.kv = common_kv("bert", "bge-base-like", ctx=512, embd=embd, layers=layers, ff=ff, heads=12, kv_heads=12)
    f.kv += [
        ("bert.attention.layer_norm_epsilon", V.FLOAT32, 1e-12),
        ("bert.attention.causal", V.BOOL, False),
        ("bert.pooling_type", V.UINT32, 2),
    ]
    f.t("token_embd.weight", [embd, vocab])
    f.t("token_types.weight", [embd, 2], Q.F32)
    f.t("position_embd.weight", [embd, 512])
    f.norm("token_embd_norm.weight", embd)
    for i in range(layers):
        f.t(f"blk.{i}.attn_q.weight", [embd, embd])
        f.t(f"blk.{i}.attn_k.weight", [embd, embd])
        f.t(f"blk.{i}.attn_v.weight", [embd, embd])
        f.t(f"blk.{i}.attn_output.weight", [embd, embd])
        f.norm(f"blk.{i}.attn_output_norm.weight", embd)
        f.t(f"blk.{i}.ffn_up.weight", [embd, ff])
        f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
        f.norm(f"blk.{i}.layer_output_norm.weight", embd)
    return f


def oddities() -> Fixture:
    f = Fixture("oddities", "llama")
    embd, ff, vocab = 256, 100, 1000
    f.kv = common_kv("llama", "oddities", ctx=512, embd=embd, layers=2, ff=ff, heads=32, kv_heads=[8, 4])
    f.kv += [("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5)]
    f.t("token_embd.weight", [embd, vocab])
    f.t("per_layer_token_embd.weight", [embd, vocab])
    f.t("position_embd.weight", [embd, 512])
    f.t("token_types.weight", [embd, 2])
    f.t("abcde", [embd, embd])
    f.t("abcd", [embd, embd])
    f.t("blk.x.attn_v.weight", [embd, 32])
    for i in (1, 0):
        f.norm(f"blk.{i}.attn_norm.weight", embd)
        f.t(f"blk.{i}.attn_q.weight", [embd, embd])
        f.t(f"blk.{i}.attn_k.weight", [embd, 32])
        f.t(f"blk.{i}.attn_v.weight", [embd, 32])
        f.t(f"blk.{i}.attn_output.weight", [embd, embd])
        f.norm(f"blk.{i}.ffn_norm.weight", embd)
        f.t(f"blk.{i}.ffn_gate.weight", [embd, ff])
        f.t(f"blk.{i}.ffn_up.weight", [embd, ff], Q.Q8_0 if i == 0 else Q.F16)
        f.t(f"blk.{i}.ffn_down.weight", [ff, embd])
    f.t("blk.1.wide_3d.weight", [embd, 4, 3])
    f.t("blk.1.altup_proj.weight", [embd, embd])
    f.t("blk.0.attn_kv_b.weight", [embd, embd])
    f.t("blk.0.ssm_conv1d.weight", [4, embd], Q.F32)
    f.t("blk.0.ffn_gate_inp.weight", [embd, 4], Q.F32)
    f.t("blk.0.column.weight", [embd, 1])
    f.t("blk.0.row.weight", [1, embd])
    f.norm("blk.0.attn_output.bias", embd)
    f.norm("output_norm.weight", embd)
    f.t("output.weight", [embd, vocab])
    return f


def fixtures() -> list[Fixture]:
    return [
        Fixture("tiny-llama", "llama", source=TINY_LLAMA),
        llama3_8b(),
        llama_70b(),
        gemma3_270m(),
        mixtral_8x7b(),
        gpt_oss_20b(),
        falcon_7b(),
        bert_base(),
        oddities(),
    ]


def nbytes(dims: list[int], ty: Q) -> int:
    block, size = GGML_QUANT_SIZES[ty]
    assert dims[0] % block == 0, (dims, ty)
    return int(np.prod(dims, dtype=np.int64)) // block * size


def write(f: Fixture, path: Path) -> None:
    if f.source is not None:
        shutil.copyfile(f.source, path)
        return
    w = GGUFWriter(path, f.arch)
    for key, vtype, value in f.kv:
        if vtype == V.ARRAY:
            sub, values = value
            w.add_key_value(key, values, V.ARRAY, sub_type=sub)
        else:
            w.add_key_value(key, value, vtype)
    total = 0
    for name, dims, ty in f.tensors:
        n = nbytes(dims, ty)
        # gguf-py takes numpy order (outermost first) and an element shape.
        w.add_tensor_info(name, list(reversed(dims)), np.float32, n, raw_dtype=ty)
        total += GGUFWriter.ggml_pad(n, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = path.stat().st_size
    # The data section starts at the next alignment boundary; leave it a hole.
    with open(path, "r+b") as fp:
        fp.truncate(GGUFWriter.ggml_pad(header, w.data_alignment) + total)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for f in fixtures():
        write(f, out / f"{f.name}.gguf")
        print(out / f"{f.name}.gguf")


if __name__ == "__main__":
    main()
