//! The expiry sweep on a timer ([`ConfirmationEngine::run_sweeps`]): it runs on the engine's
//! clock, once per interval, warns about a confirmation once, and stops when told to. Driven by a
//! [`ManualClock`]: no real time passes and nothing is measured.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{Effect, SafeText};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agent_surface_policy::{
    AuditError, AuditEvent, AuditKind, AuditSink, CallInfo, Clock, ConfirmationConfig, ConfirmationDecision,
    ConfirmationEngine, ConfirmationGate, ConfirmationRecord, ConfirmationStore, Consumer, Identity, ManualClock,
    MemoryAuditSink, MemoryConfirmationStore, StoreError,
    confirmation::{ApprovalVerdict, ConfirmationBinding, ConfirmationState, Consumed, Decided, Rejection},
};
use agent_surface_testing::FlakyAuditSink;
use futures_util::future::BoxFuture;
use serde_json::json;

/// Lets the sweep task run until it has armed its next sleep (it has finished a round, or
/// started); fails if it never does.
async fn settle(clock: &ManualClock) {
    for _ in 0..10_000 {
        if clock.pending_sleeps() == 1 {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the sweep task never armed its next round");
}

/// Runs `engine`'s sweeps on a task until the returned sender fires (or is dropped).
fn spawn_sweeps(
    engine: &Arc<ConfirmationEngine>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<agent_surface_policy::confirmation::SweepStats>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let engine = engine.clone();
    let sweeps = tokio::spawn(async move {
        engine
            .run_sweeps(async {
                let _ = stopped.await;
            })
            .await
    });
    (stop, sweeps)
}

fn engine(clock: &Arc<ManualClock>, interval: Option<Duration>) -> Arc<ConfirmationEngine> {
    engine_with_audit(clock, interval, None)
}

fn engine_with_audit(
    clock: &Arc<ManualClock>,
    interval: Option<Duration>,
    audit: Option<Arc<dyn AuditSink>>,
) -> Arc<ConfirmationEngine> {
    Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        audit,
        ttl: Duration::from_secs(10 * 60),
        expiry_warning: Some(Duration::from_secs(2 * 60)),
        sweep_interval: interval,
        ..Default::default()
    }))
}

async fn request(engine: &ConfirmationEngine, clock: &ManualClock) {
    let consumer = Consumer::authenticated("session-1", Identity::new("alice"));
    let input = json!({"amount": 5});
    let summary = SafeText::from("Refund.");
    let info = CallInfo::new(&consumer, "orders.refund", "orders", Effect::External, false)
        .with_instance("main")
        .with_registration("r-1")
        .with_input(&input)
        .with_declared_gate(Some(&summary));
    let decision = engine.check(info, None, clock.now()).await;
    assert!(matches!(decision, ConfirmationDecision::Required { .. }), "{decision:?}");
}

#[tokio::test]
async fn the_sweep_runs_every_interval_on_the_engine_clock_until_stopped() {
    let clock = Arc::new(ManualClock::default());
    let audit = Arc::new(MemoryAuditSink::default());
    let engine = engine_with_audit(&clock, Some(Duration::from_secs(60)), Some(audit.clone() as Arc<dyn AuditSink>));
    request(&engine, &clock).await;
    let (stop, sweeps) = spawn_sweeps(&engine);
    settle(&clock).await;
    // Seven rounds with three or more minutes left (outside the two-minute lead), an eighth with
    // two minutes left (the warning), a ninth that finds it warned already, a tenth at the
    // deadline and an eleventh past it (the expiry, recorded though nobody touched it).
    for _ in 0..11 {
        clock.advance(Duration::from_secs(60));
        assert_eq!(clock.pending_sleeps(), 0, "the round's sleep came due");
        settle(&clock).await;
    }
    stop.send(()).unwrap();
    let stats = sweeps.await.unwrap();
    assert_eq!((stats.rounds, stats.warned, stats.failed), (11, 1, 0), "{stats:?}");
    let events = audit.recent(100).await.unwrap();
    let expired = events.iter().filter(|e| matches!(e.kind, AuditKind::ConfirmationExpired)).count();
    assert_eq!(expired, 1, "{events:?}");
    assert_eq!(clock.pending_sleeps(), 0, "stopping dropped the next round's sleep");
}

