//! The database thread: one SQLite connection, owned by one thread, that runs every store
//! operation in the order it was sent, a batch of them per transaction (group commit).
//!
//! An operation is a closure over a [`Cx`] (the connection and the stores' in-memory part); the
//! async caller sends it over a bounded queue and awaits its answer, so no runtime thread ever
//! waits on the disk. The thread takes the operations queued (up to [`MAX_BATCH`]), and runs them
//! in one transaction, each under a savepoint of its own:
//!
//! - an operation that fails (an SQL error, a refusal such as `LeaseLost`, a panic) is rolled back
//!   to its savepoint, alone: the others of the batch are untouched;
//! - the batch commits once; with `synchronous=FULL` the commit returns once the write-ahead log
//!   is synced to disk;
//! - only then are the answers sent: **no caller learns of a change that is not committed**. A
//!   failed commit fails every operation of the batch (`StoreError::Unavailable`), none of which
//!   then took effect.
//!
//! What an operation must do in memory once its change is committed (hand a result to the calls
//! waiting on it) it leaves as a hook, run after the commit with whether it committed.
//!
//! Because one thread runs everything in order, an operation sees every operation sent before
//! it, and nothing interleaves with it: each is atomic, as a Redis script is.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use agent_surface_core::Timestamp;
use agent_surface_policy::StoreError;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::memory::Memory;

/// The most operations one transaction carries.
const MAX_BATCH: usize = 256;

/// How many operations may wait for the database thread; a caller past it waits for room
/// (within its time budget).
const QUEUE: usize = 4096;

/// How often expired records are deleted (inside a batch's transaction, a bounded number per
/// table).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Why an operation failed.
pub(crate) enum Fail {
    /// SQLite failed (I/O, a full disk or budget, a constraint).
    Sql(rusqlite::Error),
    /// A refusal the store's semantics call for (`LeaseLost`, `AttemptCancelled`, `Full`), or a
    /// record that does not read.
    Store(StoreError),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Fail {
        Fail::Sql(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Store(e)
    }
}

impl Fail {
    fn into_store_error(self) -> StoreError {
        match self {
            Fail::Store(e) => e,
            Fail::Sql(e) => sql_error(&e),
        }
    }
}

/// An SQLite failure as the stores report it (operator channel only).
pub(crate) fn sql_error(e: &rusqlite::Error) -> StoreError {
    let full = matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull);
    if full {
        StoreError::Unavailable("sqlite: the database is full (its disk, or `SqliteConfig::max_bytes`)".to_string())
    } else {
        StoreError::Unavailable(format!("sqlite: {e}"))
    }
}

/// A stored record that does not read (operator channel only).
pub(crate) fn corrupt(what: &str) -> Fail {
    Fail::Store(StoreError::Unavailable(format!("sqlite: a stored record does not read ({what})")))
}

/// What runs after the batch's commit, told whether it committed.
pub(crate) type Hook = Box<dyn FnOnce(&mut Memory, bool) + Send>;

/// What an operation works with: the connection, inside the batch's transaction, and the
/// stores' in-memory part.
pub(crate) struct Cx<'a> {
    /// The connection (a transaction is open).
    pub(crate) conn: &'a Connection,
    /// The in-memory part of the stores (followers waiting on a call, cancelled attempts).
    pub(crate) mem: &'a mut Memory,
    hooks: &'a mut Vec<Hook>,
    latest: &'a mut Timestamp,
}

impl Cx<'_> {
    /// Runs `hook` after the batch ends, told whether this operation's change was committed.
    pub(crate) fn after(&mut self, hook: impl FnOnce(&mut Memory, bool) + Send + 'static) {
        self.hooks.push(Box::new(hook));
    }

    /// Notes the registry's `now`, which sweeps measure expiry against (the store has no clock
    /// of its own).
    pub(crate) fn saw(&mut self, now: Timestamp) {
        if now > *self.latest {
            *self.latest = now;
        }
    }
}

