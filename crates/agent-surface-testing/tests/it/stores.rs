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
