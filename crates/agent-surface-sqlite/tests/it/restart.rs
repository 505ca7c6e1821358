//! The file across a restart: what was answered is there, a call in flight lapses into a
//! takeover, one process holds the file, and files this build cannot read are refused.

use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, InvokeResult, Timestamp};
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditSink, CallInfo, ConfirmationRecord, ConfirmationStore, Consumer, IdempotencyStore,
    Quota, RateBudgets, RateDecision, RateLimiter, StoreError, SystemClock, TaskStore,
    confirmation::{ApprovalVerdict, ConfirmationBinding, ConfirmationState, Decided, Rejection},
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    task::{TaskRecord, TaskStatus},
};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use serde_json::json;

use crate::support::Folder;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_795_957_200_000 + ms)
}

fn key(id: &str) -> IdempotencyKey {
    IdempotencyKey::new("c-1", id)
}

fn fp(n: u64) -> Fingerprint {
    Fingerprint::of(&json!({"request": n}))
}

fn binding() -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    }
}

fn confirmation(id: &str) -> ConfirmationRecord {
    ConfirmationRecord::pending(
        id.into(),
        binding(),
        Some("alice".into()),
        "Cancel order A-1.".into(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
}

pub(crate) async fn open(folder: &Folder) -> SqliteStores {
    SqliteStores::open(folder.file(), SqliteConfig::default()).await.expect("the store file opens")
}

async fn leader(
    store: &dyn IdempotencyStore,
    key: &IdempotencyKey,
    n: u64,
    now: Timestamp,
) -> agent_surface_policy::idempotency::Lease {
    match store.admit(key, fp(n), Attempt::fresh(), now).await {
        Ok(Admission::Leader(lease)) => lease,
        other => panic!("expected a leader, got {other:?}"),
    }
}

/// Everything the stores answered before the file was closed is there once it is opened again:
/// a stored result replays, an approval is still approved (and used once), consumed evidence
/// stays consumed, a finished task keeps its result, the audit trail its events, a spent rate
/// budget stays spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_answered_is_there_after_a_reopen() {
    let folder = Folder::new("reopen");
    let quota = Quota::per_minute(std::num::NonZeroU32::new(2).unwrap());
    let budgets = || RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() };
    let alice = Consumer::anonymous("alice");
    let call = || CallInfo::new(&alice, "orders.cancel", "orders", Effect::Destructive, false);
    {
        let stores = open(&folder).await;
        let idem = stores.idempotency();
        let lease = leader(&idem, &key("paid"), 1, at(0)).await;
        let stored =
            Settlement::Store { result: InvokeResult::ok(json!({"refund": 7}), None), expires_at: at(600_000) };
        idem.settle(&key("paid"), fp(1), lease, stored, at(1)).await.unwrap();

        let conf = stores.confirmations();
        for id in ["approved", "consumed", "pending"] {
            conf.insert(confirmation(id), at(0)).await.unwrap();
        }
        for id in ["approved", "consumed"] {
            assert_eq!(conf.decide(id, ApprovalVerdict::Approve, "bob", at(1)).await.unwrap(), Decided::Done);
        }
        assert!(conf.consume("consumed", &binding(), at(2)).await.unwrap().is_ok());

        let tasks = stores.tasks();
        let ttl = Duration::from_secs(60);
        tasks.create(TaskRecord::working("t-done", None, at(0), ttl, ttl), at(0)).await.unwrap();
        tasks.create(TaskRecord::working("t-running", None, at(0), ttl, ttl), at(0)).await.unwrap();
        assert!(tasks.finish("t-done", TaskStatus::Completed, Some(json!({"ok": 1})), None, at(3)).await.unwrap());

        let event =
            AuditEvent::new(at(4), AuditKind::ExecutionStarted { effect: Effect::Write }, "orders.cancel", "c-1");
        stores.audit().record(&event).await.unwrap();

        let limiter = stores.rate_limiter(budgets(), std::sync::Arc::new(SystemClock));
        for _ in 0..2 {
            assert!(matches!(limiter.acquire(call(), Timestamp::now()).await, RateDecision::Allow(_)));
        }
    }
    let stores = open(&folder).await;
    let replayed = stores.idempotency().admit(&key("paid"), fp(1), Attempt::fresh(), at(5)).await;
    assert!(
        matches!(&replayed, Ok(Admission::Replay(r)) if *r == InvokeResult::ok(json!({"refund": 7}), None)),
        "{replayed:?}"
    );
    let conf = stores.confirmations();
    assert_eq!(conf.get("pending", at(5)).await.unwrap().unwrap().state, ConfirmationState::Pending);
    assert!(conf.consume("approved", &binding(), at(5)).await.unwrap().is_ok(), "the approval is used once");
    assert_eq!(conf.consume("approved", &binding(), at(6)).await.unwrap(), Err(Rejection::Consumed));
    assert_eq!(conf.consume("consumed", &binding(), at(6)).await.unwrap(), Err(Rejection::Consumed));
    let tasks = stores.tasks();
    let done = tasks.get("t-done", at(7)).await.unwrap().unwrap();
    assert_eq!((done.status, done.payload), (TaskStatus::Completed, Some(json!({"ok": 1}))));
    assert_eq!(tasks.get("t-running", at(7)).await.unwrap().unwrap().status, TaskStatus::Working);
    let events = stores.audit().recent(10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name(), "execution.started");
    let limiter = stores.rate_limiter(budgets(), std::sync::Arc::new(SystemClock));
    assert!(
        matches!(limiter.acquire(call(), Timestamp::now()).await, RateDecision::Limited { .. }),
        "a budget spent before the restart is still spent"
    );
}

