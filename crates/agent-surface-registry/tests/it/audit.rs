//! The audit trail of executions (phase 8a): started and finished events for capabilities with an
//! effect, strict audit refusing a call whose start cannot be recorded, and the confirmation
//! engine's events beside them in one sink.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_policy::{
    AuditConfig, AuditEvent, AuditKind, AuditOutcome, ConfirmationConfig, ConfirmationEngine, Consumer, Identity,
    ManualClock, MemoryAuditSink, confirmation::ConfirmationState, idempotency::Fingerprint,
};
use agent_surface_registry::{Ctx, InvokeOptions, Registry, RegistryConfig};
use agent_surface_testing::FlakyAuditSink;
use serde_json::{Value, json};

use crate::support::*;

struct Env {
    registry: Registry,
    runs: Arc<AtomicUsize>,
    /// Notified when `shop.slow`'s handler has started.
    slow_started: Arc<tokio::sync::Notify>,
    _mount: agent_surface_registry::Mount,
}

/// `shop.cancel` (destructive), `shop.strict_cancel` (destructive, strict audit), `shop.look`
/// (read), `shop.fail` (write; its handler fails), `shop.slow` (write; never finishes).
fn env(config: RegistryConfig) -> Env {
    let registry = Registry::new(config);
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, b, c) = (runs.clone(), runs.clone(), runs.clone());
    let slow_started = Arc::new(tokio::sync::Notify::new());
    let started = slow_started.clone();
    registry
        .define("shop", move |t| {
            t.capability("cancel", "Cancel an order.").effect(Effect::Destructive).handler(move |_c: Ctx, i: Value| {
                let runs = a.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(i)
                }
            });
            t.capability("strict_cancel", "Cancel an order, audited strictly.")
                .effect(Effect::Destructive)
                .strict_audit()
                .handler(move |_c: Ctx, i: Value| {
                    let runs = b.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, AgentSurfaceError>(i)
                    }
                });
            t.capability("look", "Look at an order.").effect(Effect::Read).strict_audit().handler(
                move |_c: Ctx, i: Value| {
                    let runs = c.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, AgentSurfaceError>(i)
                    }
                },
            );
            t.capability("fail", "Fail.").handler(|_c: Ctx, _i: Value| async move {
                Err::<Value, _>(AgentSurfaceError::internal(std::io::Error::other("SELECT secret FROM t")))
            });
            t.capability("slow", "Never finish.").handler(move |_c: Ctx, _i: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Ok::<_, AgentSurfaceError>(json!({}))
                }
            });
        })
        .unwrap();
    let mount = registry.mount("shop", "main").unwrap();
    Env { registry, runs, slow_started, _mount: mount }
}

fn audited(clock: &Arc<ManualClock>, sink: Arc<dyn agent_surface_policy::AuditSink>, strict: bool) -> RegistryConfig {
    RegistryConfig { audit: Some(AuditConfig { strict, ..AuditConfig::new(sink) }), ..config_with(clock) }
}

fn alice() -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated("session-1", Identity::new("alice")))
}

