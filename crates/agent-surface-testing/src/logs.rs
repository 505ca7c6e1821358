//! Capturing the operator channel (`tracing`) of the code a test runs.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::Once;

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

thread_local! {
    static CAPTURE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    /// The least severe level the running capture keeps.
    static LEVEL: Cell<Level> = const { Cell::new(Level::TRACE) };
}

/// Writes into the current thread's capture buffer, if a capture is running on this thread.
struct ThreadWriter;

/// A [`ThreadWriter`] for what the running capture keeps, a sink for the rest.
struct ThreadWriters;

impl<'w> MakeWriter<'w> for ThreadWriters {
    type Writer = Box<dyn Write>;

    fn make_writer(&'w self) -> Self::Writer {
        Box::new(ThreadWriter)
    }

    fn make_writer_for(&'w self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        if *meta.level() <= LEVEL.with(Cell::get) { Box::new(ThreadWriter) } else { Box::new(std::io::sink()) }
    }
}

impl Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(v) = c.borrow_mut().as_mut() {
                v.extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static INSTALL: Once = Once::new();

/// Runs `f` and returns what it wrote to the operator channel (every `tracing` span and event
/// on this thread, at every level, formatted without colours).
///
/// Installs, once per test binary, a global subscriber that routes output to per-thread
/// buffers. (A subscriber set per test with `tracing::subscriber::with_default` is unreliable
/// when tests run in parallel: a callsite first hit on another thread can be cached as
/// disabled.) If the binary already has a global subscriber, nothing is captured. Run async code
/// on a current-thread runtime inside `f` so that it stays on this thread.
///
/// ```
/// let ((), log) = agent_surface_testing::capture_operator_log(|| tracing::info!(cause = "db down", "failed"));
/// assert!(log.contains("db down"));
/// ```
pub fn capture_operator_log<R>(f: impl FnOnce() -> R) -> (R, String) {
    capture_operator_log_at(Level::TRACE, f)
}

/// [`capture_operator_log`], keeping only the events at `level` or more severe: what an
/// operator whose filter is `level` reads (`Level::WARN`: the operator log's default).
///
/// ```
/// use tracing::Level;
///
/// let ((), log) = agent_surface_testing::capture_operator_log_at(Level::WARN, || {
///     tracing::info!("routine");
///     tracing::warn!("worth a look");
/// });
/// assert!(log.contains("worth a look") && !log.contains("routine"));
/// ```
pub fn capture_operator_log_at<R>(level: Level, f: impl FnOnce() -> R) -> (R, String) {
    INSTALL.call_once(|| {
        let subscriber =
            tracing_subscriber::fmt().with_max_level(Level::TRACE).with_writer(ThreadWriters).with_ansi(false).finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let outer = LEVEL.with(|l| l.replace(level));
    let result = f();
    LEVEL.with(|l| l.set(outer));
    let bytes = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (result, String::from_utf8_lossy(&bytes).into_owned())
}
