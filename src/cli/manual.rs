//! `quantforge man`: the manual pages, one per command as the main page's
//! SUBCOMMANDS section lists them (`quantforge-run(1)`, …), printed one at a
//! time or written all to a directory.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::Cli;
use crate::files::{Replaces, WriteGuard};
use crate::formats::AtomicOutput;

#[derive(Debug, clap::Args)]
pub(super) struct ManArgs {
    /// The command whose page to print (`cache gc`); none: the main page.
    command: Vec<String>,
    /// Write every page (quantforge.1, quantforge-run.1, …) into DIR instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    dir: Option<PathBuf>,
}

/// What a page a run replaces must be: another manual page.
const PAGE: Replaces = Replaces::FileStarting { prefix: b".ie", what: "a manual page" };

pub(super) fn run(args: ManArgs) -> anyhow::Result<()> {
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let Some(dir) = args.dir else {
        let mut command = &root;
        for name in &args.command {
            command = command.find_subcommand(name).ok_or_else(|| {
                let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
                anyhow::anyhow!("no command `{name}` (one of {})", names.join(", "))
            })?;
        }
        // Made whole first: a closed pipe then fails one write, cleanly.
        let page = render(command)?;
        return Ok(io::stdout().lock().write_all(&page)?);
    };
    let guard = WriteGuard::default();
    let mut written = 0;
    for command in every_command(&root) {
        let path = dir.join(clap_mangen::Man::new(command.clone()).get_filename());
        write_page(&guard, &path, &render(command)?)?;
        written += 1;
    }
    say!("wrote {written} manual pages to {}", dir.display());
    Ok(())
}

fn render(command: &clap::Command) -> io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    Ok(page)
}

/// The command and every command under it, as the pages list them.
fn every_command(command: &clap::Command) -> Vec<&clap::Command> {
    let mut all = vec![command];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        all.extend(every_command(sub));
    }
    all
}

fn write_page(guard: &WriteGuard, path: &Path, page: &[u8]) -> anyhow::Result<()> {
    let checked = guard.check(path, PAGE).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.problem))?;
    let mut out = AtomicOutput::create(&checked)?;
    out.writer().write_all(page)?;
    out.commit()?;
    Ok(())
}
