//! `MemoryIdempotencyStore`: the admission table, settlement, expiry, capacity and concurrency.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, MemoryIdempotencyStore, MemoryStoreConfig, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use serde_json::json;
use tokio::sync::Barrier;

const T0: Timestamp = Timestamp::from_unix_millis(1_767_225_600_000);

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0.unix_millis() + ms)
}

fn key(invocation: &str) -> IdempotencyKey {
    IdempotencyKey::new("consumer-1", invocation)
}

fn fp(n: u64) -> Fingerprint {
    Fingerprint::of(&json!({"capability": "orders.cancel", "input": {"id": n}}))
}

fn ok(n: u64) -> InvokeResult {
    InvokeResult::ok(json!({"n": n}), Some("inv".into()))
}

fn store(result: InvokeResult, expires_at: Timestamp) -> Settlement {
    Settlement::Store { result, expires_at }
}

fn store_with(capacity: usize) -> MemoryIdempotencyStore {
    MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(capacity))
}

/// The admission, unwrapped; panics on a store error.
async fn admit(s: &impl IdempotencyStore, k: &IdempotencyKey, f: Fingerprint, now: Timestamp) -> Admission {
    s.admit(k, f, Attempt::fresh(), now).await.expect("admission")
}

async fn settle(
    s: &impl IdempotencyStore,
    k: &IdempotencyKey,
    f: Fingerprint,
    lease: Lease,
    settlement: Settlement,
    now: Timestamp,
) {
    s.settle(k, f, lease, settlement, now).await.expect("settlement");
}

/// The leader's lease; panics on any other admission.
#[track_caller]
fn assert_leader(admission: Admission) -> Lease {
    match admission {
        Admission::Leader(lease) => lease,
        other => panic!("expected Leader, got {other:?}"),
    }
}

#[track_caller]
fn assert_replay(admission: Admission, expected: &InvokeResult) {
    match admission {
        Admission::Replay(result) => assert_eq!(&result, expected),
        other => panic!("expected Replay, got {other:?}"),
    }
}

#[track_caller]
fn assert_conflict(admission: Admission, expected: Fingerprint) {
    match admission {
        Admission::Conflict { stored } => assert_eq!(stored, expected),
        other => panic!("expected Conflict, got {other:?}"),
    }
}

