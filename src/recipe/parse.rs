//! TOML text → validated [`Recipe`]: every problem reported at once.
//!
//! Order of work: the document's shape (sections, fields, value kinds), then
//! names and references, then the step graph (cycles), then fan-out in
//! dependency order, then what needs the expanded nodes (op parameters,
//! export paths and their collisions).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{
    Backend, Binding, Diagnostic, InputDecl, NodeDecl, OpSpec, Param, ParamKind, ParamValue, Params, Recipe, Source,
    Span,
};
use crate::key::Key;
use crate::ops::{self, Op};
use crate::remote_url::RemoteUrl;

const SECTIONS: [&str; 4] = ["recipe", "tools", "input", "step"];
const RECIPE_FIELDS: [&str; 4] = ["name", "remote", "jobs", "cache"];
const TOOLS_FIELDS: [&str; 1] = ["llama_cpp"];
const INPUT_FIELDS: [&str; 3] = ["path", "blake3", "fetch"];
const STEP_FIELDS: [&str; 4] = ["op", "from", "keep", "backend"];

struct RawStep {
    name: String,
    span: Span,
    spec: Option<&'static OpSpec>,
    from: Vec<(String, Span)>,
    from_span: Span,
    keep: bool,
    backend: Backend,
    params: Vec<(String, Param)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ref {
    Input(usize),
    Step(usize),
    /// An input a parameter names as a model the step takes: loaded, and
    /// a source of the node as a `from` input is.
    LoadedInput(usize),
}

pub(super) fn parse(text: &str, dir: &Path, fallback_name: &str) -> Result<Recipe, Vec<Diagnostic>> {
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        return Err(errors.iter().map(|e| Diagnostic::new(e.message(), e.span().unwrap_or(0..0))).collect());
    }
    let mut diags = Vec::new();
    let mut header = Header::default();
    let mut llama_cpp = None;
    let mut inputs = Vec::new();
    let mut steps = Vec::new();
    for (key, value) in doc.get_ref().iter() {
        match key.get_ref().as_ref() {
            "recipe" => header = parse_header(value, dir, &mut diags),
            "tools" => llama_cpp = parse_tools(value, dir, &mut diags),
            "input" => {
                for (iname, ivalue) in section(value, "input", &mut diags) {
                    if let Some(input) = parse_input(text, iname, ivalue, dir, &mut diags) {
                        inputs.push(input);
                    }
                }
            }
            "step" => {
                for (sname, svalue) in section(value, "step", &mut diags) {
                    if let Some(step) = parse_step(sname, svalue, &mut diags) {
                        steps.push(step);
                    }
                }
            }
            other => {
                diags.push(Diagnostic::new(format!("unknown section `{other}`"), key.span()).suggest(other, SECTIONS))
            }
        }
    }
    if steps.is_empty() && diags.is_empty() {
        diags.push(Diagnostic::new("the recipe has no steps", 0..0).with_hint("add a [step.NAME] with an `op`"));
    }
    let refs = resolve_references(&inputs, &steps, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    let order = dependency_order(&steps, &refs, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    let nodes = expand(&inputs, &steps, &refs, &order, dir, &mut diags);
    if !diags.is_empty() {
        return Err(diags);
    }
    Ok(Recipe {
        name: header.name.unwrap_or_else(|| fallback_name.to_owned()),
        inputs,
        nodes,
        source: None,
        remote: header.remote,
        jobs: header.jobs,
        cache: header.cache,
        llama_cpp,
    })
}

/// `[tools]`: where the recipe's external tools are (`llama_cpp`, a
/// llama.cpp build or install directory).
fn parse_tools(value: &Spanned<DeValue<'_>>, dir: &Path, diags: &mut Vec<Diagnostic>) -> Option<PathBuf> {
    let mut llama_cpp = None;
    for (key, v) in table(value, "[tools]", diags)?.iter() {
        match key.get_ref().as_ref() {
            "llama_cpp" => llama_cpp = string(v, "`llama_cpp`", diags).map(|d| dir.join(d)),
            other => diags.push(
                Diagnostic::new(format!("unknown field `{other}` in [tools]"), key.span()).suggest(other, TOOLS_FIELDS),
            ),
        }
    }
    llama_cpp
}

fn table<'a, 'i>(value: &'a Spanned<DeValue<'i>>, what: &str, diags: &mut Vec<Diagnostic>) -> Option<&'a DeTable<'i>> {
    let t = value.get_ref().as_table();
    if t.is_none() {
        diags.push(Diagnostic::new(format!("{what} must be a table"), value.span()));
    }
    t
}

/// The entries of `[input.*]` or `[step.*]`, with valid names.
fn section<'a, 'i>(
    value: &'a Spanned<DeValue<'i>>,
    what: &str,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(&'a Spanned<std::borrow::Cow<'i, str>>, &'a Spanned<DeValue<'i>>)> {
    let Some(t) = table(value, &format!("[{what}]"), diags) else { return Vec::new() };
    let mut out = Vec::new();
    for (name, entry) in t.iter() {
        let valid = !name.get_ref().is_empty()
            && name.get_ref().chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if valid {
            out.push((name, entry));
        } else {
            diags.push(
                Diagnostic::new(format!("`{}` is not a valid {what} name", name.get_ref()), name.span())
                    .with_hint("use letters, digits, `_` and `-`"),
            );
        }
    }
    out
}

fn string(value: &Spanned<DeValue<'_>>, what: &str, diags: &mut Vec<Diagnostic>) -> Option<String> {
    let s = value.get_ref().as_str().map(str::to_owned);
    if s.is_none() {
        diags.push(Diagnostic::new(
            format!("{what} must be a string, not {}", value.get_ref().type_str()),
            value.span(),
        ));
    }
    s
}

/// What `[recipe]` says.
#[derive(Default)]
struct Header {
    name: Option<String>,
    remote: Option<RemoteUrl>,
    jobs: Option<usize>,
    cache: Option<std::path::PathBuf>,
}

/// `[recipe]`: its name, its caches and its worker count, if it names them.
fn parse_header(value: &Spanned<DeValue<'_>>, dir: &Path, diags: &mut Vec<Diagnostic>) -> Header {
    let mut header = Header::default();
    let Some(table) = table(value, "[recipe]", diags) else { return header };
    for (key, v) in table.iter() {
        match key.get_ref().as_ref() {
            "name" => header.name = string(v, "`name`", diags),
            "cache" => header.cache = string(v, "`cache`", diags).map(|c| dir.join(c)),
            "remote" => {
                header.remote = string(v, "`remote`", diags).and_then(|url| match RemoteUrl::parse(&url) {
                    Ok(url) => Some(url),
                    Err(e) => {
                        diags.push(Diagnostic::new(e.to_string(), v.span()).hiding_source());
                        None
                    }
                })
            }
            "jobs" => {
                let jobs = match v.get_ref() {
                    DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok(),
                    _ => None,
                };
                let jobs = jobs.and_then(|n| usize::try_from(n).ok()).filter(|&n| n > 0);
                if jobs.is_none() {
                    diags.push(Diagnostic::new("`jobs` must be a whole number of workers, at least 1", v.span()));
                }
                header.jobs = jobs;
            }
            other => diags.push(
                Diagnostic::new(format!("unknown field `{other}` in [recipe]"), key.span())
                    .suggest(other, RECIPE_FIELDS),
            ),
        }
    }
    header
}

fn parse_input(
    text: &str,
    name: &Spanned<std::borrow::Cow<'_, str>>,
    value: &Spanned<DeValue<'_>>,
    dir: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Option<InputDecl> {
    let mut path = None;
    let mut pin = None;
    let mut written_at = None;
    let mut path_span = value.span();
    let mut fetch = None;
    for (key, v) in table(value, "an input", diags)?.iter() {
        match key.get_ref().as_ref() {
            "path" => {
                path = string(v, "`path`", diags);
                written_at = Some(crate::params::line_column(text, v.span().start));
                path_span = v.span();
            }
            "fetch" => fetch = string(v, "`fetch`", diags),
            "blake3" => {
                let hex = string(v, "`blake3`", diags)?;
                pin = Key::from_hex(&hex);
                if pin.is_none() {
                    diags.push(
                        Diagnostic::new("`blake3` must be 64 hex digits", v.span()).with_hint("b3sum FILE prints it"),
                    );
                }
            }
            other => diags.push(
                Diagnostic::new(format!("unknown field `{other}` in an input"), key.span())
                    .suggest(other, INPUT_FIELDS),
            ),
        }
    }
    let Some(path) = path else {
        diags.push(Diagnostic::new(format!("input `{}` has no `path`", name.get_ref()), name.span()));
        return None;
    };
    // Nothing there but a Hugging Face repo id: the repository's snapshot in the local Hub cache.
    let local = dir.join(&path);
    let found = if local.exists() { Ok(None) } else { crate::formats::hub_repo_snapshot(&path) };
    let resolved = match found {
        Ok(snapshot) => snapshot.unwrap_or(local),
        Err(e) => {
            diags.push(Diagnostic::new(e, path_span));
            return None;
        }
    };
    Some(InputDecl {
        name: name.get_ref().to_string(),
        path: resolved,
        as_written: PathBuf::from(path),
        pin,
        written_at,
        fetch,
    })
}

fn parse_step(
    name: &Spanned<std::borrow::Cow<'_, str>>,
    value: &Spanned<DeValue<'_>>,
    diags: &mut Vec<Diagnostic>,
) -> Option<RawStep> {
    let fields = table(value, "a step", diags)?;
    let mut step = RawStep {
        name: name.get_ref().to_string(),
        span: name.span(),
        spec: None,
        from: Vec::new(),
        from_span: name.span(),
        keep: false,
        backend: Backend::Auto,
        params: Vec::new(),
    };
    let op_names: Vec<&str> = ops::recipe_specs().map(|s| s.name).collect();
    match fields.get("op") {
        Some(op) => match op.get_ref().as_str() {
            // Ops are kebab-case; `merge_shards` is read as `merge-shards`.
            Some(op_name) => match ops::spec(&op_name.replace('_', "-")) {
                Some(spec) => step.spec = Some(spec),
                None => diags.push(
                    Diagnostic::new(format!("unknown op `{op_name}`"), op.span())
                        .suggest(op_name, op_names.iter().copied()),
                ),
            },
            None => diags.push(Diagnostic::new("`op` must be a string", op.span())),
        },
        None => diags.push(
            Diagnostic::new(format!("step `{}` has no `op`", step.name), name.span())
                .with_hint(format!("one of: {}", op_names.join(", "))),
        ),
    }
    for (key, v) in fields.iter() {
        // Fields are snake_case; `output-tensor-type` is read as `output_tensor_type`.
        let field = &*key.get_ref().replace('-', "_");
        if step.params.iter().any(|(name, _)| name == field) {
            diags.push(Diagnostic::new(format!("`{field}` is given twice (as `{}` too)", key.get_ref()), key.span()));
            continue;
        }
        match field {
            "op" => {}
            "from" => {
                step.from_span = v.span();
                match v.get_ref() {
                    DeValue::String(s) => step.from.push((s.to_string(), v.span())),
                    DeValue::Array(items) => {
                        for item in items.iter() {
                            if let Some(s) = string(item, "each `from` entry", diags) {
                                step.from.push((s, item.span()));
                            }
                        }
                    }
                    _ => diags.push(Diagnostic::new("`from` must be a name or a list of names", v.span())),
                }
            }
            "keep" => match v.get_ref().as_bool() {
                Some(b) => step.keep = b,
                None => diags.push(Diagnostic::new("`keep` must be true or false", v.span())),
            },
            "backend" => match v.get_ref().as_str() {
                Some(name) => match Backend::from_name(name) {
                    Some(backend) => step.backend = backend,
                    None => diags.push(
                        Diagnostic::new(format!("unknown backend `{name}`"), v.span()).suggest(name, Backend::NAMES),
                    ),
                },
                None => diags.push(Diagnostic::new("`backend` must be a string", v.span())),
            },
            _ => {
                let Some(spec) = step.spec else { continue };
                match spec.param(field) {
                    Some(param) => match to_param(v) {
                        Ok(p) => match check_kind(field, param.kind, param.fans_out, &p) {
                            Ok(()) => step.params.push((field.to_owned(), as_kind(param.kind, p))),
                            Err(d) => diags.push(d),
                        },
                        Err(d) => diags.push(d),
                    },
                    None => {
                        let valid = STEP_FIELDS.iter().copied().chain(spec.params.iter().map(|p| p.name));
                        diags.push(
                            Diagnostic::new(format!("`{}` has no field `{field}`", spec.name), key.span())
                                .suggest(field, valid),
                        );
                    }
                }
            }
        }
    }
    if let Some(spec) = step.spec {
        for param in spec.params.iter().filter(|p| p.required) {
            if !step.params.iter().any(|(n, _)| n == param.name) {
                diags.push(Diagnostic::new(
                    format!("step `{}` ({}) needs `{}` ({})", step.name, spec.name, param.name, param.kind.describe()),
                    name.span(),
                ));
            }
        }
    }
    if step.from.is_empty() && !fields.contains_key("from") {
        diags.push(
            Diagnostic::new(format!("step `{}` has no `from`", step.name), name.span())
                .with_hint("name an [input.NAME] or an earlier step"),
        );
    }
    Some(step)
}

fn to_param(value: &Spanned<DeValue<'_>>) -> Result<Param, Diagnostic> {
    let span = value.span();
    let v = match value.get_ref() {
        DeValue::String(s) => ParamValue::Str(s.to_string()),
        DeValue::Boolean(b) => ParamValue::Bool(*b),
        DeValue::Integer(i) => match i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()) {
            Ok(n) => ParamValue::Int(n),
            Err(_) => return Err(Diagnostic::new("integer out of range", span)),
        },
        DeValue::Float(f) => match f.as_str().replace('_', "").parse() {
            Ok(x) => ParamValue::Float(x),
            Err(_) => return Err(Diagnostic::new("not a number", span)),
        },
        DeValue::Datetime(_) => return Err(Diagnostic::new("no parameter takes a date", span)),
        DeValue::Array(items) => ParamValue::List(items.iter().map(to_param).collect::<Result<_, _>>()?),
        DeValue::Table(t) => ParamValue::Table(
            t.iter().map(|(k, v)| Ok((k.get_ref().to_string(), to_param(v)?))).collect::<Result<_, Diagnostic>>()?,
        ),
    };
    Ok(Param { value: v, span })
}

fn has_kind(kind: ParamKind, v: &ParamValue) -> bool {
    let all_str = |items: &[Param]| items.iter().all(|p| matches!(p.value, ParamValue::Str(_)));
    match kind {
        ParamKind::Str | ParamKind::InputName | ParamKind::InputOrStep(_) | ParamKind::Model => {
            matches!(v, ParamValue::Str(_))
        }
        ParamKind::Int => matches!(v, ParamValue::Int(_)),
        ParamKind::Name => matches!(v, ParamValue::Str(_) | ParamValue::Int(_)),
        ParamKind::Bool => matches!(v, ParamValue::Bool(_)),
        ParamKind::StrList => matches!(v, ParamValue::List(items) if all_str(items)),
        ParamKind::IntList => {
            matches!(v, ParamValue::List(items) if items.iter().all(|p| matches!(p.value, ParamValue::Int(_))))
        }
        ParamKind::StrMap => {
            matches!(v, ParamValue::Table(entries) if entries.iter().all(|(_, p)| matches!(p.value, ParamValue::Str(_))))
        }
        ParamKind::Table => matches!(v, ParamValue::Table(entries) if entries.iter().all(|(_, p)| match &p.value {
            ParamValue::List(items) => items.iter().all(|i| !matches!(i.value, ParamValue::List(_) | ParamValue::Table(_))),
            value => !matches!(value, ParamValue::Table(_)),
        })),
        ParamKind::TableList => matches!(v, ParamValue::List(items) if items.iter().all(|p| matches!(
            &p.value, ParamValue::Table(entries) if entries.iter().all(|(_, e)| matches!(e.value, ParamValue::Str(_)))
        ))),
    }
}

/// `p` in the shape its kind is read in: a number given for a name becomes
/// its digits (in a fan-out list too).
fn as_kind(kind: ParamKind, p: Param) -> Param {
    if kind != ParamKind::Name {
        return p;
    }
    let value = match p.value {
        ParamValue::Int(n) => ParamValue::Str(n.to_string()),
        ParamValue::List(items) => ParamValue::List(items.into_iter().map(|i| as_kind(kind, i)).collect()),
        other => other,
    };
    Param { value, span: p.span }
}

fn check_kind(name: &str, kind: ParamKind, fans_out: bool, p: &Param) -> Result<(), Diagnostic> {
    if has_kind(kind, &p.value) {
        return Ok(());
    }
    if let (true, ParamValue::List(items)) = (fans_out, &p.value) {
        if items.is_empty() {
            return Err(Diagnostic::new(format!("`{name}` is an empty list: it would make no nodes"), p.span.clone()));
        }
        return match items.iter().find(|i| !has_kind(kind, &i.value)) {
            None => Ok(()),
            Some(bad) => Err(Diagnostic::new(format!("each `{name}` must be {}", kind.describe()), bad.span.clone())),
        };
    }
    let list_hint = if fans_out { " (or a list of them, one node each)" } else { "" };
    Err(Diagnostic::new(format!("`{name}` must be {}{list_hint}", kind.describe()), p.span.clone()))
}

/// Resolves `from` and input-naming parameters; checks arity and kinds.
fn resolve_references(inputs: &[InputDecl], steps: &[RawStep], diags: &mut Vec<Diagnostic>) -> Vec<Vec<Ref>> {
    let mut names: HashMap<&str, Ref> = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        names.insert(&input.name, Ref::Input(i));
    }
    for (i, step) in steps.iter().enumerate() {
        if let Some(Ref::Input(_)) = names.insert(&step.name, Ref::Step(i)) {
            diags.push(Diagnostic::new(
                format!("`{}` names both an input and a step; references to it would be ambiguous", step.name),
                step.span.clone(),
            ));
        }
    }
    let all_names: Vec<&str> =
        inputs.iter().map(|d| d.name.as_str()).chain(steps.iter().map(|s| s.name.as_str())).collect();
    let input_names: Vec<&str> = inputs.iter().map(|d| d.name.as_str()).collect();
    let mut refs = Vec::with_capacity(steps.len());
    for step in steps {
        let mut resolved = Vec::new();
        for (name, span) in &step.from {
            match names.get(name.as_str()) {
                None => diags.push(
                    Diagnostic::new(format!("`{name}` is not an input or a step"), span.clone())
                        .suggest(name, all_names.iter().copied()),
                ),
                Some(&Ref::Step(j)) if steps[j].spec.is_some_and(|s| s.is_sink) => diags.push(Diagnostic::new(
                    format!("`{name}` is an export: it writes files, so no step can take input from it"),
                    span.clone(),
                )),
                Some(&Ref::Step(_)) if step.spec.is_some_and(|s| s.from_input_only) => diags.push(
                    Diagnostic::new(format!("`load` reads an [input.NAME]; `{name}` is a step"), span.clone())
                        .with_hint("take the step's result directly: its consumers can say `from` it"),
                ),
                Some(&r) => resolved.push(r),
            }
        }
        match step.spec {
            Some(spec) if spec.many_inputs && step.from.len() < 2 => diags.push(Diagnostic::new(
                format!("`{}` takes a list of at least two inputs", spec.name),
                step.from_span.clone(),
            )),
            Some(spec) if !spec.many_inputs && step.from.len() > 1 => diags.push(Diagnostic::new(
                format!("`{}` takes one input, not {}", spec.name, step.from.len()),
                step.from_span.clone(),
            )),
            _ => {}
        }
        for (param, value) in &step.params {
            let kind = step.spec.and_then(|s| s.param(param)).map(|p| p.kind);
            let step_op = match kind {
                Some(ParamKind::InputOrStep(op)) => Some(op),
                _ => None,
            };
            let takes_step = step_op.is_some();
            let ParamValue::Str(target) = &value.value else { continue };
            if kind == Some(ParamKind::Model) {
                match names.get(target.as_str()) {
                    Some(&Ref::Input(i)) => resolved.push(Ref::LoadedInput(i)),
                    Some(&Ref::Step(j)) if steps[j].spec.is_some_and(|s| s.is_sink) => diags.push(Diagnostic::new(
                        format!("`{target}` is an export: it writes files, so `{param}` cannot take its result"),
                        value.span.clone(),
                    )),
                    Some(&r) => resolved.push(r),
                    None => diags.push(
                        Diagnostic::new(format!("`{target}` is not an input or a step"), value.span.clone())
                            .suggest(target, all_names.iter().copied()),
                    ),
                }
                continue;
            }
            if !takes_step && kind != Some(ParamKind::InputName) {
                continue;
            }
            match names.get(target.as_str()) {
                Some(&(Ref::Input(i) | Ref::LoadedInput(i))) => resolved.push(Ref::Input(i)),
                Some(&Ref::Step(j)) if takes_step => match steps[j].spec.map(|s| s.name) {
                    op if op == step_op => resolved.push(Ref::Step(j)),
                    other => diags.push(Diagnostic::new(
                        format!(
                            "`{param}` takes an [input.NAME] or {}; `{target}` is {}",
                            a_step_of(step_op.unwrap_or_default()),
                            other.map_or("a step".to_owned(), a_step_of)
                        ),
                        value.span.clone(),
                    )),
                },
                Some(&Ref::Step(_)) => diags.push(Diagnostic::new(
                    format!("`{param}` must name an [input.NAME]; `{target}` is a step"),
                    value.span.clone(),
                )),
                None if takes_step => diags.push(
                    Diagnostic::new(format!("`{target}` is not an input or a step"), value.span.clone())
                        .suggest(target, all_names.iter().copied()),
                ),
                None => diags.push(
                    Diagnostic::new(format!("`{target}` is not an input"), value.span.clone())
                        .suggest(target, input_names.iter().copied()),
                ),
            }
        }
        refs.push(resolved);
    }
    refs
}

/// "a `filter` step", "an `imatrix` step".
fn a_step_of(op: &str) -> String {
    let article = if op.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} `{op}` step")
}

/// Steps in dependency order (file order where free); reports cycles.
fn dependency_order(steps: &[RawStep], refs: &[Vec<Ref>], diags: &mut Vec<Diagnostic>) -> Vec<usize> {
    let mut graph = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..steps.len()).map(|i| graph.add_node(i)).collect();
    for (i, step_refs) in refs.iter().enumerate() {
        for r in step_refs {
            if let Ref::Step(j) = *r {
                graph.add_edge(nodes[j], nodes[i], ());
            }
        }
    }
    for scc in tarjan_scc(&graph) {
        let cyclic = scc.len() > 1 || graph.contains_edge(scc[0], scc[0]);
        if cyclic {
            let mut members: Vec<usize> = scc.iter().map(|n| graph[*n]).collect();
            members.sort_unstable();
            let names: Vec<&str> = members.iter().map(|&i| steps[i].name.as_str()).collect();
            let first = &steps[members[0]];
            diags.push(Diagnostic::new(
                format!("steps depend on each other in a cycle: {} → {}", names.join(" → "), names[0]),
                first.from_span.clone(),
            ));
        }
    }
    let mut done = vec![false; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    while order.len() < steps.len() {
        let ready = (0..steps.len()).find(|&i| {
            !done[i]
                && refs[i].iter().all(|r| match *r {
                    Ref::Step(j) => done[j],
                    Ref::Input(_) | Ref::LoadedInput(_) => true,
                })
        });
        let Some(next) = ready else { break };
        done[next] = true;
        order.push(next);
    }
    order
}

type Bindings = Vec<Binding>;

/// One node of a step, before its op is read.
struct Instance {
    from: Vec<Source>,
    bindings: Bindings,
}

fn expand(
    inputs: &[InputDecl],
    steps: &[RawStep],
    refs: &[Vec<Ref>],
    order: &[usize],
    dir: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Vec<NodeDecl> {
    let mut nodes: Vec<NodeDecl> = Vec::new();
    let mut implicit_loads: HashMap<usize, usize> = HashMap::new();
    let mut instances_of: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut exported: HashMap<PathBuf, String> = HashMap::new();
    for &s in order {
        let step = &steps[s];
        let Some(spec) = step.spec else { continue };
        // Upstream choices: one list of (source, bindings) per `from` entry.
        let mut combos = vec![Instance { from: Vec::new(), bindings: Vec::new() }];
        // `from`, then the models and steps parameters name: each an input of the node.
        let named = refs[s].iter().skip(step.from.len()).filter(|r| !matches!(r, Ref::Input(_)));
        for r in refs[s].iter().take(step.from.len()).chain(named) {
            let choices: Vec<(Source, Bindings)> = match *r {
                Ref::Input(i) if spec.from_input_only => vec![(Source::Input(i), Vec::new())],
                Ref::Input(i) | Ref::LoadedInput(i) => {
                    let idx = *implicit_loads.entry(i).or_insert_with(|| {
                        let name = inputs[i].name.clone();
                        nodes.push(NodeDecl {
                            id: name.clone(),
                            step: name,
                            op: Op::Load,
                            from: vec![Source::Input(i)],
                            uses: Vec::new(),
                            bindings: Vec::new(),
                            keep: false,
                            backend: Backend::Auto,
                        });
                        nodes.len() - 1
                    });
                    vec![(Source::Node(idx), Vec::new())]
                }
                Ref::Step(j) => instances_of
                    .get(&j)
                    .map(|list| list.iter().map(|&n| (Source::Node(n), nodes[n].bindings.clone())).collect())
                    .unwrap_or_default(),
            };
            combos = extend_instances(&combos, &choices);
        }
        let uses: Vec<usize> = refs[s]
            .iter()
            .skip(step.from.len())
            .filter_map(|r| match r {
                Ref::Input(i) => Some(*i),
                Ref::Step(_) | Ref::LoadedInput(_) => None,
            })
            .collect();
        let variants = own_variants(step, spec);
        let mut mine = Vec::new();
        for combo in &combos {
            for (params, own) in &variants {
                let mut bindings = combo.bindings.clone();
                bindings.retain(|b| !own.iter().any(|o| o.name == b.name));
                bindings.extend(own.iter().cloned());
                let params = Params { entries: params.clone(), span: step.span.clone() };
                let export = match spec.is_sink {
                    true => match export_path(step, &params, &bindings, dir, &mut exported, diags) {
                        Some(export) => Some(export),
                        // Reported by export_path, or by the required-parameter check.
                        None => continue,
                    },
                    false => None,
                };
                match Op::from_params(spec, &params, export) {
                    Ok(op) => {
                        let id = node_id(&step.name, &bindings);
                        let from = match &op {
                            Op::Evaluate(o) => evaluated_against(&mut nodes, step, &combo.from, *o, &uses),
                            _ => combo.from.clone(),
                        };
                        nodes.push(NodeDecl {
                            id,
                            step: step.name.clone(),
                            op,
                            from,
                            uses: uses.clone(),
                            bindings,
                            keep: step.keep,
                            backend: step.backend,
                        });
                        mine.push(nodes.len() - 1);
                    }
                    Err(problems) => diags.extend(problems),
                }
            }
        }
        instances_of.insert(s, mine);
    }
    nodes
}

/// Every instance extended by every choice for its next source, except
/// the pairs whose bindings disagree on a name.
fn extend_instances(instances: &[Instance], choices: &[(Source, Bindings)]) -> Vec<Instance> {
    let mut extended = Vec::new();
    for instance in instances {
        'choice: for (source, bindings) in choices {
            let mut merged = instance.bindings.clone();
            for binding in bindings {
                match merged.iter().find(|m| m.name == binding.name) {
                    Some(m) if m.value != binding.value => continue 'choice,
                    Some(_) => {}
                    None => merged.push(binding.clone()),
                }
            }
            let mut from = instance.from.clone();
            from.push(*source);
            extended.push(Instance { from, bindings: merged });
        }
    }
    extended
}

/// A step's own fan-out: its parameters once per value of each list given
/// to a parameter that takes one value, with the bindings that name them.
fn own_variants(step: &RawStep, spec: &OpSpec) -> Vec<(Vec<(String, Param)>, Bindings)> {
    let mut variants: Vec<(Vec<(String, Param)>, Bindings)> = vec![(Vec::new(), Vec::new())];
    for (name, param) in &step.params {
        let fan_out = spec.param(name).is_some_and(|p| p.fans_out);
        let fans = fan_out && spec.param(name).is_some_and(|p| !has_kind(p.kind, &param.value));
        let values: Vec<Param> = match (&param.value, fans) {
            (ParamValue::List(items), true) => items.clone(),
            _ => vec![param.clone()],
        };
        variants = variants
            .into_iter()
            .flat_map(|(params, bindings)| {
                values.iter().map(move |v| {
                    let mut params = params.clone();
                    params.push((name.clone(), v.clone()));
                    let mut bindings = bindings.clone();
                    // A single value of a fan-out parameter names the node too, so
                    // a path template can use it whether or not it is a list.
                    if fan_out {
                        bindings.push(Binding { name: name.clone(), value: v.value.display(), listed: fans });
                    }
                    (params, bindings)
                })
            })
            .collect();
    }
    variants
}

/// An `evaluate` node's sources: the model evaluated, and the logits of
/// its base (`from[1]`) over the text, a hidden `kld-base` node made once
/// per base and step and shared by every evaluation against it.
fn evaluated_against(
    nodes: &mut Vec<NodeDecl>,
    step: &RawStep,
    from: &[Source],
    options: ops::evaluate::EvaluateOptions,
    uses: &[usize],
) -> Vec<Source> {
    let (Some(&model), Some(&Source::Node(base))) = (from.first(), from.get(1)) else { return from.to_vec() };
    let id = format!("{}.base[{}]", step.name, nodes[base].id);
    let existing = nodes.iter().position(|n| n.id == id);
    let logits = existing.unwrap_or_else(|| {
        nodes.push(NodeDecl {
            id,
            step: step.name.clone(),
            op: Op::KldBase(options),
            from: vec![Source::Node(base)],
            uses: uses.to_vec(),
            bindings: nodes[base].bindings.clone(),
            keep: false,
            backend: step.backend,
        });
        nodes.len() - 1
    });
    vec![model, Source::Node(logits)]
}

fn node_id(step: &str, bindings: &[Binding]) -> String {
    let values: Vec<String> = bindings.iter().filter(|b| b.listed).map(|b| format!("{}={}", b.name, b.value)).collect();
    if values.is_empty() {
        return step.to_owned();
    }
    format!("{step}[{}]", values.join(","))
}

/// Fills an export's path template and checks where it lands.
fn export_path(
    step: &RawStep,
    params: &Params,
    bindings: &[Binding],
    dir: &Path,
    exported: &mut HashMap<PathBuf, String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<PathBuf> {
    let (template, span) = params.str("path")?;
    let mut rendered = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        rendered.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            diags.push(Diagnostic::new("unclosed `{` in the path", span.clone()));
            return None;
        };
        let name = &rest[open + 1..open + close];
        match bindings.iter().find(|b| b.name == name) {
            Some(b) => rendered.push_str(&b.value),
            None => {
                let names: Vec<&str> = bindings.iter().map(|b| b.name.as_str()).collect();
                let d = Diagnostic::new(
                    format!("`{{{name}}}` in the path is not a fan-out value of this step"),
                    span.clone(),
                );
                diags.push(if names.is_empty() {
                    d.with_hint("placeholders name parameters given as lists upstream, e.g. {preset}")
                } else {
                    d.suggest(name, names)
                });
                return None;
            }
        }
        rest = &rest[open + close + 1..];
    }
    rendered.push_str(rest);
    let relative = Path::new(&rendered);
    let escapes = relative.is_absolute()
        || relative.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)));
    if escapes || rendered.is_empty() {
        diags.push(
            Diagnostic::new(format!("export path `{rendered}` leaves the output directory"), span.clone())
                .with_hint("give a relative path without `..`; it is resolved against the recipe's directory"),
        );
        return None;
    }
    let path = dir.join(relative);
    let id = node_id(&step.name, bindings);
    if let Some(other) = exported.insert(path.clone(), id.clone()) {
        let hint = if other.starts_with(&format!("{}[", step.name)) || other == step.name {
            "the step fans out: put each fan-out value in the path, e.g. out/model-{preset}.gguf".to_owned()
        } else {
            "give each export its own path".to_owned()
        };
        diags.push(
            Diagnostic::new(format!("`{id}` and `{other}` both export to `{rendered}`"), span.clone()).with_hint(hint),
        );
        return None;
    }
    Some(path)
}
