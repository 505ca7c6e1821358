//! Where the tests find Redis.

use agent_surface_redis::{RedisConfig, RedisStores};

/// The URL of the Redis to test against (see `agent_surface_testing::services`).
pub(crate) fn redis_url() -> Option<String> {
    agent_surface_testing::services::redis_url()
}

/// Stores on the test Redis under a prefix of their own (tests share one Redis).
pub(crate) async fn stores(test: &str) -> Option<RedisStores> {
    stores_with(test, RedisConfig::default()).await
}

/// As [`stores`], with `config` (its prefix replaced).
pub(crate) async fn stores_with(test: &str, config: RedisConfig) -> Option<RedisStores> {
    let url = redis_url()?;
    // The process id and a clock reading: a rerun against a persistent Redis starts afresh.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:{test}:{}:", std::process::id(), unique());
    Some(RedisStores::connect(&url, RedisConfig { prefix, ..config }).await.expect("Redis answers"))
}

fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(crate) use agent_surface_testing::services::RedisSite as Site;