#[tokio::test]
async fn without_an_interval_it_only_waits_to_be_stopped() {
    let clock = Arc::new(ManualClock::default());
    let engine = engine(&clock, None);
    let (stop, sweeps) = spawn_sweeps(&engine);
    tokio::task::yield_now().await;
    assert_eq!(clock.pending_sleeps(), 0, "no timer");
    stop.send(()).unwrap();
    assert_eq!(sweeps.await.unwrap().rounds, 0);
}

/// The engine's `ConfirmationGate::run_periodic` is its sweep (what the serve helpers run).
#[tokio::test]
async fn the_gate_periodic_work_is_the_sweep() {
    let clock = Arc::new(ManualClock::default());
    let engine = engine(&clock, Some(Duration::from_secs(60)));
    let gate: Arc<dyn ConfirmationGate> = engine.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let work = tokio::spawn(async move {
        gate.run_periodic(Box::pin(async {
            let _ = stopped.await;
        }))
        .await
    });
    settle(&clock).await;
    clock.advance(Duration::from_secs(60));
    settle(&clock).await;
    stop.send(()).unwrap();
    work.await.unwrap();
    assert_eq!(clock.pending_sleeps(), 0);
}

/// A sink that never answers while `hanging` (counting the writes it holds), and keeps the
/// events otherwise.
#[derive(Debug, Default)]
struct HangingSink {
    inner: MemoryAuditSink,
    hanging: AtomicBool,
    held: AtomicUsize,
}

impl AuditSink for HangingSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        if self.hanging.load(Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            return Box::pin(std::future::pending());
        }
        self.inner.record(event)
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        self.inner.recent(limit)
    }
}

fn expired_events(events: &[AuditEvent]) -> usize {
    events.iter().filter(|e| matches!(e.kind, AuditKind::ConfirmationExpired)).count()
}

/// A round stuck on an audit write that never answers (the engine's clock stands still, so its
/// budget never runs out) ends when the sweep is stopped; the expiry it claimed is not lost: the
/// engine's next sweep writes it.
#[tokio::test]
async fn stopping_drops_a_round_stuck_on_the_audit_sink_and_keeps_its_claimed_expiry() {
    let clock = Arc::new(ManualClock::default());
    let sink = Arc::new(HangingSink::default());
    let engine =
        engine_with_audit(&clock, Some(Duration::from_secs(60 * 60)), Some(sink.clone() as Arc<dyn AuditSink>));
    request(&engine, &clock).await;
    sink.hanging.store(true, Ordering::SeqCst);
    let (stop, sweeps) = spawn_sweeps(&engine);
    settle(&clock).await;
    clock.advance(Duration::from_secs(60 * 60)); // the first round, past the deadline
    for _ in 0..10_000 {
        if sink.held.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(sink.held.load(Ordering::SeqCst), 1, "the round is writing the expiry");
    stop.send(()).unwrap();
    for _ in 0..10_000 {
        if sweeps.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(sweeps.is_finished(), "the sweep stops while the sink still holds the write");
    let stats = sweeps.await.unwrap();
    assert_eq!((stats.rounds, stats.failed), (1, 0), "{stats:?}");
    assert_eq!(expired_events(&sink.inner.events()), 0);

    sink.hanging.store(false, Ordering::SeqCst);
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 1, "the kept event is written");
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 0, "and only once");
    assert_eq!(expired_events(&sink.inner.events()), 1, "{:?}", sink.inner.names());
}

