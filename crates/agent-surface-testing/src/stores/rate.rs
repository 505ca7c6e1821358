//! The store kit's checks of a [`RateLimiter`]: a consumer's burst and then an honest wait,
//! budgets per consumer, per capability and per type taken all-or-nothing, and concurrent callers
//! who together never take more than the budget — asked through `acquire` and, every other call,
//! first through `acquire_at_once`, as the registry asks.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{CallInfo, Consumer, Quota, RateDecision, RateLimiter, Scope};
use futures_util::future::join_all;

/// One call of `orders.cancel` by `c`.
async fn take(limiter: &dyn RateLimiter, c: &Consumer, turn: &AtomicBool) -> RateDecision {
    asked(limiter, CallInfo::new(c, "orders.cancel", "orders", Effect::Destructive, false), turn).await
}

/// `limiter`'s decision on `call` as the registry asks for it: at once
/// ([`RateLimiter::acquire_at_once`]) when it can decide so, else through
/// [`RateLimiter::acquire`]. The kit's calls alternate between this and `acquire` alone, so that
/// both ways are held to the same budget: `turn` (one per suite) flips on every call, and this
/// asks at once first when it was set.
async fn asked(limiter: &dyn RateLimiter, call: CallInfo<'_>, turn: &AtomicBool) -> RateDecision {
    let now = Timestamp::now();
    if turn.fetch_xor(true, Ordering::Relaxed)
        && let Some(decision) = limiter.acquire_at_once(&call, now)
    {
        return decision;
    }
    limiter.acquire(call, now).await
}

/// Runs the [`RateLimiter`] suite against `limiter`, which must be configured with the
/// per-consumer budget `quota` and no other budget that binds `orders.cancel` (a budget of at
/// least two calls, refilling no faster than one a second, so that the suite's bursts are not
/// refilled while they run): a consumer gets its burst and then `RATE_LIMITED {reason: rate}` with
/// an honest wait, another consumer has a budget of its own, and concurrent callers together never
/// take more than the budget. Consumers are named `prefix` + a letter.
///
/// # Panics
///
/// On the first rule the limiter breaks.
pub async fn check_rate_limiter(limiter: &dyn RateLimiter, quota: Quota, prefix: &str) {
    let limit = quota.limit().get();
    let consumer = |name: &str| Consumer::anonymous(format!("{prefix}{name}"));
    let turn = AtomicBool::new(false);
    let acquire = |c| take(limiter, c, &turn);
    let a = consumer("a");
    for i in 0..limit {
        let decision = acquire(&a).await;
        assert!(matches!(decision, RateDecision::Allow(_)), "store kit: call {i} of a burst of {limit} must pass");
    }
    match acquire(&a).await {
        RateDecision::Limited { reason, retry_after } => {
            assert_eq!(reason, RateLimitReason::Rate, "store kit: a spent budget is a `rate` limit");
            assert!(
                retry_after > Duration::ZERO && retry_after <= quota.period(),
                "store kit: the wait must be honest (within one period), got {retry_after:?}"
            );
        }
        RateDecision::Allow(_) => panic!("store kit: a call past the burst of {limit} must be limited"),
        other => panic!("store kit: a call past the burst of {limit} must be limited, got {other:?}"),
    }
    let b = consumer("b");
    assert!(matches!(acquire(&b).await, RateDecision::Allow(_)), "store kit: another consumer has its own budget");

    let c = consumer("c");
    let decisions = join_all((0..4 * limit).map(|_| acquire(&c))).await;
    let passed = decisions.iter().filter(|d| matches!(d, RateDecision::Allow(_))).count();
    assert_eq!(
        passed,
        usize::try_from(limit).unwrap_or(usize::MAX),
        "store kit: {} concurrent callers take exactly the budget of {limit}",
        4 * limit
    );
}

/// The per-consumer quotas [`check_consumer_quotas`] needs, for a limiter's `consumer_quotas`
/// (`RateBudgets::consumer_quotas`): `quota` for each consumer's calls of `orders.cancel`, `quota`
/// for each consumer's calls of the type `carts`, and one call per `quota.period()` of
/// `carts.clear`.
pub fn consumer_quotas(quota: Quota) -> HashMap<Scope, Quota> {
    HashMap::from([
        (Scope::capability("orders.cancel"), quota),
        (Scope::capability_type("carts"), quota),
        (Scope::capability("carts.clear"), Quota::new(NonZeroU32::MIN, quota.period())),
    ])
}

/// Runs the per-consumer quota suite against `limiter`, which must be configured with
/// [`consumer_quotas`]`(quota)` and no other budget that binds `orders.*` or `carts.*` (`quota`
/// of at least two calls, refilling no faster than one a second): a consumer gets its burst of
/// `orders.cancel` and is then limited, while its calls of another capability and another
/// consumer's calls of the same one are not; the calls of a type share one budget per consumer;
/// a call refused by one of its buckets takes nothing from the others (all-or-nothing); and
/// concurrent callers together never take more than the budget. Consumers are named `prefix` + a
/// letter.
///
/// # Panics
///
/// On the first rule the limiter breaks.
pub async fn check_consumer_quotas(limiter: &dyn RateLimiter, quota: Quota, prefix: &str) {
    let limit = quota.limit().get();
    let consumer = |name: &str| Consumer::anonymous(format!("{prefix}{name}"));
    let turn = AtomicBool::new(false);
    let turn = &turn;
    let call = |c: &Consumer, capability: &str| {
        let type_id = capability.split_once('.').map_or(capability, |(t, _)| t);
        let (c, capability, type_id) = (c.clone(), capability.to_string(), type_id.to_string());
        async move {
            let info = CallInfo::new(&c, &capability, &type_id, Effect::Write, false);
            matches!(asked(limiter, info, turn).await, RateDecision::Allow(_))
        }
    };
    let a = consumer("a");
    for i in 0..limit {
        assert!(call(&a, "orders.cancel").await, "store kit: call {i} of a consumer's burst of {limit} must pass");
    }
    assert!(!call(&a, "orders.cancel").await, "store kit: a consumer past its quota of one capability is limited");
    assert!(call(&a, "orders.list").await, "store kit: a quota of one capability does not limit another");
    let b = consumer("b");
    assert!(call(&b, "orders.cancel").await, "store kit: one consumer's quota does not limit another consumer");

    // The capabilities of `carts` share one budget per consumer; a `carts.clear` refused by its own
    // bucket takes nothing from the type's.
    let d = consumer("d");
    assert!(call(&d, "carts.clear").await, "store kit: the first `carts.clear` passes");
    assert!(!call(&d, "carts.clear").await, "store kit: the second `carts.clear` is past its own quota of one");
    for i in 1..limit {
        let capability = if i % 2 == 0 { "carts.add" } else { "carts.remove" };
        assert!(
            call(&d, capability).await,
            "store kit: call {i} of the type `carts` must pass (a refused call takes from no bucket)"
        );
    }
    assert!(!call(&d, "carts.add").await, "store kit: a consumer past its quota of a type is limited");

    let c = consumer("c");
    let decisions = join_all((0..4 * limit).map(|_| call(&c, "orders.cancel"))).await;
    let passed = decisions.iter().filter(|passed| **passed).count();
    assert_eq!(
        passed,
        usize::try_from(limit).unwrap_or(usize::MAX),
        "store kit: {} concurrent calls of one consumer take exactly its quota of {limit}",
        4 * limit
    );
}