/// One queued operation.
trait Job: Send {
    /// Runs it; `false` when it failed (it is then rolled back to its savepoint).
    fn run(&mut self, cx: &mut Cx<'_>) -> bool;
    /// Sends its answer: its own, or `failed` when the batch did not commit.
    fn deliver(self: Box<Self>, failed: Option<&StoreError>);
    /// Its failure, once it ran and failed.
    fn error(&self) -> Option<StoreError>;
}

struct Op<T, F> {
    f: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Op<T, F>
where
    T: Send,
    F: FnOnce(&mut Cx<'_>) -> Result<T, Fail> + Send,
{
    fn run(&mut self, cx: &mut Cx<'_>) -> bool {
        let Some(f) = self.f.take() else { return false };
        let outcome = f(cx).map_err(Fail::into_store_error);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn error(&self) -> Option<StoreError> {
        self.outcome.as_ref().and_then(|o| o.as_ref().err().cloned())
    }

    fn deliver(self: Box<Self>, failed: Option<&StoreError>) {
        let answer = match (failed, self.outcome) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(outcome)) => outcome,
            (None, None) => Err(StoreError::Unavailable("sqlite: the operation panicked".to_string())),
        };
        // A caller that stopped waiting (its budget ran out) no longer listens.
        let _ = self.reply.send(answer);
    }
}

/// The handle to the database thread (cheap to clone). The thread ends, and the file's lock is
/// released, once every handle is dropped.
#[derive(Clone)]
pub(crate) struct Db {
    queue: mpsc::Sender<Box<dyn Job>>,
    op_timeout: Duration,
}

impl Db {
    /// Starts the database thread, which opens the connection with `open` (the file, its
    /// pragmas, the migrations: blocking work, kept off the caller's runtime) and then serves
    /// the stores' operations.
    pub(crate) async fn start<E>(
        op_timeout: Duration,
        open: impl FnOnce() -> Result<(Connection, Memory), E> + Send + 'static,
    ) -> Result<Db, E>
    where
        E: From<std::io::Error> + Send + 'static,
    {
        let (queue, jobs) = mpsc::channel(QUEUE);
        let (opened, answer) = oneshot::channel();
        std::thread::Builder::new().name("agent-surface-sqlite".to_string()).spawn(move || match open() {
            Ok((conn, mem)) => {
                let _ = opened.send(Ok(()));
                worker(conn, mem, jobs);
            }
            Err(e) => {
                let _ = opened.send(Err(e));
            }
        })?;
        match answer.await {
            Ok(Ok(())) => Ok(Db { queue, op_timeout }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::other("the database thread stopped while opening the file").into()),
        }
    }

    /// Runs `f` on the database thread inside a transaction; its answer once committed.
    /// Failures, a thread that is gone, and an answer later than the time budget are
    /// `StoreError::Unavailable`.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Cx<'_>) -> Result<T, Fail> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Op { f: Some(f), outcome: None, reply });
        let asked = async {
            self.queue.send(job).await.map_err(|_| gone())?;
            answer.await.map_err(|_| gone())?
        };
        match tokio::time::timeout(self.op_timeout, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(StoreError::Unavailable(format!("sqlite: no answer within {:?}", self.op_timeout))),
        }
    }
}

fn gone() -> StoreError {
    StoreError::Unavailable("sqlite: the database thread has stopped".to_string())
}

fn worker(conn: Connection, mut mem: Memory, mut jobs: mpsc::Receiver<Box<dyn Job>>) {
    let mut latest = Timestamp::from_unix_millis(0);
    let mut last_sweep = Instant::now();
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = jobs.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let sweep = last_sweep.elapsed() >= SWEEP_EVERY;
        if sweep {
            last_sweep = Instant::now();
        }
        run_batch(&conn, &mut mem, &mut latest, &mut batch, sweep);
    }
    // Every handle is gone: closing the connection checkpoints the log and releases the lock.
    if let Err((_, e)) = conn.close() {
        tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "the SQLite store did not close cleanly");
    }
}

fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Runs `batch` in one transaction (see the module docs) and answers every operation.
///
/// Some failures (a full disk or budget, an I/O error) make SQLite roll the whole transaction
/// back by itself: the operations run so far in it are then answered with that failure (their
/// changes are gone), and the rest of the batch goes on in a transaction of its own — never in
/// autocommit mode, where each statement would commit alone.
fn run_batch(conn: &Connection, mem: &mut Memory, latest: &mut Timestamp, batch: &mut Vec<Box<dyn Job>>, sweep: bool) {
    let mut pending: std::collections::VecDeque<Box<dyn Job>> = batch.drain(..).collect();
    let mut sweep = sweep;
    while !pending.is_empty() {
        if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
            let failed = sql_error(&e);
            for job in pending.drain(..) {
                job.deliver(Some(&failed));
            }
            return;
        }
        let changes_before = conn.total_changes();
        let mut hooks: Vec<Hook> = Vec::new();
        let mut done: Vec<Box<dyn Job>> = Vec::with_capacity(pending.len());
        let mut broken: Option<StoreError> = None;
        while let Some(mut job) = pending.pop_front() {
            let mut own: Vec<Hook> = Vec::new();
            let ok = exec(conn, "SAVEPOINT op").is_ok()
                && {
                    let mut cx = Cx { conn, mem: &mut *mem, hooks: &mut own, latest: &mut *latest };
                    catch_unwind(AssertUnwindSafe(|| job.run(&mut cx))).unwrap_or_else(|_| {
                    tracing::error!(target: "agent_surface::store", "a SQLite store operation panicked; it was rolled back");
                    false
                })
                };
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back.
                broken =
                    Some(job.error().unwrap_or_else(|| {
                        StoreError::Unavailable("sqlite: the transaction was rolled back".to_string())
                    }));
                for hook in own {
                    hook(mem, false);
                }
                done.push(job);
                break;
            }
            if ok && exec(conn, "RELEASE op").is_ok() {
                hooks.append(&mut own);
            } else {
                // Undo this operation alone; an error here leaves the transaction to the commit.
                let _ = exec(conn, "ROLLBACK TO op").and_then(|()| exec(conn, "RELEASE op"));
                for hook in own {
                    hook(mem, false);
                }
            }
            done.push(job);
        }
        if let Some(failed) = broken {
            tracing::error!(target: "agent_surface::store", error = %failed, "a SQLite store transaction was rolled back");
            for hook in hooks {
                hook(mem, false);
            }
            for job in done {
                job.deliver(Some(&failed));
            }
            continue;
        }
        if std::mem::take(&mut sweep) {
            crate::sweep::run(conn, *latest);
        }
        // Only in a transaction that writes anyway: a read-only one (a replay, a page of the
        // inbox) must not start failing when the disk that orphaned them is still full.
        let orphans = if conn.total_changes() > changes_before { persist_orphans(conn, mem) } else { Vec::new() };
        let committed = exec(conn, "COMMIT");
        let failed = match committed {
            Ok(()) => None,
            Err(e) => {
                tracing::error!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "a SQLite store transaction did not commit");
                if !conn.is_autocommit() {
                    let _ = exec(conn, "ROLLBACK");
                }
                Some(sql_error(&e))
            }
        };
        if failed.is_none() {
            mem.forget_orphans(orphans);
        }
        for hook in hooks {
            hook(mem, failed.is_none());
        }
        for job in done {
            job.deliver(failed.as_ref());
        }
    }
}

/// The most orphaned records one transaction writes as lapsed.
const ORPHANS_PER_BATCH: usize = 64;

/// Writes orphaned records as lapsed in the open transaction, under a savepoint of its own (a
/// failure, such as the full disk that orphaned them, undoes this alone and keeps them in memory).
fn persist_orphans(conn: &Connection, mem: &Memory) -> Vec<(agent_surface_policy::idempotency::IdempotencyKey, u64)> {
    if mem.orphaned.is_empty() {
        return Vec::new();
    }
    let written = exec(conn, "SAVEPOINT orphans")
        .and_then(|()| mem.persist_orphans(conn, ORPHANS_PER_BATCH))
        .and_then(|written| exec(conn, "RELEASE orphans").map(|()| written));
    written.unwrap_or_else(|e| {
        let _ = exec(conn, "ROLLBACK TO orphans").and_then(|()| exec(conn, "RELEASE orphans"));
        tracing::debug!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "orphaned records not written as lapsed yet");
        Vec::new()
    })
}
