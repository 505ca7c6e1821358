//! Phase 1 — admission and idempotency, with the settlement of the record at the end of the call.
//!
//! Input: the request and the consumer. Decision: run the call (untracked, or as the leader of
//! its `(consumerKey, invocationId)`), answer it from the store (replay, or join the identical
//! call in flight), or stop it. Codes: `CANCELLED` (disposed registry, cancelled caller),
//! `INVOCATION_CONFLICT` (same key, different request), `EXECUTION_FAILED {reason:
//! store-unavailable, transient}` (the store failed: sent again under the same id).
//!
//! The leader of a recorded call holds a [`LeaderGuard`] until the call ends; the pipeline
//! settles the record with it after phase 10 (stored for the window, or released), and dropping
//! it unsettled records `CANCELLED` or an unknown outcome. Admission and settlement live here
//! together, so that the record's whole life reads in one place.
//!
//! An admission the store did not answer (within the store budget, or at all) is answered
//! `EXECUTION_FAILED {reason: store-unavailable}` — nothing ran — and its [`Attempt`] is cancelled in the
//! background ([`Unanswered`]), so that a claim the store makes afterwards (a stalled Redis that
//! resumes) cannot make the retry wait out a lease and learn an unknown outcome.
//!
//! A follower on a shared store whose leader lost its lease admits the request once more
//! ([`reclaim`]): the record is taken over and settled as any takeover is, rather than left in
//! flight, with nobody to settle it, until it expires.
//!
//! A leader that learns it lost its lease (renewal finds the record taken over, or settlement is
//! refused with `LeaseLost`) does not answer its caller with a result the record contradicts: its
//! handler is stopped (its context's cancellation fires) and, once the handler had started, the
//! caller gets `EXECUTION_FAILED {reason: outcome-unknown}`, what the record says.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use agent_surface_core::digest::PartsDigest;
use agent_surface_core::json::write_canonical;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Phase, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use sha2::{Digest, Sha256};

use futures_util::future::Either;
use serde_json::Value;

use super::hold::{Hold, STORE_RETRY_AFTER, StartMark};
use super::{Arrival, Stop};
use crate::request::{Invocation, InvokeRequest};

/// The waits between further attempts to settle on a shared store that did not answer.
const SETTLE_RETRIES: [Duration; 3] =
    [Duration::from_millis(100), Duration::from_millis(300), Duration::from_millis(900)];

/// The wait before the second try to cancel an admission the store did not answer; each later
/// wait doubles, up to [`CANCEL_MAX_WAIT`].
const CANCEL_FIRST_WAIT: Duration = Duration::from_millis(50);

/// The longest wait between two tries to cancel: once the store is back, the cancellation lands
/// within about this (plus a round trip), well before a lease a late claim would hold lapses.
const CANCEL_MAX_WAIT: Duration = Duration::from_secs(1);

/// How long a cancellation is tried: past this the store has been gone so long that the registry
/// gives up (and says so), rather than let cancellations pile up.
const CANCEL_FOR: Duration = Duration::from_secs(30);

/// An admission the store has not answered yet. Dropped armed — the admission timed out, failed,
/// or the caller dropped the call —, it cancels its attempt in the background
/// ([`IdempotencyStore::cancel`]): the caller learnt nothing of a claim, so no handler runs under
/// it, and a retry must find the key free rather than a claim nobody will settle.
struct Unanswered<'a> {
    store: &'a Arc<dyn IdempotencyStore>,
    key: &'a IdempotencyKey,
    attempt: Attempt,
    budget: Duration,
    clock: &'a Arc<dyn agent_surface_policy::Clock>,
    armed: bool,
}

