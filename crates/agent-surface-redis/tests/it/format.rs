//! The stored shapes on Redis, pinned both ways: every key the stores write as this build writes
//! it (idempotency records, confirmations and their indexes and relay keys, tasks, rate buckets,
//! the audit stream, the approval inbox's keys) and as an earlier build wrote it, read back; a
//! task's hash with `lu` (the running process's lease) and without (a build before leases); and a
//! confirmation whose expiry a build before lapsing claims marked (`xr`), which reads as recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::{ConfirmationStore, TaskStore, task::TaskRecord};
use agent_surface_redis::redis::AsyncCommands;

use crate::support;

const T0: u64 = 1_795_957_200_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0 + ms)
}

/// A task's hash, field by field, as this build writes a running task with a lease.
fn task_fields(lease: &str) -> BTreeMap<String, String> {
    [
        ("id", "t-1"),
        ("own", "=alice"),
        ("st", "working"),
        ("msg", ""),
        ("ca", "1795957200000"),
        ("ua", "1795957200000"),
        ("ea", "1795957260000"),
        ("ru", "1795960800000"),
        ("p", ""),
        ("cr", "0"),
        ("lu", lease),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_hashes_with_and_without_a_lease() {
    let Some(redis) = support::stores("format-task").await else { return };
    let mut conn = redis.connection();
    let key = format!("{}task:t-1", redis.config().prefix);
    let tasks = redis.tasks();
    let working =
        TaskRecord::working("t-1", Some("alice".into()), at(0), Duration::from_secs(60), Duration::from_secs(3600))
            .with_lease(Duration::from_secs(30));
    tasks.create(working.clone(), at(0)).await.unwrap();
    let written: BTreeMap<String, String> = conn.hgetall(&key).await.unwrap();
    assert_eq!(written, task_fields("1795957230000"), "this build writes the pinned fields");
    assert_eq!(tasks.get("t-1", at(1)).await.unwrap(), Some(working));

    // As a build before leases wrote it: no `lu`. Read with no lease, never ended as abandoned.
    let mut old = task_fields("");
    old.remove("lu");
    let _: () = conn.del(&key).await.unwrap();
    let fields: Vec<(String, String)> = old.into_iter().collect();
    let _: () = conn.hset_multiple(&key, &fields).await.unwrap();
    let read = tasks.get("t-1", at(1)).await.unwrap().expect("read");
    assert_eq!(read.lease_until, None);
    let kept = tasks.end_lapsed("t-1", None, None, at(1_000_000)).await.unwrap().expect("read");
    assert_eq!(kept.status, agent_surface_policy::task::TaskStatus::Working, "no lease: not abandoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_claimed_before_claims_lapsed_reads_as_recorded() {
    let Some(redis) = support::stores("format-claim").await else { return };
    let conf = redis.confirmations();
    let record = pending("c-1");
    conf.insert(record, at(0)).await.unwrap();
    // What a build before lapsing claims wrote for a claim: `xr` set, for good.
    let mut conn = redis.connection();
    let _: () = conn.hset(format!("{}conf:c-1", redis.config().prefix), "xr", "1").await.unwrap();
    assert!(conf.list_expired(at(1_000_000), 10).await.unwrap().is_empty(), "recorded: not listed");
    assert!(!conf.claim_expiry("c-1", at(2_000_000), at(1_000_000)).await.unwrap(), "recorded: not claimed");
}

/// Every key the stores write, as text: `{key} {type}` and its content (hash fields in order,
/// sorted-set members with scores, a stream's entries without their ids), the prefix left out and
/// the values Redis' clock decides (fencing tokens, leases) as `<clock>`, a random attempt id as
/// `<attempt>`, and bytes that are not printable ASCII in hex.
async fn dump(redis: &agent_surface_redis::RedisStores) -> String {
    let mut conn = redis.connection();
    let prefix = redis.config().prefix.clone();
    let mut keys: Vec<String> = conn.keys(format!("{prefix}*")).await.unwrap();
    keys.sort();
    let mut out = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.unwrap();
        let name = key.strip_prefix(&prefix).unwrap_or(&key).to_string();
        out.push_str(&format!("{name} {kind}\n"));
        match kind.as_str() {
            "hash" => {
                let fields: BTreeMap<String, Vec<u8>> = conn.hgetall(&key).await.unwrap();
                for (field, value) in fields {
                    let text = match value.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
                        true => String::from_utf8_lossy(&value).into_owned(),
                        false => format!("0x{}", agent_surface_core::hex::Hex(&value)),
                    };
                    let shown = match field.as_str() {
                        "t" | "le" => "<clock>".to_string(),
                        "a" => "<attempt>".to_string(),
                        _ => text,
                    };
                    out.push_str(&format!("  {field} = {shown}\n"));
                }
            }
            "string" => {
                let value: String = conn.get(&key).await.unwrap();
                let shown =
                    if name.starts_with("idem-fence") || name.starts_with("rate:") { "<clock>".into() } else { value };
                out.push_str(&format!("  {shown}\n"));
            }
            "zset" => {
                let members: Vec<(String, f64)> = conn.zrange_withscores(&key, 0, -1).await.unwrap();
                for (member, score) in members {
                    out.push_str(&format!("  {member} {score}\n"));
                }
            }
            "stream" => {
                // XRANGE: [[id, [field, value, …]], …]; the ids (Redis' clock) left out.
                let entries: Vec<(String, Vec<String>)> =
                    redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query_async(&mut conn).await.unwrap();
                for (_, fields) in entries {
                    for pair in fields.chunks(2) {
                        out.push_str(&format!("  {} = {}\n", pair[0], pair.get(1).map_or("", String::as_str)));
                    }
                }
            }
            other => panic!("a key of type {other}"),
        }
    }
    out
}

/// Every record shape the Redis stores write, pinned: an idempotency record with a stored result
/// (and the fencing counter), a confirmation decided once of a quorum of two (its hash, the
/// pending and expiry indexes, a relay key), a task, a rate bucket, an audit entry, and the
/// approval inbox's session (hash, subject and global sets), used nonce and key. A change of any
/// shape fails here, and must come with a format that still reads these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_shape_this_build_writes() {
    use agent_surface_core::{Effect, InvokeResult};
    use agent_surface_policy::confirmation::{ApprovalVerdict, ConfirmationBinding, RelayKey, SlotSet};
    use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
    use agent_surface_policy::inbox::{InboxSession, InboxStore, SessionLimits};
    use agent_surface_policy::{
        AuditEvent, AuditKind, AuditSink, CallInfo, ConfirmationRecord, Consumer, IdempotencyStore, Quorum, Quota,
        RateLimiter,
    };
    let Some(redis) = support::stores("format-all").await else { return };
    let fp = Fingerprint::of(&serde_json::json!({"request": 1}));
    let idem = redis.idempotency();
    let key = IdempotencyKey::new("c-1", "inv-1");
    let Ok(Admission::Leader(lease)) = idem.admit(&key, fp, Attempt::fresh(), at(0)).await else { panic!() };
    let result = InvokeResult::ok(serde_json::json!({"refund": 7}), None);
    idem.settle(&key, fp, lease, Settlement::Store { result, expires_at: at(600_000) }, at(0)).await.unwrap();

    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: fp,
    };
    let record = ConfirmationRecord::pending(
        "c-1".into(),
        binding.clone(),
        Some("alice".into()),
        "Cancel order A-1.".into(),
        Effect::Destructive,
        agent_surface_core::details::Origin::Client,
        at(0),
        at(60_000),
    )
    .with_quorum(Quorum::of(2));
    let conf = redis.confirmations();
    conf.insert_relayed(record, &RelayKey::of(&binding), at(0)).await.unwrap();
    conf.decide_in_slots("c-1", ApprovalVerdict::Approve, "bob", SlotSet::first(2), at(1_000)).await.unwrap();

    let working = TaskRecord::working("t-1", None, at(0), Duration::from_secs(60), Duration::from_secs(3600));
    redis.tasks().create(working, at(0)).await.unwrap();
    let quota = Quota::per_minute(std::num::NonZeroU32::new(5).unwrap());
    let limiter =
        redis.rate_limiter(agent_surface_redis::RedisRateConfig { per_consumer: Some(quota), ..Default::default() });
    let alice = Consumer::anonymous("alice");
    let _ = limiter.acquire(CallInfo::new(&alice, "orders.cancel", "orders", Effect::Write, false), at(0)).await;
    let event =
        AuditEvent::new(at(4_000), AuditKind::ExecutionStarted { effect: Effect::Write }, "orders.cancel", "c-1");
    redis.audit().record(&event).await.unwrap();

    let inbox = redis.inbox();
    let session = InboxSession::new("manager", at(1_000), vec![1, 2, 3]);
    inbox.open_session([7; 32], session, SessionLimits::default(), at(0)).await.unwrap();
    inbox.use_nonce("forms", "n-1", at(2_000), at(0)).await.unwrap();
    inbox.mac_key("forms", [9; 32]).await.unwrap();

    assert_eq!(dump(&redis).await, SHAPES, "the record shapes this build writes");
}

