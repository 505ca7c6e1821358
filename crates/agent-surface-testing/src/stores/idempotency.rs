//! The store kit's checks of an [`IdempotencyStore`]: the admission table, settlement and
//! release, fencing by lease, expiry of stored results, renewal, cancelled attempts, and many
//! concurrent admissions of one key with one leader.

use std::time::Duration;

use agent_surface_core::{InvokeResult, Timestamp};
use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement};
use agent_surface_policy::{IdempotencyStore, StoreError};
use futures_util::future::join_all;
use serde_json::json;

use super::expect;

/// The first admission's lease; panics (naming `rule`) on any other answer.
#[track_caller]
fn leader_of(rule: &str, admission: Admission) -> Lease {
    match admission {
        Admission::Leader(lease) => lease,
        other => panic!("store kit: {rule}: expected Leader, got {other:?}"),
    }
}

fn result_of(n: u64) -> InvokeResult {
    InvokeResult::ok(json!({"n": n}), None)
}

/// Runs the [`IdempotencyStore`] suite against `store`: the admission table (leader, follower,
/// replay, conflict), settlement and release, fencing (a settlement with a lease the record does
/// not hold is `LeaseLost` and changes nothing), expiry of stored results, renewal, and 200
/// concurrent admissions of one key with one leader. Keys are `("kit", prefix + name)`.
///
/// Expiry is checked on the real clock (a result stored for 300 ms, looked up after 400 ms), since
/// a shared store measures time on its own clock; the suite takes about half a second.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_idempotency_store(store: &dyn IdempotencyStore, prefix: &str) {
    let key = |name: &str| IdempotencyKey::new("kit", format!("{prefix}{name}"));
    let fp = |n: u64| Fingerprint::of(&json!({"request": n}));
    let now = Timestamp::now;
    let long = |t: Timestamp| t.saturating_add(Duration::from_secs(600));
    let admit = |k: IdempotencyKey, f: Fingerprint| async move {
        expect("admit", store.admit(&k, f, Attempt::fresh(), now()).await)
    };

    // Leader, follower, replay.
    let k = key("basic");
    let lease = leader_of("a new key leads", admit(k.clone(), fp(1)).await);
    expect("start", store.start(&k, lease, now()).await);
    let Admission::Follower(waiting) = admit(k.clone(), fp(1)).await else {
        panic!("store kit: the same request in flight must follow");
    };
    match admit(k.clone(), fp(2)).await {
        Admission::Conflict { stored } => assert_eq!(stored, fp(1), "store kit: a conflict names the stored request"),
        other => panic!("store kit: another request in flight must conflict, got {other:?}"),
    }
    let t = now();
    expect(
        "settle",
        store.settle(&k, fp(1), lease, Settlement::Store { result: result_of(1), expires_at: long(t) }, t).await,
    );
    assert_eq!(waiting.await, result_of(1), "store kit: a follower receives the leader's result");
    match admit(k.clone(), fp(1)).await {
        Admission::Replay(result) => assert_eq!(result, result_of(1), "store kit: a replay returns the stored result"),
        other => panic!("store kit: a settled request must replay, got {other:?}"),
    }
    assert!(
        matches!(admit(k.clone(), fp(2)).await, Admission::Conflict { stored } if stored == fp(1)),
        "store kit: another request after settlement must conflict"
    );

    // Fencing: no settlement or renewal without the lease that holds the record.
    let again = |l: Lease, n: u64| {
        let k = k.clone();
        async move {
            let t = now();
            store.settle(&k, fp(1), l, Settlement::Store { result: result_of(n), expires_at: long(t) }, t).await
        }
    };
    assert_eq!(again(lease, 9).await, Err(StoreError::LeaseLost), "store kit: a second settlement must be refused");
    let k2 = key("fenced");
    let lease2 = leader_of("a new key leads", admit(k2.clone(), fp(1)).await);
    assert_ne!(lease2.token, lease.token, "store kit: every lease has its own token");
    for (rule, forged, f) in [
        (
            "a settlement with a token the store did not give",
            Lease { token: lease2.token.wrapping_add(1), ..lease2 },
            fp(1),
        ),
        ("a settlement with an older token", lease, fp(1)),
        ("a settlement of another request", lease2, fp(2)),
    ] {
        let t = now();
        let refused =
            store.settle(&k2, f, forged, Settlement::Store { result: result_of(7), expires_at: long(t) }, t).await;
        assert_eq!(refused, Err(StoreError::LeaseLost), "store kit: {rule} must be refused");
    }
    assert!(
        matches!(admit(k2.clone(), fp(1)).await, Admission::Follower(_)),
        "store kit: a refused settlement must leave the call in flight"
    );
    if lease2.renew_every.is_some() {
        expect("renew", store.renew(&k2, lease2, now()).await);
        let forged = Lease { token: lease2.token.wrapping_add(1), ..lease2 };
        assert_eq!(
            store.renew(&k2, forged, now()).await,
            Err(StoreError::LeaseLost),
            "store kit: renewing with a token that does not hold the record must be refused"
        );
    }
    expect("settle", store.settle(&k2, fp(1), lease2, Settlement::Release { result: result_of(2) }, now()).await);

    // Release: followers are answered, the key is free again, with a new token.
    let k3 = key("released");
    let lease3 = leader_of("a new key leads", admit(k3.clone(), fp(1)).await);
    let Admission::Follower(waiting) = admit(k3.clone(), fp(1)).await else {
        panic!("store kit: the same request in flight must follow");
    };
    expect("release", store.settle(&k3, fp(1), lease3, Settlement::Release { result: result_of(3) }, now()).await);
    assert_eq!(waiting.await, result_of(3), "store kit: a released result reaches the followers");
    let lease3b = leader_of("a released key leads again, even for another request", admit(k3.clone(), fp(2)).await);
    assert_ne!(lease3b.token, lease3.token, "store kit: a new leader of a released key has a new token");
    assert_eq!(
        store.settle(&k3, fp(1), lease3, Settlement::Release { result: result_of(9) }, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: the old lease must not settle the new leader's record"
    );
    expect("settle", store.settle(&k3, fp(2), lease3b, Settlement::Release { result: result_of(3) }, now()).await);

    // Expiry: a stored result is replayed until `expires_at`, then the key is free.
    let k4 = key("expiring");
    let lease4 = leader_of("a new key leads", admit(k4.clone(), fp(1)).await);
    let t = now();
    let short = Settlement::Store { result: result_of(4), expires_at: t.saturating_add(Duration::from_millis(300)) };
    expect("settle", store.settle(&k4, fp(1), lease4, short, t).await);
    assert!(matches!(admit(k4.clone(), fp(1)).await, Admission::Replay(_)), "store kit: replayed before it expires");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let lease4b = leader_of("an expired result frees the key", admit(k4.clone(), fp(2)).await);
    expect("settle", store.settle(&k4, fp(2), lease4b, Settlement::Release { result: result_of(4) }, now()).await);

    // 200 concurrent admissions of one request: one leader, and every follower gets its result.
    let k5 = key("hot");
    let admissions = join_all((0..200).map(|_| admit(k5.clone(), fp(5)))).await;
    let mut leases = Vec::new();
    let mut followers = Vec::new();
    for admission in admissions {
        match admission {
            Admission::Leader(lease) => leases.push(lease),
            Admission::Follower(waiting) => followers.push(waiting),
            other => panic!("store kit: concurrent admissions of one request must lead or follow, got {other:?}"),
        }
    }
    assert_eq!(leases.len(), 1, "store kit: exactly one of 200 concurrent admissions leads");
    let t = now();
    let settlement = Settlement::Store { result: result_of(5), expires_at: long(t) };
    expect("settle", store.settle(&k5, fp(5), leases[0], settlement, t).await);
    for result in join_all(followers).await {
        assert_eq!(result, result_of(5), "store kit: every follower receives the leader's result");
    }

    // Concurrent admissions of different requests for one key: one leads, the rest of its
    // request follow, every other request conflicts naming the winner.
    let k6 = key("contested");
    let admissions = join_all((0..90u64).map(|i| {
        let k6 = k6.clone();
        async move { (i % 3, admit(k6, fp(i % 3)).await) }
    }))
    .await;
    let winners: Vec<(u64, Lease)> = admissions
        .iter()
        .filter_map(|(f, a)| if let Admission::Leader(l) = a { Some((*f, *l)) } else { None })
        .collect();
    assert_eq!(winners.len(), 1, "store kit: exactly one request of a contested key leads");
    let (winner, lease6) = winners[0];
    for (f, admission) in &admissions {
        match admission {
            Admission::Leader(_) => {}
            Admission::Follower(_) => assert_eq!(*f, winner, "store kit: only the winning request follows"),
            Admission::Conflict { stored } => {
                assert!(*f != winner && *stored == fp(winner), "store kit: a losing request conflicts with the winner");
            }
            other => panic!("store kit: unexpected {other:?}"),
        }
    }
    drop(admissions);
    expect("settle", store.settle(&k6, fp(winner), lease6, Settlement::Release { result: result_of(6) }, now()).await);

    check_idempotency_cancel(store, prefix).await;
}

