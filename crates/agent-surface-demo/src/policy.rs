//! The shop's own policies, written over the `agent_surface_policy` hook traits: who may see and
//! call what, and a token bucket for shipping quotes. (Confirmations use the shipped
//! `ConfirmationEngine`; see `shop.rs`.)

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_core::details::{Origin, RateLimitReason};
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, PolicyError, RateDecision, RateLimiter};
use futures_util::future::BoxFuture;

/// Refunds need a signed-in support agent; admin tools exist only for admins, approval tools only
/// for approvers.
pub(crate) struct ShopAuthority;

impl AuthorityPolicy for ShopAuthority {
    fn name(&self) -> &str {
        "shop-authority"
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        let identity = call.consumer.identity();
        let decision = match call.type_id {
            "refunds" => match identity {
                None => AuthorityDecision::Unauthenticated,
                Some(i) if !i.has_role("support") => AuthorityDecision::Deny { origin: Origin::Client },
                Some(_) => AuthorityDecision::Allow,
            },
            "admin" if !identity.is_some_and(|i| i.has_role("admin")) => AuthorityDecision::Hide,
            "approvals" if !identity.is_some_and(|i| i.has_role("approver")) => AuthorityDecision::Hide,
            _ => AuthorityDecision::Allow,
        };
        Box::pin(std::future::ready(Ok(decision)))
    }
}

/// A token bucket per (consumer, capability) for `shipping.quote`: two quotes at once, one more
/// every `refill`. At most [`MAX_BUCKETS`] buckets are kept: when full, the buckets back to full
/// (which hold nothing) are dropped, then, if that freed nothing, the whole table (which can only
/// make the limiter more lenient for a moment, never stricter).
pub(crate) struct QuoteLimiter {
    pub(crate) capacity: f64,
    pub(crate) refill: Duration,
    buckets: Mutex<HashMap<(String, String), (f64, Timestamp)>>,
}

/// The most buckets a [`QuoteLimiter`] keeps.
pub(crate) const MAX_BUCKETS: usize = 10_000;

impl QuoteLimiter {
    pub(crate) fn new(capacity: u32, refill: Duration) -> QuoteLimiter {
        QuoteLimiter { capacity: f64::from(capacity), refill, buckets: Mutex::default() }
    }
}

impl RateLimiter for QuoteLimiter {
    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision> {
        if call.capability != "shipping.quote" {
            return Box::pin(std::future::ready(RateDecision::Allow(None)));
        }
        let key = (call.consumer.key().to_string(), call.capability.to_string());
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&key) {
            let refill_ms = self.refill.as_millis().max(1) as f64;
            let capacity = self.capacity;
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.saturating_duration_since(*at).as_millis() as f64 / refill_ms < capacity
            });
            if buckets.len() >= MAX_BUCKETS {
                buckets.clear();
            }
        }
        let (tokens, at) = buckets.entry(key).or_insert((self.capacity, now));
        let refill_ms = self.refill.as_millis().max(1) as f64;
        let elapsed_ms = now.saturating_duration_since(*at).as_millis() as f64;
        *tokens = (*tokens + elapsed_ms / refill_ms).min(self.capacity);
        *at = now;
        let decision = if *tokens >= 1.0 {
            *tokens -= 1.0;
            RateDecision::Allow(None)
        } else {
            let wait_ms = ((1.0 - *tokens) * refill_ms).ceil() as u64;
            RateDecision::Limited { reason: RateLimitReason::Rate, retry_after: Duration::from_millis(wait_ms.max(1)) }
        };
        Box::pin(std::future::ready(decision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_core::Effect;
    use agent_surface_policy::Consumer;

    /// The quote limiter keeps at most `MAX_BUCKETS` buckets however many consumers quote.
    #[tokio::test]
    async fn the_quote_limiter_is_bounded() {
        let limiter = QuoteLimiter::new(2, Duration::from_millis(800));
        let now = Timestamp::from_unix_millis(1_795_957_200_000);
        for i in 0..(MAX_BUCKETS + 500) {
            let consumer = Consumer::anonymous(format!("http-anonymous:s{i}"));
            let call = CallInfo::new(&consumer, "shipping.quote", "shipping", Effect::Read, true);
            assert!(matches!(limiter.acquire(call, now).await, RateDecision::Allow(_)));
            assert!(limiter.buckets.lock().unwrap().len() <= MAX_BUCKETS);
        }
    }
}
