//! What the PostgreSQL store's admission writes beyond the store kit's rules (which hold whether
//! or not a store marks at admission): a claim asked for with `admit_started` is marked started by
//! the admission's own statement, a fresh claim and a takeover alike, so the registry sends a
//! harmless call no separate mark; a claim admitted with `admit` is not marked. And what its
//! cancellation waits for: a claim of the key whose admission has not committed yet.

use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::IdempotencyStore;
use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey};
use agent_surface_postgres::PostgresConfig;
use serde_json::json;

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harmless_calls_claim_is_marked_by_its_admission_and_a_writes_is_not() {
    let lease = Duration::from_millis(300);
    let config = PostgresConfig { lease, op_timeout: Duration::from_secs(10), ..PostgresConfig::default() };
    let Some(stores) = support::stores_with("admission-marks", config).await else { return };
    let store = stores.idempotency();
    let fp = Fingerprint::of(&json!({"request": "marks"}));

    let harmless = IdempotencyKey::new("c", "harmless");
    let (admission, marked) =
        store.admit_started(&harmless, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted");
    assert!(matches!(admission, Admission::Leader(_)), "a new key leads: {admission:?}");
    assert!(marked, "the admission marks the claim it makes");
    // Never marked by `start` and lapsed, it is taken over (it was marked), and the takeover is
    // marked by its admission too.
    tokio::time::sleep(lease + lease / 2).await;
    let (admission, marked) =
        store.admit_started(&harmless, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted");
    assert!(matches!(admission, Admission::TakeOver(_)), "a lapsed marked claim is taken over: {admission:?}");
    assert!(marked, "the admission marks the takeover it makes");

    // A write's admission marks nothing: never marked and lapsed, its claim is claimed afresh.
    let write = IdempotencyKey::new("c", "write");
    let admission = store.admit(&write, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted");
    assert!(matches!(admission, Admission::Leader(_)), "a new key leads: {admission:?}");
    tokio::time::sleep(lease + lease / 2).await;
    let admission = store.admit(&write, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted");
    assert!(matches!(admission, Admission::Leader(_)), "an unmarked lapsed claim is claimed afresh: {admission:?}");
}

/// A cancellation waits for an admission of its key that has not committed yet (a commit that
/// stalled past the registry's budget, which is when an admission goes unanswered and is
/// cancelled), and voids the claim once it lands: the claim does not outlive its cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_waits_for_an_uncommitted_claim_and_voids_it() {
    let Some(stores) = support::stores("cancel-uncommitted").await else { return };
    let store = stores.idempotency();
    let schema = stores.config().schema.clone();
    let attempt = Attempt::fresh();
    let fp = Fingerprint::of(&json!({"request": "stalled"}));
    // The admission's claim, marked at admission, written and not committed yet.
    let mut client = stores.pool().get().await.expect("a connection");
    let watch = stores.pool().get().await.expect("a connection");
    let tx = client.transaction().await.expect("a transaction");
    let holder: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await.expect("its session").get(0);
    tx.execute(
        &format!(
            "INSERT INTO {schema}.idem (consumer, invocation, v, state, fp, token, lease_until, attempt, started, keep_until)
             VALUES ('c', 'stalled', 1, 'run', $1, nextval('{schema}.idem_token'), clock_timestamp() + interval '1 minute', $2,
               true, clock_timestamp() + interval '1 hour')"
        ),
        &[&fp.as_bytes().to_vec(), &attempt.as_u128().to_be_bytes().to_vec()],
    )
    .await
    .expect("the claim is written");
    let cancelling = tokio::spawn(async move {
        let key = IdempotencyKey::new("c", "stalled");
        store.cancel(&key, attempt, Timestamp::now()).await
    });
    assert!(blocked_by(&watch, holder).await, "the cancellation waits for the claim's commit");
    assert!(!cancelling.is_finished(), "the cancellation waits for the claim's commit");
    tx.commit().await.expect("the claim lands");
    cancelling.await.expect("the cancellation ran").expect("cancelled");
    let state: String = client
        .query_one(&format!("SELECT state FROM {schema}.idem WHERE consumer = 'c' AND invocation = 'stalled'"), &[])
        .await
        .expect("the record")
        .get(0);
    assert_eq!(state, "void", "the claim that landed after its attempt was cancelled is voided");

    // With no record at all, a cancellation leaves a voided one for a few seconds: an admission of
    // the cancelled attempt that raced it is refused, and another attempt claims the key.
    let store = stores.idempotency();
    let key = IdempotencyKey::new("c", "never-claimed");
    let cancelled = Attempt::fresh();
    store.cancel(&key, cancelled, Timestamp::now()).await.expect("cancelled");
    assert_eq!(
        store.admit(&key, fp, cancelled, Timestamp::now()).await.err(),
        Some(agent_surface_policy::StoreError::AttemptCancelled),
        "the cancelled attempt claims nothing"
    );
    // Swept (10 s later), the voided record is gone; the cancelled attempt is still refused.
    watch
        .execute(&format!("DELETE FROM {schema}.idem WHERE consumer = 'c' AND invocation = 'never-claimed'"), &[])
        .await
        .expect("swept");
    assert_eq!(
        store.admit(&key, fp, cancelled, Timestamp::now()).await.err(),
        Some(agent_surface_policy::StoreError::AttemptCancelled),
        "the cancelled attempt claims nothing once the voided record is swept"
    );
    let admission = store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted");
    assert!(matches!(admission, Admission::Leader(_)), "another attempt claims the key: {admission:?}");
}

/// Whether a session comes to wait for a lock held by the session `holder` within 10 s.
async fn blocked_by(watch: &tokio_postgres::Client, holder: i32) -> bool {
    for _ in 0..1000 {
        let waiting: i64 = watch
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", &[&holder])
            .await
            .expect("the sessions")
            .get(0);
        if waiting > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// An admission that must decide under the record's lock (here, over a released record) asks
/// whether its attempt was cancelled once it holds the lock: a cancellation that held the lock
/// first, its mark not yet committed when the admission began, still refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_asks_for_its_cancellation_under_the_records_lock() {
    let Some(stores) = support::stores("cancel-locked").await else { return };
    let store = stores.idempotency();
    let schema = stores.config().schema.clone();
    let key = IdempotencyKey::new("c", "released");
    let fp = Fingerprint::of(&json!({"request": "released"}));
    let Admission::Leader(lease) = store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted")
    else {
        panic!("a new key leads");
    };
    let released = agent_surface_core::InvokeResult::ok(json!({"n": 1}), None);
    store
        .settle(
            &key,
            fp,
            lease,
            agent_surface_policy::idempotency::Settlement::Release { result: released },
            Timestamp::now(),
        )
        .await
        .expect("released");
    // A cancellation of `attempt` in progress: its mark written and the record locked, neither
    // committed.
    let attempt = Attempt::fresh();
    let mut client = stores.pool().get().await.expect("a connection");
    let watch = stores.pool().get().await.expect("a connection");
    let tx = client.transaction().await.expect("a transaction");
    let holder: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await.expect("its session").get(0);
    tx.execute(
        &format!("INSERT INTO {schema}.idem_cancel (attempt, keep_until) VALUES ($1, clock_timestamp() + interval '10 minutes')"),
        &[&attempt.as_u128().to_be_bytes().to_vec()],
    )
    .await
    .expect("the mark is written");
    tx.execute(
        &format!("SELECT 1 FROM {schema}.idem WHERE consumer = 'c' AND invocation = 'released' FOR UPDATE"),
        &[],
    )
    .await
    .expect("the record is locked");
    let admitting = tokio::spawn(async move { store.admit(&key, fp, attempt, Timestamp::now()).await });
    assert!(blocked_by(&watch, holder).await, "the admission waits for the record's lock");
    assert!(!admitting.is_finished(), "the admission waits for the record's lock");
    tx.commit().await.expect("the cancellation commits");
    let admitted = admitting.await.expect("the admission ran");
    assert_eq!(
        admitted.err(),
        Some(agent_surface_policy::StoreError::AttemptCancelled),
        "an attempt cancelled while its admission waited for the lock claims nothing"
    );
}

/// A released result stays readable for longer than a follower may go without reading it (a
/// lease and two op timeouts): with a 30 s lease, a follower cut off from the database for 15 s
/// still reads what happened, where a fixed 10 s window had it find nothing and answer an unknown
/// outcome for a call that never ran (the Redis store's window, on PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_result_stays_readable_past_a_lease() {
    use agent_surface_core::InvokeResult;
    use agent_surface_policy::idempotency::Settlement;

    let config = PostgresConfig {
        lease: Duration::from_secs(30),
        op_timeout: Duration::from_secs(2),
        ..PostgresConfig::default()
    };
    let Some(stores) = support::stores_with("released-readable", config).await else { return };
    let store = stores.idempotency();
    let schema = stores.config().schema.clone();
    let fp = Fingerprint::of(&json!({"request": "released"}));
    let key = IdempotencyKey::new("c", "released");
    let Admission::Leader(lease) = store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted")
    else {
        panic!("a new key leads")
    };
    let result = InvokeResult::ok(json!({"not": "kept"}), None);
    store.settle(&key, fp, lease, Settlement::Release { result }, Timestamp::now()).await.expect("released");
    let client = stores.pool().get().await.expect("a connection");
    let readable_ms: f64 = client
        .query_one(
            &format!(
                "SELECT EXTRACT(EPOCH FROM keep_until - clock_timestamp())::float8 * 1000 FROM {schema}.idem
                 WHERE consumer = 'c' AND invocation = 'released' AND state = 'gone'"
            ),
            &[],
        )
        .await
        .expect("the released record")
        .get(0);
    assert!(readable_ms > 34_000.0, "readable for a lease, two op timeouts and a second: {readable_ms} ms");
}

/// A follower's look that finds its leader's claim lapsed and unmarked confirms it under a lock
/// before it answers that nothing ran: the leader's mark may have been judged within its lease and
/// not committed yet (a commit that stalls at the edge of the lease), and a look without a lock
/// reads the row as it was before it. Here the mark is held uncommitted across the lapse: the
/// follower waits for it, then for the leader's result, rather than telling its caller that nothing
/// ran (a retry that would run the call beside its leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_waits_for_a_mark_still_committing_before_it_says_nothing_ran() {
    use agent_surface_core::InvokeResult;
    use agent_surface_policy::idempotency::Settlement;

    let lease = Duration::from_millis(300);
    let config = PostgresConfig { lease, op_timeout: Duration::from_secs(10), ..PostgresConfig::default() };
    let Some(stores) = support::stores_with("look-locked", config).await else { return };
    let store = stores.idempotency();
    let schema = stores.config().schema.clone();
    let key = IdempotencyKey::new("c", "marking");
    let fp = Fingerprint::of(&json!({"request": "marking"}));
    let Admission::Leader(leader) = store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted")
    else {
        panic!("a new key leads");
    };
    let Admission::Follower(follower) =
        store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("admitted")
    else {
        panic!("the same request follows");
    };
    let follower = tokio::spawn(follower);
    // The leader's mark, written within its lease and not committed before the lease lapses.
    let mut client = stores.pool().get().await.expect("a connection");
    let tx = client.transaction().await.expect("a transaction");
    tx.execute(
        &format!(
            "UPDATE {schema}.idem SET started = true, lease_until = clock_timestamp() + interval '1 minute'
             WHERE consumer = 'c' AND invocation = 'marking'"
        ),
        &[],
    )
    .await
    .expect("the mark is written");
    tokio::time::sleep(lease * 3).await;
    assert!(!follower.is_finished(), "the follower waits for the mark's commit");
    tx.commit().await.expect("the mark lands");
    let result = InvokeResult::ok(json!({"ran": "once"}), None);
    let expires_at = Timestamp::now().saturating_add(Duration::from_secs(600));
    store.settle(&key, fp, leader, Settlement::Store { result, expires_at }, Timestamp::now()).await.expect("settled");
    let answered = tokio::time::timeout(Duration::from_secs(10), follower).await.expect("answered").expect("joined");
    assert_eq!(answered.output(), Some(&json!({"ran": "once"})), "{answered:?}");
}