/// [`IdempotencyStore::cancel`] (part of [`check_idempotency_store`]): a cancelled attempt leaves
/// no claim — the record its admission led is gone, its followers learn that nothing ran (never an
/// unknown outcome), and the next admission leads afresh; an admission arriving after its own
/// cancellation is refused and claims nothing; a cancellation never touches a record another
/// attempt claimed, nor a settled one; cancelling twice is cancelling once.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_idempotency_cancel(store: &dyn IdempotencyStore, prefix: &str) {
    let key = |name: &str| IdempotencyKey::new("kit", format!("{prefix}cancel-{name}"));
    let fp = Fingerprint::of(&json!({"request": "cancel"}));
    let now = Timestamp::now;
    let admit = |k: IdempotencyKey, a: Attempt| async move { expect("admit", store.admit(&k, fp, a, now()).await) };
    let cancel = |k: IdempotencyKey, a: Attempt| async move { expect("cancel", store.cancel(&k, a, now()).await) };

    // The claim of a cancelled attempt goes; its follower learns that nothing ran.
    let k = key("led");
    let first = Attempt::fresh();
    leader_of("a new key leads", admit(k.clone(), first).await);
    let Admission::Follower(waiting) = admit(k.clone(), Attempt::fresh()).await else {
        panic!("store kit: the same request in flight must follow");
    };
    cancel(k.clone(), first).await;
    cancel(k.clone(), first).await;
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap_or_else(|_| panic!("store kit: a follower of a cancelled claim must be answered, not left waiting"));
    let payload = answered.error_payload().unwrap_or_else(|| {
        panic!("store kit: a follower of a cancelled claim must learn that nothing ran, got {answered:?}")
    });
    assert_ne!(
        payload.detail("reason").and_then(|r| r.as_str()),
        Some("outcome-unknown"),
        "store kit: a follower of a claim cancelled before its handler started must not learn an unknown outcome"
    );
    let lease = leader_of("the key of a cancelled claim leads afresh", admit(k.clone(), Attempt::fresh()).await);
    // A cancellation of the first attempt, again, leaves the new leader's record alone.
    cancel(k.clone(), first).await;
    assert!(
        matches!(admit(k.clone(), Attempt::fresh()).await, Admission::Follower(_)),
        "store kit: cancelling an attempt must leave another attempt's claim in flight"
    );
    let t = now();
    let stored = Settlement::Store { result: result_of(1), expires_at: t.saturating_add(Duration::from_secs(600)) };
    expect("settle", store.settle(&k, fp, lease, stored, t).await);

    // A follower's attempt claimed nothing: cancelling it changes nothing. Nor does cancelling a
    // settled record's attempt.
    let k = key("followed");
    let leading = Attempt::fresh();
    let lease = leader_of("a new key leads", admit(k.clone(), leading).await);
    let following = Attempt::fresh();
    let Admission::Follower(waiting) = admit(k.clone(), following).await else {
        panic!("store kit: the same request in flight must follow");
    };
    cancel(k.clone(), following).await;
    let t = now();
    let stored = Settlement::Store { result: result_of(2), expires_at: t.saturating_add(Duration::from_secs(600)) };
    expect("settle", store.settle(&k, fp, lease, stored, t).await);
    assert_eq!(waiting.await, result_of(2), "store kit: cancelling a follower's attempt leaves its leader's record");
    cancel(k.clone(), leading).await;
    assert!(
        matches!(admit(k.clone(), Attempt::fresh()).await, Admission::Replay(r) if r == result_of(2)),
        "store kit: cancelling the attempt of a settled record must leave its result"
    );

    // Cancelled before the store carried the admission out: refused, claims nothing.
    let k = key("early");
    let late = Attempt::fresh();
    cancel(k.clone(), late).await;
    assert!(
        matches!(store.admit(&k, fp, late, now()).await, Err(StoreError::AttemptCancelled)),
        "store kit: an admission arriving after its own cancellation must be refused"
    );
    let lease = leader_of("a refused admission claims nothing", admit(k.clone(), Attempt::fresh()).await);
    expect("settle", store.settle(&k, fp, lease, Settlement::Release { result: result_of(3) }, now()).await);
}

