//! Failing closed: a database that stops answering makes every store operation fail within its
//! budget (never hang, never answer as if it had written), and once it is back the stores go on
//! with everything committed before.

use std::time::{Duration, Instant};

use agent_surface_core::{InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
};
use agent_surface_postgres::{PostgresConfig, PostgresStores};
use agent_surface_testing::postgres::PgCluster;
use serde_json::json;

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_fails_closed_within_the_budget_and_loses_nothing_committed() {
    let Some(mut cluster) = PgCluster::start("faults") else { return };
    let budget = Duration::from_secs(1);
    let config = PostgresConfig { op_timeout: budget, schema: support::schema("faults"), ..PostgresConfig::default() };
    let stores = PostgresStores::connect(&cluster.url(), config).await.expect("PostgreSQL answers");
    let idem = stores.idempotency();
    let fp = Fingerprint::of(&json!({"request": 1}));
    let key = |id: &str| IdempotencyKey::new("c", id);
    let Ok(Admission::Leader(lease)) = idem.admit(&key("settled"), fp, Attempt::fresh(), Timestamp::now()).await else {
        panic!("a new key leads")
    };
    let t = Timestamp::now();
    let stored = Settlement::Store {
        result: InvokeResult::ok(json!({"n": 1}), None),
        expires_at: t.saturating_add(Duration::from_secs(600)),
    };
    idem.settle(&key("settled"), fp, lease, stored, t).await.expect("settled");

    tokio::task::block_in_place(|| cluster.stop());
    let asked = Instant::now();
    let down = idem.admit(&key("during"), fp, Attempt::fresh(), Timestamp::now()).await;
    let took = asked.elapsed();
    assert!(matches!(down, Err(StoreError::Unavailable(_))), "{down:?}");
    // Generous over the budget (a loaded machine fires timers late); a hang would take far longer.
    assert!(took <= budget * 3, "failed closed after {took:?}");
    let text = down.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(!text.contains(&cluster.url()), "the URL stays out of the error: {text}");

    tokio::task::block_in_place(|| cluster.restart());
    let deadline = Instant::now() + Duration::from_secs(30);
    let replay = loop {
        match idem.admit(&key("settled"), fp, Attempt::fresh(), Timestamp::now()).await {
            Ok(admission) => break admission,
            Err(e) => {
                assert!(Instant::now() < deadline, "the stores never reconnected: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(
        matches!(replay, Admission::Replay(r) if r == InvokeResult::ok(json!({"n": 1}), None)),
        "committed before the stop"
    );
    let again = idem.admit(&key("during"), fp, Attempt::fresh(), Timestamp::now()).await;
    assert!(matches!(again, Ok(Admission::Leader(_))), "the refused admission claimed nothing: {again:?}");
}

/// `url` with its database (the path after the host) replaced by `database`, its query kept.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let (host, _) = base.rsplit_once('/').expect("a database in the URL");
    format!("{host}/{database}{}", query.map(|q| format!("?{q}")).unwrap_or_default())
}

/// A connection the server refuses is refused at `connect` with the server's own reason, not
/// only `db error`: a database or a role that does not exist is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_says_why() {
    let Some(url) = support::url() else { return };
    let config = || PostgresConfig { schema: support::schema("refused"), ..PostgresConfig::default() };
    let refusal = |result: Result<PostgresStores, agent_surface_postgres::ConnectError>| match result {
        Err(e) => e.to_string(),
        Ok(_) => panic!("connected"),
    };
    let why = refusal(PostgresStores::connect(&with_database(&url, "no_such_database_here"), config()).await);
    assert!(why.contains(r#"database "no_such_database_here" does not exist"#), "{why}");
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let stranger = format!("{scheme}://no_such_role_here@{host}");
    let why = refusal(PostgresStores::connect(&stranger, config()).await);
    assert!(why.contains(r#"role "no_such_role_here" does not exist"#), "{why}");
}
