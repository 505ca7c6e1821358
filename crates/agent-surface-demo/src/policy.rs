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

/// Refunds need a signed-in support agent; admin tools exist only for admins.
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
            _ => AuthorityDecision::Allow,
        };
        Box::pin(std::future::ready(Ok(decision)))
    }
}

/// A token bucket per (consumer, capability) for `shipping.quote`: two quotes at once, one more
/// every `refill`.
pub(crate) struct QuoteLimiter {
    pub(crate) capacity: f64,
    pub(crate) refill: Duration,
    buckets: Mutex<HashMap<(String, String), (f64, Timestamp)>>,
}

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
