//! The author's precondition that awaits (`precondition_async`): where it runs in phase 5, and what
//! a caller is told when it is unmet, panics or does not answer within the call's time budget.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{AgentSurfaceError, DefinitionErrorCode, Effect, ErrorCode, Phase, Retry, SafeText};
use agent_surface_policy::{ConfirmationDecision, RateDecision};
use agent_surface_registry::{Ctx, InstanceState, Registry, RegistryConfig, State, Unmet};
use agent_surface_testing::{FnGate, FnLimiter};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::support::*;

#[derive(Deserialize, JsonSchema)]
struct Remove {
    /// The record to remove; `panic-now` and `panic-later` make the check panic, `hang` never answers.
    id: String,
}

/// Stands for a database the check must await.
#[derive(Clone, Default)]
struct Records(Arc<Mutex<HashSet<String>>>);

impl Records {
    async fn exists(&self, id: &str) -> bool {
        // Pending once, as a query over a socket would be.
        tokio::task::yield_now().await;
        self.0.lock().unwrap().contains(id)
    }
}

/// What ran, counted.
#[derive(Clone, Default)]
struct Runs {
    limiter: Arc<AtomicUsize>,
    gate: Arc<AtomicUsize>,
    handler: Arc<AtomicUsize>,
}

/// `records.remove` (destructive, a 50 ms time budget) behind an asynchronous precondition, in a
/// registry with a rate limiter and a confirmation gate that count what they are asked.
fn registry(records: &Records, runs: &Runs) -> (Registry, agent_surface_registry::Mount) {
    let (limiter, gate) = (runs.limiter.clone(), runs.gate.clone());
    let r = Registry::new(RegistryConfig {
        rate_limiter: Some(Arc::new(FnLimiter::new(move |_, _| {
            limiter.fetch_add(1, Ordering::SeqCst);
            RateDecision::Allow(None)
        }))),
        confirmation: Some(Arc::new(FnGate::new(move |_call, evidence, now| {
            gate.fetch_add(1, Ordering::SeqCst);
            match evidence {
                Some("conf-1") => ConfirmationDecision::Proceed,
                _ => ConfirmationDecision::Required {
                    confirmation_id: "conf-1".into(),
                    summary: SafeText::from("Remove a record."),
                    expires_at: now.saturating_add(Duration::from_secs(60)),
                    origin: Origin::Client,
                },
            }
        }))),
        ..Default::default()
    });
    r.provide(records.clone());
    let handler_runs = runs.handler.clone();
    r.define("records", |t| {
        t.capability("remove", "Remove a record.")
            .effect(Effect::Destructive)
            .time_budget(Duration::from_millis(50))
            .precondition_async(|State(records): State<Records>, i: &Remove| {
                let id = i.id.clone();
                assert_ne!(id, "panic-now", "a bug in the check");
                async move {
                    match id.as_str() {
                        "panic-later" => panic!("a bug in the check's future"),
                        "hang" => std::future::pending::<()>().await,
                        _ => {}
                    }
                    if records.exists(&id).await {
                        Ok(())
                    } else {
                        Err(Unmet::new("There is no record with this id.").reason("unknown-record"))
                    }
                }
            })
            .handler(move |_: Ctx, i: Remove| {
                handler_runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, AgentSurfaceError>(json!({"removed": i.id})) }
            })
    })
    .unwrap();
    let mount = r.mount("records", "main").unwrap();
    (r, mount)
}

fn remove(id: &str) -> agent_surface_registry::InvokeRequest {
    call("records.remove", json!({ "id": id }))
}

#[tokio::test]
async fn unmet_is_answered_before_the_rate_limit_and_the_confirmation() {
    let (records, runs) = (Records::default(), Runs::default());
    let (r, _m) = registry(&records, &runs);

    let inv = r.invoke_detailed(remove("r-1").with_invocation_id("i-1"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("unknown-record")));
    assert_eq!(p.retry(), Retry::WithChanges);
    assert!(p.not_processed());
    // Nobody was asked to approve removing a record that is not there, and no quota was spent.
    assert_eq!(runs.gate.load(Ordering::SeqCst), 0);
    assert_eq!(runs.limiter.load(Ordering::SeqCst), 0);
    assert_eq!(runs.handler.load(Ordering::SeqCst), 0);

    // Once the record exists, the rest of the call runs after the check: the quota, then the gate.
    records.0.lock().unwrap().insert("r-1".into());
    let inv = r.invoke_detailed(remove("r-1"), consumer("c")).await;
    assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!((runs.limiter.load(Ordering::SeqCst), runs.gate.load(Ordering::SeqCst)), (1, 1));
    let done = r.invoke(remove("r-1").with_confirmation("conf-1"), consumer("c")).await;
    assert_eq!(done.output(), Some(&json!({"removed": "r-1"})));
    assert_eq!(runs.handler.load(Ordering::SeqCst), 1);
}

