//! What the PostgreSQL store's admission writes beyond the store kit's rules (which hold whether
//! or not a store marks at admission): a claim asked for with `admit_started` is marked started by
//! the admission's own statement, a fresh claim and a takeover alike, so the registry sends a
//! harmless call no separate mark; a claim admitted with `admit` is not marked.

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
