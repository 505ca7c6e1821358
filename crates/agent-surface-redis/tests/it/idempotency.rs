//! Exactly once across replicas: two registries on one Redis idempotency store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
use agent_surface_policy::Consumer;
use agent_surface_redis::RedisStores;
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support;

/// A replica: a registry whose `tickets.open` (a write) takes `delay` and counts its runs in
/// `runs`, shared by every replica of the test.
fn replica(
    stores: &RedisStores,
    runs: &Arc<AtomicUsize>,
    delay: Duration,
) -> (Registry, agent_surface_registry::Mount) {
    let registry = Registry::new(RegistryConfig { idempotency: Arc::new(stores.idempotency()), ..Default::default() });
    let runs = runs.clone();
    registry
        .define("tickets", move |t| {
            t.capability("open", "Open a ticket.").effect(Effect::Write).handler(move |_c: Ctx, _i: Value| {
                let runs = runs.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    Ok::<_, AgentSurfaceError>(json!({"ticketId": format!("t-{n}")}))
                }
            })
        })
        .expect("definition is valid");
    let mount = registry.mount("tickets", "main").expect("mounts");
    (registry, mount)
}

/// 1,000 concurrent calls with one invocation id, split across two replicas: the handler runs
/// once and every caller gets the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_duplicates_across_two_replicas_run_once() {
    let Some(redis) = support::stores("idem-replicas").await else { return };
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ma) = replica(&redis, &runs, Duration::from_millis(100));
    let (b, _mb) = replica(&redis, &runs, Duration::from_millis(100));
    let calls = (0..1_000).map(|i| {
        let registry = if i % 2 == 0 { &a } else { &b };
        async move {
            let request =
                InvokeRequest::new("tickets.open", json!({"subject": "printer"})).with_invocation_id("open-1");
            registry.invoke_detailed(request, InvokeOptions::new(Consumer::anonymous("c-1"))).await
        }
    });
    let invocations = join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    let first = &invocations[0].result;
    assert_eq!(first.output(), Some(&json!({"ticketId": "t-0"})), "{first:?}");
    assert!(invocations.iter().all(|inv| &inv.result == first), "every caller gets the same result");
    let answered = invocations.iter().filter(|inv| inv.joined || inv.replayed).count();
    assert_eq!(answered, 999, "all but the leader joined or replayed");
    // Another invocation id is another call.
    let other = a
        .invoke(
            InvokeRequest::new("tickets.open", json!({"subject": "printer"})).with_invocation_id("open-2"),
            InvokeOptions::new(Consumer::anonymous("c-1")),
        )
        .await;
    assert_eq!(other.output(), Some(&json!({"ticketId": "t-1"})));
}

