//! The operator log (feature `operator-log`): one call in `main` installs a `tracing`
//! subscriber filtered by `RUST_LOG` (default `warn`), writing text or JSON lines
//! (`AGENT_SURFACE_LOG_FORMAT=json`), with the `invoke` span kept whatever the filter, and panics
//! routed to it, redacted.
//!
//! Each event is written whole when it happens (no buffer, so no guard to hold and nothing to
//! flush when the process ends). What the events say is in `docs/operations.md`, "Logs"; the
//! causes they carry pass through the process-wide redactor ([`agent_surface_policy::redact`]),
//! which the application may replace with [`agent_surface_policy::install_redactor`] before
//! calling [`init`].

use std::fmt;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// The filter when `RUST_LOG` is unset, empty or invalid: warnings and errors only.
pub const DEFAULT_FILTER: &str = "warn";

/// The variable that chooses the format: `text` (the default) or `json`.
pub const FORMAT_VAR: &str = "AGENT_SURFACE_LOG_FORMAT";

/// The target of the registry's `invoke` span and of each call's operator event.
const INVOKE_TARGET: &str = "agent_surface::invoke";

/// The target of the panics the hook reports.
pub const PANIC_TARGET: &str = "agent_surface::panic";

/// The target of the log's own warnings about its settings.
const LOG_TARGET: &str = "agent_surface::log";

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

/// The process already had a global `tracing` subscriber: the operator log was not installed
/// (and the panic hook left as it was).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlreadyInstalled;

impl fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a global tracing subscriber is already installed")
    }
}

impl std::error::Error for AlreadyInstalled {}

/// Installs the operator log on stderr; see [`init_with_writer`].
///
/// ```
/// // In `main`, before serving:
/// agent_surface_registry::operator_log::init().expect("the first subscriber of this process");
/// // A second subscriber is refused.
/// assert!(agent_surface_registry::operator_log::init().is_err());
/// ```
///
/// # Errors
///
/// When the process already has a global `tracing` subscriber.
pub fn init() -> Result<(), AlreadyInstalled> {
    init_with_writer(std::io::stderr)
}

/// Installs the operator log, writing to `writer` (stderr: `std::io::stderr`; a file:
/// `std::sync::Mutex::new(file)`), as the environment asks:
///
/// - `RUST_LOG`, an `EnvFilter` (default [`DEFAULT_FILTER`]); the registry's `invoke` span (an
///   `INFO` span that carries the correlation id) is kept whatever the filter, so a `WARN` event
///   still has its correlation id;
/// - [`FORMAT_VAR`]: `text` (the default) or `json` (one object per line).
///
/// A setting it cannot use is replaced by its default and reported once, as a warning in the log
/// itself (target `agent_surface::log`, so that a JSON log stays all JSON). It also routes panics to the log: an `ERROR` with
/// target [`PANIC_TARGET`] whose text is redacted, instead of the default hook's stderr line.
///
/// # Errors
///
/// When the process already has a global `tracing` subscriber; then nothing is changed.
pub fn init_with_writer<W>(writer: W) -> Result<(), AlreadyInstalled>
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
    installed.map_err(|_| AlreadyInstalled)?;
    for problem in problems {
        tracing::warn!(target: LOG_TARGET, "{problem}");
    }
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(target: PANIC_TARGET, "panic: {}", agent_surface_policy::redacted(info));
    }));
    Ok(())
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