#[test]
fn a_check_that_panics_is_execution_failed_and_says_nothing_of_the_panic() {
    let (records, runs) = (Records::default(), Runs::default());
    let (r, _m) = registry(&records, &runs);
    for id in ["panic-now", "panic-later"] {
        let (inv, log) = capture_operator_log(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(r.invoke_detailed(remove(id), consumer("c")))
        });
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Input);
        assert_eq!(p.detail("reason"), Some(&json!("handler-error")), "{id}");
        assert!(p.not_processed(), "{id}");
        assert!(!p.to_json().to_string().contains("a bug in the check"), "{id}");
        assert!(log.contains("precondition panicked"), "{id}: {log}");
    }
    assert_eq!(runs.gate.load(Ordering::SeqCst) + runs.limiter.load(Ordering::SeqCst), 0);
    assert_eq!(runs.handler.load(Ordering::SeqCst), 0);
}

#[test]
fn a_check_over_the_time_budget_is_transient_and_not_processed() {
    let (records, runs) = (Records::default(), Runs::default());
    let (r, _m) = registry(&records, &runs);
    let ((inv, again), log) = capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let request = remove("hang").with_invocation_id("i-hang");
            (r.invoke_detailed(request.clone(), consumer("c")).await, r.invoke_detailed(request, consumer("c")).await)
        })
    });
    // As every transient `EXECUTION_FAILED`, the answer is kept under its id, and it asks for a
    // new one: the same id is answered the same, without asking the check again.
    assert!(again.replayed);
    assert_eq!(again.result.error_payload().map(|p| p.detail("transient")), Some(Some(&json!(true))));
    assert!(inv.result.error_payload().unwrap().message().contains("under a new invocationId"));
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("transport")));
    assert_eq!(p.detail("transient"), Some(&json!(true)));
    assert_eq!(p.retry(), Retry::AfterDelay);
    assert_eq!(p.retry_after(), Some(Duration::from_secs(1)));
    assert!(p.not_processed());
    assert!(log.contains("precondition did not answer within 50 ms"), "{log}");
    assert_eq!(runs.gate.load(Ordering::SeqCst) + runs.limiter.load(Ordering::SeqCst), 0);
}

#[test]
fn a_capability_has_one_precondition() {
    let r = Registry::new(RegistryConfig::default());
    let err = r
        .define("records", |t| {
            t.capability("remove", "Remove a record.")
                .precondition(|_: &Ctx, _: &Remove| Ok(()))
                .precondition_async(|_: Ctx, _: &Remove| async { Ok(()) })
                .handler(|_: Ctx, i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) })
        })
        .unwrap_err();
    assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
    assert!(err.to_string().contains("one precondition"), "{err}");
}

/// The state of one instance of `counters`.
struct Counter;

#[test]
fn what_the_check_reads_is_checked_at_mount() {
    let r = Registry::new(RegistryConfig::default());
    r.define("records", |t| {
        t.capability("remove", "Remove a record.")
            .precondition_async(|State(records): State<Records>, i: &Remove| {
                let id = i.id.clone();
                async move { if records.exists(&id).await { Ok(()) } else { Err(Unmet::new("No such record.")) } }
            })
            // The handler reads nothing: only the check needs `Records`.
            .handle(|i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) })
    })
    .unwrap();
    let err = r.mount("records", "main").unwrap_err();
    assert!(err.to_string().contains("the precondition takes `State<") && err.to_string().contains("Records"), "{err}");
    r.provide(Records::default());
    assert!(r.mount("records", "main").is_ok());

    // Instance state too, and the context alongside.
    r.define("counters", |t| {
        t.capability("reset", "Reset a counter.")
            .precondition_async(|_: InstanceState<Counter>, _: Ctx, _: &Remove| async { Ok(()) })
            .handle(|i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) })
    })
    .unwrap();
    assert!(r.mount("counters", "main").is_err());
    assert!(r.mount_with("counters", "main", agent_surface_registry::Instance::new().state(Counter)).is_ok());
}

