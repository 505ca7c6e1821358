//! Post-condition checks, unknown outcomes, reconciliation and repair plans on preconditions.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
use agent_surface_core::{AgentSurfaceError, DefinitionErrorCode, ErrorCode, Phase, Retry};
use agent_surface_registry::{Ctx, Registry, RegistryConfig, Unmet, Verification};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Deserialize, JsonSchema)]
struct Check {
    verdict: String,
}

/// `pay.send`: a write whose post-condition answers as the input says; counts handler runs.
fn verified_registry(config: RegistryConfig) -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(config);
    let counter = runs.clone();
    r.define("pay", |t| {
        t.capability("send", "Send a payment.")
            .time_budget(Duration::from_secs(2))
            .verify(|ctx: Ctx, i: Check, out: Value| async move {
                assert_eq!(out, json!({"sent": true}), "the check sees the handler's output");
                assert!(!ctx.cancellation().is_cancelled(), "the check has a live token of its own");
                match i.verdict.as_str() {
                    "yes" => Ok(Verification::Verified),
                    "no" => Ok(Verification::NotVerified),
                    "unknown" => Ok(Verification::Unknown),
                    "error" => Err(AgentSurfaceError::internal(std::io::Error::other("ledger down: SECRET-LEDGER"))),
                    "slow" => {
                        std::future::pending::<()>().await;
                        Ok(Verification::Verified)
                    }
                    _ => panic!("verifier bug SECRET-PANIC"),
                }
            })
            .handler(move |_: Ctx, _: Check| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"sent": true}))
                }
            })
    })
    .unwrap();
    let m = r.mount("pay", "main").unwrap();
    (r, m, runs)
}

/// `EXECUTION_FAILED {reason: outcome-unknown}`, retry `no`, with the plan for a recorded call
/// (read the state, then ask the user) or for an unrecorded one (ask the user). Neither says to
/// reconcile under the same invocation id: the record would only replay the unknown outcome.
#[track_caller]
fn assert_outcome_unknown(p: &agent_surface_core::ErrorPayload, tracked: bool) {
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
    assert_eq!(p.retry(), Retry::No);
    let repair = p.repair().expect("a repair plan");
    let reconciles = repair.steps().iter().any(|s| s.action() == RepairAction::Reconcile);
    assert!(!reconciles, "{repair:?}");
    assert!(!p.message().contains("invocationId"), "{}", p.message());
    // Read the state first, then ask the user; without an id nothing was recorded, so the message
    // says not to repeat the action until the state or the user shows it did not happen.
    assert_eq!(repair.steps()[0].action(), RepairAction::RefreshState);
    assert_eq!(repair.steps().last().map(|s| s.action()), Some(RepairAction::AskUser));
    assert!(p.message().contains("Next actions, in order, not in parallel"), "{}", p.message());
    assert_eq!(p.message().contains("until the user or the current state shows"), !tracked, "{}", p.message());
    assert!(p.message().chars().count() <= 300);
}

