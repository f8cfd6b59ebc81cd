//! A recipe's DAG as text other tools draw: Graphviz DOT and Mermaid.
//! Inputs are ellipses, steps boxes labelled with their op, exports
//! parallelograms; an input a step names by parameter (`imatrix = "…"`) is
//! a dashed edge.

use std::fmt::Write;

use super::{Recipe, Source};
use crate::ops::Op;

/// The DAG in Graphviz's DOT.
pub fn dot(recipe: &Recipe) -> String {
    let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n", dot_escape(&recipe.name));
    for (i, input) in recipe.inputs.iter().enumerate() {
        let _ = writeln!(out, "  i{i} [shape=ellipse, label=\"{}\"];", dot_escape(&input.name));
    }
    for (i, node) in recipe.nodes.iter().enumerate() {
        let shape = if matches!(node.op, Op::Export(_)) { "parallelogram" } else { "box" };
        let label = format!("{}\\n{}", dot_escape(&node.id), node.op.name());
        let _ = writeln!(out, "  n{i} [shape={shape}, label=\"{label}\"];");
    }
    for (i, node) in recipe.nodes.iter().enumerate() {
        for source in &node.from {
            let _ = writeln!(out, "  {} -> n{i};", source_id(source));
        }
        for input in &node.uses {
            let _ = writeln!(out, "  i{input} -> n{i} [style=dashed];");
        }
    }
    out.push_str("}\n");
    out
}

/// The DAG as a Mermaid flowchart.
pub fn mermaid(recipe: &Recipe) -> String {
    let mut out = String::from("flowchart LR\n");
    for (i, input) in recipe.inputs.iter().enumerate() {
        let _ = writeln!(out, "  i{i}([\"{}\"])", mermaid_escape(&input.name));
    }
    for (i, node) in recipe.nodes.iter().enumerate() {
        let label = format!("{}<br>{}", mermaid_escape(&node.id), node.op.name());
        let _ = match node.op {
            Op::Export(_) => writeln!(out, "  n{i}[/\"{label}\"/]"),
            _ => writeln!(out, "  n{i}[\"{label}\"]"),
        };
    }
    for (i, node) in recipe.nodes.iter().enumerate() {
        for source in &node.from {
            let _ = writeln!(out, "  {} --> n{i}", source_id(source));
        }
        for input in &node.uses {
            let _ = writeln!(out, "  i{input} -.-> n{i}");
        }
    }
    out
}

fn source_id(source: &Source) -> String {
    match source {
        Source::Input(j) => format!("i{j}"),
        Source::Node(j) => format!("n{j}"),
    }
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Mermaid reads entity codes inside quoted labels; `<` would start markup.
fn mermaid_escape(text: &str) -> String {
    text.replace('&', "#amp;").replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}
