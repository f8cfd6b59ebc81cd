//! llama-quantize's mixture presets: the ggml type each tensor of a model gets
//! for a llama file type (Q4_K_M, Q3_K_S, IQ2_XS, MXFP4_MOE, ...).
//!
//! This module owns every per-tensor decision `llama-quantize` makes before it
//! touches a byte, as `src/llama-quant.cpp` makes it (llama.cpp as vendored by
//! llama-cpp-python 0.3.36):
//!
//! - whether a tensor may be quantized at all (its shape and name:
//!   [`is_quantizable`]);
//! - the options `--pure`, `--leave-output-tensor`, `--output-tensor-type`,
//!   `--token-embedding-type`, `--tensor-type PATTERN=TYPE`, `--imatrix` (its
//!   presence) and `--keep-split` (the visiting order);
//! - the mixture rules: per tensor category, per layer, by head grouping,
//!   expert count and architecture, with the counters llama.cpp keeps while it
//!   walks the tensors in its own order;
//! - the fallback to a smaller block when a row is not a whole number of
//!   blocks, and which choices need an importance matrix.
//!
//! Pure: reads metadata and tensor descriptors, returns one [`TensorChoice`]
//! per tensor. `tests/it/mixture.rs` checks every choice against
//! `llama-quantize --dry-run` on model headers shaped like real models.

use std::collections::HashSet;

use regex::Regex;

use crate::arch::{hparams, quant_rules};
use crate::model::{KeyError, Metadata, TensorInfo};
use crate::types::{FileType, GgmlType};
use FileType as F;

/// What llama-quantize is asked to do, as far as it changes the types chosen.
#[derive(Debug, Clone)]
pub struct MixtureOptions {
    pub ftype: FileType,
    /// `--pure`: no mixture rules; every quantizable tensor gets the default
    /// type (the explicit type options and the row-length fallback still apply).
    pub pure: bool,
    /// `--leave-output-tensor`: `output.weight` keeps its type.
    pub leave_output_tensor: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// `--tensor-type`, in command-line order: the first pattern found in a
    /// tensor's name wins.
    pub tensor_types: Vec<TensorTypeOverride>,
    /// An importance matrix with at least one entry is given (`--imatrix`);
    /// some presets spend their bits differently with one.
    pub has_imatrix: bool,
    /// `COPY`: every tensor as it is, the file type the input's.
    pub only_copy: bool,
    /// `--keep-split`: llama-quantize walks the tensors in the order of their
    /// data in the file instead of by layer and name, and the mixture rules
    /// count tensors in walking order.
    pub keep_split: bool,
}

impl MixtureOptions {
    /// The preset alone, as `llama-quantize MODEL FTYPE` runs it.
    pub fn new(ftype: FileType) -> MixtureOptions {
        MixtureOptions {
            ftype,
            pure: false,
            leave_output_tensor: false,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            has_imatrix: false,
            only_copy: false,
            keep_split: false,
        }
    }
}

/// One `--tensor-type PATTERN=TYPE`: tensors whose name contains a match of
/// `pattern` get `ty` instead of the mixture's choice.
#[derive(Debug, Clone)]
pub struct TensorTypeOverride {
    pub pattern: Regex,
    pub ty: GgmlType,
}

impl TensorTypeOverride {
    /// Parses `PATTERN=TYPE` as llama-quantize does: split at the first `=`,
    /// the pattern lowercased before it is compiled, the type name matched
    /// ignoring case. llama.cpp compiles the pattern as an ECMAScript
    /// `std::regex`; patterns using syntax the two engines read differently
    /// (lookaround, backreferences) are not supported.
    pub fn parse(spec: &str) -> Result<TensorTypeOverride, MixtureError> {
        let (pattern, ty) = spec.split_once('=').ok_or_else(|| MixtureError::BadOverride {
            spec: spec.to_owned(),
            problem: "expected PATTERN=TYPE".to_owned(),
        })?;
        TensorTypeOverride::new(pattern, ty)
    }

    /// An override from its two parts, checked as [`TensorTypeOverride::parse`] checks them.
    pub fn new(pattern: &str, ty: &str) -> Result<TensorTypeOverride, MixtureError> {
        let bad =
            |problem: &str| MixtureError::BadOverride { spec: format!("{pattern}={ty}"), problem: problem.to_owned() };
        if pattern.is_empty() {
            return Err(bad("missing tensor name"));
        }
        if ty.is_empty() {
            return Err(bad("missing quantization type"));
        }
        let ty = GgmlType::from_name(ty).ok_or_else(|| {
            let near = crate::spelling::nearest(ty, GgmlType::all().map(GgmlType::name));
            bad(&format!(
                "invalid ggml type `{ty}`{}",
                near.map(|n| format!("; did you mean `{n}`?")).unwrap_or_default()
            ))
        })?;
        let pattern = Regex::new(&pattern.to_ascii_lowercase()).map_err(|e| bad(&e.to_string()))?;
        Ok(TensorTypeOverride { pattern, ty })
    }
}

