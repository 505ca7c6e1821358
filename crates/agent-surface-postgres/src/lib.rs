//! Shared, durable state for agent-surface replicas on PostgreSQL.
//!
//! # Overview
//!
//! Teams that already run PostgreSQL keep their own state there, with the backups and the
//! failover they trust. This crate implements every store trait of `agent-surface-policy` in a
//! schema of that database, shared by every replica that connects to it:
//!
//! - [`PostgresIdempotencyStore`] — `IdempotencyStore`: one execution per `(consumerKey,
//!   invocationId)` across replicas, leases on the database's clock (`clock_timestamp()`),
//!   fencing tokens from a sequence; followers on any replica are woken by `LISTEN/NOTIFY`;
//! - [`PostgresConfirmationStore`] — `ConfirmationStore`: quorums and role slots, single use,
//!   reinstatement, relayed confirmations, expiry claims and listings;
//! - [`PostgresTaskStore`] — `TaskStore`;
//! - [`PostgresRateLimiter`] — `RateLimiter`: GCRA budgets taken all-or-nothing, on the
//!   database's clock;
//! - [`PostgresAuditSink`] — `AuditSink`, with `recent` for an approval inbox;
//! - [`PostgresInboxStore`] — `inbox::InboxStore`: the approval inbox's sessions, used form
//!   tokens and form-signing keys, so that replicas need no sticky routing.
//!
//! [`PostgresStores::bundle`] gives all but the audit sink as the `Stores` that
//! `agent_surface_registry::ServiceBuilder::stores` takes.
//!
//! # Transactions and round trips
//!
//! **Each store operation is one transaction**, and an operation answers only after its commit:
//! with PostgreSQL's default `synchronous_commit = on`, on disk (and on the synchronous standbys,
//! if any). A database that may lose commits (`fsync` or `full_page_writes` off, or
//! `synchronous_commit` off for the service's connections) is named at connect
//! ([`PostgresStores::durability_warnings`]). The common paths are one statement each, so one round
//! trip: an admission (an insert that claims the key unless it is taken or its attempt was
//! cancelled, answering the record as it stands otherwise: a replay is this one read), the started
//! mark, a renewal, a settlement (an update guarded by the fencing token, which notifies the
//! followers in the same statement). A tracked call of a write is three statements: admission,
//! started mark, settlement; a call whose repetition is harmless (an idempotent or read-only
//! capability) is two, its admission writing the mark (`IdempotencyStore::admit_started`).
//! `pg_stat_statements` counts both in `cargo bench -p agent-surface-postgres --bench stores`. The
//! paths that must read before they decide (a follower's admission, a takeover, every confirmation
//! operation) read the row `FOR UPDATE` inside a transaction, so two replicas never interleave on
//! one record.
//!
//! # Clocks
//!
//! Leases, the time to live of idempotency records and rate budgets are measured on the
//! database's clock (`clock_timestamp()`), so replicas whose clocks disagree still agree on when
//! a lease lapsed. Confirmations and tasks carry the times the registry gives them (`now`), as
//! the other stores do: their deadlines are part of the record an agent is shown.
//!
//! # Followers
//!
//! A follower (an identical call while its leader runs, on any replica) waits for a notification
//! on the channel `{schema}_idem`, sent by the settlement's own statement and delivered when it
//! commits; each replica keeps one connection that listens, and wakes the followers it serves.
//! Without a notification a follower looks at the record again when the leader's lease would
//! lapse (a leader that died sends nothing), and at once whenever the listening connection was
//! lost and made again (a notification may have been missed meanwhile): there is no polling
//! while a leader is alive and the listener connected.
//!
//! # Failing closed
//!
//! Every operation has a time budget ([`PostgresConfig::op_timeout`], waiting for a pooled
//! connection included); a database that is down, unreachable or slow is a
//! `StoreError::Unavailable` whose text goes to the operator channel only, which the engines turn
//! into a transient failure: a call never runs without the store's word.
//!
//! # Schema
//!
//! Everything lives in one schema ([`PostgresConfig::schema`], default `agent_surface`), so
//! several services share one database, each under a schema of its own. Connecting applies the
//! schema's migrations (versioned, idempotent, under an advisory lock so that replicas starting
//! together apply them once) and refuses a schema written by a later build. Every row carries
//! the format version of what it holds; confirmations and tasks are stored in the shapes of
//! `agent_surface_policy::stored`, as the SQLite store stores them. Expired rows are deleted in
//! the background, a bounded number at a time.
//!
//! # Why `tokio-postgres` and `deadpool-postgres`
//!
//! `tokio-postgres` is the maintained asynchronous driver the rest of the Rust ecosystem builds
//! on (`sqlx`'s PostgreSQL support speaks the same protocol, with a compile-time query checker,
//! a runtime abstraction and macros this crate does not need), and it exposes the listening
//! connection's notifications directly. `deadpool-postgres` adds a small pool with prepared
//! statements cached per connection. Together they build in a few seconds over what the
//! workspace already compiles, need Rust 1.85, and bring no TLS stack: connections are plain
//! TCP or a Unix socket (`host=/var/run/postgresql`); use a local socket, a private network, or
//! a TLS-terminating proxy.
//!
//! # Examples
//!
//! ```no_run
//! use agent_surface_postgres::{PostgresConfig, PostgresStores};
//! use agent_surface_registry::ServiceBuilder;
//!
//! # async fn run() -> Result<(), agent_surface_postgres::ConnectError> {
//! let stores = PostgresStores::connect("postgres://shop@127.0.0.1/shop", PostgresConfig::default()).await?;
//! let service = ServiceBuilder::new().stores(stores.bundle()).audit(std::sync::Arc::new(stores.audit())).build();
//! # let _ = service;
//! # Ok(())
//! # }
//! ```

