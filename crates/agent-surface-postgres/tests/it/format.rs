//! The stored shapes of format 1 in PostgreSQL, pinned both ways: what this build writes is exactly
//! these rows, and these rows, as an earlier build wrote them, read back. The JSON of confirmations
//! and tasks is the SQLite store's (`agent_surface_policy::stored`), pinned by the same strings,
//! `agent_surface_testing::stores::format`'s. A change of a stored shape fails here, and must come
//! with a new format version that still reads these.

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

use crate::support;

/// What this build writes, row by row, is format 1 as pinned above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_build_writes_format_1() {
    let Some(stores) = support::stores("writes_1").await else { return };
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
    let Ok(Admission::Leader(lease)) = idem.admit(&key, fingerprint(), Attempt::fresh(), at(0)).await else { panic!() };
    let stored = Settlement::Store { result: InvokeResult::ok(json!({"refund": 7}), None), expires_at: at(600_000) };
    idem.settle(&key, fingerprint(), lease, stored, at(3_000)).await.unwrap();
    let event =
        AuditEvent::new(at(4_000), AuditKind::ExecutionStarted { effect: Effect::Write }, "orders.cancel", "c-1");
    stores.audit().record(&event).await.unwrap();

    let s = format!("\"{}\"", stores.config().schema);
    let client = stores.pool().get().await.unwrap();
    let one = |sql: String| {
        let client = &client;
        async move {
            let row = client.query_one(&sql, &[]).await.unwrap();
            (row.get::<_, i32>(0), row.get::<_, String>(1))
        }
    };
    assert_eq!(one(format!("SELECT v, record FROM {s}.conf")).await, (1, CONFIRMATION.to_string()));
    let row = client.query_one(&format!("SELECT state, expires_at, gone_at FROM {s}.conf"), &[]).await.unwrap();
    let (state, expires, gone): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((state.as_str(), expires, gone), ("pending", 1_795_957_260_000, 1_795_957_260_000 + 3_600_000));
    assert_eq!(one(format!("SELECT v, record FROM {s}.task")).await, (1, TASK.to_string()));
    assert_eq!(one(format!("SELECT v, result FROM {s}.idem")).await, (1, RESULT.to_string()));
    let row = client.query_one(&format!("SELECT state, fp FROM {s}.idem"), &[]).await.unwrap();
    let (state, fp): (String, Vec<u8>) = (row.get(0), row.get(1));
    assert_eq!((state.as_str(), fp.as_slice()), ("done", fingerprint().as_bytes().as_slice()));
    assert_eq!(one(format!("SELECT v, event FROM {s}.audit")).await, (1, EVENT.to_string()));
}

/// Rows of format 1, as an earlier build wrote them, read back and go on as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_format_1_read() {
    let Some(stores) = support::stores("reads_1").await else { return };
    let s = format!("\"{}\"", stores.config().schema);
    {
        let client = stores.pool().get().await.unwrap();
        client
            .execute(
                &format!(
                    "INSERT INTO {s}.conf (id, v, state, expires_at, gone_at, expiry_claimed, token, record)
                     VALUES ('c-1', 1, 'pending', 1795957260000, 1795960860000, false, NULL, $1)"
                ),
                &[&CONFIRMATION],
            )
            .await
            .unwrap();
        client
            .execute(
                &format!("INSERT INTO {s}.task (id, v, keep_until, record) VALUES ('t-1', 1, 1795957262000, $1)"),
                &[&TASK],
            )
            .await
            .unwrap();
        client
            .execute(
                &format!(
                    "INSERT INTO {s}.idem (consumer, invocation, v, state, fp, token, lease_until, attempt, takeover, started, result, keep_until)
                     VALUES ('c-1', 'inv-1', 1, 'done', $1, 7, NULL, NULL, false, false, $2, clock_timestamp() + interval '1 hour')"
                ),
                &[&fingerprint().as_bytes().as_slice(), &RESULT],
            )
            .await
            .unwrap();
        client.execute(&format!("INSERT INTO {s}.audit (v, event) VALUES (1, $1)"), &[&EVENT]).await.unwrap();
    }
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

