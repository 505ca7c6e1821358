//! The store kit: one conformance suite per store trait, which every implementation — the memory
//! stores of `agent-surface-policy`, the Redis stores, a store of your own — must pass.
//!
//! Each check drives the store through the atomic semantics its trait documents (with `now`
//! passed in, as the engines do), including concurrent callers racing for a single-use step, and
//! panics with a message naming the broken rule. Records are created under ids that start with
//! `prefix`, so a suite can run against a shared backend next to other data: make the prefix
//! unique per run when the backend keeps data between runs.
//!
//! ```
//! use agent_surface_policy::{MemoryConfirmationStore, MemoryTaskStore};
//! use agent_surface_testing::stores;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! stores::check_confirmation_store(&MemoryConfirmationStore::default(), "doc-").await;
//! stores::check_task_store(&MemoryTaskStore::default(), "doc-").await;
//! # });
//! ```

use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{
    ApprovalVerdict, ConfirmationBinding, ConfirmationRecord, ConfirmationState, ConfirmationStore, Decided,
    Fingerprint, Rejection, TaskRecord, TaskStatus, TaskStore,
};
use futures_util::future::join_all;
use serde_json::json;

/// The instant the suites start at (any fixed instant works: stores take `now` as given).
const T0: u64 = 1_795_957_200_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0 + ms)
}

fn binding(consumer: &str) -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: consumer.to_string(),
        capability: "orders.cancel".to_string(),
        registration_id: "r-1".to_string(),
        instance_id: "main".to_string(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    }
}

