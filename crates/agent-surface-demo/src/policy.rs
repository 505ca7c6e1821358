//! The shop's policies and rate budget, made of `agent_surface_policy`'s shipped ones: who may see
//! and call what ([`Policies`] with [`RequireRole`]), and a shipping-quote budget per caller
//! ([`RateBudgets`], served by the [`MemoryRateLimiter`] in one process or by the Redis limiter
//! for replicas). Confirmations use the shipped `ConfirmationEngine`; see `shop.rs`.
//!
//! The engine is default-deny, as `docs/policies.md` recommends for a service with write
//! capabilities: a type no rule names is refused (`NOT_AUTHORIZED`), so a tool added without a rule
//! stays closed. The types the demo shows every code through are opened to everyone with
//! `AllowAll`; the `conformance` fixtures, defined later and only on demand, are declared in
//! `RegistryConfig::late_types` (see `shop.rs`) so that their rule does not fail the earlier mounts.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use agent_surface_policy::{
    AllowAll, MemoryRateLimiter, Policies, Quota, RateBudgets, RateLimitConfig, RequireRole, Scope,
};

/// The types anyone may call, signed in or not (the demo shows every code to an anonymous caller).
const OPEN: [&str; 6] = ["orders", "shipping", "cart", "reports", "tickets", "loyalty"];

/// The type of the conformance fixtures (`conformance::define`), defined after the shop's.
pub(crate) const CONFORMANCE: &str = "conformance";

/// Default-deny. Refunds need a signed-in support agent; admin tools exist only for admins,
/// approval tools only for approvers (hidden from everyone else, anonymous or not); the [`OPEN`]
/// types, and with `conformance` the [`CONFORMANCE`] fixtures, are open to everyone.
pub(crate) fn authority(conformance: bool) -> Policies {
    let open = OPEN.into_iter().chain(conformance.then_some(CONFORMANCE));
    open.fold(Policies::default_deny(), |policies, type_id| policies.for_type(type_id, AllowAll))
        .for_type("refunds", RequireRole::new("support"))
        .for_type("admin", RequireRole::new("admin").or_hide())
        .for_type("approvals", RequireRole::new("approver").or_hide())
}

/// `shipping.quote` per caller: two quotes at once, one more every `refill`.
pub(crate) fn quote_budget(refill: Duration) -> RateBudgets {
    let two = NonZeroU32::MIN.saturating_add(1);
    RateBudgets {
        consumer_quotas: HashMap::from([(Scope::capability("shipping.quote"), Quota::new(two, refill * 2))]),
        ..Default::default()
    }
}

/// The [`quote_budget`] in this process's memory.
pub(crate) fn quote_limiter(refill: Duration) -> MemoryRateLimiter {
    let RateBudgets { consumer_quotas, .. } = quote_budget(refill);
    MemoryRateLimiter::new(RateLimitConfig { consumer_quotas, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_core::details::RateLimitReason;
    use agent_surface_core::{Effect, Timestamp};
    use agent_surface_policy::{
        AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, Identity, RateDecision, RateLimiter,
    };

    /// Two quotes at once per caller, then one per refill; another caller has a budget of its
    /// own, and other capabilities none.
    #[tokio::test]
    async fn quotes_are_budgeted_per_caller() {
        let limiter = quote_limiter(Duration::from_millis(800));
        let now = Timestamp::from_unix_millis(1_795_957_200_000);
        let (alice, bob) = (Consumer::anonymous("alice"), Consumer::anonymous("bob"));
        let quote = |who| CallInfo::new(who, "shipping.quote", "shipping", Effect::Read, true);
        for _ in 0..2 {
            assert!(matches!(limiter.acquire(quote(&alice), now).await, RateDecision::Allow(_)));
        }
        let RateDecision::Limited { reason, retry_after } = limiter.acquire(quote(&alice), now).await else {
            panic!("the third quote at once is limited")
        };
        assert_eq!((reason, retry_after), (RateLimitReason::Rate, Duration::from_millis(800)));
        assert!(matches!(limiter.acquire(quote(&bob), now).await, RateDecision::Allow(_)));
        let later = Timestamp::from_unix_millis(1_795_957_200_800);
        assert!(matches!(limiter.acquire(quote(&alice), later).await, RateDecision::Allow(_)));
        let track = CallInfo::new(&alice, "shipping.track", "shipping", Effect::Read, true);
        for _ in 0..5 {
            assert!(matches!(limiter.acquire(track, now).await, RateDecision::Allow(_)));
        }
    }

    /// The policies the shop's tools table describes.
    #[tokio::test]
    async fn who_sees_and_calls_what() {
        let policies = authority(false);
        let anonymous = Consumer::anonymous("a");
        let support = Consumer::authenticated("s", Identity::new("sam").with_role("support"));
        let approver = Consumer::authenticated("p", Identity::new("pat").with_role("approver"));
        let call = |who, name: &'static str| {
            let type_id = name.split_once('.').map_or(name, |(t, _)| t);
            CallInfo::new(who, name, type_id, Effect::Write, false)
        };
        let deny = || AuthorityDecision::Deny { origin: agent_surface_core::details::Origin::Client };
        let cases = [
            (&anonymous, "refunds.issue", AuthorityDecision::Unauthenticated),
            (&approver, "refunds.issue", deny()),
            (&support, "refunds.issue", AuthorityDecision::Allow),
            (&support, "admin.purge_cache", AuthorityDecision::Hide),
            (&anonymous, "approvals.approve", AuthorityDecision::Hide),
            (&approver, "approvals.approve", AuthorityDecision::Allow),
            (&anonymous, "tickets.open", AuthorityDecision::Allow),
            (&anonymous, "orders.cancel", AuthorityDecision::Allow),
            // No rule names it: refused (default-deny).
            (&support, "conformance.greet", deny()),
            (&support, "warehouse.restock", deny()),
        ];
        for (who, name, expected) in cases {
            assert_eq!(policies.decide(call(who, name)).await.unwrap(), expected, "{name} by {}", who.key());
        }
        // Served with the conformance fixtures, they are open to everyone.
        let with_fixtures = authority(true);
        let greet = call(&anonymous, "conformance.greet");
        assert_eq!(with_fixtures.decide(greet).await.unwrap(), AuthorityDecision::Allow);
    }
}