/// A running task's lease (#26, an addition to format 1) is written as pinned, the SQLite store's
/// shape, and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_addition_of_format_1() {
    let Some(stores) = support::stores("lease_1").await else { return };
    let working = TaskRecord::working("t-2", None, at(0), Duration::from_secs(60), Duration::from_secs(3600))
        .with_lease(Duration::from_secs(30));
    stores.tasks().create(working.clone(), at(0)).await.unwrap();
    assert_eq!(stores.tasks().get("t-2", at(1)).await.unwrap(), Some(working));
    let s = format!("\"{}\"", stores.config().schema);
    let client = stores.pool().get().await.unwrap();
    let row = client.query_one(&format!("SELECT v, record FROM {s}.task"), &[]).await.unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, String>(1)), (1, TASK_LEASED.to_string()));
}

/// A row of a later format is reported, never misread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_of_a_later_format_is_refused() {
    let Some(stores) = support::stores("later").await else { return };
    let s = format!("\"{}\"", stores.config().schema);
    let client = stores.pool().get().await.unwrap();
    client
        .execute(
            &format!("INSERT INTO {s}.task (id, v, keep_until, record) VALUES ('t-1', 2, 1795957262000, $1)"),
            &[&TASK],
        )
        .await
        .unwrap();
    let read = stores.tasks().get("t-1", at(5_000)).await;
    assert!(matches!(read, Err(agent_surface_policy::StoreError::Unavailable(_))), "{read:?}");
}

/// The approval inbox's rows (schema 3, format 1), pinned both ways: a session (a digest, the
/// subject, the expiry, the sealed credential), a used form nonce, and a form-signing key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_rows_of_format_1() {
    use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
    let Some(stores) = support::stores("inbox_1").await else { return };
    let inbox = stores.inbox();
    let session = InboxSession::new("manager", at(1_000), vec![1, 2, 3]);
    inbox.open_session([7; 32], session, SessionLimits::default(), at(0)).await.unwrap();
    assert_eq!(inbox.use_nonce("forms", "n-1", at(2_000), at(0)).await.unwrap(), NonceUse::Fresh);
    assert_eq!(inbox.mac_key("forms", [9; 32]).await.unwrap(), [9; 32]);

    let s = format!("\"{}\"", stores.config().schema);
    let client = stores.pool().get().await.unwrap();
    let row = client
        .query_one(&format!("SELECT lookup, v, subject, expires_at, sealed FROM {s}.inbox_session"), &[])
        .await
        .unwrap();
    let session: (Vec<u8>, i32, String, i64, Vec<u8>) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(session, (vec![7; 32], 1, "manager".into(), 1_795_957_201_000, vec![1, 2, 3]));
    let row = client.query_one(&format!("SELECT scope, nonce, v, until FROM {s}.inbox_nonce"), &[]).await.unwrap();
    let nonce: (String, String, i32, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(nonce, ("forms".into(), "n-1".into(), 1, 1_795_957_202_000));
    let row = client.query_one(&format!("SELECT name, v, key FROM {s}.inbox_key"), &[]).await.unwrap();
    let key: (String, i32, Vec<u8>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(key, ("forms".into(), 1, vec![9; 32]));

    // As an earlier build wrote them, they read back.
    client
        .batch_execute(&format!(
            "INSERT INTO {s}.inbox_session (lookup, v, subject, expires_at, sealed)
               VALUES ('\\x0808080808080808080808080808080808080808080808080808080808080808', 1, 'maria', 1795957205000,
                       '\\x0a0b');
             INSERT INTO {s}.inbox_nonce (scope, nonce, v, until) VALUES ('sign-in', 'n-2', 1, 1795957205000);
             INSERT INTO {s}.inbox_key (name, v, key)
               VALUES ('sign-in', 1, '\\x0505050505050505050505050505050505050505050505050505050505050505');"
        ))
        .await
        .unwrap();
    let read = inbox.session([8; 32], at(1)).await.unwrap();
    assert_eq!(read, Some(InboxSession::new("maria", at(5_000), vec![10, 11])));
    assert!(inbox.nonce_used("sign-in", "n-2", at(1)).await.unwrap());
    assert_eq!(inbox.use_nonce("sign-in", "n-2", at(5_000), at(1)).await.unwrap(), NonceUse::Used);
    assert_eq!(inbox.mac_key("sign-in", [1; 32]).await.unwrap(), [5; 32]);
}
