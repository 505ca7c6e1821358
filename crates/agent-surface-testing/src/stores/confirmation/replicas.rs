//! The store kit's checks of one [`ConfirmationStore`] shared by two confirmation engines, as two
//! replicas share it: one approval used once, relayed confirmations, racing repeats, one expiry
//! event; and [`InStep`], which lines up concurrent look-ups so the widest race runs every time.

use std::time::Duration;

use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::confirmation::{
    ApprovalVerdict, ConfirmationBinding, ConfirmationState, Decided, Rejection, RelayKey, SlotSet,
};
use agent_surface_policy::{AuditKind, CallInfo, ConfirmationRecord, ConfirmationStore, Consumer, StoreError};
use futures_util::future::join_all;
use serde_json::json;

use crate::stores::{at, expect};

/// Two confirmation engines over one store and one audit trail, as two replicas are, and a
/// confirmation requested through the first.
struct Replicas {
    clock: std::sync::Arc<agent_surface_policy::ManualClock>,
    trail: std::sync::Arc<agent_surface_policy::MemoryAuditSink>,
    a: std::sync::Arc<agent_surface_policy::ConfirmationEngine>,
    b: std::sync::Arc<agent_surface_policy::ConfirmationEngine>,
    requester: Consumer,
    input: serde_json::Value,
    summary: agent_surface_core::SafeText,
}

impl Replicas {
    fn new(store: std::sync::Arc<dyn ConfirmationStore>) -> Replicas {
        use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, ManualClock, MemoryAuditSink};
        use std::sync::Arc;
        let clock = Arc::new(ManualClock::new(at(0)));
        let trail = Arc::new(MemoryAuditSink::default());
        let replica = || {
            Arc::new(ConfirmationEngine::new(ConfirmationConfig {
                clock: clock.clone(),
                store: store.clone(),
                ttl: Duration::from_secs(60),
                audit: Some(trail.clone()),
                ..Default::default()
            }))
        };
        let (a, b) = (replica(), replica());
        Replicas {
            clock,
            trail,
            a,
            b,
            requester: Consumer::authenticated("c-1", agent_surface_policy::Identity::new("alice")),
            input: json!({"orderId": "A-1"}),
            summary: agent_surface_core::SafeText::from("Cancel order A-1."),
        }
    }

    /// The gated call both replicas are asked about.
    fn call(&self) -> CallInfo<'_> {
        CallInfo::new(&self.requester, "orders.cancel", "orders", Effect::Destructive, false)
            .with_instance("main")
            .with_registration("r-1")
            .with_input(&self.input)
            .with_declared_gate(Some(&self.summary))
            .with_ids(Some("inv-1"), "corr-1")
    }

    /// The call repeated through `engine` without evidence, by another call (its own ids).
    async fn repeat(
        &self,
        engine: &agent_surface_policy::ConfirmationEngine,
    ) -> agent_surface_policy::ConfirmationDecision {
        use agent_surface_policy::{Clock, ConfirmationGate};
        engine.check(self.call().with_ids(None, "corr-2"), None, self.clock.now()).await
    }

    /// A confirmation requested through the first replica.
    async fn request(&self) -> String {
        use agent_surface_policy::{Clock, ConfirmationDecision, ConfirmationGate};
        match self.a.check(self.call(), None, self.clock.now()).await {
            ConfirmationDecision::Required { confirmation_id, .. } => confirmation_id,
            other => panic!("store kit: a gated call without evidence must need a confirmation, got {other:?}"),
        }
    }
}

/// Two confirmation engines (two replicas) over one `store`: a confirmation requested through
/// one and approved through the other is used once, however many retries race through both.
///
/// # Panics
///
/// When no retry, or more than one, proceeds.
pub async fn check_replicas_share_one_approval(store: std::sync::Arc<dyn ConfirmationStore>) {
    use agent_surface_policy::{Clock, ConfirmationDecision, ConfirmationGate, Identity};
    let replicas = Replicas::new(store);
    let id = replicas.request().await;
    replicas.b.approve(&id, &Identity::new("manager")).await.expect("store kit: the approval must be recorded");
    let call = replicas.call();
    let attempts = (0..20).map(|i| {
        let engine = if i % 2 == 0 { &replicas.a } else { &replicas.b };
        let (id, now) = (id.as_str(), replicas.clock.now());
        async move { engine.check(call, Some(id), now).await }
    });
    let decisions = join_all(attempts).await;
    let proceeded = decisions.iter().filter(|d| **d == ConfirmationDecision::Proceed).count();
    assert_eq!(proceeded, 1, "store kit: one approval must let exactly one call through: {decisions:?}");
}