impl Unanswered<'_> {
    /// The store answered: whatever it claimed, the caller knows of it.
    fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, attempt, budget) = (self.store.clone(), self.key.clone(), self.attempt, self.budget);
        let clock = self.clock.clone();
        let cancel = async move {
            let started = tokio::time::Instant::now();
            let mut wait = Duration::ZERO;
            while started.elapsed() < CANCEL_FOR {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).clamp(CANCEL_FIRST_WAIT, CANCEL_MAX_WAIT);
                // Tokio's timer, as for renewal: the store's clock, not the registry's, decides.
                match tokio::time::timeout(budget, store.cancel(&key, attempt, clock.now())).await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => {
                        tracing::warn!(target: "agent_surface::invoke", error = %agent_surface_policy::redacted(&e), "could not cancel an unanswered admission");
                    }
                    Err(_) => {
                        tracing::warn!(target: "agent_surface::invoke", "cancelling an unanswered admission took longer than the store budget");
                    }
                }
            }
            crate::telemetry::store_error("idempotency");
            tracing::error!(
                target: "agent_surface::invoke",
                %attempt,
                "could not cancel an unanswered admission; a retry of this call may find a claim nobody settles"
            );
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(cancel);
            }
            Err(_) => {
                futures_util::FutureExt::now_or_never(cancel);
            }
        }
    }
}

/// How admission lets a call go on (a call it stops is a [`Stop`]).
pub(crate) enum Admitted {
    /// No invocation id: nothing to remember.
    Untracked,
    /// This call runs and must settle its record.
    Leader(Box<LeaderGuard>),
    /// Answered without running (replay or join); boxed, so that admission's answer is small
    /// for the calls that run.
    Answered(Box<Invocation>),
}

/// How a follower that stopped waiting ends: an unknown outcome. The leader it joined may have
/// committed, and "retry it under a new invocationId" (`CANCELLED`) would run the action again; its
/// reconcile step (same id, same input) joins or replays the leader's result instead. The same
/// answer whatever the capability, so that it reveals nothing about it before authority ran.
fn stopped_follower(note: &'static str) -> Stop {
    Stop::noted(AgentSurfaceError::outcome_unknown(), Phase::Admission, note)
}

/// Invocation ids longer than this are stored by their SHA-256, so that an agent-chosen id cannot
/// make a record arbitrarily large.
pub(crate) const MAX_STORED_ID_BYTES: usize = 128;

/// The id under which a record is stored: the id itself, or `sha256:` and its hex digest when it
/// is longer than [`MAX_STORED_ID_BYTES`].
pub(crate) fn store_id(invocation_id: &str) -> String {
    if invocation_id.len() <= MAX_STORED_ID_BYTES {
        return invocation_id.to_string();
    }
    let digest = Sha256::digest(invocation_id.as_bytes());
    format!("sha256:{}", agent_surface_core::hex::Hex(&digest))
}

/// The fingerprint of a request: SHA-256 over the capability, the target as requested, the
/// canonical (RFC 8785) input and the confirmation evidence, each length-prefixed.
pub(crate) fn fingerprint(request: &InvokeRequest, input: &Value) -> Fingerprint {
    let target = request.target.as_ref();
    let mut canonical = Vec::with_capacity(128);
    write_canonical(input, &mut canonical);
    let digest = PartsDigest::new()
        .labelled(b"capability", request.capability.as_bytes())
        .labelled(b"instance", target.and_then(|t| t.instance_id.as_deref()).unwrap_or("").as_bytes())
        .labelled(b"registration", target.and_then(|t| t.registration_id.as_deref()).unwrap_or("").as_bytes())
        .labelled(b"input", &canonical)
        .labelled(b"evidence", request.confirmation_id.as_deref().unwrap_or("").as_bytes());
    Fingerprint::from_bytes(digest.finish())
}

/// Phase 1: a disposed registry or a cancelled call stops; a call without an invocation id runs
/// untracked; any other is admitted by the idempotency store under its key and fingerprint.
pub(crate) fn admit<'a>(
    arrival: &'a Arrival<'a>,
    input: &'a Value,
) -> impl Future<Output = Result<Admitted, Stop>> + Send + 'a {
    match precheck(arrival) {
        Ok(Some(admitted)) => Either::Left(std::future::ready(Ok(admitted))),
        // Boxed: the store's futures would otherwise enlarge the state machine of every call,
        // including the untracked ones that never get here.
        Ok(None) => Either::Right(Box::pin(admit_tracked(arrival, input))),
        Err(stop) => Either::Left(std::future::ready(Err(stop))),
    }
}

