#!/usr/bin/env python3
"""Re-derives every tensor of the reference GGUFs from the safetensors checkpoints with
numpy alone (no torch, no convert_hf_to_gguf.py code), following the rules written in
docs/notes/convert-hf-reference.md, and checks them byte for byte: names, order,
ggml types, shapes and data.

Usage: check_rules.py REFDIR        (REFDIR as written by make_references.sh)

It is the executable form of the tensor half of the notes: if a rule there is wrong,
this fails.  Metadata is not re-derived here (the golden summaries cover it).
"""
from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader

FAMILY_OF_DIR = {
    "tiny-llama-3-chat": "llama",
    "Mistral-Tiny-180K-v0.3": "llama",
    "Qwen2.5-Tiny-Instruct": "qwen2",
    "qwen3": "qwen3",
    "gemma-3-tiny-it": "gemma3",
    "Phi-3-mini-4k-instruct": "phi3",
    "Phi-3-mini-128k-instruct": "phi3",
    "Llama-Tiny-YaRN": "llama",
    "Qwen3-Tiny-YaRN": "qwen3",
}

# HF name (per block, {bid} substituted) -> GGUF name, for the families' dense layouts.
BLOCK_MAP = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.qkv_proj": "attn_qkv",          # phi3 (kept fused)
    "self_attn.q_norm": "attn_q_norm",         # qwen3, gemma3
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.gate_up_proj": "ffn_up",              # phi3 (kept fused, llama.cpp splits at load)
    "mlp.down_proj": "ffn_down",
    "pre_feedforward_layernorm": "ffn_norm",   # gemma3
    "post_feedforward_layernorm": "post_ffw_norm",
}
POST_ATTN = {"gemma3": "post_attention_norm"}  # everyone else: ffn_norm
TOP_MAP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        buf = np.frombuffer(raw[base + a:base + b], dtype={"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[meta["dtype"]])
        arr = buf.reshape(meta["shape"])
        if meta["dtype"] == "BF16":  # widen exactly, as torch .to(float32) does
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    # gguf.utility.SafetensorsLocal: tensors in name order within a file
    return dict(sorted(out.items()))


def load_checkpoint(d: Path) -> dict[str, np.ndarray]:
    index = d / "model.safetensors.index.json"
    if index.is_file():
        parts = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        parts = sorted(p.name for p in d.iterdir() if p.name.startswith("model") and p.name.endswith(".safetensors"))
    tensors: dict[str, np.ndarray] = {}
    for p in parts:
        tensors.update(read_safetensors(d / p))
    return tensors


def gguf_name(fam: str, hf: str) -> str | None:
    for suffix in (".weight", ".bias"):
        if hf.endswith(suffix):
            stem = hf[: -len(suffix)]
            break
    else:
        return None
    if stem in TOP_MAP:
        return TOP_MAP[stem] + suffix
    parts = stem.split(".")
    if parts[:2] == ["model", "layers"]:
        bid, rest = parts[2], ".".join(parts[3:])
        if rest == "post_attention_layernorm":
            return f"blk.{bid}.{POST_ATTN.get(fam, 'ffn_norm')}{suffix}"
        if rest in BLOCK_MAP:
            return f"blk.{bid}.{BLOCK_MAP[rest]}{suffix}"
    return None


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # conversion/llama.py LlamaModel.permute: HF (rotate-half) rows -> GGML (interleaved) rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg: dict) -> np.ndarray:
    rs = cfg["rope_scaling"]
    base = np.float32(cfg["rope_theta"])
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    # torch: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=float32) / dim)), all in float32
    exps = (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)).astype(np.float32)
    freqs = (np.float32(1.0) / np.power(base, exps, dtype=np.float32)).astype(np.float32)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi        # Python floats (f64)
    out = []
    for f in freqs:                                        # f: float32 scalar
        wavelen = np.float32(2 * math.pi) / f              # f64 scalar * f32 tensor -> f32 in torch
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (np.float32(old) / wavelen - np.float32(lo)) / np.float32(hi - lo)
            out.append(np.float32(1) / ((np.float32(1) - smooth) / np.float32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def to_f16(x: np.ndarray) -> bytes:
    return x.astype(np.float32).astype(np.float16).tobytes()  # IEEE round-to-nearest-even


def to_bf16(x: np.ndarray) -> bytes:
    n = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    n = np.where((n & 0x7FFFFFFF) > 0x7F800000, (n & 0xFFFF0000) | (64 << 16), n)   # quiet NaN
    return ((n + (0x7FFF + ((n >> 16) & 1))) >> 16).astype(np.uint16).tobytes()


def to_q8_0(x: np.ndarray) -> bytes:
    blocks = x.astype(np.float32).reshape(-1, 32)
    out = bytearray()
    for b in blocks:
        amax = np.float32(np.max(np.abs(b)))
        d = np.float32(amax / np.float32(127))
        inv = np.float32(0) if d == 0 else np.float32(np.float32(1) / d)
        v = (b * inv).astype(np.float32)
        q = np.trunc(np.abs(v) + np.float32(0.5)) * np.sign(v)   # round half away from zero
        out += np.float16(d).tobytes() + q.astype(np.int8).tobytes()
    return bytes(out)


def expected(ckpt: Path, outtype: str):
    fam = FAMILY_OF_DIR[ckpt.name]
    cfg = json.loads((ckpt / "config.json").read_text())
    hf = load_checkpoint(ckpt)
    items: list[tuple[str, np.ndarray]] = []
    if fam == "llama" and (cfg.get("rope_scaling") or {}).get("rope_type") == "llama3":
        items.append(("rope_freqs.weight", llama3_rope_factors(cfg)))
    if fam == "phi3" and (cfg.get("rope_scaling") or {}).get("long_factor"):
        # conversion/phi.py generate_extra_tensors: the LongRoPE factors, as given, in float32
        for which in ("long", "short"):
            items.append((f"rope_factors_{which}.weight", np.array(cfg["rope_scaling"][f"{which}_factor"], dtype=np.float32)))
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for name, arr in hf.items():
        if fam == "llama":
            if name.endswith("q_proj.weight"):
                arr = permute(arr, n_head)
            elif name.endswith("k_proj.weight"):
                arr = permute(arr, n_kv)
        if fam == "gemma3":
            if "embed_tokens.weight" in name:
                arr = arr[: cfg["vocab_size"]]
            if name.endswith("norm.weight"):
                # torch adds in the tensor's own dtype: f16 + 1 rounds to f16 (computed via f32)
                arr = (arr.astype(np.float32) + np.float32(1)).astype(arr.dtype)
        new = gguf_name(fam, name)
        assert new is not None, f"unmapped {name}"
        items.append((new, arr))
    result = []
    for new, arr in items:
        if arr.ndim <= 1 or new.endswith("_norm.weight") or not new.endswith(".weight"):
            qt = "F32"
        else:
            qt = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}[outtype]
            if qt == "Q8_0" and arr.shape[-1] % 32 != 0:
                qt = "F16"
        data = {"F32": lambda a: a.astype(np.float32).tobytes(), "F16": to_f16, "BF16": to_bf16, "Q8_0": to_q8_0}[qt](arr)
        result.append((new, qt, list(reversed(arr.shape)), data))
    return result


def main(argv: list[str]) -> int:
    refdir = Path(argv[1]) if len(argv) > 1 else Path.home() / ".cache/quantforge/convert-refs"
    bad = 0
    checked = 0
    for ckpt in sorted((refdir / "checkpoints").iterdir()):
        for outtype in ("f16", "bf16", "f32", "q8_0"):
            path = refdir / "gguf" / f"{ckpt.name}-{outtype}.gguf"
            reader = GGUFReader(path)
            raw = path.read_bytes()
            got = [(t.name, t.tensor_type.name, [int(x) for x in t.shape],
                    raw[int(t.data_offset):int(t.data_offset) + int(t.n_bytes)]) for t in reader.tensors]
            want = expected(ckpt, outtype)
            problems = []
            if [g[0] for g in got] != [w[0] for w in want]:
                problems.append(f"order/names: got {[g[0] for g in got]} want {[w[0] for w in want]}")
            for (gn, gt, gs, gd), (wn, wt, ws, wd) in zip(got, want):
                if (gn, gt, gs) != (wn, wt, ws):
                    problems.append(f"{gn}: got {gt} {gs}, want {wn} {wt} {ws}")
                elif gd != wd:
                    a = np.frombuffer(gd, np.uint8)
                    b = np.frombuffer(wd, np.uint8)
                    n = int(np.sum(a != b)) if len(a) == len(b) else -1
                    problems.append(f"{gn} ({gt}): data differs ({n} bytes)")
            checked += 1
            status = "ok  " if not problems else "FAIL"
            print(f"{status} {ckpt.name}-{outtype}: {len(got)} tensors")
            for p in problems:
                print("     " + p)
            bad += bool(problems)
    print(f"{checked - bad}/{checked} files match the documented rules")
    return 1 if bad else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv))
