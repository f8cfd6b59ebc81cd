#!/usr/bin/env python3
"""Builds tiny Hugging Face checkpoints for the HF -> GGUF converter tests.

Usage: make_checkpoints.py OUTDIR [FAMILY ...]

Writes one directory per family under OUTDIR (all of them unless families are
named).  Every checkpoint is a real `transformers` model class with its real
config class, shrunk (hidden 64, 2 layers, a few heads) and filled with random
weights from a fixed seed, saved with `save_pretrained(safe_serialization=True)`
next to a tokenizer trained here on generated text (no hub downloads).

    directory                 class               dtype  shards  tokenizer
    tiny-llama-3-chat         LlamaForCausalLM    f32    1       SentencePiece BPE + tokenizer.json (fast)
    Mistral-Tiny-180K-v0.3    MistralForCausalLM  bf16   3+      SentencePiece BPE only (slow: no tokenizer.json)
    Qwen2.5-Tiny-Instruct     Qwen2ForCausalLM    bf16   1       byte-level BPE tokenizer.json, tied embeddings
    qwen3                     Qwen3ForCausalLM    f16    3+      byte-level BPE tokenizer.json, tied embeddings
    gemma-3-tiny-it           Gemma3ForCausalLM   f16    1       SentencePiece BPE (Gemma ids) + tokenizer.json
    Phi-3-mini-4k-instruct    Phi3ForCausalLM     bf16   1       SentencePiece BPE + added tokens + padding
    Phi-3-mini-128k-instruct  Phi3ForCausalLM     bf16   1       as Phi-3-mini-4k-instruct
    Llama-Tiny-YaRN           LlamaForCausalLM    bf16   1       as tiny-llama-3-chat
    Qwen3-Tiny-YaRN           Qwen3ForCausalLM    f16    3+      as qwen3
    Mixtral-Tiny-4x8          MixtralForCausalLM  bf16   5       SentencePiece BPE + tokenizer.json
    Qwen1.5-MoE-Tiny          Qwen2MoeForCausalLM bf16   4       byte-level BPE (Qwen2's)
    Qwen3-MoE-Tiny            Qwen3MoeForCausalLM f16    4       byte-level BPE (Qwen2's)
    OLMoE-Tiny-0924           OlmoeForCausalLM    bf16   1       byte-level BPE (GPT-2 regex)
    gemma-tiny                GemmaForCausalLM    bf16   1       SentencePiece BPE (Gemma ids)
    gemma-2-tiny-it           Gemma2ForCausalLM   f16    1       SentencePiece BPE (Gemma ids)
    starcoder2-tiny           Starcoder2ForCausalLM f32  1       byte-level BPE (GPT-2 regex)
    OLMo-2-Tiny-Instruct      Olmo2ForCausalLM    bf16   1       byte-level BPE (GPT-2 regex)
    granite-3.1-tiny-instruct GraniteForCausalLM  bf16   1       byte-level BPE (GPT-2 regex)
    SmolLM3-Tiny              SmolLM3ForCausalLM  bf16   1       byte-level BPE (GPT-2 regex)
    pythia-tiny-deduped       GPTNeoXForCausalLM  f16    1       byte-level BPE (GPT-2 regex)
    granite-3.0-tiny-a400m    GraniteMoeForCausalLM bf16 1       byte-level BPE (GPT-2 regex)
    OLMo-Tiny-hf              OlmoForCausalLM     f32    1       byte-level BPE (GPT-2 regex)
    c4ai-command-r-tiny       CohereForCausalLM   f16    1       byte-level BPE (GPT-2 regex)
    c4ai-command-r7b-tiny     Cohere2ForCausalLM  bf16   1       byte-level BPE (GPT-2 regex), 4 layers
    phi-2-tiny                PhiForCausalLM      f16    1       byte-level BPE (GPT-2 regex)
    stablelm-2-tiny           StableLmForCausalLM bf16   1       byte-level BPE (GPT-2 regex)
    ERNIE-4.5-Tiny-PT         Ernie4_5ForCausalLM bf16   1       SentencePiece BPE, add_prefix_space false
    falcon-tiny               FalconForCausalLM   bf16   1       byte-level BPE (GPT-2 regex)
    gpt2-tiny                 GPT2LMHeadModel     f32    1       byte-level BPE (GPT-2 regex)
    DeepSeek-V2-Lite-Tiny     DeepseekV2ForCausalLM bf16 3+      byte-level BPE (GPT-2 regex)
    DeepSeek-V3-Tiny          DeepseekV3ForCausalLM bf16 3+      byte-level BPE (GPT-2 regex)
    bge-tiny-en               BertModel           f32    1       WordPiece (uncased), mean pooling
    stsb-roberta-tiny         RobertaModel        f32    1       byte-level BPE (RoBERTa's), mean pooling
    distilbert-tiny-uncased   DistilBertModel     f32    1       WordPiece (uncased), mean pooling
    gpt-oss-tiny              GptOssForCausalLM   bf16   1       byte-level BPE (GPT-2 regex)
    gpt-oss-tiny-mxfp4        GptOssForCausalLM   mxfp4  1       as gpt-oss-tiny (experts MXFP4, the rest bf16)
    gemma-3-tiny-vl-it        Gemma3ForConditionalGeneration bf16 1 as gemma-3-tiny-it, with image tokens
    pixtral-tiny              LlavaForConditionalGeneration  bf16 1 byte-level BPE with Pixtral's image tokens
    Qwen2-VL-Tiny-Instruct    Qwen2VLForConditionalGeneration bf16 1 Qwen2's BPE with its vision tokens; config.json flat, as Qwen publishes it
    Qwen2.5-VL-Tiny-Instruct  Qwen2_5_VLForConditionalGeneration f16 1 as Qwen2-VL
    Mistral-Small-3.1-Tiny-Instruct Mistral3ForConditionalGeneration bf16 1 as pixtral-tiny
    llava-1.5-tiny-hf         LlavaForConditionalGeneration  bf16 1 SentencePiece (LLaMA) with <image> and <pad> added

The directory names are part of the fixture: convert_hf_to_gguf.py derives
general.name / basename / finetune / version / size_label from them.

Deliberate edge cases (see docs/notes/convert-hf-reference.md):
  * llama: rope_scaling llama3 (-> rope_freqs.weight), crafted rows 0-3 of
    embed_tokens (f16 round-to-even ties, f16 overflow, subnormals, -0.0,
    Q8_0 half-way rounding, an all-zero Q8_0 block).
  * mistral: MQA (1 kv head), control pieces [INST]/[/INST] in the SP model,
    no tokenizer.json (special ids then come from config.json).
  * qwen2: q/k/v biases, config vocab_size > tokenizer size ([PADn] tokens),
    README.md model card (license, tags, language, base_model).
  * qwen3: head_dim (32) != hidden/heads (16), q_norm/k_norm, <think> added
    tokens that are not special, generation_config.json sampling values.
  * gemma3: norm weights stored as offsets (converter adds 1), f16 source,
    linear rope scaling, local rope base, list-valued eos_token_id.
  * phi3: fused qkv_proj and gate_up_proj, intermediate 80 (down_proj rows are
    not a multiple of 32 -> Q8_0 falls back to F16), vocab padded past the
    tokenizer, added tokens in tokenizer_config/tokenizer.json.
  * phi3-longrope: LongRoPE (131072 over 4096 positions -> attn_factor KV,
    rope_factors_long/short tensors); the factors include ints, decimals f32
    cannot hold and f64 values exactly half-way between two f32s.
  * llama-yarn: YaRN with every optional key, in the legacy `type` spelling.
  * qwen3-yarn: YaRN as Qwen3's model card recommends (factor, original length).
  * mixtral, qwen2moe, qwen3moe, olmoe: four experts a layer, two used, spread over
    shards (the stacks are written where a block's last expert tensor is read);
    Qwen2-MoE's shared expert and its [1, n_embd] gate; Qwen3-MoE renormalizes
    the top-k weights (norm_topk_prob, as llama.cpp's qwen3moe computes).
  * gemma, gemma2: norm offsets, no lm_head; Gemma 2's soft-caps, window, layer_types.
  * starcoder2: every LayerNorm and projection with a bias, f32 source.
  * granite: the four multipliers; smollm3: its default no-rope pattern.
  * gptneox: Q/K/V fused head by head (weights and biases reordered); granitemoe: experts
    stored stacked, gate and up side by side (split); olmo: no norm tensors, clip_qkv;
    cohere: model_max_length over max_position_embeddings, Q/K norms; cohere2: 4 layers
    (three sliding, one full) and rotary_pct; phi2, stablelm: biases, partial rotary.
  * gpt-oss: stacked experts with gate and up interleaved column by column (split by
    stride), expert biases, attention sinks, alternating sliding/full layers, YaRN;
    gpt-oss-mxfp4: the same experts quantized to MXFP4 as OpenAI publishes them
    (codes and E8M0 scales, gate and up interleaved row by row).
  * gemma3-vl: a language model in text_config and a SigLIP vision tower (--mmproj):
    the projector's norm stored as an offset (bf16, one added in f32), its input
    projection kept F16 and the embeddings F32 at every outtype, an MLP width (80)
    Q8_0 cannot take, 4 tokens an image (a projector scale other than llama.cpp's 4),
    CLIP's image mean and std (decimals f32 cannot hold).
  * pixtral: LLaVA with a Pixtral vision tower (--mmproj) and a Mistral language model: the
    tower's Q/K rows permuted as LLaMA's, a gated SiLU feed-forward, a two-layer projector
    with biases, the fixed layer-norm epsilon Pixtral's config leaves out; [IMG_BREAK].
  * qwen2vl, qwen25vl: multi-section rope (mrope_section), a tower whose fused Q/K/V is split
    and whose Conv3D patch embedding becomes two Conv2D ones; Qwen2-VL's feed-forward of
    fc1/fc2 (quick GELU), Qwen2.5-VL's gated SiLU one and its window-attention pattern.
  * llava: LLaVA-1.5 as llava-hf publishes it: a CLIP tower (quick GELU, a class embedding,
    vision_config saved as a difference from CLIPVisionConfig's defaults with the vocab_size
    llava-hf's configs carry), written by llama.cpp's legacy LLaVA scripts: its last block and
    final norm dropped, the projector's matrices f16 at every outtype; f16-edge rows in the
    projector's second layer.
  * mistral3: Pixtral's tower with Mistral 3's projector (an RMS norm, a 2x2 patch merger,
    no biases) and a Mistral language model under the mistral3 architecture.
"""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

