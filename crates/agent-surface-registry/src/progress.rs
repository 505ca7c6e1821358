//! Progress of a running call: what a handler reports through [`Ctx::progress`](crate::Ctx::progress)
//! and where it goes ([`ProgressSink`], set per call in [`InvokeOptions`](crate::InvokeOptions)).
//!
//! The pipeline hands every report to the caller's sink while the handler runs, in order, and
//! drops the ones that break the rules every transport needs: a report whose `done` does not grow,
//! a value that is not a finite non-negative number, a report after the call ended. Where the
//! reports go is the adapter's business: MCP sends `notifications/progress` when the request
//! carried a progress token, the embedded toolset calls a callback, the HTTP binding streams them as
//! Server-Sent Events to a client that accepts `text/event-stream` (and drops them for one that
//! wants one JSON answer).

use std::fmt;
use std::sync::Arc;

/// The longest progress message, in characters; a longer one is cut at a character boundary.
pub const MAX_PROGRESS_MESSAGE_CHARS: usize = 300;

/// One progress report: how much is done, of how much, and what is happening now.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Progress {
    /// The work done so far; grows with every report of one call.
    pub done: f64,
    /// The whole work, when known.
    pub total: Option<f64>,
    /// A short description of the current step, from the handler (at most
    /// [`MAX_PROGRESS_MESSAGE_CHARS`] characters, control characters removed).
    pub message: Option<String>,
}

impl Progress {
    /// A report of `done` units of work, total unknown, no message.
    pub fn new(done: f64) -> Progress {
        Progress { done, total: None, message: None }
    }

    /// The same report out of `total`.
    pub fn of(mut self, total: f64) -> Progress {
        self.total = Some(total);
        self
    }

    /// The same report with a message (cleaned and bounded when it is reported).
    pub fn with_message(mut self, message: impl Into<String>) -> Progress {
        self.message = Some(message.into());
        self
    }

    /// Whether the numbers are usable: finite, non-negative, and `done` not past a known total.
    pub(crate) fn is_valid(&self) -> bool {
        let number = |n: f64| n.is_finite() && n >= 0.0;
        number(self.done) && self.total.is_none_or(|t| number(t) && self.done <= t)
    }

    /// The message without control characters, cut to [`MAX_PROGRESS_MESSAGE_CHARS`].
    pub(crate) fn clean(mut self) -> Progress {
        self.message = self
            .message
            .map(|m| m.chars().filter(|c| !c.is_control()).take(MAX_PROGRESS_MESSAGE_CHARS).collect::<String>());
        self
    }
}

/// Where the progress reports of one call go (an adapter's way of passing them to the caller).
///
/// `report` is called on the handler's task, in order; it should not block (queue or send and
/// return).
pub trait ProgressSink: Send + Sync + 'static {
    /// Passes one report on.
    fn report(&self, progress: Progress);
}

impl<S: ProgressSink + ?Sized> ProgressSink for Arc<S> {
    fn report(&self, progress: Progress) {
        (**self).report(progress);
    }
}

/// A [`ProgressSink`] from a closure.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use agent_surface_registry::{FnProgress, Progress, ProgressSink};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = FnProgress::new({
///     let seen = seen.clone();
///     move |p: Progress| seen.lock().unwrap().push(p.done)
/// });
/// sink.report(Progress::new(1.0).of(3.0));
/// assert_eq!(*seen.lock().unwrap(), vec![1.0]);
/// ```
pub struct FnProgress<F>(F);

impl<F: Fn(Progress) + Send + Sync + 'static> FnProgress<F> {
    /// A sink that calls `f` with each report.
    pub fn new(f: F) -> FnProgress<F> {
        FnProgress(f)
    }
}

impl<F: Fn(Progress) + Send + Sync + 'static> ProgressSink for FnProgress<F> {
    fn report(&self, progress: Progress) {
        (self.0)(progress);
    }
}

impl<F> fmt::Debug for FnProgress<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnProgress").finish_non_exhaustive()
    }
}
