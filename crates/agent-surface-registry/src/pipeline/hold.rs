//! What the leader of a call's idempotency records and the call's phases share while the call
//! runs ([`Hold`]): whether the handler started or may have run, whether the lease was lost, and
//! the records to mark started before the handler runs. Admission (`idempotency.rs`) makes it,
//! the call's context (`call.rs`) carries it, the execute phase and the leader's guard read it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Phase};
use agent_surface_policy::idempotency::{IdempotencyKey, Lease};
use agent_surface_policy::{IdempotencyStore, StoreError};
use tokio_util::sync::CancellationToken;

use super::{Fault, Stop};

/// How long a caller is asked to wait after the idempotency store failed (nothing ran).
pub(super) const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the leader's call, its lease renewal and its guard share while the call runs.
#[derive(Debug)]
pub(crate) struct Hold {
    /// Set once the handler of a capability whose interruption is not harmless has started (from
    /// the start for a record taken over): a dropped call then records `EXECUTION_FAILED {reason:
    /// outcome-unknown}`, not `CANCELLED`.
    pub(crate) may_have_run: AtomicBool,
    /// Set once the handler has started, whatever its capability: a lease lost after that
    /// turns the caller's answer into an unknown outcome (the record is another caller's).
    pub(crate) started: AtomicBool,
    /// The record was taken over from a leader that lost its lease: an earlier execution may
    /// have taken effect.
    pub(crate) taken_over: bool,
    /// Fires when the lease was lost while the call ran (another caller took the record over):
    /// the handler must not start, and one that runs is stopped.
    pub(crate) lost: CancellationToken,
    /// The records whose leases lapse (a shared store's), to be marked started
    /// ([`IdempotencyStore::start`]) before the handler runs: one per record the call leads (its
    /// invocation id's, its natural key's). Until marked, a lapsed claim is known never to have
    /// run, and the next admission claims it afresh rather than answer an unknown outcome.
    marks: Mutex<Vec<StartMark>>,
    /// Whether `marks` holds a record not marked yet: set when one is added, cleared when they are
    /// taken, so that asking ([`Hold::needs_marks`], on every call that leads a record) takes no
    /// lock.
    awaits_marks: AtomicBool,
    /// Set when the records could not be marked started, or the call stopped waiting for the
    /// call it joined under its natural key: the handler did not run, and the records are
    /// released (never stored), so that a retry is admitted afresh.
    release: AtomicBool,
}

impl Hold {
    /// The hold of a call that leads a record; `taken_over` when the record was taken over from
    /// a leader that lost its lease.
    pub(super) fn new(taken_over: bool) -> Hold {
        Hold {
            // A record taken over may hold an execution that took effect: dropped at any point,
            // this call records an unknown outcome, never `CANCELLED`.
            may_have_run: AtomicBool::new(taken_over),
            started: AtomicBool::new(false),
            taken_over,
            lost: CancellationToken::new(),
            marks: Mutex::new(Vec::new()),
            awaits_marks: AtomicBool::new(false),
            release: AtomicBool::new(false),
        }
    }

    /// Whether the records are to be released rather than stored: they could not be marked
    /// started, so the handler did not run.
    pub(super) fn released(&self) -> bool {
        self.release.load(Ordering::Acquire)
    }

    /// Releases the records rather than store them, for a call whose handler never started and
    /// whose answer is not its own to keep: it followed another call under its natural key and
    /// stopped waiting, or its target changed while it waited (its registration gone, its
    /// capability disabled: the retry runs once the target is there again).
    pub(super) fn forgo(&self) {
        self.release.store(true, Ordering::Release);
    }

    /// Adds a record whose lease lapses, to be marked started before the handler runs.
    pub(super) fn add_mark(&self, mark: StartMark) {
        self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(mark);
        self.awaits_marks.store(true, Ordering::Release);
    }

    /// Marks every record the call leads as started, in the order they were admitted; `Err` with
    /// the call's answer when one could not be: the handler must not start. A lease lost first
    /// means another caller claimed the record (nothing ran under this call; a record taken
    /// over still answers its unknown outcome); a store that failed or did not answer within
    /// its budget means nothing ran, and the records are released.
    pub(crate) async fn mark_started(&self) -> Result<(), Stop> {
        let marks = {
            let mut marks = self.marks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.awaits_marks.store(false, Ordering::Release);
            std::mem::take(&mut *marks)
        };
        for mark in marks {
            let now = mark.clock.now();
            let started = mark.store.start(&mark.key, mark.lease, now);
            let started = agent_surface_policy::guard::within(mark.clock.as_ref(), mark.budget, started).await;
            let started = started.unwrap_or_else(|| {
                Err(StoreError::Unavailable(format!(
                    "the idempotency store did not answer within {} ms",
                    mark.budget.as_millis()
                )))
            });
            match started {
                Ok(()) => {}
                Err(StoreError::LeaseLost) if self.taken_over => {
                    return Err(Stop::noted(
                        AgentSurfaceError::outcome_unknown(),
                        Phase::Admission,
                        "the lease on a record taken over was lost before the handler started",
                    ));
                }
                Err(StoreError::LeaseLost) => {
                    tracing::warn!(
                        target: "agent_surface::invoke",
                        token = mark.lease.token,
                        "the lease on this call's idempotency record lapsed before its handler started; nothing ran"
                    );
                    self.release.store(true, Ordering::Release);
                    return Err(Stop::noted(
                        AgentSurfaceError::transient(STORE_RETRY_AFTER),
                        Phase::Admission,
                        "the lease lapsed before the handler started",
                    ));
                }
                Err(e) => {
                    self.release.store(true, Ordering::Release);
                    return Err(Stop::noted(
                        AgentSurfaceError::transient(STORE_RETRY_AFTER),
                        Phase::Admission,
                        format!("could not mark the idempotency record started: {e}"),
                    )
                    .store_fault(Fault::IdempotencyStore));
                }
            }
        }
        Ok(())
    }

    /// Whether a record awaits its mark (a shared store's lease, not marked yet).
    pub(crate) fn needs_marks(&self) -> bool {
        self.awaits_marks.load(Ordering::Acquire)
    }
}

/// What [`IdempotencyStore::start`] needs for one record the call leads.
pub(super) struct StartMark {
    /// The store that keeps the record.
    pub(super) store: Arc<dyn IdempotencyStore>,
    /// The record's key.
    pub(super) key: IdempotencyKey,
    /// The lease the call holds on it.
    pub(super) lease: Lease,
    /// How long the store may take to answer.
    pub(super) budget: Duration,
    /// The registry's clock.
    pub(super) clock: Arc<dyn agent_surface_policy::Clock>,
}

impl std::fmt::Debug for StartMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartMark").field("key", &self.key).field("lease", &self.lease).finish_non_exhaustive()
    }
}
