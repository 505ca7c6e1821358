//! Review findings, pinned: a failing rate limiter fails closed, a joined duplicate honours its
//! own cancellation, long invocation ids are stored by digest.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry, Timestamp};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use agent_surface_testing::Misbehaving;

use crate::support::*;

#[tokio::test]
async fn a_panicking_rate_limiter_fails_closed() {
    let (r, _m) = echo_registry(RegistryConfig {
        rate_limiter: Some(Arc::new(Misbehaving::panics_later("limiter", "limiter bug: redis://10.0.0.9 unreachable"))),
        ..Default::default()
    });
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::RateLimited, Phase::Rate);
    assert_eq!(p.retry(), Retry::AfterDelay);
    assert!(!serde_json::to_string(&inv.result).unwrap().contains("10.0.0.9"));
}

#[tokio::test]
async fn a_hanging_rate_limiter_fails_closed_after_the_budget() {
    let clock = clock();
    let config = RegistryConfig { rate_limiter: Some(Arc::new(Misbehaving::hangs("limiter"))), ..config_with(&clock) };
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

/// A duplicate joined to a call in flight stops when its own caller cancels, with an unknown
/// outcome whatever the capability: the leader may have committed ("retry with a fresh
/// invocationId" would run it again), and the answer must not depend on what authority has not
/// yet judged. Reconciling under the same id replays the leader's result.
#[tokio::test]
async fn a_joined_duplicate_honours_its_own_cancellation() {
    let clock = clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(config_with(&clock));
    let counter = runs.clone();
    r.define("slow", |t| {
        let hang = move |_c: Ctx, _i: Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                std::future::pending::<()>().await;
                Ok::<_, AgentSurfaceError>(json!({}))
            }
        };
        t.capability("run", "Run slowly.").handler(hang.clone());
        t.capability("peek", "Look slowly.").effect(Effect::Read).handler(hang);
    })
    .unwrap();
    let _m = r.mount("slow", "main").unwrap();
    for (n, capability) in [(1, "slow.peek"), (2, "slow.run")] {
        let id = format!("same-{n}");
        let leader = {
            let (r, id) = (r.clone(), id.clone());
            tokio::spawn(
                async move { r.invoke(call(capability, json!({})).with_invocation_id(id), consumer("c")).await },
            )
        };
        while clock.pending_sleeps() == 0 {
            tokio::task::yield_now().await;
        }
        let token = CancellationToken::new();
        let follower = {
            let (r, token, id) = (r.clone(), token.clone(), id.clone());
            tokio::spawn(async move {
                r.invoke_detailed(
                    call(capability, json!({})).with_invocation_id(id),
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
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
        assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")), "{capability}");
        assert_eq!(p.retry(), Retry::No);
        assert_eq!(runs.load(Ordering::SeqCst), n, "the follower never runs the handler");
        leader.abort();
        let _ = leader.await;
        while clock.pending_sleeps() > 0 {
            tokio::task::yield_now().await;
        }
    }
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

/// A store that records what it is asked to keep.
#[derive(Debug, Default)]
struct Recording {
    inner: agent_surface_policy::MemoryIdempotencyStore,
    kept: std::sync::Mutex<
        Vec<(agent_surface_policy::idempotency::IdempotencyKey, agent_surface_policy::idempotency::Settlement)>,
    >,
}

impl agent_surface_policy::IdempotencyStore for Recording {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn admit<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        fingerprint: agent_surface_policy::idempotency::Fingerprint,
        attempt: agent_surface_policy::idempotency::Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::idempotency::Admission, agent_surface_policy::StoreError>> {
        self.inner.admit(key, fingerprint, attempt, now)
    }

    fn cancel<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        attempt: agent_surface_policy::idempotency::Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        self.inner.cancel(key, attempt, now)
    }

    fn settle<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        fingerprint: agent_surface_policy::idempotency::Fingerprint,
        lease: agent_surface_policy::idempotency::Lease,
        settlement: agent_surface_policy::idempotency::Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        self.kept.lock().unwrap().push((key.clone(), settlement.clone()));
        self.inner.settle(key, fingerprint, lease, settlement, now)
    }

    fn start<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A record's size does not grow with the caller's invocation id: the key holds a digest of a
/// long id and the stored result no id at all (every answer carries its own caller's id).
#[tokio::test]
async fn a_record_does_not_keep_a_long_invocation_id() {
    let store = Arc::new(Recording::default());
    let (r, _m) = echo_registry(RegistryConfig { idempotency: store.clone(), ..Default::default() });
    let long = "i".repeat(1 << 20);
    let first = r.invoke(call("demo.echo", json!({"text": "x"})).with_invocation_id(long.clone()), consumer("c")).await;
    assert_eq!(first.invocation_id(), Some(long.as_str()));
    let kept = store.kept.lock().unwrap().clone();
    assert_eq!(kept.len(), 1);
    let (key, settlement) = &kept[0];
    assert!(key.invocation_id.len() <= 71, "the key holds a digest: {} bytes", key.invocation_id.len());
    let agent_surface_policy::idempotency::Settlement::Store { result, .. } = settlement else { panic!("stored") };
    assert_eq!(result.invocation_id(), None, "the stored result keeps no id");
    let replay = r
        .invoke_detailed(call("demo.echo", json!({"text": "x"})).with_invocation_id(long.clone()), consumer("c"))
        .await;
    assert!(replay.replayed);
    assert_eq!(replay.result.invocation_id(), Some(long.as_str()), "the replay carries its caller's id");
}

/// A store whose first `settle` never completes (a shared store that hangs), and says so.
#[derive(Debug, Default)]
struct StallingStore {
    inner: agent_surface_policy::MemoryIdempotencyStore,
    stalled: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
}

impl agent_surface_policy::IdempotencyStore for StallingStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn admit<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        fingerprint: agent_surface_policy::idempotency::Fingerprint,
        attempt: agent_surface_policy::idempotency::Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::idempotency::Admission, agent_surface_policy::StoreError>> {
        self.inner.admit(key, fingerprint, attempt, now)
    }

    fn cancel<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        attempt: agent_surface_policy::idempotency::Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        self.inner.cancel(key, attempt, now)
    }

    fn settle<'a>(
        &'a self,
        key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        fingerprint: agent_surface_policy::idempotency::Fingerprint,
        lease: agent_surface_policy::idempotency::Lease,
        settlement: agent_surface_policy::idempotency::Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        if !self.stalled.swap(true, Ordering::SeqCst) {
            self.entered.notify_one();
            return Box::pin(std::future::pending());
        }
        self.inner.settle(key, fingerprint, lease, settlement, now)
    }

    fn start<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A call dropped while the store writes its result records that result, not a guess: the
/// handler's output is replayed under the same id.
#[tokio::test]
async fn a_call_dropped_while_its_result_is_written_keeps_that_result() {
    let store = Arc::new(StallingStore::default());
    let config = RegistryConfig { idempotency: store.clone(), ..Default::default() };
    let (r, _m) = echo_registry(config);
    let request = || call("demo.echo", json!({"text": "kept"})).with_invocation_id("w-1");
    let task = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke(request(), consumer("c")).await })
    };
    store.entered.notified().await;
    task.abort();
    let _ = task.await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let again = r.invoke_detailed(request(), consumer("c")).await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.result.output(), Some(&json!({"text": "kept"})));
}

