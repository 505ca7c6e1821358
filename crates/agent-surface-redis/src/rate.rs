//! [`RedisRateLimiter`]: rate budgets shared by replicas, GCRA in one script.
//!
//! Each bucket is one key holding its theoretical arrival time (microseconds on Redis' clock):
//! `{prefix}rate:{kind}:{id}` for the buckets of `RateBudgets` — `rate:consumer:{key}`,
//! `rate:capability:{name}`, `rate:consumer-capability:{name}:{key}` and
//! `rate:consumer-type:{type}:{key}`. One script tests every bucket a call needs and takes a unit
//! from all of them or from none (a refused call costs nothing), exactly as the in-process
//! `MemoryRateLimiter` does; time is Redis' `TIME`, so replicas whose clocks disagree still share
//! one budget.

use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_core::details::RateLimitReason;
use agent_surface_policy::{CallInfo, RateBudgets, RateDecision, RateLimiter, Scope};
use futures_util::future::BoxFuture;
use redis::Script;

use crate::RedisStores;

/// Takes a unit from every bucket or from none. KEYS: the buckets; ARGV: per bucket, the
/// emission interval and the burst tolerance (µs). Returns `{1, 0}` or `{0, wait µs}`.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next_tat = {}
local wait = 0
for i, key in ipairs(KEYS) do
  local emission = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local conforms_at = tat - tolerance
  if now < conforms_at then
    if conforms_at - now > wait then wait = conforms_at - now end
  else
    next_tat[i] = tat + emission
  end
end
if wait > 0 then return {0, string.format('%d', wait)} end
for i, key in ipairs(KEYS) do
  local ttl_ms = math.floor((next_tat[i] - now) / 1000) + 1
  redis.call('SET', key, string.format('%d', next_tat[i]), 'PX', string.format('%d', ttl_ms))
end
return {1, '0'}
";

/// The budgets of a [`RedisRateLimiter`]: the same [`RateBudgets`] as the rate part of
/// `RateLimitConfig` (per consumer, per capability, per consumer × capability and per consumer ×
/// type); the action queue bounds the calls running in one process and stays with
/// `MemoryRateLimiter`.
pub type RedisRateConfig = RateBudgets;

/// A [`RateLimiter`] whose budgets live in Redis, shared by every replica.
///
/// A store that does not answer stops the call (`RateDecision::Unavailable`, which the pipeline
/// answers `EXECUTION_FAILED {reason: transport}`, retry after a delay, never `RATE_LIMITED`): a
/// rate limit is a protection, and an unreadable budget is not an open one. The cause goes to the
/// operator channel. Budgets are kept in whole microseconds (Redis' clock): a quota whose emission
/// interval is under a few microseconds (hundreds of thousands of calls a second) is granted
/// approximately.
#[derive(Clone, Debug)]
pub struct RedisRateLimiter {
    stores: RedisStores,
    config: RedisRateConfig,
    take: std::sync::Arc<Script>,
}

impl RedisRateLimiter {
    /// A limiter over `stores` with `config`.
    pub fn new(stores: RedisStores, config: RedisRateConfig) -> RedisRateLimiter {
        RedisRateLimiter { stores, config, take: std::sync::Arc::new(Script::new(TAKE)) }
    }

    async fn acquire_now(&self, call: CallInfo<'_>) -> RateDecision {
        let prefix = &self.stores.config.prefix;
        let buckets: Vec<(String, _)> = self
            .config
            .buckets(&call)
            .map(|b| (format!("{prefix}rate:{}:{}", b.kind.as_str(), b.id()), b.quota))
            .collect();
        if buckets.is_empty() {
            return RateDecision::Allow(None);
        }
        // Microseconds (Redis' `TIME` resolution; nanoseconds since the epoch would not be exact in
        // the script's doubles), clamped so that sums stay exact.
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).clamp(1, 1 << 50);
        let bytes = buckets.iter().map(|(key, _)| key.len() + 48).sum();
        let mut cmd = crate::evalsha(&self.take, buckets.len(), bytes);
        for (key, _) in &buckets {
            cmd.arg(key);
        }
        for (_, quota) in &buckets {
            let emission = micros(quota.emission_interval());
            let tolerance = emission.saturating_mul(u64::from(quota.limit().get()) - 1).min(1 << 50);
            cmd.arg(emission).arg(tolerance);
        }
        match self.stores.eval::<(i64, String)>(&self.take, &cmd).await {
            Ok((1, _)) => RateDecision::Allow(None),
            Ok((_, wait)) => {
                let wait_us = wait.parse::<u64>().unwrap_or(1_000);
                let retry_after = Duration::from_millis(wait_us.div_ceil(1_000).max(1));
                RateDecision::Limited { reason: RateLimitReason::Rate, retry_after }
            }
            // The pipeline answers a transient store failure (and logs it as a store fault).
            Err(e) => RateDecision::Unavailable(format!("redis rate budget unreadable: {e}")),
        }
    }
}

impl RateLimiter for RedisRateLimiter {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, _now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(self.acquire_now(call))
    }

    fn scopes(&self) -> Vec<Scope> {
        self.config.scopes()
    }
}
