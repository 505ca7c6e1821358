//! `kill -9` at random moments loses nothing answered.
//!
//! The test re-runs this test binary as a child process (the ignored test [`crash_child`]) that
//! writes through every store from several tasks at once and prints one line (`ack …`) for each
//! operation the store answered. The parent kills it with SIGKILL at a random moment — sometimes
//! while it is still opening the file — reads every line it printed, opens the file again, and
//! checks that everything acknowledged is there and consistent: a stored result replays, a claim
//! is never free again (it replays or is taken over, never led afresh), an approval or a
//! consumption holds, a task keeps its status, an audit event is in the trail, a spent rate budget
//! stays spent, and the file passes SQLite's integrity check. Ten rounds on one file, each round
//! checking every earlier round's acknowledgements too. The seed of the random moments is printed
//! on failure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroU32;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, InvokeResult, Timestamp};
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditSink, CallInfo, ConfirmationRecord, ConfirmationStore, Consumer, IdempotencyStore,
    Quota, RateBudgets, RateDecision, RateLimiter, SystemClock, TaskStore,
    confirmation::{ApprovalVerdict, ConfirmationBinding, ConfirmationState, Rejection},
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement},
    task::{TaskRecord, TaskStatus},
};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use serde_json::json;

use crate::support::Folder;

/// The child's folder; set only for the child.
const CHILD_DIR: &str = "AGENT_SURFACE_SQLITE_CRASH_DIR";
/// The child's round (ids and the rate consumer are per round).
const CHILD_ROUND: &str = "AGENT_SURFACE_SQLITE_CRASH_ROUND";

const ROUNDS: u64 = 10;
/// Tasks writing at once in the child (so that batches hold several operations).
const WRITERS: u64 = 6;
/// The rate budget of each round's consumer.
const BUDGET: u32 = 50;

fn quota() -> Quota {
    Quota::new(NonZeroU32::new(BUDGET).unwrap(), Duration::from_secs(24 * 3600))
}

fn fp(id: &str) -> Fingerprint {
    Fingerprint::of(&json!({"request": id}))
}

fn binding(id: &str) -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: fp(id),
    }
}

async fn open(dir: &std::path::Path) -> SqliteStores {
    SqliteStores::open(dir.join("store.db"), SqliteConfig::default()).await.expect("the store file opens")
}

/// How long a child writes at most (its parent kills it far sooner), so that a child whose parent
/// died never fills the disk.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "ack {line}").and_then(|()| out.flush()).is_err() {
        // Nobody reads any more: the parent is gone.
        std::process::exit(0);
    }
}

/// One writer of the child: every kind of operation in turn, acknowledging each answer.
async fn write(stores: SqliteStores, round: u64, writer: u64) {
    let (idem, conf, tasks, audit) = (stores.idempotency(), stores.confirmations(), stores.tasks(), stores.audit());
    let limiter = stores
        .rate_limiter(RateBudgets { per_consumer: Some(quota()), ..RateBudgets::default() }, Arc::new(SystemClock));
    let consumer = Consumer::anonymous(format!("crash-{round}"));
    for i in 0u64.. {
        let id = format!("r{round}-w{writer}-{i}");
        let now = Timestamp::now();
        let key = IdempotencyKey::new("c-1", id.as_str());
        if let Ok(Admission::Leader(lease)) = idem.admit(&key, fp(&id), Attempt::fresh(), now).await {
            ack(&format!("admitted {id}"));
            let result = InvokeResult::ok(json!({"id": id}), None);
            let stored = Settlement::Store { result, expires_at: now.saturating_add(Duration::from_secs(3600)) };
            if idem.settle(&key, fp(&id), lease, stored, Timestamp::now()).await.is_ok() {
                ack(&format!("settled {id}"));
            }
        }
        let record = ConfirmationRecord::pending(
            id.clone(),
            binding(&id),
            Some("alice".into()),
            "Cancel.".into(),
            Effect::Destructive,
            Origin::Client,
            now,
            now.saturating_add(Duration::from_secs(3600)),
        );
        if conf.insert(record, now).await.is_ok() {
            ack(&format!("inserted {id}"));
            if i % 2 == 0 && conf.decide(&id, ApprovalVerdict::Approve, "bob", Timestamp::now()).await.is_ok() {
                ack(&format!("approved {id}"));
                if i % 4 == 0 && matches!(conf.consume(&id, &binding(&id), Timestamp::now()).await, Ok(Ok(_))) {
                    ack(&format!("consumed {id}"));
                }
            }
        }
        let task = TaskRecord::working(id.as_str(), None, now, Duration::from_secs(3600), Duration::from_secs(3600));
        if tasks.create(task, now).await.is_ok() {
            ack(&format!("created {id}"));
            let payload = Some(json!({"id": id}));
            if i % 2 == 1
                && matches!(tasks.finish(&id, TaskStatus::Completed, payload, None, Timestamp::now()).await, Ok(true))
            {
                ack(&format!("finished {id}"));
            }
        }
        let mut event =
            AuditEvent::new(now, AuditKind::ExecutionStarted { effect: Effect::Write }, "orders.cancel", "c-1");
        event.invocation_id = Some(id.clone());
        if audit.record(&event).await.is_ok() {
            ack(&format!("audited {id}"));
        }
        let call = CallInfo::new(&consumer, "orders.cancel", "orders", Effect::Destructive, false);
        if matches!(limiter.acquire(call, Timestamp::now()).await, RateDecision::Allow(_)) {
            ack(&format!("allowed {id}"));
        }
    }
}

