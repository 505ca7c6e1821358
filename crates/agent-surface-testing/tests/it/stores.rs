//! The store kit against the memory stores of `agent-surface-policy`.

use agent_surface_policy::{
    MemoryConfirmationStore, MemoryIdempotencyStore, MemoryRateLimiter, MemoryTaskStore, Quota, RateLimitConfig,
};
use agent_surface_testing::stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_confirmation_store_passes_the_kit() {
    stores::check_confirmation_store(&MemoryConfirmationStore::default(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_memory_confirmation_store_use_one_approval_once() {
    stores::check_replicas_share_one_approval(std::sync::Arc::new(MemoryConfirmationStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_memory_confirmation_store_share_relayed_confirmations() {
    stores::check_replicas_share_relayed_confirmations(std::sync::Arc::new(MemoryConfirmationStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_repeats_on_a_memory_confirmation_store_open_one_confirmation() {
    stores::check_racing_repeats_open_one_confirmation(std::sync::Arc::new(MemoryConfirmationStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_memory_confirmation_store_record_one_expiry() {
    stores::check_replicas_record_one_expiry(std::sync::Arc::new(MemoryConfirmationStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_memory_confirmation_store_sweep_one_expiry() {
    stores::check_replicas_sweep_one_expiry(std::sync::Arc::new(MemoryConfirmationStore::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_task_store_passes_the_kit() {
    stores::check_task_store(&MemoryTaskStore::default(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_idempotency_store_passes_the_kit() {
    stores::check_idempotency_store(&MemoryIdempotencyStore::default(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_rate_limiter_passes_the_kit() {
    let quota = Quota::per_minute(std::num::NonZeroU32::new(5).unwrap());
    let limiter = MemoryRateLimiter::new(RateLimitConfig { per_consumer: Some(quota), ..Default::default() });
    stores::check_rate_limiter(&limiter, quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_audit_sink_passes_the_kit() {
    stores::check_audit_sink(&agent_surface_policy::MemoryAuditSink::default(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_lines_audit_sink_passes_the_kit() {
    let dir = std::env::temp_dir().join(format!("agent-surface-kit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&path);
    let sink = agent_surface_policy::JsonLinesAuditSink::open(&path).unwrap();
    stores::check_audit_sink(&sink, "kit-").await;
    // Opened again, the file reads back the same.
    let again = agent_surface_policy::JsonLinesAuditSink::open(&path).unwrap();
    use agent_surface_policy::AuditSink;
    assert_eq!(again.recent(100).await.unwrap(), sink.recent(100).await.unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_rate_limiter_passes_the_per_consumer_quota_kit() {
    let quota = Quota::per_minute(std::num::NonZeroU32::new(5).unwrap());
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        consumer_quotas: stores::consumer_quotas(quota),
        ..Default::default()
    });
    stores::check_consumer_quotas(&limiter, quota, "kit-").await;
}

/// The suite can fail: a limiter whose budget covers all of a consumer's calls (not one
/// capability) limits `orders.list` too, and the kit says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "a quota of one capability does not limit another")]
async fn the_per_consumer_quota_kit_refuses_a_budget_over_all_capabilities() {
    let quota = Quota::per_minute(std::num::NonZeroU32::new(5).unwrap());
    let limiter = MemoryRateLimiter::new(RateLimitConfig { per_consumer: Some(quota), ..Default::default() });
    stores::check_consumer_quotas(&limiter, quota, "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_inbox_store_passes_the_kit() {
    stores::check_inbox_store(&agent_surface_policy::inbox::MemoryInboxStore::default(), "kit-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_memory_inbox_store_share_it() {
    let store = std::sync::Arc::new(agent_surface_policy::inbox::MemoryInboxStore::default());
    stores::check_inbox_replicas(store.clone(), store, "kit-").await;
}
