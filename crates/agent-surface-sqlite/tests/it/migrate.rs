//! A file of an earlier schema, opened by this build: its rows are read as they were written, and
//! the schema is brought up to date (schema 1, as the first release wrote it, to the current one).

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, InvokeResult, Timestamp};
use agent_surface_policy::confirmation::{ConfirmationBinding, ConfirmationState};
use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
use agent_surface_policy::inbox::{InboxSession, InboxStore, SessionLimits};
use agent_surface_policy::task::{TaskRecord, TaskStatus};
use agent_surface_policy::{ConfirmationRecord, ConfirmationStore, IdempotencyStore, TaskStore};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use serde_json::json;

use crate::support::Folder;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_795_957_200_000 + ms)
}

/// Schema 1 as the first release created it (`MIGRATIONS[0]`, copied here so that a later edit
/// of the migration cannot change what this test starts from).
const SCHEMA_1: &str = r"
CREATE TABLE idem (
  consumer TEXT NOT NULL,
  invocation TEXT NOT NULL,
  v INTEGER NOT NULL,
  state INTEGER NOT NULL,
  fp BLOB NOT NULL,
  token INTEGER NOT NULL,
  attempt BLOB,
  takeover INTEGER NOT NULL DEFAULT 0,
  lapsed INTEGER NOT NULL DEFAULT 0,
  result TEXT,
  gone_at INTEGER NOT NULL,
  PRIMARY KEY (consumer, invocation)
);
CREATE INDEX idem_gone ON idem (gone_at);

CREATE TABLE conf (
  id TEXT PRIMARY KEY,
  v INTEGER NOT NULL,
  state TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  gone_at INTEGER NOT NULL,
  expiry_claimed INTEGER NOT NULL DEFAULT 0,
  token TEXT,
  record TEXT NOT NULL
);
CREATE INDEX conf_pending ON conf (expires_at, id) WHERE state = 'pending';
CREATE INDEX conf_open ON conf (expires_at, id)
  WHERE expiry_claimed = 0 AND state IN ('pending', 'approved', 'withdrawn');
CREATE INDEX conf_gone ON conf (gone_at);

CREATE TABLE conf_relay (
  key BLOB PRIMARY KEY,
  v INTEGER NOT NULL,
  id TEXT NOT NULL
);
CREATE INDEX conf_relay_id ON conf_relay (id);

CREATE TABLE task (
  id TEXT PRIMARY KEY,
  v INTEGER NOT NULL,
  keep_until INTEGER NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX task_keep ON task (keep_until);

CREATE TABLE rate (
  bucket TEXT PRIMARY KEY,
  v INTEGER NOT NULL,
  tat INTEGER NOT NULL
);
CREATE INDEX rate_tat ON rate (tat);

CREATE TABLE audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  v INTEGER NOT NULL,
  event TEXT NOT NULL
);
PRAGMA application_id = 1095988081;
PRAGMA user_version = 1;
";

fn confirmation(id: &str) -> ConfirmationRecord {
    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    };
    ConfirmationRecord::pending(
        id.into(),
        binding,
        Some("alice".into()),
        "Cancel order A-1.".into(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
}

/// A real schema-1 file (made with schema 1's statements, its rows those the stores write, in the
/// columns schema 1 has), opened by this build: it is migrated to the current schema in place,
/// and the stored result replays, the pending confirmation and the task read back, and the
/// tables the later schemas add (the inbox's) work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_file_is_migrated_and_its_rows_read() {
    let rows = Folder::new("schema-1-rows");
    let key = IdempotencyKey::new("c-1", "inv-1");
    let fp = Fingerprint::of(&json!({"request": 1}));
    let result = InvokeResult::ok(json!({"cancelled": true}), Some("inv-1".into()));
    {
        let stores = SqliteStores::open(rows.file(), SqliteConfig::default()).await.unwrap();
        let idem = stores.idempotency();
        let Ok(Admission::Leader(lease)) = idem.admit(&key, fp, Attempt::fresh(), at(0)).await else { panic!() };
        let stored = Settlement::Store { result: result.clone(), expires_at: at(600_000) };
        idem.settle(&key, fp, lease, stored, at(0)).await.unwrap();
        stores.confirmations().insert(confirmation("c-1"), at(0)).await.unwrap();
        let ttl = std::time::Duration::from_secs(600);
        stores.tasks().create(TaskRecord::working("t-1", None, at(0), ttl, ttl), at(0)).await.unwrap();
    }

    let old = Folder::new("schema-1");
    let file = rusqlite::Connection::open(old.file()).unwrap();
    file.execute_batch(SCHEMA_1).unwrap();
    file.execute(&format!("ATTACH DATABASE '{}' AS rows", rows.file().display()), []).unwrap();
    file.execute_batch(
        "INSERT INTO idem SELECT consumer, invocation, v, state, fp, token, attempt, takeover, lapsed, result, gone_at
           FROM rows.idem;
         INSERT INTO conf SELECT id, v, state, expires_at, gone_at, expiry_claimed, token, record FROM rows.conf;
         INSERT INTO conf_relay SELECT key, v, id FROM rows.conf_relay;
         INSERT INTO task SELECT id, v, keep_until, record FROM rows.task;
         DETACH DATABASE rows;",
    )
    .unwrap();
    let version: i64 = file.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, 1);
    let counts: (i64, i64, i64) = file
        .query_row(
            "SELECT (SELECT count(*) FROM idem), (SELECT count(*) FROM conf), (SELECT count(*) FROM task)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(counts, (1, 1, 1), "the schema-1 file holds one row of each");
    drop(file);

    let stores = SqliteStores::open(old.file(), SqliteConfig::default()).await.expect("a schema-1 file opens");
    let replay = stores.idempotency().admit(&key, fp, Attempt::fresh(), at(1)).await.unwrap();
    assert!(matches!(&replay, Admission::Replay(r) if *r == result), "{replay:?}");
    let record = stores.confirmations().get("c-1", at(1)).await.unwrap().expect("the confirmation reads back");
    assert_eq!(record.state, ConfirmationState::Pending);
    let task = stores.tasks().get("t-1", at(1)).await.unwrap().expect("the task reads back");
    assert_eq!(task.status, TaskStatus::Working);
    let inbox = stores.inbox();
    let session = InboxSession::new("manager", at(1_000), vec![1, 2, 3]);
    inbox.open_session([7; 32], session.clone(), SessionLimits::default(), at(1)).await.unwrap();
    assert_eq!(inbox.session([7; 32], at(2)).await.unwrap(), Some(session));
    let version =
        stores.transaction(|conn| conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))).await.unwrap();
    assert_eq!(version, 3, "migrated to the current schema");
    drop(stores);
}