/// The child process of [`a_kill_9_loses_nothing_answered`]: writes until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of `a_kill_9_loses_nothing_answered`, which runs it"]
async fn crash_child() {
    let dir = std::env::var_os(CHILD_DIR).expect("run by a_kill_9_loses_nothing_answered, which names the folder");
    let round: u64 = std::env::var(CHILD_ROUND).ok().and_then(|r| r.parse().ok()).expect("the round");
    let stores = open(std::path::Path::new(&dir)).await;
    ack("open");
    let writers: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(write(stores.clone(), round, w))).collect();
    let all = futures_util::future::join_all(writers);
    assert!(tokio::time::timeout(CHILD_LIFETIME, all).await.is_err(), "the writers run until the process is killed");
}

/// What the child acknowledged, by kind.
#[derive(Default)]
struct Acked(BTreeMap<String, Vec<String>>);

impl Acked {
    fn add(&mut self, line: &str) {
        // The harness's own `test crash::crash_child ... ` may precede the first one.
        let ack = line.find("ack ").map(|at| &line[at + 4..]);
        if let Some((kind, id)) = ack.and_then(|l| l.split_once(' ')) {
            self.0.entry(kind.to_string()).or_default().push(id.to_string());
        }
    }

    fn of(&self, kind: &str) -> &[String] {
        self.0.get(kind).map_or(&[], Vec::as_slice)
    }

    fn has(&self, kind: &str, id: &str) -> bool {
        self.of(kind).iter().any(|i| i == id)
    }

    fn count(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }
}

/// A cheap pseudo-random sequence (xorshift), seeded from the clock and printed on failure.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Checks everything `acked` says against the reopened file.
async fn check(stores: &SqliteStores, acked: &Acked, round: u64, seed: u64) {
    let now = Timestamp::now();
    let idem = stores.idempotency();
    for id in acked.of("admitted") {
        let key = IdempotencyKey::new("c-1", id.as_str());
        match idem.admit(&key, fp(id), Attempt::fresh(), now).await {
            Ok(Admission::Replay(result)) => {
                assert_eq!(result, InvokeResult::ok(json!({"id": id}), None), "seed {seed}: {id}'s stored result")
            }
            Ok(Admission::TakeOver(_)) => {
                assert!(!acked.has("settled", id), "seed {seed}: {id} was settled, yet it is in flight")
            }
            other => panic!("seed {seed}: {id} was admitted, yet it answers {other:?}"),
        }
    }
    let conf = stores.confirmations();
    for id in acked.of("inserted") {
        let record = conf.get(id, now).await.unwrap().unwrap_or_else(|| panic!("seed {seed}: {id} was inserted"));
        if acked.has("consumed", id) {
            assert!(matches!(record.state, ConfirmationState::Consumed { .. }), "seed {seed}: {id} was consumed");
            assert_eq!(conf.consume(id, &binding(id), now).await.unwrap(), Err(Rejection::Consumed));
        } else if acked.has("approved", id) {
            assert!(
                matches!(record.state, ConfirmationState::Approved { .. } | ConfirmationState::Consumed { .. }),
                "seed {seed}: {id} was approved, yet it is {:?}",
                record.state
            );
        }
    }
    let tasks = stores.tasks();
    for id in acked.of("created") {
        let task = tasks.get(id, now).await.unwrap().unwrap_or_else(|| panic!("seed {seed}: task {id} was created"));
        if acked.has("finished", id) {
            assert_eq!((task.status, task.payload), (TaskStatus::Completed, Some(json!({"id": id}))), "seed {seed}");
        }
    }
    let trail = stores.audit().recent(1_000_000).await.unwrap();
    let audited: std::collections::HashSet<_> = trail.iter().filter_map(|e| e.invocation_id.clone()).collect();
    for id in acked.of("audited") {
        assert!(audited.contains(id), "seed {seed}: audit event {id} was recorded");
    }
    // The round's rate budget: what was acknowledged plus what is left is at most the budget (a
    // crash hands out no fresh budget).
    let limiter = stores
        .rate_limiter(RateBudgets { per_consumer: Some(quota()), ..RateBudgets::default() }, Arc::new(SystemClock));
    let consumer = Consumer::anonymous(format!("crash-{round}"));
    let allowed = acked.of("allowed").iter().filter(|id| id.starts_with(&format!("r{round}-"))).count();
    let mut left = 0;
    while left <= BUDGET as usize {
        let call = CallInfo::new(&consumer, "orders.cancel", "orders", Effect::Destructive, false);
        match limiter.acquire(call, Timestamp::now()).await {
            RateDecision::Allow(_) => left += 1,
            _ => break,
        }
    }
    assert!(allowed + left <= BUDGET as usize, "seed {seed}: {allowed} allowed before the crash, {left} left after");
}