SEED = 20240601

FAMILIES = {
    "llama": "tiny-llama-3-chat",
    "mistral": "Mistral-Tiny-180K-v0.3",
    "qwen2": "Qwen2.5-Tiny-Instruct",
    "qwen3": "qwen3",
    "gemma3": "gemma-3-tiny-it",
    "phi3": "Phi-3-mini-4k-instruct",
    "phi3-longrope": "Phi-3-mini-128k-instruct",
    "llama-yarn": "Llama-Tiny-YaRN",
    "qwen3-yarn": "Qwen3-Tiny-YaRN",
    "mixtral": "Mixtral-Tiny-4x8",
    "qwen2moe": "Qwen1.5-MoE-Tiny",
    "qwen3moe": "Qwen3-MoE-Tiny",
    "olmoe": "OLMoE-Tiny-0924",
    "gemma": "gemma-tiny",
    "gemma2": "gemma-2-tiny-it",
    "starcoder2": "starcoder2-tiny",
    "olmo2": "OLMo-2-Tiny-Instruct",
    "granite": "granite-3.1-tiny-instruct",
    "smollm3": "SmolLM3-Tiny",
    "gptneox": "pythia-tiny-deduped",
    "granitemoe": "granite-3.0-tiny-a400m",
    "olmo": "OLMo-Tiny-hf",
    "cohere": "c4ai-command-r-tiny",
    "cohere2": "c4ai-command-r7b-tiny",
    "phi2": "phi-2-tiny",
    "stablelm": "stablelm-2-tiny",
    "ernie": "ERNIE-4.5-Tiny-PT",
    "falcon": "falcon-tiny",
    "gpt2": "gpt2-tiny",
    "deepseek2": "DeepSeek-V2-Lite-Tiny",
    "deepseek3": "DeepSeek-V3-Tiny",
    "bert": "bge-tiny-en",
    "roberta": "stsb-roberta-tiny",
    "distilbert": "distilbert-tiny-uncased",
    "glm4": "GLM-4-Tiny-0414",
    "lfm2": "LFM2-Tiny",
    "exaone4": "EXAONE-4.0-Tiny",
    "nomic-bert": "nomic-embed-text-tiny-v1.5",
    "xlm-roberta": "bge-m3-tiny",
    "internlm2": "internlm2-chat-tiny",
    "modernbert": "ModernBERT-tiny",
    "olmo3": "Olmo-3-Tiny-Instruct",
    "arcee": "AFM-Tiny",
    "seed-oss": "Seed-OSS-Tiny-Instruct",
    "ernie-moe": "ERNIE-4.5-Tiny-A3B-PT",
    "gpt-oss": "gpt-oss-tiny",
    "gpt-oss-mxfp4": "gpt-oss-tiny-mxfp4",
    "gemma3-vl": "gemma-3-tiny-vl-it",
    "pixtral": "pixtral-tiny",
    "qwen2vl": "Qwen2-VL-Tiny-Instruct",
    "qwen25vl": "Qwen2.5-VL-Tiny-Instruct",
    "mistral3": "Mistral-Small-3.1-Tiny-Instruct",
    "llava": "llava-1.5-tiny-hf",
}

# --------------------------------------------------------------------------
# Training text: generated, so the fixture needs nothing from outside.
# --------------------------------------------------------------------------

_WORDS = """the of and to in is was that for it as with be on not he I this are or his
from at which but have an they you were her she there been one all we their has would
when if so no will what can more about time up out them some could other into than then
now only its my two like our over first new also after use most where because any these
model token layer weight tensor matrix vector quantize convert float half bfloat scale
block group head attention rotary embedding norm gate up down output vocabulary merge
llama mistral qwen gemma phi rust python numpy torch safetensors gguf file header byte
café naïve résumé façade über straße déjà 日本語 中文 한국어 Привет мир γειά σου 🙂 🚀 ✅""".split()

_CODE = [
    "fn main() { println!(\"hello\"); }",
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "let v: Vec<u8> = vec![0, 1, 2, 3];",
    "{\"key\": [1, 2, 3], \"ok\": true}",
    "x = 3.14159; y = 2.71828; z = x ** y",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it",
]