/// Runs the lease suite against a store whose leases lapse after `lease` without renewal (a
/// shared store configured with a short lease): renewal keeps a record, a lapsed one that was
/// marked started (by `start`, or by its admission through `admit_started`) is taken over under a
/// greater token, one that was not is claimed afresh (nothing ran under it) and its lapse is
/// final, a cancelled admission's claim is voided even when its admission marked it (and a claim
/// made without the mark over it is unmarked), the old leader's late settlement is refused and
/// records nothing, and followers of a lapsed leader are answered rather than left waiting.
///
/// # Panics
///
/// On the first rule the store breaks, or when its leases do not ask for renewal.
pub async fn check_idempotency_leases(store: &dyn IdempotencyStore, lease: Duration, prefix: &str) {
    let key = |name: &str| IdempotencyKey::new("kit", format!("{prefix}{name}"));
    let fp = Fingerprint::of(&json!({"request": "lease"}));
    let now = Timestamp::now;
    let admit = |k: IdempotencyKey| async move { expect("admit", store.admit(&k, fp, Attempt::fresh(), now()).await) };

    // Renewed, a lease holds past its duration.
    let k = key("renewed");
    let held = leader_of("a new key leads", admit(k.clone()).await);
    let every = held.renew_every.expect("store kit: a store whose leases lapse must ask for renewal");
    assert!(every < lease, "store kit: renewal must come before the lease lapses");
    let until = std::time::Instant::now() + lease * 2;
    while std::time::Instant::now() < until {
        tokio::time::sleep(every).await;
        expect("renew", store.renew(&k, held, now()).await);
    }
    assert!(matches!(admit(k.clone()).await, Admission::Follower(_)), "store kit: a renewed lease must hold");
    expect("settle", store.settle(&k, fp, held, Settlement::Release { result: result_of(1) }, now()).await);

    // Not marked started, a lapsed claim ran nothing: its follower learns that, the next
    // admission leads afresh, and the old leader can neither start, renew nor settle it.
    let k_unstarted = key("unstarted");
    let stalled = leader_of("a new key leads", admit(k_unstarted.clone()).await);
    let told = told_after_lapse(store, &k_unstarted, fp, lease).await;
    assert_eq!(
        reason_of(&told),
        Some("transport"),
        "store kit: a follower of a claim that lapsed before it was marked started learns that nothing ran, got {told:?}"
    );
    assert_eq!(
        store.start(&k_unstarted, stalled, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: a lease that lapsed must not be marked started"
    );
    assert_eq!(
        store.renew(&k_unstarted, stalled, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: a lease that lapsed before it was marked started must not be renewed"
    );
    let fresh = match admit(k_unstarted.clone()).await {
        Admission::Leader(fresh) => fresh,
        other => {
            panic!("store kit: a claim that lapsed before it was marked started must be claimed afresh, got {other:?}")
        }
    };
    assert!(fresh.token > stalled.token, "store kit: a fresh claim's token must be greater than the lapsed one's");
    assert_eq!(
        store.start(&k_unstarted, stalled, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: the lapsed leader must not mark a record claimed afresh"
    );
    expect("start", store.start(&k_unstarted, fresh, now()).await);
    assert_eq!(
        store.settle(&k_unstarted, fp, stalled, Settlement::Release { result: result_of(666) }, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: the lapsed leader's settlement must be refused"
    );
    expect("settle", store.settle(&k_unstarted, fp, fresh, Settlement::Release { result: result_of(4) }, now()).await);

    // Marked started by its admission (`admit_started`; where the store cannot, by `start` right
    // after): a lapsed claim is taken over, never claimed afresh, since a handler may have run.
    let k_marked = key("admitted-started");
    claim_marked_and_lapse(store, &k_marked, fp, lease, "a new key leads").await;
    // Released, its key is claimed afresh, and an admission that asks marks that claim too (a
    // claim over a released record, not a new one): lapsed, it is taken over.
    claim_marked_and_lapse(store, &k_marked, fp, lease, "the key of a released record leads afresh").await;
    // Cancelling the attempt whose admission made such a claim voids it as it voids any claim of
    // a caller that gave up on its admission: no handler ran under it, so its follower learns
    // that nothing ran, and the next admission leads afresh.
    let k_marked = key("admitted-started-cancelled");
    let attempt = Attempt::fresh();
    let (admission, _) = expect("admit_started", store.admit_started(&k_marked, fp, attempt, now()).await);
    leader_of("a new key leads", admission);
    let Admission::Follower(waiting) = admit(k_marked.clone()).await else {
        panic!("store kit: the same request in flight must follow");
    };
    expect("cancel", store.cancel(&k_marked, attempt, now()).await);
    let told = tokio::time::timeout(lease * 4, waiting)
        .await
        .unwrap_or_else(|_| panic!("store kit: a follower of a cancelled claim must be answered, not left waiting"));
    assert_ne!(
        reason_of(&told),
        Some("outcome-unknown"),
        "store kit: a follower of a claim whose admission was cancelled must not learn an unknown outcome, got {told:?}"
    );
    // Its key is claimed afresh; an admission that does not ask leaves that claim unmarked,
    // whatever the voided claim was: lapsed, nothing ran under it.
    let fresh = leader_of("the key of a cancelled claim leads afresh", admit(k_marked.clone()).await);
    let told = told_after_lapse(store, &k_marked, fp, lease).await;
    assert_eq!(
        reason_of(&told),
        Some("transport"),
        "store kit: a claim admitted without the mark over a voided marked claim is unmarked, got {told:?}"
    );
    let fresh = match admit(k_marked.clone()).await {
        Admission::Leader(again) => {
            assert!(
                again.token > fresh.token,
                "store kit: a fresh claim's token must be greater than the lapsed one's"
            );
            again
        }
        other => {
            panic!("store kit: a claim that lapsed before it was marked started must be claimed afresh, got {other:?}")
        }
    };
    expect("settle", store.settle(&k_marked, fp, fresh, Settlement::Release { result: result_of(6) }, now()).await);

    // Marked started and not renewed, it lapses: its follower is answered, the next admission
    // takes over.
    let k = key("lapsed");
    let old = leader_of("a new key leads", admit(k.clone()).await);
    expect("start", store.start(&k, old, now()).await);
    let new = lapse_marked(store, &k, fp, old, lease).await;
    // A takeover whose attempt is cancelled does not free the key (the earlier leader may have
    // run), nor leave it in flight for nobody to settle: the record holds the unknown outcome.
    let k_cancelled = key("lapsed-cancelled");
    let first = leader_of("a new key leads", admit(k_cancelled.clone()).await);
    expect("start", store.start(&k_cancelled, first, now()).await);
    tokio::time::sleep(lease + lease / 2).await;
    let taking = Attempt::fresh();
    let Ok(Admission::TakeOver(_)) = store.admit(&k_cancelled, fp, taking, now()).await else {
        panic!("store kit: a lapsed lease must be taken over");
    };
    expect("cancel", store.cancel(&k_cancelled, taking, now()).await);
    match admit(k_cancelled.clone()).await {
        Admission::Replay(told) => assert_eq!(
            reason_of(&told),
            Some("outcome-unknown"),
            "store kit: a cancelled takeover's record holds the unknown outcome, got {told:?}"
        ),
        other => {
            panic!("store kit: a cancelled takeover must settle the record with the unknown outcome, got {other:?}")
        }
    }
    assert_eq!(
        store.settle(&k_cancelled, fp, first, Settlement::Release { result: result_of(3) }, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: the displaced leader must not settle a record its takeover's cancellation settled"
    );
    assert_eq!(
        store.renew(&k, old, now()).await,
        Err(StoreError::LeaseLost),
        "store kit: the old leader must not renew a record taken over"
    );
    let t = now();
    let late = Settlement::Store { result: result_of(666), expires_at: t.saturating_add(Duration::from_secs(600)) };
    assert_eq!(
        store.settle(&k, fp, old, late, t).await,
        Err(StoreError::LeaseLost),
        "store kit: the old leader's late settlement must be refused"
    );
    let t = now();
    let settlement = Settlement::Store { result: result_of(2), expires_at: t.saturating_add(Duration::from_secs(600)) };
    expect("settle", store.settle(&k, fp, new, settlement, t).await);
    match admit(k.clone()).await {
        Admission::Replay(result) => {
            assert_eq!(result, result_of(2), "store kit: the new leader's result is stored, not the late one");
        }
        other => panic!("store kit: a settled request must replay, got {other:?}"),
    }
}

/// What a follower joined to the claim in flight on `k` is told once its lease (`lease`, not
/// renewed) has lapsed.
async fn told_after_lapse(
    store: &dyn IdempotencyStore,
    k: &IdempotencyKey,
    fp: Fingerprint,
    lease: Duration,
) -> InvokeResult {
    let Admission::Follower(waiting) = expect("admit", store.admit(k, fp, Attempt::fresh(), Timestamp::now()).await)
    else {
        panic!("store kit: the same request in flight must follow");
    };
    tokio::time::sleep(lease + lease / 2).await;
    tokio::time::timeout(lease * 4, waiting)
        .await
        .unwrap_or_else(|_| panic!("store kit: a follower of a lapsed leader must be answered, not left waiting"))
}

/// Claims `k` with [`IdempotencyStore::admit_started`] (`claimed` says what the claim is, should
/// it not lead), marked by `start` right after where the store cannot mark at admission; lets it
/// lapse with a follower joined ([`lapse_marked`]), then releases the takeover's record.
async fn claim_marked_and_lapse(
    store: &dyn IdempotencyStore,
    k: &IdempotencyKey,
    fp: Fingerprint,
    lease: Duration,
    claimed: &str,
) {
    let now = Timestamp::now;
    let (admission, marked) = expect("admit_started", store.admit_started(k, fp, Attempt::fresh(), now()).await);
    let first = leader_of(claimed, admission);
    if !marked {
        expect("start", store.start(k, first, now()).await);
    }
    let taken = lapse_marked(store, k, fp, first, lease).await;
    expect("settle", store.settle(k, fp, taken, Settlement::Release { result: result_of(5) }, now()).await);
}

/// Lets the claim `old` of `k`, marked started, lapse with a follower joined to it: the follower
/// must learn the unknown outcome (a handler may have run), and the next admission must take the
/// record over under a greater token; returns the takeover's lease.
async fn lapse_marked(
    store: &dyn IdempotencyStore,
    k: &IdempotencyKey,
    fp: Fingerprint,
    old: Lease,
    lease: Duration,
) -> Lease {
    let told = told_after_lapse(store, k, fp, lease).await;
    assert_eq!(
        reason_of(&told),
        Some("outcome-unknown"),
        "store kit: a follower of a lapsed claim marked started learns that the outcome is unknown, never that nothing ran, got {told:?}"
    );
    let new = match expect("admit", store.admit(k, fp, Attempt::fresh(), Timestamp::now()).await) {
        Admission::TakeOver(new) => new,
        other => panic!("store kit: a lapsed claim marked started must be taken over, got {other:?}"),
    };
    assert!(new.token > old.token, "store kit: a takeover's token must be greater than the lease it replaces");
    new
}

/// Runs the check of a store whose leases hold until settled (one process owns it; a restart
/// lapses them): a leader's lease asks for no renewal, its record stays in flight (a second
/// admission follows) until it is settled, and the settled result is replayed.
///
/// # Panics
///
/// On the first rule the store breaks, or when its leases ask for renewal (such a store's leases
/// lapse: run [`check_idempotency_leases`] on it instead).
pub async fn check_idempotency_holds_until_settled(store: &dyn IdempotencyStore, prefix: &str) {
    let k = IdempotencyKey::new("kit", format!("{prefix}held"));
    let fp = Fingerprint::of(&json!({"request": "held"}));
    let now = Timestamp::now;
    let held = leader_of("a new key leads", expect("admit", store.admit(&k, fp, Attempt::fresh(), now()).await));
    assert_eq!(held.renew_every, None, "store kit: a lease that holds until settled asks for no renewal");
    expect("start", store.start(&k, held, now()).await);
    let again = expect("admit", store.admit(&k, fp, Attempt::fresh(), now()).await);
    assert!(matches!(again, Admission::Follower(_)), "store kit: an unsettled lease holds: {again:?}");
    let settlement =
        Settlement::Store { result: result_of(7), expires_at: now().saturating_add(Duration::from_secs(60)) };
    expect("settle", store.settle(&k, fp, held, settlement, now()).await);
    match expect("admit", store.admit(&k, fp, Attempt::fresh(), now()).await) {
        Admission::Replay(r) => assert_eq!(r, result_of(7), "store kit: the settled result is replayed"),
        other => panic!("store kit: a settled record replays, got {other:?}"),
    }
}

/// The `details.reason` of what a follower was told, if it was told an error with one.
fn reason_of(told: &InvokeResult) -> Option<&str> {
    told.error_payload().and_then(|p| p.detail("reason")).and_then(|r| r.as_str())
}
