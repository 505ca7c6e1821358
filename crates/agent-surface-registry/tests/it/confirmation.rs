//! Phase 7 with the real confirmation engine: two-phase and wait modes, single-use evidence
//! bound to the call, the host's approval API, expiry on a manual clock, and fail-closed paths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry, SafeText, Timestamp};
use agent_surface_policy::{
    ApprovalError, Clock, ConfirmationConfig, ConfirmationEngine, ConfirmationMode, ConfirmationRecord,
    ConfirmationStore, Consumer, FnApprover, FnConfirmationPolicy, Gate, Identity, ManualClock, PolicyError, Review,
    StoreError,
    confirmation::{ApprovalVerdict, ConfirmationBinding, ConfirmationState, Consumed, Decided, Rejection},
};
use agent_surface_registry::{Ctx, Invocation, InvokeOptions, InvokeRequest, Registry, RegistryConfig, Target};
use futures_util::future::BoxFuture;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Deserialize, JsonSchema)]
struct Refund {
    order_id: String,
    amount_cents: u64,
}

const TTL: Duration = Duration::from_secs(600);

struct Env {
    clock: Arc<ManualClock>,
    engine: Arc<ConfirmationEngine>,
    registry: Registry,
    runs: Arc<AtomicUsize>,
    _mounts: Vec<agent_surface_registry::Mount>,
}

fn define_orders(r: &Registry, runs: &Arc<AtomicUsize>) {
    let (refunds, cancels) = (runs.clone(), runs.clone());
    let notes = runs.clone();
    r.define("orders", move |t| {
        t.capability("refund", "Refund part of an order.")
            .effect(Effect::External)
            .confirm(|i: &Refund| format!("Refund {} cents on order {}.", i.amount_cents, i.order_id))
            .handler(move |_c: Ctx, i: Refund| {
                let runs = refunds.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    // Yield so that concurrent retries overlap with this call.
                    for _ in 0..5 {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, AgentSurfaceError>(json!({"refunded": i.amount_cents}))
                }
            });
        t.capability("cancel", "Cancel an order.")
            .effect(Effect::Destructive)
            .confirm(|i: &Refund| SafeText::trusted(format!("Cancel order {}.", i.order_id)))
            .handler(move |_c: Ctx, i: Refund| {
                let runs = cancels.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"cancelled": i.order_id}))
                }
            });
        t.capability("adjust", "Adjust an order's total (gated per call by policy).").handler(
            move |_c: Ctx, i: Refund| {
                let runs = notes.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"adjusted": i.amount_cents}))
                }
            },
        );
        t.capability("faulty", "A gate whose summary is broken.")
            .confirm(|_i: &Value| -> String { panic!("summary bug at src/orders.rs:7") })
            .handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
    })
    .unwrap();
}

fn env_with(config: impl FnOnce(&Arc<ManualClock>) -> ConfirmationConfig) -> Env {
    let clock = clock();
    let engine = Arc::new(ConfirmationEngine::new(config(&clock)));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(&clock) });
    let runs = Arc::new(AtomicUsize::new(0));
    define_orders(&registry, &runs);
    let mounts = vec![registry.mount("orders", "main").unwrap(), registry.mount("orders", "branch").unwrap()];
    Env { clock, engine, registry, runs, _mounts: mounts }
}

fn two_phase() -> Env {
    env_with(|clock| ConfirmationConfig { clock: clock.clone(), ttl: TTL, ..Default::default() })
}

fn alice() -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated("session-1", Identity::new("alice")))
}

fn manager() -> Identity {
    Identity::new("manager")
}

fn refund(amount: u64) -> InvokeRequest {
    call("orders.refund", json!({"order_id": "A-1", "amount_cents": amount})).with_target(Target::instance("main"))
}

impl Env {
    async fn invoke(&self, request: InvokeRequest, options: InvokeOptions) -> Invocation {
        self.registry.invoke_detailed(request, options).await
    }