/// An idempotency store that never answers.
#[derive(Debug)]
struct HangingStore;

impl agent_surface_policy::IdempotencyStore for HangingStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn admit<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _: agent_surface_policy::idempotency::Fingerprint,
        _: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::idempotency::Admission, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }

    fn cancel<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }

    fn settle<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _: agent_surface_policy::idempotency::Fingerprint,
        _: agent_surface_policy::idempotency::Lease,
        _: agent_surface_policy::idempotency::Settlement,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }

    fn start<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// An idempotency store whose admissions never answer, and which records what it was asked.
#[derive(Debug, Default)]
struct UnansweringStore {
    admitted: std::sync::Mutex<Vec<agent_surface_policy::idempotency::Attempt>>,
    cancelled: std::sync::Mutex<Vec<agent_surface_policy::idempotency::Attempt>>,
}

impl agent_surface_policy::IdempotencyStore for UnansweringStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn admit<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _: agent_surface_policy::idempotency::Fingerprint,
        attempt: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::idempotency::Admission, agent_surface_policy::StoreError>> {
        self.admitted.lock().unwrap().push(attempt);
        Box::pin(std::future::pending())
    }

    fn cancel<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        attempt: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        self.cancelled.lock().unwrap().push(attempt);
        Box::pin(async { Ok(()) })
    }

    fn settle<'a>(
        &'a self,
        _: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _: agent_surface_policy::idempotency::Fingerprint,
        _: agent_surface_policy::idempotency::Lease,
        _: agent_surface_policy::idempotency::Settlement,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn start<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// An admission the store did not answer within the budget is answered "nothing ran" and its
