//! The store kit's suites on the PostgreSQL stores, and two replicas (two engines) on one
//! database.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::{Quota, RateBudgets};
use agent_surface_postgres::PostgresConfig;
use agent_surface_testing::stores;

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_idempotency_store_passes_the_kit() {
    let Some(pg) = support::stores("idem_kit").await else { return };
    stores::check_idempotency_store(&pg.idempotency(), "kit-").await;
}

/// With a tiny lease: renewal holds it, a lapsed one is taken over, and the old leader's late
/// completion is refused by the fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_leases_lapse_and_fence_late_completions() {
    let lease = Duration::from_millis(300);
    let config = PostgresConfig { lease, op_timeout: Duration::from_secs(10), ..PostgresConfig::default() };
    let Some(pg) = support::stores_with("idem_lease", config).await else { return };
    stores::check_idempotency_leases(&pg.idempotency(), lease, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_confirmation_store_passes_the_kit() {
    let Some(pg) = support::stores("conf_kit").await else { return };
    stores::check_confirmation_store(&pg.confirmations(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_approval_and_use_it_once() {
    let Some(pg) = support::stores("one_approval").await else { return };
    stores::check_replicas_share_one_approval(Arc::new(pg.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_relayed_confirmations() {
    let Some(pg) = support::stores("relayed").await else { return };
    stores::check_replicas_share_relayed_confirmations(Arc::new(pg.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_repeats_on_two_replicas_open_one_confirmation() {
    let Some(pg) = support::stores("racing_repeats").await else { return };
    stores::check_racing_repeats_open_one_confirmation(Arc::new(pg.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_record_one_expiry() {
    let Some(pg) = support::stores("expiry").await else { return };
    stores::check_replicas_record_one_expiry(Arc::new(pg.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sweep_one_expiry() {
    let Some(pg) = support::stores("sweep").await else { return };
    stores::check_replicas_sweep_one_expiry(Arc::new(pg.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_task_store_passes_the_kit() {
    let Some(pg) = support::stores("task_kit").await else { return };
    stores::check_task_store(&pg.tasks(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_audit_sink_passes_the_kit() {
    let Some(pg) = support::stores("audit_kit").await else { return };
    stores::check_audit_sink(&pg.audit(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_rate_limiter_passes_the_kit() {
    let Some(pg) = support::stores("rate_kit").await else { return };
    let quota = Quota::per_minute(NonZeroU32::new(5).unwrap());
    let budgets = RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() };
    stores::check_rate_limiter(&pg.rate_limiter(budgets), quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_rate_limiter_keeps_consumer_quotas() {
    let Some(pg) = support::stores("quota_kit").await else { return };
    let quota = Quota::per_minute(NonZeroU32::new(4).unwrap());
    let budgets = RateBudgets { consumer_quotas: stores::consumer_quotas(quota), ..RateBudgets::default() };
    stores::check_consumer_quotas(&pg.rate_limiter(budgets), quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_inbox_store_passes_the_kit() {
    let Some(pg) = support::stores("inbox_kit").await else { return };
    stores::check_inbox_store(&pg.inbox(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_the_postgres_inbox_store() {
    let Some(a) = support::stores("inbox_replicas").await else { return };
    let b = support::replica(&a).await;
    stores::check_inbox_replicas(Arc::new(a.inbox()), Arc::new(b.inbox()), "kit-").await;
}
