//! Every suite of the store kit on the Redis stores: each suite on stores of its own, under a
//! prefix of their own on the test Redis.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::inbox::InboxStore;
use agent_surface_policy::{AuditSink, ConfirmationStore, IdempotencyStore, RateBudgets, RateLimiter, TaskStore};
use agent_surface_redis::{RedisConfig, RedisStores};
use agent_surface_testing::stores::{Backend, Leases};

use crate::support;

struct Redis(RedisStores);

impl Backend for Redis {
    const LEASES: Leases = Leases::Lapse;

    async fn open(name: &str) -> Option<Redis> {
        support::stores(name).await.map(Redis)
    }

    async fn open_with_lease(name: &str, lease: Duration) -> Option<Redis> {
        support::stores_with(name, RedisConfig { lease, ..RedisConfig::default() }).await.map(Redis)
    }

    async fn replica(&self) -> Redis {
        Redis(support::replica(&self.0).await)
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

agent_surface_testing::store_suites!(Redis);