def corpus(n_lines: int = 4000, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        kind = rng.random()
        if kind < 0.1:
            lines.append(rng.choice(_CODE))
        elif kind < 0.2:
            lines.append(" ".join(str(rng.randrange(0, 10 ** rng.randrange(1, 7))) for _ in range(rng.randrange(1, 6))))
        else:
            words = [rng.choice(_WORDS) for _ in range(rng.randrange(3, 16))]
            s = " ".join(words)
            s = s[0].upper() + s[1:]
            s += rng.choice([".", ".", "!", "?", ",", ";", ":", "...", "\n"])
            if rng.random() < 0.1:
                s = "  " + s + "\t" + rng.choice(_WORDS)
            lines.append(s)
    return lines


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

def train_sentencepiece(path: Path, vocab_size: int, *, gemma_ids: bool = False,
                        user_defined: list[str] | None = None,
                        control: list[str] | None = None,
                        add_dummy_prefix: bool = True) -> None:
    import sentencepiece as spm

    spm.set_random_generator_seed(SEED)
    model = io.BytesIO()
    kwargs = dict(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=add_dummy_prefix,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        character_coverage=0.9995,
        max_sentencepiece_length=16,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    if gemma_ids:
        kwargs.update(pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                      pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>")
    else:
        kwargs.update(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    if user_defined:
        kwargs["user_defined_symbols"] = user_defined
    if control:
        kwargs["control_symbols"] = control
    spm.SentencePieceTrainer.train(**kwargs)
    path.write_bytes(model.getvalue())


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_qwen_bpe(vocab_size: int, added: list[tuple[str, bool]]):
    """Byte-level BPE shaped like Qwen2's tokenizer.json; returns a tokenizers.Tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, special in added if special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, special in added if not special])
    return tok


LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set messages = messages[1:] %}{% endif %}"
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------


def randomize(model, seed: int, *, norm_offset: float = 1.0) -> None:
    """Deterministic random weights: every parameter, in name order."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                value = norm_offset + 0.1 * noise
            elif name.endswith(".bias"):
                value = 0.1 * noise
            else:
                value = 0.05 * noise
            p.copy_(value.to(p.dtype))


def edge_rows(width: int):
    """Four crafted rows (f32) for rounding edge cases; width is a multiple of 32."""
    import numpy as np

    rows = np.zeros((4, width), dtype=np.float32)
    one = np.float32(1.0)
    # Row 0: Q8_0 half-way cases in block 0 (d = 127/127 = 1, so x*id = x); block 1 negative max.
    rows[0, :12] = [127.0, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5, 3.5, 0.0, -0.0]
    rows[0, 32:36] = [-100.0, 50.0, 0.25, -0.75]
    # Row 1: f16 ties (round half to even), overflow, subnormals; bf16 ties.
    h = 2.0 ** -11  # half an f16 ulp at 1.0
    rows[1, :14] = [
        one + h, one + 3 * h, -(one + h), 2049.0, 2051.0,   # ties -> even
        65504.0, 65519.0, 65520.0, -65520.0,                  # f16 max, below/at the overflow tie
        2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 1e-8,         # subnormal, tie to zero, tie up, underflow
        one + 2.0 ** -8,                                      # bf16 tie -> even (1.0)
    ]
    rows[1, 14:18] = [one + 3 * 2.0 ** -8, 6.1e-5, -6.1e-5, 0.1]
    # Row 2: all zero (Q8_0 d == 0 path, both blocks).
    # Row 3: tiny values only (Q8_0 with tiny d), and -0.0.
    rows[3, :] = np.float32(1e-30) * np.arange(width, dtype=np.float32)
    rows[3, 1] = -0.0
    return rows


# --------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------


def save_model(model, out: Path, dtype, *, max_shard_size=None, generation_config=None) -> None:
    model = model.to(dtype)
    if generation_config is not None:
        model.generation_config = generation_config
    kwargs = {"safe_serialization": True}
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(out, **kwargs)


LLAMA3_ROPE = dict(
    max_position_embeddings=131072,
    rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
)
# Every key the converter's YaRN branch writes; LlamaConfig adds rope_type next to type.
LLAMA_YARN_ROPE = dict(
    max_position_embeddings=32768,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
                  "attention_factor": 0.8, "beta_fast": 32.0, "beta_slow": 1.0, "extrapolation_factor": 1.0},
)
# The YaRN settings Qwen3's model cards give (context_length stays 40960).
QWEN3_YARN_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
# Phi-3-mini-128k's shape: exactly the three keys Phi3Config accepts, 8 = (64 / 4) / 2 factors each.
# 1.0000000596046448 = 1 + 2^-24 (ties to 1.0), 1.0000001788139343 = 1 + 3 * 2^-24 (ties up).
PHI3_LONGROPE = dict(
    max_position_embeddings=131072, sliding_window=262144,
    rope_scaling={"type": "longrope",
                  "long_factor": [1.0, 1.0299999713897705, 1.2, 2.5, 7.333333333333333, 1.0000000596046448, 25.5, 40],
                  "short_factor": [1.0, 1.01, 1.02, 1.05, 1.0000001788139343, 1.1, 1.15, 1]},
)


def make_llama(out: Path, rope: dict = LLAMA3_ROPE, *, seed: int = SEED + 1, bf16: bool = False) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizerFast

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, 400)
    tok = LlamaTokenizerFast(vocab_file=str(sp), legacy=False, add_bos_token=True, add_eos_token=False,
                             chat_template=LLAMA2_TEMPLATE, from_slow=True)
    n_vocab = len(tok)
    config = LlamaConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, **rope,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16" if bf16 else "float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    randomize(model, seed)
    with torch.no_grad():
        model.model.embed_tokens.weight[:4] = torch.from_numpy(edge_rows(64))
    save_model(model, out, torch.bfloat16 if bf16 else torch.float32)
    tok.save_pretrained(out)


def make_mistral(out: Path) -> None:
    import torch
    from transformers import LlamaTokenizer, MistralConfig, MistralForCausalLM

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, 384, control=["[INST]", "[/INST]"])
    tok = LlamaTokenizer(vocab_file=str(sp), legacy=False, add_bos_token=True, add_eos_token=False,
                         chat_template=LLAMA2_TEMPLATE)
    n_vocab = len(tok)
    config = MistralConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = MistralForCausalLM(config)
    randomize(model, SEED + 2)
    save_model(model, out, torch.bfloat16, max_shard_size="60KB")
    # Older layout: the chat template inside tokenizer_config.json, not chat_template.jinja.
    tok.save_pretrained(out, save_jinja_files=False)
    assert not (out / "tokenizer.json").exists()


def make_qwen(out: Path, which: str, rope_scaling: dict | None = None, *, seed: int | None = None) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2TokenizerFast

    added = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True)]
    if which == "qwen3":
        added += [("<think>", False), ("</think>", False)]
    bpe = train_qwen_bpe(420 if which == "qwen2" else 448, added)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save(os.path.join(tmp, "tokenizer.json"))
        tok = Qwen2TokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"),
                                 unk_token=None, bos_token=None, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", add_prefix_space=False, errors="replace",
                                 chat_template=CHATML_TEMPLATE, model_max_length=32768)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    n_vocab = len(tok)
    if which == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        config = Qwen2Config(
            vocab_size=n_vocab + 28, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False, sliding_window=32768, max_window_layers=2,
            bos_token_id=pad, eos_token_id=eos, torch_dtype="bfloat16",
        )
        cls, dtype, shard, gen = Qwen2ForCausalLM, torch.bfloat16, None, None
    else:
        from transformers import Qwen3Config, Qwen3ForCausalLM
        config = Qwen3Config(
            vocab_size=n_vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=40960,
            rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=rope_scaling, tie_word_embeddings=True,
            attention_bias=False, bos_token_id=pad, eos_token_id=eos, torch_dtype="float16",
        )
        gen = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad,
                               do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
        cls, dtype, shard = Qwen3ForCausalLM, torch.float16, "50KB"
    torch.manual_seed(SEED)
    model = cls(config)
    randomize(model, seed if seed is not None else SEED + (3 if which == "qwen2" else 4))
    save_model(model, out, dtype, max_shard_size=shard, generation_config=gen)
    tok.save_pretrained(out)
    if which == "qwen2":
        (out / "README.md").write_text(
            "---\nlicense: apache-2.0\nlanguage:\n- en\npipeline_tag: text-generation\n"
            "tags:\n- chat\nbase_model: Qwen/Qwen2.5-0.5B\nlibrary_name: transformers\n---\n\n"
            "# Qwen2.5-Tiny-Instruct\n\nA tiny random test model.\n",
            encoding="utf-8")


def gemma3_tokenizer(out: Path, user_defined: list[str], special: list[str]):
    """Gemma 3's SentencePiece vocabulary (Gemma ids) with these pieces, saved in `out`
    as tokenizer.model; returns the fast tokenizer, not yet saved."""
    from transformers import GemmaTokenizerFast

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, 420, gemma_ids=True, add_dummy_prefix=False,
                        user_defined=["<mask>", "[@BOS@]", "<start_of_turn>", "<end_of_turn>", *user_defined, "\n\n"])
    return GemmaTokenizerFast(vocab_file=str(sp), add_bos_token=True, add_eos_token=False,
                              additional_special_tokens=["<start_of_turn>", "<end_of_turn>", *special],
                              chat_template=GEMMA_TEMPLATE, from_slow=True)


# The tiny Gemma 3 language model's shape and settings.
GEMMA3_TEXT = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
    head_dim=32, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
    rope_local_base_freq=10000.0, sliding_window=512, query_pre_attn_scalar=32, final_logit_softcapping=None,
    attn_logit_softcapping=None, pad_token_id=0, bos_token_id=2,
)
# OpenAI CLIP's image normalization, which most vision towers publish (decimals f32 cannot hold).
CLIP_MEAN_STD = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}


def make_gemma3(out: Path) -> None:
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = gemma3_tokenizer(out, ["<unused0>"], [])
    end_of_turn = tok.convert_tokens_to_ids("<end_of_turn>")
    config = Gemma3TextConfig(
        vocab_size=len(tok), rope_scaling={"rope_type": "linear", "factor": 8.0}, tie_word_embeddings=True,
        eos_token_id=[1, end_of_turn], torch_dtype="float16", **GEMMA3_TEXT,
    )
    config.architectures = ["Gemma3ForCausalLM"]
    torch.manual_seed(SEED)
    model = Gemma3ForCausalLM(config)
    randomize(model, SEED + 5, norm_offset=0.0)
    save_model(model, out, torch.float16)
    tok.save_pretrained(out)


