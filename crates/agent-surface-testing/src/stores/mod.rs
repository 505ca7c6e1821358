//! The store kit: one conformance suite per store trait, which every implementation — the memory
//! stores of `agent-surface-policy`, the Redis stores, a store of your own — must pass.
//!
//! Each check drives the store through the atomic semantics its trait documents (with `now`
//! passed in, as the engines do), including concurrent callers racing for a single-use step, and
//! panics with a message naming the broken rule. Records are created under ids that start with
//! `prefix`, so a suite can run against a shared backend next to other data: make the prefix
//! unique per run when the backend keeps data between runs.
//!
//! ```
//! use agent_surface_policy::{MemoryConfirmationStore, MemoryIdempotencyStore, MemoryTaskStore};
//! use agent_surface_testing::stores;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! stores::check_idempotency_store(&MemoryIdempotencyStore::default(), "doc-").await;
//! stores::check_confirmation_store(&MemoryConfirmationStore::default(), "doc-").await;
//! stores::check_task_store(&MemoryTaskStore::default(), "doc-").await;
//! stores::check_audit_sink(&agent_surface_policy::MemoryAuditSink::default(), "doc-").await;
//! stores::check_inbox_store(&agent_surface_policy::inbox::MemoryInboxStore::default(), "doc-").await;
//! # });
//! ```

mod confirmation;
mod idempotency;
mod inbox;
mod task;

pub use confirmation::{
    InStep, check_confirmation_quorum, check_confirmation_slots, check_confirmation_store,
    check_racing_repeats_open_one_confirmation, check_replicas_record_one_expiry, check_replicas_share_one_approval,
    check_replicas_share_relayed_confirmations, check_replicas_sweep_one_expiry, check_revocation,
};
pub use idempotency::{check_idempotency_cancel, check_idempotency_leases, check_idempotency_store};
pub use inbox::{check_inbox_replicas, check_inbox_store};
pub use task::{check_task_leases, check_task_store};

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use agent_surface_core::details::{Origin, RateLimitReason};
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::confirmation::ConfirmationBinding;
use agent_surface_policy::idempotency::Fingerprint;
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditOutcome, AuditSink, AuditVerdict, CallInfo, ConfirmationRecord, Consumer, Quota,
    RateDecision, RateLimiter, Scope,
};
use futures_util::future::join_all;
use serde_json::json;

/// The instant the suites start at (any fixed instant works: stores take `now` as given).
const T0: u64 = 1_795_957_200_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0 + ms)
}

fn binding(consumer: &str) -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: consumer.to_string(),
        capability: "orders.cancel".to_string(),
        registration_id: "r-1".to_string(),
        instance_id: "main".to_string(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    }
}

/// A pending record `id` of consumer `c-1` (requester subject `alice`), expiring at 60 s,
/// requested by the call with invocation id `inv-1` and correlation id `corr-1`.
fn pending(id: &str) -> ConfirmationRecord {
    ConfirmationRecord::pending(
        id.to_string(),
        binding("c-1"),
        Some("alice".to_string()),
        "Cancel order A-1.".to_string(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
    .with_call_ids(Some("inv-1"), Some("corr-1"))
}

#[track_caller]
fn expect<T: std::fmt::Debug, E: std::fmt::Debug>(rule: &str, got: Result<T, E>) -> T {
    match got {
        Ok(v) => v,
        Err(e) => panic!("store kit: {rule}: the store failed: {e:?}"),
    }
}

/// One call of `orders.cancel` by `c`.
async fn take(limiter: &dyn RateLimiter, c: &Consumer) -> RateDecision {
    limiter.acquire(CallInfo::new(c, "orders.cancel", "orders", Effect::Destructive, false), Timestamp::now()).await
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
    let acquire = |c| take(limiter, c);
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

/// An audit sink's contract: `record` keeps what it was given, and `recent` returns the latest
/// events, oldest first, in the order they were recorded, each unchanged (the suite records
/// events whose capability starts with `prefix` and looks only at those). A sink that cannot read
/// back (the trait's default `recent`) fails this suite: the store kit holds every backend the
/// inbox may read to the same rules.
pub async fn check_audit_sink(sink: &dyn AuditSink, prefix: &str) {
    let capability = format!("{prefix}orders.cancel");
    let mut written = Vec::new();
    for (i, kind) in [
        AuditKind::ConfirmationRequested { effect: Effect::Destructive, expires_at: at(60_000) },
        AuditKind::ConfirmationDecided {
            verdict: AuditVerdict::Approve,
            approver: "manager".to_string(),
            note: Some("ok, \"quoted\"\nsecond line".to_string()),
        },
        AuditKind::ConfirmationConsumed { approved_by: "manager".to_string() },
        AuditKind::ExecutionStarted { effect: Effect::Destructive },
        AuditKind::ExecutionFinished { outcome: AuditOutcome::Ok, code: None },
        AuditKind::ConfirmationExpired,
        AuditKind::ExecutionFinished {
            outcome: AuditOutcome::Error,
            code: Some(agent_surface_core::ErrorCode::ExecutionFailed),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut event = AuditEvent::new(at(i as u64), kind, capability.as_str(), "c-1");
        event.principal = Some("alice".to_string());
        event.input_digest = Some(Fingerprint::of(&json!({"orderId": "A-1"})).to_string());
        event.invocation_id = Some(format!("{prefix}inv-{i}"));
        event.correlation_id = Some(format!("{prefix}inv-{i}"));
        event.confirmation_id = Some(format!("{prefix}c-1"));
        sink.record(&event).await.unwrap_or_else(|e| panic!("record {}: {e}", event.name()));
        written.push(event);
    }
    let ours = |events: Vec<AuditEvent>| -> Vec<AuditEvent> {
        events.into_iter().filter(|e| e.capability == capability).collect()
    };
    let all = ours(sink.recent(10_000).await.expect("recent"));
    assert_eq!(all, written, "recent returns every event recorded, oldest first, unchanged");
    let last = sink.recent(3).await.expect("recent(3)");
    assert_eq!(last.len(), 3, "recent(3) returns three events");
    assert_eq!(ours(last), written[written.len() - 3..].to_vec(), "recent(n) returns the latest n, oldest first");
    assert!(sink.recent(0).await.expect("recent(0)").is_empty(), "recent(0) returns nothing");
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
    let call = |c: &Consumer, capability: &str| {
        let type_id = capability.split_once('.').map_or(capability, |(t, _)| t);
        let (c, capability, type_id) = (c.clone(), capability.to_string(), type_id.to_string());
        async move {
            let info = CallInfo::new(&c, &capability, &type_id, Effect::Write, false);
            matches!(limiter.acquire(info, Timestamp::now()).await, RateDecision::Allow(_))
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
