//! `quantforge graph`: a recipe's DAG as Graphviz DOT or a Mermaid flowchart.

use std::io::{self, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(super) struct GraphArgs {
    /// The recipe (TOML) whose DAG to print.
    recipe: PathBuf,
    /// dot (Graphviz) or mermaid.
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    format: GraphFormat,
}

pub(super) fn run(args: GraphArgs) -> anyhow::Result<()> {
    let GraphArgs { recipe, format } = args;
    let recipe = crate::recipe::Recipe::load(&recipe)?;
    let text = match format {
        GraphFormat::Dot => crate::recipe::graph::dot(&recipe),
        GraphFormat::Mermaid => crate::recipe::graph::mermaid(&recipe),
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum GraphFormat {
    Dot,
    Mermaid,
}