mod audit;
mod confirmation;
mod idempotency;
mod inbox;
mod listen;
mod rate;
mod schema;
mod sweep;
mod task;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::StoreError;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

/// The `deadpool-postgres` crate whose pool the stores share ([`PostgresStores::pool`]).
pub use deadpool_postgres;
/// The `tokio-postgres` crate the stores are built on.
pub use tokio_postgres;

pub use audit::PostgresAuditSink;
pub use confirmation::PostgresConfirmationStore;
pub use idempotency::PostgresIdempotencyStore;
pub use inbox::PostgresInboxStore;
pub use rate::PostgresRateLimiter;
pub use task::PostgresTaskStore;

/// How the stores use the database. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The schema every table lives in (created when missing): lower-case ASCII letters, digits
    /// and `_`, starting with a letter or `_`, at most 48 bytes. Default `agent_surface`.
    pub schema: String,
    /// The time budget of one store operation, waiting for a pooled connection and connecting
    /// included; past it, `StoreError::Unavailable`. Default 2 s.
    pub op_timeout: Duration,
    /// The most connections a replica opens for its operations (one more listens). Default 16.
    pub pool_size: usize,
    /// How long an idempotency leader holds its record without renewing it, on the database's
    /// clock; the registry renews every third of it while the call runs. It bounds how long a
    /// call whose replica died blocks its retries, and must exceed the longest pause a live
    /// replica may take and a few `op_timeout`s. Default 10 s.
    pub lease: Duration,
    /// How long an idempotency record in flight is kept after its leader's last admission or
    /// renewal when it never settles (its replica died): within it, a retry learns that the
    /// outcome is unknown rather than running as a new call. At least twice `lease`. Default one
    /// day.
    pub in_flight_retention: Duration,
    /// How long a confirmation is kept after it expires, so that a late retry learns `consumed`
    /// or `denied` rather than `expired`. Default one hour.
    pub retention: Duration,
    /// The largest idempotency result stored, in bytes of JSON; a larger one reaches its caller,
    /// but the record keeps `EXECUTION_FAILED {reason: output-too-large}`. Default 1 MiB.
    pub max_result_bytes: usize,
    /// The largest task payload stored, in bytes; a larger one is refused with
    /// `StoreError::Full` (the adapter stores a smaller one). Default 1 MiB.
    pub max_task_payload_bytes: usize,
    /// The most audit events kept; the oldest go first. Default 100 000.
    pub audit_max_len: usize,
    /// How often each replica deletes the rows no operation can see any more (expired records,
    /// confirmations past their retention, full rate buckets), at most 1,000 per table a run.
    /// Reads already treat such rows as absent, so this bounds only the space they take; a
    /// service that expires many rows a second sweeps more often. Positive. Default 10 s.
    pub sweep_every: Duration,
}

