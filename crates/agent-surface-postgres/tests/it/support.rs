//! Where the tests find PostgreSQL.

use std::time::Duration;

use agent_surface_postgres::{PostgresConfig, PostgresStores};

/// The URL of the database to test against.
pub(crate) fn url() -> Option<String> {
    agent_surface_testing::postgres::postgres_url()
}

/// Stores in a schema of their own (tests share one database), with a generous time budget per
/// operation: these tests are about what the stores guarantee, not about budgets.
pub(crate) async fn stores(test: &str) -> Option<PostgresStores> {
    stores_with(test, PostgresConfig { op_timeout: Duration::from_secs(10), ..PostgresConfig::default() }).await
}

/// As [`stores`], with `config` (its schema replaced by a fresh one).
pub(crate) async fn stores_with(test: &str, config: PostgresConfig) -> Option<PostgresStores> {
    let url = url()?;
    Some(
        PostgresStores::connect(&url, PostgresConfig { schema: schema(test), ..config })
            .await
            .expect("PostgreSQL answers"),
    )
}

/// A schema no other test (nor an earlier run against a persistent database) uses.
pub(crate) fn schema(test: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nonce =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() % 1_000_000_000);
    format!("it_{}_{nonce}_{n}_{}", std::process::id(), test.replace('-', "_"))
}

/// Another connection pool to the schema of `a`: another replica.
pub(crate) async fn replica(a: &PostgresStores) -> PostgresStores {
    let url = url().expect("the first connected");
    PostgresStores::connect(&url, a.config().clone()).await.expect("PostgreSQL answers")
}