/// The same invocation id with another input, on the other replica, is a conflict there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_conflicts_on_the_other_replica() {
    let Some(redis) = support::stores("idem-conflict").await else { return };
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ma) = replica(&redis, &runs, Duration::ZERO);
    let (b, _mb) = replica(&redis, &runs, Duration::ZERO);
    let call = |subject: &str| InvokeRequest::new("tickets.open", json!({"subject": subject})).with_invocation_id("x");
    let alice = || InvokeOptions::new(Consumer::anonymous("c-1"));
    assert!(a.invoke(call("printer"), alice()).await.is_ok());
    let conflict = b.invoke(call("screen"), alice()).await;
    assert_eq!(conflict.code(), Some(ErrorCode::InvocationConflict));
    let replay = b.invoke_detailed(call("printer"), alice()).await;
    assert!(replay.replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A replica whose `tickets.open` (a write) counts its runs per invocation id, over `stores`, with
/// the store budget `budget`.
fn counting_replica(
    stores: &RedisStores,
    runs: &Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    budget: Duration,
) -> (Registry, agent_surface_registry::Mount) {
    let registry = Registry::new(RegistryConfig {
        idempotency: Arc::new(stores.idempotency()),
        store_budget: budget,
        ..Default::default()
    });
    let runs = runs.clone();
    registry
        .define("tickets", move |t| {
            t.capability("open", "Open a ticket.").effect(Effect::Write).handler(move |ctx: Ctx, _i: Value| {
                let runs = runs.clone();
                async move {
                    let id = ctx.invocation_id().unwrap_or_default().to_string();
                    *runs.lock().unwrap().entry(id).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok::<_, AgentSurfaceError>(json!({"opened": true}))
                }
            })
        })
        .expect("definition is valid");
    let mount = registry.mount("tickets", "main").expect("mounts");
    (registry, mount)
}

/// Whether `result` is `EXECUTION_FAILED {reason: reason}`.
fn failed_with(result: &agent_surface_core::InvokeResult, reason: &str) -> bool {
    result.error_payload().is_some_and(|p| {
        p.code() == ErrorCode::ExecutionFailed && p.detail("reason").and_then(Value::as_str) == Some(reason)
    })
}

/// Issue 28: calls with invocation ids, on two replicas, while Redis freezes (SIGSTOP) and
/// resumes. An admission that timed out is answered "nothing ran" (`transport`, retry after a
/// delay), but its script still runs when Redis resumes; the registry cancels the attempt, so the
/// retries (same ids, as the answer advises) are admitted afresh: no call whose handler never ran
/// is told `outcome-unknown`, and no handler runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_while_redis_stalls_are_retried_as_fresh_admissions() {
    let Some(site) = support::Site::new("idem-stall") else { return };
    let redis = site.start();
    let config = agent_surface_redis::RedisConfig {
        op_timeout: Duration::from_millis(300),
        // Short, so that a claim the fix failed to cancel would lapse and be answered as an
        // unknown outcome within the test; longer than the cancellation's longest wait.
        lease: Duration::from_secs(3),
        ..agent_surface_redis::RedisConfig::with_prefix("idem-stall:")
    };
    let stores = support::connect_patiently(&site.url(), config).await;
    let runs = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let (a, _ma) = counting_replica(&stores, &runs, Duration::from_millis(200));
    let (b, _mb) = counting_replica(&stores, &runs, Duration::from_millis(200));
    let request = |i: usize| InvokeRequest::new("tickets.open", json!({"n": i})).with_invocation_id(format!("t-{i}"));
    let alice = || InvokeOptions::new(Consumer::anonymous("c-1"));
    const CALLS: usize = 300;

    // Calls keep arriving (one every 2 ms, on alternate replicas) while Redis freezes for 1.5 s.
    let calls = {
        let (a, b) = (a.clone(), b.clone());
        tokio::spawn(async move {
            let mut handles = Vec::new();
            for i in 0..CALLS {
                let registry = if i % 2 == 0 { a.clone() } else { b.clone() };
                handles.push(tokio::spawn(async move { (i, registry.invoke(request(i), alice()).await) }));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            join_all(handles).await.into_iter().map(|h| h.expect("the call ends")).collect::<Vec<_>>()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.freeze(true);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    redis.freeze(false);
    let mut answers = calls.await.expect("the calls end");
    let refused = answers.iter().filter(|(_, r)| failed_with(r, "store-unavailable")).count();
    assert!(refused > 0, "some admissions timed out while Redis was frozen");

    // The agents retry what was refused, with the same ids, after the advised delay.
    for _ in 0..10 {
        let retry: Vec<usize> =
            answers.iter().filter(|(_, r)| failed_with(r, "store-unavailable")).map(|(i, _)| *i).collect();
        if retry.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let again = join_all(retry.iter().map(|&i| {
            let registry = if i % 3 == 0 { &a } else { &b };
            async move { (i, registry.invoke(request(i), alice()).await) }
        }))
        .await;
        for (i, result) in again {
            answers[i].1 = result;
        }
    }
    redis.freeze(false);
    drop(redis);

    let runs = runs.lock().unwrap().clone();
    let ran = |i: usize| runs.get(&format!("t-{i}")).copied().unwrap_or(0);
    let twice: Vec<usize> = (0..CALLS).filter(|&i| ran(i) > 1).collect();
    assert!(twice.is_empty(), "no handler runs twice: {twice:?}");
    let unknown_never_ran: Vec<usize> =
        answers.iter().filter(|(i, r)| failed_with(r, "outcome-unknown") && ran(*i) == 0).map(|(i, _)| *i).collect();
    assert!(
        unknown_never_ran.is_empty(),
        "{} calls never ran yet were told outcome-unknown: {unknown_never_ran:?}",
        unknown_never_ran.len()
    );
    let still_refused = answers.iter().filter(|(_, r)| failed_with(r, "store-unavailable")).count();
    let ok = answers.iter().filter(|(_, r)| r.is_ok()).count();
    let unknown = answers.iter().filter(|(_, r)| failed_with(r, "outcome-unknown")).count();
    assert_eq!(
        still_refused, 0,
        "every refused call was admitted afresh on a retry ({CALLS} calls: {refused} refused while frozen; finally \
         {ok} ok, {unknown} outcome-unknown, each of which ran)"
    );
    for (i, result) in &answers {
        if result.is_ok() {
            assert_eq!(ran(*i), 1, "an ok call ran once");
        }
    }
}

/// A settlement whose answer was lost may have landed: the same settlement repeated under the
/// same lease is answered as settled and changes nothing, while another result under that lease,
/// or the same result under an older lease, is still refused.
#[tokio::test]
async fn a_repeated_settlement_under_its_own_lease_is_answered_as_settled() {
    use agent_surface_core::{InvokeResult, Timestamp};
    use agent_surface_policy::{
        IdempotencyStore,
        idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    };
    let Some(redis) = support::stores("idem-resettle").await else { return };
    let store = redis.idempotency();
    let key = IdempotencyKey::new("c-1", "open-1");
    let fp = Fingerprint::of(&json!({"subject": "printer"}));
    let Ok(Admission::Leader(lease)) = store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await else {
        panic!("a new key leads");
    };
    let now = Timestamp::now();
    let settlement = |n: u64| Settlement::Store {
        result: InvokeResult::ok(json!({"ticketId": n}), None),
        expires_at: now.saturating_add(Duration::from_secs(600)),
    };
    assert_eq!(store.settle(&key, fp, lease, settlement(1), now).await, Ok(()));
    assert_eq!(store.settle(&key, fp, lease, settlement(1), now).await, Ok(()), "the same settlement again");
    assert_eq!(
        store.settle(&key, fp, lease, settlement(2), now).await,
        Err(agent_surface_policy::StoreError::LeaseLost),
        "another result under the same lease"
    );
    let older = agent_surface_policy::idempotency::Lease { token: lease.token - 1, ..lease };
    assert_eq!(
        store.settle(&key, fp, older, settlement(1), now).await,
        Err(agent_surface_policy::StoreError::LeaseLost),
        "the same result under another lease"
    );
    match store.admit(&key, fp, Attempt::fresh(), Timestamp::now()).await {
        Ok(Admission::Replay(result)) => assert_eq!(result.output(), Some(&json!({"ticketId": 1}))),
        other => panic!("the first settlement stands: {other:?}"),
    }
}

/// Every script that ends a record in flight announces it on `{prefix}idem-settled` (its key as
/// the message), so that followers on other replicas are told rather than left to poll: a
/// settlement, and a cancellation that voids a claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_and_voided_claims_are_announced() {
    use agent_surface_policy::{
        IdempotencyStore,
        idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    };
    use futures_util::StreamExt;

    let Some(url) = support::redis_url() else { return };
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:announced:", std::process::id());
    let config = agent_surface_redis::RedisConfig { prefix: prefix.clone(), ..Default::default() };
    let stores = RedisStores::connect(&url, config).await.expect("Redis answers");
    let client = agent_surface_redis::redis::Client::open(url.as_str()).expect("a URL");
    let mut pubsub = client.get_async_pubsub().await.expect("subscribes");
    pubsub.subscribe(format!("{prefix}idem-settled")).await.expect("subscribed");
    let mut messages = pubsub.into_on_message();
    let store = stores.idempotency();
    let now = agent_surface_core::Timestamp::now;
    let fp = Fingerprint::of(&json!({"request": 1}));
    async fn next(messages: &mut agent_surface_redis::redis::aio::PubSubStream) -> String {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("an announcement within 10 s")
            .expect("the subscription stays open");
        message.get_payload::<String>().expect("a key")
    }

    let settled = IdempotencyKey::new("c", "settled-1");
    let Ok(Admission::Leader(lease)) = store.admit(&settled, fp, Attempt::fresh(), now()).await else {
        panic!("a new key leads")
    };
    let result = agent_surface_core::InvokeResult::ok(json!({"n": 1}), None);
    store.settle(&settled, fp, lease, Settlement::Release { result }, now()).await.expect("settled");
    let key = next(&mut messages).await;
    assert!(key.starts_with(&prefix) && key.ends_with(":settled-1"), "{key}");

    let voided = IdempotencyKey::new("c", "voided-1");
    let attempt = Attempt::fresh();
    let Ok(Admission::Leader(_)) = store.admit(&voided, fp, attempt, now()).await else { panic!("a new key leads") };
    store.cancel(&voided, attempt, now()).await.expect("cancelled");
    let key = next(&mut messages).await;
    assert!(key.starts_with(&prefix) && key.ends_with(":voided-1"), "{key}");
}

/// A follower on another replica, joined to a leader that runs for a while (long enough for its
/// polls to have spread out), gets the leader's result once it settles, woken by the
/// announcement; both replicas' callers get the one result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_on_another_replica_is_told_the_result() {
    let Some(url) = support::redis_url() else { return };
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let config = agent_surface_redis::RedisConfig {
        prefix: format!("it:{}:{nonce}:told:", std::process::id()),
        ..Default::default()
    };
    // Two connections and two subscriptions: two replicas.
    let a_stores = RedisStores::connect(&url, config.clone()).await.expect("Redis answers");
    let b_stores = RedisStores::connect(&url, config).await.expect("Redis answers");
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ma) = replica(&a_stores, &runs, Duration::from_millis(1_500));
    let (b, _mb) = replica(&b_stores, &runs, Duration::from_millis(1_500));
    async fn call(registry: &Registry) -> agent_surface_registry::Invocation {
        let request = InvokeRequest::new("tickets.open", json!({"subject": "told"})).with_invocation_id("told-1");
        registry.invoke_detailed(request, InvokeOptions::new(Consumer::anonymous("c-1"))).await
    }
    let leader = call(&a);
    let follower = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call(&b).await
    };
    let (led, followed) = tokio::join!(leader, follower);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(led.result.output(), Some(&json!({"ticketId": "t-0"})), "{led:?}");
    assert!(followed.joined, "{followed:?}");
    assert_eq!(followed.result.output(), led.result.output());
}

