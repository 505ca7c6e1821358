//! The expiry sweep on a timer: [`ConfirmationEngine::run_sweeps`] calls
//! [`ConfirmationEngine::sweep_expiring`] every [`ConfirmationConfig::sweep_interval`](crate::ConfirmationConfig::sweep_interval) on the
//! engine's clock until told to stop, so that expiry warnings (and whatever else the sweep records)
//! are written without anyone looking at a confirmation.

use std::future::Future;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use super::engine::{Backlog, ConfirmationEngine};
use crate::audit::AuditEvent;

/// The most pending confirmations one round of [`ConfirmationEngine::run_sweeps`] looks through.
pub const SWEEP_LIMIT: usize = 1000;

/// How many sweeps try to write a claimed `confirmation.expired` event the audit sink refused
/// before the engine gives it up (logged at `ERROR`): an hour of rounds at the default interval,
/// the default retention of an expired record.
pub const EXPIRY_WRITE_ATTEMPTS: u32 = 60;

/// How long an engine's claim on recording a confirmation's expiry holds
/// ([`ConfirmationStore::claim_expiry`](crate::ConfirmationStore::claim_expiry)) before another
/// engine may claim it again: an engine that stopped between its claim and its write (killed, its
/// sweep dropped) leaves the expiry to the next sweep of another engine after this long. Five
/// sweeps at the default interval; an engine whose sink refuses longer than this may see the
/// event written by another engine too (at least once, possibly twice; never none).
pub const EXPIRY_CLAIM_LEASE: Duration = Duration::from_secs(300);

/// The most claimed but unwritten `confirmation.expired` events an engine keeps for its next
/// sweeps; past it the oldest is given up (logged at `ERROR`).
pub const MAX_UNWRITTEN_EXPIRIES: usize = 1000;

/// A claimed (or being claimed) expiry's event not known to be written: dropped without
/// [`written`](Self::written) — its write failed, or the sweep was dropped mid-way —, it goes to
/// the engine's backlog for the next sweep.
pub(super) struct PendingExpiry<'a> {
    engine: &'a ConfirmationEngine,
    event: Option<AuditEvent>,
    failed: u32,
}

impl<'a> PendingExpiry<'a> {
    /// `event`, whose writes failed `failed` times so far.
    pub(super) fn new(engine: &'a ConfirmationEngine, event: AuditEvent, failed: u32) -> PendingExpiry<'a> {
        PendingExpiry { engine, event: Some(event), failed }
    }

    /// The event.
    pub(super) fn event(&self) -> &AuditEvent {
        self.event.as_ref().expect("taken only by written or drop")
    }

    /// The event is written (or need not be): nothing to keep.
    pub(super) fn written(mut self) {
        self.event = None;
    }
}

impl Drop for PendingExpiry<'_> {
    fn drop(&mut self) {
        let Some(event) = self.event.take() else { return };
        let failed = self.failed + 1;
        let id = event.confirmation_id.clone().unwrap_or_default();
        if failed >= EXPIRY_WRITE_ATTEMPTS {
            tracing::error!(
                target: "agent_surface::audit",
                confirmation_id = %id,
                attempts = failed,
                "confirmation.expired event given up: the audit sink refused it every time"
            );
            return;
        }
        let mut backlog = self.engine.backlog();
        if backlog.len() >= MAX_UNWRITTEN_EXPIRIES
            && let Some((oldest, _)) = backlog.pop_front()
        {
            tracing::error!(
                target: "agent_surface::audit",
                confirmation_id = oldest.confirmation_id.as_deref().unwrap_or(""),
                "confirmation.expired event given up: too many unwritten"
            );
        }
        backlog.push_back((event, failed));
        tracing::error!(
            target: "agent_surface::audit",
            confirmation_id = %id,
            "confirmation.expired event not written; kept for the next sweep"
        );
    }
}

/// What [`ConfirmationEngine::run_sweeps`] did before it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepStats {
    /// How many sweeps ran (failed ones included).
    pub rounds: u64,
    /// How many confirmations the sweeps warned about ([`ConfirmationEngine::sweep_expiring`]'s answers, summed).
    pub warned: u64,
    /// How many sweeps failed (the store did not answer; logged, and the next round tries again).
    pub failed: u64,
}