const SHAPES: &str = r#"audit stream
  e = {"at":"2026-11-29T13:00:04.000Z","event":"execution.started","effect":"write","capability":"orders.cancel","consumer":"c-1"}
conf-expiry zset
  c-1 1795957260000
conf-pending zset
  c-1 1795957260000
conf-relay:d919d998cb0f1e17c57903099910af34656ebba5c83e1a67a1ef5142261f0f48 string
  c-1
conf:c-1 hash
  by = 
  c = c-1
  cap = orders.cancel
  cs = c-l
  d = [{"a":"bob","k":"bob","m":3,"t":"1795957201000","v":"approve"}]
  ea = 1795957260000
  ga = 1795960860000
  h = eaf3ea962361eaf8ed5b7dfc1c826295cfcad2c897d8e1f7ad8bffa1e6b806de
  i = main
  n = 2
  r = r-1
  rec = {"id":"c-1","consumer_key":"c-1","capability":"orders.cancel","registration_id":"r-1","instance_id":"main","input_hash":"eaf3ea962361eaf8ed5b7dfc1c826295cfcad2c897d8e1f7ad8bffa1e6b806de","requester":"alice","summary":"Cancel order A-1.","effect":"destructive","origin":"client","created_at":1795957200000,"expires_at":1795957260000,"quorum":{"approvals":2}}
  req = alice
  rq = allce
  s = pending
