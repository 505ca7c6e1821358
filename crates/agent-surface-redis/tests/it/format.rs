//! The stored shapes that #26 added to, pinned both ways on Redis: a task's hash as this build
//! writes it (with `lu`, the running process's lease) and as a build before leases wrote it
//! (without), and a confirmation whose expiry a build before lapsing claims marked (`xr`), which
//! reads as recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::{ConfirmationStore, TaskStore, task::TaskRecord};
use agent_surface_redis::redis::AsyncCommands;

use crate::support;

const T0: u64 = 1_795_957_200_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0 + ms)
}

/// A task's hash, field by field, as this build writes a running task with a lease.
fn task_fields(lease: &str) -> BTreeMap<String, String> {
    [
        ("id", "t-1"),
        ("own", "=alice"),
        ("st", "working"),
        ("msg", ""),
        ("ca", "1795957200000"),
        ("ua", "1795957200000"),
        ("ea", "1795957260000"),
        ("ru", "1795960800000"),
        ("p", ""),
        ("cr", "0"),
        ("lu", lease),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_hashes_with_and_without_a_lease() {
    let Some(redis) = support::stores("format-task").await else { return };
    let mut conn = redis.connection();
    let key = format!("{}task:t-1", redis.config().prefix);
    let tasks = redis.tasks();
    let working =
        TaskRecord::working("t-1", Some("alice".into()), at(0), Duration::from_secs(60), Duration::from_secs(3600))
            .with_lease(Duration::from_secs(30));
    tasks.create(working.clone(), at(0)).await.unwrap();
    let written: BTreeMap<String, String> = conn.hgetall(&key).await.unwrap();
    assert_eq!(written, task_fields("1795957230000"), "this build writes the pinned fields");
    assert_eq!(tasks.get("t-1", at(1)).await.unwrap(), Some(working));

    // As a build before leases wrote it: no `lu`. Read with no lease, never ended as abandoned.
    let mut old = task_fields("");
    old.remove("lu");
    let _: () = conn.del(&key).await.unwrap();
    let fields: Vec<(String, String)> = old.into_iter().collect();
    let _: () = conn.hset_multiple(&key, &fields).await.unwrap();
    let read = tasks.get("t-1", at(1)).await.unwrap().expect("read");
    assert_eq!(read.lease_until, None);
    let kept = tasks.end_lapsed("t-1", None, None, at(1_000_000)).await.unwrap().expect("read");
    assert_eq!(kept.status, agent_surface_policy::task::TaskStatus::Working, "no lease: not abandoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_claimed_before_claims_lapsed_reads_as_recorded() {
    let Some(redis) = support::stores("format-claim").await else { return };
    let conf = redis.confirmations();
    let record = agent_surface_policy::ConfirmationRecord::pending(
        "c-1".into(),
        agent_surface_policy::confirmation::ConfirmationBinding {
            consumer_key: "c-1".into(),
            capability: "orders.cancel".into(),
            registration_id: "r-1".into(),
            instance_id: "main".into(),
            input_hash: agent_surface_policy::idempotency::Fingerprint::of(&serde_json::json!({"orderId": "A-1"})),
        },
        Some("alice".into()),
        "Cancel order A-1.".into(),
        agent_surface_core::Effect::Destructive,
        agent_surface_core::details::Origin::Client,
        at(0),
        at(60_000),
    );
    conf.insert(record, at(0)).await.unwrap();
    // What a build before lapsing claims wrote for a claim: `xr` set, for good.
    let mut conn = redis.connection();
    let _: () = conn.hset(format!("{}conf:c-1", redis.config().prefix), "xr", "1").await.unwrap();
    assert!(conf.list_expired(at(1_000_000), 10).await.unwrap().is_empty(), "recorded: not listed");
    assert!(!conf.claim_expiry("c-1", at(2_000_000), at(1_000_000)).await.unwrap(), "recorded: not claimed");
}