#[tokio::test]
async fn a_call_with_an_effect_records_its_start_and_its_end() {
    let clock = clock();
    let sink = Arc::new(MemoryAuditSink::default());
    let env = env(audited(&clock, sink.clone(), false));
    let input = json!({"order_id": "A-1", "token": "hunter2"});
    let inv =
        env.registry.invoke_detailed(call("shop.cancel", input.clone()).with_invocation_id("inv-1"), alice()).await;
    assert!(inv.result.output().is_some(), "{:?}", inv.result);
    // Read capabilities are not audited; a failure is recorded with its code, never its cause.
    env.registry.invoke_detailed(call("shop.look", json!({})), alice()).await;
    let failed = env.registry.invoke_detailed(call("shop.fail", json!({})), alice()).await;

    let events = sink.events();
    assert_eq!(sink.names(), ["execution.started", "execution.finished", "execution.started", "execution.finished"]);
    let (started, finished) = (&events[0], &events[1]);
    assert_eq!(started.kind, AuditKind::ExecutionStarted { effect: Effect::Destructive });
    assert_eq!(finished.kind, AuditKind::ExecutionFinished { outcome: AuditOutcome::Ok, code: None });
    for e in [started, finished] {
        assert_eq!((e.capability.as_str(), e.consumer.as_str()), ("shop.cancel", "session-1"));
        assert_eq!(e.principal.as_deref(), Some("alice"));
        assert_eq!(e.invocation_id.as_deref(), Some("inv-1"));
        // The registry's own id, never the caller's invocation id (which is recorded beside it).
        assert_eq!(e.correlation_id.as_deref(), Some(inv.correlation_id.to_string().as_str()));
        assert_eq!(e.input_digest, Some(Fingerprint::of(&input).to_string()));
        assert!(!serde_json::to_string(e).unwrap().contains("hunter2"), "never the input");
    }
    assert_eq!(
        events[3].kind,
        AuditKind::ExecutionFinished { outcome: AuditOutcome::Error, code: Some(ErrorCode::ExecutionFailed) }
    );
    // Without an invocation id, the generated correlation id ties the two events to the call.
    assert_eq!(events[2].invocation_id, None);
    assert_eq!(events[2].correlation_id.as_deref(), Some(failed.correlation_id.to_string().as_str()));
    assert_eq!(events[3].correlation_id, events[2].correlation_id);
    assert!(!serde_json::to_string(&events).unwrap().contains("SELECT"), "never the private cause");
}

#[tokio::test]
async fn strict_audit_refuses_a_call_whose_start_cannot_be_recorded() {
    let clock = clock();
    let sink = Arc::new(FlakyAuditSink::default());
    let env = env(audited(&clock, sink.clone(), true));
    sink.set_failing(true);
    let inv = env.registry.invoke_detailed(call("shop.cancel", json!({"order_id": "A-1"})), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.retry(), Retry::AfterDelay);
    assert_eq!(p.detail("reason"), Some(&json!("audit-unavailable")));
    assert_eq!(p.detail("transient"), Some(&json!(true)));
    assert_eq!(p.detail("retryAfterMs"), Some(&json!(1000)));
    assert!(!p.message().contains("test disk"), "{}", p.message());
    assert_eq!(env.runs.load(Ordering::SeqCst), 0, "the handler did not run");
    // A read capability is not audited, so strict audit does not stop it.
    let look = env.registry.invoke_detailed(call("shop.look", json!({})), alice()).await;
    assert!(look.result.output().is_some(), "{:?}", look.result);

    // Once the trail is back, a call with a fresh id runs.
    sink.set_failing(false);
    let inv = env.registry.invoke_detailed(call("shop.cancel", json!({"order_id": "A-1"})), alice()).await;
    assert!(inv.result.output().is_some(), "{:?}", inv.result);
    assert_eq!(env.runs.load(Ordering::SeqCst), 2);
    assert_eq!(sink.names(), ["execution.started", "execution.finished"]);
}

#[tokio::test]
async fn strict_audit_per_capability() {
    let clock = clock();
    // Not strict globally: a failed write is logged and the call runs …
    let sink = Arc::new(FlakyAuditSink::default());
    sink.set_failing(true);
    let env = env(audited(&clock, sink.clone(), false));
    let inv = env.registry.invoke_detailed(call("shop.cancel", json!({})), alice()).await;
    assert!(inv.result.output().is_some(), "{:?}", inv.result);
    // … but not a capability that asks for strict audit.
    let inv = env.registry.invoke_detailed(call("shop.strict_cancel", json!({})), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.detail("reason"), Some(&json!("audit-unavailable")));
    assert_eq!(env.runs.load(Ordering::SeqCst), 1);

    // Without any audit trail, a strictly audited capability never runs.
    let env = env_without_audit(&clock);
    let inv = env.registry.invoke_detailed(call("shop.strict_cancel", json!({})), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.detail("reason"), Some(&json!("audit-unavailable")));
    let inv = env.registry.invoke_detailed(call("shop.cancel", json!({})), alice()).await;
    assert!(inv.result.output().is_some());
    assert_eq!(env.runs.load(Ordering::SeqCst), 1);
}