/// attempt is cancelled (once, as soon as the store answers the cancellation), so that a claim
/// the store makes afterwards cannot outlive it; so is one whose caller dropped the call.
#[tokio::test]
async fn an_unanswered_admission_is_cancelled() {
    let store = Arc::new(UnansweringStore::default());
    let config =
        RegistryConfig { idempotency: store.clone(), store_budget: Duration::from_millis(50), ..Default::default() };
    let (r, _m) = echo_registry(config);
    let request = || call("demo.echo", json!({"text": "a"})).with_invocation_id("i");
    let inv = r.invoke_detailed(request(), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.retry(), Retry::AfterDelay);
    // Dropped while the store has not answered: cancelled too.
    assert!(tokio::time::timeout(Duration::from_millis(10), r.invoke(request(), consumer("c"))).await.is_err());
    for _ in 0..100 {
        if store.cancelled.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let admitted = store.admitted.lock().unwrap().clone();
    assert_eq!(admitted.len(), 2);
    assert_ne!(admitted[0], admitted[1], "every admission has an attempt of its own");
    assert_eq!(*store.cancelled.lock().unwrap(), admitted, "each attempt is cancelled once");
}

/// A hanging idempotency store fails the call closed within the store budget: nothing runs, the
/// answer is transient.
#[tokio::test]
async fn a_hanging_idempotency_store_fails_closed_within_its_budget() {
    let config = RegistryConfig {
        idempotency: Arc::new(HangingStore),
        store_budget: Duration::from_millis(50),
        ..Default::default()
    };
    let (r, _m) = echo_registry(config);
    let inv = tokio::time::timeout(
        Duration::from_secs(5),
        r.invoke_detailed(call("demo.echo", json!({"text": "a"})).with_invocation_id("i"), consumer("c")),
    )
    .await
    .expect("answered within the budget, not hung");
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.retry(), Retry::AfterDelay);
}

/// A confirmation store that never answers.
#[derive(Debug)]
struct HangingConfirmations;

