//! The expiry sweep on a timer ([`ConfirmationEngine::run_sweeps`]): it runs on the engine's
//! clock, once per interval, warns about a confirmation once, and stops when told to. Driven by a
//! [`ManualClock`]: no real time passes and nothing is measured.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{Effect, SafeText};
use agent_surface_policy::{
    AuditKind, AuditSink, CallInfo, Clock, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine,
    ConfirmationGate, Consumer, Identity, ManualClock, MemoryAuditSink,
};
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

fn engine(clock: &Arc<ManualClock>, interval: Option<Duration>) -> Arc<ConfirmationEngine> {
    engine_with_audit(clock, interval, None)
}

fn engine_with_audit(
    clock: &Arc<ManualClock>,
    interval: Option<Duration>,
    audit: Option<Arc<MemoryAuditSink>>,
) -> Arc<ConfirmationEngine> {
    Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        audit: audit.map(|a| a as Arc<dyn AuditSink>),
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
    let engine = engine_with_audit(&clock, Some(Duration::from_secs(60)), Some(audit.clone()));
    request(&engine, &clock).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sweeps = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .run_sweeps(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
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
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sweeps = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .run_sweeps(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
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
