//! Durable state for a single agent-surface server, without a database server: every store in
//! one SQLite file.
//!
//! # Overview
//!
//! The memory stores lose everything when their process ends: a pending approval, the stored
//! result that stops a retried write from running twice, a running task. This crate keeps them in
//! one file on the server's disk, and implements every store trait of `agent-surface-policy`:
//!
//! - [`SqliteIdempotencyStore`] — `IdempotencyStore`: one execution per `(consumerKey,
//!   invocationId)`, fencing tokens, cancelled attempts; a call in flight when the process died is
//!   taken over by its retry and answered as an unknown outcome, never run twice silently;
//! - [`SqliteConfirmationStore`] — `ConfirmationStore`: quorums and role slots, single use,
//!   reinstatement, relayed confirmations, expiry claims and listings;
//! - [`SqliteTaskStore`] — `TaskStore`;
//! - [`SqliteRateLimiter`] — `RateLimiter`: GCRA budgets, all-or-nothing, kept across restarts;
//! - [`SqliteAuditSink`] — `AuditSink`, with `recent` for an approval inbox;
//! - [`SqliteInboxStore`] — `inbox::InboxStore`: the approval inbox's sessions (kept across
//!   restarts), used form tokens and form-signing keys.
//!
//! [`SqliteStores::bundle`] gives all but the audit sink as the `Stores` that
//! `agent_surface_registry::ServiceBuilder::stores` takes.
//!
//! # Durability
//!
//! **An operation is answered only once its change is committed**, and a commit is synced to
//! disk before it returns (SQLite's write-ahead log with `synchronous=FULL`,
//! [`Durability::PowerLoss`], the default). So a `kill -9` (or a power loss) at any moment loses
//! nothing a caller was told: an approval recorded, evidence consumed, a result stored, a task
//! created or finished, an audit event written. What was not yet answered may or may not be there
//! after the crash, as with any database; a call in flight at the crash is the idempotency store's
//! *lapsed* record (see [`SqliteIdempotencyStore`]). [`Durability::ProcessCrash`] skips the sync
//! (`synchronous=NORMAL`): still safe against a crash of the process, not of the machine.
//!
//! Each operation is one transaction, atomic as a Redis script is: one thread owns the
//! connection and runs the operations in the order they arrive, so nothing interleaves with one;
//! the operations that queued up meanwhile share one commit (group commit), which is what makes
//! a synced commit per call affordable under load. Async callers never wait on the disk: they
//! send the operation to that thread and await its answer, within [`SqliteConfig::op_timeout`]
//! (past it, `StoreError::Unavailable`, which the engines answer as a transient failure: a call
//! never runs without the store's word).
//!
//! # One process per file
//!
//! The stores report `Reach::Durable`: they keep the guarantees of the memory stores for the
//! calls of one process, and add durability — not sharing between replicas (use
//! `agent-surface-redis` for that). Because their records outlive the process, the confirmation
//! engine binds evidence to the instance, not to its registration (as for a shared store): the
//! instances a restarted server mounts have new registration ids, and an approval asked before
//! the restart still holds, once, after it. Opening takes an exclusive lock on the file (SQLite's
//! `locking_mode=EXCLUSIVE`), held until every handle is dropped: a second process that opens the
//! same file waits [`SqliteConfig::lock_timeout`] and is refused ([`OpenError::is_in_use`]). Two
//! processes on one file could share it through SQLite's own locking, but then every leader would
//! need a lease renewed on disk and every follower would poll, which is the shared stores'
//! design; one process per file keeps leases that hold until settled, followers woken in memory,
//! and a file whose every in-flight record belongs to a dead process when it is opened.
//!
//! # Why SQLite
//!
//! SQLite is the most widely deployed transactional engine, with a file format that is stable
//! and documented for the long term, crash safety tested far beyond what a young engine has seen
//! (its test suite simulates crashes and power loss at every write), and tools anyone can open a
//! data file with (`sqlite3`). `rusqlite`'s `bundled` feature compiles it from source with the C
//! compiler Rust builds already need, so nothing is installed on a machine or in CI. The pure-Rust
//! embedded engines (`redb`, `fjall`, `sled`) avoid the C build but are younger, have changed
//! their file formats between major versions, and would make this crate write its own indexes
//! for the listings (pending and expired confirmations by deadline) that SQL gives.
//!
//! # Files and time
//!
//! The file is the path given to [`SqliteStores::open`] (its folder is created; a new file is
//! readable and writable by its owner only, mode `0600`, and so is the log SQLite writes beside
//! it), with SQLite's `-wal` file beside it; back both up together, or copy with `sqlite3 FILE .backup`. Opening
//! applies the schema's migrations (versioned, idempotent, refusing a file of a later version)
//! and every row carries the format version of what it holds. Time is what the registry's clock
//! says: every operation is given `now`, as with the memory stores, and the store never reads a
//! clock of its own. Expired rows are deleted in the background, a bounded number at a time; the
//! file is bounded by [`SqliteConfig::max_bytes`] (past it, writes fail closed).
//!
//! # Examples
//!
//! ```no_run
//! use agent_surface_registry::ServiceBuilder;
//! use agent_surface_sqlite::{SqliteConfig, SqliteStores};
//!
//! # async fn run() -> Result<(), agent_surface_sqlite::OpenError> {
//! let stores = SqliteStores::open("/var/lib/shop/agent-surface.db", SqliteConfig::default()).await?;
//! let service = ServiceBuilder::new().stores(stores.bundle()).audit(std::sync::Arc::new(stores.audit())).build();
//! # let _ = service;
//! # Ok(())
//! # }
//! ```

