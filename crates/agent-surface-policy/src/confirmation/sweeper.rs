//! The expiry sweep on a timer: [`ConfirmationEngine::run_sweeps`] calls
//! [`ConfirmationEngine::sweep_expiring`] every [`ConfirmationConfig::sweep_interval`](crate::ConfirmationConfig::sweep_interval) on the
//! engine's clock until told to stop, so that expiry warnings (and whatever else the sweep records)
//! are written without anyone looking at a confirmation.

use std::future::Future;
use std::time::Duration;

use super::ConfirmationEngine;

/// The default [`ConfirmationConfig::sweep_interval`](crate::ConfirmationConfig::sweep_interval): a minute.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// The most pending confirmations one round of [`ConfirmationEngine::run_sweeps`] looks through.
pub const SWEEP_LIMIT: usize = 1000;

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
    /// Sweeps every [`ConfirmationConfig::sweep_interval`](crate::ConfirmationConfig::sweep_interval) (measured on the engine's clock, the
    /// first round one interval from now) until `stop` completes, and returns what it did; with
    /// no interval configured it waits for `stop` alone. Each round is
    /// [`sweep_expiring`](ConfirmationEngine::sweep_expiring) over up to [`SWEEP_LIMIT`] pending
    /// confirmations; a failed round is logged (`WARN`, target `agent_surface::confirmation`) and
    /// the next one tries again. A round in progress when `stop` completes is finished first
    /// (it is bounded by the store budget).
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
                () = &mut stop => return stats,
                () = tick => {}
            }
            stats.rounds += 1;
            match self.sweep_expiring(SWEEP_LIMIT).await {
                Ok(warned) => stats.warned += warned as u64,
                Err(e) => {
                    stats.failed += 1;
                    tracing::warn!(target: "agent_surface::confirmation", error = %e, "expiry sweep failed");
                }
            }
        }
    }
}