/// The decision for one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorChoice {
    /// The tensor is converted: `ty` differs from its current type.
    pub quantize: bool,
    /// The type written: the tensor's current type when it is left alone.
    pub ty: GgmlType,
    /// The type chosen before the row-length fallback replaced it. llama.cpp
    /// counts these ("N of M tensor(s) required fallback quantization", M
    /// being every tensor of the model) and warns once per tensor.
    pub fallback_from: Option<GgmlType>,
    /// llama.cpp refuses to write this choice without an importance matrix.
    pub requires_imatrix: bool,
}

/// Why no mixture could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MixtureError {
    #[error("file type {0} has no default tensor type, so llama.cpp cannot quantize to it")]
    NoDefaultType(FileType),
    #[error("metadata key {0}")]
    Key(#[from] KeyError),
    #[error("tensor `{0}` appears twice")]
    DuplicateTensor(String),
    #[error("failed to determine layer for tensor {0}")]
    NoLayer(String),
    #[error("bad layer {layer} for tensor {tensor}. Must be in [0, {n_layer})")]
    BadLayer { tensor: String, layer: i64, n_layer: u32 },
    #[error("tensor {tensor}: no tensor type fallback is defined for type {ty}")]
    NoFallback { tensor: String, ty: GgmlType },
    #[error("--tensor-type `{spec}`: {problem}")]
    BadOverride { spec: String, problem: String },
}

/// Chooses the type of every tensor, in the order given.
pub fn choose_types(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    options: &MixtureOptions,
) -> Result<Vec<TensorChoice>, MixtureError> {
    let default = options.ftype.default_type().ok_or(MixtureError::NoDefaultType(options.ftype))?;
    let hparams = Hparams::from_metadata(metadata)?;
    let mut names = HashSet::with_capacity(tensors.len());
    for t in tensors {
        if !names.insert(t.name.as_str()) {
            return Err(MixtureError::DuplicateTensor(t.name.clone()));
        }
    }
    let mut mixer = Mixer {
        options,
        preset: options.ftype,
        default,
        // Until an output tensor shows up, llama.cpp assumes the token
        // embeddings double as the output and quantizes them like one.
        tied_embeddings: !tensors.iter().any(|t| t.name == OUTPUT),
        n_attention_wv: tensors.iter().filter(|t| category(&t.name).is_attn_v_like()).count() as i64,
        n_ffn: i64::from(hparams.n_layer_all),
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
        hparams,
    };
    let mut choices = vec![None; tensors.len()];
    for idx in visiting_order(tensors, options.keep_split) {
        choices[idx] = Some(mixer.choose(&tensors[idx])?);
    }
    Ok(choices.into_iter().map(|c| c.expect("visiting_order visits every tensor once")).collect())
}

/// Whether llama.cpp quantizes a tensor of this name and shape at all: only
/// 2-D and 3-D weights, and never norms, routers, position embeddings or the
/// small tensors on its exclusion list.
pub fn is_quantizable(arch: &str, name: &str, dims: &[u64], leave_output_tensor: bool) -> bool {
    if n_dims(dims) < 2 || !ends_with_weight(name) {
        return false;
    }
    if leave_output_tensor && name == OUTPUT {
        return false;
    }
    if EXCLUDED_NAMES.contains(&name) || EXCLUDED_PARTS.iter().any(|part| name.contains(part)) {
        return false;
    }
    !quant_rules::keeps_unquantized(arch, name)
}

/// Whether llama.cpp refuses to write `ty` into this tensor without an
/// importance matrix: the 1- to 3-bit codebook types, and Q2_K in a Q2_K_S
/// file. Embeddings and output are exempt.
pub fn requires_imatrix(name: &str, ty: GgmlType, ftype: FileType) -> bool {
    use GgmlType as G;
    if is_token_embd(name) || name == OUTPUT {
        return false;
    }
    match ty {
        G::IQ3_XXS | G::IQ2_XXS | G::IQ2_XS | G::IQ2_S | G::IQ1_M | G::IQ1_S => true,
        G::Q2_K => ftype == F::Q2_K_S,
        _ => false,
    }
}

const OUTPUT: &str = "output.weight";
const TOKEN_EMBD: &str = "token_embd.weight";
const PER_LAYER_TOKEN_EMBD: &str = "per_layer_token_embd.weight";

/// Names never quantized: BERT's position embeddings and token types.
const EXCLUDED_NAMES: &[&str] = &["position_embd.weight", "token_types.weight"];

/// Name parts that keep a tensor unquantized, for every architecture.
const EXCLUDED_PARTS: &[&str] = &[
    "_norm.weight",
    // expert routers, and DeepSeek-V4's i32 token -> expert table
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    // Gemma 3n: tiny (4x4) or small enough to keep
    "altup",
    "laurel",
    "per_layer_model_proj",
    // Mamba's and LFM's small convolutions
    "ssm_conv1d",
    "shortconv.conv.weight",
    // MiniMax's tiny indexer projections
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    // RWKV's small 2-D weights
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    // T5's relative position bias
    "attn_rel_b.weight",
    // multimodal projectors
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    // audio codebooks
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// ggml's `ggml_n_dims`: trailing dimensions of 1 do not count, and a tensor
/// has at least one.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).filter(|&i| i > 0).map_or(1, |i| i + 1)
}