/// An expiry whose event the sink refuses stays with the engine that claimed it, and its next
/// sweep writes it once the sink recovers — once, though the store's claim is spent.
#[tokio::test]
async fn a_refused_expiry_event_is_written_when_the_sink_recovers() {
    let clock = Arc::new(ManualClock::default());
    let sink = Arc::new(FlakyAuditSink::default());
    let store = Arc::new(MemoryConfirmationStore::default());
    let config = ConfirmationConfig {
        clock: clock.clone(),
        store: store.clone(),
        audit: Some(sink.clone() as Arc<dyn AuditSink>),
        ttl: Duration::from_secs(10 * 60),
        ..Default::default()
    };
    let engine = ConfirmationEngine::new(config.clone());
    request(&engine, &clock).await;
    request(&engine, &clock).await; // the same call: one confirmation
    let other = ConfirmationEngine::new(config);
    clock.advance(Duration::from_secs(11 * 60));
    sink.set_failing(true);
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 0);
    assert_eq!(sink.refused(), 1);
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 0, "still refused");
    assert_eq!(sink.refused(), 2, "the kept event is tried again");
    sink.set_failing(false);
    assert_eq!(other.sweep_expired(10).await.unwrap(), 0, "claimed: another engine does not write it");
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 1, "written on recovery");
    assert_eq!(engine.sweep_expired(10).await.unwrap(), 0);
    let events = sink.events();
    assert_eq!(expired_events(&events), 1, "{:?}", sink.names());
    let expired = events.iter().find(|e| matches!(e.kind, AuditKind::ConfirmationExpired)).unwrap();
    assert!(expired.confirmation_id.is_some(), "{expired:?}");
}

/// A memory store whose expired listing fails while `failing`.
#[derive(Debug, Default)]
struct NoExpiredListing(MemoryConfirmationStore, AtomicBool);

impl ConfirmationStore for NoExpiredListing {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn insert<'a>(
        &'a self,
        record: ConfirmationRecord,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.insert(record, now)
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a agent_surface_policy::confirmation::RelayKey,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::confirmation::Inserted, StoreError>> {
        self.0.insert_relayed(record, key, now)
    }

    fn get<'a>(
        &'a self,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        self.0.get(id, now)
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        self.0.decide(id, verdict, approver, now)
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        self.0.consume(id, expected, now)
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        self.0.withdraw(id, now)
    }

    fn list_pending<'a>(
        &'a self,
        now: agent_surface_core::Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        self.0.list_pending(now, limit)
    }

    fn list_expired<'a>(
        &'a self,
        now: agent_surface_core::Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        if self.1.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(StoreError::Unavailable("listing refused".into()))));
        }
        self.0.list_expired(now, limit)
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: agent_surface_policy::confirmation::SlotSet,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        self.0.decide_in_slots(id, verdict, approver, slots, now)
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: agent_surface_core::Timestamp,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.0.claim_expiry(id, until, now)
    }

    fn expiry_recorded<'a>(
        &'a self,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.expiry_recorded(id, now)
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.0.reinstate(id, expected, token, now)
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a agent_surface_policy::confirmation::RelayKey,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.remember_relayed(key, id, now)
    }

    fn relayed<'a>(
        &'a self,
        key: &'a agent_surface_policy::confirmation::RelayKey,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.0.relayed(key, now)
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a agent_surface_policy::confirmation::RelayKey,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.forget_relayed(key, id, now)
    }
}

/// A failed expired listing does not skip the round's warnings; the round still reports it.
#[tokio::test]
async fn a_failed_expired_listing_does_not_skip_the_warnings() {
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(NoExpiredListing::default());
    let engine = ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        store: store.clone(),
        ttl: Duration::from_secs(10 * 60),
        expiry_warning: Some(Duration::from_secs(2 * 60)),
        ..Default::default()
    });
    request(&engine, &clock).await;
    clock.advance(Duration::from_secs(9 * 60));
    store.1.store(true, Ordering::SeqCst);
    assert!(engine.sweep_expiring(10).await.is_err(), "the listing's failure is reported");
    store.1.store(false, Ordering::SeqCst);
    // The failed round warned: the next one finds it warned already.
    assert_eq!(engine.sweep_expiring(10).await.unwrap(), 0);
}

