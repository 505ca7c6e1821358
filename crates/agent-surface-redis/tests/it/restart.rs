//! Redis going away and coming back: calls fail closed while it is gone, and with append-only
//! persistence a pending approval survives the restart and is then used once, and a stored result,
//! a task and a spent rate budget survive it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Retry, Timestamp};
use agent_surface_policy::{
    CallInfo, ConfirmationConfig, ConfirmationEngine, ConfirmationStore, Consumer, IdempotencyStore, Identity, Quota,
    RateDecision, RateLimiter, TaskStore,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey},
    task::TaskRecord,
};
use agent_surface_redis::{RedisConfig, RedisRateConfig, RedisStores};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use serde_json::{Value, json};

use crate::support::{CONNECT_WITHIN, Site};

/// A registry whose `orders.cancel` is confirmed through an engine on `stores`, with its
/// idempotency records on `stores` too.
fn shop(stores: &RedisStores) -> (Registry, Arc<ConfirmationEngine>, agent_surface_registry::Mount) {
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        store: Arc::new(stores.confirmations()),
        ..Default::default()
    }));
    let registry = Registry::new(RegistryConfig {
        confirmation: Some(engine.clone()),
        idempotency: Arc::new(stores.idempotency()),
        ..Default::default()
    });
    registry
        .define("orders", |t| {
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Cancel order {}.", i["orderId"]))
                .raw_handler(
                    json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}),
                    None,
                    |_ctx: Ctx, i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"cancelled": i["orderId"]})) },
                )
        })
        .expect("definition is valid");
    let mount = registry.mount("orders", "main").expect("mounts");
    (registry, engine, mount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_closed_while_redis_is_gone_and_a_pending_approval_survives_its_restart() {
    // This test runs a Redis of its own (it stops and restarts it).
    let Some(site) = Site::new("restart") else { return };
    let mut redis = site.start();
    // A generous time budget: a stopped Redis refuses connections at once, so the budget costs
    // nothing while it is gone, and an operation of a busy machine never outlasts it (one that did
    // might have taken effect unseen, and the checks below would find the approval used).
    let config = RedisConfig { op_timeout: Duration::from_secs(30), ..RedisConfig::with_prefix("restart:") };
    let stores = crate::support::connect_patiently(&site.url(), config).await;
    let (registry, engine, _mount) = shop(&stores);
    let alice = || InvokeOptions::new(Consumer::authenticated("principal:[\"alice\"]", Identity::new("alice")));
    let cancel = || InvokeRequest::new("orders.cancel", json!({"orderId": "A-1"}));

    let asked = registry.invoke(cancel(), alice()).await;
    assert_eq!(asked.code(), Some(ErrorCode::ConfirmationRequired));
    let id = asked.error_payload().unwrap().detail("confirmationId").and_then(Value::as_str).unwrap().to_string();

    // Redis goes away: nothing runs, the answer is transient — from the confirmation store, and
    // from the idempotency store for a call with an invocation id.
    redis.stop();
    let refused = registry.invoke(cancel().with_confirmation(&id), alice()).await;
    assert_eq!(refused.code(), Some(ErrorCode::ExecutionFailed), "{refused:?}");
    assert_eq!(refused.error_payload().unwrap().retry(), Retry::AfterDelay);
    let tracked = registry.invoke(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
    assert_eq!(tracked.code(), Some(ErrorCode::ExecutionFailed), "{tracked:?}");
    assert_eq!(tracked.error_payload().unwrap().retry(), Retry::AfterDelay);

    // Back, from its append-only file: the pending approval is still there.
    // `start` returns once the new server answers, its file read back; the stores' connection
    // comes back on the next operations (the first may still fail on the old connection).
    let back = site.start();
    let deadline = Instant::now() + CONNECT_WITHIN;
    let approved = loop {
        let approved = engine.approve(&id, &Identity::new("manager")).await;
        if !matches!(approved, Err(agent_surface_policy::ApprovalError::Store(_))) || Instant::now() > deadline {
            break approved;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    approved.expect("the pending approval survived the restart");
    let done = registry.invoke(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
    assert_eq!(done.output(), Some(&json!({"cancelled": "A-1"})), "{done:?}");
    let again = registry.invoke(cancel().with_confirmation(&id), alice()).await;
    assert_eq!(again.code(), Some(ErrorCode::ConfirmationInvalid));

    // Once more down and up: the stored result is replayed under its invocation id (the approval
    // was consumed, so a second execution would have been refused, not replayed).
    let mut back = back;
    back.stop();
    let back = site.start();
    let deadline = Instant::now() + CONNECT_WITHIN;
    let replayed = loop {
        let inv =
            registry.invoke_detailed(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
        if inv.result.code() != Some(ErrorCode::ExecutionFailed) || Instant::now() > deadline {
            break inv;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(replayed.replayed, "{replayed:?}");
    assert_eq!(replayed.result, done);

    // A task and a spent rate budget survive a restart too.
    let tasks = stores.tasks();
    let task = TaskRecord::working(
        "task-1".to_string(),
        None,
        Timestamp::now(),
        Duration::from_secs(600),
        Duration::from_secs(3600),
    );
    tasks.create(task.clone(), Timestamp::now()).await.expect("created");
    let quota = Quota::per_minute(NonZeroU32::new(2).expect("positive"));
    let limiter = stores.rate_limiter(RedisRateConfig { per_consumer: Some(quota), ..Default::default() });
    let bob = Consumer::anonymous("bob");
    let take = || {
        limiter.acquire(CallInfo::new(&bob, "orders.cancel", "orders", Effect::Destructive, false), Timestamp::now())
    };
    assert!(matches!(take().await, RateDecision::Allow(_)));
    assert!(matches!(take().await, RateDecision::Allow(_)));
    let mut back = back;
    back.stop();
    let back = site.start();
    let deadline = Instant::now() + CONNECT_WITHIN;
    let found = loop {
        match tasks.get("task-1", Timestamp::now()).await {
            Ok(got) => break got,
            Err(e) => assert!(Instant::now() < deadline, "Redis came back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(found.map(|t| t.id), Some("task-1".to_string()), "the task survived the restart");
    assert!(matches!(take().await, RateDecision::Limited { .. }), "the spent budget survived the restart");
    drop((back, redis));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_fails_every_operation_within_its_budget() {
    let Some(site) = Site::new("silent") else { return };
    let redis = site.start();
    let config = RedisConfig { op_timeout: Duration::from_millis(300), ..RedisConfig::with_prefix("silent:") };
    let stores = crate::support::connect_patiently(&site.url(), config).await;
    let (registry, _engine, _mount) = shop(&stores);
    let alice = || InvokeOptions::new(Consumer::authenticated("principal:[\"alice\"]", Identity::new("alice")));

    redis.freeze(true);
    // Redis stays frozen until both have answered: that they answer at all proves that each
    // operation gave up after its budget rather than waiting for Redis to wake. (The outer limit
    // only keeps a regression from hanging the suite; it is no measure of the budget.)
    let frozen = async {
        let got = stores.confirmations().get("c-1", agent_surface_core::Timestamp::from_unix_millis(0)).await;
        let refused = registry.invoke(InvokeRequest::new("orders.cancel", json!({"orderId": "A-1"})), alice()).await;
        (got, refused)
    };
    let (got, refused) = tokio::time::timeout(CONNECT_WITHIN, frozen).await.expect("each operation gives up");
    redis.freeze(false);
    assert!(matches!(got, Err(agent_surface_policy::StoreError::Unavailable(_))), "{got:?}");
    // The pipeline fails closed: nothing runs, the answer is transient.
    assert_eq!(refused.code(), Some(ErrorCode::ExecutionFailed), "{refused:?}");
    assert_eq!(refused.error_payload().unwrap().retry(), Retry::AfterDelay);
    drop(redis);
}

/// A follower whose polls fail (Redis frozen) keeps trying for a lease, then is told the outcome
/// is unknown — never a transient error, whose advice (a fresh id) could run the call twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_redis_learns_an_unknown_outcome() {
    let Some(site) = Site::new("follower") else { return };
    let redis = site.start();
    let config = RedisConfig {
        op_timeout: Duration::from_millis(200),
        lease: Duration::from_millis(600),
        ..RedisConfig::with_prefix("follower:")
    };
    let stores = crate::support::connect_patiently(&site.url(), config).await;
    let store = stores.idempotency();
    let fp = Fingerprint::of(&json!(1));
    // A leader and its follower. The budget is short (that is the point of the test), so on a busy
    // machine an admission may outlast it before Redis is frozen: then again, under a fresh key.
    let deadline = Instant::now() + CONNECT_WITHIN;
    let mut attempt = 0_u32;
    let waiting = 'admitted: loop {
        assert!(Instant::now() < deadline, "no leader and follower admitted within {CONNECT_WITHIN:?}");
        attempt += 1;
        let key = IdempotencyKey::new("c", format!("frozen-{attempt}"));
        match store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await {
            Ok(Admission::Leader(_)) => {}
            Err(_) => continue,
            Ok(other) => panic!("a fresh key leads: {other:?}"),
        }
        match store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await {
            Ok(Admission::Follower(waiting)) => break 'admitted waiting,
            Err(_) => continue,
            Ok(other) => panic!("the same request follows: {other:?}"),
        }
    };
    redis.freeze(true);
    let started = Instant::now();
    // Redis stays frozen until the follower is answered (the outer limit only keeps a regression
    // from hanging the suite).
    let answered = tokio::time::timeout(CONNECT_WITHIN, waiting).await.expect("the follower is answered");
    redis.freeze(false);
    let p = answered.error_payload().expect("an error");
    assert_eq!(p.code(), ErrorCode::ExecutionFailed);
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")), "{p:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "it kept trying for about a lease: {:?}",
        started.elapsed()
    );
    drop(redis);
}

/// A rate limiter that cannot reach Redis says what happened — a transient store failure, retry
/// after a delay, nothing ran — never `RATE_LIMITED` ("too many calls"), which would tell an agent
/// that it, not the store, is the problem. Stopped (connections refused) and frozen (no answer
/// within the budget) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limiter_cut_off_from_redis_answers_a_store_failure_not_too_many_calls() {
    let Some(site) = Site::new("limiter") else { return };
    let mut redis = site.start();
    let config = RedisConfig { op_timeout: Duration::from_millis(300), ..RedisConfig::with_prefix("limiter:") };
    let stores = crate::support::connect_patiently(&site.url(), config).await;
    let quota = Quota::per_minute(NonZeroU32::new(100).expect("positive"));
    let limiter = stores.rate_limiter(RedisRateConfig { per_consumer: Some(quota), ..Default::default() });
    let registry = Registry::new(RegistryConfig { rate_limiter: Some(Arc::new(limiter)), ..Default::default() });
    registry
        .define("orders", |t| {
            t.capability("list", "List the orders.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object"}),
                None,
                |_ctx: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!({"orders": []})) },
            )
        })
        .expect("definition is valid");
    let _mount = registry.mount("orders", "main").expect("mounts");
    let list = || registry.invoke(InvokeRequest::new("orders.list", json!({})), alice_options());
    assert!(list().await.is_ok(), "Redis answers: the call runs");

    let check = |result: &agent_surface_core::InvokeResult, state: &str| {
        assert_eq!(result.code(), Some(ErrorCode::ExecutionFailed), "{state}: {result:?}");
        let payload = result.error_payload().unwrap();
        assert_eq!(payload.retry(), Retry::AfterDelay, "{state}");
        assert_ne!(payload.detail("reason"), Some(&json!("rate")), "{state}: {payload:?}");
        assert!(!payload.message().to_lowercase().contains("too many"), "{state}: {}", payload.message());
    };
    redis.freeze(true);
    // Frozen until it answered: that it answers at all shows the limiter gave up within its budget.
    let frozen = tokio::time::timeout(CONNECT_WITHIN, list()).await.expect("the limiter gives up");
    redis.freeze(false);
    check(&frozen, "frozen");
    redis.stop();
    check(&list().await, "stopped");
    drop(redis);
}

fn alice_options() -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated("principal:[\"alice\"]", Identity::new("alice")))
}