/// What admission decides without the store: a disposed registry or a cancelled call stops, a
/// call without an invocation id is untracked; `None` for a call the store must admit.
fn precheck(arrival: &Arrival<'_>) -> Result<Option<Admitted>, Stop> {
    if arrival.inner.disposed.is_cancelled() {
        return Err(Stop::noted(AgentSurfaceError::cancelled(), Phase::Admission, "registry disposed"));
    }
    if arrival.options.is_cancelled() {
        return Err(Stop::noted(AgentSurfaceError::cancelled(), Phase::Admission, "cancelled before admission"));
    }
    Ok((!arrival.tracked).then_some(Admitted::Untracked))
}

async fn admit_tracked(arrival: &Arrival<'_>, input: &Value) -> Result<Admitted, Stop> {
    let Arrival { inner, request, options, .. } = *arrival;
    let now = arrival.now();
    let Some(invocation_id) = &request.invocation_id else { return Ok(Admitted::Untracked) };
    // An id names one call of its principal (the signed-in person, whatever session, header or
    // transport sends it; an anonymous caller's session), so a retry that comes back another way
    // is still the same call.
    // Made again only for a follower admitted once more (below), never copied for every call.
    let key = || IdempotencyKey {
        consumer_key: options.consumer.principal().to_string(),
        invocation_id: store_id(invocation_id),
    };
    let fp = fingerprint(request, input);
    tracing::Span::current().record("fingerprint", tracing::field::display(&fp));
    let answered = |result: InvokeResult, joined: bool| {
        Admitted::Answered(Box::new(Invocation {
            result: result.with_invocation_id(Some(invocation_id.clone())),
            phase: None,
            replayed: !joined,
            joined,
            questions: None,
            correlation_id: crate::CorrelationId::pending(),
        }))
    };
    // A call that may run twice without harm is marked started by its admission on a store whose
    // leases lapse (one round trip fewer): no answer it can give depends on the mark there,
    // because a lapsed claim of it is taken over and run again (`IdempotencyStore::admit_started`).
    let mark = inner.config.idempotency.reach() == agent_surface_policy::Reach::Shared
        && inner
            .read()
            .capabilities
            .get(request.capability.as_str())
            .is_some_and(|def| super::execute::outcome_is_harmless(def));
    // A leader that stopped for questions released the record (the same id comes back with the
    // answers), and its stop carries no questions to a follower: each caller asks its own. So a
    // follower handed that stop admits once more, and leads (or joins the next leader), rather
    // than tell its client `client-input-required`, which a client that can answer would read as
    // final. So does a call that carries an approval given in person (`InvokeOptions::approval`,
    // recorded under the request as its client sent it) handed a leader's `CONFIRMATION_REQUIRED`
    // (released too): that leader lacked the approval this call presents. A few rounds at most:
    // then the stop is its answer, as before.
    let unapproved = |result: &InvokeResult| {
        options.approval.is_some() && result.code() == Some(agent_surface_core::ErrorCode::ConfirmationRequired)
    };
    let mut rounds = 0;
    loop {
        return Ok(match admit_record(inner, options, key(), fp, now, None, mark).await? {
            Record::Leader(guard) | Record::TakenOver(guard) => Admitted::Leader(guard),
            Record::Replay(result) => answered(result, false),
            Record::Joined(result) if rounds < 3 && (stopped_for_questions(&result) || unapproved(&result)) => {
                rounds += 1;
                continue;
            }
            Record::Joined(result) => answered(result, true),
        });
    }
}

