//! `quantforge completions SHELL`: a shell completion script.

use std::io::{self, Write};

use clap::CommandFactory;

use super::Cli;

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh.
    shell: clap_complete::Shell,
}

pub(super) fn run(args: CompletionsArgs) -> anyhow::Result<()> {
    let CompletionsArgs { shell } = args;
    // Made whole first: the generator panics on a write error (`| head` closing the pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "quantforge", &mut script);
    io::stdout().lock().write_all(&script)?;
    Ok(())
}