/// Two confirmation engines (two replicas) over one `store` and one audit trail: a call repeated
/// without evidence (a model cannot send ids) is given the same confirmation on either replica
/// while nobody decided; once a person approved it, the plain repeat runs exactly once, on the
/// other replica, however many repeats race through both; the repeat after that asks anew. The
/// decision is recorded with the requesting call's invocation and correlation ids.
///
/// # Panics
///
/// When a repeat is not presented the relayed confirmation, or one approval lets other than
/// exactly one repeat through.
pub async fn check_replicas_share_relayed_confirmations(store: std::sync::Arc<dyn ConfirmationStore>) {
    use agent_surface_policy::{ConfirmationDecision, Identity};
    let replicas = Replicas::new(store);
    let id = replicas.request().await;
    let again = |engine| replicas.repeat(engine);
    match again(&replicas.b).await {
        ConfirmationDecision::Required { confirmation_id, .. } => assert_eq!(
            confirmation_id, id,
            "store kit: a repeat on the other replica must be given the pending confirmation, not a new one"
        ),
        other => panic!("store kit: a repeat of a pending call must need its confirmation, got {other:?}"),
    }
    replicas.a.approve(&id, &Identity::new("manager")).await.expect("store kit: the approval must be recorded");
    let decided = replicas.trail.events().into_iter().find(|e| matches!(e.kind, AuditKind::ConfirmationDecided { .. }));
    let decided = decided.expect("store kit: the decision must be in the trail");
    assert_eq!(
        (decided.invocation_id.as_deref(), decided.correlation_id.as_deref()),
        (Some("inv-1"), Some("corr-1")),
        "store kit: a decision carries the requesting call's ids (the record keeps them)"
    );
    let repeats = join_all((0..10).map(|i| again(if i % 2 == 0 { &replicas.b } else { &replicas.a }))).await;
    let ran = repeats.iter().filter(|d| **d == ConfirmationDecision::Proceed).count();
    assert_eq!(ran, 1, "store kit: one approval must let exactly one plain repeat through: {repeats:?}");
    match again(&replicas.b).await {
        ConfirmationDecision::Required { confirmation_id, .. } => {
            assert_ne!(confirmation_id, id, "store kit: the repeat after the run must ask anew");
        }
        other => panic!("store kit: the repeat after the run must need a new confirmation, got {other:?}"),
    }
}

/// Two confirmation engines (two replicas) over one `store` and one audit trail, and a hundred
/// repeats of one call without evidence sent at once through both (a client retrying before the
/// first answer came back, with no invocation id): one confirmation is opened between them —
/// every repeat is answered with it, alike (id, summary, deadline, origin), the store lists one
/// pending record and the trail one `confirmation.requested`. Once it is denied, the next repeat
/// is told so and the one after it opens a new confirmation. The store's look-ups are held in
/// step ([`InStep`]), so that every repeat looks for a relayed confirmation before any of them
/// asks for one, on every run.
///
/// # Panics
///
/// When the repeats open more than one confirmation, or are answered differently.
pub async fn check_racing_repeats_open_one_confirmation(store: std::sync::Arc<dyn ConfirmationStore>) {
    use agent_surface_policy::{Clock, ConfirmationDecision, ConfirmationGate, Identity};
    const REPEATS: usize = 100;
    let replicas = Replicas::new(std::sync::Arc::new(InStep::new(store.clone(), REPEATS)));
    let requested =
        || replicas.trail.events().iter().filter(|e| matches!(e.kind, AuditKind::ConfirmationRequested { .. })).count();
    let now = replicas.clock.now();
    let repeats = (0..REPEATS).map(|i| {
        let engine = if i % 2 == 0 { &replicas.a } else { &replicas.b };
        engine.check(replicas.call().with_ids(None, "corr-retry"), None, now)
    });
    let answers = join_all(repeats).await;
    let first = match &answers[0] {
        ConfirmationDecision::Required { confirmation_id, .. } => confirmation_id.clone(),
        other => panic!("store kit: a gated call without evidence must need a confirmation, got {other:?}"),
    };
    let alike = answers.iter().filter(|a| **a == answers[0]).count();
    assert_eq!(alike, REPEATS, "store kit: every racing repeat must be given the same confirmation, alike");
    let pending = expect("list_pending", store.list_pending(replicas.clock.now(), 1000).await);
    let ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [first.as_str()], "store kit: racing repeats must open one confirmation between them");
    assert_eq!(requested(), 1, "store kit: one confirmation.requested for racing repeats");

    replicas.b.deny(&first, &Identity::new("manager")).await.expect("store kit: the denial must be recorded");
    let denied = replicas.repeat(&replicas.a).await;
    assert!(
        matches!(denied, ConfirmationDecision::Invalid(agent_surface_core::details::ConfirmationInvalidReason::Denied)),
        "store kit: the repeat after a denial is told of it, got {denied:?}"
    );
    match replicas.repeat(&replicas.b).await {
        ConfirmationDecision::Required { confirmation_id, .. } => {
            assert_ne!(
                confirmation_id, first,
                "store kit: the call asked again after a denial opens a new confirmation"
            );
        }
        other => panic!("store kit: the call asked again after a denial must need a confirmation, got {other:?}"),
    }
    assert_eq!(requested(), 2, "store kit: the new confirmation is requested once");
}

