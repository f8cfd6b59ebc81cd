//! `quantforge schema [NAME]`: the JSON Schema of a `--json` document, or
//! the list of them.

use std::io::{self, Write};

use super::json;

#[derive(Debug, clap::Args)]
pub(super) struct SchemaArgs {
    /// The document's name (`quantforge schema` lists them).
    name: Option<String>,
}

/// `quantforge schema [NAME]`.
pub(super) fn run(args: SchemaArgs) -> anyhow::Result<()> {
    let name = args.name.as_deref();
    let schemas = json::schemas();
    let mut out = io::stdout().lock();
    match name {
        None => {
            for (name, commands, _) in &schemas {
                writeln!(out, "{name:20}  {commands}")?;
            }
        }
        Some(name) => {
            let Some((_, _, schema)) = schemas.iter().find(|(n, _, _)| *n == name) else {
                let names = schemas.iter().map(|(n, _, _)| *n);
                let hint = crate::params::nearest(name, names.clone()).map(|n| format!("; did you mean `{n}`?"));
                anyhow::bail!(
                    "no schema `{name}`{}",
                    hint.unwrap_or_else(|| format!(" (one of {})", names.collect::<Vec<_>>().join(", ")))
                );
            };
            serde_json::to_writer_pretty(&mut out, schema)?;
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}