impl ConfirmationEngine {
    pub(super) fn backlog(&self) -> MutexGuard<'_, Backlog> {
        self.unwritten.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the backlog's events, oldest first, until the sink refuses one (which goes back to
    /// the backlog); how many it wrote, and whether the sink took them all.
    pub(super) async fn write_backlog(&self) -> (usize, bool) {
        let mut written = 0;
        loop {
            let Some((event, failed)) = self.backlog().pop_front() else { return (written, true) };
            let pending = PendingExpiry::new(self, event, failed);
            if !self.write_audit(pending.event()).await {
                return (written, false);
            }
            pending.written();
            written += 1;
        }
    }

    /// Sweeps every [`ConfirmationConfig::sweep_interval`](crate::ConfirmationConfig::sweep_interval) (measured on the engine's clock, the
    /// first round one interval from now) until `stop` completes, and returns what it did; with
    /// no interval configured it waits for `stop` alone. Each round is
    /// [`sweep_expiring`](ConfirmationEngine::sweep_expiring) over up to [`SWEEP_LIMIT`] pending
    /// confirmations; a failed round is logged (`WARN`, target `agent_surface::confirmation`) and
    /// the next one tries again. A round in progress when `stop` completes is dropped at once
    /// (a round makes up to [`SWEEP_LIMIT`] claims and audit writes, each bounded by the store
    /// budget, so finishing it could take long with a hanging store or sink): an expiry it claimed
    /// but had not written is kept in the engine's backlog, written by a later sweep of the same
    /// engine if there is one, and the ids still unwritten when it stops are logged at `ERROR`.
    ///
    /// The library's `serve` helpers (the HTTP binding's and the MCP transport's) run it for
    /// their registry's engine while they serve; a host that serves otherwise spawns it with its
    /// shutdown signal:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let sweeps = tokio::spawn({
    ///     let engine = engine.clone();
    ///     async move { engine.run_sweeps(async { let _ = stopped.await; }).await }
    /// });
    /// // … serve; on shutdown:
    /// let _ = stop.send(());
    /// let stats = sweeps.await.unwrap();
    /// assert_eq!(stats.rounds, 0, "stopped before the first interval passed");
    /// # }
    /// ```
    pub async fn run_sweeps(&self, stop: impl Future<Output = ()>) -> SweepStats {
        let mut stats = SweepStats::default();
        let mut stop = std::pin::pin!(stop);
        let Some(every) = self.config.sweep_interval.filter(|d| !d.is_zero()) else {
            stop.await;
            return stats;
        };
        loop {
            let tick = self.config.clock.sleep(every);
            tokio::select! {
                biased;
                () = &mut stop => {
                    self.report_unwritten();
                    return stats;
                }
                () = tick => {}
            }
            stats.rounds += 1;
            let answer = tokio::select! {
                biased;
                () = &mut stop => {
                    self.report_unwritten();
                    return stats;
                }
                answer = self.sweep_expiring(SWEEP_LIMIT) => answer,
            };
            match answer {
                Ok(warned) => stats.warned += warned as u64,
                Err(e) => {
                    stats.failed += 1;
                    tracing::warn!(target: "agent_surface::confirmation", error = %crate::redacted(&e), "expiry sweep failed");
                }
            }
        }
    }

    /// Logs the claimed expiries whose events are still unwritten (at `ERROR`), for an operator
    /// to reconcile: this engine's sweep is stopping.
    fn report_unwritten(&self) {
        let backlog = self.backlog();
        if backlog.is_empty() {
            return;
        }
        let ids: Vec<&str> = backlog.iter().filter_map(|(e, _)| e.confirmation_id.as_deref()).collect();
        tracing::error!(
            target: "agent_surface::audit",
            count = ids.len(),
            confirmation_ids = %ids.join(","),
            "expiry sweep stopped with confirmation.expired events unwritten"
        );
    }
}