/// A released record claimed again keeps nothing of the earlier claim: the admission clears a
/// `gone` record (its result, its started mark) before it claims it afresh, so the new claim is
/// not taken for one whose handler started. (A new key needs no clearing, and is claimed without
/// it: the admission script skips the `DEL` when no record exists.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_record_claimed_again_keeps_nothing_of_the_earlier_claim() {
    use agent_surface_policy::{
        IdempotencyStore,
        idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    };
    use agent_surface_redis::redis::AsyncCommands;

    let Some(stores) = support::stores("reclaimed").await else { return };
    let store = stores.idempotency();
    let now = agent_surface_core::Timestamp::now;
    let fp = Fingerprint::of(&json!({"request": 1}));
    let key = IdempotencyKey::new("c", "released-1");
    let Ok(Admission::Leader(lease)) = store.admit(&key, fp, Attempt::fresh(), now()).await else {
        panic!("a new key leads")
    };
    store.start(&key, lease, now()).await.expect("marked started");
    let result = agent_surface_core::InvokeResult::ok(json!({"n": 1}), None);
    store.settle(&key, fp, lease, Settlement::Release { result }, now()).await.expect("released");
    let Ok(Admission::Leader(again)) = store.admit(&key, fp, Attempt::fresh(), now()).await else {
        panic!("a released record is claimed afresh")
    };
    assert!(again.token > lease.token, "a new lease, under a new token");
    let record = format!("{}idem:1:c:released-1", stores.config().prefix);
    let mut fields: Vec<String> = stores.connection().hkeys(&record).await.expect("HKEYS answers");
    fields.sort();
    assert_eq!(fields, ["a", "fp", "k", "le", "s", "t", "v"], "the fields of a fresh claim, and only those");
}