/// Whether `result` is a leader's stop for questions: `PRECONDITION_FAILED {reason:
/// client-input-required}`, which the pipeline never keeps under an id.
fn stopped_for_questions(result: &InvokeResult) -> bool {
    result.error_payload().is_some_and(|p| {
        p.code() == agent_surface_core::ErrorCode::PreconditionFailed
            && p.detail("reason").and_then(serde_json::Value::as_str)
                == Some(agent_surface_core::details::CLIENT_INPUT_REQUIRED)
    })
}

/// What the idempotency store answered a call admitted under a record: its invocation id's
/// (phase 1) or its natural key's ([`super::natural`]).
pub(crate) enum Record {
    /// The call runs and must settle the record.
    Leader(Box<LeaderGuard>),
    /// The call runs, on a record taken over from a leader that lost its lease (an earlier
    /// execution may have taken effect).
    TakenOver(Box<LeaderGuard>),
    /// The stored result (no invocation id).
    Replay(InvokeResult),
    /// The result of the identical call in flight, joined (no invocation id).
    Joined(InvokeResult),
}

/// Admits `key` with `fp` in the registry's idempotency store. The leader's [`Hold`] is
/// `shared` when given (a call admitted under its natural key after its invocation id shares the
/// invocation's: one handler, one set of facts for both records), else a fresh one. With `mark`
/// (a call whose repetition is harmless) the store is asked to mark a claim started as it makes
/// it ([`IdempotencyStore::admit_started`]); a claim it did not mark so is marked before the
/// handler runs, as every claim whose lease lapses is. A store that does not answer within the
/// budget fails the call closed (nothing ran), and its attempt is cancelled ([`Unanswered`]).
pub(crate) async fn admit_record(
    inner: &Arc<crate::registry::Inner>,
    options: &crate::request::InvokeOptions,
    key: IdempotencyKey,
    fp: Fingerprint,
    now: Timestamp,
    shared: Option<&Arc<Hold>>,
    mark: bool,
) -> Result<Record, Stop> {
    let store = inner.config.idempotency.clone();
    // Whether the admission marked the claim it made started (`admit_started`).
    let mut marked = false;
    // The key is moved into the guard once the store has answered.
    let leader = |key: IdempotencyKey, lease: Lease, taken_over: bool, marked: bool| {
        let hold = match shared {
            Some(hold) => hold.clone(),
            None => Arc::new(Hold::new(taken_over)),
        };
        // A lease that lapses is marked started before the handler runs (see `Hold::marks`),
        // unless its admission marked it.
        if lease.renew_every.is_some() && !marked {
            hold.add_mark(StartMark {
                store: store.clone(),
                key: key.clone(),
                lease,
                budget: inner.config.store_budget,
                clock: inner.config.clock.clone(),
            });
        }
        Box::new(LeaderGuard {
            hold,
            pending: None,
            store: store.clone(),
            key: Some(key),
            fingerprint: fp,
            lease,
            window: inner.config.idempotency_window,
            budget: inner.config.store_budget,
            clock: inner.config.clock.clone(),
            release_unstarted: false,
        })
    };
    let budget = inner.config.store_budget;
    let attempt = Attempt::fresh();
    let unanswered = Unanswered { store: &store, key: &key, attempt, budget, clock: &inner.config.clock, armed: true };
    let clock = inner.config.clock.as_ref();
    let admitted = if mark {
        agent_surface_policy::guard::within(clock, budget, store.admit_started(&key, fp, attempt, now)).await.map(
            |answer| {
                answer.map(|(admission, started)| {
                    marked = started;
                    admission
                })
            },
        )
    } else {
        agent_surface_policy::guard::within(clock, budget, store.admit(&key, fp, attempt, now)).await
    };
    let admitted = admitted.unwrap_or_else(|| {
        Err(StoreError::Unavailable(format!("the idempotency store did not answer within {} ms", budget.as_millis())))
    });
    // An answer, or a refusal that claimed nothing, needs no cancellation; any other failure may
    // have left a claim (the store may carry the admission out after all).
    if matches!(
        admitted,
        Ok(_) | Err(StoreError::Full { .. } | StoreError::ConsumerFull { .. } | StoreError::AttemptCancelled)
    ) {
        unanswered.answered();
    } else {
        drop(unanswered);
    }
    match admitted {
        Ok(Admission::Leader(lease)) => Ok(Record::Leader(leader(key, lease, false, marked))),
        Ok(Admission::TakeOver(lease)) => {
            tracing::warn!(
                target: "agent_surface::invoke",
                token = lease.token,
                "the previous leader of this call lost its lease without a result; this call took the record over"
            );
            Ok(Record::TakenOver(leader(key, lease, true, marked)))
        }
        Ok(Admission::Replay(result)) => Ok(Record::Replay(result)),
        Ok(Admission::Follower(wait)) => {
            // A follower honours its own cancellation and the registry's disposal: it stops
            // waiting (not stored — the leader's record is the leader's). A call that follows
            // under its natural key while it leads its invocation id's record releases that
            // record too: nothing ran for the id, and the operation may yet take effect under
            // the key, so the same id repeated is answered from the key's record, not from an
            // unknown outcome kept for the window. (Not an id's record taken over from a leader
            // that lost its lease: an earlier execution under the id may have taken effect.)
            let caller = options.cancelled();
            let stopped = |note| {
                if let Some(hold) = shared.filter(|hold| !hold.taken_over) {
                    hold.forgo();
                }
                Err(stopped_follower(note))
            };
            let result = tokio::select! {
                result = wait => result,
                _ = caller => return stopped("cancelled while joined to the call in flight"),
                _ = inner.disposed.cancelled() => return stopped("registry disposed while joined to the call in flight"),
            };
            // On a shared store, a follower whose leader was lost (its lease lapsed with no
            // result) learns an unknown outcome — and nobody would settle the record, which stays
            // in flight until it expires. It admits once more: the record is then taken over and
            // settled as a takeover is, or replayed if another caller settled it meanwhile.
            if store.reach() == agent_surface_policy::Reach::Shared && super::is_outcome_unknown(&result) {
                match reclaim(inner, &store, &key, fp).await {
                    Some(Reclaimed::Lease(lease)) => {
                        tracing::warn!(
                            target: "agent_surface::invoke",
                            token = lease.token,
                            "the leader this call joined lost its lease without a result; this call took the record over"
                        );
                        return Ok(Record::TakenOver(leader(key, lease, true, false)));
                    }
                    Some(Reclaimed::Replay(result)) => return Ok(Record::Replay(result)),
                    None => {}
                }
            }
            Ok(Record::Joined(result))
        }
        Ok(Admission::Conflict { stored }) => Err(Stop::noted(
            AgentSurfaceError::invocation_conflict(),
            Phase::Admission,
            format!("stored fingerprint {stored}, presented {fp}"),
        )),
        Err(e) => {
            // Nothing is recorded under the id for this attempt, so the answer sends the same id
            // again (an earlier attempt's result, if any, is then returned): the id's own
            // admission, or a natural key's while the call leads the id's record (which releases
            // such an answer rather than keep it: `settlement`). A record taken over from a
            // leader that lost its lease keeps a transient answer: an earlier execution under the
            // id may have taken effect.
            let error = if shared.is_some_and(|hold| hold.taken_over) {
                AgentSurfaceError::transient(STORE_RETRY_AFTER)
            } else {
                AgentSurfaceError::store_unavailable(STORE_RETRY_AFTER)
            };
            Err(Stop::noted(error, Phase::Admission, format!("idempotency store failed: {e}"))
                .store_fault(super::Fault::IdempotencyStore))
        }
    }
}