/// llama.cpp's "name ends with `weight`" test, `rfind("weight") == size - 6`
/// in `size_t`: for a 5-byte name both sides are `npos`, so every 5-byte name
/// passes too.
fn ends_with_weight(name: &str) -> bool {
    name.ends_with("weight") || name.len() == 5
}

fn is_token_embd(name: &str) -> bool {
    name == TOKEN_EMBD || name == PER_LAYER_TOKEN_EMBD
}

/// The length of a row, which must be a whole number of blocks.
fn row_len(t: &TensorInfo) -> u64 {
    t.dims.first().copied().unwrap_or(1)
}

/// The layer number in a `blk.N.` name, read as C's `sscanf("blk.%d.")` reads
/// it: whitespace and a sign may precede the digits and nothing is required
/// after them. Numbers beyond `i32` count as no layer.
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, rest) = match rest.as_bytes().first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let value: i64 = rest[..digits].parse().ok()?;
    let value = if negative { -value } else { value };
    i32::try_from(value).ok().map(i64::from)
}

/// The order llama-quantize visits tensors in, and writes them in: by layer
/// (names without one first) then by name, or with `--keep-split` by where
/// the data lies.
pub fn visiting_order(tensors: &[TensorInfo], keep_split: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    if keep_split {
        order.sort_by_key(|&i| tensors[i].file_offset);
    } else {
        order.sort_by(|&a, &b| {
            let key = |i: usize| (layer_of(&tensors[i].name).unwrap_or(-1), tensors[i].name.as_bytes());
            key(a).cmp(&key(b))
        });
    }
    order
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and
/// every third layer in between, get more bits.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The row-length fallback: a row that is not a whole number of the chosen
/// type's blocks gets the nearest type with a smaller block, or F16 when even
/// that does not fit. Returns the type and, if it changed, the one it replaced.
fn fallback(name: &str, ncols: u64, ty: GgmlType) -> Result<(GgmlType, Option<GgmlType>), MixtureError> {
    use GgmlType as G;
    if ncols.is_multiple_of(ty.block_size()) {
        return Ok((ty, None));
    }
    let smaller = match ty {
        G::IQ1_S | G::IQ1_M | G::IQ2_XXS | G::IQ2_XS | G::IQ2_S | G::IQ3_XXS | G::IQ3_S | G::IQ4_XS => G::IQ4_NL,
        G::Q2_0 | G::Q2_K | G::Q3_K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        // Already a type with the legacy 32-element blocks: nothing smaller
        // to demote to, so the check below makes it F16.
        _ if ty.block_size() <= G::Q8_0.block_size() => ty,
        _ => return Err(MixtureError::NoFallback { tensor: name.to_owned(), ty }),
    };
    let ty_new = if ncols.is_multiple_of(smaller.block_size()) { smaller } else { G::F16 };
    Ok((ty_new, Some(ty)))
}

/// The broad tensor categories the mixture rules are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    /// The tensors that carry values, which the rules treat as attn_v: fused
    /// QKV and MLA's kv_b included.
    fn is_attn_v_like(self) -> bool {
        matches!(self, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
    }
}

/// A tensor's category from its name; the first test that matches wins.
fn category(name: &str) -> Category {
    const BY_PART: &[(&str, Category)] = &[
        ("attn_qkv.weight", Category::AttnQkv),
        ("attn_kv_b.weight", Category::AttnKvB),
        ("attn_v.weight", Category::AttnV),
        ("attn_k.weight", Category::AttnK),
        ("attn_q.weight", Category::AttnQ),
        ("attn_output.weight", Category::AttnOutput),
        ("ffn_up", Category::FfnUp),
        ("ffn_gate", Category::FfnGate),
        ("ffn_down", Category::FfnDown),
    ];
    if name == OUTPUT {
        return Category::Output;
    }
    if is_token_embd(name) {
        return Category::TokenEmbd;
    }
    BY_PART.iter().find(|(part, _)| name.contains(part)).map_or(Category::Other, |&(_, c)| c)
}

/// Presets whose embeddings are Q2_K.
const Q2_K_EMBEDDINGS: &[FileType] = &[F::IQ2_XXS, F::IQ2_XS, F::IQ1_S, F::IQ1_M];
/// Presets whose embeddings are Q4_K.
const Q4_K_EMBEDDINGS: &[FileType] = &[F::TQ1_0, F::TQ2_0, F::Q2_0];
/// Presets whose attn_output goes to Q5_K in an 8-expert model.
const Q5_K_ATTN_OUTPUT_8_EXPERTS: &[FileType] = &[
    F::Q2_K,
    F::IQ3_XS,
    F::IQ3_XXS,
    F::Q3_K_S,
    F::Q3_K_M,
    F::IQ4_NL,
    F::Q4_K_S,
    F::Q4_K_M,
    F::IQ3_S,
    F::IQ3_M,
    F::IQ4_XS,
];

/// The hyperparameters the rules read, loaded from metadata as llama.cpp's
/// model loader loads them (layer 0's values where they may vary per layer).
#[derive(Debug, Clone)]
struct Hparams {
    arch: String,
    /// `<arch>.block_count`, MTP (NextN) layers included.
    n_layer_all: u32,
    n_layer_nextn: u32,
    n_head: u32,
    n_head_kv: u32,
    n_expert: u32,
}

impl Hparams {
    fn from_metadata(md: &Metadata) -> Result<Hparams, MixtureError> {
        let arch_key = "general.architecture";
        let arch = md.string(arch_key)?.ok_or_else(|| KeyError::missing(arch_key))?.to_owned();
        if quant_rules::has_no_language_hparams(&arch) {
            return Ok(Hparams { arch, n_layer_all: 0, n_layer_nextn: 0, n_head: 0, n_head_kv: 0, n_expert: 0 });
        }
        let key = |suffix: &str| format!("{arch}.{suffix}");

        let block_count = key("block_count");
        let n_layer = hparams::block_count(md, &block_count)?.ok_or_else(|| KeyError::missing(&block_count))?;
        if n_layer == 0 {
            return Err(KeyError::new(&block_count, "is 0").into());
        }
        let n_layer_all = n_layer as u32;
        let nextn = key("nextn_predict_layers");
        let n_layer_nextn = md.count::<u32>(&nextn)?.unwrap_or(0);
        if n_layer_nextn > n_layer_all {
            return Err(KeyError::new(&nextn, format!("is {n_layer_nextn}, more than the {n_layer_all} layers")).into());
        }
        let n_expert = md.count::<u32>(&key("expert_count"))?.unwrap_or(0);
        let layer_0 = |name: &str| Ok::<_, KeyError>(md.per_layer::<u32>(&key(name), n_layer)?.map(|layers| layers[0]));
        let n_head = layer_0("attention.head_count")?.unwrap_or(0);
        // The KV head count defaults to the head count.
        let n_head_kv = layer_0("attention.head_count_kv")?.unwrap_or(n_head);
        Ok(Hparams { arch, n_layer_all, n_layer_nextn, n_head, n_head_kv, n_expert })
    }

    /// Query heads per KV head, in layer 0.
    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// llama.cpp's "70B" model type, where attn_v is small enough to get
    /// more bits: 80 layers (68 for JAIS-2), and for LLaMA grouped KV heads
    /// and not 8 experts.
    fn is_70b(&self) -> bool {
        let n_layer = self.n_layer_all - self.n_layer_nextn;
        quant_rules::is_70b(&self.arch, n_layer, self.n_head, self.n_head_kv, self.n_expert)
    }
}

/// The walk over the tensors: options, model, and the counters the rules read.
struct Mixer<'a> {
    options: &'a MixtureOptions,
    preset: FileType,
    default: GgmlType,
    hparams: Hparams,
    tied_embeddings: bool,
    /// attn_v-like tensors in the model, and how many the walk has passed.
    n_attention_wv: i64,
    i_attention_wv: i64,
    /// llama.cpp counts FFN tensors against the layer count.
    n_ffn: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

impl Mixer<'_> {
    fn choose(&mut self, t: &TensorInfo) -> Result<TensorChoice, MixtureError> {
        if self.options.only_copy
            || !is_quantizable(&self.hparams.arch, &t.name, &t.dims, self.options.leave_output_tensor)
        {
            return Ok(TensorChoice { quantize: false, ty: t.ggml_type, fallback_from: None, requires_imatrix: false });
        }
        let (ty, fallback_from) = self.target_type(t)?;
        Ok(TensorChoice {
            quantize: ty != t.ggml_type,
            ty,
            fallback_from,
            requires_imatrix: requires_imatrix(&t.name, ty, self.options.ftype),
        })
    }

    /// The options first, then the mixture rules, then the row-length fallback.
    fn target_type(&mut self, t: &TensorInfo) -> Result<(GgmlType, Option<GgmlType>), MixtureError> {
        let options = self.options;
        let category = category(&t.name);
        if let Some(ty) = options.token_embedding_type {
            // per_layer_token_embd follows --token-embedding-type too, but it
            // is a large table of its own, so a --tensor-type naming it wins.
            let named =
                t.name == PER_LAYER_TOKEN_EMBD && options.tensor_types.iter().any(|o| o.pattern.is_match(&t.name));
            if category == Category::TokenEmbd && !named {
                return Ok((ty, None));
            }
        }
        if let Some(ty) = options.output_tensor_type
            && category == Category::Output
        {
            return Ok((ty, None));
        }
        // F16, BF16 and F32 files convert every tensor alike: no mixture rule,
        // no --tensor-type and no fallback applies.
        if !self.default.is_quantized() {
            return Ok((self.default, None));
        }
        let ty = match options.tensor_types.iter().find(|o| o.pattern.is_match(&t.name)) {
            Some(o) => o.ty,
            None if options.pure => self.default,
            None => self.mixture_type(t, category)?,
        };
        fallback(&t.name, row_len(t), ty)
    }

    /// The preset's rules (llama.cpp's `llama_tensor_get_type_impl`), which
    /// start from the default type.
    fn mixture_type(&mut self, t: &TensorInfo, category: Category) -> Result<GgmlType, MixtureError> {
        let ty = self.default;
        if quant_rules::q8_0_floor(&self.hparams.arch, &t.name) {
            // Never below Q8_0. The default is always a quantized type here,
            // and llama.cpp replaces any quantized type with Q8_0 outright.
            return Ok(GgmlType::Q8_0);
        }
        if category == Category::Output || (self.tied_embeddings && category == Category::TokenEmbd) {
            return Ok(self.output_type(t, ty));
        }
        if self.preset == F::MXFP4_MOE {
            return Ok(self.mxfp4_moe_type(t, category));
        }
        if category == Category::TokenEmbd {
            return Ok(self.token_embd_type(ty));
        }
        if self.preset.is_very_low_bit() {
            return Ok(self.very_low_bit_type(category, ty));
        }
        Ok(match category {
            // Fused QKV counts as attn_v here; llama.cpp's own QKV rule comes
            // after this one and is never reached.
            c if c.is_attn_v_like() => self.attn_v_type(ty),
            Category::AttnK => self.attn_k_type(ty),
            Category::AttnQ => self.attn_q_type(ty),
            Category::FfnDown => self.ffn_down_type(&t.name, ty)?,
            Category::AttnOutput => self.attn_output_type(ty),
            Category::FfnGate => {
                let (i_layer, n_layer) = self.layer_info(self.i_ffn_gate, &t.name)?;
                self.i_ffn_gate += 1;
                self.ffn_gate_up_type(i_layer, n_layer, ty)
            }
            Category::FfnUp => {
                let (i_layer, n_layer) = self.layer_info(self.i_ffn_up, &t.name)?;
                self.i_ffn_up += 1;
                self.ffn_gate_up_type(i_layer, n_layer, ty)
            }
            _ => ty,
        })
    }

    /// The output tensor, and the token embeddings when they double as it:
    /// Q6_K, or Q8_0 when Q6_K's blocks do not fit (or for falcon and
    /// MXFP4_MOE), or Q5_K for the very low-bit presets.
    fn output_type(&self, t: &TensorInfo, ty: GgmlType) -> GgmlType {
        if let Some(ty) = self.options.output_tensor_type {
            return ty;
        }
        let p = self.preset;
        if p == F::MXFP4_MOE
            || quant_rules::uses_falcon_rules(&self.hparams.arch)
            || !row_len(t).is_multiple_of(ty.block_size())
        {
            GgmlType::Q8_0
        } else if p.is_very_low_bit() || p == F::IQ3_XXS {
            GgmlType::Q5_K
        } else if ty != GgmlType::Q8_0 {
            GgmlType::Q6_K
        } else {
            ty
        }
    }

    /// MXFP4_MOE: MXFP4 for expert stacks (3-D), Q8_0 for everything else.
    /// BailingMoE3's MLA projections are 3-D too, so there only the FFN
    /// tensors count as experts.
    fn mxfp4_moe_type(&self, t: &TensorInfo, category: Category) -> GgmlType {
        let n_matrices = t.dims.get(2).copied().unwrap_or(1);
        let is_ffn = matches!(category, Category::FfnUp | Category::FfnGate | Category::FfnDown);
        if n_matrices > 1 && (!quant_rules::mxfp4_only_for_ffn_experts(&self.hparams.arch) || is_ffn) {
            GgmlType::MXFP4
        } else {
            GgmlType::Q8_0
        }
    }

    /// Untied token embeddings: cheaper than the output for the lowest presets.
    fn token_embd_type(&self, ty: GgmlType) -> GgmlType {
        let p = self.preset;
        if let Some(ty) = self.options.token_embedding_type {
            ty
        } else if Q2_K_EMBEDDINGS.contains(&p) {
            GgmlType::Q2_K
        } else if matches!(p, F::IQ2_S | F::IQ2_M) || p == F::IQ3_XXS {
            GgmlType::IQ3_S
        } else if Q4_K_EMBEDDINGS.contains(&p) {
            GgmlType::Q4_K
        } else {
            ty
        }
    }

    /// The IQ1/IQ2 presets' own rules.
    fn very_low_bit_type(&mut self, category: Category, ty: GgmlType) -> GgmlType {
        let p = self.preset;
        let hp = &self.hparams;
        let iq2_s_or_m_else_q2_k = if matches!(p, F::IQ2_S | F::IQ2_M) { GgmlType::IQ3_S } else { GgmlType::Q2_K };
        if category.is_attn_v_like() {
            self.i_attention_wv += 1;
            if hp.n_gqa() >= 4 || hp.n_expert >= 4 { GgmlType::Q4_K } else { iq2_s_or_m_else_q2_k }
        } else if hp.n_expert == 8 && category == Category::AttnK {
            GgmlType::Q4_K
        } else if category == Category::FfnDown {
            // Always by count, even in MoE models.
            let first_eighth = self.i_ffn_down < self.n_ffn / 8;
            self.i_ffn_down += 1;
            if first_eighth { iq2_s_or_m_else_q2_k } else { ty }
        } else if category == Category::AttnOutput {
            if hp.n_expert == 8 {
                GgmlType::Q5_K
            } else if matches!(p, F::IQ1_S | F::IQ1_M) {
                GgmlType::IQ2_XXS
            } else if matches!(p, F::IQ2_S | F::IQ2_M) {
                GgmlType::IQ3_S
            } else {
                ty
            }
        } else {
            ty
        }
    }

    /// attn_v (and fused QKV, MLA kv_b): more bits, since grouped KV heads
    /// make it small.
    fn attn_v_type(&mut self, ty: GgmlType) -> GgmlType {
        use GgmlType as G;
        let p = self.preset;
        let hp = &self.hparams;
        let gqa = hp.n_gqa() >= 4;
        let i = self.i_attention_wv;
        let mut ty = if p == F::Q2_K {
            if gqa { G::Q4_K } else { G::Q3_K }
        } else if p == F::Q2_K_S && gqa {
            G::Q4_K
        } else if p == F::IQ3_XXS {
            if gqa {
                G::Q4_K
            } else if !self.options.has_imatrix {
                G::IQ3_S
            } else {
                G::IQ3_XXS
            }
        } else if (matches!(p, F::IQ3_XS | F::IQ3_S) && gqa) || p == F::IQ3_M {
            G::Q4_K
        } else if p == F::Q3_K_M {
            if i < 2 { G::Q5_K } else { G::Q4_K }
        } else if p == F::Q3_K_L || (matches!(p, F::IQ4_NL | F::IQ4_XS) && gqa) {
            G::Q5_K
        } else if matches!(p, F::Q4_K_M | F::Q5_K_M) && use_more_bits(i, self.n_attention_wv) {
            G::Q6_K
        } else if p == F::Q4_K_S && i < 4 {
            G::Q5_K
        } else {
            ty
        };
        // In a 70B model 8 heads share each attn_v, so it is 8x smaller than
        // attn_q and more bits cost little.
        if hp.is_70b() && matches!(ty, G::Q3_K | G::Q4_K) {
            ty = G::Q5_K;
        }
        // For 8 experts, Q8_0 costs about 128 MB more.
        if hp.n_expert == 8 {
            ty = G::Q8_0;
        }
        self.i_attention_wv += 1;
        ty
    }

    fn attn_k_type(&self, ty: GgmlType) -> GgmlType {
        if self.hparams.n_expert == 8 { GgmlType::Q8_0 } else { self.attn_q_type(ty) }
    }

    /// attn_q, and attn_k outside 8-expert models: fewer bits for IQ3.
    fn attn_q_type(&self, ty: GgmlType) -> GgmlType {
        if self.preset == F::IQ3_XS {
            GgmlType::IQ3_XXS
        } else if self.preset == F::IQ3_XXS {
            GgmlType::IQ2_S
        } else {
            ty
        }
    }

    /// The layer of an FFN tensor and the layer count: by name in MoE models,
    /// whose expert tensors need not come in layer order, else by count.
    fn layer_info(&self, counter: i64, name: &str) -> Result<(i64, i64), MixtureError> {
        if self.hparams.n_expert <= 1 {
            return Ok((counter, self.n_ffn));
        }
        let layer = layer_of(name).ok_or_else(|| MixtureError::NoLayer(name.to_owned()))?;
        if !(0..self.n_ffn).contains(&layer) {
            let n_layer = self.hparams.n_layer_all;
            return Err(MixtureError::BadLayer { tensor: name.to_owned(), layer, n_layer });
        }
        Ok((layer, self.n_ffn))
    }

    /// ffn_down: more bits in the first layers and wherever `use_more_bits`.
    fn ffn_down_type(&mut self, name: &str, ty: GgmlType) -> Result<GgmlType, MixtureError> {
        use GgmlType as G;
        let (i, n) = self.layer_info(self.i_ffn_down, name)?;
        self.i_ffn_down += 1;
        let p = self.preset;
        let falcon = quant_rules::uses_falcon_rules(&self.hparams.arch);
        let has_imatrix = self.options.has_imatrix;
        Ok(if p == F::Q2_K {
            G::Q3_K
        } else if p == F::Q2_K_S {
            if i < n / 8 { G::Q4_K } else { ty }
        } else if p == F::IQ3_XXS && !has_imatrix {
            if i < n / 8 { G::Q4_K } else { G::Q3_K }
        } else if p == F::Q3_K_M {
            if i < n / 16 {
                G::Q5_K
            } else if !falcon || use_more_bits(i, n) {
                G::Q4_K
            } else {
                G::Q3_K
            }
        } else if p == F::IQ3_M && (i < n / 8 || (self.hparams.n_expert == 8 && use_more_bits(i, n))) {
            G::Q4_K
        } else if p == F::Q3_K_L {
            if falcon { G::Q4_K } else { G::Q5_K }
        } else if p == F::Q4_K_M {
            if falcon {
                if i < n / 16 {
                    G::Q6_K
                } else if use_more_bits(i, n) {
                    G::Q5_K
                } else {
                    G::Q4_K
                }
            } else if use_more_bits(i, n) {
                G::Q6_K
            } else {
                ty
            }
        } else if i < n / 8 && matches!(p, F::IQ4_NL | F::IQ4_XS) && !has_imatrix {
            G::Q5_K
        } else if p == F::Q5_K_M && use_more_bits(i, n) {
            G::Q6_K
        } else if p == F::Q4_K_S && !falcon && i < n / 8 {
            G::Q5_K
        } else if matches!(p, F::Q4_0 | F::Q5_0) && has_imatrix && i < n / 8 {
            // The first ffn_down layers can go wrong even with an imatrix;
            // only with one, so that a run without stays as it always was.
            if p == F::Q4_0 { G::Q4_1 } else { G::Q5_1 }
        } else {
            ty
        })
    }

    fn attn_output_type(&self, ty: GgmlType) -> GgmlType {
        use GgmlType as G;
        let p = self.preset;
        if quant_rules::uses_falcon_rules(&self.hparams.arch) {
            return if p == F::Q3_K_L { G::Q4_K } else { ty };
        }
        if self.hparams.n_expert == 8 {
            return if Q5_K_ATTN_OUTPUT_8_EXPERTS.contains(&p) { G::Q5_K } else { ty };
        }
        if p == F::Q2_K {
            G::Q3_K
        } else if p == F::IQ3_XXS {
            G::IQ3_S
        } else if matches!(p, F::Q3_K_M | F::IQ3_M) {
            G::Q4_K
        } else if p == F::Q3_K_L {
            G::Q5_K
        } else {
            ty
        }
    }

    /// ffn_gate and ffn_up: IQ3_XS spends fewer bits on the middle layers.
    fn ffn_gate_up_type(&self, i_layer: i64, n_layer: i64, ty: GgmlType) -> GgmlType {
        if self.preset == F::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
            GgmlType::IQ3_XXS
        } else {
            ty
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Array, Value};

    fn tensor(name: &str, dims: &[u64], offset: u64) -> TensorInfo {
        TensorInfo { file_offset: offset, ..TensorInfo::new(name, dims.to_vec(), GgmlType::F16) }
    }

    fn llama(layers: u32, experts: u32) -> Metadata {
        let mut md = Metadata::new();
        md.set("general.architecture", Value::string("llama"));
        md.set("llama.block_count", Value::U32(layers));
        md.set("llama.attention.head_count", Value::U32(32));
        md.set("llama.attention.head_count_kv", Value::U32(8));
        if experts > 0 {
            md.set("llama.expert_count", Value::U32(experts));
        }
        md
    }

    #[test]
    fn more_bits_pattern() {
        let picked: Vec<i64> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(picked, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
    }

    #[test]
    fn fallback_table() {
        use GgmlType as G;
        assert_eq!(fallback("t", 640, G::Q6_K).unwrap(), (G::Q8_0, Some(G::Q6_K)));
        assert_eq!(fallback("t", 640, G::IQ2_XS).unwrap(), (G::IQ4_NL, Some(G::IQ2_XS)));
        assert_eq!(fallback("t", 100, G::Q4_K).unwrap(), (G::F16, Some(G::Q4_K)));
        assert_eq!(fallback("t", 100, G::Q8_0).unwrap(), (G::F16, Some(G::Q8_0)));
        assert_eq!(fallback("t", 512, G::Q4_K).unwrap(), (G::Q4_K, None));
        assert_eq!(fallback("t", 4544, G::Q1_0), Err(MixtureError::NoFallback { tensor: "t".into(), ty: G::Q1_0 }));
    }

    #[test]
    fn names_and_shapes() {
        assert!(is_quantizable("llama", "blk.0.attn_q.weight", &[4096, 4096], false));
        assert!(!is_quantizable("llama", "blk.0.attn_norm.weight", &[4096, 4096], false));
        assert!(!is_quantizable("llama", "blk.0.attn_q.weight", &[4096, 1, 1], false));
        assert!(is_quantizable("llama", "blk.0.row.weight", &[1, 4096], false));
        assert!(is_quantizable("llama", "abcde", &[256, 256], false));
        assert!(!is_quantizable("llama", "abcd", &[256, 256], false));
        assert!(!is_quantizable("llama", "output.weight", &[256, 256], true));
        assert!(!is_quantizable("bert", "position_embd.weight", &[256, 256], false));
        assert!(is_quantizable("llama", "blk.0.attn_k_b.weight", &[256, 256], false));
        assert!(!is_quantizable("glm5-next", "blk.0.attn_k_b.weight", &[256, 256], false));
        assert_eq!(n_dims(&[]), 1);
        assert_eq!(n_dims(&[7, 1, 3, 1]), 3);
    }

    #[test]
    fn layer_numbers_read_like_sscanf() {
        assert_eq!(layer_of("blk.12.attn_v.weight"), Some(12));
        assert_eq!(layer_of("blk. +3x"), Some(3));
        assert_eq!(layer_of("blk.-1.ffn_down"), Some(-1));
        assert_eq!(layer_of("blk.x.attn_v.weight"), None);
        assert_eq!(layer_of("output.weight"), None);
        assert_eq!(layer_of("blk.99999999999.ffn_down"), None);
    }

    #[test]
    fn categories() {
        assert_eq!(category("blk.0.attn_qkv.weight"), Category::AttnQkv);
        assert_eq!(category("blk.0.ffn_gate_exps.weight"), Category::FfnGate);
        assert_eq!(category("per_layer_token_embd.weight"), Category::TokenEmbd);
        assert_eq!(category("blk.0.attn_v.bias"), Category::Other);
    }

    #[test]
    fn override_specs_parse_like_llama_quantize() {
        let o = TensorTypeOverride::parse("ATTN_V=Q8_0").unwrap();
        assert_eq!((o.pattern.as_str(), o.ty), ("attn_v", GgmlType::Q8_0));
        let o = TensorTypeOverride::parse(r"blk\.[0-9]+\.ffn=q4_k=x").unwrap_err();
        assert!(o.to_string().contains("invalid ggml type `q4_k=x`"), "{o}");
        for bad in ["attn_v", "=q8_0", "attn_v=", "(=q8_0"] {
            assert!(TensorTypeOverride::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn impossible_inputs_are_errors() {
        let tensors = [tensor("blk.0.attn_v.weight", &[4096, 1024], 0)];
        let options = MixtureOptions::new(F::NVFP4);
        assert!(matches!(choose_types(&llama(32, 0), &tensors, &options), Err(MixtureError::NoDefaultType(_))));

        let options = MixtureOptions::new(F::Q4_K_M);
        assert_eq!(
            choose_types(&Metadata::new(), &tensors, &options),
            Err(KeyError::missing("general.architecture").into())
        );
        let mut md = llama(32, 0);
        md.set("llama.block_count", Value::I32(-1));
        assert!(matches!(choose_types(&md, &tensors, &options), Err(MixtureError::Key(_))));
        let mut md = llama(2, 0);
        md.set("llama.attention.head_count_kv", Value::Array(Array::U32(vec![8])));
        assert!(matches!(choose_types(&md, &tensors, &options), Err(MixtureError::Key(_))));

        let twice = [tensor("a.weight", &[256, 256], 0), tensor("a.weight", &[256, 256], 1)];
        assert_eq!(
            choose_types(&llama(32, 0), &twice, &options),
            Err(MixtureError::DuplicateTensor("a.weight".into()))
        );

        // MoE models find an FFN tensor's layer by its name.
        let moe = llama(32, 8);
        let stray = [tensor("ffn_down_exps.weight", &[4096, 4096, 8], 0)];
        assert_eq!(choose_types(&moe, &stray, &options), Err(MixtureError::NoLayer("ffn_down_exps.weight".into())));
        let beyond = [tensor("blk.32.ffn_down_exps.weight", &[4096, 4096, 8], 0)];
        assert!(matches!(choose_types(&moe, &beyond, &options), Err(MixtureError::BadLayer { layer: 32, .. })));
    }

    #[test]
    fn counters_follow_the_visiting_order() {
        // Q3_K_M gives the first two attn_v tensors visited Q5_K.
        let tensors: Vec<TensorInfo> =
            [3, 2, 1, 0].iter().map(|&i| tensor(&format!("blk.{i}.attn_v.weight"), &[4096, 1024], i)).collect();
        let mut options = MixtureOptions::new(F::Q3_K_M);
        let types = |options: &MixtureOptions| -> Vec<GgmlType> {
            choose_types(&llama(4, 0), &tensors, options).unwrap().iter().map(|c| c.ty).collect()
        };
        use GgmlType as G;
        assert_eq!(types(&options), [G::Q4_K, G::Q4_K, G::Q5_K, G::Q5_K]);
        options.keep_split = true;
        // By offset, blk.0 (listed last) still comes first.
        assert_eq!(types(&options), [G::Q4_K, G::Q4_K, G::Q5_K, G::Q5_K]);
        let reversed: Vec<TensorInfo> =
            tensors.iter().enumerate().map(|(n, t)| TensorInfo { file_offset: n as u64, ..t.clone() }).collect();
        let by_offset: Vec<GgmlType> =
            choose_types(&llama(4, 0), &reversed, &options).unwrap().iter().map(|c| c.ty).collect();
        assert_eq!(by_offset, [G::Q5_K, G::Q5_K, G::Q4_K, G::Q4_K]);
    }
}
