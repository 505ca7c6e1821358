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

/// A database that may lose what the stores committed is named at connect: `synchronous_commit`
/// off for the service's connections (here through the URL's `options`), `fsync` or
/// `full_page_writes` off for the server. One as advised is not. Said at connect to no subscriber (the guide connects before
/// `Serve` installs the log), the warnings are kept for the log installed later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_may_lose_commits_is_named_at_connect() {
    use tracing::instrument::WithSubscriber as _;
    let Some(cluster) = PgCluster::start("durability") else { return };
    let config = || PostgresConfig {
        op_timeout: Duration::from_secs(10),
        schema: support::schema("durability"),
        ..PostgresConfig::default()
    };
    let stores = PostgresStores::connect(&cluster.url(), config()).await.expect("PostgreSQL answers");
    assert_eq!(stores.durability_warnings().await, Vec::<String>::new());

    let lax = format!("{}?options=-c%20synchronous_commit%3Doff", cluster.url());
    let lax = PostgresStores::connect(&lax, config()).await.expect("PostgreSQL answers");
    let warnings = lax.durability_warnings().await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("synchronous_commit off") && warnings[0].contains("used twice"), "{warnings:?}");

    let client = stores.pool().get().await.expect("a connection");
    for sql in ["ALTER SYSTEM SET fsync = off", "SELECT pg_reload_conf()"] {
        client.batch_execute(sql).await.expect("reconfigured");
    }
    drop(client);
    // The server reloads its configuration on its own time.
    let deadline = Instant::now() + Duration::from_secs(10);
    let warnings = loop {
        let warnings = stores.durability_warnings().await;
        if !warnings.is_empty() {
            break warnings;
        }
        assert!(Instant::now() < deadline, "fsync off not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("fsync off") && warnings[0].contains("set fsync on"), "{warnings:?}");
    let client = stores.pool().get().await.expect("a connection");
    for sql in ["ALTER SYSTEM SET fsync = on", "ALTER SYSTEM SET full_page_writes = off", "SELECT pg_reload_conf()"] {
        client.batch_execute(sql).await.expect("reconfigured");
    }
    drop(client);
    let warnings = loop {
        let warnings = stores.durability_warnings().await;
        if warnings.iter().any(|w| w.contains("full_page_writes off")) {
            break warnings;
        }
        assert!(Instant::now() < deadline, "full_page_writes off not seen: {warnings:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(warnings.len(), 1, "{warnings:?}");

    // The only test of this binary that takes the kept warnings.
    let _ = agent_surface_policy::wiring::take_unrecorded();
    let nobody = tracing::subscriber::NoSubscriber::default();
    let connected = PostgresStores::connect(&cluster.url(), config()).with_subscriber(nobody).await;
    connected.expect("PostgreSQL answers");
    let kept = agent_surface_policy::wiring::take_unrecorded();
    assert_eq!(kept.iter().filter(|w| w.contains("full_page_writes off")).count(), 1, "{kept:?}");
}
