//! The Redis stores beyond the store kit (whose suites run in `kit.rs`): failing closed,
//! credentials, renewal, configuration, bounds and records of an earlier release.

use std::time::Duration;

use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::{
    IdempotencyStore,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey},
};
use agent_surface_redis::{RedisConfig, RedisStores};
use serde_json::json;

use crate::support;

/// No Redis where the URL points: connecting fails within the budget (a Redis that goes silent
/// after connecting: `restart.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_fails_closed() {
    if support::redis_url().is_none() {
        return;
    }
    // A port this test holds bound but does not listen on: connecting is refused at once, and no
    // other process can take the port meanwhile (as it could one picked free and let go).
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("redis://127.0.0.1:{}/", held.local_addr().unwrap().port());
    let config = RedisConfig { op_timeout: Duration::from_millis(300), ..RedisConfig::default() };
    assert!(RedisStores::connect(&url, config.clone()).await.is_err(), "no Redis there");
}

/// Credentials come with the URL: a Redis that requires a password serves the stores when the URL
/// carries it, and refuses a connection without it (whose error does not repeat the password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_with_the_url() {
    if support::redis_url().is_none() {
        return;
    }
    let Some(site) = support::Site::new("auth") else { return };
    let server = site.start_with(&["--requirepass", "s3cret-pass"]);
    // The TCP port, for `redis://` URLs with credentials in them.
    let port = site.port();
    let config = RedisConfig::with_prefix("auth:");
    let without = RedisStores::connect(&format!("redis://127.0.0.1:{port}/"), config.clone()).await;
    let refused = match without {
        Ok(stores) => stores
            .idempotency()
            .admit(&key("k"), fp(), Attempt::fresh(), Timestamp::now())
            .await
            .err()
            .map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    let refused = refused.expect("no password, no service");
    assert!(!refused.contains("s3cret-pass"), "{refused}");
    let with = RedisStores::connect(&format!("redis://:s3cret-pass@127.0.0.1:{port}/"), config.clone())
        .await
        .expect("the password in the URL signs in");
    let wrong = RedisStores::connect(&format!("redis://:wrong-pass@127.0.0.1:{port}/"), config).await;
    if let Err(e) = &wrong {
        assert!(!e.to_string().contains("wrong-pass"), "{e}");
    }
    let admitted = with.idempotency().admit(&key("k"), fp(), Attempt::fresh(), Timestamp::now()).await;
    assert!(matches!(admitted, Ok(Admission::Leader(_))), "{admitted:?}");
    drop(server);
}

fn key(id: &str) -> IdempotencyKey {
    IdempotencyKey::new("c", id)
}

fn fp() -> Fingerprint {
    Fingerprint::of(&json!({"request": 1}))
}

/// A call that runs far longer than `in_flight_retention` keeps its record while its lease is
/// renewed: every renewal starts the record's time to live again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_long_calls_record() {
    let config = RedisConfig {
        lease: Duration::from_millis(150),
        // Far longer than the lease, so that the takeover below has a wide window (after the
        // lease, before the record goes) on a busy machine.
        in_flight_retention: Duration::from_millis(1_000),
        ..RedisConfig::default()
    };
    let Some(redis) = support::stores_with("idem-long", config).await else { return };
    let store = redis.idempotency();
    let Ok(Admission::Leader(lease)) = store.admit(&key("long"), fp(), Attempt::fresh(), Timestamp::now()).await else {
        panic!("a new key leads")
    };
    store.start(&key("long"), lease, Timestamp::now()).await.expect("marked started");
    let until = std::time::Instant::now() + Duration::from_millis(2_500);
    while std::time::Instant::now() < until {
        tokio::time::sleep(lease.renew_every.expect("Redis leases ask for renewal")).await;
        store.renew(&key("long"), lease, Timestamp::now()).await.expect("renewed");
    }
    assert!(
        matches!(store.admit(&key("long"), fp(), Attempt::fresh(), Timestamp::now()).await, Ok(Admission::Follower(_))),
        "two and a half retention periods later, the renewed record is still in flight"
    );
    // Unrenewed, it lapses into a takeover (the record outlives its lease).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = store.admit(&key("long"), fp(), Attempt::fresh(), Timestamp::now()).await;
    assert!(matches!(got, Ok(Admission::TakeOver(_))), "{got:?}");
}

