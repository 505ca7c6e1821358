//! The stored shapes of format 1, pinned both ways: what this build writes is exactly these rows,
//! and these rows, as an earlier build wrote them, read back. The JSON is pinned by the strings of
//! `agent_surface_testing::stores::format`, which the PostgreSQL store's test pins too. A change of
//! a stored shape fails here, and must come with a new format version that still reads these.

use std::time::Duration;

use agent_surface_core::{Effect, InvokeResult};
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditSink, ConfirmationStore, IdempotencyStore, TaskStore,
    confirmation::{ApprovalVerdict, ConfirmationState, SlotSet},
    idempotency::{Admission, Attempt, IdempotencyKey, Settlement},
    task::{TaskRecord, TaskStatus},
};
use agent_surface_testing::stores::format::{self, CONFIRMATION, EVENT, RESULT, TASK, TASK_LEASED, at, fingerprint};
use serde_json::json;

use crate::restart::open;
use crate::support::Folder;

/// What this build writes, row by row, is format 1 as pinned above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_build_writes_format_1() {
    let folder = Folder::new("writes-1");
    {
        let stores = open(&folder).await;
        let conf = stores.confirmations();
        conf.insert(format::confirmation(), at(0)).await.unwrap();
        conf.decide_in_slots("c-1", ApprovalVerdict::Approve, "bob", SlotSet::first(2), at(1_000)).await.unwrap();
        let tasks = stores.tasks();
        let working =
            TaskRecord::working("t-1", Some("alice".into()), at(0), Duration::from_secs(60), Duration::from_secs(3600));
        tasks.create(working, at(0)).await.unwrap();
        tasks.request_cancel("t-1", at(1_000)).await.unwrap();
        tasks
            .finish("t-1", TaskStatus::Completed, Some(json!({"content": []})), Some("done".into()), at(2_000))
            .await
            .unwrap();
        let idem = stores.idempotency();
        let key = IdempotencyKey::new("c-1", "inv-1");
        let Ok(Admission::Leader(lease)) = idem.admit(&key, fingerprint(), Attempt::fresh(), at(0)).await else {
            panic!()
        };
        let stored =
            Settlement::Store { result: InvokeResult::ok(json!({"refund": 7}), None), expires_at: at(600_000) };
        idem.settle(&key, fingerprint(), lease, stored, at(3_000)).await.unwrap();
        let event =
            AuditEvent::new(at(4_000), AuditKind::ExecutionStarted { effect: Effect::Write }, "orders.cancel", "c-1");
        stores.audit().record(&event).await.unwrap();
    }
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    let one = |sql: &str| -> (i64, String) { raw.query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap() };
    assert_eq!(one("SELECT v, record FROM conf"), (1, CONFIRMATION.to_string()));
    let (state, expires, gone): (String, i64, i64) = raw
        .query_row("SELECT state, expires_at, gone_at FROM conf", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    assert_eq!((state.as_str(), expires, gone), ("pending", 1_795_957_260_000, 1_795_957_260_000 + 3_600_000));
    assert_eq!(one("SELECT v, record FROM task"), (1, TASK.to_string()));
    assert_eq!(one("SELECT v, result FROM idem"), (1, RESULT.to_string()));
    let (state, fp, gone): (i64, Vec<u8>, i64) =
        raw.query_row("SELECT state, fp, gone_at FROM idem", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
    assert_eq!((state, fp.as_slice(), gone), (1, fingerprint().as_bytes().as_slice(), 1_795_957_800_000));
    assert_eq!(one("SELECT v, event FROM audit"), (1, EVENT.to_string()));
}

/// Rows of format 1, as an earlier build wrote them, read back and go on as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_format_1_read() {
    let folder = Folder::new("reads-1");
    drop(open(&folder).await);
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    raw.execute(
        "INSERT INTO conf (id, v, state, expires_at, gone_at, expiry_claimed, token, record)
         VALUES ('c-1', 1, 'pending', 1795957260000, 1795960860000, 0, NULL, ?1)",
        [CONFIRMATION],
    )
    .unwrap();
    raw.execute("INSERT INTO task (id, v, keep_until, record) VALUES ('t-1', 1, 1795957262000, ?1)", [TASK]).unwrap();
    raw.execute(
        "INSERT INTO idem (consumer, invocation, v, state, fp, token, attempt, takeover, lapsed, result, gone_at)
         VALUES ('c-1', 'inv-1', 1, 1, ?1, 7, NULL, 0, 0, ?2, 1795957800000)",
        rusqlite::params![fingerprint().as_bytes().as_slice(), RESULT],
    )
    .unwrap();
    raw.execute("INSERT INTO audit (v, event) VALUES (1, ?1)", [EVENT]).unwrap();
    drop(raw);

    let stores = open(&folder).await;
    let conf = stores.confirmations();
    let mut expected = format::confirmation();
    expected.decisions = vec![
        agent_surface_policy::confirmation::ApproverDecision::new("bob", ApprovalVerdict::Approve, at(1_000))
            .with_slots(SlotSet::first(2)),
    ];
    assert_eq!(conf.get("c-1", at(5_000)).await.unwrap(), Some(expected));
    // It goes on: the second approval, by a manager, completes the quorum.
    let done = conf.decide_in_slots("c-1", ApprovalVerdict::Approve, "carol", SlotSet::first(1), at(6_000)).await;
    assert_eq!(done.unwrap(), agent_surface_policy::confirmation::Decided::Done);
    assert_eq!(
        conf.get("c-1", at(7_000)).await.unwrap().unwrap().state,
        ConfirmationState::Approved { by: "bob, carol".into() }
    );
    assert_eq!(stores.tasks().get("t-1", at(5_000)).await.unwrap(), Some(format::task()));
    let replay = stores
        .idempotency()
        .admit(&IdempotencyKey::new("c-1", "inv-1"), fingerprint(), Attempt::fresh(), at(5_000))
        .await;
    assert!(matches!(replay, Ok(Admission::Replay(r)) if r == InvokeResult::ok(json!({"refund": 7}), None)));
    let events = stores.audit().recent(1).await.unwrap();
    assert_eq!(serde_json::to_string(&events[0]).unwrap(), EVENT);
}