/// What a follower that lost its leader found when it admitted once more ([`reclaim`]).
enum Reclaimed {
    /// A lease on the record: taken over, or claimed afresh where the record had gone. Either
    /// way an earlier leader may have run, so the call goes on as a takeover.
    Lease(Lease),
    /// The result another caller settled meanwhile.
    Replay(InvokeResult),
}

/// Admits `key` once more for a follower whose leader was lost, under the store budget and a
/// fresh attempt (cancelled when the store does not answer, as every admission's). `None` leaves
/// the follower's unknown outcome as its answer: the store failed, another caller holds the
/// record now (it will settle it), or the record holds another request.
async fn reclaim(
    inner: &Arc<crate::registry::Inner>,
    store: &Arc<dyn IdempotencyStore>,
    key: &IdempotencyKey,
    fp: Fingerprint,
) -> Option<Reclaimed> {
    let clock = &inner.config.clock;
    let budget = inner.config.store_budget;
    let attempt = Attempt::fresh();
    let unanswered = Unanswered { store, key, attempt, budget, clock, armed: true };
    let admitted =
        agent_surface_policy::guard::within(clock.as_ref(), budget, store.admit(key, fp, attempt, clock.now())).await;
    match &admitted {
        Some(Ok(_) | Err(StoreError::Full { .. } | StoreError::ConsumerFull { .. } | StoreError::AttemptCancelled)) => {
            unanswered.answered();
        }
        _ => drop(unanswered),
    }
    match admitted {
        Some(Ok(Admission::TakeOver(lease) | Admission::Leader(lease))) => Some(Reclaimed::Lease(lease)),
        Some(Ok(Admission::Replay(result))) => Some(Reclaimed::Replay(result)),
        _ => None,
    }
}