fn env_without_audit(clock: &Arc<ManualClock>) -> Env {
    env(config_with(clock))
}

#[tokio::test]
async fn a_call_abandoned_mid_flight_is_recorded_as_abandoned() {
    let clock = clock();
    let sink = Arc::new(MemoryAuditSink::default());
    let env = env(audited(&clock, sink.clone(), false));
    let call_fut = env.registry.invoke_detailed(call("shop.slow", json!({})), alice());
    // The caller gives up while the handler runs.
    tokio::select! {
        _ = call_fut => panic!("the handler never finishes"),
        () = env.slow_started.notified() => {}
    }
    // The abandoned event is written by a task of its own.
    while sink.events().len() < 2 {
        tokio::task::yield_now().await;
    }
    let events = sink.events();
    assert_eq!(sink.names(), ["execution.started", "execution.finished"]);
    assert_eq!(events[1].kind, AuditKind::ExecutionFinished { outcome: AuditOutcome::Abandoned, code: None });
}

#[tokio::test]
async fn one_sink_holds_a_confirmation_and_the_execution_it_allowed() {
    let clock = clock();
    let sink = Arc::new(MemoryAuditSink::default());
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        audit: Some(sink.clone()),
        ..Default::default()
    }));
    let registry =
        Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..audited(&clock, sink.clone(), true) });
    registry
        .define("orders", |t| {
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Cancel order {}.", i["order_id"]))
                .handler(|_c: Ctx, i: Value| async move { Ok::<_, AgentSurfaceError>(i) });
        })
        .unwrap();
    let _mount = registry.mount("orders", "main").unwrap();
    let input = json!({"order_id": "A-7"});
    let first =
        registry.invoke_detailed(call("orders.cancel", input.clone()).with_invocation_id("inv-1"), alice()).await;
    let id = first.result.error_payload().unwrap().detail("confirmationId").unwrap().as_str().unwrap().to_string();
    engine.approve(&id, &Identity::new("manager")).await.unwrap();
    let second = registry
        .invoke_detailed(call("orders.cancel", input).with_invocation_id("inv-2").with_confirmation(&id), alice())
        .await;
    assert!(second.result.output().is_some(), "{:?}", second.result);

    let events = sink.events();
    assert_eq!(
        sink.names(),
        [
            "confirmation.requested",
            "confirmation.decided",
            "confirmation.consumed",
            "execution.started",
            "execution.finished"
        ]
    );
    assert_eq!(events[0].correlation_id.as_deref(), Some(first.correlation_id.to_string().as_str()));
    assert_eq!(events[0].invocation_id.as_deref(), Some("inv-1"));
    assert!(events.iter().all(|e: &AuditEvent| e.confirmation_id.as_deref() == Some(id.as_str())));
    assert!(events.iter().all(|e| e.input_digest == events[0].input_digest));
    assert_eq!(events[3].invocation_id.as_deref(), Some("inv-2"));
}

/// A registry whose calls are strictly audited to `trail`, with a confirmation engine (writing
/// its own events to `engine_trail`) in `mode`, and `orders.cancel` (destructive, gated).
struct Gated<S = FlakyAuditSink> {
    registry: Registry,
    engine: Arc<ConfirmationEngine>,
    trail: Arc<S>,
    engine_trail: Arc<MemoryAuditSink>,
    runs: Arc<AtomicUsize>,
    _mount: agent_surface_registry::Mount,
}

fn gated(mode: agent_surface_policy::ConfirmationMode) -> Gated {
    gated_to(mode, Arc::new(FlakyAuditSink::default()))
}