impl Default for PostgresConfig {
    fn default() -> PostgresConfig {
        PostgresConfig {
            schema: "agent_surface".to_string(),
            op_timeout: Duration::from_secs(2),
            pool_size: 16,
            lease: Duration::from_secs(10),
            in_flight_retention: Duration::from_secs(24 * 3600),
            retention: Duration::from_secs(3600),
            max_result_bytes: 1024 * 1024,
            max_task_payload_bytes: 1024 * 1024,
            audit_max_len: 100_000,
            sweep_every: Duration::from_secs(10),
        }
    }
}

impl PostgresConfig {
    /// The default configuration in `schema`.
    pub fn with_schema(schema: impl Into<String>) -> PostgresConfig {
        PostgresConfig { schema: schema.into(), ..PostgresConfig::default() }
    }

    fn check(&self) -> Result<(), ConnectError> {
        let bad = |what: &str| Err(ConnectError(format!("invalid PostgreSQL store configuration: {what}")));
        let s = self.schema.as_bytes();
        let schema_ok = !s.is_empty()
            && s.len() <= 48
            && (s[0].is_ascii_lowercase() || s[0] == b'_')
            && s.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        if !schema_ok {
            return bad("schema must be 1 to 48 lower-case letters, digits or '_', not starting with a digit");
        }
        if self.op_timeout.is_zero() {
            return bad("op_timeout must be positive");
        }
        if self.pool_size == 0 {
            return bad("pool_size must be positive");
        }
        if self.lease < Duration::from_millis(3) {
            return bad("lease must be at least 3 ms (it is renewed every third of it)");
        }
        if self.in_flight_retention < self.lease.saturating_mul(2) {
            return bad("in_flight_retention must be at least twice the lease");
        }
        if self.sweep_every.is_zero() {
            return bad("sweep_every must be positive");
        }
        // Beyond this PostgreSQL's arithmetic on the clock, and the stores' own, would overflow.
        let longest = Duration::from_millis(1 << 43);
        for (name, d) in [
            ("op_timeout", self.op_timeout),
            ("lease", self.lease),
            ("in_flight_retention", self.in_flight_retention),
            ("retention", self.retention),
            ("sweep_every", self.sweep_every),
        ] {
            if d > longest {
                return Err(ConnectError(format!(
                    "invalid PostgreSQL store configuration: {name} must be at most 2^43 ms (about 278 years)"
                )));
            }
        }
        Ok(())
    }
}

/// Why [`PostgresStores::connect`] failed: a bad URL, no database answering in time, a schema of
/// another program or of a later build, or a configuration that cannot keep its promises.
#[derive(Debug)]
pub struct ConnectError(String);

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

/// `error` and the causes beneath it, each said once: `tokio-postgres` words a server's refusal
/// `db error` and keeps the server's own words (`password authentication failed for user …`,
/// `database … does not exist`) in its source, and `deadpool` wraps that again.
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// What the stores of one connection share.
struct Inner {
    pool: Pool,
    config: PostgresConfig,
    /// The schema's name, quoted as an identifier.
    schema: String,
    listener: listen::Listener,
    /// Dropped with the stores: the background tasks (listener, sweeper) end.
    _stop: tokio::sync::watch::Sender<()>,
}

