//! `MemoryRateLimiter`: GCRA conformance, honest and tight `retryAfterMs`, both buckets, bounded
//! memory, and the action queue.

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{
    CallInfo, Clock, Consumer, ManualClock, MemoryRateLimiter, QueueConfig, Quota, RateDecision, RateLimitConfig,
    RateLimiter, Scope,
};
use futures_util::FutureExt;
use proptest::prelude::*;

fn quota(limit: u32, period_ms: u64) -> Quota {
    Quota::new(NonZeroU32::new(limit).unwrap(), Duration::from_millis(period_ms))
}

/// Acquires synchronously (the limiter without a queue answers at once).
fn acquire(
    limiter: &MemoryRateLimiter,
    consumer: &str,
    capability: &str,
    now: Timestamp,
) -> Result<(), (RateLimitReason, Duration)> {
    acquire_by(limiter, consumer, capability, now, false)
}

/// [`acquire`] through `RateLimiter::acquire` or, when `at_once`, `RateLimiter::acquire_at_once`,
/// which a limiter without a queue always answers.
fn acquire_by(
    limiter: &MemoryRateLimiter,
    consumer: &str,
    capability: &str,
    now: Timestamp,
    at_once: bool,
) -> Result<(), (RateLimitReason, Duration)> {
    let consumer = Consumer::anonymous(consumer);
    let type_id = capability.split_once('.').map_or("t", |(t, _)| t);
    let call = CallInfo::new(&consumer, capability, type_id, Effect::Write, false);
    let decision = if at_once {
        limiter.acquire_at_once(&call, now).expect("decides at once without a queue")
    } else {
        limiter.acquire(call, now).now_or_never().expect("answers at once")
    };
    match decision {
        RateDecision::Allow(_) => Ok(()),
        RateDecision::Limited { reason, retry_after } => Err((reason, retry_after)),
        other => panic!("the memory limiter has no store to fail: {other:?}"),
    }
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_000_000 + ms)
}

#[test]
fn quota_arithmetic() {
    let q = quota(3, 1000);
    assert_eq!(q.emission_interval(), Duration::from_nanos(333_333_333));
    assert_eq!(q.limit().get(), 3);
    assert_eq!(Quota::new(NonZeroU32::MIN, Duration::ZERO).period(), Duration::from_millis(1));
    assert_eq!(Quota::per_minute(NonZeroU32::new(60).unwrap()).emission_interval(), Duration::from_secs(1));
}

#[test]
fn a_refusal_names_the_longer_wait_of_both_buckets() {
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        per_consumer: Some(quota(1, 1000)),
        per_capability: Some(quota(1, 400)),
        ..Default::default()
    });
    assert_eq!(acquire(&limiter, "a", "x.y", at(0)), Ok(()));
    assert_eq!(acquire(&limiter, "a", "x.y", at(100)), Err((RateLimitReason::Rate, Duration::from_millis(900))));
    assert_eq!(acquire(&limiter, "b", "x.y", at(100)), Err((RateLimitReason::Rate, Duration::from_millis(300))));
    // Overrides: exempt one capability, tighten another.
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        per_capability: Some(quota(1, 1000)),
        capability_quotas: HashMap::from([("x.free".to_string(), None), ("x.tight".to_string(), Some(quota(1, 5000)))]),
        ..Default::default()
    });
    for _ in 0..10 {
        assert_eq!(acquire(&limiter, "a", "x.free", at(0)), Ok(()));
    }
    assert_eq!(acquire(&limiter, "a", "x.tight", at(0)), Ok(()));
    assert_eq!(acquire(&limiter, "a", "x.tight", at(0)), Err((RateLimitReason::Rate, Duration::from_secs(5))));
}