    /// Requests a confirmation and returns its id.
    async fn request(&self, request: InvokeRequest, options: InvokeOptions) -> String {
        let inv = self.invoke(request, options).await;
        let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
        p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string()
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[track_caller]
fn assert_invalid(inv: &Invocation, reason: &str, retry: Retry) {
    let p = assert_produced(inv, ErrorCode::ConfirmationInvalid, Phase::Confirmation);
    assert_eq!(p.detail("reason"), Some(&json!(reason)));
    assert_eq!(p.retry(), retry);
}

#[tokio::test]
async fn two_phase_request_approve_retry_once() {
    let env = two_phase();
    let inv = env.invoke(refund(4200), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.retry(), Retry::WithConfirmation);
    let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    assert!(id.starts_with("c-") && id.len() == 34, "{id}");
    assert_eq!(p.detail("summary"), Some(&json!("Refund 4200 cents on order A-1.")));
    assert_eq!(p.detail("effect"), Some(&json!("external")));
    assert_eq!(p.detail("origin"), Some(&json!("client")));
    let expires = env.clock.now().saturating_add(TTL).to_rfc3339();
    assert_eq!(p.detail("expiresAt"), Some(&json!(expires)));
    assert!(p.message().contains("Refund 4200 cents on order A-1."), "{}", p.message());
    assert_eq!(env.runs(), 0);

    // The requester cannot approve, neither by its subject nor by its consumer key.
    assert_eq!(env.engine.approve(&id, &Identity::new("alice")).await, Err(ApprovalError::SelfApproval));
    assert_eq!(env.engine.approve(&id, &Identity::new("session-1")).await, Err(ApprovalError::SelfApproval));
    assert_eq!(env.engine.approve(&id, &Identity::new(" ")).await, Err(ApprovalError::NoApprover));
    let record = env.engine.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Pending);
    assert_eq!(record.summary, "Refund 4200 cents on order A-1.");
    env.engine.approve(&id, &manager()).await.unwrap();
    assert_eq!(
        env.engine.approve(&id, &manager()).await,
        Err(ApprovalError::AlreadyDecided(ConfirmationState::Approved { by: "manager".into() }))
    );

    let ok = env.invoke(refund(4200).with_confirmation(&id), alice()).await;
    assert_eq!(ok.result.output(), Some(&json!({"refunded": 4200})), "{:?}", ok.result);
    assert_eq!(env.runs(), 1);

    // Single use.
    let again = env.invoke(refund(4200).with_confirmation(&id), alice()).await;
    assert_invalid(&again, "consumed", Retry::No);
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn a_pending_confirmation_is_requested_again() {
    let env = two_phase();
    let id = env.request(refund(100), alice()).await;
    let inv = env.invoke(refund(100).with_confirmation(&id), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("confirmationId"), Some(&json!(id)));
    assert_eq!(env.runs(), 0);
}

/// A decline after an approval was recorded, before any call used it, revokes the approval: the
/// requester who declines (at the client) is not overruled by an inbox approval a moment before,
/// and the repeat of the call (with the evidence, or relayed without it) never runs (#26).
#[tokio::test]
async fn a_decline_after_an_unused_approval_revokes_it() {
    let env = two_phase();
    let id = env.request(refund(100), alice()).await;
    env.engine.approve(&id, &manager()).await.unwrap();
    env.engine.deny(&id, &Identity::new("alice")).await.unwrap();
    let record = env.engine.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Denied { by: "alice".into() });
    let inv = env.invoke(refund(100).with_confirmation(&id), alice()).await;
    assert_invalid(&inv, "denied", Retry::No);
    let repeat = env.invoke(refund(100), alice()).await;
    assert_produced(&repeat, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn a_denial_is_final() {
    let env = two_phase();
    let id = env.request(refund(100), alice()).await;
    // The requester may deny its own request.
    env.engine.deny(&id, &Identity::new("alice")).await.unwrap();
    assert_eq!(
        env.engine.approve(&id, &manager()).await,
        Err(ApprovalError::AlreadyDecided(ConfirmationState::Denied { by: "alice".into() }))
    );
    let inv = env.invoke(refund(100).with_confirmation(&id), alice()).await;
    assert_invalid(&inv, "denied", Retry::No);
    assert!(inv.result.error_payload().unwrap().message().contains("Do not retry"));
    // Still denied later, and stored as terminal under the invocation id.
    let req = refund(100).with_confirmation(&id).with_invocation_id("inv-d");
    let first = env.invoke(req.clone(), alice()).await;
    assert_invalid(&first, "denied", Retry::No);
    assert!(env.invoke(req, alice()).await.replayed);
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn expiry_on_a_manual_clock() {
    let env = two_phase();
    let pending = env.request(refund(100), alice()).await;
    let approved = env.request(refund(200), alice()).await;
    env.engine.approve(&approved, &manager()).await.unwrap();

    env.clock.advance(TTL - Duration::from_millis(1));
    let consumed = env.request(refund(300), alice()).await;
    env.engine.approve(&consumed, &manager()).await.unwrap();
    assert!(env.invoke(refund(300).with_confirmation(&consumed), alice()).await.result.is_ok());

    env.clock.advance(Duration::from_millis(1));
    assert_eq!(env.engine.approve(&pending, &manager()).await, Err(ApprovalError::Expired));
    let inv = env.invoke(refund(100).with_confirmation(&pending), alice()).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    let inv = env.invoke(refund(200).with_confirmation(&approved), alice()).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    // Unknown and forged ids read as expired: a fresh cycle needs a fresh approval anyway.
    let inv = env.invoke(refund(200).with_confirmation("c-00000000000000000000000000000000"), alice()).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    assert_eq!(env.engine.approve("c-nope", &manager()).await, Err(ApprovalError::Unknown));
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn evidence_is_bound_to_input_target_capability_and_consumer() {
    let env = two_phase();
    let id = env.request(refund(4200), alice()).await;
    env.engine.approve(&id, &manager()).await.unwrap();

    let bob = InvokeOptions::new(Consumer::authenticated("session-2", Identity::new("bob")));
    let cases = [
        ("input", refund(4300), alice()),
        ("target", refund(4200).with_target(Target::instance("branch")), alice()),
        (
            "capability",
            call("orders.cancel", json!({"order_id": "A-1", "amount_cents": 4200}))
                .with_target(Target::instance("main")),
            alice(),
        ),
        ("consumer", refund(4200), bob),
        ("consumer without identity", refund(4200), consumer("session-3")),
    ];
    for (field, request, who) in cases {
        let inv = env.invoke(request.with_confirmation(&id), who).await;
        assert_invalid(&inv, "mismatch", Retry::No);
        assert_eq!(env.runs(), 0, "{field}");
    }
    // Mismatched presentations consumed nothing: the bound call still runs, once.
    assert!(env.invoke(refund(4200).with_confirmation(&id), alice()).await.result.is_ok());
    // The same input in another member order is the same input.
    let reordered = call("orders.refund", json!({"amount_cents": 4200, "order_id": "A-1"}))
        .with_target(Target::instance("main"))
        .with_confirmation(&id);
    assert_invalid(&env.invoke(reordered, alice()).await, "consumed", Retry::No);
    assert_eq!(env.runs(), 1);
}

/// Approves a refund of the instance `main`, remounts `main`, and presents the evidence twice;
/// returns both invocations and how many times the handler ran.
async fn remount_between_approval_and_use(
    binding: agent_surface_policy::TargetBinding,
) -> (Invocation, Invocation, usize) {
    let clock = clock();
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        target_binding: binding,
        ..Default::default()
    }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(&clock) });
    let runs = Arc::new(AtomicUsize::new(0));
    define_orders(&registry, &runs);
    let first = registry.mount("orders", "main").unwrap();
    let inv = registry.invoke_detailed(refund(1), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    engine.approve(&id, &manager()).await.unwrap();
    drop(first);
    let _second = registry.mount("orders", "main").unwrap();
    let once = registry.invoke_detailed(refund(1).with_confirmation(&id), alice()).await;
    let twice = registry.invoke_detailed(refund(1).with_confirmation(&id), alice()).await;
    (once, twice, runs.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_remounted_target_is_another_target() {
    let (once, _, runs) = remount_between_approval_and_use(agent_surface_policy::TargetBinding::Registration).await;
    assert_invalid(&once, "mismatch", Retry::No);
    assert_eq!(runs, 0);
}

/// Replicas sharing a store bind evidence to the instance: another registration of the same
/// instance (a remount here; another replica's mount in production) accepts it, once.
#[tokio::test]
async fn bound_to_the_instance_evidence_survives_another_registration() {
    let (once, twice, runs) = remount_between_approval_and_use(agent_surface_policy::TargetBinding::Instance).await;
    assert!(once.result.is_ok(), "{:?}", once.result);
    assert_invalid(&twice, "consumed", Retry::No);
    assert_eq!(runs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_retries_run_the_handler_once() {
    let env = Arc::new(two_phase());
    let id = env.request(refund(4200), alice()).await;
    env.engine.approve(&id, &manager()).await.unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|n| {
            let (env, id) = (env.clone(), id.clone());
            tokio::spawn(async move {
                let req = refund(4200).with_confirmation(id).with_invocation_id(format!("retry-{n}"));
                env.invoke(req, alice()).await
            })
        })
        .collect();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        let inv = task.await.unwrap();
        let key = match inv.result.error_payload() {
            None => "ok".to_string(),
            Some(p) => {
                assert_invalid(&inv, "consumed", Retry::No);
                p.detail("reason").unwrap().as_str().unwrap().to_string()
            }
        };
        *outcomes.entry(key).or_default() += 1;
    }
    assert_eq!(outcomes, HashMap::from([("ok".to_string(), 1), ("consumed".to_string(), 99)]));
    assert_eq!(env.runs(), 1);

    // The same invocation id a hundred times: one leader, the rest join or replay it.
    let id = env.request(refund(4300), alice()).await;
    env.engine.approve(&id, &manager()).await.unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (env, id) = (env.clone(), id.clone());
            tokio::spawn(async move {
                env.invoke(refund(4300).with_confirmation(id).with_invocation_id("same"), alice()).await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().result.output(), Some(&json!({"refunded": 4300})));
    }
    assert_eq!(env.runs(), 2);
}

#[tokio::test]
async fn confirmation_required_is_never_cached() {
    let env = two_phase();
    let req = refund(100).with_invocation_id("inv-1");
    let first = env.invoke(req.clone(), alice()).await;
    assert_produced(&first, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    let second = env.invoke(req.clone(), alice()).await;
    assert!(!second.replayed && !second.joined);
    let id = assert_produced(&second, ErrorCode::ConfirmationRequired, Phase::Confirmation)
        .detail("confirmationId")
        .and_then(Value::as_str)
        .unwrap()
        .to_string();
    env.engine.approve(&id, &manager()).await.unwrap();
    // The same invocation id proceeds with the evidence.
    assert!(env.invoke(req.with_confirmation(&id), alice()).await.result.is_ok());
}

fn adjust(amount: u64) -> InvokeRequest {
    call("orders.adjust", json!({"order_id": "A-1", "amount_cents": amount})).with_target(Target::instance("main"))
}

#[tokio::test]
async fn a_policy_gates_per_call() {
    let large = FnConfirmationPolicy::new("large-adjustments", |call| {
        let cents = call.input.and_then(|i| i["amount_cents"].as_u64()).unwrap_or(0);
        Ok(if cents > 50_000 {
            Gate::Confirm { summary: SafeText::trusted(format!("Adjust order by {} EUR.", cents / 100)) }
        } else {
            Gate::Open
        })
    });
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        policies: vec![Arc::new(large)],
        ..Default::default()
    });
    assert!(env.invoke(adjust(500), alice()).await.result.is_ok());
    // Evidence on an ungated call is ignored, not consumed.
    assert!(env.invoke(adjust(600).with_confirmation("c-whatever"), alice()).await.result.is_ok());
    let inv = env.invoke(adjust(60_000), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("Adjust order by 600 EUR.")));
    assert_eq!(p.detail("effect"), Some(&json!("write")));
    assert_eq!(env.runs(), 2);
}

/// A policy that cannot decide gates the call under the capability's generic summary, and what it
/// failed with (`secret`) never reaches the agent; nothing runs.
async fn assert_a_broken_policy_gates(broken: impl agent_surface_policy::ConfirmationPolicy + 'static, secret: &str) {
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        policies: vec![Arc::new(broken)],
        ..Default::default()
    });
    let inv = env.invoke(adjust(1), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("Call orders.adjust with the given input.")));
    assert!(!p.to_json().to_string().contains(secret));
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn a_failing_policy_gates_the_call() {
    let broken = FnConfirmationPolicy::new("broken", |_call| Err(PolicyError::new("rules service down")));
    assert_a_broken_policy_gates(broken, "rules service").await;
}

/// A manual clock that counts its readings.
#[derive(Debug)]
struct CountingClock {
    clock: Arc<ManualClock>,
    readings: AtomicUsize,
}

impl Clock for CountingClock {
    fn now(&self) -> Timestamp {
        self.readings.fetch_add(1, Ordering::SeqCst);
        self.clock.now()
    }