/// A configuration that cannot keep its promises is refused before connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_configurations_are_refused() {
    let url = "redis://127.0.0.1:1/";
    for (config, what) in [
        (RedisConfig { lease: Duration::ZERO, ..RedisConfig::default() }, "lease"),
        (RedisConfig { in_flight_retention: Duration::from_secs(15), ..RedisConfig::default() }, "in_flight_retention"),
        (RedisConfig { op_timeout: Duration::ZERO, ..RedisConfig::default() }, "op_timeout"),
    ] {
        let refused = RedisStores::connect(url, config).await.expect_err("refused");
        let text = refused.to_string();
        assert!(text.starts_with("invalid Redis store configuration") && text.contains(what), "{text}");
    }
}

/// A result over `max_result_bytes` is recorded as withheld: the retry learns the call ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_result_is_recorded_as_withheld() {
    let config = RedisConfig { max_result_bytes: 10_000, ..RedisConfig::default() };
    let Some(redis) = support::stores_with("idem-big", config).await else { return };
    let store = redis.idempotency();
    let Ok(Admission::Leader(lease)) = store.admit(&key("big"), fp(), Attempt::fresh(), Timestamp::now()).await else {
        panic!("a new key leads")
    };
    let now = Timestamp::now();
    let result = agent_surface_core::InvokeResult::ok(json!({"blob": "b".repeat(20_000)}), None);
    let settlement = agent_surface_policy::idempotency::Settlement::Store {
        result,
        expires_at: now.saturating_add(Duration::from_secs(60)),
    };
    store.settle(&key("big"), fp(), lease, settlement, now).await.expect("settled");
    let Ok(Admission::Replay(replayed)) = store.admit(&key("big"), fp(), Attempt::fresh(), Timestamp::now()).await
    else {
        panic!("a replay")
    };
    assert_eq!(replayed.error_payload().and_then(|p| p.detail("reason")), Some(&json!("output-too-large")));
}

/// The stream is trimmed to about `audit_max_len` entries, the oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_audit_stream_is_bounded() {
    use agent_surface_policy::{AuditEvent, AuditKind, AuditSink};
    let config = RedisConfig { audit_max_len: 10, ..RedisConfig::default() };
    let Some(redis) = support::stores_with("audit-trim", config).await else { return };
    let sink = redis.audit();
    for i in 0..500u64 {
        let mut e = AuditEvent::new(
            Timestamp::from_unix_millis(i),
            AuditKind::ExecutionStarted { effect: Effect::Write },
            "orders.cancel",
            "c-1",
        );
        e.invocation_id = Some(format!("inv-{i}"));
        sink.record(&e).await.unwrap();
    }
    let mut conn = redis.connection();
    let len: usize = agent_surface_redis::redis::cmd("XLEN").arg(sink.key()).query_async(&mut conn).await.unwrap();
    // `MAXLEN ~` trims whole macro nodes (100 entries by default): about the bound, never the whole history.
    assert!((10..=200).contains(&len), "{len} entries kept");
    let last = sink.recent(1).await.unwrap();
    assert_eq!(last[0].invocation_id.as_deref(), Some("inv-499"));
}