/// A call in flight when its process ended is taken over by its retry (a greater token: the
/// registry answers an unknown outcome rather than running it again silently); another request
/// under the key conflicts; the old lease settles nothing; a cancelled takeover lapses again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_at_a_restart_is_taken_over() {
    let folder = Folder::new("lapsed");
    let old = {
        let stores = open(&folder).await;
        leader(&stores.idempotency(), &key("pay"), 1, at(0)).await
    };
    let stores = open(&folder).await;
    // Said at open with no log yet: kept for the one installed later (no other test of this
    // binary takes the process's list).
    let warned = agent_surface_policy::wiring::take_unrecorded();
    let file = folder.file().display().to_string();
    assert!(
        warned
            .iter()
            .any(|w| w.contains(&file) && w.contains("1 call was in flight") && w.contains("outcome is unknown")),
        "{warned:?}"
    );
    let idem = stores.idempotency();
    assert!(
        matches!(idem.admit(&key("pay"), fp(2), Attempt::fresh(), at(1)).await, Ok(Admission::Conflict { stored }) if stored == fp(1))
    );
    let taking = Attempt::fresh();
    let Ok(Admission::TakeOver(first)) = idem.admit(&key("pay"), fp(1), taking, at(1)).await else {
        panic!("a call in flight at the restart is taken over")
    };
    assert!(first.token > old.token, "a takeover's token is greater");
    assert_eq!(
        idem.settle(&key("pay"), fp(1), old, Settlement::Release { result: InvokeResult::ok(json!(0), None) }, at(2))
            .await,
        Err(StoreError::LeaseLost),
        "the dead leader's lease settles nothing"
    );
    let Ok(Admission::Follower(joined)) = idem.admit(&key("pay"), fp(1), Attempt::fresh(), at(2)).await else {
        panic!("the takeover holds the record until it settles")
    };
    idem.cancel(&key("pay"), taking, at(3)).await.unwrap();
    // Its follower is told at once that the outcome is unknown (the dead leader may have run),
    // rather than waiting for whoever takes the record over next.
    let told = tokio::time::timeout(Duration::from_secs(5), joined).await.expect("the follower is answered");
    assert_eq!(told.error_payload().and_then(|p| p.detail("reason")), Some(&json!("outcome-unknown")));
    let Ok(Admission::TakeOver(again)) = idem.admit(&key("pay"), fp(1), Attempt::fresh(), at(4)).await else {
        panic!("a cancelled takeover leaves the record to be taken over again, never freed")
    };
    assert!(again.token > first.token);
    let stored = Settlement::Store { result: InvokeResult::ok(json!(1), None), expires_at: at(600_000) };
    idem.settle(&key("pay"), fp(1), again, stored, at(5)).await.unwrap();
    assert!(matches!(idem.admit(&key("pay"), fp(1), Attempt::fresh(), at(6)).await, Ok(Admission::Replay(_))));
    // Tokens keep growing across restarts.
    drop((idem, stores));
    let stores = open(&folder).await;
    assert!(leader(&stores.idempotency(), &key("next"), 1, at(7)).await.token > again.token);
}

/// One process at a time: a second open of a held file waits its lock timeout and is refused;
/// once the holder is dropped, the file opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_file_is_refused_to_a_second_opener() {
    let folder = Folder::new("locked");
    let held = open(&folder).await;
    let impatient = SqliteConfig { lock_timeout: Duration::from_millis(100), ..SqliteConfig::default() };
    let refused = SqliteStores::open(folder.file(), impatient).await.expect_err("the file is held");
    assert!(refused.is_in_use(), "{refused}");
    assert!(refused.to_string().contains("in use"), "{refused}");
    // The holder still works.
    leader(&held.idempotency(), &key("k"), 1, at(0)).await;
    drop(held);
    let reopened = open(&folder).await;
    assert!(matches!(
        reopened.idempotency().admit(&key("k"), fp(1), Attempt::fresh(), at(1)).await,
        Ok(Admission::TakeOver(_))
    ));
}

/// Another program's database and a file of a later schema are refused, not written into.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_this_build_cannot_read_are_refused() {
    let folder = Folder::new("foreign");
    let foreign = folder.path().join("other.db");
    let other = rusqlite::Connection::open(&foreign).unwrap();
    other.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY)").unwrap();
    drop(other);
    let refused = SqliteStores::open(&foreign, SqliteConfig::default()).await.expect_err("another program's file");
    assert!(refused.to_string().contains("not an agent-surface store file"), "{refused}");
    assert!(!refused.is_in_use());

    drop(open(&folder).await);
    let ours = rusqlite::Connection::open(folder.file()).unwrap();
    ours.execute_batch("PRAGMA user_version = 99").unwrap();
    drop(ours);
    let refused = SqliteStores::open(folder.file(), SqliteConfig::default()).await.expect_err("a later schema");
    assert!(refused.to_string().contains("later version of agent-surface-sqlite (schema 99"), "{refused}");
}