fn gated_to<S: agent_surface_policy::AuditSink>(
    mode: agent_surface_policy::ConfirmationMode,
    trail: Arc<S>,
) -> Gated<S> {
    let clock = clock();
    let engine_trail = Arc::new(MemoryAuditSink::default());
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        audit: Some(engine_trail.clone()),
        mode,
        ..Default::default()
    }));
    let registry =
        Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..audited(&clock, trail.clone(), true) });
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("orders", move |t| {
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Cancel order {}.", i["order_id"]))
                .handler(move |_c: Ctx, i: Value| {
                    let runs = counted.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, AgentSurfaceError>(i)
                    }
                });
        })
        .unwrap();
    let mount = registry.mount("orders", "main").unwrap();
    Gated { registry, engine, trail, engine_trail, runs, _mount: mount }
}

/// The strict audit refusal: the call did not run, and may be retried after a delay.
fn refused_by_strict_audit(inv: &agent_surface_registry::Invocation) {
    let p = assert_produced(inv, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.detail("reason"), Some(&json!("audit-unavailable")));
    assert_eq!(p.retry(), Retry::AfterDelay);
}

fn confirmation_id(inv: &agent_surface_registry::Invocation) -> String {
    let p = assert_produced(inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string()
}

/// Strict audit refuses a call after its confirmation was consumed: the approval is given back,
/// so the retry with the same evidence runs — exactly once —, and the engine's trail shows the
/// consumption, its reinstatement and the retry's consumption.
#[tokio::test]
async fn strict_audit_gives_back_the_approval_of_a_call_it_refused() {
    let g = gated(agent_surface_policy::ConfirmationMode::TwoPhase);
    let input = json!({"order_id": "A-9"});
    let id = confirmation_id(&g.registry.invoke_detailed(call("orders.cancel", input.clone()), alice()).await);
    g.engine.approve(&id, &Identity::new("manager")).await.unwrap();

    g.trail.set_failing(true);
    let with_id = || call("orders.cancel", input.clone()).with_confirmation(&id);
    let refused = g.registry.invoke_detailed(with_id().with_invocation_id("inv-1"), alice()).await;
    refused_by_strict_audit(&refused);
    assert_eq!(g.runs.load(Ordering::SeqCst), 0, "the handler did not run");
    let record = g.engine.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "manager".into() }, "the approval is given back");

    // Still failing: refused again, and given back again.
    let again = g.registry.invoke_detailed(with_id(), alice()).await;
    refused_by_strict_audit(&again);

    // The refused call's invocation id replays its refusal (the message asks for a fresh one);
    // the retry after the delay under a fresh id runs.
    g.trail.set_failing(false);
    let replayed = g.registry.invoke_detailed(with_id().with_invocation_id("inv-1"), alice()).await;
    assert!(replayed.replayed, "{replayed:?}");
    assert_eq!(replayed.result.code(), Some(ErrorCode::ExecutionFailed));
    assert_eq!(g.runs.load(Ordering::SeqCst), 0);
    let ran = g.registry.invoke_detailed(with_id().with_invocation_id("inv-3"), alice()).await;
    assert!(ran.result.output().is_some(), "{:?}", ran.result);
    assert_eq!(g.runs.load(Ordering::SeqCst), 1, "the retry ran once");
    let spent = g.registry.invoke_detailed(with_id(), alice()).await;
    let p = assert_produced(&spent, ErrorCode::ConfirmationInvalid, Phase::Confirmation);
    assert_eq!(p.detail("reason"), Some(&json!("consumed")), "one approval, one run");
    assert_eq!(g.runs.load(Ordering::SeqCst), 1);

    assert_eq!(
        g.engine_trail.names(),
        [
            "confirmation.requested",
            "confirmation.decided",
            "confirmation.consumed",
            "confirmation.reinstated",
            "confirmation.consumed",
            "confirmation.reinstated",
            "confirmation.consumed",
        ]
    );
    let reinstated = &g.engine_trail.events()[3];
    assert_eq!(reinstated.kind, AuditKind::ConfirmationReinstated);
    assert_eq!(reinstated.confirmation_id.as_deref(), Some(id.as_str()));
    assert_eq!(reinstated.invocation_id.as_deref(), Some("inv-1"), "the reinstatement names the refused call");
    assert_eq!(reinstated.input_digest, Some(Fingerprint::of(&input).to_string()));
    // The registry's trail: the run's start names the confirmation it used.
    let started = g.trail.events().into_iter().find(|e| e.name() == "execution.started").unwrap();
    assert_eq!(started.confirmation_id.as_deref(), Some(id.as_str()));
    assert_eq!(started.invocation_id.as_deref(), Some("inv-3"));
}