idem-fence: string
  <clock>
idem:3:c-1:inv-1 hash
  a = <attempt>
  fp = eaf3ea962361eaf8ed5b7dfc1c826295cfcad2c897d8e1f7ad8bffa1e6b806de
  k = lead
  r = {"status":"ok","output":{"refund":7}}
  s = done
  t = <clock>
  v = 2
inbox-all zset
  0707070707070707070707070707070707070707070707070707070707070707 1795957201000
inbox-key:forms hash
  key = 0x0909090909090909090909090909090909090909090909090909090909090909
  v = 1
inbox-n:forms:n-1 string
  1:1795957202000
inbox-s:0707070707070707070707070707070707070707070707070707070707070707 hash
  exp = 1795957201000
  sealed = 0x010203
  sub = manager
  v = 1
inbox-subj:manager zset
  0707070707070707070707070707070707070707070707070707070707070707 1795957201000
rate:consumer:alice string
  <clock>
task:t-1 hash
  ca = 1795957200000
  cr = 0
  ea = 1795957260000
  id = t-1
  lu = 
  msg = 
  own = 
  p = 
  ru = 1795960800000
  st = working
  ua = 1795957200000
"#;

/// The pinned shapes, as an earlier build wrote them, read back: a stored result replays, the
/// confirmation reads with its decision, a relayed call finds it, and the inbox's session, used
/// nonce and key are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_shapes_read_back() {
    use agent_surface_policy::IdempotencyStore;
    use agent_surface_policy::confirmation::{ConfirmationBinding, ConfirmationState, RelayKey};
    use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey};
    use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse};
    let Some(redis) = support::stores("format-read").await else { return };
    let mut conn = redis.connection();
    let p = redis.config().prefix.clone();
    let fp = "eaf3ea962361eaf8ed5b7dfc1c826295cfcad2c897d8e1f7ad8bffa1e6b806de";
    let hash = |fields: &[(&str, &str)]| fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    let idem = hash(&[
        ("a", "c905416b951d94a10000000000000000"),
        ("fp", fp),
        ("k", "lead"),
        ("r", r#"{"status":"ok","output":{"refund":7}}"#),
        ("s", "done"),
        ("t", "1795957200000001"),
        ("v", "2"),
    ]);
    let _: () = conn.hset_multiple(format!("{p}idem:3:c-1:inv-1"), &idem).await.unwrap();
    let _: () = conn.pexpire(format!("{p}idem:3:c-1:inv-1"), 600_000).await.unwrap();
    let rec = concat!(
        r#"{"id":"c-1","consumer_key":"c-1","capability":"orders.cancel","registration_id":"r-1","instance_id":"main","#,
        r#""input_hash":"eaf3ea962361eaf8ed5b7dfc1c826295cfcad2c897d8e1f7ad8bffa1e6b806de","requester":"alice","#,
        r#""summary":"Cancel order A-1.","effect":"destructive","origin":"client","created_at":1795957200000,"#,
        r#""expires_at":1795957260000,"quorum":{"approvals":2}}"#
    );
    let conf = hash(&[
        ("by", ""),
        ("c", "c-1"),
        ("cap", "orders.cancel"),
        ("cs", "c-l"),
        ("d", r#"[{"a":"bob","k":"bob","m":3,"t":"1795957201000","v":"approve"}]"#),
        ("ea", "1795957260000"),
        ("ga", "1795960860000"),
        ("h", fp),
        ("i", "main"),
        ("n", "2"),
        ("r", "r-1"),
        ("rec", rec),
        ("req", "alice"),
        ("rq", "allce"),
        ("s", "pending"),
    ]);
    let _: () = conn.hset_multiple(format!("{p}conf:c-1"), &conf).await.unwrap();
    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::from_bytes(agent_surface_core::hex::decode::<32>(fp).unwrap()),
    };
    let relay = RelayKey::of(&binding);
    let _: () = conn.set(format!("{p}conf-relay:{relay}"), "c-1").await.unwrap();
    let session = format!("{p}inbox-s:{}", "08".repeat(32));
    let fields: Vec<(&str, Vec<u8>)> = vec![
        ("v", b"1".to_vec()),
        ("sub", b"maria".to_vec()),
        ("exp", b"1795957205000".to_vec()),
        ("sealed", vec![10, 11]),
    ];
    let _: () = conn.hset_multiple(&session, &fields).await.unwrap();
    let _: () = conn.set(format!("{p}inbox-n:sign-in:n-2"), "1:1795957205000").await.unwrap();
    let key: Vec<(&str, Vec<u8>)> = vec![("v", b"1".to_vec()), ("key", vec![5; 32])];
    let _: () = conn.hset_multiple(format!("{p}inbox-key:sign-in"), &key).await.unwrap();

    let fp = Fingerprint::from_bytes(agent_surface_core::hex::decode::<32>(fp).unwrap());
    let replay = redis.idempotency().admit(&IdempotencyKey::new("c-1", "inv-1"), fp, Attempt::fresh(), at(1)).await;
    assert!(
        matches!(&replay, Ok(Admission::Replay(r))
            if *r == agent_surface_core::InvokeResult::ok(serde_json::json!({"refund": 7}), None)),
        "{replay:?}"
    );
    let store = redis.confirmations();
    let record = store.get("c-1", at(2_000)).await.unwrap().expect("the confirmation reads");
    assert_eq!(record.state, ConfirmationState::Pending);
    assert_eq!(record.decisions.len(), 1, "{record:?}");
    assert_eq!(record.quorum.approvals, 2);
    assert_eq!(store.relayed(&relay, at(2_000)).await.unwrap(), Some("c-1".to_string()));
    let inbox = redis.inbox();
    assert_eq!(inbox.session([8; 32], at(1)).await.unwrap(), Some(InboxSession::new("maria", at(5_000), vec![10, 11])));
    assert_eq!(inbox.use_nonce("sign-in", "n-2", at(5_000), at(1)).await.unwrap(), NonceUse::Used);
    assert_eq!(inbox.mac_key("sign-in", [1; 32]).await.unwrap(), [5; 32]);
}

