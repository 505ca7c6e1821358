//! The shop's policies, written over the `agent_surface_policy` hook traits: who may see and call
//! what, a token bucket for shipping quotes, and a confirmation gate for cancellations that can be
//! settled through MCP elicitation.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin, RateLimitReason};
use agent_surface_core::{SafeText, Timestamp};
use agent_surface_mcp::confirm::{ConfirmationAnswer, ConfirmationResolver, ResolveError};
use agent_surface_policy::{
    AuthorityDecision, AuthorityPolicy, CallInfo, ConfirmationDecision, ConfirmationGate, Consumer, Fingerprint,
    PolicyError, RateDecision, RateLimiter,
};
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Pending,
    Approved,
    Denied,
    Consumed,
}

struct Pending {
    consumer: String,
    capability: String,
    instance: Option<String>,
    input: Fingerprint,
    expires_at: Timestamp,
    status: Status,
}

/// Gates destructive order changes (`orders.cancel`) behind a person's approval.
///
/// A call without evidence gets `CONFIRMATION_REQUIRED` with a fresh id bound to the consumer,
/// the capability, the target and a fingerprint of the input; the retry carrying the approved id
/// proceeds once (single use). Approval comes from the host: through MCP elicitation (this type
/// is also the adapter's [`ConfirmationResolver`]) or [`ShopConfirmations::answer`].
pub(crate) struct ShopConfirmations {
    ttl: Duration,
    pending: Mutex<HashMap<String, Pending>>,
    next: std::sync::atomic::AtomicU64,
}

impl ShopConfirmations {
    pub(crate) fn new(ttl: Duration) -> ShopConfirmations {
        ShopConfirmations { ttl, pending: Mutex::default(), next: std::sync::atomic::AtomicU64::new(1) }
    }

    /// Records the answer to a pending confirmation issued to `requester`.
    pub(crate) fn answer(&self, id: &str, requester: &Consumer, approved: bool) -> Result<(), ResolveError> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(p) = pending.get_mut(id) else { return Err(ResolveError(format!("no pending confirmation {id}"))) };
        if p.consumer != requester.key() {
            return Err(ResolveError("the confirmation belongs to another consumer".to_string()));
        }
        if p.status != Status::Pending {
            return Err(ResolveError(format!("confirmation {id} was already answered")));
        }
        p.status = if approved { Status::Approved } else { Status::Denied };
        Ok(())
    }
}

fn summary(call: &CallInfo<'_>) -> SafeText {
    // The order id passed the input schema's pattern `^[A-Z]-[0-9]{4}$`; checked again here
    // before it goes into text a person reads.
    let order = call.input.and_then(|i| i.get("orderId")).and_then(|v| v.as_str());
    match order {
        Some(id) if id.len() == 6 && id.as_bytes()[1] == b'-' && id[2..].bytes().all(|b| b.is_ascii_digit()) => {
            SafeText::trusted(format!("Cancel order {id} and refund the customer in full."))
        }
        _ => SafeText::from("Cancel an order and refund the customer in full."),
    }
}

impl ConfirmationGate for ShopConfirmations {
    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        let decision = if call.capability != "orders.cancel" {
            ConfirmationDecision::Proceed
        } else {
            let input = call.input.map(Fingerprint::of).unwrap_or_else(|| Fingerprint::of(&serde_json::Value::Null));
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.retain(|_, p| p.expires_at.saturating_add(self.ttl) > now);
            match confirmation_id {
                None => {
                    let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let id = format!("cf-{n:04}");
                    let expires_at = now.saturating_add(self.ttl);
                    pending.insert(
                        id.clone(),
                        Pending {
                            consumer: call.consumer.key().to_string(),
                            capability: call.capability.to_string(),
                            instance: call.instance_id.map(str::to_string),
                            input,
                            expires_at,
                            status: Status::Pending,
                        },
                    );
                    ConfirmationDecision::Required {
                        confirmation_id: id,
                        summary: summary(&call),
                        expires_at,
                        origin: Origin::Client,
                    }
                }
                Some(id) => match pending.get_mut(id) {
                    // Unknown (never issued here, or from another process): like the engine, `expired`.
                    None => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Expired),
                    Some(p)
                        if p.consumer != call.consumer.key()
                            || p.capability != call.capability
                            || p.instance.as_deref() != call.instance_id
                            || p.input != input =>
                    {
                        ConfirmationDecision::Invalid(ConfirmationInvalidReason::Mismatch)
                    }
                    Some(p) if p.expires_at <= now => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Expired),
                    Some(p) => match p.status {
                        Status::Approved => {
                            p.status = Status::Consumed;
                            ConfirmationDecision::Proceed
                        }
                        Status::Denied => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Denied),
                        Status::Consumed => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Consumed),
                        Status::Pending => ConfirmationDecision::Required {
                            confirmation_id: id.to_string(),
                            summary: summary(&call),
                            expires_at: p.expires_at,
                            origin: Origin::Client,
                        },
                    },
                },
            }
        };
        Box::pin(std::future::ready(decision))
    }
}

impl ConfirmationResolver for ShopConfirmations {
    fn resolve<'a>(
        &'a self,
        confirmation_id: &'a str,
        requester: &'a Consumer,
        answer: ConfirmationAnswer,
    ) -> BoxFuture<'a, Result<(), ResolveError>> {
        let approved = answer == ConfirmationAnswer::Approved;
        Box::pin(std::future::ready(self.answer(confirmation_id, requester, approved)))
    }
}
