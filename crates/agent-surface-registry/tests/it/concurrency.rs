//! Idempotency under contention.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};

use crate::support::*;

fn counting_registry() -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    let counter = runs.clone();
    r.define("pay", |t| {
        let handler = move |_c: Ctx, i: Value| {
            let counter = counter.clone();
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                // Yield a few times so that duplicates arrive while this call is in flight.
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                Ok::<_, AgentSurfaceError>(json!({"charged": i["amount"], "run": n}))
            }
        };
        t.capability("charge", "Charge the card once.").handler(handler.clone());
        t.capability("balance", "Read the balance.").effect(Effect::Read).handler(handler);
    })
    .unwrap();
    let m = r.mount("pay", "main").unwrap();
    (r, m, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_duplicates_run_the_handler_once() {
    let (r, _m, runs) = counting_registry();
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            r.invoke_detailed(call("pay.charge", json!({"amount": 42})).with_invocation_id("once"), consumer("c")).await
        }));
    }
    let mut results: Vec<InvokeResult> = Vec::new();
    let (mut joined, mut replayed) = (0, 0);
    for t in tasks {
        let inv = t.await.unwrap();
        joined += usize::from(inv.joined);
        replayed += usize::from(inv.replayed);
        results.push(inv.result);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran more than once");
    assert!(results.iter().all(|r| r == &results[0]), "duplicates saw different results");
    assert_eq!(results[0].output(), Some(&json!({"charged": 42, "run": 1})));
    assert_eq!(joined + replayed, 999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_requests_under_contention_always_conflict() {
    let (r, _m, runs) = counting_registry();
    let mut tasks = Vec::new();
    for n in 0..400 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let amount = n % 2;
            (
                amount,
                r.invoke(call("pay.charge", json!({"amount": amount})).with_invocation_id("k"), consumer("c")).await,
            )
        }));
    }
    let mut by_amount = [Vec::new(), Vec::new()];
    for t in tasks {
        let (amount, result) = t.await.unwrap();
        by_amount[amount].push(result);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Exactly one of the two requests won the key; every call of the other got a conflict.
    let winner = usize::from(by_amount[1].iter().any(InvokeResult::is_ok));
    assert!(by_amount[winner].iter().all(InvokeResult::is_ok));
    assert!(by_amount[1 - winner].iter().all(|r| r.code() == Some(ErrorCode::InvocationConflict)));
}

/// A leader dropped after its handler started (the caller went away) records its end: `CANCELLED`
/// for a read, which repeats harmlessly, and `EXECUTION_FAILED {reason: outcome-unknown}` for a
/// write that may have committed. Either way a retry with the same id replays it and never runs
/// the handler again.
#[tokio::test]
async fn a_dropped_leader_records_how_it_ended() {
    let (r, _m, runs) = counting_registry();
    for (n, capability) in [(1, "pay.balance"), (2, "pay.charge")] {
        let id = format!("drop-{n}");
        let fut = r.invoke(call(capability, json!({"amount": 1})).with_invocation_id(&id), consumer("c"));
        // Poll it once so that it becomes the leader and starts the handler, then drop it.
        let mut fut = Box::pin(fut);
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        drop(fut);
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), n);
        let again =
            r.invoke_detailed(call(capability, json!({"amount": 1})).with_invocation_id(&id), consumer("c")).await;
        assert!(again.replayed);
        let p = again.result.error_payload().expect("an error was recorded");
        // The handler started: nothing may say the call was not processed.
        assert!(!p.not_processed(), "{p:?}");
        if capability == "pay.balance" {
            assert_eq!(p.code(), ErrorCode::Cancelled);
        } else {
            assert_eq!(p.code(), ErrorCode::ExecutionFailed);
            assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
            assert_eq!(p.retry(), agent_surface_core::Retry::No);
        }
        assert_eq!(runs.load(Ordering::SeqCst), n, "a retry with the same id must not run the handler again");
    }
}

#[tokio::test]
async fn replays_keep_the_stored_result_until_the_window_ends() {
    let clock = clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(config_with(&clock));
    let counter = runs.clone();
    r.define("pay", |t| {
        t.capability("charge", "Charge.").handler(move |_c: Ctx, _i: Value| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok::<_, AgentSurfaceError>(json!({"run": n})) }
        });
    })
    .unwrap();
    let _m = r.mount("pay", "main").unwrap();
    let req = call("pay.charge", json!({})).with_invocation_id("w");
    let first = r.invoke(req.clone(), consumer("c")).await;
    clock.advance(r.config().idempotency_window - std::time::Duration::from_millis(1));
    assert_eq!(r.invoke(req.clone(), consumer("c")).await, first);
    clock.advance(std::time::Duration::from_millis(2));
    assert_eq!(r.invoke(req, consumer("c")).await.output(), Some(&json!({"run": 2})));
}