/// A sweep that stops while it holds an expiry event the sink refused logs it at `ERROR`, for an
/// operator to reconcile (the engine holds it in memory only).
#[test]
fn stopping_logs_the_expiry_events_still_unwritten() {
    let ((), log) = agent_surface_testing::capture_operator_log(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let clock = Arc::new(ManualClock::default());
            let sink = Arc::new(FlakyAuditSink::default());
            let engine =
                engine_with_audit(&clock, Some(Duration::from_secs(60 * 60)), Some(sink.clone() as Arc<dyn AuditSink>));
            request(&engine, &clock).await;
            sink.set_failing(true);
            let (stop, sweeps) = spawn_sweeps(&engine);
            settle(&clock).await;
            clock.advance(Duration::from_secs(60 * 60));
            settle(&clock).await; // the round ended: the sink refused its expiry
            assert_eq!(sink.refused(), 1);
            stop.send(()).unwrap();
            assert_eq!(sweeps.await.unwrap().rounds, 1);
        });
    });
    assert!(log.contains("confirmation.expired event not written; kept for the next sweep"), "{log}");
    assert!(
        log.contains("ERROR") && log.contains("expiry sweep stopped with confirmation.expired events unwritten"),
        "{log}"
    );
    assert!(log.contains("count=1"), "{log}");
}

/// Expiry events at least once (#26): an engine stopped mid-round — its claim landed, its write
/// never did (the engine is gone, and its backlog with it) — leaves a claim that lapses; another
/// engine sharing the store lists the expiry again once it has, claims it and writes the event,
/// and then nobody writes it again.
#[tokio::test]
async fn an_expiry_claimed_by_an_engine_that_stopped_is_written_by_another() {
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryConfirmationStore::default());
    let config = |audit: Arc<dyn AuditSink>| ConfirmationConfig {
        clock: clock.clone(),
        store: store.clone(),
        audit: Some(audit),
        ttl: Duration::from_secs(10 * 60),
        ..Default::default()
    };
    let stuck = Arc::new(HangingSink::default());
    let first = ConfirmationEngine::new(config(stuck.clone()));
    let trail = Arc::new(MemoryAuditSink::default());
    let second = ConfirmationEngine::new(config(trail.clone()));
    request(&first, &clock).await;
    clock.advance(Duration::from_secs(11 * 60));

    // The first engine claims the expiry and hangs writing it; then it stops, sweep and all.
    stuck.hanging.store(true, Ordering::SeqCst);
    {
        let round = first.sweep_expired(10);
        tokio::pin!(round);
        for _ in 0..10_000 {
            if stuck.held.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::select! {
                done = &mut round => panic!("the round cannot end while its write hangs: {done:?}"),
                () = tokio::task::yield_now() => {}
            }
        }
        assert_eq!(stuck.held.load(Ordering::SeqCst), 1, "the claim landed and the write began");
    }
    drop(first);

    // While the claim holds, the other engine leaves the expiry alone.
    assert_eq!(second.sweep_expired(10).await.unwrap(), 0, "claimed: not written twice meanwhile");
    clock.advance(agent_surface_policy::confirmation::EXPIRY_CLAIM_LEASE);
    assert_eq!(second.sweep_expired(10).await.unwrap(), 1, "the lapsed claim is taken and the event written");
    assert_eq!(second.sweep_expired(10).await.unwrap(), 0, "recorded: once");
    clock.advance(agent_surface_policy::confirmation::EXPIRY_CLAIM_LEASE);
    let third = ConfirmationEngine::new(config(trail.clone()));
    assert_eq!(third.sweep_expired(10).await.unwrap(), 0, "recorded for good, for every engine");
    assert_eq!(expired_events(&trail.events()), 1, "{:?}", trail.names());
}