/// Approval on repeat: the model repeats the call without the id; the repeat refused by strict
/// audit gives the approval back, and the next repeat (still without an id) uses it, once.
#[tokio::test]
async fn strict_audit_gives_back_a_relayed_approval() {
    let g = gated(agent_surface_policy::ConfirmationMode::TwoPhase);
    let input = json!({"order_id": "A-10"});
    let repeat = || g.registry.invoke_detailed(call("orders.cancel", input.clone()), alice());
    let id = confirmation_id(&repeat().await);
    g.engine.approve(&id, &Identity::new("manager")).await.unwrap();

    g.trail.set_failing(true);
    refused_by_strict_audit(&repeat().await);
    assert_eq!(g.runs.load(Ordering::SeqCst), 0, "the handler did not run");
    g.trail.set_failing(false);
    let ran = repeat().await;
    assert!(ran.result.output().is_some(), "{:?}", ran.result);
    assert_eq!(g.runs.load(Ordering::SeqCst), 1);
    let started = g.trail.events().into_iter().find(|e| e.name() == "execution.started").unwrap();
    assert_eq!(started.confirmation_id.as_deref(), Some(id.as_str()), "the relayed confirmation it used");
    // The approval is spent: the next repeat asks afresh.
    let fresh = confirmation_id(&repeat().await);
    assert_ne!(fresh, id);
    assert_eq!(g.runs.load(Ordering::SeqCst), 1);
}

/// Wait mode: the person approved while the call waited, strict audit refused it; the caller
/// never saw an id, and its retry runs on the same approval without asking the person again.
#[tokio::test]
async fn strict_audit_gives_back_an_approval_given_while_the_call_waited() {
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = reviews.clone();
    let approver = agent_surface_policy::FnApprover::new(move |_record| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok(agent_surface_policy::Review::Approve { approver: Identity::new("manager") }) }
    });
    let g = gated(agent_surface_policy::ConfirmationMode::Wait {
        approver: Arc::new(approver),
        timeout: std::time::Duration::from_secs(60),
    });
    let input = json!({"order_id": "A-11"});
    let attempt = || g.registry.invoke_detailed(call("orders.cancel", input.clone()), alice());

    g.trail.set_failing(true);
    refused_by_strict_audit(&attempt().await);
    assert_eq!((g.runs.load(Ordering::SeqCst), reviews.load(Ordering::SeqCst)), (0, 1));
    g.trail.set_failing(false);
    let ran = attempt().await;
    assert!(ran.result.output().is_some(), "{:?}", ran.result);
    assert_eq!(g.runs.load(Ordering::SeqCst), 1, "the retry ran once");
    assert_eq!(reviews.load(Ordering::SeqCst), 1, "on the approval given before: nobody was asked again");
    assert_eq!(
        g.engine_trail.names(),
        [
            "confirmation.requested",
            "confirmation.decided",
            "confirmation.consumed",
            "confirmation.reinstated",
            "confirmation.consumed",
        ]
    );
    // Another attempt needs another approval.
    let third = attempt().await;
    assert!(third.result.output().is_some(), "{:?}", third.result);
    assert_eq!((g.runs.load(Ordering::SeqCst), reviews.load(Ordering::SeqCst)), (2, 2));
}