/// A copy of `result` without its invocation id (the form a record keeps; see
/// [`LeaderGuard::settlement`]), made without copying the id.
pub(crate) fn without_id(result: &InvokeResult) -> InvokeResult {
    if let Some(output) = result.output() {
        return InvokeResult::ok(output.clone(), None);
    }
    if let Some(error) = result.error_payload() {
        return InvokeResult::error(error.clone(), None);
    }
    result.clone().with_invocation_id(None)
}

/// How a leader's settlement ended, for the answer to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The record holds the call's result (or the store failed: the result stands).
    Kept,
    /// The lease was lost: the record is another caller's, and says something else.
    LeaseLost,
}

/// The leader's duty to settle its record. Dropped without settling (the caller dropped the
/// `invoke` future mid-call), it records `CANCELLED` so that followers are answered and a retry
/// with the same id cannot run the handler a second time.
pub(crate) struct LeaderGuard {
    hold: Arc<Hold>,
    /// The settlement being written, once the call has its result: if the write is dropped
    /// midway, `Drop` records this rather than a guess.
    pending: Option<Settlement>,
    store: Arc<dyn IdempotencyStore>,
    key: Option<IdempotencyKey>,
    fingerprint: Fingerprint,
    lease: Lease,
    window: Duration,
    /// The time budget of one settlement.
    budget: Duration,
    clock: Arc<dyn agent_surface_policy::Clock>,
    /// A natural key's record: dropped before its handler started, the call is released rather
    /// than recorded `CANCELLED` (the operation has not happened; see `natural::result_of`).
    release_unstarted: bool,
}

impl LeaderGuard {
    /// This guard, releasing its record rather than recording `CANCELLED` when the call is dropped
    /// before its handler may have run (a natural key's record).
    pub(crate) fn releasing_unstarted(mut self: Box<Self>) -> LeaderGuard {
        self.release_unstarted = true;
        *self
    }

    /// What the phases learn and tell (see [`Hold`]).
    pub(crate) fn hold(&self) -> Arc<Hold> {
        self.hold.clone()
    }

    /// Whether the handler has started under this guard's record ([`Hold::started`]).
    pub(crate) fn handler_started(&self) -> bool {
        self.hold.started.load(Ordering::Acquire)
    }

