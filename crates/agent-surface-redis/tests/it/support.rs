//! Where the tests find Redis.

use agent_surface_redis::{RedisConfig, RedisStores};

/// The URL of the Redis to test against (see `agent_surface_testing::services`).
pub(crate) fn redis_url() -> Option<String> {
    agent_surface_testing::services::redis_url()
}

/// Stores on the test Redis under a prefix of their own (tests share one Redis), with a generous
/// time budget per operation: these tests are about what the stores guarantee, not about budgets
/// (those that are set their own with [`stores_with`]), and a thousand operations queued on one
/// connection of a busy machine can outlast the default two seconds.
pub(crate) async fn stores(test: &str) -> Option<RedisStores> {
    stores_with(test, RedisConfig { op_timeout: std::time::Duration::from_secs(10), ..RedisConfig::default() }).await
}

/// As [`stores`], with `config` (its prefix replaced).
pub(crate) async fn stores_with(test: &str, config: RedisConfig) -> Option<RedisStores> {
    let url = redis_url()?;
    // The process id and a clock reading: a rerun against a persistent Redis starts afresh.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:{test}:{}:", std::process::id(), unique());
    Some(RedisStores::connect(&url, RedisConfig { prefix, ..config }).await.expect("Redis answers"))
}

/// Another connection to the Redis of `a`, under its prefix: another replica.
pub(crate) async fn replica(a: &RedisStores) -> RedisStores {
    let url = redis_url().expect("the first connected");
    RedisStores::connect(&url, a.config().clone()).await.expect("Redis answers")
}

fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Connects to a Redis the test just started (and that answers already), trying again until
/// [`CONNECT_WITHIN`] has passed: a test whose budget is short (to prove that operations give up
/// quickly once Redis is frozen) must not fail because a busy machine took longer than that budget
/// to connect.
pub(crate) async fn connect_patiently(url: &str, config: RedisConfig) -> RedisStores {
    let deadline = tokio::time::Instant::now() + CONNECT_WITHIN;
    loop {
        match RedisStores::connect(url, config.clone()).await {
            Ok(stores) => return stores,
            Err(e) if tokio::time::Instant::now() > deadline => {
                panic!("Redis at {url} did not accept a connection within {CONNECT_WITHIN:?}: {e}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// How long [`connect_patiently`] and the tests' waits for a restarted Redis keep trying: far
/// longer than a loaded machine needs, short enough that a Redis that never comes back fails the
/// test rather than hanging it.
pub(crate) const CONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) use agent_surface_testing::services::RedisSite as Site;