/// Strict audit asked for a capability in a registry without a trail refuses the call after its
/// confirmation: the approval is given back too (the call never ran).
#[tokio::test]
async fn a_missing_trail_gives_back_the_approval() {
    let clock = clock();
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ..Default::default() }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(&clock) });
    registry
        .define("orders", |t| {
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .strict_audit()
                .confirm(|_: &Value| "Cancel it.")
                .handler(|_c: Ctx, i: Value| async move { Ok::<_, AgentSurfaceError>(i) });
        })
        .unwrap();
    let _mount = registry.mount("orders", "main").unwrap();
    let input = json!({"order_id": "A-12"});
    let id = confirmation_id(&registry.invoke_detailed(call("orders.cancel", input.clone()), alice()).await);
    engine.approve(&id, &Identity::new("manager")).await.unwrap();
    let refused = registry.invoke_detailed(call("orders.cancel", input).with_confirmation(&id), alice()).await;
    refused_by_strict_audit(&refused);
    let record = engine.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "manager".into() });
}

/// An audit sink whose writes hang while told to (the registry's budget runs on a manual clock
/// nobody advances, so a hanging write never ends), telling when one started.
#[derive(Debug, Default)]
struct HangingSink {
    inner: MemoryAuditSink,
    hang: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
}

impl agent_surface_policy::AuditSink for HangingSink {
    fn record<'a>(
        &'a self,
        event: &'a AuditEvent,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
        if self.hang.load(Ordering::SeqCst) {
            self.entered.notify_one();
            return Box::pin(std::future::pending());
        }
        self.inner.record(event)
    }
}

/// The caller goes away while strict audit writes the call's start: the handler never started,
/// so the approval is given back (by a task of its own), and the retry runs on it once.
#[tokio::test]
async fn a_call_dropped_before_its_start_is_recorded_gives_back_the_approval() {
    let g = gated_to(agent_surface_policy::ConfirmationMode::TwoPhase, Arc::new(HangingSink::default()));
    let input = json!({"order_id": "A-13"});
    let id = confirmation_id(&g.registry.invoke_detailed(call("orders.cancel", input.clone()), alice()).await);
    g.engine.approve(&id, &Identity::new("manager")).await.unwrap();

    g.trail.hang.store(true, Ordering::SeqCst);
    let with_id = || call("orders.cancel", input.clone()).with_confirmation(&id);
    tokio::select! {
        inv = g.registry.invoke_detailed(with_id(), alice()) => panic!("the start never gets recorded: {inv:?}"),
        () = g.trail.entered.notified() => {}
    }
    // The call's future is gone; the give-back runs on a task of its own.
    let approved = ConfirmationState::Approved { by: "manager".into() };
    let mut state = g.engine.get(&id).await.unwrap().unwrap().state;
    for _ in 0..10_000 {
        if state == approved {
            break;
        }
        tokio::task::yield_now().await;
        state = g.engine.get(&id).await.unwrap().unwrap().state;
    }
    assert_eq!(state, approved, "the approval is given back");
    assert_eq!(g.runs.load(Ordering::SeqCst), 0);
    assert!(g.engine_trail.names().contains(&"confirmation.reinstated"));

    g.trail.hang.store(false, Ordering::SeqCst);
    let ran = g.registry.invoke_detailed(with_id(), alice()).await;
    assert!(ran.result.output().is_some(), "{:?}", ran.result);
    assert_eq!(g.runs.load(Ordering::SeqCst), 1);
}

/// A sink that records into `inner`, and fires `cancel` when it records an execution's start: the
/// caller gives up while the pipeline awaits the trail.
#[derive(Debug)]
struct CancellingSink {
    inner: MemoryAuditSink,
    cancel: tokio_util::sync::CancellationToken,
}

impl agent_surface_policy::AuditSink for CancellingSink {
    fn record<'a>(
        &'a self,
        event: &'a AuditEvent,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
        if matches!(event.kind, AuditKind::ExecutionStarted { .. }) {
            self.cancel.cancel();
        }
        self.inner.record(event)
    }
}