#[tokio::test]
async fn verified_output_passes() {
    let (r, _m, runs) = verified_registry(RegistryConfig::default());
    let result = r.invoke(call("pay.send", json!({"verdict": "yes"})), consumer("c")).await;
    assert_eq!(result.output(), Some(&json!({"sent": true})), "{result:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failed_verification_is_verification_failed() {
    let (r, _m, _) = verified_registry(RegistryConfig::default());
    let inv = r.invoke_detailed(call("pay.send", json!({"verdict": "no"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!(p.detail("reason"), Some(&json!("verification-failed")));
    assert_eq!(p.retry(), Retry::No);
    assert!(p.repair().is_none());
}

#[tokio::test]
async fn an_undecided_erring_or_panicking_check_is_outcome_unknown() {
    let (r, _m, _) = verified_registry(RegistryConfig::default());
    for verdict in ["unknown", "error", "panic"] {
        let inv = r.invoke_detailed(call("pay.send", json!({"verdict": verdict})), consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_outcome_unknown(&p, false);
        let text = serde_json::to_string(&inv.result).unwrap();
        assert!(!text.contains("SECRET"), "{verdict}: {text}");
    }
}

#[tokio::test]
async fn a_check_past_the_budget_is_outcome_unknown() {
    let clock = clock();
    let (r, _m, _) = verified_registry(config_with(&clock));
    let fut = {
        let r = r.clone();
        tokio::spawn(
            async move { r.invoke_detailed(call("pay.send", json!({"verdict": "slow"})), consumer("c")).await },
        )
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(2));
    let p = assert_produced(&fut.await.unwrap(), ErrorCode::ExecutionFailed, Phase::Execute);
    assert_outcome_unknown(&p, false);
}

#[tokio::test]
async fn a_reconcile_call_is_answered_from_the_record() {
    let (r, _m, runs) = verified_registry(RegistryConfig::default());
    let request = || call("pay.send", json!({"verdict": "unknown"})).with_invocation_id("pay-1");
    let first = r.invoke_detailed(request(), consumer("c")).await;
    let p = assert_produced(&first, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_outcome_unknown(&p, true);
    // Reconcile: the same invocation id and the same request.
    let again = r.invoke_detailed(request(), consumer("c")).await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.result.without_correlation_id(), first.result.without_correlation_id());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler did not run again");
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Slow {}

/// `job.write` (write, not idempotent) and `job.put` (write, idempotent); both hang.
fn slow_registry(config: RegistryConfig) -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(config);
    r.define("job", |t| {
        let hang = |_: Ctx, _: Slow| async move {
            std::future::pending::<()>().await;
            Ok::<_, AgentSurfaceError>(json!({}))
        };
        t.capability("write", "Write something.").time_budget(Duration::from_secs(1)).handler(hang);
        t.capability("put", "Put something.").idempotent().time_budget(Duration::from_secs(1)).handler(hang)
    })
    .unwrap();
    let m = r.mount("job", "main").unwrap();
    (r, m)
}

/// Starts `capability` (optionally under an invocation id) and waits until its handler runs
/// under an armed time budget.
async fn started(
    r: &Registry,
    clock: &Arc<agent_surface_policy::ManualClock>,
    capability: &'static str,
    id: Option<&'static str>,
    options: agent_surface_registry::InvokeOptions,
) -> tokio::task::JoinHandle<agent_surface_registry::Invocation> {
    let r = r.clone();
    let mut request = call(capability, json!({}));
    if let Some(id) = id {
        request = request.with_invocation_id(id);
    }
    let fut = tokio::spawn(async move { r.invoke_detailed(request, options).await });
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    fut
}

#[tokio::test]
async fn interrupted_non_idempotent_writes_are_outcome_unknown() {
    let clock = clock();
    let (r, m) = slow_registry(config_with(&clock));
    // Timeout: outcome unknown for the write, TIMEOUT (retry yes) for the idempotent put; the
    // plan reconciles only when the call had an id.
    for (capability, id, expected) in
        [("job.write", None, None), ("job.write", Some("w-1"), None), ("job.put", None, Some(ErrorCode::Timeout))]
    {
        let fut = started(&r, &clock, capability, id, consumer("c")).await;
        clock.advance(Duration::from_secs(1));
        let inv = fut.await.unwrap();
        match expected {
            None => {
                let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
                assert_outcome_unknown(&p, id.is_some());
            }
            Some(code) => assert_eq!(assert_produced(&inv, code, Phase::Execute).retry(), Retry::Yes),
        }
    }
    // The caller cancels mid-flight: CANCELLED only for the idempotent put.
    for (capability, id) in [("job.write", Some("w-2")), ("job.put", None)] {
        let token = tokio_util::sync::CancellationToken::new();
        let fut = started(&r, &clock, capability, id, consumer("c").with_cancellation(token.clone())).await;
        token.cancel();
        let inv = fut.await.unwrap();
        if capability == "job.put" {
            assert_produced(&inv, ErrorCode::Cancelled, Phase::Execute);
        } else {
            let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
            assert_outcome_unknown(&p, true);
            // A reconcile call learns the recorded outcome; nothing runs again.
            let again = r.invoke_detailed(call("job.write", json!({})).with_invocation_id("w-2"), consumer("c")).await;
            assert!(again.replayed);
            assert_eq!(again.result.without_correlation_id(), inv.result.without_correlation_id());
        }
    }
    // Unmount mid-flight.
    let fut = started(&r, &clock, "job.write", None, consumer("c")).await;
    drop(m);
    assert_outcome_unknown(&assert_produced(&fut.await.unwrap(), ErrorCode::ExecutionFailed, Phase::Execute), false);
    // The registry disposed mid-flight.
    let _m = r.mount("job", "main").unwrap();
    let fut = started(&r, &clock, "job.write", Some("w-3"), consumer("c")).await;
    r.dispose();
    assert_outcome_unknown(&assert_produced(&fut.await.unwrap(), ErrorCode::ExecutionFailed, Phase::Execute), true);
}

/// A call dropped while its post-condition runs (the handler did run) records an unknown
/// outcome, not `CANCELLED`.
#[tokio::test]
async fn a_call_dropped_during_verification_records_an_unknown_outcome() {
    let (r, _m, runs) = verified_registry(RegistryConfig::default());
    let request = || call("pay.send", json!({"verdict": "slow"})).with_invocation_id("p-1");
    let fut = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke(request(), consumer("c")).await })
    };
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    fut.abort();
    let _ = fut.await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let again = r.invoke_detailed(request(), consumer("c")).await;
    assert!(again.replayed, "{again:?}");
    assert_outcome_unknown(again.result.error_payload().unwrap(), true);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// ---- Repair plans on preconditions ----------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
struct Book {
    slot: String,
}

fn slot_plan() -> Repair {
    Repair::plan([
        RepairStep::new(RepairAction::CallTool, "List the free slots.").tool("slots-list"),
        RepairStep::new(RepairAction::ChangeInput, "Pick a free slot."),
    ])
    .update(&["slot"])
}

fn define_book(r: &Registry, plan: Repair) -> Result<(), agent_surface_core::DefinitionError> {
    r.define("slots", |t| {
        t.capability("book", "Book a slot.")
            .precondition(|_: &Ctx, i: &Book| match i.slot.as_str() {
                "taken" => Err(Unmet::new("The slot is taken.")),
                "long" => Err(Unmet::new("The slot is taken.").repair(Repair::plan(
                    (0..7).map(|n| RepairStep::new(RepairAction::RefreshState, SafeTextN(n).text())),
                ))),
                "stop" => Err(Unmet::new("The slot is taken.")
                    .repair(Repair::single(RepairStep::new(RepairAction::Stop, "Give up.")))),
                _ => Ok(()),
            })
            .repair_on_precondition(plan)
            .handler(|_: Ctx, i: Book| async move { Ok::<_, AgentSurfaceError>(i.slot) })
    })
}

struct SafeTextN(usize);

impl SafeTextN {
    fn text(&self) -> agent_surface_core::SafeText {
        agent_surface_core::SafeText::trusted(format!("Refresh view {}.", self.0))
    }
}

#[tokio::test]
async fn a_static_plan_is_attached_and_rendered() {
    let r = Registry::new(RegistryConfig::default());
    define_book(&r, slot_plan()).unwrap();
    let _m = r.mount("slots", "main").unwrap();
    let inv = r.invoke_detailed(call("slots.book", json!({"slot": "taken"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.repair(), Some(&slot_plan()));
    assert_eq!(
        p.message(),
        "The slot is taken. Change the input or the state it depends on, then retry. Next actions, in order, not \
         in parallel: 1. Call slots-list and wait for its result. List the free slots. 2. Pick a free slot. \
         Replace slot from the repair output."
    );
    assert_eq!(
        p.to_json()["repair"]["steps"][0],
        json!({"action": "call_tool", "tool": "slots-list", "instruction": "List the free slots."})
    );
}

#[tokio::test]
async fn a_dynamic_plan_is_truncated_and_a_contradicting_one_dropped() {
    let r = Registry::new(RegistryConfig::default());
    define_book(&r, slot_plan()).unwrap();
    let _m = r.mount("slots", "main").unwrap();
    let inv = r.invoke_detailed(call("slots.book", json!({"slot": "long"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    let repair = p.repair().unwrap();
    assert_eq!(repair.steps().len(), 5);
    assert!(repair.is_truncated());
    assert_eq!(p.to_json()["repair"]["truncated"], json!(true));
    assert!(p.message().chars().count() <= 300);

    let inv = r.invoke_detailed(call("slots.book", json!({"slot": "stop"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    // `stop` contradicts retry with-changes: the dynamic plan is dropped, the static one stands.
    assert_eq!(p.repair(), Some(&slot_plan()));
}

#[test]
fn static_plans_that_break_the_rules_are_definition_errors() {
    let steps = |n: usize| (0..n).map(|_| RepairStep::new(RepairAction::RefreshState, "Refresh."));
    let long = "x".repeat(200);
    let cases = [
        (Repair::plan(steps(6)), DefinitionErrorCode::LimitExceeded),
        (
            Repair::plan(steps(1)).preserve(&["a", "b", "c", "d", "e", "f", "g", "h", "i"]),
            DefinitionErrorCode::LimitExceeded,
        ),
        (Repair::plan(steps(1)).update(&[long.as_str()]), DefinitionErrorCode::LimitExceeded),
        (
            Repair::single(RepairStep::new(
                RepairAction::ChangeInput,
                agent_surface_core::SafeText::trusted("y ".repeat(100)),
            )),
            DefinitionErrorCode::LimitExceeded,
        ),
        (Repair::plan(steps(0)), DefinitionErrorCode::InvalidDefinition),
        (Repair::single(RepairStep::new(RepairAction::CallTool, "Call it.")), DefinitionErrorCode::InvalidDefinition),
        (Repair::single(RepairStep::new(RepairAction::Stop, "Stop.")), DefinitionErrorCode::InvalidDefinition),
        (
            Repair::single(RepairStep::new(RepairAction::Reconcile, "Reconcile.")),
            DefinitionErrorCode::InvalidDefinition,
        ),
    ];
    for (plan, code) in cases {
        let r = Registry::new(RegistryConfig::default());
        let err = define_book(&r, plan.clone()).expect_err(&format!("{plan:?}"));
        assert_eq!(err.code(), code, "{plan:?}: {err}");
    }
}