    fn sleep(&self, duration: Duration) -> agent_surface_policy::clock::Sleep {
        self.clock.sleep(duration)
    }
}

#[tokio::test]
async fn a_call_the_policies_let_through_at_once_reads_no_clock() {
    // The engine decides about a call its policies let through without awaiting: no clock
    // reading, no store, whatever evidence the call carries. A call they gate is asked as before.
    let counting = Arc::new(CountingClock { clock: clock(), readings: AtomicUsize::new(0) });
    let large = FnConfirmationPolicy::new("large-adjustments", |call| {
        let cents = call.input.and_then(|i| i["amount_cents"].as_u64()).unwrap_or(0);
        Ok(if cents > 50_000 { Gate::Confirm { summary: SafeText::from("Adjust a lot.") } } else { Gate::Open })
    });
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: counting.clone(),
        policies: vec![Arc::new(large)],
        ..Default::default()
    }));
    let registry =
        Registry::new(RegistryConfig { clock: counting.clone(), confirmation: Some(engine), ..Default::default() });
    let runs = Arc::new(AtomicUsize::new(0));
    define_orders(&registry, &runs);
    let _mount = registry.mount("orders", "main").unwrap();
    let readings = || counting.readings.load(Ordering::SeqCst);

    let before = readings();
    assert!(registry.invoke_detailed(adjust(500), alice()).await.result.is_ok());
    assert!(registry.invoke_detailed(adjust(600).with_confirmation("c-whatever"), alice()).await.result.is_ok());
    assert_eq!(readings(), before, "a call let through at once reads no clock");
    let inv = registry.invoke_detailed(adjust(60_000), alice()).await;
    assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert!(readings() > before, "a gated call is decided at the moment of the check");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A confirmation policy that answers only by awaiting: it gates large adjustments, after a
/// yield, and counts the calls it is asked about.
struct Later(Arc<AtomicUsize>);

impl agent_surface_policy::ConfirmationPolicy for Later {
    fn name(&self) -> &str {
        "later"
    }

    fn decide<'a>(&'a self, call: agent_surface_policy::CallInfo<'a>) -> BoxFuture<'a, Result<Gate, PolicyError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::task::yield_now().await;
            let cents = call.input.and_then(|i| i["amount_cents"].as_u64()).unwrap_or(0);
            Ok(if cents > 50_000 { Gate::Confirm { summary: SafeText::from("Later says no.") } } else { Gate::Open })
        })
    }
}

#[tokio::test]
async fn each_policy_is_asked_once_per_call_at_once_or_not() {
    // Policies that answer at once, before and after one that awaits: the first that gates
    // decides, and none is asked twice, whichever way the engine reached it.
    let counted = |name: &'static str, gates: bool| {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let policy = FnConfirmationPolicy::new(name, move |_call| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(if gates { Gate::Confirm { summary: SafeText::from("At once says no.") } } else { Gate::Open })
        });
        (Arc::new(policy) as Arc<dyn agent_surface_policy::ConfirmationPolicy>, asked)
    };
    let (open, open_asked) = counted("open", false);
    let later_asked = Arc::new(AtomicUsize::new(0));
    let (gates, gates_asked) = counted("gates", true);
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        policies: vec![open, Arc::new(Later(later_asked.clone())), gates],
        ..Default::default()
    });
    let asked = || [&open_asked, &later_asked, &gates_asked].map(|n| n.load(Ordering::SeqCst));

    // The awaiting policy gates: the one after it is not asked.
    let inv = env.invoke(adjust(60_000), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("Later says no.")));
    assert_eq!(asked(), [1, 1, 0]);
    // It lets the call through: the last one, answering at once, gates it.
    let inv = env.invoke(adjust(500), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("At once says no.")));
    assert_eq!(asked(), [2, 2, 1]);

    // Policies that all answer at once, the second gating: each asked once.
    let (open, open_asked) = counted("open", false);
    let (gates, gates_asked) = counted("gates", true);
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        policies: vec![open, gates],
        ..Default::default()
    });
    let inv = env.invoke(adjust(1), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("At once says no.")));
    assert_eq!([open_asked.load(Ordering::SeqCst), gates_asked.load(Ordering::SeqCst)], [1, 1]);
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn a_policy_panicking_at_once_gates_the_call() {
    let broken = FnConfirmationPolicy::new("broken", |_call| -> Result<Gate, PolicyError> {
        panic!("policy bug token=sk_live_1")
    });
    assert_a_broken_policy_gates(broken, "sk_live").await;
}