/// A pool of connections to one database, shared by the stores built from it (cheap to clone;
/// the background tasks end once every clone and every store made from it is dropped).
#[derive(Clone)]
pub struct PostgresStores {
    inner: Arc<Inner>,
}

impl fmt::Debug for PostgresStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStores").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// A failure inside an operation, before it becomes a `StoreError`.
pub(crate) enum Fail {
    /// The database or the pool failed (the text goes to the operator channel).
    Db(String),
    /// The store's own answer.
    Store(StoreError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        Fail::Db(e.to_string())
    }
}

impl From<deadpool_postgres::PoolError> for Fail {
    fn from(e: deadpool_postgres::PoolError) -> Fail {
        Fail::Db(e.to_string())
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
            Fail::Db(text) => StoreError::Unavailable(format!("postgres: {text}")),
            Fail::Store(e) => e,
        }
    }
}

/// A stored record that does not read (operator channel only).
pub(crate) fn corrupt(what: &str) -> Fail {
    Fail::Store(StoreError::Unavailable(format!("postgres: a stored record does not read ({what})")))
}

impl PostgresStores {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, or the
    /// key-value form `host=… user=… dbname=…`), applies the schema's migrations and starts
    /// listening for settlements.
    pub async fn connect(url: &str, config: PostgresConfig) -> Result<PostgresStores, ConnectError> {
        config.check()?;
        let mut pg: tokio_postgres::Config =
            url.parse().map_err(|e| ConnectError(format!("invalid PostgreSQL URL: {e}")))?;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(config.op_timeout);
        }
        if pg.get_application_name().is_none() {
            pg.application_name("agent-surface");
        }
        let unreachable = |e: &dyn fmt::Display| ConnectError(format!("cannot connect to PostgreSQL: {e}"));
        let refused = |e: &(dyn std::error::Error + 'static)| unreachable(&with_causes(e));
        let manager = Manager::from_config(
            pg.clone(),
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| refused(&e))?;
        let schema = format!("\"{}\"", config.schema);
        let migrate = async {
            let mut client = pool.get().await.map_err(|e| refused(&e))?;
            schema::migrate(&mut client, &config.schema, &schema).await
        };
        tokio::time::timeout(config.op_timeout.max(Duration::from_secs(10)), migrate)
            .await
            .map_err(|_| unreachable(&"timed out"))??;
        let (stop, stopped) = tokio::sync::watch::channel(());
        let channel = format!("{}_idem", config.schema);
        let listener = listen::Listener::start(pg, channel, config.op_timeout, stopped.clone())
            .await
            .map_err(|e| unreachable(&e))?;
        let stores = PostgresStores { inner: Arc::new(Inner { pool, config, schema, listener, _stop: stop }) };
        sweep::start(Arc::downgrade(&stores.inner), stopped);
        for warning in stores.durability_warnings().await {
            // Kept for a log installed later when nothing records it now (`Serve` says it then).
            agent_surface_policy::wiring::warn(&warning);
        }
        Ok(stores)
    }