def make_gemma3_vl(out: Path) -> None:
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    image_tokens = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    tok = gemma3_tokenizer(out, image_tokens, image_tokens)
    boi, eoi, image = (tok.convert_tokens_to_ids(t) for t in image_tokens)
    text = Gemma3TextConfig(vocab_size=len(tok), eos_token_id=[1, tok.convert_tokens_to_ids("<end_of_turn>")],
                            **GEMMA3_TEXT)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=2,
                                image_size=56, patch_size=14, layer_norm_eps=1e-6, vision_use_head=False)
    config = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          boi_token_index=boi, eoi_token_index=eoi, image_token_index=image)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Gemma3ForConditionalGeneration(config)
    randomize(model, SEED + 41, norm_offset=0.0)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)
    # What Gemma3ImageProcessor saves (it needs PIL to be built), for 4 tokens an image.
    processor = {
        "do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
        "do_resize": True, **CLIP_MEAN_STD,
        "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 4,
        "processor_class": "Gemma3Processor",
        "resample": 2, "rescale_factor": 0.00392156862745098, "size": {"height": 56, "width": 56},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")


def make_pixtral(out: Path, which: str = "llava") -> None:
    import torch
    from transformers import MistralConfig, PixtralVisionConfig

    tok, ids = train_byte_bpe(400, ["<s>", "[IMG]", "[IMG_BREAK]", "[IMG_END]", "</s>"])
    bos, image, _, _, eos = ids
    text = MistralConfig(vocab_size=len(tok), intermediate_size=128, head_dim=16, max_position_embeddings=131072,
                         rms_norm_eps=1e-5, rope_theta=1000000000.0, sliding_window=None, tie_word_embeddings=False,
                         bos_token_id=bos, eos_token_id=eos, **TINY)
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                                 head_dim=16, image_size=64, patch_size=16, hidden_act="silu", rope_theta=10000.0)
    if which == "llava":
        from transformers import LlavaConfig as Config, LlavaForConditionalGeneration as Model
        config = Config(text_config=text.to_dict(), vision_config=vision.to_dict(), image_token_index=image,
                        projector_hidden_act="gelu", vision_feature_layer=-1, vision_feature_select_strategy="full",
                        image_seq_length=1)
    else:
        from transformers import Mistral3Config as Config, Mistral3ForConditionalGeneration as Model
        config = Config(text_config=text.to_dict(), vision_config=vision.to_dict(), image_token_index=image,
                        projector_hidden_act="gelu", vision_feature_layer=-1, multimodal_projector_bias=False,
                        spatial_merge_size=2)
    config.architectures = [Model.__name__]
    torch.manual_seed(SEED)
    model = Model(config)
    randomize(model, SEED + (42 if which == "llava" else 45))
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)
    # What PixtralImageProcessor saves (it needs PIL to be built).
    processor = {
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        **CLIP_MEAN_STD, "image_processor_type": "PixtralImageProcessor",
        "patch_size": {"height": 16, "width": 16},
        "processor_class": "PixtralProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
        "size": {"longest_edge": 64},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")


def make_llava(out: Path) -> None:
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    tok = sentencepiece_llama(out, 400)
    tok.add_tokens(["<image>"], special_tokens=True)
    tok.add_special_tokens({"pad_token": "<pad>"})
    image, pad = tok.convert_tokens_to_ids(["<image>", "<pad>"])
    text = LlamaConfig(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=4096, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       pad_token_id=pad, **TINY)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=80, num_hidden_layers=3, num_attention_heads=2,
                              image_size=28, patch_size=14, projection_dim=48)
    config = LlavaConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), image_token_index=image,
                         image_seq_length=4, pad_token_id=pad)
    config.architectures = ["LlavaForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config)
    randomize(model, SEED + 47)
    with torch.no_grad():
        model.model.multi_modal_projector.linear_2.weight[:4] = torch.from_numpy(edge_rows(64))
    save_model(model, out, torch.bfloat16)
    # llava-hf's vision_config: what differs from CLIPVisionConfig's defaults, and a vocab_size.
    saved = json.loads((out / "config.json").read_text())
    defaults = CLIPVisionConfig().to_dict()
    saved["vision_config"] = {key: value for key, value in saved["vision_config"].items()
                              if key == "model_type" or defaults.get(key) != value}
    saved["vision_config"]["vocab_size"] = 32000
    (out / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    tok.save_pretrained(out)
    # What CLIPImageProcessor saves for llava-1.5 (it needs PIL to be built), at 28 pixels.
    processor = {
        "crop_size": {"height": 28, "width": 28}, "do_center_crop": True, "do_convert_rgb": True,
        "do_normalize": True, "do_rescale": True, "do_resize": True, **CLIP_MEAN_STD,
        "image_processor_type": "CLIPImageProcessor", "processor_class": "LlavaProcessor", "resample": 3,
        "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 28},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")


QWEN_VL_TOKENS = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                  ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
                  ("<|image_pad|>", True), ("<|video_pad|>", True)]
# Qwen2VLImageProcessor's saved config (it needs PIL to be built).
QWEN_VL_PROCESSOR = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    **CLIP_MEAN_STD, "image_processor_type": "Qwen2VLImageProcessor",
    "max_pixels": 12845056, "merge_size": 2,
    "min_pixels": 3136, "patch_size": 14, "processor_class": "Qwen2VLProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "temporal_patch_size": 2,
}


def make_qwen_vl(out: Path, which: str) -> None:
    import torch
    from transformers import Qwen2TokenizerFast

    bpe = train_qwen_bpe(420, QWEN_VL_TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save(os.path.join(tmp, "tokenizer.json"))
        tok = Qwen2TokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"),
                                 unk_token=None, bos_token=None, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", add_prefix_space=False, errors="replace",
                                 chat_template=CHATML_TEMPLATE, model_max_length=32768)
    ids = {t: tok.convert_tokens_to_ids(t) for t, _ in QWEN_VL_TOKENS}
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                use_sliding_window=False, sliding_window=32768, max_window_layers=2,
                rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(SEED)
    if which == "qwen2vl":
        from transformers import Qwen2VLConfig as Config, Qwen2VLForConditionalGeneration as Model
        vision = dict(depth=3, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, in_chans=3, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2)
        model_type, dtype, seed = "qwen2_vl", torch.bfloat16, SEED + 43
    else:
        from transformers import Qwen2_5_VLConfig as Config, Qwen2_5_VLForConditionalGeneration as Model
        vision = dict(depth=4, hidden_size=32, intermediate_size=96, out_hidden_size=64, num_heads=2, in_chans=3,
                      patch_size=14, spatial_merge_size=2, spatial_patch_size=14, temporal_patch_size=2,
                      fullatt_block_indexes=[1, 3], window_size=112, hidden_act="silu", tokens_per_second=2)
        model_type, dtype, seed = "qwen2_5_vl", torch.float16, SEED + 44
    model = Model(Config(text_config=text, vision_config=vision, **tokens))
    randomize(model, seed)
    save_model(model, out, dtype)
    # As Qwen publishes both: the language model's settings at the top level, the rope
    # scaling in its old spelling, the tower's settings as its own code names them
    # (transformers 4.57 saves another layout, which the converter cannot read for --mmproj).
    flat = {"architectures": [type(model).__name__], "attention_dropout": 0.0,
            **{k: v for k, v in text.items() if k != "rope_scaling"}, "hidden_act": "silu",
            "initializer_range": 0.02, "model_type": model_type, "torch_dtype": str(dtype).removeprefix("torch."),
            "transformers_version": "4.41.2", "use_cache": True, "vision_token_id": ids["<|vision_pad|>"],
            **tokens, "vision_config": vision, "rope_scaling": text["rope_scaling"]}
    (out / "config.json").write_text(json.dumps(flat, indent=2) + "\n")
    tok.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(QWEN_VL_PROCESSOR, indent=2, sort_keys=True) + "\n")


PHI3_SHORT = dict(max_position_embeddings=4096, sliding_window=2047, rope_scaling=None)


def make_phi3(out: Path, context: dict = PHI3_SHORT, *, seed: int = SEED + 6) -> None:
    import torch
    from transformers import AddedToken, LlamaTokenizerFast, Phi3Config, Phi3ForCausalLM

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, 400)
    tok = LlamaTokenizerFast(vocab_file=str(sp), legacy=False, add_bos_token=False, add_eos_token=False,
                             chat_template=PHI3_TEMPLATE, from_slow=True)
    specials = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|system|>",
                "<|end|>", "<|user|>"]
    tok.add_special_tokens({"additional_special_tokens": [AddedToken(t, special=True, normalized=False, rstrip=True)
                                                          for t in specials]})
    tok.add_tokens([AddedToken("<|placeholder3|>", special=False, normalized=False)])
    tok.eos_token = "<|endoftext|>"
    tok.pad_token = "<|endoftext|>"
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    n_vocab = len(tok)
    config = Phi3Config(
        vocab_size=(n_vocab + 63) // 64 * 64, hidden_size=64, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, **context,
        original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=eos, pad_token_id=eos,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = Phi3ForCausalLM(config)
    randomize(model, seed)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def train_byte_bpe(vocab_size: int, specials: list[str]):
    """A byte-level BPE tokenizer.json (GPT-2 style: ByteLevel pre-tokenizer with its regex), wrapped as a
    PreTrainedTokenizerFast; returns (tokenizer, ids of `specials`)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    bpe.train_from_iterator(corpus(), trainer=trainer)
    bpe.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save(os.path.join(tmp, "tokenizer.json"))
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"),
                                      bos_token=specials[0], eos_token=specials[-1], pad_token=specials[0],
                                      unk_token=None, chat_template=CHATML_TEMPLATE, model_max_length=4096)
    return tok, [tok.convert_tokens_to_ids(t) for t in specials]


def sentencepiece_llama(out: Path, vocab: int):
    from transformers import LlamaTokenizerFast

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, vocab)
    return LlamaTokenizerFast(vocab_file=str(sp), legacy=False, add_bos_token=True, add_eos_token=False,
                              chat_template=LLAMA2_TEMPLATE, from_slow=True)


def sentencepiece_gemma(out: Path, vocab: int):
    from transformers import GemmaTokenizerFast

    sp = out / "tokenizer.model"
    train_sentencepiece(sp, vocab, gemma_ids=True, add_dummy_prefix=False,
                        user_defined=["<mask>", "<start_of_turn>", "<end_of_turn>", "<unused0>"])
    return GemmaTokenizerFast(vocab_file=str(sp), add_bos_token=True, add_eos_token=False,
                              additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
                              chat_template=GEMMA_TEMPLATE, from_slow=True)


# A layer's shape shared by the new families: small, but every row length a multiple of 32.
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def make_mixtral(out: Path) -> None:
    """Four experts a layer, two used: per-expert w1/w2/w3 stacked into *_exps, the router kept F32."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    tok = sentencepiece_llama(out, 384)
    config = MixtralConfig(vocab_size=len(tok), intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
                           sliding_window=None, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                           torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = MixtralForCausalLM(config)
    randomize(model, SEED + 10)
    save_model(model, out, torch.bfloat16, max_shard_size="100KB")
    tok.save_pretrained(out)


def make_qwen_moe(out: Path, which: str) -> None:
    """Qwen MoE: per-expert down/gate/up stacked (in that order), a shared expert and its gate (Qwen2-MoE),
    Q/K norms (Qwen3-MoE)."""
    import torch
    from transformers import Qwen2TokenizerFast

    bpe = train_qwen_bpe(400, [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True)])
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save(os.path.join(tmp, "tokenizer.json"))
        tok = Qwen2TokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"), unk_token=None,
                                 bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 add_prefix_space=False, chat_template=CHATML_TEMPLATE, model_max_length=32768)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    common = dict(vocab_size=len(tok), intermediate_size=128, moe_intermediate_size=32, num_experts=4,
                  num_experts_per_tok=2, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=False, bos_token_id=pad, eos_token_id=eos, **TINY)
    if which == "qwen2moe":
        from transformers import Qwen2MoeConfig as Config, Qwen2MoeForCausalLM as Model
        config = Config(shared_expert_intermediate_size=64, use_sliding_window=False, torch_dtype="bfloat16",
                        **common)
        dtype, seed = torch.bfloat16, SEED + 11
    else:
        from transformers import Qwen3MoeConfig as Config, Qwen3MoeForCausalLM as Model
        # llama.cpp's qwen3moe always renormalizes the chosen experts' weights, as Qwen3's MoE releases do.
        config = Config(head_dim=32, norm_topk_prob=True, use_sliding_window=False, torch_dtype="float16", **common)
        dtype, seed = torch.float16, SEED + 12
    torch.manual_seed(SEED)
    model = Model(config)
    randomize(model, seed)
    save_model(model, out, dtype, max_shard_size="100KB")
    tok.save_pretrained(out)