// ---- Wait mode ---------------------------------------------------------------------------

const WAIT: Duration = Duration::from_secs(30);

fn wait_env<F, Fut>(review: F) -> Env
where
    F: Fn(ConfirmationRecord) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Review, PolicyError>> + Send + 'static,
{
    env_with(move |clock| ConfirmationConfig {
        clock: clock.clone(),
        mode: ConfirmationMode::Wait { approver: Arc::new(FnApprover::new(review)), timeout: WAIT },
        ..Default::default()
    })
}

#[tokio::test]
async fn wait_mode_approval_runs_the_call_without_a_round_trip() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let env = wait_env(move |record| {
        log.lock().unwrap().push(record.summary.clone());
        async move { Ok(Review::Approve { approver: manager() }) }
    });
    let inv = env.invoke(refund(4200), alice()).await;
    assert_eq!(inv.result.output(), Some(&json!({"refunded": 4200})), "{:?}", inv.result);
    assert_eq!(*seen.lock().unwrap(), ["Refund 4200 cents on order A-1."]);
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn wait_mode_denial() {
    let env = wait_env(|_record| async { Ok(Review::Deny { approver: manager() }) });
    let inv = env.invoke(refund(4200), alice()).await;
    assert_invalid(&inv, "denied", Retry::No);
    assert_eq!(env.runs(), 0);
}

/// Spawns the call, waits until it waits on the clock, then moves the clock by `by`.
async fn run_past(env: &Arc<Env>, request: InvokeRequest, by: Duration) -> Invocation {
    let task = {
        let env = env.clone();
        tokio::spawn(async move { env.invoke(request, alice()).await })
    };
    while env.clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    settle().await;
    assert!(!task.is_finished(), "the call waits for a decision");
    env.clock.advance(by);
    task.await.unwrap()
}

#[tokio::test]
async fn wait_mode_timeout_withdraws_the_request() {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let log = ids.clone();
    let env = Arc::new(wait_env(move |record| {
        log.lock().unwrap().push(record.id.clone());
        async { Ok(Review::Defer) }
    }));
    let inv = run_past(&env, refund(1), WAIT).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    let id = ids.lock().unwrap()[0].clone();
    // A late approval no longer counts, and the withdrawn id cannot be used.
    assert_eq!(
        env.engine.approve(&id, &manager()).await,
        Err(ApprovalError::AlreadyDecided(ConfirmationState::Withdrawn))
    );
    assert_invalid(&env.invoke(refund(1).with_confirmation(&id), alice()).await, "expired", Retry::WithConfirmation);
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn wait_mode_refuses_self_approval_and_keeps_waiting() {
    let env = Arc::new(wait_env(|_record| async { Ok(Review::Approve { approver: Identity::new("alice") }) }));
    let inv = run_past(&env, refund(1), WAIT).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    assert_eq!(env.runs(), 0);
}

/// The requester approving in person (a prompt in the host's own interface) is accepted where
/// the same person's ordinary approval is not.
#[tokio::test]
async fn wait_mode_takes_an_in_person_approval_from_the_requester() {
    let env = wait_env(|_record| async { Ok(Review::ApproveInPerson { channel: "host-ui".into() }) });
    let inv = env.invoke(refund(3), alice()).await;
    assert_eq!(inv.result.output(), Some(&json!({"refunded": 3})), "{inv:?}");
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn wait_mode_takes_a_decision_through_the_host_api() {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let log = ids.clone();
    let env = Arc::new(wait_env(move |record| {
        log.lock().unwrap().push(record.id.clone());
        async { Ok(Review::Defer) }
    }));
    let task = {
        let env = env.clone();
        tokio::spawn(async move { env.invoke(refund(7), alice()).await })
    };
    while ids.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    let id = ids.lock().unwrap()[0].clone();
    assert_eq!(env.engine.approve(&id, &Identity::new("alice")).await, Err(ApprovalError::SelfApproval));
    settle().await;
    assert!(!task.is_finished());
    env.engine.approve(&id, &manager()).await.unwrap();
    assert_eq!(task.await.unwrap().result.output(), Some(&json!({"refunded": 7})));
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn wait_mode_approver_failure_is_no_approval() {
    let env = Arc::new(wait_env(|_record| async { panic!("approval UI crashed") }));
    let inv = run_past(&env, refund(1), WAIT).await;
    assert_invalid(&inv, "expired", Retry::WithConfirmation);
    assert_eq!(env.runs(), 0);
}

// ---- Fail-closed paths -----------------------------------------------------------------------

#[derive(Debug)]
struct BrokenStore;

impl ConfirmationStore for BrokenStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn insert<'a>(&'a self, _r: ConfirmationRecord, _now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("redis://10.1.2.3:6379 connection refused".into())) })
    }
    fn insert_relayed<'a>(
        &'a self,
        _r: ConfirmationRecord,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::confirmation::Inserted, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("redis://10.1.2.3:6379 connection refused".into())) })
    }
    fn get<'a>(
        &'a self,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn decide<'a>(
        &'a self,
        _id: &'a str,
        _v: ApprovalVerdict,
        _approver: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn consume<'a>(
        &'a self,
        _id: &'a str,
        _expected: &'a ConfirmationBinding,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn withdraw<'a>(
        &'a self,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn list_pending<'a>(
        &'a self,
        _now: Timestamp,
        _limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn decide_in_slots<'a>(
        &'a self,
        _id: &'a str,
        _v: ApprovalVerdict,
        _approver: &'a str,
        _slots: agent_surface_policy::confirmation::SlotSet,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn claim_expiry<'a>(
        &'a self,
        _id: &'a str,
        _until: Timestamp,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn expiry_recorded<'a>(&'a self, _id: &'a str, _now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn reinstate<'a>(
        &'a self,
        _id: &'a str,
        _expected: &'a ConfirmationBinding,
        _token: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn list_expired<'a>(
        &'a self,
        _now: Timestamp,
        _limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn remember_relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
    fn forget_relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("down".into())) })
    }
}

#[tokio::test]
async fn a_failing_store_never_runs_the_call() {
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        store: Arc::new(BrokenStore),
        ..Default::default()
    });
    for request in [refund(1), refund(1).with_confirmation("c-1")] {
        let inv = env.invoke(request, alice()).await;
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Confirmation);
        assert_eq!(p.retry(), Retry::AfterDelay);
        assert_eq!(p.detail("reason"), Some(&json!("transport")));
        assert!(!p.to_json().to_string().contains("redis"));
    }
    assert!(matches!(env.engine.approve("c-1", &manager()).await, Err(ApprovalError::Store(_))));
    assert_eq!(env.runs(), 0);
}

