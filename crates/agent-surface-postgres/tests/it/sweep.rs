//! The sweeper against a live PostgreSQL: what it deletes, what it must leave, and the rate
//! buckets it deletes while a call takes a unit from them.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{
    CallInfo, ConfirmationRecord, ConfirmationStore, Consumer, Quota, RateBudgets, RateDecision, RateLimiter,
    confirmation::ConfirmationBinding, idempotency::Fingerprint,
};
use agent_surface_postgres::{PostgresConfig, PostgresStores};
use serde_json::json;

use crate::support;

/// Stores for `test` that sweep every `every`.
async fn sweeping(test: &str, every: Duration, retention: Duration) -> Option<PostgresStores> {
    let config = PostgresConfig {
        op_timeout: Duration::from_secs(10),
        sweep_every: every,
        retention,
        ..PostgresConfig::default()
    };
    support::stores_with(test, config).await
}

/// The database's clock, in milliseconds since the epoch.
async fn database_now(stores: &PostgresStores) -> u64 {
    let client = stores.pool().get().await.expect("a connection");
    let row =
        client.query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[]).await.expect("the time");
    u64::try_from(row.get::<_, i64>(0)).expect("after the epoch")
}

fn pending(id: &str, expires_at: Timestamp) -> ConfirmationRecord {
    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::of(&json!({"orderId": id})),
    };
    let created_at = Timestamp::from_unix_millis(expires_at.unix_millis() - 10_000);
    ConfirmationRecord::pending(
        id.into(),
        binding,
        Some("alice".into()),
        "Cancel the order.".into(),
        Effect::Destructive,
        Origin::Client,
        created_at,
        expires_at,
    )
}

/// Confirmations carry the replicas' times, which the sweep reads on the database's clock: a
/// row is deleted only a minute after its time there, so that a database clock up to that far
/// ahead of a replica's never deletes what the replica still reads. Here one confirmation's
/// time is 30 s behind the database's clock (a replica 30 s behind it would still read it) and
/// another's two minutes: the sweep deletes the second and leaves the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_leaves_what_a_replica_behind_the_database_still_reads() {
    let Some(stores) = sweeping("sweep_skew", Duration::from_millis(50), Duration::ZERO).await else { return };
    let confirmations = stores.confirmations();
    let now = database_now(&stores).await;
    let within = Timestamp::from_unix_millis(now - 30_000);
    let beyond = Timestamp::from_unix_millis(now - 120_000);
    let before = |t: Timestamp| Timestamp::from_unix_millis(t.unix_millis() - 1_000);
    confirmations.insert(pending("within", within), before(within)).await.expect("inserted");
    confirmations.insert(pending("beyond", beyond), before(beyond)).await.expect("inserted");
    // Read at a time before each one's expiry, a row is found while it is there at all.
    assert!(confirmations.get("beyond", before(beyond)).await.expect("read").is_some());

    let deadline = Instant::now() + Duration::from_secs(20);
    while confirmations.get("beyond", before(beyond)).await.expect("read").is_some() {
        assert!(Instant::now() < deadline, "the sweep never deleted a row two minutes past its time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Several sweeps later, the row within the margin is still there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = confirmations.get("within", before(within)).await.expect("read");
    assert!(kept.is_some(), "a row 30 s past its time on the database's clock was deleted");
}

/// A full bucket's row may be deleted by a sweep between the statement that makes a missing
/// row and the one that locks it; the limiter makes it again rather than failing the call. Four
/// callers take units from buckets that are full again microseconds after each call (a quota of
/// 100,000 a second), while the sweeper runs every millisecond: every call is let through, and
/// the sweeps deleted bucket rows meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_buckets_swept_while_a_call_takes_a_unit_are_made_again() {
    let Some(stores) = sweeping("sweep_rate", Duration::from_millis(1), Duration::from_secs(3600)).await else {
        return;
    };
    let quota = Quota::per_second(NonZeroU32::new(100_000).unwrap());
    let limiter = stores.rate_limiter(RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() });
    let callers: Vec<_> = (0..4)
        .map(|n| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let consumer = Consumer::anonymous(format!("caller-{n}"));
                let mut refused = Vec::new();
                for i in 0..400 {
                    let call = CallInfo::new(&consumer, "orders.look", "orders", Effect::Read, false);
                    match limiter.acquire(call, Timestamp::now()).await {
                        RateDecision::Allow(_) => {}
                        other => refused.push(format!("call {i}: {other:?}")),
                    }
                }
                refused
            })
        })
        .collect();
    for caller in callers {
        let refused = caller.await.expect("the caller ran");
        assert!(refused.is_empty(), "{refused:?}");
    }
    // The sweeps did delete bucket rows while the calls ran (the statistics reach the view
    // within a second or so).
    let client = stores.pool().get().await.expect("a connection");
    let schema = stores.config().schema.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT coalesce(sum(n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'rate'",
                &[&schema],
            )
            .await
            .expect("the statistics");
        if row.get::<_, i64>(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no bucket row was ever swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