/// The additions of #26 to format 1, pinned both ways: a task's lease is written as pinned and
/// read back; a row whose expiry a build before lapsing claims marked claimed reads as recorded
/// (never claimed nor listed again, as it was then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_and_expiry_claim_additions_of_format_1() {
    let folder = Folder::new("additions-1");
    {
        let stores = open(&folder).await;
        let working = TaskRecord::working("t-2", None, at(0), Duration::from_secs(60), Duration::from_secs(3600))
            .with_lease(Duration::from_secs(30));
        stores.tasks().create(working.clone(), at(0)).await.unwrap();
        assert_eq!(stores.tasks().get("t-2", at(1)).await.unwrap(), Some(working));
    }
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    let row: (i64, String) = raw.query_row("SELECT v, record FROM task", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert_eq!(row, (1, TASK_LEASED.to_string()));
    raw.execute(
        "INSERT INTO conf (id, v, state, expires_at, gone_at, expiry_claimed, token, record)
         VALUES ('c-1', 1, 'pending', 1795957260000, 1795960860000, 1, NULL, ?1)",
        [CONFIRMATION],
    )
    .unwrap();
    drop(raw);
    let stores = open(&folder).await;
    let conf = stores.confirmations();
    assert!(conf.list_expired(at(1_000_000), 10).await.unwrap().is_empty(), "a claim of then reads as recorded");
    assert!(!conf.claim_expiry("c-1", at(2_000_000), at(1_000_000)).await.unwrap());
    // Reopened, the lease reads back (a row without one, `TASK`, reads as none: above).
    assert_eq!(stores.tasks().get("t-2", at(2)).await.unwrap().unwrap().lease_until, Some(at(30_000)));
}

/// The approval inbox's rows (schema 3, format 1), pinned both ways: a session (a digest, the
/// subject, the expiry, the sealed credential), a used form nonce, and a form-signing key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_rows_of_format_1() {
    use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
    let folder = Folder::new("inbox-1");
    {
        let inbox = open(&folder).await.inbox();
        let session = InboxSession::new("manager", at(1_000), vec![1, 2, 3]);
        inbox.open_session([7; 32], session, SessionLimits::default(), at(0)).await.unwrap();
        assert_eq!(inbox.use_nonce("forms", "n-1", at(2_000), at(0)).await.unwrap(), NonceUse::Fresh);
        assert_eq!(inbox.mac_key("forms", [9; 32]).await.unwrap(), [9; 32]);
    }
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    let session: (Vec<u8>, i64, String, i64, Vec<u8>) = raw
        .query_row("SELECT lookup, v, subject, expires_at, sealed FROM inbox_session", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    assert_eq!(session, (vec![7; 32], 1, "manager".into(), 1_795_957_201_000, vec![1, 2, 3]));
    let nonce: (String, String, i64, i64) = raw
        .query_row("SELECT scope, nonce, v, until FROM inbox_nonce", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!(nonce, ("forms".into(), "n-1".into(), 1, 1_795_957_202_000));
    let key: (String, i64, Vec<u8>) =
        raw.query_row("SELECT name, v, key FROM inbox_key", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
    assert_eq!(key, ("forms".into(), 1, vec![9; 32]));

    // As an earlier build wrote them, they read back.
    raw.execute_batch(
        "INSERT INTO inbox_session (lookup, v, subject, expires_at, sealed)
           VALUES (x'0808080808080808080808080808080808080808080808080808080808080808', 1, 'maria', 1795957205000, x'0a0b');
         INSERT INTO inbox_nonce (scope, nonce, v, until) VALUES ('sign-in', 'n-2', 1, 1795957205000);
         INSERT INTO inbox_key (name, v, key)
           VALUES ('sign-in', 1, x'0505050505050505050505050505050505050505050505050505050505050505');",
    )
    .unwrap();
    drop(raw);
    let inbox = open(&folder).await.inbox();
    let read = inbox.session([8; 32], at(1)).await.unwrap();
    assert_eq!(read, Some(InboxSession::new("maria", at(5_000), vec![10, 11])));
    assert!(inbox.nonce_used("sign-in", "n-2", at(1)).await.unwrap());
    assert_eq!(inbox.use_nonce("sign-in", "n-2", at(5_000), at(1)).await.unwrap(), NonceUse::Used);
    assert_eq!(inbox.mac_key("sign-in", [1; 32]).await.unwrap(), [5; 32]);
}