#[tokio::test]
async fn a_panicking_summary_fails_closed() {
    let env = two_phase();
    let inv = env.invoke(call("orders.faulty", json!({})).with_target(Target::instance("main")), alice()).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Confirmation);
    assert!(!p.message().contains("summary bug"));
    assert_eq!(p.retry(), Retry::No);
}

#[tokio::test]
async fn a_gated_capability_without_an_engine_never_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = Registry::new(RegistryConfig::default());
    define_orders(&registry, &runs);
    let _m = registry.mount("orders", "main").unwrap();
    let inv = registry.invoke_detailed(refund(1), alice()).await;
    assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Confirmation);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Ungated capabilities are unaffected.
    assert!(registry.invoke(adjust(1), alice()).await.is_ok());
}

#[test]
fn the_summary_must_take_the_handler_input() {
    let registry = Registry::new(RegistryConfig::default());
    let err = registry
        .define("orders", |t| {
            t.capability("refund", "Refund.")
                .confirm(|_i: &String| "Refund.")
                .handler(|_c: Ctx, i: Refund| async move { Ok::<_, AgentSurfaceError>(json!(i.amount_cents)) });
        })
        .unwrap_err();
    assert_eq!(err.code(), agent_surface_core::DefinitionErrorCode::InvalidDefinition);
}

// ---- Random interleavings -----------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// A call without evidence, with one of two inputs.
    Request { amount: u64 },
    /// Approve the n-th requested confirmation, by the requester or by someone else.
    Approve { n: usize, by_requester: bool },
    /// Deny the n-th requested confirmation.
    Deny { n: usize },
    /// Move the clock.
    Advance { ms: u64 },
    /// Retry with the n-th confirmation id and one of two inputs.
    Retry { n: usize, amount: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1..3u64).prop_map(|amount| Op::Request { amount }),
        2 => (0..6usize, any::<bool>()).prop_map(|(n, by_requester)| Op::Approve { n, by_requester }),
        1 => (0..6usize).prop_map(|n| Op::Deny { n }),
        1 => (0..700u64).prop_map(|ms| Op::Advance { ms }),
        4 => (0..6usize, 1..3u64).prop_map(|(n, amount)| Op::Retry { n, amount }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Model {
    Pending,
    Approved,
    Denied,
    Consumed,
}

struct Requested {
    id: String,
    amount: u64,
    expires_at: Timestamp,
    state: Model,
}

/// A consumer that repeats a call it was told needs a confirmation, without the id (a model
/// cannot send it), has the relayed confirmation presented: the same one while nobody decided,
/// a denial once denied, a fresh one once expired, the run once approved — and an approval is
/// presented to no other consumer, input or target.
#[tokio::test]
async fn a_repeated_call_presents_the_relayed_confirmation() {
    let env = two_phase();
    let required = |inv: &Invocation| {
        let p = assert_produced(inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
        p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string()
    };
    let first = env.request(refund(100), alice()).await;
    assert_eq!(required(&env.invoke(refund(100), alice()).await), first, "no second record while pending");

    env.engine.deny(&first, &manager()).await.unwrap();
    assert_invalid(&env.invoke(refund(100), alice()).await, "denied", Retry::No);
    let second = env.request(refund(100), alice()).await;
    assert_ne!(second, first);

    env.clock.advance(TTL + Duration::from_secs(1));
    let third = required(&env.invoke(refund(100), alice()).await);
    assert_ne!(third, second, "an expired confirmation is replaced at once, not reported");

    env.engine.approve(&third, &manager()).await.unwrap();
    // Not for another input, another target or another consumer.
    assert_ne!(env.request(refund(200), alice()).await, third);
    let other_target = refund(100).with_target(Target::instance("branch"));
    assert_ne!(env.request(other_target, alice()).await, third);
    let bob = InvokeOptions::new(Consumer::authenticated("session-2", Identity::new("bob")));
    assert_ne!(env.request(refund(100), bob).await, third);
    assert_eq!(env.runs(), 0);
    let done = env.invoke(refund(100), alice()).await;
    assert!(done.result.is_ok(), "{:?}", done.result);
    assert_eq!(env.runs(), 1);
    // Single use: the next request is a new confirmation.
    let fourth = env.request(refund(100), alice()).await;
    assert_ne!(fourth, third);

    // A caller that presents the id itself settles what was remembered for the call.
    env.engine.approve(&fourth, &manager()).await.unwrap();
    assert!(env.invoke(refund(100).with_confirmation(&fourth), alice()).await.result.is_ok());
    let fifth = env.request(refund(100), alice()).await;
    assert_ne!(fifth, fourth, "a consumed id is never presented");
    assert_eq!(env.runs(), 2);
}

/// A hundred concurrent retries of one call without an invocation id (a client that repeats
/// while the first answer is in flight) open one confirmation between them: every answer names
/// it, with the same summary and deadline; the inbox holds one request and the trail one
/// `confirmation.requested`. Once it is denied, the call asked again opens a new one. The memory
/// store's look-ups are held in step, so that every retry looks for a relayed confirmation before
/// any of them asks for one (the race a scheduler produces only now and then).
#[tokio::test]
async fn concurrent_repeats_without_a_key_open_one_confirmation() {
    let audit = Arc::new(agent_surface_policy::MemoryAuditSink::default());
    let sink = audit.clone();
    let store =
        agent_surface_testing::stores::InStep::new(agent_surface_policy::MemoryConfirmationStore::default(), 100);
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        ttl: TTL,
        audit: Some(sink),
        store: Arc::new(store),
        ..Default::default()
    });
    let answers = futures_util::future::join_all((0..100).map(|_| env.invoke(refund(100), alice()))).await;
    let payloads: Vec<_> =
        answers.iter().map(|inv| assert_produced(inv, ErrorCode::ConfirmationRequired, Phase::Confirmation)).collect();
    let ids: std::collections::BTreeSet<&str> =
        payloads.iter().map(|p| p.detail("confirmationId").and_then(Value::as_str).unwrap()).collect();
    assert_eq!(ids.len(), 1, "one confirmation for every repeat");
    let first = ids.into_iter().next().unwrap().to_string();
    for p in &payloads {
        assert_eq!(p.to_json(), payloads[0].to_json(), "every repeat is given the same answer");
    }
    let inbox = env.engine.pending_for(&manager(), 1000).await.unwrap();
    assert_eq!(inbox.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [first.as_str()], "one request in the inbox");
    let requested = |audit: &agent_surface_policy::MemoryAuditSink| {
        audit
            .events()
            .iter()
            .filter(|e| matches!(e.kind, agent_surface_policy::AuditKind::ConfirmationRequested { .. }))
            .count()
    };
    assert_eq!(requested(&audit), 1, "one confirmation.requested in the trail");

    // Denied: the repeat is told so once, and the call asked again opens a new confirmation.
    env.engine.deny(&first, &manager()).await.unwrap();
    assert_invalid(&env.invoke(refund(100), alice()).await, "denied", Retry::No);
    let second = env.request(refund(100), alice()).await;
    assert_ne!(second, first, "a denied confirmation is not presented again");
    let inbox = env.engine.pending_for(&manager(), 1000).await.unwrap();
    assert_eq!(inbox.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [second.as_str()]);
    assert_eq!(requested(&audit), 2);
    assert_eq!(env.runs(), 0);
}