/// Whether the child's `line` says it opened the file (the test harness prints its own lines
/// first, the first acknowledgement on the line of the harness's `test … ... `).
fn opens(line: &str) -> bool {
    line.ends_with("ack open")
}

/// Starts the child of `round` on `folder`, its output piped.
fn child(folder: &Folder, round: u64) -> std::process::Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["crash::crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, folder.path())
        .env(CHILD_ROUND, round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts")
}

/// One process per file, between processes too (the lock is the operating system's then): while
/// the child holds the file, opening it here is refused; once the child is killed, it opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_another_process_holds_is_refused() {
    let folder = Folder::new("held-elsewhere");
    let mut holder = child(&folder, 0);
    let mut lines = BufReader::new(holder.stdout.take().expect("its output")).lines();
    // Read on, so that the child keeps writing (it ends when nobody reads).
    let opened = lines.by_ref().map_while(Result::ok).find(|line| opens(line));
    assert!(opened.is_some(), "the child opens the file");
    let impatient = SqliteConfig { lock_timeout: Duration::from_millis(200), ..SqliteConfig::default() };
    let refused = SqliteStores::open(folder.path().join("store.db"), impatient).await.expect_err("held by the child");
    assert!(refused.is_in_use(), "{refused}");
    holder.kill().expect("SIGKILL");
    holder.wait().expect("the child ends");
    drop(lines);
    drop(open(folder.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_loses_nothing_answered() {
    let folder = Folder::new("crash");
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1;
    let mut random = Random(seed);
    let mut acked = Acked::default();
    let mut killed_while_opening = 0;
    for round in 0..ROUNDS {
        let mut child = child(&folder, round);
        let stdout = child.stdout.take().expect("its output");
        let (lines, received) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut round_acks = Vec::new();
        if round % 4 == 3 {
            // Now and then, before it has even opened the file (or while it migrates).
            std::thread::sleep(Duration::from_millis(random.below(40)));
            killed_while_opening += 1;
        } else {
            loop {
                let line = received.recv_timeout(Duration::from_secs(60)).expect("the child opens the file");
                let opened = opens(&line);
                round_acks.push(line);
                if opened {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20 + random.below(400)));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("the child ends");
        reader.join().expect("the reader ends");
        round_acks.extend(received.try_iter());
        for line in &round_acks {
            acked.add(line);
        }
        let stores = open(folder.path()).await;
        check(&stores, &acked, round, seed).await;
        drop(stores);
        let raw = rusqlite::Connection::open(folder.path().join("store.db")).expect("the file opens");
        let integrity: String = raw.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("checked");
        assert_eq!(integrity, "ok", "seed {seed}: round {round}");
    }
    assert!(acked.of("settled").len() > 10, "seed {seed}: the child wrote ({} acknowledgements)", acked.count());
    assert!(killed_while_opening > 0);
}
