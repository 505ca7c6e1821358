//! Review findings, pinned: a failing rate limiter fails closed, a joined duplicate honours its
//! own cancellation, long invocation ids are stored by digest.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, ErrorCode, Phase, Retry, Timestamp};
use agent_surface_policy::{CallInfo, RateDecision, RateLimiter};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

struct PanickingLimiter;

impl RateLimiter for PanickingLimiter {
    fn acquire<'a>(&'a self, _call: CallInfo<'a>, _now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(async { panic!("limiter bug: redis://10.0.0.9 unreachable") })
    }
}

struct HangingLimiter;

impl RateLimiter for HangingLimiter {
    fn acquire<'a>(&'a self, _call: CallInfo<'a>, _now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn a_panicking_rate_limiter_fails_closed() {
    let (r, _m) =
        echo_registry(RegistryConfig { rate_limiter: Some(Arc::new(PanickingLimiter)), ..Default::default() });
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::RateLimited, Phase::Rate);
    assert_eq!(p.retry(), Retry::AfterDelay);
    assert!(!serde_json::to_string(&inv.result).unwrap().contains("10.0.0.9"));
}

#[tokio::test]
async fn a_hanging_rate_limiter_fails_closed_after_the_budget() {
    let clock = clock();
    let config = RegistryConfig { rate_limiter: Some(Arc::new(HangingLimiter)), ..config_with(&clock) };
    let (r, _m) = echo_registry(config);
    let fut = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(r.config().default_time_budget);
    let inv = fut.await.unwrap();
    let p = assert_produced(&inv, ErrorCode::RateLimited, Phase::Rate);
    assert_eq!(p.detail("reason"), Some(&json!("queue-full")));
}

#[tokio::test]
async fn a_joined_duplicate_honours_its_own_cancellation() {
    let clock = clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(config_with(&clock));
    let counter = runs.clone();
    r.define("slow", |t| {
        t.capability("run", "Run slowly.").handler(move |_c: Ctx, _i: Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                std::future::pending::<()>().await;
                Ok::<_, AgentSurfaceError>(json!({}))
            }
        });
    })
    .unwrap();
    let _m = r.mount("slow", "main").unwrap();
    let leader = {
        let r = r.clone();
        tokio::spawn(
            async move { r.invoke(call("slow.run", json!({})).with_invocation_id("same"), consumer("c")).await },
        )
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    let token = CancellationToken::new();
    let follower = {
        let (r, token) = (r.clone(), token.clone());
        tokio::spawn(async move {
            r.invoke_detailed(
                call("slow.run", json!({})).with_invocation_id("same"),
                consumer("c").with_cancellation(token),
            )
            .await
        })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    token.cancel();
    let inv = tokio::time::timeout(Duration::from_secs(5), follower).await.expect("the follower stops").unwrap();
    assert_produced(&inv, ErrorCode::Cancelled, Phase::Admission);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    leader.abort();
}

#[tokio::test]
async fn long_invocation_ids_work_and_stay_distinct() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    let long_a = "a".repeat(10_000);
    let long_b = format!("{}b", "a".repeat(9_999));
    let first =
        r.invoke(call("demo.echo", json!({"text": "x"})).with_invocation_id(long_a.clone()), consumer("c")).await;
    assert!(first.is_ok());
    assert_eq!(first.invocation_id(), Some(long_a.as_str()), "the caller's id is echoed, not the digest");
    let replay =
        r.invoke_detailed(call("demo.echo", json!({"text": "x"})).with_invocation_id(long_a), consumer("c")).await;
    assert!(replay.replayed);
    let other =
        r.invoke_detailed(call("demo.echo", json!({"text": "y"})).with_invocation_id(long_b), consumer("c")).await;
    assert!(other.result.is_ok() && !other.replayed, "a different long id is a different key");
}