/// With `present_on_repeat: false`, nothing is presented on repeat: each call asks anew.
#[tokio::test]
async fn presenting_on_repeat_can_be_turned_off() {
    let env = env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        ttl: TTL,
        present_on_repeat: false,
        ..Default::default()
    });
    let first = env.request(refund(100), alice()).await;
    env.engine.approve(&first, &manager()).await.unwrap();
    assert_ne!(env.request(refund(100), alice()).await, first);
    assert_eq!(env.runs(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The handler runs at most once per approval, only after an approval by someone other than
    /// the requester, and every outcome is the one the lifecycle prescribes.
    #[test]
    fn interleavings_of_request_approve_deny_expire_retry(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            // Every retry presents its id explicitly; nothing is presented on repeat.
            let env = env_with(|clock| ConfirmationConfig {
                clock: clock.clone(),
                ttl: Duration::from_secs(1),
                present_on_repeat: false,
                ..Default::default()
            });
            let mut requested: Vec<Requested> = Vec::new();
            let mut successes = 0usize;
            for op in ops {
                let now = env.clock.now();
                match op {
                    Op::Request { amount } => {
                        let id = env.request(refund(amount), alice()).await;
                        requested.push(Requested { id, amount, expires_at: now.saturating_add(Duration::from_secs(1)), state: Model::Pending });
                    }
                    Op::Approve { n, by_requester } => {
                        let Some(r) = requested.get_mut(n) else { continue };
                        let who = if by_requester { Identity::new("alice") } else { manager() };
                        let got = env.engine.approve(&r.id, &who).await;
                        let expected = match r.state {
                            Model::Pending if by_requester => Err(ApprovalError::SelfApproval),
                            Model::Pending if now >= r.expires_at => Err(ApprovalError::Expired),
                            Model::Pending => Ok(()),
                            Model::Approved => Err(ApprovalError::AlreadyDecided(ConfirmationState::Approved { by: "manager".into() })),
                            Model::Denied => Err(ApprovalError::AlreadyDecided(ConfirmationState::Denied { by: "manager".into() })),
                            Model::Consumed => Err(ApprovalError::AlreadyDecided(ConfirmationState::Consumed { approved_by: "manager".into() })),
                        };
                        assert_eq!(got, expected, "approve {n}");
                        if got.is_ok() {
                            r.state = Model::Approved;
                        }
                    }
                    Op::Deny { n } => {
                        let Some(r) = requested.get_mut(n) else { continue };
                        let got = env.engine.deny(&r.id, &manager()).await;
                        // A denial ends a pending record, and revokes an approved one nobody used.
                        if matches!(r.state, Model::Pending | Model::Approved) && now < r.expires_at {
                            assert_eq!(got, Ok(()));
                            r.state = Model::Denied;
                        } else {
                            assert!(got.is_err());
                        }
                    }
                    Op::Advance { ms } => env.clock.advance(Duration::from_millis(ms)),
                    Op::Retry { n, amount } => {
                        let Some(r) = requested.get_mut(n) else { continue };
                        let before = env.runs();
                        let inv = env.invoke(refund(amount).with_confirmation(&r.id), alice()).await;
                        let outcome = match inv.result.error_payload() {
                            None => "ok".to_string(),
                            Some(p) if p.code() == ErrorCode::ConfirmationRequired => "required".to_string(),
                            Some(p) => p.detail("reason").and_then(Value::as_str).unwrap().to_string(),
                        };
                        let expected = if amount != r.amount {
                            "mismatch"
                        } else {
                            match r.state {
                                Model::Consumed => "consumed",
                                Model::Denied => "denied",
                                _ if now >= r.expires_at => "expired",
                                Model::Pending => "required",
                                Model::Approved => "ok",
                            }
                        };
                        assert_eq!(outcome, expected, "retry {n} with {amount}");
                        if outcome == "ok" {
                            // Only an approval by someone other than the requester gets here.
                            assert_eq!(r.state, Model::Approved);
                            r.state = Model::Consumed;
                            successes += 1;
                            assert_eq!(env.runs(), before + 1);
                        } else {
                            assert_eq!(env.runs(), before, "no run without valid evidence");
                        }
                    }
                }
            }
            assert_eq!(env.runs(), successes);
            assert!(successes <= requested.iter().filter(|r| r.state == Model::Consumed).count());
        });
    }
}

// ---- The approver's view ---------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
struct Charge {
    cents: u64,
    #[allow(dead_code, reason = "read by no one: the point is that it is sensitive")]
    card: String,
}

#[tokio::test]
async fn an_approver_lists_pending_requests_with_sensitive_fields_redacted() {
    let clock = clock();
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ..Default::default() }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(&clock) });
    registry
        .define("cards", |t| {
            t.capability("charge", "Charge a card.")
                .effect(Effect::External)
                .sensitive(&["card"])
                .confirm(|i: &Charge| format!("Charge {} cents.", i.cents))
                .handler(|_c: Ctx, i: Charge| async move { Ok::<_, AgentSurfaceError>(json!({"charged": i.cents})) });
        })
        .unwrap();
    let _mount = registry.mount("cards", "main").unwrap();
    let input = json!({"cents": 500, "card": "4111 1111 1111 1111"});
    let inv = registry.invoke_detailed(call("cards.charge", input.clone()), alice()).await;
    let id = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation)
        .detail("confirmationId")
        .and_then(Value::as_str)
        .unwrap()
        .to_string();

    let listed = engine.pending_for(&manager(), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let record = &listed[0];
    assert_eq!((record.id.as_str(), record.summary.as_str()), (id.as_str(), "Charge 500 cents."));
    assert_eq!(record.requester.as_deref(), Some("alice"));
    let preview: Value = serde_json::from_str(record.input_preview.as_deref().unwrap()).unwrap();
    assert_eq!(preview, json!({"cents": 500, "card": "[redacted]"}));
    // The requester does not see its own request among those it may decide.
    assert!(engine.pending_for(&Identity::new("alice"), 10).await.unwrap().is_empty());
    // Decided, it leaves the list; the evidence still works.
    engine.approve(&id, &manager()).await.unwrap();
    assert!(engine.pending_for(&manager(), 10).await.unwrap().is_empty());
    let ok = registry.invoke_detailed(call("cards.charge", input).with_confirmation(&id), alice()).await;
    assert!(ok.result.output().is_some(), "{:?}", ok.result);
}