/// A caller that cancels while phase 8a records the start: the handler of a destructive
/// capability is not started, and the answer says `CANCELLED` and `notProcessed` — not an
/// unknown outcome, which would send the agent to check for an effect that never happened.
#[tokio::test]
async fn a_call_cancelled_before_its_handler_starts_is_cancelled_not_unknown() {
    let clock = clock();
    let cancel = tokio_util::sync::CancellationToken::new();
    let sink = Arc::new(CancellingSink { inner: MemoryAuditSink::default(), cancel: cancel.clone() });
    let env = env(audited(&clock, sink.clone(), false));
    let options = alice().with_cancellation(cancel);
    let inv = env.registry.invoke_detailed(call("shop.cancel", json!({"order_id": "A-1"})), options).await;
    assert_produced_before_handler(&inv, ErrorCode::Cancelled, Phase::Execute);
    assert_eq!(env.runs.load(Ordering::SeqCst), 0, "the handler did not run");
    assert_eq!(
        sink.inner.events()[1].kind,
        AuditKind::ExecutionFinished { outcome: AuditOutcome::Error, code: Some(ErrorCode::Cancelled) }
    );
}

/// A sink that yields a few times (its own count, cycling) before it records: the call awaits
/// the trail across several polls, so that a cancellation from another thread can land between
/// any two of them.
#[derive(Debug, Default)]
struct YieldingSink {
    inner: MemoryAuditSink,
    turn: AtomicUsize,
}

impl agent_surface_policy::AuditSink for YieldingSink {
    fn record<'a>(
        &'a self,
        event: &'a AuditEvent,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
        let yields = self.turn.fetch_add(1, Ordering::Relaxed) % 4;
        Box::pin(async move {
            for _ in 0..yields {
                tokio::task::yield_now().await;
            }
            self.inner.record(event).await
        })
    }
}

/// Whenever its caller cancels, on another thread and at any point of an approved call, an
/// approval is spent by a call whose handler ran and by no other: a call that ran answers its
/// output and leaves the approval consumed; one that did not answers `CANCELLED` with
/// `notProcessed` and leaves it approved, for its retry. (Phase 8 checks a call that consumed
/// evidence once, before the evidence is kept: a second check after it could stop the call with
/// the approval spent and nothing run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_spent_only_by_a_call_that_ran_whenever_its_caller_cancels() {
    let g = gated_to(agent_surface_policy::ConfirmationMode::TwoPhase, Arc::new(YieldingSink::default()));
    let (mut ran, mut stopped) = (0, 0);
    for i in 0..400usize {
        let input = json!({"order_id": format!("A-{i}")});
        let id = confirmation_id(&g.registry.invoke_detailed(call("orders.cancel", input.clone()), alice()).await);
        g.engine.approve(&id, &Identity::new("manager")).await.unwrap();
        let before = g.runs.load(Ordering::SeqCst);

        let cancel = tokio_util::sync::CancellationToken::new();
        let registry = g.registry.clone();
        let request = call("orders.cancel", input).with_confirmation(&id);
        let options = alice().with_cancellation(cancel.clone());
        let invoked = tokio::spawn(async move { registry.invoke_detailed(request, options).await });
        let delay = i % 24;
        tokio::spawn(async move {
            for _ in 0..delay {
                tokio::task::yield_now().await;
            }
            cancel.cancel();
        });
        let inv = invoked.await.unwrap();

        let handler_ran = g.runs.load(Ordering::SeqCst) - before;
        let state = g.engine.get(&id).await.unwrap().unwrap().state;
        if handler_ran == 1 {
            ran += 1;
            assert!(inv.result.output().is_some(), "call {i}: the handler ran, so its output: {:?}", inv.result);
            assert_eq!(state, ConfirmationState::Consumed { approved_by: "manager".into() }, "call {i}");
        } else {
            stopped += 1;
            assert_eq!(handler_ran, 0, "call {i}");
            let p = inv.result.error_payload().unwrap_or_else(|| panic!("call {i}: {:?}", inv.result));
            assert_eq!(p.code(), ErrorCode::Cancelled, "call {i}: {p:?}");
            assert!(p.not_processed(), "call {i}: nothing ran, and the answer says so");
            assert_eq!(state, ConfirmationState::Approved { by: "manager".into() }, "call {i}: given back");
        }
    }
    // Both outcomes met, or the cancellations landed nowhere that matters.
    assert!(ran > 0 && stopped > 0, "ran {ran}, stopped {stopped}");
}