def make_olmoe(out: Path) -> None:
    import torch
    from transformers import OlmoeConfig, OlmoeForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|padding|>", "<|endoftext|>"])
    config = OlmoeConfig(vocab_size=len(tok), intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                         max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, clip_qkv=None,
                         tie_word_embeddings=False, pad_token_id=pad, bos_token_id=None, eos_token_id=eos,
                         torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = OlmoeForCausalLM(config)
    randomize(model, SEED + 13)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_gemma(out: Path, which: str) -> None:
    """Gemma and Gemma 2: norm offsets, tied embeddings (no lm_head); Gemma 2's soft-caps and window."""
    import torch

    tok = sentencepiece_gemma(out, 400)
    end_of_turn = tok.convert_tokens_to_ids("<end_of_turn>")
    common = dict(vocab_size=len(tok), intermediate_size=128, head_dim=32, max_position_embeddings=8192,
                  rms_norm_eps=1e-6, rope_theta=10000.0, pad_token_id=0, bos_token_id=2, **TINY)
    if which == "gemma":
        from transformers import GemmaConfig as Config, GemmaForCausalLM as Model
        config = Config(eos_token_id=1, hidden_activation="gelu_pytorch_tanh", torch_dtype="bfloat16", **common)
        dtype, seed = torch.bfloat16, SEED + 14
    else:
        from transformers import Gemma2Config as Config, Gemma2ForCausalLM as Model
        config = Config(eos_token_id=[1, end_of_turn], sliding_window=512, query_pre_attn_scalar=32,
                        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, torch_dtype="float16", **common)
        dtype, seed = torch.float16, SEED + 15
    torch.manual_seed(SEED)
    model = Model(config)
    randomize(model, seed, norm_offset=0.0)
    save_model(model, out, dtype)
    tok.save_pretrained(out)


def make_starcoder2(out: Path) -> None:
    """LayerNorm with biases, biased projections, a GELU MLP (c_fc/c_proj), tied embeddings."""
    import torch
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<fim_prefix>", "<|endoftext|>"])
    config = Starcoder2Config(vocab_size=len(tok), intermediate_size=256, max_position_embeddings=16384,
                              norm_epsilon=1e-5, rope_theta=100000.0, sliding_window=None, use_bias=True,
                              tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, torch_dtype="float32",
                              **TINY)
    torch.manual_seed(SEED)
    model = Starcoder2ForCausalLM(config)
    randomize(model, SEED + 16)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)