/// A listing asked for more records than a script's numbers hold exactly (`usize::MAX`, as a
/// host may ask for "all") lists what there is, as the memory store does, rather than failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_any_length_is_answered() {
    let Some(redis) = support::stores("format-listing").await else { return };
    let conf = redis.confirmations();
    let record = pending("c-1");
    conf.insert(record, at(0)).await.unwrap();
    assert_eq!(conf.list_pending(at(1), usize::MAX).await.unwrap().len(), 1);
    assert_eq!(conf.list_expired(at(120_000), usize::MAX).await.unwrap().len(), 1);
}

/// A pending confirmation `id` of alice's, expiring at `at(60_000)`.
fn pending(id: &str) -> agent_surface_policy::ConfirmationRecord {
    agent_surface_policy::ConfirmationRecord::pending(
        id.into(),
        agent_surface_policy::confirmation::ConfirmationBinding {
            consumer_key: "c-1".into(),
            capability: "orders.cancel".into(),
            registration_id: "r-1".into(),
            instance_id: "main".into(),
            input_hash: agent_surface_policy::idempotency::Fingerprint::of(&serde_json::json!({"orderId": "A-1"})),
        },
        Some("alice".into()),
        "Cancel order A-1.".into(),
        agent_surface_core::Effect::Destructive,
        agent_surface_core::details::Origin::Client,
        at(0),
        at(60_000),
    )
}
