//! The audit trail of executions (phase 8a): started and finished events for capabilities with an
//! effect, strict audit refusing a call whose start cannot be recorded, and the confirmation
//! engine's events beside them in one sink.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_policy::{
    AuditConfig, AuditEvent, AuditKind, AuditOutcome, ConfirmationConfig, ConfirmationEngine, Consumer, Fingerprint,
    Identity, ManualClock, MemoryAuditSink,
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
        assert_eq!(e.correlation_id.as_deref(), Some("inv-1"));
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
    assert_eq!(events[0].correlation_id.as_deref(), Some("inv-1"));
    assert!(events.iter().all(|e: &AuditEvent| e.confirmation_id.as_deref() == Some(id.as_str())));
    assert!(events.iter().all(|e| e.input_digest == events[0].input_digest));
    assert_eq!(events[3].invocation_id.as_deref(), Some("inv-2"));
}