def make_olmo2(out: Path) -> None:
    """Post-norms around both halves, full-width Q/K norms, no pre-norms."""
    import torch
    from transformers import Olmo2Config, Olmo2ForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|pad|>", "<|endoftext|>"])
    config = Olmo2Config(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=4096,
                         rms_norm_eps=1e-6, rope_theta=500000.0, tie_word_embeddings=False, pad_token_id=pad,
                         bos_token_id=eos, eos_token_id=eos, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = Olmo2ForCausalLM(config)
    randomize(model, SEED + 17)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_olmo3(out: Path) -> None:
    """OLMo 2's layout with OLMo 3's sliding window: three sliding blocks, then a global one."""
    import torch
    from transformers import Olmo3Config, Olmo3ForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|pad|>", "<|endoftext|>"])
    config = Olmo3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=65536,
                         sliding_window=16, rms_norm_eps=1e-6, rope_theta=500000.0, tie_word_embeddings=False,
                         pad_token_id=pad, bos_token_id=eos, eos_token_id=eos, torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = Olmo3ForCausalLM(config)
    randomize(model, SEED + 42)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_arcee(out: Path) -> None:
    """LLaMA's layout with an up/down MLP (ReLU squared), its own architecture."""
    import torch
    from transformers import ArceeConfig, ArceeForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|begin_of_text|>", "<|end_of_text|>"])
    config = ArceeConfig(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=65536,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=bos,
                         eos_token_id=eos, pad_token_id=eos, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = ArceeForCausalLM(config)
    randomize(model, SEED + 43)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_seed_oss(out: Path) -> None:
    """LLaMA's names with Q/K/V biases and a head_dim apart from the heads' width."""
    import torch
    from transformers import SeedOssConfig, SeedOssForCausalLM

    tok, (bos, pad, eos) = train_byte_bpe(400, ["<seed:bos>", "<seed:pad>", "<seed:eos>"])
    config = SeedOssConfig(vocab_size=len(tok), intermediate_size=128, head_dim=32, max_position_embeddings=524288,
                           rms_norm_eps=1e-6, rope_theta=10000000.0, attention_bias=True, tie_word_embeddings=False,
                           bos_token_id=bos, pad_token_id=pad, eos_token_id=eos, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = SeedOssForCausalLM(config)
    randomize(model, SEED + 44)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_granite(out: Path) -> None:
    """LLaMA's layout with Granite's four multipliers (head_dim dropped by the converter)."""
    import torch
    from transformers import GraniteConfig, GraniteForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|start_of_role|>", "<|end_of_text|>"])
    config = GraniteConfig(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=131072,
                           rms_norm_eps=1e-5, rope_theta=10000000.0, attention_multiplier=0.015625,
                           embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0,
                           tie_word_embeddings=True, pad_token_id=eos, bos_token_id=eos, eos_token_id=eos,
                           torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = GraniteForCausalLM(config)
    randomize(model, SEED + 18)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_smollm3(out: Path) -> None:
    """LLaMA's layout under its own architecture (no-rope layers are not written)."""
    import torch
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|begin_of_text|>", "<|im_end|>"])
    config = SmolLM3Config(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=65536,
                           rms_norm_eps=1e-6, rope_theta=5000000.0, tie_word_embeddings=True,
                           pad_token_id=eos, bos_token_id=bos, eos_token_id=eos, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = SmolLM3ForCausalLM(config)
    randomize(model, SEED + 19)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_glm4(out: Path) -> None:
    """Post-norms after attention and the MLP, gate and up fused, Q/K/V biases, rope over a quarter of each
    head; the tokenizer files give the end and padding ids only (the converter defaults the rest)."""
    import torch
    from transformers import Glm4Config, Glm4ForCausalLM

    specials = ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
    tok, ids = train_byte_bpe(400, specials)
    tok.bos_token = None
    tok.eos_token = "<|endoftext|>"
    end = ids[0]
    config = Glm4Config(vocab_size=len(tok), intermediate_size=96, max_position_embeddings=32768, head_dim=32,
                        partial_rotary_factor=0.25, rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=True,
                        tie_word_embeddings=False, pad_token_id=end, eos_token_id=[end, ids[4], ids[6]],
                        torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = Glm4ForCausalLM(config)
    randomize(model, SEED + 35)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_lfm2(out: Path) -> None:
    """Short-convolution blocks around an attention block (Q/K norms), the feed-forward width two thirds of
    intermediate_size rounded up to block_multiple_of, tied embeddings, the final norm named embedding_norm."""
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM

    tok, (pad, bos, start, end) = train_byte_bpe(400, ["<|pad|>", "<|startoftext|>", "<|im_start|>", "<|im_end|>"])
    config = Lfm2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, block_multiple_of=64,
                        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, full_attn_idxs=[1],
                        max_position_embeddings=128000, norm_eps=1e-5, rope_theta=1000000.0, conv_L_cache=3,
                        pad_token_id=pad, bos_token_id=bos, eos_token_id=end, torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = Lfm2ForCausalLM(config)
    randomize(model, SEED + 36)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_exaone4(out: Path) -> None:
    """Post-norms only, Q/K norms, LLaMA 3 rope factors, and the 32B's hybrid attention: 64 blocks (the one
    depth at which llama.cpp slides), three sliding blocks to a global one, very narrow to stay small."""
    import torch
    from transformers import Exaone4Config, Exaone4ForCausalLM

    tok, (pad, bos, end) = train_byte_bpe(400, ["[PAD]", "[BOS]", "[|endofturn|]"])
    blocks = 64
    config = Exaone4Config(vocab_size=len(tok), hidden_size=32, intermediate_size=32, num_hidden_layers=blocks,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=131072,
                           rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=16, sliding_window_pattern=4,
                           rope_scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                           tie_word_embeddings=False, pad_token_id=pad, bos_token_id=bos, eos_token_id=end,
                           torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = Exaone4ForCausalLM(config)
    randomize(model, SEED + 37)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_gptneox(out: Path) -> None:
    """Q/K/V fused head by head (reordered by the converter), partial rotary, parallel residual."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|padding|>", "<|endoftext|>"])
    config = GPTNeoXConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=256, max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000,
                           layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False,
                           bos_token_id=eos, eos_token_id=eos, torch_dtype="float16")
    torch.manual_seed(SEED)
    model = GPTNeoXForCausalLM(config)
    randomize(model, SEED + 20)
    save_model(model, out, torch.float16)
    tok.save_pretrained(out)


def make_granitemoe(out: Path) -> None:
    """Experts stored stacked: input_linear (gate and up per expert) split by the converter."""
    import torch
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|start_of_role|>", "<|end_of_text|>"])
    config = GraniteMoeConfig(vocab_size=len(tok), intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                              max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0,
                              attention_multiplier=0.0078125, embedding_multiplier=12.0, residual_multiplier=0.22,
                              logits_scaling=6.0, tie_word_embeddings=True, pad_token_id=eos, bos_token_id=eos,
                              eos_token_id=eos, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = GraniteMoeForCausalLM(config)
    randomize(model, SEED + 21)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_olmo(out: Path) -> None:
    """Non-parametric LayerNorms (no norm tensors), Q/K clipping."""
    import torch
    from transformers import OlmoConfig, OlmoForCausalLM

    tok, (pad, eos) = train_byte_bpe(400, ["<|padding|>", "<|endoftext|>"])
    config = OlmoConfig(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=2048, rope_theta=10000.0,
                        clip_qkv=8.0, tie_word_embeddings=False, pad_token_id=pad, eos_token_id=eos,
                        torch_dtype="float32", **TINY)
    torch.manual_seed(SEED)
    model = OlmoForCausalLM(config)
    randomize(model, SEED + 22)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)


def make_cohere(out: Path, which: str) -> None:
    """Command-R: one LayerNorm a block, Q/K norms, the logit scale; Command R7B: its window and rotary_pct."""
    import torch

    tok, (bos, eos) = train_byte_bpe(400, ["<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"])
    common = dict(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=8192, layer_norm_eps=1e-5,
                  logit_scale=0.125, rope_theta=10000.0, bos_token_id=bos, eos_token_id=eos, pad_token_id=bos, **TINY)
    if which == "cohere":
        from transformers import CohereConfig as Config, CohereForCausalLM as Model
        config = Config(use_qk_norm=True, torch_dtype="float16", **common)
        config.model_max_length = 131072
        dtype, seed = torch.float16, SEED + 23
    else:
        from transformers import Cohere2Config as Config, Cohere2ForCausalLM as Model
        config = Config(sliding_window=512, head_dim=16, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                        torch_dtype="bfloat16", **dict(common, num_hidden_layers=4))
        config.rotary_pct = 0.5
        dtype, seed = torch.bfloat16, SEED + 24
    torch.manual_seed(SEED)
    model = Model(config)
    randomize(model, seed)
    save_model(model, out, dtype)
    tok.save_pretrained(out)


def make_phi2(out: Path) -> None:
    """A parallel block around one LayerNorm, biases everywhere, partial rotary."""
    import torch
    from transformers import PhiConfig, PhiForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|padding|>", "<|endoftext|>"])
    config = PhiConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                       partial_rotary_factor=0.5, layer_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                       bos_token_id=eos, eos_token_id=eos, torch_dtype="float16")
    torch.manual_seed(SEED)
    model = PhiForCausalLM(config)
    randomize(model, SEED + 25)
    save_model(model, out, torch.float16)
    tok.save_pretrained(out)


def make_stablelm(out: Path) -> None:
    """LayerNorms with biases, Q/K/V biases, a quarter of each head rotated."""
    import torch
    from transformers import StableLmConfig, StableLmForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|endoftext|>", "<|im_end|>"])
    config = StableLmConfig(vocab_size=len(tok), intermediate_size=128, max_position_embeddings=4096,
                            partial_rotary_factor=0.25, layer_norm_eps=1e-5, rope_theta=10000.0, use_qkv_bias=True,
                            tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos, torch_dtype="bfloat16",
                            **TINY)
    torch.manual_seed(SEED)
    model = StableLmForCausalLM(config)
    randomize(model, SEED + 26)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_ernie(out: Path) -> None:
    """A SentencePiece vocabulary whose tokenizer config says add_prefix_space; tied embeddings."""
    import torch
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    tok = sentencepiece_llama(out, 400)
    tok.add_prefix_space = False
    config = Ernie4_5Config(vocab_size=len(tok), intermediate_size=128, head_dim=16, max_position_embeddings=131072,
                            rms_norm_eps=1e-5, rope_theta=500000.0, use_bias=False, tie_word_embeddings=True,
                            bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="bfloat16", **TINY)
    torch.manual_seed(SEED)
    model = Ernie4_5ForCausalLM(config)
    randomize(model, SEED + 27)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)
    # ERNIE's tokenizer config carries the flag; LlamaTokenizerFast does not write it.
    path = out / "tokenizer_config.json"
    config_json = json.loads(path.read_text(encoding="utf-8"))
    config_json["add_prefix_space"] = False
    path.write_text(json.dumps(config_json, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_ernie_moe(out: Path) -> None:
    """ERNIE 4.5's MoE: a leading dense block, then four experts a block (gate, up, down stacked) with a shared
    expert and the router's score-correction bias."""
    import torch
    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

    tok = sentencepiece_llama(out, 400)
    config = Ernie4_5_MoeConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_num_experts=4, moe_k=2,
                                moe_intermediate_size=32, moe_layer_start_index=1, moe_layer_end_index=2,
                                moe_num_shared_experts=1, max_position_embeddings=131072, rms_norm_eps=1e-5,
                                rope_theta=500000.0, use_bias=False, tie_word_embeddings=True, bos_token_id=1,
                                eos_token_id=2, pad_token_id=0, torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = Ernie4_5_MoeForCausalLM(config)
    randomize(model, SEED + 45)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_gpt_oss(out: Path) -> None:
    """GPT-OSS with its experts in BF16 (as the converter's dequantized-MXFP4 path writes them): gate and up
    interleaved column by column in one stacked gate_up_proj (split by stride), expert biases, attention sinks,
    a router with a bias, alternating sliding and full attention, YaRN with its truncate flag."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, ["<|startoftext|>", "<|return|>"])
    config = GptOssConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                          num_experts_per_tok=2, sliding_window=128, layer_types=["sliding_attention", "full_attention"],
                          max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0,
                          rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "truncate": False, "original_max_position_embeddings": 4096},
                          tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                          torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = GptOssForCausalLM(config)
    randomize(model, SEED + 46)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_gpt_oss_mxfp4(out: Path) -> None:
    """GPT-OSS as OpenAI publishes it: the experts' weights in MXFP4 (`*_blocks`: two 4-bit codes a byte, even
    element low; `*_scales`: one E8M0 exponent per 32 elements), rows by output feature, gate and up interleaved
    row by row; quantized here from the BF16 fixture's weights."""
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    make_gpt_oss(out)
    path = out / "model.safetensors"
    tensors = load_file(path)
    for name in [n for n in tensors if n.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]:
        # [experts, in, out] -> rows of `in` values per output feature.
        rows = tensors.pop(name).float().transpose(1, 2).contiguous().numpy()
        blocks, scales = mxfp4(rows)
        tensors[f"{name}_blocks"] = torch.from_numpy(blocks)
        tensors[f"{name}_scales"] = torch.from_numpy(scales)
    save_file(dict(sorted(tensors.items())), path, metadata={"format": "pt"})
    config_path = out / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
        "quant_method": "mxfp4",
    }
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def mxfp4(rows):
    """OCP MXFP4 of `rows` [..., n] (n a multiple of 32): codes [..., n / 32, 16] uint8, two a byte with the even
    element low, and E8M0 scales [..., n / 32] uint8, each block's largest magnitude scaled into FP4's range."""
    import numpy as np

    groups = rows.reshape(*rows.shape[:-1], rows.shape[-1] // 32, 32)
    largest = np.abs(groups).max(axis=-1)
    exponent = np.where(largest > 0, np.floor(np.log2(np.maximum(largest, 1e-30))) - 2, -127).clip(-127, 127)
    scaled = groups / np.exp2(exponent)[..., None]
    values = np.array(FP4_VALUES, dtype=np.float32)
    codes = np.abs(np.abs(scaled)[..., None] - values).argmin(axis=-1).astype(np.uint8)
    codes |= np.where(scaled < 0, 8, 0).astype(np.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.astype(np.uint8), (exponent + 127).astype(np.uint8)


def make_falcon(out: Path) -> None:
    """Falcon-7B's layout: one KV head (multi-query), Q/K/V fused by KV group, a parallel block."""
    import torch
    from transformers import FalconConfig, FalconForCausalLM

    tok, (bos, eos) = train_byte_bpe(400, [">>ABSTRACT<<", "<|endoftext|>"])
    config = FalconConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_kv_heads=1, multi_query=True, new_decoder_architecture=False, parallel_attn=True,
                          bias=False, alibi=False, layer_norm_epsilon=1e-5, ffn_hidden_size=256,
                          max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=True,
                          bos_token_id=eos, eos_token_id=eos, torch_dtype="bfloat16")
    torch.manual_seed(SEED)
    model = FalconForCausalLM(config)
    randomize(model, SEED + 28)
    save_model(model, out, torch.bfloat16)
    tok.save_pretrained(out)


def make_gpt2(out: Path) -> None:
    """Conv1D weights stored [in, out] (transposed by the converter), learned positions, n_ctx."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tok, (eos,) = train_byte_bpe(400, ["<|endoftext|>"])
    config = GPT2Config(vocab_size=len(tok), n_positions=256, n_ctx=256, n_embd=64, n_layer=2, n_head=4,
                        layer_norm_epsilon=1e-5, bos_token_id=eos, eos_token_id=eos, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    randomize(model, SEED + 29)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)


def make_deepseek(out: Path, which: str) -> None:
    """Multi-head latent attention (V2-Lite's without the query's low-rank pair, V3's with it), a dense first
    block, four routed experts and a shared one; V3's sigmoid router with its score bias, in two groups."""
    import torch

    tok, (bos, eos) = train_byte_bpe(400, ["<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                           "<\uff5cend\u2581of\u2581sentence\uff5c>"])
    yarn = dict(type="yarn", factor=40.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
                mscale=0.707, mscale_all_dim=0.707)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
                  qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4, n_shared_experts=1,
                  num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=163840, rms_norm_eps=1e-6,
                  rope_theta=10000.0, rope_scaling=yarn, tie_word_embeddings=False, bos_token_id=bos,
                  eos_token_id=eos, torch_dtype="bfloat16")
    if which == "v2":
        from transformers import DeepseekV2Config as Config, DeepseekV2ForCausalLM as Model
        config = Config(q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1, norm_topk_prob=False,
                        routed_scaling_factor=1.0, **common)
        seed = SEED + 30
    else:
        from transformers import DeepseekV3Config as Config, DeepseekV3ForCausalLM as Model
        config = Config(q_lora_rank=32, n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                        scoring_func="sigmoid", topk_method="noaux_tc", **common)
        seed = SEED + 31
    torch.manual_seed(SEED)
    model = Model(config)
    randomize(model, seed)
    if which == "v3":
        # The router's score bias is a buffer: random too, so its bytes are checked.
        generator = torch.Generator().manual_seed(seed + 1)
        for layer in model.model.layers[1:]:
            bias = layer.mlp.gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=generator) * 0.01)
    save_model(model, out, torch.bfloat16, max_shard_size="100KB")
    tok.save_pretrained(out)


def make_bert(out: Path) -> None:
    """An embedding model as sentence-transformers publishes one: BertModel, a lower-casing WordPiece
    vocabulary, and the pooling module's files (mean pooling)."""
    import torch
    from transformers import BertConfig, BertModel

    tok = train_word_piece()
    config = BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128, type_vocab_size=2,
                        layer_norm_eps=1e-12, pad_token_id=0, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = BertModel(config, add_pooling_layer=True)
    randomize(model, SEED + 32)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    }, indent=2) + "\n")


def sentence_transformers_pooling(out: Path, width: int) -> None:
    """The modules.json and mean-pooling config sentence-transformers saves beside a model."""
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ], indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": width, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    }, indent=2) + "\n")


def make_nomic_bert(out: Path) -> None:
    """nomic-embed-text v1.5 as published: NomicBertModel's config (remote code, so config.json as its own
    code writes it) and its f32 weights under its own names (fused Wqkv, SwiGLU fc11/fc12, rotary positions),
    the vocabulary padded to a multiple of 64, BERT's WordPiece, mean pooling."""
    import torch
    from safetensors.torch import save_file

    tok = train_word_piece()
    width, inner, blocks = 64, 128, 2
    vocab = (len(tok) + 63) // 64 * 64
    config = {
        "activation_function": "swiglu", "architectures": ["NomicBertModel"], "attn_pdrop": 0.0,
        "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                     "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"},
        "bos_token_id": None, "causal": False, "dense_seq_output": True, "embd_pdrop": 0.0, "eos_token_id": None,
        "fused_bias_fc": True, "fused_dropout_add_ln": True, "initializer_range": 0.02, "layer_norm_epsilon": 1e-12,
        "max_trained_positions": 2048, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "model_type": "nomic_bert",
        "n_embd": width, "n_head": 4, "n_inner": inner, "n_layer": blocks, "n_positions": 8192,
        "pad_vocab_size_multiple": 64, "parallel_block": False, "parallel_block_tied_norm": False,
        "prenorm": False, "qkv_proj_bias": False, "reorder_and_upcast_attn": False, "resid_pdrop": 0.0,
        "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None, "rotary_scaling_factor": None, "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
        "torch_dtype": "float32", "transformers_version": "4.34.0", "type_vocab_size": 2, "use_cache": True,
        "use_flash_attn": True, "use_rms_norm": False, "use_xentropy": True, "vocab_size": vocab,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen = torch.Generator().manual_seed(SEED + 38)
    normal = lambda *shape: torch.randn(*shape, generator=gen) * 0.05
    tensors = {"embeddings.word_embeddings.weight": normal(vocab, width),
               "embeddings.token_type_embeddings.weight": normal(2, width),
               "emb_ln.weight": 1.0 + normal(width), "emb_ln.bias": normal(width)}
    for i in range(blocks):
        at = f"encoder.layers.{i}."
        tensors |= {at + "attn.Wqkv.weight": normal(3 * width, width), at + "attn.out_proj.weight": normal(width, width),
                    at + "mlp.fc11.weight": normal(inner, width), at + "mlp.fc12.weight": normal(inner, width),
                    at + "mlp.fc2.weight": normal(width, inner),
                    at + "norm1.weight": 1.0 + normal(width), at + "norm1.bias": normal(width),
                    at + "norm2.weight": 1.0 + normal(width), at + "norm2.bias": normal(width)}
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    tok.save_pretrained(out)
    sentence_transformers_pooling(out, width)


def make_roberta(out: Path) -> None:
    """RoBERTa as sentence-transformers publishes it: byte-level BPE with RobertaProcessing (<s> … </s>),
    positions offset by the padding id plus one, one token type."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    bpe = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials)
    bpe.train_from_iterator(corpus(), trainer=trainer)
    bpe.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    bpe.post_processor = processors.RobertaProcessing(sep=("</s>", 2), cls=("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save(os.path.join(tmp, "tokenizer.json"))
        tok = RobertaTokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"), model_max_length=128)
    config = RobertaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=130, type_vocab_size=1,
                           layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           torch_dtype="float32")
    torch.manual_seed(SEED)
    model = RobertaModel(config, add_pooling_layer=False)
    randomize(model, SEED + 33)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)
    sentence_transformers_pooling(out, 64)


def make_xlm_roberta(out: Path) -> None:
    """XLM-RoBERTa as bge-m3 publishes it: a SentencePiece Unigram model with NFKC's compiled rules
    (sentencepiece.bpe.model, fairseq's ids one place past the model's) beside tokenizer.json, positions past
    the padding id, CLS pooling."""
    import sentencepiece as spm
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    spm.set_random_generator_seed(SEED)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, vocab_size=400, model_type="unigram",
        normalization_rule_name="nmt_nfkc", add_dummy_prefix=True, remove_extra_whitespaces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.9995, input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=1, hard_vocab_limit=False, minloglevel=2)
    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "sentencepiece.bpe.model"
        sp.write_bytes(model.getvalue())
        tok = XLMRobertaTokenizerFast(vocab_file=str(sp), model_max_length=128, from_slow=True)
        tok.save_pretrained(out)
    config = XLMRobertaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=128, max_position_embeddings=130, type_vocab_size=1,
                              layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                              torch_dtype="float32")
    torch.manual_seed(SEED)
    model = XLMRobertaModel(config, add_pooling_layer=True)
    randomize(model, SEED + 39)
    save_model(model, out, torch.float32)
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ], indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    }, indent=2) + "\n")


def make_internlm2(out: Path) -> None:
    """InternLM2 as published (remote code: its config.json and names written here): Q/K/V fused KV group by
    KV group in wqkv, a SentencePiece model whose [UNUSED_TOKEN_*] pieces tokenizer_config.json turns into the
    chat's special tokens, <|im_end|> among them, and no tokenizer.json."""
    import torch
    from safetensors.torch import save_file

    train_sentencepiece(out / "tokenizer.model", 500,
                        user_defined=["[UNUSED_TOKEN_145]", "[UNUSED_TOKEN_146]", "[UNUSED_TOKEN_147]"])
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    vocab = sp.get_piece_size()
    ids = [sp.piece_to_id(f"[UNUSED_TOKEN_{n}]") for n in (145, 146, 147)]
    width, inner, heads, kv, blocks = 64, 128, 4, 2, 2
    head_dim = width // heads
    config = {
        "architectures": ["InternLM2ForCausalLM"], "attn_implementation": "eager",
        "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                     "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
        "bias": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": width,
        "initializer_range": 0.02, "intermediate_size": inner, "max_position_embeddings": 32768,
        "model_type": "internlm2", "num_attention_heads": heads, "num_hidden_layers": blocks,
        "num_key_value_heads": kv, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.41.0", "use_cache": True, "vocab_size": vocab,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen = torch.Generator().manual_seed(SEED + 40)
    normal = lambda *shape: (torch.randn(*shape, generator=gen) * 0.05).to(torch.bfloat16)
    tensors = {"model.tok_embeddings.weight": normal(vocab, width), "model.norm.weight": 1.0 + normal(width),
               "output.weight": normal(vocab, width)}
    for i in range(blocks):
        at = f"model.layers.{i}."
        tensors |= {at + "attention.wqkv.weight": normal((heads + 2 * kv) * head_dim, width),
                    at + "attention.wo.weight": normal(width, width),
                    at + "feed_forward.w1.weight": normal(inner, width), at + "feed_forward.w3.weight": normal(inner, width),
                    at + "feed_forward.w2.weight": normal(width, inner),
                    at + "attention_norm.weight": 1.0 + normal(width), at + "ffn_norm.weight": 1.0 + normal(width)}
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    added = {str(i): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True}
             for i, content in zip(ids, ["<|im_start|>", "<|im_end|>", "<|action_start|>"])}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": added, "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|action_start|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_internlm2.InternLM2Tokenizer", None]},
        "bos_token": "<s>", "chat_template": CHATML_TEMPLATE, "clean_up_tokenization_spaces": False,
        "decode_with_prefix_space": False, "eos_token": "</s>", "model_max_length": 1000000000000000019884624838656,
        "pad_token": "</s>", "sp_model_kwargs": None, "tokenizer_class": "InternLM2Tokenizer", "unk_token": "<unk>",
    }, indent=2) + "\n")


