//! The store kit's suites on the SQLite stores.

use std::num::NonZeroU32;
use std::sync::Arc;

use agent_surface_policy::{Quota, RateBudgets, SystemClock};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use agent_surface_testing::stores;

use crate::support::Folder;

async fn open(folder: &Folder) -> SqliteStores {
    SqliteStores::open(folder.file(), SqliteConfig::default()).await.expect("the store file opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_idempotency_store_passes_the_kit() {
    let folder = Folder::new("idem-kit");
    stores::check_idempotency_store(&open(&folder).await.idempotency(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_confirmation_store_passes_the_kit() {
    let folder = Folder::new("conf-kit");
    stores::check_confirmation_store(&open(&folder).await.confirmations(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_file_share_one_approval() {
    let folder = Folder::new("one-approval");
    stores::check_replicas_share_one_approval(Arc::new(open(&folder).await.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_file_share_relayed_confirmations() {
    let folder = Folder::new("relayed");
    stores::check_replicas_share_relayed_confirmations(Arc::new(open(&folder).await.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_file_record_one_expiry() {
    let folder = Folder::new("expiry");
    stores::check_replicas_record_one_expiry(Arc::new(open(&folder).await.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_file_sweep_one_expiry() {
    let folder = Folder::new("sweep");
    stores::check_replicas_sweep_one_expiry(Arc::new(open(&folder).await.confirmations())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_task_store_passes_the_kit() {
    let folder = Folder::new("task-kit");
    stores::check_task_store(&open(&folder).await.tasks(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_audit_sink_passes_the_kit() {
    let folder = Folder::new("audit-kit");
    stores::check_audit_sink(&open(&folder).await.audit(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_rate_limiter_passes_the_kit() {
    let folder = Folder::new("rate-kit");
    let quota = Quota::per_minute(NonZeroU32::new(5).unwrap());
    let budgets = RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() };
    let limiter = open(&folder).await.rate_limiter(budgets, Arc::new(SystemClock));
    stores::check_rate_limiter(&limiter, quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_rate_limiter_keeps_consumer_quotas() {
    let folder = Folder::new("quota-kit");
    let quota = Quota::per_minute(NonZeroU32::new(4).unwrap());
    let budgets = RateBudgets { consumer_quotas: stores::consumer_quotas(quota), ..RateBudgets::default() };
    let limiter = open(&folder).await.rate_limiter(budgets, Arc::new(SystemClock));
    stores::check_consumer_quotas(&limiter, quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_inbox_store_passes_the_kit() {
    let folder = Folder::new("inbox-kit");
    stores::check_inbox_store(&open(&folder).await.inbox(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_inbox_handles_on_one_file_share_it() {
    let folder = Folder::new("inbox-replicas");
    let stores = open(&folder).await;
    stores::check_inbox_replicas(Arc::new(stores.inbox()), Arc::new(stores.inbox()), "kit-").await;
}