mod audit;
mod confirmation;
mod db;
mod idempotency;
mod inbox;
mod memory;
mod rate;
mod schema;
mod sweep;
mod task;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::{Clock, RateBudgets, RateLimiter, Stores};
use rusqlite::Connection;

/// The `rusqlite` crate the stores are built on, for an application that keeps its own data in
/// the same file ([`SqliteStores::transaction`]).
pub use rusqlite;

pub use audit::SqliteAuditSink;
pub use confirmation::SqliteConfirmationStore;
pub use idempotency::SqliteIdempotencyStore;
pub use inbox::SqliteInboxStore;
pub use rate::SqliteRateLimiter;
pub use task::SqliteTaskStore;

/// What survives a crash once an operation was answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Every commit is synced to disk before it is answered (`synchronous=FULL`): a crash of the
    /// process, of the operating system or of the machine loses nothing answered.
    #[default]
    PowerLoss,
    /// A commit is handed to the operating system before it is answered, and synced at
    /// checkpoints (`synchronous=NORMAL`): a crash of the process loses nothing answered, a
    /// crash of the operating system or a power loss may lose the last commits.
    ProcessCrash,
}

/// How the stores keep the file. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    /// What survives a crash (default [`Durability::PowerLoss`]).
    pub durability: Durability,
    /// The time budget of one store operation, waiting for the database thread included; past
    /// it, `StoreError::Unavailable`. Default 2 s.
    pub op_timeout: Duration,
    /// How long opening waits for another holder of the file (a process still ending, or this
    /// process's stores of the same file not yet dropped) before it is refused. Default 5 s.
    pub lock_timeout: Duration,
    /// How long a confirmation is kept after it expires, so that a late retry learns `consumed`
    /// or `denied` rather than `expired`. Default one hour.
    pub retention: Duration,
    /// How long a call that was in flight when its process died is remembered after its
    /// admission: within it, its retry learns that the outcome is unknown rather than running as
    /// a new call. At least one minute (a shorter one would forget a crashed call before its
    /// process is back, and its retry would run it again). Default one day.
    pub in_flight_retention: Duration,
    /// The largest idempotency result stored, in bytes of JSON; a larger one reaches its caller,
    /// but the record keeps `EXECUTION_FAILED {reason: output-too-large}`. Default 1 MiB.
    pub max_result_bytes: usize,
    /// The largest task payload stored, in bytes; a larger one is refused with
    /// `StoreError::Full` (the adapter stores a smaller one). Default 1 MiB.
    pub max_task_payload_bytes: usize,
    /// The most bytes the file may hold (rounded down to whole pages); past it, writes fail
    /// with `StoreError::Unavailable` (calls fail closed) until expired rows are deleted.
    /// Default 1 GiB.
    pub max_bytes: u64,
    /// The most audit events kept; the oldest go first. Default 100 000.
    pub audit_max_len: usize,
}

impl Default for SqliteConfig {
    fn default() -> SqliteConfig {
        SqliteConfig {
            durability: Durability::PowerLoss,
            op_timeout: Duration::from_secs(2),
            lock_timeout: Duration::from_secs(5),
            retention: Duration::from_secs(3600),
            in_flight_retention: Duration::from_secs(24 * 3600),
            max_result_bytes: 1024 * 1024,
            max_task_payload_bytes: 1024 * 1024,
            max_bytes: 1 << 30,
            audit_max_len: 100_000,
        }
    }
}

