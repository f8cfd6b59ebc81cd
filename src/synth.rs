//! Synthetic llama-shaped models, for the tiny model shipped in the repo,
//! tests and benchmarks.
//!
//! Weights come from a fixed-seed generator using only integer and basic
//! float arithmetic (no `ln`/`cos`, whose last bits vary between libms), so
//! the same config gives the same bytes on every machine.

use std::io::{self, Write};

use half::f16;

use crate::formats::TensorDataSource;
use crate::model::{Array, GgufString, Metadata, TensorInfo, Value};
use crate::types::{FileType, GgmlType};

/// Shape of a synthetic LLaMA model.
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub name: String,
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    /// Type of the 2-D weights; norms are always F32.
    pub weight_type: GgmlType,
    pub seed: u64,
}

impl LlamaConfig {
    /// The model committed as `tests/data/tiny-llama.gguf` (~3 MB): rows are
    /// multiples of 256 so every K-quant applies, and attention is GQA.
    pub fn tiny() -> LlamaConfig {
        LlamaConfig {
            name: "quantforge tiny llama".into(),
            n_vocab: 512,
            n_embd: 256,
            n_ff: 512,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            weight_type: GgmlType::F16,
            seed: 0x5eed,
        }
    }
}

impl LlamaConfig {
    /// A K-quant-bound benchmark model: LLaMA-7B-wide (4096 × 11008) rows,
    /// every row a multiple of 256, two layers and a 32000-token vocabulary,
    /// ~670M parameters (~1.3 GB in F16).
    pub fn wide() -> LlamaConfig {
        LlamaConfig {
            name: "quantforge synthetic 4096-wide llama".into(),
            n_vocab: 32000,
            n_embd: 4096,
            n_ff: 11008,
            n_layer: 2,
            n_head: 32,
            n_head_kv: 8,
            weight_type: GgmlType::F16,
            seed: 0x4096,
        }
    }
}

/// A synthetic model: metadata, tensor descriptors and a generator of the
/// tensors' bytes.
pub struct SynthModel {
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    seed: u64,
}

pub fn llama(config: &LlamaConfig) -> SynthModel {
    let c = config;
    let head_dim = c.n_embd / c.n_head;
    let mut m = Metadata::new();
    m.set("general.architecture", Value::string("llama"));
    m.set("general.name", Value::string(&c.name));
    let file_type = match c.weight_type {
        GgmlType::F32 => "F32",
        GgmlType::BF16 => "BF16",
        _ => "F16",
    };
    m.set("general.file_type", Value::U32(FileType::from_name(file_type).map_or(1, FileType::id)));
    m.set("llama.vocab_size", Value::U32(c.n_vocab as u32));
    m.set("llama.context_length", Value::U32(256));
    m.set("llama.embedding_length", Value::U32(c.n_embd as u32));
    m.set("llama.block_count", Value::U32(c.n_layer as u32));
    m.set("llama.feed_forward_length", Value::U32(c.n_ff as u32));
    m.set("llama.rope.dimension_count", Value::U32(head_dim as u32));
    m.set("llama.rope.freq_base", Value::F32(10000.0));
    m.set("llama.attention.head_count", Value::U32(c.n_head as u32));
    m.set("llama.attention.head_count_kv", Value::U32(c.n_head_kv as u32));
    m.set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    add_vocab(&mut m, c.n_vocab);
    m.set("general.quantization_version", Value::U32(2));

    let kv_width = head_dim * c.n_head_kv;
    let mut shapes: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![c.n_embd, c.n_vocab])];
    for i in 0..c.n_layer {
        let blk = |suffix: &str| format!("blk.{i}.{suffix}");
        shapes.extend([
            (blk("attn_norm.weight"), vec![c.n_embd]),
            (blk("attn_q.weight"), vec![c.n_embd, c.n_embd]),
            (blk("attn_k.weight"), vec![c.n_embd, kv_width]),
            (blk("attn_v.weight"), vec![c.n_embd, kv_width]),
            (blk("attn_output.weight"), vec![c.n_embd, c.n_embd]),
            (blk("ffn_norm.weight"), vec![c.n_embd]),
            (blk("ffn_gate.weight"), vec![c.n_embd, c.n_ff]),
            (blk("ffn_up.weight"), vec![c.n_embd, c.n_ff]),
            (blk("ffn_down.weight"), vec![c.n_ff, c.n_embd]),
        ]);
    }
    shapes.push(("output_norm.weight".into(), vec![c.n_embd]));
    shapes.push(("output.weight".into(), vec![c.n_embd, c.n_vocab]));

    let tensors = shapes
        .into_iter()
        .map(|(name, dims)| {
            let ggml_type = if dims.len() == 1 { GgmlType::F32 } else { c.weight_type };
            TensorInfo::new(name, dims, ggml_type)
        })
        .collect();
    SynthModel { metadata: m, tensors, seed: c.seed }
}

/// `<unk> <s> </s>`, the 256 byte tokens, then made-up words.
fn add_vocab(m: &mut Metadata, n_vocab: u64) {
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    const NORMAL: i32 = 1;
    let mut tokens = Vec::new();
    let mut types = Vec::new();
    for (text, ty) in [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)] {
        tokens.push(GgufString::from(text));
        types.push(ty);
    }
    for b in 0..=255u8 {
        tokens.push(GgufString::from(format!("<0x{b:02X}>")));
        types.push(BYTE);
    }
    let syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi"];
    let mut word = 0usize;
    while (tokens.len() as u64) < n_vocab {
        let text: String = format!("\u{2581}{}{}", syllables[word % 8], syllables[(word / 8) % 8]);
        tokens.push(GgufString::from(format!("{text}{}", word / 64)));
        types.push(NORMAL);
        word += 1;
    }
    tokens.truncate(n_vocab as usize);
    types.truncate(n_vocab as usize);
    let scores: Vec<f32> = (0..tokens.len()).map(|i| 0.0 - i as f32).collect();
    m.set("tokenizer.ggml.model", Value::string("llama"));
    m.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens.into_iter().collect())));
    m.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    m.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    m.set("tokenizer.ggml.bos_token_id", Value::U32(1));
    m.set("tokenizer.ggml.eos_token_id", Value::U32(2));
    m.set("tokenizer.ggml.unknown_token_id", Value::U32(0));
}

/// splitmix64: tiny, fast and identical everywhere.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly standard normal (Irwin–Hall with 12 terms).
    fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.uniform()).sum::<f32>() - 6.0
    }
}

impl SynthModel {
    /// The values of tensor `tensor_idx`: norms near 1, weights with a
    /// standard deviation of 0.02 and about one outlier per thousand.
    pub fn values(&self, tensor_idx: usize) -> Vec<f32> {
        let t = &self.tensors[tensor_idx];
        let mut rng = Rng(self.seed ^ (tensor_idx as u64).wrapping_mul(0x1000_0000_01b3));
        let n = t.n_elements() as usize;
        if t.dims.len() == 1 {
            return (0..n).map(|_| 1.0 + 0.1 * rng.normal()).collect();
        }
        (0..n)
            .map(|_| {
                let x = 0.02 * rng.normal();
                if rng.uniform() < 0.001 { x * 20.0 } else { x }
            })
            .collect()
    }
}

impl TensorDataSource for SynthModel {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> io::Result<()> {
        let values = self.values(tensor_idx);
        let bytes: Vec<u8> = match self.tensors[tensor_idx].ggml_type {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
            GgmlType::BF16 => values.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("synthetic weights of type {other} need a quantizer"),
                ));
            }
        };
        out.write_all(&bytes)
    }
}