/// Two confirmation engines (two replicas) over one `store` and one audit trail: a confirmation
/// that expires is recorded once as `confirmation.expired`, though each replica meets its
/// deadline twice (its evidence presented, then a late decision) — the replicas' own memories of
/// what they recorded do not see each other, so this holds only through
/// [`ConfirmationStore::claim_expiry`].
///
/// # Panics
///
/// When the trail holds the expiry other than once.
pub async fn check_replicas_record_one_expiry(store: std::sync::Arc<dyn ConfirmationStore>) {
    use agent_surface_policy::{Clock, ConfirmationDecision, ConfirmationGate, Identity};
    let replicas = Replicas::new(store);
    let id = replicas.request().await;
    replicas.clock.advance(Duration::from_secs(61));
    for replica in [&replicas.a, &replicas.b, &replicas.a, &replicas.b] {
        let presented = replica.check(replicas.call(), Some(&id), replicas.clock.now()).await;
        assert!(
            matches!(presented, ConfirmationDecision::Invalid(_)),
            "store kit: expired evidence must be invalid, got {presented:?}"
        );
        assert!(replica.deny(&id, &Identity::new("manager")).await.is_err(), "store kit: a late denial must fail");
    }
    let expired = replicas.trail.events().iter().filter(|e| matches!(e.kind, AuditKind::ConfirmationExpired)).count();
    assert_eq!(expired, 1, "store kit: replicas sharing a store must record one expiry between them");
}

/// Two confirmation engines (two replicas) over one `store` and one audit trail, and a
/// confirmation nobody touches after it was requested: once its deadline passed, both replicas'
/// sweeps ([`agent_surface_policy::ConfirmationEngine::sweep_expired`]) record its
/// `confirmation.expired` once between them, a sweep before the deadline records nothing, and
/// its evidence presented later to either replica writes no second event.
///
/// # Panics
///
/// When the trail holds the expiry other than once.
pub async fn check_replicas_sweep_one_expiry(store: std::sync::Arc<dyn ConfirmationStore>) {
    use agent_surface_policy::{Clock, ConfirmationDecision, ConfirmationGate};
    let replicas = Replicas::new(store);
    let id = replicas.request().await;
    let expired = || {
        replicas
            .trail
            .events()
            .iter()
            .filter(|e| matches!(e.kind, AuditKind::ConfirmationExpired) && e.confirmation_id.as_deref() == Some(&id))
            .count()
    };
    replicas.clock.advance(Duration::from_secs(59));
    assert_eq!(expect("sweep", replicas.a.sweep_expired(100).await), 0, "store kit: not expired yet");
    replicas.clock.advance(Duration::from_secs(2));
    let (a, b) = futures_util::future::join(replicas.a.sweep_expired(100), replicas.b.sweep_expired(100)).await;
    assert_eq!(expect("sweep", a) + expect("sweep", b), 1, "store kit: two sweeps record one expiry between them");
    assert_eq!(expired(), 1, "store kit: the trail holds the expiry of an untouched confirmation once");
    let event = replicas.trail.events().into_iter().find(|e| matches!(e.kind, AuditKind::ConfirmationExpired));
    let event = event.expect("store kit: the expired event");
    assert_eq!(event.capability, "orders.cancel", "store kit: the event describes the confirmation");
    assert_eq!(event.principal.as_deref(), Some("alice"), "store kit: the event names the requester");
    for replica in [&replicas.a, &replicas.b] {
        assert_eq!(expect("sweep", replica.sweep_expired(100).await), 0, "store kit: a second sweep records none");
        let presented = replica.check(replicas.call(), Some(&id), replicas.clock.now()).await;
        assert!(
            matches!(presented, ConfirmationDecision::Invalid(_)),
            "store kit: expired evidence, got {presented:?}"
        );
    }
    assert_eq!(expired(), 1, "store kit: a later touch writes no second expired event");
}