impl SqliteConfig {
    fn check(&self) -> Result<(), OpenError> {
        let bad = |what: &str| Err(OpenError::invalid(format!("invalid SQLite store configuration: {what}")));
        if self.op_timeout.is_zero() {
            return bad("op_timeout must be positive");
        }
        if self.max_bytes < 1 << 20 {
            return bad("max_bytes must be at least 1 MiB");
        }
        if self.in_flight_retention < Duration::from_secs(60) {
            return bad("in_flight_retention must be at least one minute");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenFailure {
    Invalid,
    InUse,
    Io,
}

/// Why [`SqliteStores::open`] failed: a configuration that cannot keep its promises, a file
/// another process holds, a file of another program or of a later version of this crate, or an
/// I/O error.
#[derive(Debug)]
pub struct OpenError {
    kind: OpenFailure,
    message: String,
}

impl OpenError {
    fn invalid(message: String) -> OpenError {
        OpenError { kind: OpenFailure::Invalid, message }
    }

    fn io(message: String) -> OpenError {
        OpenError { kind: OpenFailure::Io, message }
    }

    /// Whether another process (or stores of this process not yet dropped) holds the file.
    pub fn is_in_use(&self) -> bool {
        self.kind == OpenFailure::InUse
    }

    fn of_sql(path: &Path, e: &rusqlite::Error) -> OpenError {
        let busy = matches!(e, rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked));
        if busy {
            return OpenError {
                kind: OpenFailure::InUse,
                message: format!("the store file {} is in use by another process", path.display()),
            };
        }
        OpenError::io(format!("cannot open the store file {}: {e}", path.display()))
    }
}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> OpenError {
        OpenError::io(format!("cannot open the store file: {e}"))
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

/// The stores of one file (cheap to clone; the file stays open, and locked, until every clone and
/// every store made from it is dropped).
#[derive(Clone)]
pub struct SqliteStores {
    db: db::Db,
    config: Arc<SqliteConfig>,
    path: Arc<PathBuf>,
}

impl fmt::Debug for SqliteStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStores").field("path", &self.path).field("config", &self.config).finish_non_exhaustive()
    }
}

impl SqliteStores {
    /// Opens (or creates) the store file at `path`, creating its folder: takes the file's lock,
    /// applies the schema's migrations, and marks the calls that were in flight when the file was
    /// last used as lapsed (their process has ended). How many there were is a warning on the
    /// operator channel, kept until a log exists when none records it yet
    /// ([`agent_surface_policy::wiring`]; `Serve` says it when it starts).
    pub async fn open(path: impl AsRef<Path>, config: SqliteConfig) -> Result<SqliteStores, OpenError> {
        config.check()?;
        let path = path.as_ref().to_path_buf();
        let (for_thread, settings) = (path.clone(), config.clone());
        let db = db::Db::start(config.op_timeout, move || open_file(&for_thread, &settings)).await?;
        Ok(SqliteStores { db, config: Arc::new(config), path: Arc::new(path) })
    }

    /// The idempotency store.
    pub fn idempotency(&self) -> SqliteIdempotencyStore {
        SqliteIdempotencyStore::new(self.clone())
    }

    /// The confirmation store.
    pub fn confirmations(&self) -> SqliteConfirmationStore {
        SqliteConfirmationStore::new(self.clone())
    }

    /// The task store.
    pub fn tasks(&self) -> SqliteTaskStore {
        SqliteTaskStore::new(self.clone())
    }

    /// The approval inbox's store: its sessions (which survive a restart), used form tokens and
    /// form-signing keys.
    pub fn inbox(&self) -> SqliteInboxStore {
        SqliteInboxStore::new(self.clone())
    }

    /// The audit sink.
    pub fn audit(&self) -> SqliteAuditSink {
        SqliteAuditSink::new(self.clone())
    }

    /// A rate limiter with these budgets, measuring on `clock` (the registry's).
    pub fn rate_limiter(&self, budgets: RateBudgets, clock: Arc<dyn Clock>) -> SqliteRateLimiter {
        SqliteRateLimiter::new(self.clone(), budgets, clock)
    }

    /// Every store of a service in this file, as one bundle (idempotency records,
    /// confirmations, tasks, the approval inbox's sessions, and the rate limiter of the service's budgets): what
    /// `agent_surface_registry::ServiceBuilder::stores` takes. The audit trail is apart
    /// ([`audit`](Self::audit)), as the builder takes it apart.
    pub fn bundle(&self) -> Stores {
        let stores = self.clone();
        Stores::new(
            Arc::new(self.idempotency()),
            Arc::new(self.confirmations()),
            Arc::new(self.tasks()),
            move |budgets, clock| -> Arc<dyn RateLimiter> { Arc::new(stores.rate_limiter(budgets, clock)) },
        )
        .with_inbox(Arc::new(self.inbox()))
    }