/// The check that answers at once (`.precondition`) takes extractors too, checked at mount as the
/// handler's are; the context by reference and the input alone remain valid shapes.
#[tokio::test]
async fn what_a_check_that_answers_at_once_reads_is_checked_at_mount() {
    #[derive(Default)]
    struct Known(HashSet<String>);
    let r = Registry::new(RegistryConfig::default());
    r.define("records", |t| {
        t.capability("remove", "Remove a record.")
            .precondition(|State(known): State<Known>, i: &Remove| {
                if known.0.contains(&i.id) { Ok(()) } else { Err(Unmet::new("No such record.").reason("unknown")) }
            })
            // The handler reads nothing: only the check needs `Known`.
            .handle(|i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) });
        t.capability("keep", "Keep a record.")
            .precondition(|i: &Remove| if i.id.is_empty() { Err(Unmet::new("Name a record.")) } else { Ok(()) })
            .handle(|i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) });
        t.capability("show", "Show a record.")
            .precondition(|ctx: &Ctx, i: &Remove| match ctx.try_state::<Known>() {
                Some(known) if known.0.contains(&i.id) => Ok(()),
                _ => Err(Unmet::new("No such record.")),
            })
            .handle(|i: Remove| async move { Ok::<_, AgentSurfaceError>(i.id) })
    })
    .unwrap();
    let err = r.mount("records", "main").unwrap_err();
    assert!(err.to_string().contains("the precondition takes `State<") && err.to_string().contains("Known"), "{err}");
    r.provide(Known(HashSet::from(["r-1".to_string()])));
    let _m = r.mount("records", "main").unwrap();

    assert_eq!(
        r.invoke(call("records.remove", json!({"id": "r-1"})), consumer("c")).await.output(),
        Some(&json!("r-1"))
    );
    let inv = r.invoke_detailed(call("records.remove", json!({"id": "r-2"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("unknown")));
    let inv = r.invoke_detailed(call("records.keep", json!({"id": ""})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(r.invoke(call("records.show", json!({"id": "r-1"})), consumer("c")).await.output(), Some(&json!("r-1")));
}

#[test]
fn under_a_natural_key_a_check_that_did_not_answer_leaves_the_key_free() {
    let slow = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    let (flag, counted) = (slow.clone(), runs.clone());
    r.define("records", |t| {
        t.capability("archive", "Archive a record, once.")
            .idempotency_key(|i: &Remove| i.id.clone())
            .time_budget(Duration::from_millis(50))
            .precondition_async(move |_: Ctx, _: &Remove| {
                let slow = flag.load(Ordering::SeqCst);
                async move {
                    if slow {
                        std::future::pending::<()>().await;
                    }
                    Ok(())
                }
            })
            .handle(move |i: Remove| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, AgentSurfaceError>(json!({"archived": i.id})) }
            })
    })
    .unwrap();
    let _m = r.mount("records", "main").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let archive = || call("records.archive", json!({"id": "r-1"}));
    let first = rt.block_on(r.invoke_detailed(archive(), consumer("c")));
    let p = assert_produced(&first, ErrorCode::ExecutionFailed, Phase::Input);
    assert_eq!(p.retry(), Retry::AfterDelay);
    // The dependency recovers: the same input runs, as the retry the agent was told of says,
    // instead of being answered the failure from the key's record for the whole window.
    slow.store(false, Ordering::SeqCst);
    let second = rt.block_on(r.invoke_detailed(archive(), consumer("c")));
    assert!(!second.replayed);
    assert_eq!(second.result.output(), Some(&json!({"archived": "r-1"})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// `records.wait`: a check that waits until told (or forever), handing its context's cancellation
/// token out; a 10 s time budget, which the tests below never reach.
fn waiting(tokens: Arc<Mutex<Vec<tokio_util::sync::CancellationToken>>>, runs: Arc<AtomicUsize>) -> Registry {
    let r = Registry::new(RegistryConfig::default());
    r.define("records", |t| {
        t.capability("wait", "Wait for a record.")
            .time_budget(Duration::from_secs(10))
            .precondition_async(move |ctx: Ctx, i: &Remove| {
                tokens.lock().unwrap().push(ctx.cancellation().clone());
                let answers = i.id == "answers";
                async move {
                    if !answers {
                        std::future::pending::<()>().await;
                    }
                    Ok(())
                }
            })
            .handle(move |i: Remove| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, AgentSurfaceError>(i.id) }
            })
    })
    .unwrap();
    r
}

#[tokio::test]
async fn cancelling_the_call_or_disposing_the_registry_ends_the_check() {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(AtomicUsize::new(0));
    let r = waiting(tokens.clone(), runs.clone());
    let _m = r.mount("records", "main").unwrap();

    // The caller cancels while the check waits: the call ends at once, nothing ran.
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = consumer("c").with_cancellation(cancel.clone());
    let pending = r.invoke_detailed(call("records.wait", json!({"id": "never"})), options);
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    };
    let started = std::time::Instant::now();
    let (inv, ()) = tokio::join!(pending, canceller);
    assert!(started.elapsed() < Duration::from_secs(5), "ended by the cancellation, not the budget");
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Input);
    assert!(p.not_processed());
    // The check's own context was ended with it.
    assert!(tokens.lock().unwrap().iter().all(|t| t.is_cancelled()));

    // A check that answered ends its context too (the handler's is another).
    let ok = r.invoke(call("records.wait", json!({"id": "answers"})), consumer("c")).await;
    assert_eq!(ok.output(), Some(&json!("answers")));
    assert!(tokens.lock().unwrap().iter().all(|t| t.is_cancelled()));

    // The registry is disposed while a check waits.
    let pending = r.invoke_detailed(call("records.wait", json!({"id": "never"})), consumer("c"));
    let disposer = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        r.dispose();
    };
    let (inv, ()) = tokio::join!(pending, disposer);
    assert_produced(&inv, ErrorCode::Cancelled, Phase::Input);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the check that answered let its handler run");
}