    /// What in the database's configuration puts the stores' guarantees at risk, as the stores'
    /// own connections see it (the server's setting, the role's or the database's, the URL's
    /// `options`): `fsync` off or `full_page_writes` off (a crash of the machine may corrupt the
    /// database), or `synchronous_commit` off (a crash of the server may lose the last commits).
    /// [`connect`](Self::connect) logs each at `WARN` on `agent_surface::wiring` (kept, when no
    /// subscriber records them yet, for the log `Serve` installs:
    /// [`agent_surface_policy::wiring`]). Empty when the configuration is as advised; a setting
    /// the server does not have, or a read that fails, is logged at `INFO` and not checked.
    ///
    /// Every value of `synchronous_commit` but `off` waits for the local disk. With synchronous
    /// standbys that may be promoted, keep `on` or `remote_apply`: under `local` (or
    /// `remote_write`, should a standby's machine crash) a failover may lose acknowledged
    /// commits, which no setting read here can tell.
    pub async fn durability_warnings(&self) -> Vec<String> {
        let read = async {
            let client = self.client().await?;
            let sql = "SELECT current_setting('fsync', true), current_setting('full_page_writes', true), \
                       current_setting('synchronous_commit', true)";
            let row = client.query_one(sql, &[]).await?;
            let setting = |i: usize| row.try_get::<_, Option<String>>(i);
            Ok::<_, Fail>([
                ("fsync", setting(0)?),
                ("full_page_writes", setting(1)?),
                ("synchronous_commit", setting(2)?),
            ])
        };
        let settings = match self.run(read).await {
            Ok(settings) => settings,
            Err(e) => {
                tracing::info!(target: "agent_surface::wiring", error = %agent_surface_policy::redacted(&e), "cannot read the PostgreSQL configuration; its durability is not checked");
                return Vec::new();
            }
        };
        let mut warnings = Vec::new();
        for (name, value) in settings {
            let Some(value) = value else {
                tracing::info!(target: "agent_surface::wiring", parameter = name, "the database has no such setting; not checked");
                continue;
            };
            if value != "off" {
                continue;
            }
            warnings.push(
                match name {
                    "fsync" => {
                        "PostgreSQL runs with fsync off: a crash of the machine may corrupt the database and lose \
                            what it committed (idempotency records, used approvals), so a retry may run a call again \
                            and an approval may be used twice; set fsync on"
                    }
                    "full_page_writes" => {
                        "PostgreSQL runs with full_page_writes off: a crash of the machine may leave \
                            torn pages that corrupt the database (its idempotency records, used approvals), unless \
                            the file system never tears a page write (as ZFS); set full_page_writes on"
                    }
                    _ => {
                        "PostgreSQL answers this service's commits before they are on disk (synchronous_commit off): a \
                      crash of the server may lose the last idempotency records and used approvals, so a retry may \
                      run a call again and an approval may be used twice; set synchronous_commit on where it is \
                      turned off (the server, ALTER ROLE or ALTER DATABASE, or the connection's options)"
                    }
                }
                .to_string(),
            );
        }
        warnings
    }

    /// The idempotency store.
    pub fn idempotency(&self) -> PostgresIdempotencyStore {
        PostgresIdempotencyStore::new(self.clone())
    }

    /// The confirmation store.
    pub fn confirmations(&self) -> PostgresConfirmationStore {
        PostgresConfirmationStore::new(self.clone())
    }

    /// The task store.
    pub fn tasks(&self) -> PostgresTaskStore {
        PostgresTaskStore::new(self.clone())
    }

    /// The approval inbox's store: its sessions, used form tokens and form-signing keys, shared
    /// by the replicas.
    pub fn inbox(&self) -> PostgresInboxStore {
        PostgresInboxStore::new(self.clone())
    }

    /// The audit sink.
    pub fn audit(&self) -> PostgresAuditSink {
        PostgresAuditSink::new(self.clone())
    }

    /// A rate limiter with these budgets (measured on the database's clock).
    pub fn rate_limiter(&self, budgets: agent_surface_policy::RateBudgets) -> PostgresRateLimiter {
        PostgresRateLimiter::new(self.clone(), budgets)
    }

    /// Every store of a service in this database, as one bundle (idempotency records,
    /// confirmations, tasks, the approval inbox's sessions, and the rate limiter of the service's
    /// budgets): what `agent_surface_registry::ServiceBuilder::stores` takes, so that a replica is never half
    /// in the database and half in memory. The audit trail is apart ([`audit`](Self::audit)).
    pub fn bundle(&self) -> agent_surface_policy::Stores {
        let stores = self.clone();
        agent_surface_policy::Stores::new(
            Arc::new(self.idempotency()),
            Arc::new(self.confirmations()),
            Arc::new(self.tasks()),
            move |budgets, _clock| Arc::new(stores.rate_limiter(budgets)),
        )
        .with_inbox(Arc::new(self.inbox()))
    }

