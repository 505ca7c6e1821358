//! The Redis rate limiter: one budget for every replica, taken all-or-nothing.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{CallInfo, Consumer, Quota, RateDecision, RateLimiter, Scope};
use agent_surface_redis::RedisRateConfig;

use crate::support;

fn per_minute(n: u32) -> Option<Quota> {
    Some(Quota::per_minute(NonZeroU32::new(n).expect("positive")))
}

fn allowed(decision: &RateDecision) -> bool {
    matches!(decision, RateDecision::Allow(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_budget_and_a_refused_call_costs_nothing() {
    let Some(redis) = support::stores("rate").await else { return };
    let config = RedisRateConfig {
        per_consumer: per_minute(4),
        per_capability: per_minute(3),
        capability_quotas: HashMap::from([("orders.list".to_string(), None)]),
        ..Default::default()
    };
    let (a, b) = (redis.rate_limiter(config.clone()), redis.rate_limiter(config));
    let alice = Consumer::anonymous("alice");
    let cancel = CallInfo::new(&alice, "orders.cancel", "orders", Effect::Write, false);
    let now = Timestamp::now();
    // Three across both replicas, then the capability's budget is spent.
    assert!(allowed(&a.acquire(cancel, now).await));
    assert!(allowed(&b.acquire(cancel, now).await));
    assert!(allowed(&a.acquire(cancel, now).await));
    match b.acquire(cancel, now).await {
        RateDecision::Limited { reason, retry_after } => {
            assert_eq!(reason, RateLimitReason::Rate);
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(20), "{retry_after:?}");
        }
        RateDecision::Allow(_) => panic!("the shared capability budget is spent"),
        other => panic!("redis answered: {other:?}"),
    }
    // That refusal took nothing from alice's own budget (4): one more of another capability
    // (exempt from the capability budget) passes, the next does not.
    let list = CallInfo::new(&alice, "orders.list", "orders", Effect::Read, true);
    assert!(allowed(&b.acquire(list, now).await));
    assert!(!allowed(&a.acquire(list, now).await), "alice's budget of four is spent");
    // Another consumer has a budget of its own.
    let bob = Consumer::anonymous("bob");
    assert!(allowed(&a.acquire(CallInfo::new(&bob, "orders.list", "orders", Effect::Read, true), now).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_user_quota_limits_one_user_and_not_another_across_replicas() {
    let Some(redis) = support::stores("rate-per-user").await else { return };
    let config = RedisRateConfig {
        consumer_quotas: HashMap::from([(
            Scope::capability("tickets.create"),
            Quota::per_minute(NonZeroU32::MIN.saturating_add(1)),
        )]),
        ..Default::default()
    };
    let (a, b) = (redis.rate_limiter(config.clone()), redis.rate_limiter(config));
    let (alice, bob) = (Consumer::anonymous("alice"), Consumer::anonymous("bob"));
    let create = |c| CallInfo::new(c, "tickets.create", "tickets", Effect::Write, false);
    let now = Timestamp::now();
    assert!(allowed(&a.acquire(create(&alice), now).await));
    assert!(allowed(&b.acquire(create(&alice), now).await));
    match a.acquire(create(&alice), now).await {
        RateDecision::Limited { reason, retry_after } => {
            assert_eq!(reason, RateLimitReason::Rate);
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(30), "{retry_after:?}");
        }
        RateDecision::Allow(_) => panic!("alice's two creates a minute are spent, on both replicas together"),
        other => panic!("redis answered: {other:?}"),
    }
    assert!(allowed(&b.acquire(create(&bob), now).await), "bob is not limited by alice's calls");
    let list = CallInfo::new(&alice, "tickets.list", "tickets", Effect::Read, true);
    assert!(allowed(&a.acquire(list, now).await), "the quota names `tickets.create` only");
}