/// A row a later build wrote (format 2) is reported as unreadable, never misread as this
/// build's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_of_a_later_format_is_reported() {
    let folder = Folder::new("later-row");
    {
        let stores = open(&folder).await;
        let idem = stores.idempotency();
        let lease = leader(&idem, &key("k"), 1, at(0)).await;
        let stored = Settlement::Store { result: InvokeResult::ok(json!(1), None), expires_at: at(600_000) };
        idem.settle(&key("k"), fp(1), lease, stored, at(0)).await.unwrap();
        stores.confirmations().insert(confirmation("c"), at(0)).await.unwrap();
    }
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    raw.execute_batch("UPDATE idem SET v = 2; UPDATE conf SET v = 2;").unwrap();
    drop(raw);
    let stores = open(&folder).await;
    let read = stores.idempotency().admit(&key("k"), fp(1), Attempt::fresh(), at(1)).await;
    assert!(matches!(&read, Err(StoreError::Unavailable(why)) if why.contains("later format")), "{read:?}");
    let read = stores.confirmations().get("c", at(1)).await;
    assert!(matches!(&read, Err(StoreError::Unavailable(why)) if why.contains("later format")), "{read:?}");
}

/// The application's own tables live in the same file, with the same transactions: committed
/// before the answer, undone when the application's step fails, there after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_own_tables_share_the_file() {
    let folder = Folder::new("app");
    {
        let stores = open(&folder).await;
        stores
            .transaction(|conn| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS app_orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)",
                )?;
                conn.execute("INSERT INTO app_orders (id, status) VALUES ('A-1', 'placed')", [])
            })
            .await
            .unwrap();
        let failed = stores
            .transaction(|conn| {
                conn.execute("UPDATE app_orders SET status = 'cancelled' WHERE id = 'A-1'", [])?;
                conn.execute("INSERT INTO app_orders (id, status) VALUES ('A-1', 'twice')", [])
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Unavailable(_))), "{failed:?}");
    }
    let stores = open(&folder).await;
    let status = stores
        .transaction(|conn| {
            conn.query_row("SELECT status FROM app_orders WHERE id = 'A-1'", [], |r| r.get::<_, String>(0))
        })
        .await
        .unwrap();
    assert_eq!(status, "placed", "the failed step was undone whole, the first one kept");
}

/// A new store file, and the log SQLite writes beside it, are readable by their owner only: they
/// hold pending approvals, stored results and the key that seals MCP approval rounds. A file that
/// exists keeps its mode.
#[cfg(unix)]
#[tokio::test]
async fn a_new_store_file_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let folder = Folder::new("mode");
    let stores = SqliteStores::open(folder.file(), SqliteConfig::default()).await.expect("opens");
    let key = IdempotencyKey::new("c-1", "i-1");
    let fp = Fingerprint::of(&json!({}));
    stores.idempotency().admit(&key, fp, Attempt::fresh(), Timestamp::now()).await.expect("writes the log");
    let mode = |name: &str| {
        let path = folder.path().join(name);
        std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert_eq!(mode("store.db"), 0o600);
    assert_eq!(mode("store.db-wal"), 0o600);
    drop(stores);

    let shared = folder.path().join("shared.db");
    std::fs::write(&shared, b"").expect("an empty file");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).expect("its mode");
    let stores = SqliteStores::open(&shared, SqliteConfig::default()).await.expect("opens an empty file");
    assert_eq!(mode("shared.db"), 0o640, "an existing file keeps its mode");
    drop(stores);
}

/// A configuration that cannot keep its promises is refused at open, with the setting named: a
/// call in flight when its process died must be remembered until the process is back (a
/// retention of zero forgot it at once, and its retry ran it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_that_cannot_hold_is_refused_at_open() {
    let folder = Folder::new("configured");
    for (config, named) in [
        (SqliteConfig { in_flight_retention: Duration::ZERO, ..SqliteConfig::default() }, "in_flight_retention"),
        (
            SqliteConfig { in_flight_retention: Duration::from_secs(59), ..SqliteConfig::default() },
            "in_flight_retention",
        ),
        (SqliteConfig { op_timeout: Duration::ZERO, ..SqliteConfig::default() }, "op_timeout"),
        (SqliteConfig { max_bytes: 1 << 19, ..SqliteConfig::default() }, "max_bytes"),
    ] {
        let refused = SqliteStores::open(folder.file(), config).await.expect_err("refused");
        assert!(refused.to_string().contains(named), "{named}: {refused}");
    }
    assert!(SqliteStores::open(folder.file(), SqliteConfig::default()).await.is_ok());
}