/// A pending record `id` of consumer `c-1` (requester subject `alice`), expiring at 60 s.
fn pending(id: &str) -> ConfirmationRecord {
    ConfirmationRecord::pending(
        id.to_string(),
        binding("c-1"),
        Some("alice".to_string()),
        "Cancel order A-1.".to_string(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
}

#[track_caller]
fn expect<T: std::fmt::Debug, E: std::fmt::Debug>(rule: &str, got: Result<T, E>) -> T {
    match got {
        Ok(v) => v,
        Err(e) => panic!("store kit: {rule}: the store failed: {e:?}"),
    }
}

/// Runs the [`ConfirmationStore`] suite against `store`.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_confirmation_store(store: &dyn ConfirmationStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}{name}");

    // Insert and read back; an id is inserted once.
    let a = id("conf-a");
    expect("insert", store.insert(pending(&a), at(0)).await);
    assert!(store.insert(pending(&a), at(0)).await.is_err(), "store kit: a second insert of one id must fail");
    let read = expect("get", store.get(&a, at(1)).await).expect("store kit: an inserted record must be readable");
    assert_eq!(read, pending(&a), "store kit: get must return the record as inserted");
    assert_eq!(expect("get", store.get(&id("conf-none"), at(1)).await), None, "store kit: an unknown id reads as none");

    // The requester cannot approve its own request (by subject or by consumer key), but may deny.
    for who in ["alice", "c-1"] {
        let got = expect("decide", store.decide(&a, ApprovalVerdict::Approve, who, at(2)).await);
        assert_eq!(got, Decided::SelfApproval, "store kit: the requester ({who}) must not approve");
    }
    // Another consumer's evidence is a mismatch whatever state the record is in (checked first,
    // so that it reveals nothing, and never the pending record).
    let stranger = binding("c-2");
    let mismatch = |got: Result<agent_surface_policy::Consumed, Rejection>, state: &str| match got {
        Err(Rejection::Mismatch(m)) => assert!(m.consumer, "store kit: {state}: {m:?}"),
        other => panic!("store kit: another consumer's evidence on a {state} record must be a mismatch, got {other:?}"),
    };
    mismatch(expect("consume", store.consume(&a, &stranger, at(2)).await), "pending");
    // A pending record consumed answers pending, with the record.
    match expect("consume", store.consume(&a, &binding("c-1"), at(3)).await) {
        Err(Rejection::Pending(record)) => assert_eq!(*record, pending(&a), "store kit: pending carries the record"),
        other => panic!("store kit: consuming a pending record must answer Pending, got {other:?}"),
    }
    assert_eq!(expect("decide", store.decide(&a, ApprovalVerdict::Approve, "bob", at(4)).await), Decided::Done);
    assert_eq!(
        expect("decide", store.decide(&a, ApprovalVerdict::Deny, "carol", at(5)).await),
        Decided::NotPending(ConfirmationState::Approved { by: "bob".to_string() }),
        "store kit: a decision is final"
    );

    // Another call's evidence reveals nothing and consumes nothing.
    let mut other = binding("c-1");
    other.input_hash = Fingerprint::of(&json!({"orderId": "A-2"}));
    match expect("consume", store.consume(&a, &other, at(6)).await) {
        Err(Rejection::Mismatch(m)) => assert!(m.input && !m.consumer && !m.capability && !m.target, "{m:?}"),
        got => panic!("store kit: another input must be a mismatch, got {got:?}"),
    }
    match expect("consume", store.consume(&a, &binding("c-2"), at(6)).await) {
        Err(Rejection::Mismatch(m)) => assert!(m.consumer && !m.input, "{m:?}"),
        got => panic!("store kit: another consumer must be a mismatch, got {got:?}"),
    }

    // Approved evidence is consumed once, however many race for it.
    let mine = binding("c-1");
    let racers = (0..24).map(|_| store.consume(&a, &mine, at(7)));
    let results = join_all(racers).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(won, 1, "store kit: exactly one concurrent consume must win, got {results:?}");
    for r in &results {
        match r {
            Ok(Ok(consumed)) => assert_eq!(consumed.approved_by, "bob", "store kit: consume reports the approver"),
            Ok(Err(Rejection::Consumed)) => {}
            other => panic!("store kit: a losing consume must answer Consumed, got {other:?}"),
        }
    }

    // A denial is final; a withdrawn record reads as expired; withdrawing a decided one changes nothing.
    let d = id("conf-d");
    expect("insert", store.insert(pending(&d), at(0)).await);
    assert_eq!(expect("decide", store.decide(&d, ApprovalVerdict::Deny, "alice", at(1)).await), Decided::Done);
    mismatch(expect("consume", store.consume(&d, &stranger, at(2)).await), "denied");
    assert_eq!(expect("consume", store.consume(&d, &binding("c-1"), at(2)).await), Err(Rejection::Denied));
    assert_eq!(
        expect("withdraw", store.withdraw(&d, at(3)).await),
        Some(ConfirmationState::Denied { by: "alice".to_string() })
    );
    let w = id("conf-w");
    expect("insert", store.insert(pending(&w), at(0)).await);
    assert_eq!(expect("withdraw", store.withdraw(&w, at(1)).await), Some(ConfirmationState::Withdrawn));
    mismatch(expect("consume", store.consume(&w, &stranger, at(2)).await), "withdrawn");
    assert_eq!(expect("consume", store.consume(&w, &binding("c-1"), at(2)).await), Err(Rejection::Expired));
    assert_eq!(
        expect("decide", store.decide(&w, ApprovalVerdict::Approve, "bob", at(3)).await),
        Decided::NotPending(ConfirmationState::Withdrawn)
    );
    assert_eq!(expect("withdraw", store.withdraw(&id("conf-none"), at(3)).await), None);

    mismatch(expect("consume", store.consume(&a, &stranger, at(8)).await), "consumed");

    // Expiry: no decision after it (the requester rule is checked first); approved evidence is not
    // usable after it.
    let e = id("conf-e");
    expect("insert", store.insert(pending(&e), at(0)).await);
    assert_eq!(
        expect("decide", store.decide(&e, ApprovalVerdict::Approve, "alice", at(60_000)).await),
        Decided::SelfApproval
    );
    assert_eq!(expect("decide", store.decide(&e, ApprovalVerdict::Approve, "bob", at(60_000)).await), Decided::Expired);
    mismatch(expect("consume", store.consume(&e, &stranger, at(60_001)).await), "expired");
    let f = id("conf-f");
    expect("insert", store.insert(pending(&f), at(0)).await);
    assert_eq!(expect("decide", store.decide(&f, ApprovalVerdict::Approve, "bob", at(59_999)).await), Decided::Done);
    assert_eq!(expect("consume", store.consume(&f, &binding("c-1"), at(60_000)).await), Err(Rejection::Expired));

    // The requester approving in person is not a self-approval (the requester rule is for
    // `Approve` only); a decided record refuses the requester as `NotPending`, not `SelfApproval`.
    let p = id("conf-p");
    expect("insert", store.insert(pending(&p), at(0)).await);
    assert_eq!(
        expect("decide", store.decide(&p, ApprovalVerdict::ApproveInPerson, "alice", at(1)).await),
        Decided::Done
    );
    assert_eq!(
        expect("decide", store.decide(&p, ApprovalVerdict::Approve, "alice", at(1)).await),
        Decided::NotPending(ConfirmationState::Approved { by: "alice".to_string() })
    );
    let consumed = expect("consume", store.consume(&p, &binding("c-1"), at(2)).await);
    assert!(consumed.is_ok(), "store kit: an in-person approval is usable, got {consumed:?}");
}

/// Runs the [`TaskStore`] suite against `store`.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_task_store(store: &dyn TaskStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}{name}");
    let ttl = Duration::from_secs(60);
    let running = Duration::from_secs(3600);

    let a = id("task-a");
    let record = TaskRecord::working(a.clone(), Some("principal:[\"alice\"]".to_string()), at(0), ttl, running);
    expect("create", store.create(record.clone(), at(0)).await);
    assert!(store.create(record.clone(), at(0)).await.is_err(), "store kit: a second create of one id must fail");
    assert_eq!(expect("get", store.get(&a, at(1)).await), Some(record.clone()), "store kit: get returns the record");
    assert_eq!(expect("get", store.get(&id("task-none"), at(1)).await), None);

    // A running task outlives its time to live; a cancellation request is recorded.
    assert!(expect("get", store.get(&a, at(600_000)).await).is_some(), "store kit: a running task must not expire");
    let cancelled = expect("cancel", store.request_cancel(&a, at(600_001)).await).expect("store kit: the task exists");
    assert!(cancelled.cancel_requested && cancelled.status == TaskStatus::Working);

    // It finishes once, however many race to finish it, and is kept its time to live from then.
    let payload = json!({"content": [{"type": "text", "text": "done"}], "isError": false});
    let racers = (0..16).map(|i| {
        let status = if i % 2 == 0 { TaskStatus::Completed } else { TaskStatus::Cancelled };
        let payload = (status == TaskStatus::Completed).then(|| payload.clone());
        store.finish(&a, status, payload, None, at(600_002))
    });
    let moved = join_all(racers).await;
    assert_eq!(
        moved.iter().filter(|r| matches!(r, Ok(true))).count(),
        1,
        "store kit: exactly one concurrent finish must move the task, got {moved:?}"
    );
    let done = expect("get", store.get(&a, at(600_003)).await).expect("store kit: a finished task is kept");
    assert!(done.status.is_terminal());
    assert_eq!(done.updated_at, at(600_002));
    assert!(!expect("finish", store.finish(&a, TaskStatus::Failed, None, None, at(600_004)).await));
    let after = expect("cancel", store.request_cancel(&a, at(600_005)).await).expect("store kit: kept");
    assert_eq!(after.status, done.status, "store kit: a cancellation after the end changes nothing");
    assert!(expect("get", store.get(&a, at(660_001)).await).is_some(), "store kit: kept its time to live");
    assert_eq!(expect("get", store.get(&a, at(660_002)).await), None, "store kit: gone after its time to live");

    // The payload and message come back as given.
    let b = id("task-b");
    expect("create", store.create(TaskRecord::working(b.clone(), None, at(0), ttl, running), at(0)).await);
    let finished = store.finish(&b, TaskStatus::Completed, Some(payload.clone()), Some("Done.".to_string()), at(5));
    assert!(expect("finish", finished.await));
    let b = expect("get", store.get(&b, at(6)).await).expect("store kit: kept");
    assert_eq!((b.payload, b.status_message.as_deref()), (Some(payload), Some("Done.")));
    assert_eq!(b.owner, None);
}