    /// Keeps the lease alive while the call runs, for a store whose leases lapse; `None` when the
    /// lease holds until settled. The future never ends: the caller drops it with the call.
    ///
    /// It waits on Tokio's timer, not the registry's clock: a lease lapses on the store's clock,
    /// which a simulated registry clock does not move.
    pub(crate) fn renewal(&self) -> Option<impl Future<Output = std::convert::Infallible> + Send + 'static> {
        // At least a millisecond apart, whatever the store asks.
        let every = self.lease.renew_every?.max(Duration::from_millis(1));
        let (store, key, lease, clock) = (self.store.clone(), self.key.clone()?, self.lease, self.clock.clone());
        let hold = self.hold.clone();
        // `now` is passed for the trait's sake; the store measures the lease on its own clock.
        Some(async move {
            loop {
                tokio::time::sleep(every).await;
                // A renewal that hangs must not hold back the next one.
                match tokio::time::timeout(every, store.renew(&key, lease, clock.now())).await {
                    Ok(Ok(())) => {}
                    Ok(Err(StoreError::LeaseLost)) => {
                        hold.lost.cancel();
                        tracing::error!(
                            target: "agent_surface::invoke",
                            token = lease.token,
                            "lost the lease on this call's idempotency record; its result will not be recorded"
                        );
                        return std::future::pending::<std::convert::Infallible>().await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(target: "agent_surface::invoke", error = %agent_surface_policy::redacted(&e), "could not renew the lease");
                    }
                    Err(_) => {
                        tracing::warn!(target: "agent_surface::invoke", "renewing the lease took longer than its period");
                    }
                }
            }
        })
    }

    /// The settlement of `result`, which carries no invocation id: the record does not keep the
    /// caller's id, since every answer from it (replay, join) carries the id of the call it
    /// answers, and the key holds at most a digest of a long id.
    fn settlement(&self, result: InvokeResult, now: Timestamp, terminal: bool) -> Settlement {
        let unstarted = self.hold.released();
        // `store-unavailable` asks for the same id again (nothing was recorded): it is never kept,
        // whoever produced it (a handler relaying one), or the same id would replay it.
        let cacheable = terminal
            && !unstarted
            && result
                .error_payload()
                .is_none_or(|p| p.is_cacheable() && !super::is_execution_failed(p, "store-unavailable"));
        if cacheable {
            Settlement::Store { result, expires_at: now.saturating_add(self.window) }
        } else {
            Settlement::Release { result }
        }
    }

    /// One settlement within the store budget; past it, the store counts as failed.
    async fn settle_once(
        &self,
        key: &IdempotencyKey,
        settlement: Settlement,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let fut = self.store.settle(key, self.fingerprint, self.lease, settlement, now);
        agent_surface_policy::guard::within(self.clock.as_ref(), self.budget, fut)
            .await
            .unwrap_or_else(|| Err(self.overrun()))
    }

    /// The failure of a settlement that did not finish within the store budget.
    fn overrun(&self) -> StoreError {
        StoreError::Unavailable(format!("the idempotency store did not answer within {} ms", self.budget.as_millis()))
    }

    /// Settles the record with `result`: stored for the window when `terminal` and cacheable,
    /// released otherwise (the same id may come back). [`Settled::LeaseLost`] when the lease was
    /// lost (renewal learnt it, or the store refused the settlement).
    pub(crate) async fn settle(mut self, result: &InvokeResult, terminal: bool) -> Settled {
        let Some(key) = self.key.as_ref() else { return Settled::Kept };
        let now = self.clock.now();
        // The key is given up only once the store has the result: if this future is dropped
        // while the store is still writing, `Drop` settles the record with the same result
        // instead of leaving it in flight for ever. That copy is made only when the store does
        // not answer at once (a store in memory always does): before this future first waits.
        let answered = {
            let first = self.settlement(without_id(result), now, terminal);
            let attempt = self.store.settle(key, self.fingerprint, self.lease, first, now);
            let mut attempt =
                std::pin::pin!(agent_surface_policy::guard::within(self.clock.as_ref(), self.budget, attempt));
            match std::future::poll_fn(|cx| Poll::Ready(attempt.as_mut().poll(cx))).await {
                Poll::Ready(answered) => answered,
                Poll::Pending => {
                    self.pending = Some(self.settlement(without_id(result), now, terminal));
                    attempt.await
                }
            }
        };
        let mut settled = answered.unwrap_or_else(|| Err(self.overrun()));
        // A shared store that did not answer: try again while the lease may still hold, so that a
        // known result is not lost to a blip (and later answered as an unknown outcome). An
        // unanswered attempt may have landed: the store then answers the retry as settled (see
        // `IdempotencyStore::settle`); a refusal means another caller took the record over.
        if self.lease.renew_every.is_some() {
            for wait in SETTLE_RETRIES {
                if !matches!(settled, Err(StoreError::Unavailable(_))) {
                    break;
                }
                if self.pending.is_none() {
                    self.pending = Some(self.settlement(without_id(result), now, terminal));
                }
                tokio::time::sleep(wait).await;
                let Some(attempt) = self.pending.clone() else { break };
                settled = self.settle_once(key, attempt, now).await;
            }
        }
        match settled {
            Ok(()) => {
                self.key = None;
                self.pending = None;
                Settled::Kept
            }
            Err(StoreError::LeaseLost) => {
                self.key = None;
                self.hold.lost.cancel();
                tracing::error!(
                    target: "agent_surface::invoke",
                    token = self.lease.token,
                    "the lease on this call's idempotency record was lost (it ran past the lease and another \
                     caller took the record over); its result was not recorded"
                );
                Settled::LeaseLost
            }
            Err(e) => {
                self.key = None;
                crate::telemetry::store_error("idempotency");
                tracing::error!(target: "agent_surface::invoke", error = %agent_surface_policy::redacted(&e), "could not record the terminal result");
                if self.hold.lost.is_cancelled() { Settled::LeaseLost } else { Settled::Kept }
            }
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let now = self.clock.now();
        let settlement = match self.pending.take() {
            Some(settlement) => settlement,
            None => {
                let may_have_run = self.hold.may_have_run.load(Ordering::Acquire);
                // A handler that started, even one whose repetition is harmless, processed the
                // call: the record must not say otherwise, nor be released as a call that never
                // ran.
                let started = may_have_run || self.hold.started.load(Ordering::Acquire);
                let error =
                    if may_have_run { AgentSurfaceError::outcome_unknown() } else { AgentSurfaceError::cancelled() };
                let mut payload = error.into_payload();
                payload.set_not_processed(!started);
                let terminal = started || !self.release_unstarted;
                self.settlement(InvokeResult::error(payload, None), now, terminal)
            }
        };
        let (store, fp, lease) = (self.store.clone(), self.fingerprint, self.lease);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = store.settle(&key, fp, lease, settlement, now).await;
                });
            }
            Err(_) => {
                futures_util::FutureExt::now_or_never(store.settle(&key, fp, lease, settlement, now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Target;

    /// Stored records are compared across versions: a request's fingerprint bytes never change.
    /// The values were also computed outside Rust: SHA-256 over, per part, its tag, its length
    /// (u64 big-endian) and its bytes — `capability`, `instance`, `registration`, `input` (RFC 8785
    /// text), `evidence`.
    #[test]
    fn the_fingerprint_bytes_are_pinned() {
        let bare = InvokeRequest::new("tickets.create", serde_json::json!({"b": [1, 2.5, "x"], "a": null}));
        assert_eq!(
            fingerprint(&bare, &bare.input).to_string(),
            "e6fdda02bd4b655dda80e148de3d91302cf6bc96b2b4f0594787051b86c8c1b3"
        );
        let full = InvokeRequest::new("tickets.create", Value::Null)
            .with_target(Target { instance_id: Some("i-1".into()), registration_id: Some("r-7".into()) })
            .with_confirmation("c-0123");
        let input = serde_json::json!({"title": "ünïcode", "n": 1e3});
        assert_eq!(
            fingerprint(&full, &input).to_string(),
            "9f79d348e173651e0602158af88c7a833b905290c0787e10e39afd05a41db7b0"
        );
        assert_ne!(fingerprint(&full, &input), fingerprint(&full.clone().with_confirmation("c-0124"), &input));
    }
}