#[track_caller]
fn follower(admission: Admission) -> futures_util::future::BoxFuture<'static, InvokeResult> {
    match admission {
        Admission::Follower(future) => future,
        other => panic!("expected Follower, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_follower_replay() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    assert!(s.is_empty());
    let lease1 = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    let waiting = tokio::spawn(follower(admit(&s, &k, fp(1), at(1)).await));
    let another = follower(admit(&s, &k, fp(1), at(2)).await);
    assert_eq!(s.len(), 1);

    settle(&s, &k, fp(1), lease1, store(ok(1), at(1_000)), at(3)).await;
    assert_eq!(waiting.await.expect("follower task"), ok(1));
    assert_eq!(another.await, ok(1));
    assert_replay(admit(&s, &k, fp(1), at(999)).await, &ok(1));
    assert_eq!(s.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicts_in_flight_and_after() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    let lease2 = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    assert_conflict(admit(&s, &k, fp(2), at(1)).await, fp(1));
    settle(&s, &k, fp(1), lease2, store(ok(1), at(1_000)), at(2)).await;
    assert_conflict(admit(&s, &k, fp(2), at(3)).await, fp(1));
    // Other consumers and other invocation ids are other keys.
    assert_leader(admit(&s, &IdempotencyKey::new("consumer-2", "inv-1"), fp(2), at(4)).await);
    assert_leader(admit(&s, &key("inv-2"), fp(2), at(5)).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn release_hands_over_then_forgets() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    let limited = InvokeResult::error(
        AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_secs(3)).into_payload(),
        Some("inv-1".into()),
    );
    let lease4 = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    let waiting = follower(admit(&s, &k, fp(1), at(1)).await);
    settle(&s, &k, fp(1), lease4, Settlement::Release { result: limited.clone() }, at(2)).await;
    assert_eq!(waiting.await, limited);
    assert!(s.is_empty());
    // Released: the retry leads again, even with another request.
    assert_leader(admit(&s, &k, fp(2), at(3)).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn stored_results_expire() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    let lease6 = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    settle(&s, &k, fp(1), lease6, store(ok(1), at(10_000)), at(5)).await;
    assert_replay(admit(&s, &k, fp(1), at(9_999)).await, &ok(1));
    assert_conflict(admit(&s, &k, fp(2), at(9_999)).await, fp(1));
    // `expires_at` is exclusive: at that instant the key is free.
    assert_leader(admit(&s, &k, fp(2), at(10_000)).await);
    assert_conflict(admit(&s, &k, fp(1), at(10_001)).await, fp(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn storing_an_already_expired_result_only_hands_it_over() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    let lease8 = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    let waiting = follower(admit(&s, &k, fp(1), at(1)).await);
    settle(&s, &k, fp(1), lease8, store(ok(1), at(50)), at(50)).await;
    assert_eq!(waiting.await, ok(1));
    assert!(s.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn settling_what_is_not_in_flight_is_refused_and_changes_nothing() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    let lost = |r: Result<(), StoreError>| assert_eq!(r, Err(StoreError::LeaseLost));
    // Unknown key.
    lost(s.settle(&k, fp(1), Lease::until_settled(0), store(ok(1), at(1_000)), at(0)).await);
    assert!(s.is_empty());

    let lease = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    // Another fingerprint, or a lease the store did not give, does not settle this leader's record.
    lost(s.settle(&k, fp(2), lease, store(ok(2), at(1_000)), at(1)).await);
    let forged = Lease::until_settled(lease.token + 1);
    lost(s.settle(&k, fp(1), forged, store(ok(2), at(1_000)), at(1)).await);
    let waiting = follower(admit(&s, &k, fp(1), at(2)).await);
    settle(&s, &k, fp(1), lease, store(ok(1), at(1_000)), at(3)).await;
    assert_eq!(waiting.await, ok(1));
    // A second settlement neither replaces nor releases the stored result.
    lost(s.settle(&k, fp(1), lease, store(ok(9), at(5_000)), at(4)).await);
    lost(s.settle(&k, fp(1), lease, Settlement::Release { result: ok(9) }, at(5)).await);
    assert_replay(admit(&s, &k, fp(1), at(6)).await, &ok(1));
    // A new leader after the result expired gets a new token; the old lease cannot touch it.
    let next = assert_leader(admit(&s, &k, fp(1), at(1_000)).await);
    assert_ne!(next.token, lease.token);
    lost(s.settle(&k, fp(1), lease, store(ok(9), at(5_000)), at(1_001)).await);
    assert_eq!(s.renew(&k, next, at(1_001)).await, Ok(()), "memory leases need no renewal");
}

#[tokio::test(flavor = "multi_thread")]
async fn followers_of_a_vanished_leader_are_cancelled() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-7");
    assert_leader(admit(&s, &k, fp(1), at(0)).await);
    let waiting = follower(admit(&s, &k, fp(1), at(1)).await);
    drop(s);
    let result = waiting.await;
    assert_eq!(result.code(), Some(ErrorCode::Cancelled));
    assert_eq!(result.invocation_id(), Some("inv-7"));
}

#[tokio::test(flavor = "multi_thread")]
async fn admission_is_lazy() {
    let s = MemoryIdempotencyStore::default();
    let k = key("inv-1");
    drop(s.admit(&k, fp(1), Attempt::fresh(), at(0)));
    assert!(s.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn one_thousand_concurrent_duplicates_have_one_leader() {
    const N: usize = 1_000;
    let s = Arc::new(MemoryIdempotencyStore::default());
    let barrier = Arc::new(Barrier::new(N));
    let k = key("inv-hot");
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let (s, barrier, k) = (Arc::clone(&s), Arc::clone(&barrier), k.clone());
            tokio::spawn(async move {
                let admission = admit(&s, &k, fp(1), at(0)).await;
                // Everyone is admitted before the leader settles.
                barrier.wait().await;
                match admission {
                    Admission::Leader(lease) => {
                        settle(&s, &k, fp(1), lease, store(ok(42), at(60_000)), at(1)).await;
                        None
                    }
                    Admission::Follower(result) => Some(result.await),
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    let mut leaders = 0;
    let mut followers = 0;
    for task in tasks {
        match task.await.expect("task") {
            None => leaders += 1,
            Some(result) => {
                assert_eq!(result, ok(42));
                followers += 1;
            }
        }
    }
    assert_eq!((leaders, followers), (1, N - 1));
    assert_replay(admit(&*s, &k, fp(1), at(2)).await, &ok(42));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_requests_with_different_fingerprints_for_one_key() {
    const N: u64 = 300;
    let s = Arc::new(MemoryIdempotencyStore::default());
    let barrier = Arc::new(Barrier::new(usize::try_from(N).unwrap()));
    let k = key("inv-contested");
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let (s, barrier, k) = (Arc::clone(&s), Arc::clone(&barrier), k.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let f = fp(i % 3);
                (f, admit(&*s, &k, f, at(0)).await)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    let winners: Vec<Fingerprint> =
        outcomes.iter().filter(|(_, a)| matches!(a, Admission::Leader(_))).map(|(f, _)| *f).collect();
    assert_eq!(winners.len(), 1);
    let winner = winners[0];
    for (f, admission) in outcomes {
        match admission {
            Admission::Leader(_) => assert_eq!(f, winner),
            Admission::Follower(_) => assert_eq!(f, winner),
            Admission::Conflict { stored } => {
                assert_ne!(f, winner);
                assert_eq!(stored, winner);
            }
            Admission::Replay(_) => panic!("nothing was settled"),
            Admission::TakeOver(_) => panic!("memory leases do not lapse"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_evicts_the_oldest_stored_results_first() {
    let s = store_with(3);
    let mut leases = Vec::new();
    for i in 1..=3 {
        leases.push(assert_leader(admit(&s, &key(&format!("k{i}")), fp(i), at(i)).await));
    }
    // Settled in the order k2, k3, k1.
    for i in [2, 3, 1] {
        let lease = leases[usize::try_from(i - 1).unwrap()];
        settle(&s, &key(&format!("k{i}")), fp(i), lease, store(ok(i), at(1_000_000)), at(10 + i)).await;
    }
    assert_leader(admit(&s, &key("k4"), fp(4), at(20)).await);
    assert_eq!(s.len(), 3);
    // k2 (settled first) went: its key is free for another request.
    assert_replay(admit(&s, &key("k3"), fp(3), at(21)).await, &ok(3));
    assert_replay(admit(&s, &key("k1"), fp(1), at(21)).await, &ok(1));
    assert_leader(admit(&s, &key("k2"), fp(99), at(22)).await);
    assert_eq!(s.len(), 3);
    // That evicted k3, the next oldest.
    assert_replay(admit(&s, &key("k1"), fp(1), at(23)).await, &ok(1));
    assert_leader(admit(&s, &key("k3"), fp(99), at(23)).await);
    assert_eq!(s.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_drops_expired_results_before_live_ones() {
    let s = store_with(3);
    let (old, short, busy) = (key("old"), key("short"), key("busy"));
    let lease15 = assert_leader(admit(&s, &old, fp(1), at(0)).await);
    settle(&s, &old, fp(1), lease15, store(ok(1), at(1_000_000)), at(1)).await;
    let lease16 = assert_leader(admit(&s, &short, fp(2), at(2)).await);
    settle(&s, &short, fp(2), lease16, store(ok(2), at(100)), at(3)).await;
    assert_leader(admit(&s, &busy, fp(3), at(4)).await);
    assert_eq!(s.len(), 3);

    assert_leader(admit(&s, &key("new"), fp(4), at(100)).await);
    assert_eq!(s.len(), 3);
    assert_replay(admit(&s, &old, fp(1), at(101)).await, &ok(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn full_when_every_record_is_in_flight() {
    let s = store_with(2);
    let lease19 = assert_leader(admit(&s, &key("a"), fp(1), at(0)).await);
    assert_leader(admit(&s, &key("b"), fp(2), at(0)).await);
    let err = s.admit(&key("c"), fp(3), Attempt::fresh(), at(1)).await.expect_err("full");
    assert_eq!(err, StoreError::Full { capacity: 2 });
    assert_eq!(err.to_string(), "the store is full (capacity 2)");
    // Existing keys are still answered at capacity.
    drop(follower(admit(&s, &key("a"), fp(1), at(1)).await));
    assert_conflict(admit(&s, &key("b"), fp(1), at(1)).await, fp(2));

    settle(&s, &key("a"), fp(1), lease19, store(ok(1), at(1_000)), at(2)).await;
    assert_leader(admit(&s, &key("c"), fp(3), at(3)).await);
    assert_eq!(s.len(), 2);

    let nothing = store_with(0);
    assert_eq!(
        nothing.admit(&key("a"), fp(1), Attempt::fresh(), at(0)).await.expect_err("full"),
        StoreError::Full { capacity: 0 }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn len_never_exceeds_capacity() {
    let s = store_with(10);
    for i in 0..1_000u64 {
        let k = key(&format!("k{i}"));
        let lease22 = assert_leader(admit(&s, &k, fp(i), at(i)).await);
        // A mix of long-lived, short-lived and released results.
        let settlement = match i % 3 {
            0 => store(ok(i), at(i + 1_000_000)),
            1 => store(ok(i), at(i + 5)),
            _ => Settlement::Release { result: ok(i) },
        };
        settle(&s, &k, fp(i), lease22, settlement, at(i)).await;
        assert!(s.len() <= 10);
    }
}

#[test]
fn fingerprints() {
    let a = Fingerprint::of(&json!({"b": [1, 2.0, "x"], "a": {"y": null, "x": true}}));
    let b = Fingerprint::of(&serde_json::from_str(r#"{ "a": {"x": true, "y": null}, "b": [1.0, 2, "x"] }"#).unwrap());
    assert_eq!(a, b);
    assert_ne!(a, Fingerprint::of(&json!({"b": [2, 1, "x"], "a": {"y": null, "x": true}})));
    // Integers beyond 2^53 stay distinct.
    assert_ne!(Fingerprint::of(&json!(9_007_199_254_740_993_u64)), Fingerprint::of(&json!(9_007_199_254_740_992_u64)));

    let hex = a.to_string();
    assert_eq!(hex.len(), 64);
    assert!(hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    assert_eq!(format!("{a:?}"), hex);
    assert_eq!(Fingerprint::from_bytes(*a.as_bytes()), a);
    // sha256 of the empty array's canonical form "[]".
    assert_eq!(
        Fingerprint::of(&json!([])).to_string(),
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    );
}

#[test]
fn config_and_debug() {
    assert_eq!(MemoryStoreConfig::default().capacity, 100_000);
    assert_eq!(MemoryStoreConfig::with_capacity(7).capacity, 7);
    let s = store_with(7);
    assert_eq!(format!("{s:?}"), "MemoryIdempotencyStore { capacity: 7, len: 0 }");
    assert_eq!(
        format!("{:?}", Admission::Leader(Lease::until_settled(3))),
        "Leader(Lease { token: 3, renew_every: None })"
    );
}

fn big(n: u64, bytes: usize) -> InvokeResult {
    InvokeResult::ok(json!({"n": n, "blob": "b".repeat(bytes)}), None)
}

/// Records are bounded by bytes as well as by count: many consumers (anonymous session names
/// cost nothing to invent) storing large results keep the store within its byte budget, and a
/// consumer over its own budget evicts only its own results.
#[tokio::test(flavor = "multi_thread")]
async fn records_are_bounded_by_bytes() {
    let config = MemoryStoreConfig::default().with_bytes(8 << 20, 2 << 20);
    let s = MemoryIdempotencyStore::new(config);
    // A victim's small result, stored first.
    let victim = IdempotencyKey::new("victim", "pay-1");
    let lease = assert_leader(admit(&s, &victim, fp(1), at(0)).await);
    settle(&s, &victim, fp(1), lease, store(ok(1), at(1_000_000)), at(0)).await;
    // One consumer floods its own budget: its oldest go, the victim stays.
    for i in 0..100u64 {
        let k = IdempotencyKey::new("flood", format!("k{i}"));
        let lease = assert_leader(admit(&s, &k, fp(i), at(1)).await);
        settle(&s, &k, fp(i), lease, store(big(i, 100_000), at(1_000_000)), at(1)).await;
        assert!(s.bytes() <= (2 << 20) + 200_000, "{} bytes after {i}", s.bytes());
    }
    assert_replay(admit(&s, &victim, fp(1), at(2)).await, &ok(1));
    // Five hundred invented consumers: the store as a whole stays within its budget.
    for i in 0..500u64 {
        let k = IdempotencyKey::new(format!("http-anonymous:s{i}"), "k");
        let lease = assert_leader(admit(&s, &k, fp(i), at(3)).await);
        settle(&s, &k, fp(i), lease, store(big(i, 100_000), at(1_000_000)), at(3)).await;
        assert!(s.bytes() <= (8 << 20) + 200_000, "{} bytes after {i}", s.bytes());
    }
    assert!(s.len() < 100, "{} records kept", s.len());
}

/// A result over `max_result_bytes` reaches the leader's followers, but the record keeps that it
/// was withheld: a retry learns the call ran, and never runs it again.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_result_is_recorded_as_withheld() {
    let s = MemoryIdempotencyStore::new(MemoryStoreConfig::default().with_max_result_bytes(10_000));
    let k = key("inv-big");
    let lease = assert_leader(admit(&s, &k, fp(1), at(0)).await);
    let waiting = follower(admit(&s, &k, fp(1), at(1)).await);
    settle(&s, &k, fp(1), lease, store(big(1, 20_000), at(1_000)), at(2)).await;
    assert_eq!(waiting.await, big(1, 20_000), "the follower gets the real result");
    match admit(&s, &k, fp(1), at(3)).await {
        Admission::Replay(result) => {
            let p = result.error_payload().expect("withheld");
            assert_eq!(p.code(), ErrorCode::ExecutionFailed);
            assert_eq!(p.detail("reason"), Some(&json!("output-too-large")));
        }
        other => panic!("expected a replay, got {other:?}"),
    }
    assert!(s.bytes() < 2_000, "{} bytes", s.bytes());
}
