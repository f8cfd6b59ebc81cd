//! Step parameters: what each op accepts (its [`OpSpec`]) and the values a
//! recipe gave, with the source span of each so an op's own checks can point
//! at the line that is wrong; and the diagnostics about them. A leaf: both
//! `recipe` (which reads them) and `ops` (which define and check them) sit
//! above it.

mod diagnostic;

use std::ops::Range;

pub use diagnostic::{Diagnostic, Located, RecipeError, line_column, nearest};

/// A byte range of the recipe text.
pub type Span = Range<usize>;

/// The shapes of value a parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    Str,
    /// A name, or a number standing for one (a preset's ftype number, as
    /// llama-quantize takes it): read as the number's digits.
    Name,
    Bool,
    /// A list of strings.
    StrList,
    /// A list of integers.
    IntList,
    /// A table of string to string.
    StrMap,
    /// A list of tables whose values are strings.
    TableList,
    /// A table of single values (strings, numbers, booleans) and lists of them.
    Table,
    /// A whole number.
    Int,
    /// The name of an `[input.NAME]` the step also depends on.
    InputName,
    /// The name of an `[input.NAME]` or of a step of this op (an
    /// `imatrix` step's matrix), whose result the step also depends on.
    InputOrStep(&'static str),
    /// A model the step also takes: an `[input.NAME]` (loaded) or a step.
    Model,
}

impl ParamKind {
    pub fn describe(self) -> &'static str {
        match self {
            ParamKind::Str => "a string",
            ParamKind::Name => "a name or a number",
            ParamKind::Bool => "true or false",
            ParamKind::StrList => "a list of strings",
            ParamKind::IntList => "a list of integers",
            ParamKind::StrMap => "a table of strings",
            ParamKind::TableList => "a list of tables",
            ParamKind::Table => "a table (of values and lists of values)",
            ParamKind::Int => "a whole number",
            ParamKind::InputName => "the name of an [input.NAME]",
            ParamKind::InputOrStep(_) => "the name of an [input.NAME] or a step",
            ParamKind::Model => "the name of an [input.NAME] or a step",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub required: bool,
    /// A list in place of the single value makes one node per element.
    pub fans_out: bool,
}

impl ParamSpec {
    pub const fn optional(name: &'static str, kind: ParamKind) -> ParamSpec {
        ParamSpec { name, kind, required: false, fans_out: false }
    }

    pub const fn required(name: &'static str, kind: ParamKind) -> ParamSpec {
        ParamSpec { name, kind, required: true, fans_out: false }
    }

    pub const fn fanning_out(self) -> ParamSpec {
        ParamSpec { fans_out: true, ..self }
    }
}

/// What a recipe may say about one op.
#[derive(Debug, Clone, Copy)]
pub struct OpSpec {
    pub name: &'static str,
    /// Bumped when the op's logic changes what it produces; part of its key.
    pub version: u32,
    pub params: &'static [ParamSpec],
    /// `from` must name an `[input.NAME]` (true for `load` only).
    pub from_input_only: bool,
    /// Nothing can take this op's result as input (exports write files).
    pub is_sink: bool,
    /// `from` takes a list of several inputs (`assemble`); otherwise one.
    pub many_inputs: bool,
}

impl OpSpec {
    /// An op that takes one node's result and whose result others may take.
    pub const fn new(name: &'static str, version: u32, params: &'static [ParamSpec]) -> OpSpec {
        OpSpec { name, version, params, from_input_only: false, is_sink: false, many_inputs: false }
    }

    /// `from` names an `[input.NAME]`.
    pub const fn reading_an_input(self) -> OpSpec {
        OpSpec { from_input_only: true, ..self }
    }

    /// Nothing takes this op's result.
    pub const fn sink(self) -> OpSpec {
        OpSpec { is_sink: true, ..self }
    }

    /// `from` takes a list of inputs.
    pub const fn with_many_inputs(self) -> OpSpec {
        OpSpec { many_inputs: true, ..self }
    }

    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// One given value.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub value: ParamValue,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
    List(Vec<Param>),
    Table(Vec<(String, Param)>),
}

impl ParamValue {
    /// The value as it appears in a path template or a node's name.
    pub fn display(&self) -> String {
        match self {
            ParamValue::Str(s) => s.clone(),
            ParamValue::Bool(b) => b.to_string(),
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Float(f) => f.to_string(),
            ParamValue::List(_) => "[…]".into(),
            ParamValue::Table(_) => "{…}".into(),
        }
    }
}

/// The parameters of one node, after fan-out: every value is of its kind.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub entries: Vec<(String, Param)>,
    /// The step's span, for errors about a parameter that is missing.
    pub span: Span,
}

impl Params {
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }

    pub fn str(&self, name: &str) -> Option<(&str, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::Str(s), span }) => Some((s, span)),
            _ => None,
        }
    }

    pub fn int(&self, name: &str) -> Option<(i64, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::Int(n), span }) => Some((*n, span)),
            _ => None,
        }
    }

    /// A positive whole number that fits 32 bits, if given.
    pub fn positive(&self, name: &str) -> Result<Option<u32>, Vec<Diagnostic>> {
        match self.int(name) {
            None => Ok(None),
            Some((n, _)) => match u32::try_from(n) {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(vec![self.error(name, format!("`{name}` must be a positive whole number, not {n}"))]),
            },
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Param { value: ParamValue::Bool(true), .. }))
    }

    /// A list of strings with the span of each.
    pub fn str_list(&self, name: &str) -> Vec<(&str, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::List(items), .. }) => items
                .iter()
                .filter_map(|p| match &p.value {
                    ParamValue::Str(s) => Some((s.as_str(), &p.span)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A list of integers with the span of each.
    pub fn int_list(&self, name: &str) -> Vec<(i64, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::List(items), .. }) => items
                .iter()
                .filter_map(|p| match p.value {
                    ParamValue::Int(n) => Some((n, &p.span)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A table of strings, in the order written.
    pub fn str_map(&self, name: &str) -> Vec<(&str, &str, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::Table(entries), .. }) => entries
                .iter()
                .filter_map(|(k, p)| match &p.value {
                    ParamValue::Str(v) => Some((k.as_str(), v.as_str(), &p.span)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A list of tables; each as (field → string value, span of the table).
    pub fn table_list(&self, name: &str) -> Vec<(Vec<(&str, &str)>, &Span)> {
        match self.get(name) {
            Some(Param { value: ParamValue::List(items), .. }) => items
                .iter()
                .filter_map(|p| match &p.value {
                    ParamValue::Table(entries) => Some((
                        entries
                            .iter()
                            .filter_map(|(k, v)| match &v.value {
                                ParamValue::Str(s) => Some((k.as_str(), s.as_str())),
                                _ => None,
                            })
                            .collect(),
                        &p.span,
                    )),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A table of single values, in the order written.
    pub fn table(&self, name: &str) -> Vec<(&str, &Param)> {
        match self.get(name) {
            Some(Param { value: ParamValue::Table(entries), .. }) => {
                entries.iter().map(|(k, p)| (k.as_str(), p)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// An error about parameter `name` (at its value, or at the step).
    pub fn error(&self, name: &str, message: impl Into<String>) -> Diagnostic {
        let span = self.get(name).map_or(self.span.clone(), |p| p.span.clone());
        Diagnostic::new(message, span)
    }
}
