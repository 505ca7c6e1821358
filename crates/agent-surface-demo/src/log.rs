//! The operator log: `tracing` events filtered by `RUST_LOG` (default `warn`), written as text or
//! as JSON lines (`AGENT_SURFACE_LOG_FORMAT=json`).
//!
//! `serve` and the scripted session write it to stderr, never to stdout, which belongs to the MCP
//! stdio transport; `call` writes it to the file named by `AGENT_SURFACE_DEMO_OPERATOR_LOG` (its
//! stderr carries the agent-facing error). Each event is written whole when it happens, so nothing
//! is left to flush when the process ends. See `docs/operations.md`, "Logs".

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// The filter when `RUST_LOG` is unset, empty or invalid: warnings and errors only.
pub(crate) const DEFAULT_FILTER: &str = "warn";

/// The target of the registry's `invoke` span and of each call's operator event.
const INVOKE_TARGET: &str = "agent_surface::invoke";

/// The variable that chooses the format: `text` (the default) or `json`.
pub(crate) const FORMAT_VAR: &str = "AGENT_SURFACE_LOG_FORMAT";

/// How each event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the event's, with
    /// `message`), `span` (the innermost span's fields and `name`) and `spans` (all of them).
    Json,
}

/// What the environment asked for, and what was wrong with it.
#[derive(Debug)]
struct Settings {
    filter: EnvFilter,
    format: Format,
    /// Warnings about a setting that was not understood (and replaced by its default).
    problems: Vec<String>,
}

/// Reads `RUST_LOG` and [`FORMAT_VAR`] (as given: `None` when unset).
fn settings(rust_log: Option<&str>, format: Option<&str>) -> Settings {
    let mut problems = Vec::new();
    let filter = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => EnvFilter::new(DEFAULT_FILTER),
        Some(directives) => EnvFilter::builder().parse(directives).unwrap_or_else(|e| {
            problems.push(format!("RUST_LOG is not a valid filter ({e}); logging at `{DEFAULT_FILTER}`"));
            EnvFilter::new(DEFAULT_FILTER)
        }),
    };
    let format = match format.map(|f| f.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "text") => Format::Text,
        Some("json") => Format::Json,
        Some(other) => {
            problems.push(format!("{FORMAT_VAR}={other} is neither `text` nor `json`; logging text"));
            Format::Text
        }
    };
    Settings { filter, format, problems }
}

/// Installs the operator log, writing to `writer`, as the environment asks; a setting it cannot
/// use is replaced by its default and reported once, as a warning in the log itself (so that a
/// JSON log stays all JSON). Also routes panics to the log. A second call does nothing.
pub(crate) fn init<W>(writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let rust_log = std::env::var("RUST_LOG").ok();
    let format = std::env::var(FORMAT_VAR).ok();
    let Settings { filter, format, problems } = settings(rust_log.as_deref(), format.as_deref());
    // The `invoke` span (an INFO span) carries the call's correlation id, capability and consumer:
    // a filter that drops it would leave a WARN or ERROR event without them. So it is kept
    // whatever the filter says; only events are filtered.
    let filter = filter.or(filter_fn(|meta| meta.is_span() && meta.target() == INVOKE_TARGET));
    let layer = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(false);
    let installed = match format {
        Format::Text => tracing_subscriber::registry().with(layer.with_filter(filter)).try_init(),
        Format::Json => tracing_subscriber::registry().with(layer.json().with_filter(filter)).try_init(),
    };
    if installed.is_err() {
        return;
    }
    for problem in problems {
        tracing::warn!(target: "agent_surface::demo", "{problem}");
    }
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(target: "agent_surface::demo", "panic: {info}");
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(rust_log: Option<&str>, format: Option<&str>, filter: &str, expected: Format, problems: usize) {
        let s = settings(rust_log, format);
        assert_eq!(s.filter.to_string(), filter);
        assert_eq!(s.format, expected);
        assert_eq!(s.problems.len(), problems, "{:?}", s.problems);
    }

    #[test]
    fn the_environment_chooses_filter_and_format_with_defaults_for_what_it_gets_wrong() {
        check(None, None, "warn", Format::Text, 0);
        check(Some(""), Some(""), "warn", Format::Text, 0);
        check(Some("agent_surface=debug"), Some("json"), "agent_surface=debug", Format::Json, 0);
        check(
            Some("info,agent_surface::invoke=debug"),
            Some("TEXT"),
            "agent_surface::invoke=debug,info",
            Format::Text,
            0,
        );
        check(Some("agent_surface=loud"), None, "warn", Format::Text, 1);
        check(Some("[{"), Some("yaml"), "warn", Format::Text, 2);
    }
}
