//! `quantize`: llama-quantize's job, byte for byte, as a recipe op: its
//! parameters and `apply`; the policy itself is `quant::plan`.
//!
//! Pure: the output metadata (llama-quantize's key order and values), the
//! tensors in llama-quantize's order, each either passed through or a
//! conversion to the type the mixture chose. No tensor bytes are touched
//! here; the conversions run when something materializes the result.

use crate::artifact::{BlobSink, HeaderEnd, Tensor, TensorSet};
use crate::backend::Backend;
use crate::model::Endian;
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::quant::budget::{BudgetError, Model, RowSource, Target, plan_budget};
use crate::quant::imatrix::ImportanceMatrix;
use crate::quant::mixture::{MixtureError, MixtureOptions, TensorTypeOverride};
use crate::quant::plan::{Fallbacks, KvOverride, QuantizeError, QuantizeOptions, mixture_for, plan};
use crate::quant::prune;
use crate::types::GgmlType;

pub const SPEC: OpSpec = OpSpec::new(
    "quantize",
    1,
    &[
        ParamSpec::optional("preset", ParamKind::Name).fanning_out(),
        ParamSpec::optional("budget", ParamKind::Str).fanning_out(),
        ParamSpec::optional("override", ParamKind::TableList),
        ParamSpec::optional("imatrix", ParamKind::InputOrStep("imatrix")),
        ParamSpec::optional("include_weights", ParamKind::StrList),
        ParamSpec::optional("exclude_weights", ParamKind::StrList),
        ParamSpec::optional("allow_requantize", ParamKind::Bool),
        ParamSpec::optional("pure", ParamKind::Bool),
        ParamSpec::optional("leave_output_tensor", ParamKind::Bool),
        ParamSpec::optional("output_tensor_type", ParamKind::Str).fanning_out(),
        ParamSpec::optional("token_embedding_type", ParamKind::Str).fanning_out(),
        ParamSpec::optional("override_kv", ParamKind::StrList),
        ParamSpec::optional("prune_layers", ParamKind::IntList),
    ],
);