/// Expiry on the operator channel and in the trail: a pending confirmation is warned about once,
/// when something observes it within the lead time (the agent's repeat, the inbox's `get`, a
/// sweep) and not before; once expired it is final — the repeat starts a new confirmation, a late
/// approval is refused — and it is one `confirmation.expired` event however often it is met.
#[test]
fn expiry_is_warned_once_before_and_recorded_once_after() {
    let audit = Arc::new(agent_surface_policy::MemoryAuditSink::default());
    let sink = audit.clone();
    let ((old, new, swept), log) = capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let env = env_with(|clock| ConfirmationConfig {
                clock: clock.clone(),
                ttl: TTL,
                audit: Some(sink),
                ..Default::default()
            });
            let old = env.request(refund(4200), alice()).await;
            // Three minutes left: outside the two-minute lead, no warning.
            env.clock.advance(Duration::from_secs(7 * 60));
            let inv = env.invoke(refund(4200), alice()).await;
            assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
            tracing::info!(target: "test", "mark: inside the lead");
            env.clock.advance(Duration::from_secs(90));
            for _ in 0..3 {
                let inv = env.invoke(refund(4200), alice()).await;
                let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
                assert_eq!(p.detail("confirmationId"), Some(&json!(old)), "the same pending confirmation");
            }
            env.engine.get(&old).await.unwrap().unwrap();
            // A second confirmation, found by the sweep rather than by a look.
            let other = env.request(refund(17), alice()).await;
            env.clock.advance(Duration::from_secs(9 * 60));
            let swept = (env.engine.sweep_expiring(100).await.unwrap(), env.engine.sweep_expiring(100).await.unwrap());
            assert_eq!(env.engine.get(&other).await.unwrap().unwrap().state, ConfirmationState::Pending);

            // Past the deadline of the first (a minute before `other` expires): the old confirmation is final.
            assert_eq!(env.engine.approve(&old, &manager()).await, Err(ApprovalError::Expired));
            let evidence = env.invoke(refund(4200).with_confirmation(&old), alice()).await;
            assert_invalid(&evidence, "expired", Retry::WithConfirmation);
            let inv = env.invoke(refund(4200), alice()).await;
            let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
            let new = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
            assert_ne!(new, old, "the repeat after expiry starts a new confirmation");
            assert_eq!(env.engine.approve(&old, &manager()).await, Err(ApprovalError::Expired));
            env.engine.approve(&new, &manager()).await.unwrap();
            let ran = env.invoke(refund(4200), alice()).await;
            assert!(ran.result.output().is_some(), "{:?}", ran.result);
            assert_eq!(env.runs(), 1);
            (old, new, swept)
        })
    });
    assert_eq!(swept, (1, 0), "the sweep warns about the second confirmation once");
    let (before, after) = log.split_once("mark: inside the lead").unwrap();
    assert!(!before.contains("confirmation expires soon"), "no warning outside the lead:\n{before}");
    let warnings: Vec<&str> = after.lines().filter(|l| l.contains("confirmation expires soon")).collect();
    assert_eq!(warnings.len(), 2, "one warning per confirmation:\n{log}");
    assert!(warnings[0].contains("WARN") && warnings[0].contains(&format!("confirmation_id={old}")), "{}", warnings[0]);
    assert!(warnings[0].contains("remaining_ms=90000") && warnings[0].contains("required=1"), "{}", warnings[0]);
    assert!(!log.contains(&format!("confirmation expires soon confirmation_id={new}")));
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let events = rt.block_on(agent_surface_policy::AuditSink::recent(audit.as_ref(), 1000)).unwrap();
    let expired: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, agent_surface_policy::AuditKind::ConfirmationExpired))
        .map(|e| e.confirmation_id.clone())
        .collect();
    assert_eq!(expired, vec![Some(old)], "one confirmation.expired event for the one expired confirmation");
}

/// `confirm_if`: a typed rule gates only the inputs it names. A refund of 100 EUR or less runs at
/// once; a larger one asks a person, whose approval is then used once, for that input only; a
/// rule that panics fails closed.
#[tokio::test]
async fn confirm_if_gates_only_the_inputs_its_rule_names() {
    let clock = clock();
    let engine =
        Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ttl: TTL, ..Default::default() }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(&clock) });
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("refunds", move |t| {
            t.capability("issue", "Refund an order.")
                .effect(Effect::External)
                .confirm_if(|i: &Refund| {
                    (i.amount_cents > 10_000)
                        .then(|| format!("Refund {} cents on order {}.", i.amount_cents, i.order_id))
                })
                .handler(move |_c: Ctx, i: Refund| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(json!({"refunded": i.amount_cents})) }
                });
            t.capability("broken", "A rule that panics.")
                .confirm_if(|i: &Refund| -> Option<String> {
                    assert!(i.amount_cents == 0, "rule bug");
                    None
                })
                .handler(|_c: Ctx, _i: Refund| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        })
        .unwrap();
    let _mount = registry.mount("refunds", "main").unwrap();
    let refund = |amount: u64| call("refunds.issue", json!({"order_id": "A-1", "amount_cents": amount}));

    // At or under the threshold: no confirmation, and evidence presented anyway is not needed.
    let small = registry.invoke_detailed(refund(10_000), alice()).await;
    assert!(small.result.is_ok(), "{:?}", small.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Over it: a person approves, the retry with the evidence runs once.
    let asked = registry.invoke_detailed(refund(25_000), alice()).await;
    let p = assert_produced(&asked, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("summary"), Some(&json!("Refund 25000 cents on order A-1.")));
    let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    engine.approve(&id, &manager()).await.unwrap();
    let approved = registry.invoke_detailed(refund(25_000).with_confirmation(&id), alice()).await;
    assert!(approved.result.is_ok(), "{:?}", approved.result);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // Used once: presented again, it is refused.
    let again = registry.invoke_detailed(refund(25_000).with_confirmation(&id), alice()).await;
    assert_invalid(&again, "consumed", Retry::No);
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A rule that panics fails the call closed, in the confirmation phase.
    let broken =
        registry.invoke_detailed(call("refunds.broken", json!({"order_id": "A-1", "amount_cents": 5})), alice()).await;
    assert_produced(&broken, ErrorCode::ExecutionFailed, Phase::Confirmation);
}

/// A caller that cancels while its call waits for a person's decision: the call ends at once with
/// `CANCELLED` in phase 7, before its handler (`notProcessed`); the pending request is withdrawn,
/// so a later approval approves nothing.
#[tokio::test]
async fn wait_mode_cancelled_by_the_caller_ends_the_wait_and_withdraws_the_request() {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let log = ids.clone();
    let env = Arc::new(wait_env(move |record| {
        log.lock().unwrap().push(record.id.clone());
        async { Ok(Review::Defer) }
    }));
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = {
        let (env, options) = (env.clone(), alice().with_cancellation(cancel.clone()));
        tokio::spawn(async move { env.invoke(refund(9), options).await })
    };
    while ids.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    settle().await;
    assert!(!task.is_finished(), "the call waits for a decision");
    cancel.cancel();
    let inv = tokio::time::timeout(Duration::from_secs(10), task).await.expect("ended by the cancellation").unwrap();
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Confirmation);
    assert!(p.not_processed());
    settle().await;
    let id = ids.lock().unwrap()[0].clone();
    assert_eq!(
        env.engine.approve(&id, &manager()).await,
        Err(ApprovalError::AlreadyDecided(ConfirmationState::Withdrawn))
    );
    assert_eq!(env.runs(), 0);
}