    /// The pool the stores share, for the application's own tables (keep them out of the
    /// stores' schema). Leave its connections' session settings alone: the pool does not reset
    /// them, so a `SET synchronous_commit = off` would hold for the stores' later operations on
    /// that connection (use `SET LOCAL` inside a transaction).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// `sql` with `{s}` replaced by the quoted schema name.
    pub(crate) fn sql(&self, sql: &str) -> String {
        sql.replace("{s}", &self.inner.schema)
    }

    /// Runs `op` under the time budget; failures are `StoreError::Unavailable`.
    pub(crate) async fn run<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, Fail>> + Send,
    ) -> Result<T, StoreError> {
        let budget = self.inner.config.op_timeout;
        match tokio::time::timeout(budget, op).await {
            Ok(answer) => answer.map_err(Fail::into_store_error),
            Err(_) => Err(StoreError::Unavailable(format!("postgres: no answer within {budget:?}"))),
        }
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, Fail> {
        Ok(self.inner.pool.get().await?)
    }
}

/// Milliseconds since the epoch as PostgreSQL's `bigint`.
pub(crate) fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.unix_millis()).unwrap_or(i64::MAX)
}

/// `d` in whole milliseconds, at least 1 and at most 2^43 (about 278 years, as the Redis store
/// clamps its TTLs): a longer duration (`Duration::MAX`, say) would overflow PostgreSQL's
/// `interval` and fail every statement that adds it to the clock, every call then failing closed.
pub(crate) fn ms(d: Duration) -> i64 {
    const MAX_MS: i64 = 1 << 43;
    i64::try_from(d.as_millis()).unwrap_or(MAX_MS).clamp(1, MAX_MS)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::PostgresConfig;

    /// A configuration that cannot keep its promises is refused before anything connects, with
    /// the setting named; the default is accepted.
    #[test]
    fn a_configuration_that_cannot_hold_is_refused_with_the_setting_named() {
        assert!(PostgresConfig::default().check().is_ok());
        let refused = |config: PostgresConfig, named: &str| {
            let why = config.check().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                why.starts_with("invalid PostgreSQL store configuration") && why.contains(named),
                "{named}: {why:?}"
            );
        };
        let default = PostgresConfig::default;
        refused(PostgresConfig::with_schema("9lives"), "schema");
        refused(PostgresConfig::with_schema("Shop"), "schema");
        refused(PostgresConfig::with_schema("s".repeat(49)), "schema");
        refused(PostgresConfig { op_timeout: Duration::ZERO, ..default() }, "op_timeout");
        refused(PostgresConfig { pool_size: 0, ..default() }, "pool_size");
        refused(PostgresConfig { lease: Duration::from_millis(2), ..default() }, "lease");
        refused(PostgresConfig { in_flight_retention: Duration::from_secs(19), ..default() }, "in_flight_retention");
        refused(PostgresConfig { sweep_every: Duration::ZERO, ..default() }, "sweep_every");
        // A lease too long to double is checked without overflowing (it was a panic), and a
        // duration PostgreSQL's clock arithmetic cannot hold is refused by name.
        refused(PostgresConfig { lease: Duration::MAX, ..default() }, "in_flight_retention");
        let forever = PostgresConfig { lease: Duration::MAX, in_flight_retention: Duration::MAX, ..default() };
        refused(forever, "lease must be at most");
        refused(PostgresConfig { retention: Duration::MAX, ..default() }, "retention must be at most");
    }

    /// Durations become milliseconds PostgreSQL's `interval` holds: at least one, at most 2^43.
    #[test]
    fn durations_fit_an_interval() {
        assert_eq!(super::ms(Duration::ZERO), 1);
        assert_eq!(super::ms(Duration::from_secs(2)), 2_000);
        assert_eq!(super::ms(Duration::MAX), 1 << 43);
        assert_eq!(super::ms(Duration::from_secs(u64::MAX / 1_000)), 1 << 43);
    }
}