def make_modernbert(out: Path) -> None:
    """ModernBERT: fused Wqkv and a GLU pair (Wi twice the feed-forward width), no norm before the first
    block's attention, bias-free LayerNorms, every third block global with its own rope base, byte-level BPE,
    mean pooling."""
    import torch
    from transformers import ModernBertConfig, ModernBertModel

    tok, (cls, sep, pad, mask, unk) = train_byte_bpe(400, ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"])
    tok.bos_token, tok.eos_token, tok.cls_token, tok.sep_token = "[CLS]", "[SEP]", "[CLS]", "[SEP]"
    tok.pad_token, tok.mask_token, tok.unk_token = "[PAD]", "[MASK]", "[UNK]"
    config = ModernBertConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                              num_attention_heads=4, global_attn_every_n_layers=3, local_attention=16,
                              max_position_embeddings=8192, global_rope_theta=160000.0, local_rope_theta=10000.0,
                              pad_token_id=pad, bos_token_id=cls, eos_token_id=sep, cls_token_id=cls,
                              sep_token_id=sep, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = ModernBertModel(config)
    randomize(model, SEED + 41)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)
    sentence_transformers_pooling(out, 64)


def train_word_piece():
    """A lower-casing WordPiece tokenizer (BERT's), as BertTokenizerFast. Its vocabulary is built here rather
    than by tokenizers' WordPiece trainer, whose choice among equal counts changes from run to run: the
    specials, every character alone and continuing a word, then the corpus's most frequent lower-cased words
    (ties by spelling), 400 entries in all."""
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                            lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words = Counter(w for line in corpus() for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line)))
    chars = sorted({c for w in words for c in w})
    vocab = specials + chars + ["##" + c for c in chars]
    for word, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(vocab) == 400:
            break
        if word not in vocab:
            vocab.append(word)
    wp = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                    max_input_chars_per_word=100))
    wp.normalizer = normalizer
    wp.pre_tokenizer = pre
    wp.decoder = decoders.WordPiece(prefix="##")
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    wp.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    wp.add_special_tokens(specials)
    with tempfile.TemporaryDirectory() as tmp:
        wp.save(os.path.join(tmp, "tokenizer.json"))
        return BertTokenizerFast(tokenizer_file=os.path.join(tmp, "tokenizer.json"), do_lower_case=True,
                                 model_max_length=512)