/// A record written before quorum slots existed — its quorum `{approvals, roles}`, its decisions
/// without the slots each approver could fill — still reads (every slot for those approvers) and
/// completes as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_record_from_before_slots_still_reads_and_completes() {
    use agent_surface_core::details::Origin;
    use agent_surface_policy::{
        ConfirmationRecord, ConfirmationStore, Quorum,
        confirmation::{ApprovalVerdict, ConfirmationBinding, ConfirmationState, Decided, SlotSet},
    };
    let Some(redis) = support::stores("conf-old").await else { return };
    let store = redis.confirmations();
    let at = |ms: u64| Timestamp::from_unix_millis(1_795_957_200_000 + ms);
    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    };
    let record = ConfirmationRecord::pending(
        "old".into(),
        binding,
        Some("alice".into()),
        "Cancel A-1.".into(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
    .with_quorum(Quorum::of(2).with_role("manager"));
    store.insert(record, at(0)).await.unwrap();
    // What the script of the previous release left: the same `rec` (its quorum as before), and a
    // decision without `m`.
    let key = format!("{}conf:old", redis.config().prefix);
    let rec: String = agent_surface_redis::redis::cmd("HGET")
        .arg(&key)
        .arg("rec")
        .query_async(&mut redis.connection())
        .await
        .unwrap();
    assert!(rec.contains(r#""quorum":{"approvals":2,"roles":["manager"]}"#), "{rec}");
    let old = format!(r#"[{{"a":"bob","v":"approve","t":"{}","k":"bob"}}]"#, at(1).unix_millis());
    let () = agent_surface_redis::redis::cmd("HSET")
        .arg(&key)
        .arg("d")
        .arg(old)
        .query_async(&mut redis.connection())
        .await
        .unwrap();
    let read = store.get("old", at(2)).await.unwrap().unwrap();
    assert_eq!(read.quorum, Quorum::of(2).with_role("manager"));
    assert_eq!(read.decisions.len(), 1);
    assert_eq!(read.decisions[0].slots, SlotSet::first(2), "an old decision could fill any slot");
    assert_eq!(store.decide("old", ApprovalVerdict::Approve, "carol", at(3)).await.unwrap(), Decided::Done);
    let read = store.get("old", at(4)).await.unwrap().unwrap();
    assert_eq!(read.state, ConfirmationState::Approved { by: "bob, carol".into() });
}

/// A Redis that may forget or evict what the stores wrote is named at connect: its append-only
/// file off, an evicting memory policy. One run as advised is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_forget_writes_is_named_at_connect() {
    if support::redis_url().is_none() {
        return;
    }
    let Some(site) = support::Site::new("durability") else { return };
    let config = RedisConfig::with_prefix("durability:");
    {
        let _server = site.start();
        let stores = RedisStores::connect(&site.url(), config.clone()).await.expect("connects");
        assert_eq!(stores.durability_warnings().await, Vec::<String>::new());
    }
    {
        let _server = site.start_with(&["--appendonly", "no", "--maxmemory-policy", "allkeys-lru"]);
        // Read over RESP3 too, whose reply to `CONFIG GET` is a map.
        for url in [site.url(), format!("{}?protocol=resp3", site.url())] {
            let stores = RedisStores::connect(&url, config.clone()).await.expect("connects");
            let warnings = stores.durability_warnings().await;
            assert_eq!(warnings.len(), 2, "{url}: {warnings:?}");
            assert!(warnings[0].contains("appendonly no") && warnings[0].contains("used twice"), "{warnings:?}");
            assert!(warnings[1].contains("allkeys-lru") && warnings[1].contains("noeviction"), "{warnings:?}");
        }
        // Said at connect to no subscriber (the guide connects before `Serve` installs the log):
        // kept for the log installed later. The only test of this binary that takes them.
        use tracing::instrument::WithSubscriber as _;
        let nobody = tracing::subscriber::NoSubscriber::default();
        let _ = agent_surface_policy::wiring::take_unrecorded();
        RedisStores::connect(&site.url(), config.clone()).with_subscriber(nobody).await.expect("connects");
        let kept = agent_surface_policy::wiring::take_unrecorded();
        let named = |what: &str| kept.iter().filter(|w| w.contains(what)).count();
        assert_eq!((named("appendonly no"), named("allkeys-lru")), (1, 1), "{kept:?}");
    }
    let _server = site.start_with(&["--appendfsync", "no"]);
    let stores = RedisStores::connect(&site.url(), config).await.expect("connects");
    let warnings = stores.durability_warnings().await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("appendfsync no"), "{warnings:?}");
}