#[test]
fn a_per_user_quota_limits_one_user_and_not_another() {
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        consumer_quotas: HashMap::from([
            // Five creates per minute per user, and eight calls of the type per minute per user.
            (Scope::capability("t.create"), quota(5, 60_000)),
            (Scope::capability_type("t"), quota(8, 60_000)),
        ]),
        ..Default::default()
    });
    for _ in 0..5 {
        assert_eq!(acquire(&limiter, "alice", "t.create", at(0)), Ok(()));
    }
    let spent = Err((RateLimitReason::Rate, Duration::from_secs(12)));
    assert_eq!(acquire(&limiter, "alice", "t.create", at(0)), spent, "alice's sixth create waits 60 s / 5");
    // Bob's budget is his own: alice's calls do not limit him.
    for _ in 0..5 {
        assert_eq!(acquire(&limiter, "bob", "t.create", at(0)), Ok(()));
    }
    // The create quota names one capability: alice may still list, within the type's budget of 8,
    // of which her five creates took five and the refused sixth took nothing (all-or-nothing).
    for _ in 0..3 {
        assert_eq!(acquire(&limiter, "alice", "t.list", at(0)), Ok(()));
    }
    assert_eq!(acquire(&limiter, "alice", "t.list", at(0)), Err((RateLimitReason::Rate, Duration::from_millis(7_500))));
    // Another type is not counted.
    assert_eq!(acquire(&limiter, "alice", "u.create", at(0)), Ok(()));
    // On the injected clock: after 12 s alice may create again (both of her buckets conform).
    assert_eq!(
        acquire(&limiter, "alice", "t.create", at(11_999)),
        Err((RateLimitReason::Rate, Duration::from_millis(1)))
    );
    assert_eq!(acquire(&limiter, "alice", "t.create", at(12_000)), Ok(()));
}

#[test]
fn buckets_stay_bounded() {
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        per_consumer: Some(quota(2, 1000)),
        max_buckets: 8,
        ..Default::default()
    });
    for i in 0..1000 {
        assert_eq!(acquire(&limiter, &format!("c{i}"), "x.y", at(i)), Ok(()));
        assert!(limiter.bucket_count() <= 8, "{} buckets", limiter.bucket_count());
    }
    // Buckets back to full budget are dropped first, and are equivalent to no bucket.
    assert_eq!(acquire(&limiter, "c999", "x.y", at(999)), Ok(()));
    assert!(acquire(&limiter, "c999", "x.y", at(999)).is_err());
}

#[derive(Clone, Debug)]
enum Step {
    Wait(u64),
    /// A call, through `acquire_at_once` when `true`: both ways take from the same buckets.
    Call(bool),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![3 => any::<bool>().prop_map(Step::Call), 1 => (0..400u64).prop_map(Step::Wait)],
        1..80,
    )
}

proptest! {
    /// Every accepted sequence conforms to the GCRA bound — at most `1 + (t + τ) / T` calls in any
    /// window of length `t` — and every refusal's `retryAfterMs` is honest (a retry after it
    /// passes) and tight (a retry 1 ms sooner does not).
    #[test]
    fn gcra_conformance_and_honest_retry_after(limit in 1..6u32, period_ms in 1..2000u64, steps in steps()) {
        let q = quota(limit, period_ms);
        let t_ns = u64::try_from(q.emission_interval().as_nanos()).unwrap();
        let tau_ns = t_ns * u64::from(limit - 1);
        let limiter = MemoryRateLimiter::new(RateLimitConfig { per_consumer: Some(q), ..Default::default() });
        let mut now = 0u64;
        let mut accepted: Vec<u64> = Vec::new();
        for step in steps {
            match step {
                Step::Wait(ms) => now += ms,
                Step::Call(at_once) => match acquire_by(&limiter, "c", "x.y", at(now), at_once) {
                    Ok(()) => accepted.push(now),
                    Err((reason, retry)) => {
                        prop_assert_eq!(reason, RateLimitReason::Rate);
                        let retry_ms = u64::try_from(retry.as_millis()).unwrap();
                        prop_assert!(retry_ms >= 1);
                        if retry_ms > 1 {
                            let sooner = acquire(&limiter, "c", "x.y", at(now + retry_ms - 1));
                            prop_assert!(sooner.is_err(), "a retry 1 ms early passed");
                        }
                        now += retry_ms;
                        prop_assert_eq!(acquire(&limiter, "c", "x.y", at(now)), Ok(()), "the advertised retry failed");
                        accepted.push(now);
                    }
                },
            }
        }
        for (i, first) in accepted.iter().enumerate() {
            for (j, last) in accepted.iter().enumerate().skip(i) {
                let window_ns = (last - first) * 1_000_000;
                let bound = 1 + (window_ns + tau_ns) / t_ns;
                prop_assert!((j - i + 1) as u64 <= bound, "{} calls in {} ms (bound {})", j - i + 1, last - first, bound);
            }
        }
    }
}