def make_distilbert(out: Path) -> None:
    """DistilBERT: its own names and config keys (dim, n_layers, hidden_dim), no token types."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    tok = train_word_piece()
    config = DistilBertConfig(vocab_size=len(tok), dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                              max_position_embeddings=128, pad_token_id=0, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = DistilBertModel(config)
    randomize(model, SEED + 34)
    save_model(model, out, torch.float32)
    tok.save_pretrained(out)
    sentence_transformers_pooling(out, 64)


MAKERS = {
    "llama": make_llama,
    "mistral": make_mistral,
    "qwen2": lambda out: make_qwen(out, "qwen2"),
    "qwen3": lambda out: make_qwen(out, "qwen3"),
    "gemma3": make_gemma3,
    "phi3": make_phi3,
    "phi3-longrope": lambda out: make_phi3(out, PHI3_LONGROPE, seed=SEED + 7),
    "llama-yarn": lambda out: make_llama(out, LLAMA_YARN_ROPE, seed=SEED + 8, bf16=True),
    "qwen3-yarn": lambda out: make_qwen(out, "qwen3", QWEN3_YARN_ROPE, seed=SEED + 9),
    "mixtral": make_mixtral,
    "qwen2moe": lambda out: make_qwen_moe(out, "qwen2moe"),
    "qwen3moe": lambda out: make_qwen_moe(out, "qwen3moe"),
    "olmoe": make_olmoe,
    "gemma": lambda out: make_gemma(out, "gemma"),
    "gemma2": lambda out: make_gemma(out, "gemma2"),
    "starcoder2": make_starcoder2,
    "olmo2": make_olmo2,
    "granite": make_granite,
    "smollm3": make_smollm3,
    "gptneox": make_gptneox,
    "granitemoe": make_granitemoe,
    "olmo": make_olmo,
    "cohere": lambda out: make_cohere(out, "cohere"),
    "cohere2": lambda out: make_cohere(out, "cohere2"),
    "phi2": make_phi2,
    "stablelm": make_stablelm,
    "ernie": make_ernie,
    "falcon": make_falcon,
    "gpt2": make_gpt2,
    "deepseek2": lambda out: make_deepseek(out, "v2"),
    "deepseek3": lambda out: make_deepseek(out, "v3"),
    "bert": make_bert,
    "roberta": make_roberta,
    "distilbert": make_distilbert,
    "glm4": make_glm4,
    "lfm2": make_lfm2,
    "exaone4": make_exaone4,
    "nomic-bert": make_nomic_bert,
    "xlm-roberta": make_xlm_roberta,
    "internlm2": make_internlm2,
    "modernbert": make_modernbert,
    "olmo3": make_olmo3,
    "arcee": make_arcee,
    "seed-oss": make_seed_oss,
    "ernie-moe": make_ernie_moe,
    "gpt-oss": make_gpt_oss,
    "gpt-oss-mxfp4": make_gpt_oss_mxfp4,
    "gemma3-vl": make_gemma3_vl,
    "pixtral": make_pixtral,
    "mistral3": lambda out: make_pixtral(out, "mistral3"),
    "llava": make_llava,
    "qwen2vl": lambda out: make_qwen_vl(out, "qwen2vl"),
    "qwen25vl": lambda out: make_qwen_vl(out, "qwen25vl"),
}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    families = argv[2:] or list(FAMILIES)
    for fam in families:
        if fam not in FAMILIES:
            print(f"unknown family {fam!r}; known: {', '.join(FAMILIES)}", file=sys.stderr)
            return 2

    import torch
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    outdir.mkdir(parents=True, exist_ok=True)
    for fam in families:
        out = outdir / FAMILIES[fam]
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        MAKERS[fam](out)
        total = sum(p.stat().st_size for p in out.iterdir())
        files = ", ".join(sorted(p.name for p in out.iterdir()))
        print(f"{fam}: {out} ({total} bytes: {files})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
