//! Every suite of the store kit on the PostgreSQL stores: each suite on stores of its own, in a
//! schema of their own of the test database.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::inbox::InboxStore;
use agent_surface_policy::{AuditSink, ConfirmationStore, IdempotencyStore, RateBudgets, RateLimiter, TaskStore};
use agent_surface_postgres::{PostgresConfig, PostgresStores};
use agent_surface_testing::stores::{Backend, Leases};

use crate::support;

struct Postgres(PostgresStores);

impl Backend for Postgres {
    const LEASES: Leases = Leases::Lapse;

    async fn open(name: &str) -> Option<Postgres> {
        support::stores(name).await.map(Postgres)
    }

    async fn open_with_lease(name: &str, lease: Duration) -> Option<Postgres> {
        let config = PostgresConfig { lease, op_timeout: Duration::from_secs(10), ..PostgresConfig::default() };
        support::stores_with(name, config).await.map(Postgres)
    }

    async fn replica(&self) -> Postgres {
        Postgres(support::replica(&self.0).await)
    }

    fn idempotency(&self) -> Arc<dyn IdempotencyStore> {
        Arc::new(self.0.idempotency())
    }

    fn confirmations(&self) -> Arc<dyn ConfirmationStore> {
        Arc::new(self.0.confirmations())
    }

    fn tasks(&self) -> Arc<dyn TaskStore> {
        Arc::new(self.0.tasks())
    }

    fn audit(&self) -> Arc<dyn AuditSink> {
        Arc::new(self.0.audit())
    }

    fn rate_limiter(&self, budgets: RateBudgets) -> Arc<dyn RateLimiter> {
        Arc::new(self.0.rate_limiter(budgets))
    }

    fn inbox(&self) -> Arc<dyn InboxStore> {
        Arc::new(self.0.inbox())
    }
}

agent_surface_testing::store_suites!(Postgres);