#[tokio::test]
async fn the_queue_bounds_concurrency_and_waiting() {
    let clock = Arc::new(ManualClock::default());
    let limiter = Arc::new(MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.clone(),
        queue: Some(QueueConfig {
            max_concurrent: NonZeroUsize::new(2).unwrap(),
            max_waiting: 1,
            max_wait: Duration::from_secs(5),
            initial_hold_estimate: Duration::from_millis(300),
        }),
        ..Default::default()
    }));
    let consumer = Consumer::anonymous("c");
    let info = CallInfo::new(&consumer, "x.y", "x", Effect::Write, false);
    let RateDecision::Allow(Some(first)) = limiter.acquire(info, clock.now()).await else { panic!() };
    // A free slot is taken at once too.
    let Some(RateDecision::Allow(Some(second))) = limiter.acquire_at_once(&info, clock.now()) else { panic!() };
    assert_eq!(limiter.in_flight(), 2);
    // Every slot taken: no decision at once, and nothing taken for asking.
    assert!(limiter.acquire_at_once(&info, clock.now()).is_none());
    assert_eq!((limiter.in_flight(), limiter.waiting()), (2, 0));
    let waiting = {
        let limiter = limiter.clone();
        let clock = clock.clone();
        tokio::spawn(async move {
            let consumer = Consumer::anonymous("c");
            let info = CallInfo::new(&consumer, "x.y", "x", Effect::Write, false);
            matches!(limiter.acquire(info, clock.now()).await, RateDecision::Allow(Some(_)))
        })
    };
    while limiter.waiting() == 0 {
        tokio::task::yield_now().await;
    }
    // Full: two slots busy, one waiting; 300 ms × 2 calls ahead / 2 slots.
    let RateDecision::Limited { reason, retry_after } = limiter.acquire(info, clock.now()).await else { panic!() };
    assert_eq!((reason, retry_after), (RateLimitReason::QueueFull, Duration::from_millis(300)));
    clock.advance(Duration::from_millis(100));
    drop(first);
    assert!(waiting.await.unwrap(), "the waiting call got the freed slot");
    assert_eq!(limiter.waiting(), 0);
    drop(second);
    assert!(format!("{limiter:?}").contains("in_flight"));
}

/// `acquire_at_once` asked while every slot is taken answers nothing and takes nothing: no unit
/// of budget (the budget of two is there for the two calls that got a slot), no place in the
/// waiting room.
#[test]
fn no_decision_at_once_takes_nothing() {
    let clock = Arc::new(ManualClock::default());
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.clone(),
        per_consumer: Some(quota(2, 3_600_000)),
        queue: Some(QueueConfig {
            max_concurrent: NonZeroUsize::new(1).unwrap(),
            max_waiting: 4,
            max_wait: Duration::from_secs(5),
            initial_hold_estimate: Duration::from_millis(300),
        }),
        ..Default::default()
    });
    let consumer = Consumer::anonymous("c");
    let info = CallInfo::new(&consumer, "x.y", "x", Effect::Write, false);
    let Some(RateDecision::Allow(Some(first))) = limiter.acquire_at_once(&info, clock.now()) else { panic!() };
    for _ in 0..5 {
        assert!(limiter.acquire_at_once(&info, clock.now()).is_none());
    }
    assert_eq!((limiter.in_flight(), limiter.waiting()), (1, 0));
    drop(first);
    let Some(RateDecision::Allow(Some(second))) = limiter.acquire_at_once(&info, clock.now()) else { panic!() };
    drop(second);
    let Some(RateDecision::Limited { reason, .. }) = limiter.acquire_at_once(&info, clock.now()) else { panic!() };
    assert_eq!(reason, RateLimitReason::Rate);
    assert_eq!(limiter.in_flight(), 0, "a refused call gives its slot back");
}