/// The store consumed the evidence, and its answer is still on its way when the caller cancels
/// (`answer_first`: it has arrived, unread): nobody is left to learn of the consumption, so the
/// engine gives the approval back itself, and the same call presented again, once that has
/// landed, runs — the person is not asked twice for a call that never ran.
async fn given_back_when_the_caller_goes_away(answer_first: bool) {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let store = agent_surface_testing::stores::InStep::holding_consumes(
        agent_surface_policy::MemoryConfirmationStore::default(),
        release.clone(),
    );
    let env = Arc::new(env_with(|clock| ConfirmationConfig {
        clock: clock.clone(),
        ttl: TTL,
        store: Arc::new(store),
        ..Default::default()
    }));
    let id = env.request(refund(5), alice()).await;
    env.engine.approve(&id, &manager()).await.unwrap();

    let cancel = tokio_util::sync::CancellationToken::new();
    let task = {
        let (env, options, request) =
            (env.clone(), alice().with_cancellation(cancel.clone()), refund(5).with_confirmation(&id));
        tokio::spawn(async move { env.invoke(request, options).await })
    };
    settle().await;
    assert!(!task.is_finished(), "the store's answer is held");
    if answer_first {
        // The answer is sent (the store's task runs first, woken first), and the call is
        // cancelled before it reads it.
        release.add_permits(1);
        cancel.cancel();
    } else {
        cancel.cancel();
    }
    let inv = tokio::time::timeout(Duration::from_secs(10), task).await.expect("ended by the cancellation").unwrap();
    assert_produced(&inv, ErrorCode::Cancelled, Phase::Confirmation);
    if !answer_first {
        // The answer arrives after the caller has gone.
        release.add_permits(1);
    }
    settle().await;

    release.add_permits(1);
    let inv = env.invoke(refund(5).with_confirmation(&id), alice()).await;
    assert_eq!(inv.result.output(), Some(&json!({"refunded": 5})), "{:?}", inv.result);
    assert_eq!(env.runs(), 1);
}

#[tokio::test]
async fn evidence_consumed_for_a_call_that_went_away_is_given_back() {
    given_back_when_the_caller_goes_away(false).await;
}

#[tokio::test]
async fn evidence_consumed_for_a_call_that_went_away_before_reading_the_answer_is_given_back() {
    given_back_when_the_caller_goes_away(true).await;
}

/// `pay.send` (external, gated): its handler's first run fails as the order id says — `now`: a
/// transient failure at once (the handler's word that nothing took effect), `later`: the same
/// after a yield, `limited`: a rate limit of its own, `relayed`: another service's transient
/// failure passed on with `?`, anything else: an upstream's 503 met once the payment went out,
/// returned with `?` — and later runs succeed.
fn flaky_payments(clock: &Arc<ManualClock>) -> (Arc<ConfirmationEngine>, Registry, Arc<AtomicUsize>) {
    let engine =
        Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ttl: TTL, ..Default::default() }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..config_with(clock) });
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("pay", move |t| {
            t.capability("send", "Send a payment.")
                .effect(Effect::External)
                .confirm(|i: &Refund| format!("Pay {} cents for {}.", i.amount_cents, i.order_id))
                .handler(move |_c: Ctx, i: Refund| {
                    let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    async move {
                        if n == 1 {
                            match i.order_id.as_str() {
                                "now" => return Err(AgentSurfaceError::transient(Duration::from_millis(300))),
                                "later" => {
                                    tokio::task::yield_now().await;
                                    return Err(AgentSurfaceError::transient(Duration::from_millis(300)));
                                }
                                "limited" => {
                                    let reason = agent_surface_core::details::RateLimitReason::Rate;
                                    return Err(AgentSurfaceError::rate_limited(reason, Duration::from_millis(300)));
                                }
                                "relayed" => {
                                    // Another service's transient failure, passed on with `?`.
                                    let upstream = AgentSurfaceError::transient(Duration::from_millis(300));
                                    return Err(upstream.into_payload().into());
                                }
                                _ => {
                                    let refused = agent_surface_registry::host_errors::UpstreamStatus::new(503);
                                    return Err(AgentSurfaceError::internal(refused));
                                }
                            }
                        }
                        Ok::<_, AgentSurfaceError>(json!({"paid": i.amount_cents}))
                    }
                });
        })
        .unwrap();
    (engine, registry, runs)
}

/// An approved call whose handler answers that the same call should be made again (a transient
/// failure: nothing took effect) gives its approval back, so the repeat runs without asking the
/// person again — once. An answer after an effect (an unknown outcome) leaves it spent.
#[tokio::test]
async fn an_answer_that_asks_for_the_same_call_again_gives_the_approval_back() {
    // Given back for the handler's own word; spent after an effect (a host error, or another
    // service's retryable answer passed on).
    let orders = [("now", true), ("later", true), ("limited", true), ("after-effect", false), ("relayed", false)];
    for (order, given_back) in orders {
        let clock = clock();
        let (engine, r, runs) = flaky_payments(&clock);
        let _m = r.mount("pay", "main").unwrap();
        let pay = || call("pay.send", json!({"order_id": order, "amount_cents": 700}));
        let asked = r.invoke_detailed(pay(), alice()).await;
        let p = assert_produced(&asked, ErrorCode::ConfirmationRequired, Phase::Confirmation);
        let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
        engine.approve(&id, &manager()).await.unwrap();
        let failed = r.invoke_detailed(pay().with_confirmation(&id), alice()).await;
        let code = if order == "limited" { ErrorCode::RateLimited } else { ErrorCode::ExecutionFailed };
        let p = assert_produced(&failed, code, Phase::Execute);
        if !given_back {
            assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")), "{order}");
            let again = r.invoke_detailed(pay().with_confirmation(&id), alice()).await;
            assert_invalid(&again, "consumed", Retry::No);
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{order}: the payment that may have gone out is not sent again");
            continue;
        }
        assert_eq!(p.retry(), Retry::AfterDelay, "{order}");
        let record = engine.get(&id).await.unwrap().unwrap();
        assert_eq!(record.state, ConfirmationState::Approved { by: "manager".into() }, "{order}: given back");
        // The model repeats the call as it was (MCP: without the id): the approval is presented.
        let paid = r.invoke_detailed(pay(), alice()).await;
        assert_eq!(paid.result.output(), Some(&json!({"paid": 700})), "{order}: {:?}", paid.result);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let spent = r.invoke_detailed(pay().with_confirmation(&id), alice()).await;
        assert_invalid(&spent, "consumed", Retry::No);
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{order}: one approval, one payment");
    }
}
