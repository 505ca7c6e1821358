//! The file's bounds: a full file fails closed (and a settlement it refused leaves no call
//! waiting), oversized results are withheld, the audit trail keeps its length, and expired rows
//! are deleted.

use std::time::Duration;

use agent_surface_core::{Effect, InvokeResult, Timestamp};
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditSink, IdempotencyStore, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use serde_json::json;

use crate::support::Folder;

fn key(id: &str) -> IdempotencyKey {
    IdempotencyKey::new("c-1", id)
}

fn fp() -> Fingerprint {
    Fingerprint::of(&json!({"request": 1}))
}

async fn open_with(folder: &Folder, config: SqliteConfig) -> SqliteStores {
    SqliteStores::open(folder.file(), config).await.expect("the store file opens")
}

/// A file at `max_bytes` refuses the write that does not fit (`Unavailable`: the call fails
/// closed) and keeps what it holds. The settlement it refused leaves the record in flight, but
/// lapsed: the leader's followers learn that the outcome is unknown, and the retry takes the
/// record over instead of waiting on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_file_fails_closed_and_leaves_no_call_waiting() {
    let folder = Folder::new("full");
    let config = SqliteConfig { max_bytes: 1 << 20, max_result_bytes: 8 << 20, ..SqliteConfig::default() };
    let stores = open_with(&folder, config).await;
    let idem = stores.idempotency();
    let now = Timestamp::now();
    let Ok(Admission::Leader(small)) = idem.admit(&key("small"), fp(), Attempt::fresh(), now).await else { panic!() };
    let kept = Settlement::Store {
        result: InvokeResult::ok(json!("kept"), None),
        expires_at: now.saturating_add(Duration::from_secs(600)),
    };
    idem.settle(&key("small"), fp(), small, kept, now).await.unwrap();

    let Ok(Admission::Leader(big)) = idem.admit(&key("big"), fp(), Attempt::fresh(), now).await else { panic!() };
    let Ok(Admission::Follower(waiting)) = idem.admit(&key("big"), fp(), Attempt::fresh(), now).await else { panic!() };
    let blob = InvokeResult::ok(json!({"blob": "b".repeat(2 << 20)}), None);
    let refused = idem
        .settle(
            &key("big"),
            fp(),
            big,
            Settlement::Store { result: blob, expires_at: now.saturating_add(Duration::from_secs(600)) },
            now,
        )
        .await;
    assert!(matches!(&refused, Err(StoreError::Unavailable(why)) if why.contains("full")), "{refused:?}");
    let told = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the follower is answered");
    assert_eq!(told.error_payload().and_then(|p| p.detail("reason")), Some(&json!("outcome-unknown")));
    // A transaction that writes nothing leaves it in memory (a read must not fail on a full disk
    // for it); the next one that writes and commits writes the record as lapsed: memory need not
    // hold it (however many settlements fail), and the sweep removes it in time.
    let lapsed_now = || {
        stores.transaction(|conn| {
            conn.query_row("SELECT lapsed FROM idem WHERE invocation = 'big'", [], |r| r.get::<_, bool>(0))
        })
    };
    assert!(!lapsed_now().await.unwrap(), "a read-only transaction writes nothing");
    let Ok(Admission::Leader(_)) = idem.admit(&key("next"), fp(), Attempt::fresh(), now).await else { panic!() };
    assert!(lapsed_now().await.unwrap(), "the orphaned record is lapsed on disk");
    assert!(
        matches!(idem.admit(&key("big"), fp(), Attempt::fresh(), now).await, Ok(Admission::TakeOver(_))),
        "the retry takes the record over"
    );
    assert!(matches!(idem.admit(&key("small"), fp(), Attempt::fresh(), now).await, Ok(Admission::Replay(_))));
}

/// A result over `max_result_bytes` reaches its caller and followers, and the record keeps
/// `output-too-large`: the retry learns the call ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_result_is_recorded_as_withheld() {
    let folder = Folder::new("withheld");
    let stores = open_with(&folder, SqliteConfig { max_result_bytes: 10_000, ..SqliteConfig::default() }).await;
    let idem = stores.idempotency();
    let now = Timestamp::now();
    let Ok(Admission::Leader(lease)) = idem.admit(&key("big"), fp(), Attempt::fresh(), now).await else { panic!() };
    let Ok(Admission::Follower(waiting)) = idem.admit(&key("big"), fp(), Attempt::fresh(), now).await else { panic!() };
    let result = InvokeResult::ok(json!({"blob": "b".repeat(20_000)}), None);
    let settlement =
        Settlement::Store { result: result.clone(), expires_at: now.saturating_add(Duration::from_secs(60)) };
    idem.settle(&key("big"), fp(), lease, settlement, now).await.unwrap();
    assert_eq!(waiting.await, result, "the follower gets the whole result");
    let Ok(Admission::Replay(replayed)) = idem.admit(&key("big"), fp(), Attempt::fresh(), now).await else { panic!() };
    assert_eq!(replayed.error_payload().and_then(|p| p.detail("reason")), Some(&json!("output-too-large")));
}