/// A [`ConfirmationStore`] that holds the answers of its first `n`
/// [`relayed`](ConfirmationStore::relayed) look-ups until all `n` have been looked up, and
/// forwards everything else to the store it wraps: `n` concurrent repeats of one call then all
/// learn that nothing is relayed for it before any of them asks for a confirmation — the widest window identical calls racing on one replica or several can open,
/// reproduced on every run rather than when the scheduler happens to interleave them.
///
/// A look-up that waits longer than a minute (fewer than `n` repeats ever arrive) goes on
/// alone, so that a broken test fails on its assertions instead of hanging.
///
/// Built with [`holding_consumes`](InStep::holding_consumes) instead, it holds the answers of
/// [`consume`](ConfirmationStore::consume): the store has consumed, and its answer is on its way
/// until the test releases it — the window in which a caller that goes away never learns that
/// its evidence was used.
#[derive(Debug)]
pub struct InStep<S> {
    inner: S,
    held: usize,
    arrived: std::sync::atomic::AtomicUsize,
    barrier: tokio::sync::Barrier,
    consumes: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl<S: ConfirmationStore> InStep<S> {
    /// `inner`, its first `n` look-ups held until all `n` arrived.
    pub fn new(inner: S, n: usize) -> InStep<S> {
        InStep {
            inner,
            held: n,
            arrived: std::sync::atomic::AtomicUsize::new(0),
            barrier: tokio::sync::Barrier::new(n.max(1)),
            consumes: None,
        }
    }

    /// `inner`, each answer of its `consume` (given once the store consumed) held until
    /// `release` has a permit for it, for at most a minute.
    pub fn holding_consumes(inner: S, release: std::sync::Arc<tokio::sync::Semaphore>) -> InStep<S> {
        InStep { consumes: Some(release), ..InStep::new(inner, 0) }
    }
}

impl<S: ConfirmationStore> ConfirmationStore for InStep<S> {
    fn reach(&self) -> agent_surface_policy::Reach {
        self.inner.reach()
    }

    fn usage(&self, now: Timestamp) -> Option<agent_surface_policy::StoreUsage> {
        self.inner.usage(now)
    }

    fn insert<'a>(
        &'a self,
        record: ConfirmationRecord,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), StoreError>> {
        self.inner.insert(record, now)
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<agent_surface_policy::confirmation::Inserted, StoreError>> {
        self.inner.insert_relayed(record, key, now)
    }

    fn get<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        self.inner.get(id, now)
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<Decided, StoreError>> {
        self.inner.decide(id, verdict, approver, now)
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<Decided, StoreError>> {
        self.inner.decide_in_slots(id, verdict, approver, slots, now)
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<Result<agent_surface_policy::confirmation::Consumed, Rejection>, StoreError>,
    > {
        Box::pin(async move {
            let answer = self.inner.consume(id, expected, now).await;
            if let Some(release) = &self.consumes
                && let Ok(Ok(permit)) = tokio::time::timeout(Duration::from_secs(60), release.acquire()).await
            {
                permit.forget();
            }
            answer
        })
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        self.inner.withdraw(id, now)
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> futures_util::future::BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        self.inner.list_pending(now, limit)
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.claim_expiry(id, until, now)
    }

    fn expiry_recorded<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), StoreError>> {
        self.inner.expiry_recorded(id, now)
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.reinstate(id, expected, token, now)
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> futures_util::future::BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        self.inner.list_expired(now, limit)
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), StoreError>> {
        self.inner.remember_relayed(key, id, now)
    }

    fn relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let answer = self.inner.relayed(key, now).await;
            if self.arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < self.held {
                let _ = tokio::time::timeout(Duration::from_secs(60), self.barrier.wait()).await;
            }
            answer
        })
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), StoreError>> {
        self.inner.forget_relayed(key, id, now)
    }
}