/// A Redis that forgot the scripts (restarted, or `SCRIPT FLUSH`) answers `NOSCRIPT`: the store
/// loads the script and sends the call once more, so every operation still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_load_their_scripts_again_after_a_flush() {
    use agent_surface_policy::{
        IdempotencyStore,
        idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    };

    let Some(stores) = support::stores("flushed").await else { return };
    let store = stores.idempotency();
    let now = agent_surface_core::Timestamp::now;
    let fp = Fingerprint::of(&json!({"request": 1}));
    let flush = || async {
        let _: () = agent_surface_redis::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut stores.connection())
            .await
            .expect("SCRIPT FLUSH answers");
    };
    let key = IdempotencyKey::new("c", "flushed-1");
    flush().await;
    let Ok(Admission::Leader(lease)) = store.admit(&key, fp, Attempt::fresh(), now()).await else {
        panic!("a new key leads")
    };
    flush().await;
    store.start(&key, lease, now()).await.expect("marked started");
    flush().await;
    store.renew(&key, lease, now()).await.expect("renewed");
    flush().await;
    let result = agent_surface_core::InvokeResult::ok(json!({"n": 1}), None);
    let expires_at = now().saturating_add(Duration::from_secs(60));
    store.settle(&key, fp, lease, Settlement::Store { result, expires_at }, now()).await.expect("settled");
    flush().await;
    let Ok(Admission::Replay(replayed)) = store.admit(&key, fp, Attempt::fresh(), now()).await else {
        panic!("the stored result is replayed")
    };
    assert_eq!(replayed.output(), Some(&json!({"n": 1})));
    let other = IdempotencyKey::new("c", "flushed-2");
    let attempt = Attempt::fresh();
    flush().await;
    store.cancel(&other, attempt, now()).await.expect("cancelled");
    assert!(
        matches!(
            store.admit(&other, fp, attempt, now()).await,
            Err(agent_surface_policy::StoreError::AttemptCancelled)
        ),
        "the cancelled attempt's admission claims nothing"
    );
}