/// The trail keeps the latest `audit_max_len` events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_is_bounded() {
    let folder = Folder::new("audit-bound");
    let stores = open_with(&folder, SqliteConfig { audit_max_len: 10, ..SqliteConfig::default() }).await;
    let sink = stores.audit();
    for i in 0..50u64 {
        let mut e = AuditEvent::new(
            Timestamp::from_unix_millis(i),
            AuditKind::ExecutionStarted { effect: Effect::Write },
            "orders.cancel",
            "c-1",
        );
        e.invocation_id = Some(format!("inv-{i}"));
        sink.record(&e).await.unwrap();
    }
    let kept = sink.recent(1_000).await.unwrap();
    let ids: Vec<_> = kept.iter().filter_map(|e| e.invocation_id.clone()).collect();
    let expected: Vec<_> = (40..50).map(|i| format!("inv-{i}")).collect();
    assert_eq!(ids, expected);
}

/// Expired stored results are deleted in the background (the file does not grow with every
/// call ever made); a record in flight is kept however old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_deleted() {
    let folder = Folder::new("sweep");
    let t = |ms: u64| Timestamp::from_unix_millis(1_795_957_200_000 + ms);
    {
        let stores = open_with(&folder, SqliteConfig::default()).await;
        let idem = stores.idempotency();
        for i in 0..100 {
            let k = key(&format!("k{i}"));
            let Ok(Admission::Leader(lease)) = idem.admit(&k, fp(), Attempt::fresh(), t(0)).await else { panic!() };
            let short = Settlement::Store { result: InvokeResult::ok(json!(i), None), expires_at: t(10) };
            idem.settle(&k, fp(), lease, short, t(0)).await.unwrap();
        }
        let Ok(Admission::Leader(_)) = idem.admit(&key("running"), fp(), Attempt::fresh(), t(0)).await else {
            panic!()
        };
        // A sweep runs with the first batch a second after the last, against the latest `now`
        // an operation was given (a day later here).
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let Ok(Admission::Leader(_)) = idem.admit(&key("probe"), fp(), Attempt::fresh(), t(86_400_000)).await else {
            panic!()
        };
    }
    let raw = rusqlite::Connection::open(folder.file()).unwrap();
    let mut left: Vec<String> = raw
        .prepare("SELECT invocation FROM idem")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    left.sort();
    assert_eq!(left, ["probe", "running"], "the expired results are deleted; the calls in flight stay");
}

/// The followers of a claim are that claim's: when a settlement that releases the record, a new
/// claim of the same request and a follower of that new claim are carried out in one transaction
/// (the database thread batches what is queued while it is busy), the follower waits for the new
/// leader — it is never handed the released claim's result, which answered another request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_of_a_new_claim_waits_for_its_own_leader() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    /// Polls `f` once, so that its operation is queued; it must not be answered yet.
    async fn queue<F: Future + Unpin>(f: &mut F) {
        std::future::poll_fn(|cx| {
            assert!(Pin::new(&mut *f).poll(cx).is_pending(), "answered while the database thread is busy");
            Poll::Ready(())
        })
        .await;
    }

    let folder = Folder::new("batched-followers");
    let stores = open_with(&folder, SqliteConfig::default()).await;
    let idem = stores.idempotency();
    let now = Timestamp::now();
    let retry = Fingerprint::of(&json!({"request": 1, "confirmationId": "c-1"}));
    let Ok(Admission::Leader(first)) = idem.admit(&key("k"), fp(), Attempt::fresh(), now).await else { panic!() };
    // Keep the database thread busy while the three operations are queued behind it.
    let blocking = stores.clone();
    let busy = tokio::spawn(async move {
        blocking
            .transaction(|_| {
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .await
    });
    let k = key("k");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = InvokeResult::ok(json!("the first request's answer"), None);
    let mut settle = Box::pin(idem.settle(&k, fp(), first, Settlement::Release { result: released }, now));
    queue(&mut settle).await;
    let mut claim = Box::pin(idem.admit(&k, retry, Attempt::fresh(), now));
    queue(&mut claim).await;
    let mut join = Box::pin(idem.admit(&k, retry, Attempt::fresh(), now));
    queue(&mut join).await;
    busy.await.unwrap().unwrap();
    settle.await.unwrap();
    let Ok(Admission::Leader(second)) = claim.await else { panic!("the released record is claimed afresh") };
    let Ok(Admission::Follower(mut waiting)) = join.await else { panic!("the new claim is joined") };
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting).await.is_err(),
        "the follower waits for its own leader"
    );
    let stored = Settlement::Store {
        result: InvokeResult::ok(json!("the second request's answer"), None),
        expires_at: now.saturating_add(Duration::from_secs(600)),
    };
    idem.settle(&key("k"), retry, second, stored, now).await.unwrap();
    let told = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the follower is answered");
    assert_eq!(told, InvokeResult::ok(json!("the second request's answer"), None));
}