impl agent_surface_policy::ConfirmationStore for HangingConfirmations {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn insert<'a>(
        &'a self,
        _: agent_surface_policy::ConfirmationRecord,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn insert_relayed<'a>(
        &'a self,
        _: agent_surface_policy::ConfirmationRecord,
        _: &'a agent_surface_policy::confirmation::RelayKey,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::confirmation::Inserted, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn get<'a>(
        &'a self,
        _: &'a str,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<Option<agent_surface_policy::ConfirmationRecord>, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn decide<'a>(
        &'a self,
        _: &'a str,
        _: agent_surface_policy::confirmation::ApprovalVerdict,
        _: &'a str,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::confirmation::Decided, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn consume<'a>(
        &'a self,
        _: &'a str,
        _: &'a agent_surface_policy::confirmation::ConfirmationBinding,
        _: Timestamp,
    ) -> BoxFuture<
        'a,
        Result<
            Result<agent_surface_policy::confirmation::Consumed, agent_surface_policy::confirmation::Rejection>,
            agent_surface_policy::StoreError,
        >,
    > {
        Box::pin(std::future::pending())
    }
    fn withdraw<'a>(
        &'a self,
        _: &'a str,
        _: Timestamp,
    ) -> BoxFuture<
        'a,
        Result<Option<agent_surface_policy::confirmation::ConfirmationState>, agent_surface_policy::StoreError>,
    > {
        Box::pin(std::future::pending())
    }
    fn list_pending<'a>(
        &'a self,
        _: Timestamp,
        _: usize,
    ) -> BoxFuture<'a, Result<Vec<agent_surface_policy::ConfirmationRecord>, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn decide_in_slots<'a>(
        &'a self,
        _id: &'a str,
        _v: agent_surface_policy::confirmation::ApprovalVerdict,
        _approver: &'a str,
        _slots: agent_surface_policy::confirmation::SlotSet,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<agent_surface_policy::confirmation::Decided, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn claim_expiry<'a>(
        &'a self,
        _id: &'a str,
        _until: Timestamp,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn expiry_recorded<'a>(
        &'a self,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn reinstate<'a>(
        &'a self,
        _id: &'a str,
        _expected: &'a agent_surface_policy::confirmation::ConfirmationBinding,
        _token: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn list_expired<'a>(
        &'a self,
        _now: Timestamp,
        _limit: usize,
    ) -> BoxFuture<'a, Result<Vec<agent_surface_policy::ConfirmationRecord>, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn remember_relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<String>, agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
    fn forget_relayed<'a>(
        &'a self,
        _key: &'a agent_surface_policy::confirmation::RelayKey,
        _id: &'a str,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::pending())
    }
}

/// A registry whose `orders.cancel` (destructive) is gated by `gate`, counting its runs.
fn gated(
    gate: Arc<dyn agent_surface_policy::ConfirmationGate>,
    budget: Duration,
) -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r =
        Registry::new(RegistryConfig { confirmation: Some(gate), confirmation_budget: budget, ..Default::default() });
    let counted = runs.clone();
    r.define("orders", move |t| {
        t.capability("cancel", "Cancel an order.")
            .effect(Effect::Destructive)
            .confirm(|_: &Value| "Cancel the order.".to_string())
            .handler(move |_c: Ctx, _i: Value| {
                let runs = counted.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"cancelled": true}))
                }
            })
    })
    .expect("valid");
    let m = r.mount("orders", "main").expect("mount");
    (r, m, runs)
}

/// A hanging confirmation gate, or a confirmation engine over a hanging store, fails the call
/// closed within its budget: the handler does not run, the answer is transient.
#[tokio::test]
async fn a_hanging_confirmation_gate_or_store_fails_closed_within_its_budget() {
    let engine = agent_surface_policy::ConfirmationEngine::new(agent_surface_policy::ConfirmationConfig {
        store: Arc::new(HangingConfirmations),
        store_budget: Duration::from_millis(50),
        ..Default::default()
    });
    for (gate, name) in [
        (Arc::new(Misbehaving::hangs("gate")) as Arc<dyn agent_surface_policy::ConfirmationGate>, "gate"),
        (Arc::new(engine), "engine over a hanging store"),
    ] {
        let (r, _m, runs) = gated(gate, Duration::from_millis(100));
        let inv = tokio::time::timeout(
            Duration::from_secs(5),
            r.invoke_detailed(call("orders.cancel", json!({})), consumer("c")),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: answered within the budget, not hung"));
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Confirmation);
        assert_eq!(p.retry(), Retry::AfterDelay, "{name}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{name}: nothing ran");
    }
}