impl QuantizeOptions {
    /// Reads a recipe step's parameters.
    pub fn from_params(p: &Params) -> Result<QuantizeOptions, Vec<Diagnostic>> {
        let mut problems = Vec::new();
        let budget = match p.str("budget") {
            Some((text, _)) => crate::formats::parse_size(text).map_err(|e| problems.push(p.error("budget", e))).ok(),
            None => None,
        };
        let mixture = match (p.str("preset"), budget) {
            (Some(_), Some(_)) => {
                problems.push(p.error("budget", "give a `preset` or a `budget`, not both"));
                None
            }
            (Some((name, _)), None) => mixture_for(name)
                .map_err(|e| {
                    let problem = p.error("preset", e);
                    problems.push(match crate::params::nearest(name, crate::quant::plan::preset_names()) {
                        Some(near) => problem.with_hint(format!("did you mean `{near}`?")),
                        None => problem,
                    })
                })
                .ok(),
            (None, Some(_)) => Some(MixtureOptions::new(crate::quant::budget::PROBE_PRESET)),
            (None, None) => None,
        };
        let mut ggml_type = |name: &str| match p.str(name) {
            Some((text, _)) => match GgmlType::from_name(text) {
                Some(ty) => Some(ty),
                None => {
                    let names: Vec<&str> = GgmlType::all().map(GgmlType::name).collect();
                    problems.push(p.error(name, format!("unknown ggml type `{text}`")).suggest(text, names));
                    None
                }
            },
            None => None,
        };
        let output_tensor_type = ggml_type("output_tensor_type");
        let token_embedding_type = ggml_type("token_embedding_type");
        let mut tensor_types = Vec::new();
        for (fields, span) in p.table_list("override") {
            let field = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            let unknown: Vec<&str> =
                fields.iter().map(|(k, _)| *k).filter(|k| !["match", "type"].contains(k)).collect();
            for k in unknown {
                problems.push(
                    Diagnostic::new(format!("unknown field `{k}` in an override"), span.clone())
                        .suggest(k, ["match", "type"]),
                );
            }
            match (field("match"), field("type")) {
                (Some(pattern), Some(ty)) => match TensorTypeOverride::new(pattern, ty) {
                    Ok(o) => tensor_types.push(o),
                    Err(MixtureError::BadOverride { problem, .. }) => {
                        problems.push(Diagnostic::new(format!("bad override: {problem}"), span.clone()))
                    }
                    Err(e) => problems.push(Diagnostic::new(e.to_string(), span.clone())),
                },
                _ => problems.push(
                    Diagnostic::new("an override needs `match` (a regex) and `type`", span.clone())
                        .with_hint(r#"override = [{ match = "ffn_down", type = "Q6_K" }]"#),
                ),
            }
        }
        let mut override_kv = Vec::new();
        for (text, span) in p.str_list("override_kv") {
            match KvOverride::parse(text) {
                Ok(o) => override_kv.push(o),
                Err(e) => problems.push(Diagnostic::new(e, span.clone())),
            }
        }
        let mut prune_layers = Vec::new();
        for (layer, span) in p.int_list("prune_layers") {
            match u32::try_from(layer) {
                Ok(layer) => prune_layers.push(layer),
                Err(_) => problems.push(Diagnostic::new(format!("`{layer}` is not a layer number"), span.clone())),
            }
        }
        let Some(mut mixture) = mixture else {
            if problems.is_empty() {
                problems.push(p.error("preset", "`quantize` needs a `preset` or a `budget`"));
            }
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        mixture.pure = p.bool("pure");
        mixture.leave_output_tensor = p.bool("leave_output_tensor");
        mixture.output_tensor_type = output_tensor_type;
        mixture.token_embedding_type = token_embedding_type;
        mixture.tensor_types = tensor_types;
        Ok(QuantizeOptions {
            mixture,
            allow_requantize: p.bool("allow_requantize"),
            include_weights: p.str_list("include_weights").into_iter().map(|(s, _)| s.to_owned()).collect(),
            exclude_weights: p.str_list("exclude_weights").into_iter().map(|(s, _)| s.to_owned()).collect(),
            override_kv,
            budget,
            prune_layers: prune::layer_set(prune_layers),
        })
    }
}

/// [`apply`], with a `budget` first turned into types by the budget planner,
/// which reads sample rows of `input` through `rows` (the only op that looks
/// at values: the planner measures what each type would cost in error).
pub fn apply_planned(
    input: &TensorSet,
    options: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
    rows: &dyn RowSource,
    backend: &dyn Backend,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<Quantized, BudgetError> {
    let Some(budget) = options.budget else { return Ok(apply(input, options, imatrix, blobs)?) };
    let infos = input.infos();
    let model = Model { metadata: &input.metadata, tensors: &infos, rows, backend };
    let plan = plan_budget(&model, options, imatrix, Target::Size(budget), true)?;
    Ok(apply(input, &plan.options, imatrix, blobs)?)
}

/// A quantized set, with the tensors that fell back to another type than
/// their rule chose (each run says so, as llama-quantize does).
pub struct Quantized {
    pub set: TensorSet,
    pub fallbacks: Fallbacks,
}

/// The quantized tensor set: `input`'s tensors in llama-quantize's order,
/// each passed through or converted. Importance weights go to the store as
/// blobs, so the conversions (and their keys) name them by hash.
pub fn apply(
    input: &TensorSet,
    options: &QuantizeOptions,
    imatrix: Option<&ImportanceMatrix>,
    blobs: &(impl BlobSink + ?Sized),
) -> Result<Quantized, QuantizeError> {
    let infos = input.infos();
    let plan = plan(&input.metadata, &infos, options, imatrix)?;
    let fallbacks = plan.fallbacks();
    let mut tensors = Vec::with_capacity(plan.tensors.len());
    for planned in &plan.tensors {
        let source = &input.tensors[planned.input_idx];
        // Named as the plan names it (--prune-layers numbers layers again).
        let renamed = || Tensor { name: planned.info.name.clone(), ..source.clone() };
        if !planned.converts() {
            tensors.push(renamed());
            continue;
        }
        let weights = match imatrix {
            Some(m) => m.weights_for(&infos[planned.input_idx])?,
            None => None,
        };
        if planned.requires_imatrix && weights.is_none() {
            return Err(QuantizeError::NeedsImatrix { tensor: source.name.clone(), ty: planned.info.ggml_type });
        }
        let importance = match weights {
            Some(w) => Some(blobs.put_blob(&w.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?),
            None => None,
        };
        tensors.push(Tensor::convert(renamed(), planned.info.ggml_type, importance));
    }
    // Little-endian, as llama-quantize writes on a little-endian host (a
    // big-endian input's bytes were swapped as they were read).
    let set = TensorSet {
        endian: Endian::Little,
        metadata: plan.metadata,
        tensors,
        header_end: HeaderEnd::Aligned,
        legacy: input.legacy.clone(),
    };
    Ok(Quantized { set, fallbacks })
}
