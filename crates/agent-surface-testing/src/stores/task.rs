//! The store kit's checks of a [`TaskStore`]: one record per id, a running task kept, one of
//! several concurrent finishes landing, a finished task kept for its time to live, and the leases by
//! which a task whose runner is gone is ended once.

use std::time::Duration;

use agent_surface_policy::TaskStore;
use agent_surface_policy::task::{TaskRecord, TaskStatus};
use futures_util::future::join_all;
use serde_json::json;

use super::{at, expect};

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

    check_task_leases(store, prefix).await;
}

/// Task leases (part of [`check_task_store`]): a lease is kept as given and renewed while the
/// task runs; a task whose lease lapsed is ended once, completed with the given payload, by
/// [`TaskStore::end_lapsed`], and never before its lease lapses, never when final, never without a
/// lease; a renewal after the end changes nothing and tells the renewer; of a finish and an end
/// racing exactly one lands.
///
/// # Panics
///
/// On the first rule the store breaks.
pub async fn check_task_leases(store: &dyn TaskStore, prefix: &str) {
    let id = |name: &str| format!("{prefix}{name}");
    let ttl = Duration::from_secs(60);
    let running = Duration::from_secs(3600);
    let lease = Duration::from_secs(10);
    let unknown = json!({"content": [{"type": "text", "text": "outcome unknown"}], "isError": true});

    let a = id("task-lease-a");
    let record = TaskRecord::working(a.clone(), None, at(0), ttl, running).with_lease(lease);
    expect("create", store.create(record.clone(), at(0)).await);
    let read = expect("get", store.get(&a, at(1)).await).expect("store kit: the task exists");
    assert_eq!(read.lease_until, Some(at(10_000)), "store kit: the lease is kept as created");
    assert!(!read.is_abandoned(at(9_999)) && read.is_abandoned(at(10_000)));
    // Before the lease lapses nothing ends it.
    let kept = expect("end_lapsed", store.end_lapsed(&a, Some(unknown.clone()), None, at(9_999)).await);
    assert_eq!(kept.map(|r| r.status), Some(TaskStatus::Working), "store kit: a held task is not ended");
    // Renewed, it is held longer, and the renewal answers the record (a cancellation included).
    expect("cancel", store.request_cancel(&a, at(9_000)).await);
    let renewed = expect("renew", store.renew(&a, at(20_000), at(9_500)).await).expect("store kit: the task exists");
    assert_eq!(renewed.lease_until, Some(at(20_000)), "store kit: renew sets the lease");
    assert!(renewed.cancel_requested, "store kit: renew answers the record, cancellation requested included");
    let kept = expect("end_lapsed", store.end_lapsed(&a, Some(unknown.clone()), None, at(15_000)).await);
    assert_eq!(kept.map(|r| r.status), Some(TaskStatus::Working), "store kit: a renewed task is not ended");
    // Lapsed: ended once, completed with the payload, kept its time to live from then.
    let ended =
        expect("end_lapsed", store.end_lapsed(&a, Some(unknown.clone()), Some("Lost.".into()), at(20_000)).await)
            .expect("store kit: the task exists");
    assert_eq!(
        (ended.status, ended.payload.as_ref(), ended.status_message.as_deref(), ended.updated_at),
        (TaskStatus::Completed, Some(&unknown), Some("Lost."), at(20_000)),
        "store kit: a task whose lease lapsed is ended, completed with the payload"
    );
    assert_eq!(expect("get", store.get(&a, at(20_001)).await), Some(ended.clone()), "store kit: the end is stored");
    assert!(!expect("finish", store.finish(&a, TaskStatus::Completed, None, None, at(20_002)).await));
    let again = expect("end_lapsed", store.end_lapsed(&a, None, None, at(20_003)).await);
    assert_eq!(again.as_ref(), Some(&ended), "store kit: an ended task is ended once");
    let late = expect("renew", store.renew(&a, at(40_000), at(20_004)).await).expect("store kit: kept");
    assert_eq!(late, ended, "store kit: a renewal after the end changes nothing and answers the end");
    assert!(expect("get", store.get(&a, at(79_999)).await).is_some(), "store kit: kept its time to live");
    assert_eq!(expect("get", store.get(&a, at(80_000)).await), None, "store kit: gone after its time to live");

    // A task without a lease is never abandoned; an unknown id is none.
    let b = id("task-lease-b");
    expect("create", store.create(TaskRecord::working(b.clone(), None, at(0), ttl, running), at(0)).await);
    let kept = expect("end_lapsed", store.end_lapsed(&b, Some(unknown.clone()), None, at(3_000_000)).await);
    assert_eq!(kept.map(|r| r.status), Some(TaskStatus::Working), "store kit: a task without a lease is not ended");
    assert_eq!(expect("renew", store.renew(&id("task-none"), at(1), at(0)).await), None);
    assert_eq!(expect("end_lapsed", store.end_lapsed(&id("task-none"), None, None, at(0)).await), None);

    // A finish and an end racing on a lapsed task: exactly one lands.
    for round in 0..8 {
        let c = id(&format!("task-lease-race-{round}"));
        let record = TaskRecord::working(c.clone(), None, at(0), ttl, running).with_lease(lease);
        expect("create", store.create(record, at(0)).await);
        let result = json!({"content": [], "isError": false});
        let (finished, ended) = futures_util::future::join(
            store.finish(&c, TaskStatus::Completed, Some(result.clone()), None, at(10_000)),
            store.end_lapsed(&c, Some(unknown.clone()), None, at(10_000)),
        )
        .await;
        let finished = expect("finish", finished);
        let ended = expect("end_lapsed", ended).expect("store kit: the task exists");
        let stored = expect("get", store.get(&c, at(10_001)).await).expect("store kit: kept");
        let expected = if finished { result } else { unknown.clone() };
        assert_eq!(stored.payload, Some(expected), "store kit: the one that landed is stored (finished: {finished})");
        assert_eq!(ended, stored, "store kit: end_lapsed answers the record after the step");
    }
}