/// A released result (and a voided claim) stays readable longer than a follower on another
/// replica may go without reading it — as long as a lease, and two operation budgets, cut off
/// from Redis — so that it reads what happened instead of finding nothing and answering an
/// unknown outcome for a call that never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_result_outlasts_a_followers_patience() {
    use agent_surface_policy::IdempotencyStore;
    use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
    use redis::AsyncCommands;

    let config = agent_surface_redis::RedisConfig {
        lease: Duration::from_secs(30),
        in_flight_retention: Duration::from_secs(60),
        ..agent_surface_redis::RedisConfig::default()
    };
    let Some(redis) = support::stores_with("idem-readable", config).await else { return };
    let store = redis.idempotency();
    let now = agent_surface_core::Timestamp::now();
    let key = IdempotencyKey::new("c-1", "k-1");
    let fp = Fingerprint::of(&json!({"request": 1}));
    let Ok(Admission::Leader(lease)) = store.admit(&key, fp, Attempt::fresh(), now).await else { panic!("leads") };
    let limited = agent_surface_core::InvokeResult::error(
        AgentSurfaceError::rate_limited(agent_surface_core::details::RateLimitReason::Rate, Duration::from_secs(1))
            .into_payload(),
        None,
    );
    store.settle(&key, fp, lease, Settlement::Release { result: limited }, now).await.unwrap();
    let mut conn = redis.connection();
    let prefix = redis.config().prefix.clone();
    let keys: Vec<String> = conn.keys(format!("{prefix}idem:*")).await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query_async(&mut conn).await.unwrap();
    // 30 s of lease and 2 × 2 s of budget: well past the 10 s it was kept before.
    assert!(ttl > 34_000, "a released result is readable for {ttl} ms");
}
