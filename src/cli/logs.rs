//! How log lines look on stderr: `warning: …`, `info: …`, as the rest of
//! quantforge's messages, with no timestamps or module paths.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

pub(super) struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        // Messages quote paths and remote answers: no control characters reach the terminal.
        let mut line = String::new();
        ctx.field_format().format_fields(Writer::new(&mut line), event)?;
        writeln!(writer, "{level}: {}", crate::text::for_terminal(&line))
    }
}