    /// Runs `f` on the database thread inside one of its transactions, for the application's own
    /// tables in the same file: what `f` changed is committed — and synced, as the stores'
    /// changes are — before the answer, and undone when `f` fails (its error, and any other
    /// failure, is `StoreError::Unavailable`, text for the operator channel). Nothing else runs
    /// while `f` does, so keep it short, and never begin, commit or roll back in it. Keep the
    /// application's tables apart from the stores' (`idem`, `conf`, `conf_relay`, `task`, `rate`,
    /// `audit`, `inbox_session`, `inbox_nonce`, `inbox_key`): prefix them, for example `app_`, and create them with `IF NOT EXISTS`.
    pub async fn transaction<T, F>(&self, f: F) -> Result<T, agent_surface_policy::StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.db.run(move |cx| f(cx.conn).map_err(db::Fail::from)).await
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration.
    pub fn config(&self) -> &SqliteConfig {
        &self.config
    }
}

/// Opens the file on the database thread: pragmas, lock, migrations, recovery.
fn open_file(path: &Path, config: &SqliteConfig) -> Result<(Connection, memory::Memory), OpenError> {
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)
            .map_err(|e| OpenError::io(format!("cannot create the folder {}: {e}", folder.display())))?;
    }
    // A new file is readable by its owner only (SQLite gives its log the file's mode): it holds
    // pending approvals, stored results and the key that seals MCP approval rounds. An existing
    // file keeps the mode it has. (SQLite's names that are not files, `:memory:` and `file:`
    // URIs, are left to it.)
    #[cfg(unix)]
    if path.as_os_str() != ":memory:" && !path.to_string_lossy().starts_with("file:") {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(OpenError::io(format!("cannot create the store file {}: {e}", path.display()))),
        }
    }
    let sql = |e: rusqlite::Error| OpenError::of_sql(path, &e);
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(config.lock_timeout).map_err(sql)?;
    // Exclusive before the first access: the lock, once taken, is held until the connection
    // closes, and the log's index lives in this process's memory (no shared-memory file).
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE").map_err(sql)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::io(format!("the store file {} cannot use a write-ahead log ({mode})", path.display())));
    }
    let synchronous = match config.durability {
        Durability::PowerLoss => "FULL",
        Durability::ProcessCrash => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous).map_err(sql)?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(sql)?;
    let pages = i64::try_from(config.max_bytes).unwrap_or(i64::MAX) / page.max(512);
    conn.pragma_update(None, "max_page_count", pages).map_err(sql)?;
    conn.execute_batch("BEGIN IMMEDIATE").map_err(sql)?;
    let recovered = (|| {
        schema::migrate(&conn).map_err(|refusal| match refusal {
            schema::Refusal::Sql(e) => sql(e),
            schema::Refusal::Foreign => OpenError::invalid(format!(
                "{} is not an agent-surface store file (another program's database?)",
                path.display()
            )),
            schema::Refusal::Newer(version) => OpenError::invalid(format!(
                "{} was written by a later version of agent-surface-sqlite (schema {version}; this build knows up to {})",
                path.display(),
                schema::current()
            )),
        })?;
        let lapsed = idempotency::lapse_all(&conn).map_err(sql)?;
        let last_token = idempotency::last_token(&conn).map_err(sql)?;
        Ok((lapsed, last_token))
    })();
    let (lapsed, last_token) = match recovered {
        Ok(found) => found,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    };
    conn.execute_batch("COMMIT").map_err(sql)?;
    if lapsed > 0 {
        // Said at open, which is usually before any log exists: kept for the log installed
        // later (`Serve` says it), as the other stores' warnings at connect are.
        let calls = if lapsed == 1 { "1 call was" } else { &format!("{lapsed} calls were") };
        agent_surface_policy::wiring::warn(&format!(
            "the SQLite store file {}: {calls} in flight when it was last used (the process ended first); \
             their retries learn that the outcome is unknown rather than run again",
            path.display()
        ));
    }
    Ok((conn, memory::Memory::new(last_token)))
}

/// Milliseconds since the epoch as SQLite's integer.
fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.unix_millis()).unwrap_or(i64::MAX)
}
