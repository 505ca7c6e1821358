//! [`FlakyAuditSink`]: an audit sink that fails while told to, for strict-audit tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agent_surface_policy::{AuditError, AuditEvent, AuditSink, MemoryAuditSink};
use futures_util::future::BoxFuture;

/// A [`MemoryAuditSink`] that refuses every record while [`set_failing`](Self::set_failing) is
/// on, counting the refusals.
///
/// ```
/// use agent_surface_testing::FlakyAuditSink;
/// let sink = FlakyAuditSink::default();
/// sink.set_failing(true);
/// assert!(sink.events().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct FlakyAuditSink {
    inner: MemoryAuditSink,
    failing: AtomicBool,
    refused: AtomicUsize,
}

impl FlakyAuditSink {
    /// Refuse (`true`) or keep (`false`) the records from now on.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// How many records were refused.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// The events kept, oldest first.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.inner.events()
    }

    /// The wire names of the events kept, oldest first.
    pub fn names(&self) -> Vec<&'static str> {
        self.inner.names()
    }
}

impl AuditSink for FlakyAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        if self.failing.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Box::pin(std::future::ready(Err(AuditError::new("the test disk is full"))));
        }
        self.inner.record(event)
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        self.inner.recent(limit)
    }
}
