//! Shared state for agent-surface replicas on Redis.
//!
//! # Overview
//!
//! One process keeps its confirmations and tasks in memory; several replicas behind a load
//! balancer must share them, or an approval could be used once per replica and a task would be
//! unknown to every replica but the one that created it. This crate implements the store traits
//! of `agent-surface-policy` on Redis (through the `redis` crate's connection manager, which
//! reconnects by itself):
//!
//! - [`RedisIdempotencyStore`] — `IdempotencyStore`: one execution per `(consumerKey,
//!   invocationId)` across replicas, with leases on Redis' clock and fencing tokens;
//! - [`RedisConfirmationStore`] — `ConfirmationStore`: insert, decide, consume once, withdraw;
//! - [`RedisTaskStore`] — `TaskStore`: create, get, finish, request a cancellation;
//! - [`RedisRateLimiter`] — `RateLimiter`: GCRA budgets per consumer and per capability, taken
//!   all-or-nothing, on Redis' clock;
//! - [`RedisAuditSink`] — `AuditSink`: the audit trail as one stream (`XADD`), trimmed to
//!   [`RedisConfig::audit_max_len`] entries;
//! - [`RedisInboxStore`] — `inbox::InboxStore`: the approval inbox's sessions, used form tokens
//!   and form-signing keys, shared by the replicas (no sticky routing).
//!
//! **Each store operation is one atomic server-side script** (over one record, with its index
//! keys where it has some; the rate limiter's over the buckets of one call; several scripts name
//! keys they build from their arguments, one reason Redis Cluster is not supported): the check and the change it guards can never interleave with
//! another replica's, and a pipeline phase that touches a store costs one round trip (admission,
//! settlement; a follower polls). A confirmation's or a task's expiry is kept
//! both as a field (compared with the `now` every operation is given, so the stores never
//! disagree with the registry's clock) and as the key's time to live (so Redis reclaims it).
//!
//! **Failing closed.** Every operation has a time budget ([`RedisConfig::op_timeout`]); an
//! unreachable or slow Redis is a `StoreError::Unavailable` whose text goes to the operator
//! channel only. The engines turn that into a transient `EXECUTION_FAILED` (`after-delay`): a
//! call that needs its approval never runs without the store's word.
//!
//! **Running Redis for these guarantees.** Single use holds only as long as Redis does not
//! forget a write: run it with `appendonly yes` and `appendfsync always` (a restart from an older
//! snapshot could turn a consumed approval back into an approved one), with `maxmemory-policy
//! noeviction` (every key here has a time to live, so any `volatile-*` or `allkeys-*` policy may
//! evict a record or a rate bucket), and know that a failover to a replica that had not received
//! the last writes loses them. Use a standalone server or a Sentinel-managed primary, Redis 5 or
//! later (the scripts read `TIME` before they write, which needs effects replication; tested with
//! 7.0). Redis Cluster is not supported (the connection manager does not follow redirects, and the
//! admission and rate scripts touch two keys). [`RedisStores::connect`] reads the server's
//! `appendonly` and `maxmemory-policy` and logs a `WARN` on `agent_surface::wiring` for each that
//! puts these guarantees at risk ([`RedisStores::durability_warnings`]; a server that refuses
//! `CONFIG GET` is not checked).
//!
//! **Keys.** Everything lives under [`RedisConfig::prefix`] (several deployments may share one
//! Redis): `{prefix}idem:{n}:{scope}:{invocation id}` (the scope being the caller's principal, or a
//! natural key's; `n` its length),
//! the token counter `{prefix}idem-fence:`, cancelled attempts `{prefix}idem-cancel:{attempt}`,
//! `{prefix}conf:{id}` with the indexes `{prefix}conf-pending` and `{prefix}conf-expiry` and the
//! relayed ids `{prefix}conf-relay:…`, `{prefix}task:{id}`, the rate buckets
//! `{prefix}rate:consumer:{key}`, `{prefix}rate:capability:{name}`,
//! `{prefix}rate:consumer-capability:{name}:{key}` and `{prefix}rate:consumer-type:{type}:{key}`,
//! the audit stream `{prefix}audit`, and the approval inbox's `{prefix}inbox-…` keys
//! ([`RedisInboxStore`]); settlements are announced on the channel `{prefix}idem-settled` (an ACL
//! needs `&{prefix}idem-settled` for it).
//! Nothing of a key or a stored value reaches the agent channel. Credentials come with the URL
//! (`redis://user:pass@host:6379/`). TLS (`rediss://`) needs one of the `redis` crate's TLS
//! features, which this crate does not turn on (they bring a TLS stack every user would compile):
//! add `redis = { version = "1.8", features = ["tokio-rustls-comp"] }` (or
//! `tokio-native-tls-comp`) to your own manifest, and Cargo builds these stores with it.
//!
//! # Examples
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
//! use agent_surface_redis::{RedisConfig, RedisStores};
//! use agent_surface_registry::{Registry, RegistryConfig};
//!
//! # async fn run() -> Result<(), agent_surface_redis::ConnectError> {
//! let stores = RedisStores::connect("redis://127.0.0.1:6379/", RedisConfig::default()).await?;
//! let engine = ConfirmationEngine::new(ConfirmationConfig {
//!     store: Arc::new(stores.confirmations()),
//!     ..Default::default()
//! });
//! let registry = Registry::new(RegistryConfig {
//!     idempotency: Arc::new(stores.idempotency()),
//!     confirmation: Some(Arc::new(engine)),
//!     ..Default::default()
//! });
//! # let _ = registry;
//! # Ok(())
//! # }
//! ```

pub mod audit;
mod confirmation;
mod idempotency;
mod inbox;
mod rate;
mod task;
mod told;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use agent_surface_policy::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The `redis` crate these stores are built on, for an application that keeps its own data on the
/// same connection ([`RedisStores::connection`]).
pub use redis;

pub use audit::RedisAuditSink;
pub use confirmation::RedisConfirmationStore;
pub use idempotency::RedisIdempotencyStore;
pub use inbox::RedisInboxStore;
pub use rate::{RedisRateConfig, RedisRateLimiter};
pub use task::RedisTaskStore;

/// How the stores talk to Redis. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// The prefix of every key (end it with a separator, e.g. `"shop:"`).
    pub prefix: String,
    /// The time budget of one store operation (connecting again included); over it, the
    /// operation fails with `StoreError::Unavailable`.
    pub op_timeout: Duration,
    /// How long a confirmation is kept after it expires, so that a late retry learns `consumed`
    /// or `denied` rather than `expired` (as `MemoryConfirmationStoreConfig::retention`).
    pub retention: Duration,
    /// The largest task payload (a task's result) stored, in bytes; a larger one is refused with
    /// `StoreError::Full`, and the adapter stores a smaller one.
    pub max_task_payload_bytes: usize,
    /// The largest idempotency result stored, in bytes of JSON: a larger one reaches its caller,
    /// but the record keeps `EXECUTION_FAILED {reason: output-too-large}` in its place (as the
    /// memory store's `max_result_bytes`).
    pub max_result_bytes: usize,
    /// How long an idempotency leader holds its record without renewing it, on Redis' clock. The
    /// registry renews every third of it while the call runs, so it bounds how long a call whose
    /// replica died blocks its retries; it must exceed the longest pause a live replica may take,
    /// and a few `op_timeout`s (a replica that misses its renewals — stalled, or cut off from
    /// Redis — is taken over, and its result is not recorded).
    pub lease: Duration,
    /// How long an idempotency record in flight is kept after its leader's last sign of life
    /// (admission or renewal) when it never settles (its replica died): within it, a retry learns
    /// that the outcome is unknown rather than running as a new call. At least twice `lease`.
    pub in_flight_retention: Duration,
    /// About how many events the audit stream keeps ([`RedisAuditSink`]; trimmed with `MAXLEN
    /// ~`, the oldest first). An event is at most a few KiB (names and ids are bounded), so this
    /// bounds the stream's bytes too.
    pub audit_max_len: usize,
}

impl Default for RedisConfig {
    /// Prefix `agent-surface:`, 2 s per operation, one hour of retention, 1 MiB per task payload
    /// and per idempotency result, 10 s leases, records in flight kept a day, 100 000 audit events.
    fn default() -> RedisConfig {
        RedisConfig {
            prefix: "agent-surface:".to_string(),
            op_timeout: Duration::from_secs(2),
            retention: Duration::from_secs(3600),
            max_task_payload_bytes: 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            lease: Duration::from_secs(10),
            in_flight_retention: Duration::from_secs(24 * 3600),
            audit_max_len: 100_000,
        }
    }
}

impl RedisConfig {
    /// The default configuration under `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> RedisConfig {
        RedisConfig { prefix: prefix.into(), ..RedisConfig::default() }
    }

    /// Refuses a configuration that cannot keep its promises: a zero time budget, a lease too
    /// short to renew, or records in flight kept for less than two leases (a record must outlive
    /// its lease, or a retry after a crash would find nothing and run the call again).
    fn check(&self) -> Result<(), ConnectError> {
        let bad = |what: &str| Err(ConnectError(format!("invalid Redis store configuration: {what}")));
        if self.op_timeout.is_zero() {
            return bad("op_timeout must be positive");
        }
        if self.lease < Duration::from_millis(3) {
            return bad("lease must be at least 3 ms (it is renewed every third of it)");
        }
        if self.in_flight_retention < self.lease.saturating_mul(2) {
            return bad("in_flight_retention must be at least twice the lease");
        }
        // Beyond this the stores' TTLs are clamped (`ttl_ms`), and their own arithmetic on a
        // lease would overflow.
        let longest = Duration::from_millis(1 << 43);
        for (name, d) in [
            ("op_timeout", self.op_timeout),
            ("retention", self.retention),
            ("lease", self.lease),
            ("in_flight_retention", self.in_flight_retention),
        ] {
            if d > longest {
                return Err(ConnectError(format!(
                    "invalid Redis store configuration: {name} must be at most 2^43 ms (about 278 years)"
                )));
            }
        }
        Ok(())
    }
}

/// Why [`RedisStores::connect`] failed: a bad URL, no Redis answering in time, or a
/// configuration that cannot keep its promises (see [`RedisConfig`]).
#[derive(Debug)]
pub struct ConnectError(String);

impl ConnectError {
    fn unreachable(cause: impl fmt::Display) -> ConnectError {
        ConnectError(format!("cannot connect to Redis: {cause}"))
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

/// A connection to Redis shared by the stores built from it (cheap to clone).
#[derive(Clone)]
pub struct RedisStores {
    conn: ConnectionManager,
    config: RedisConfig,
    /// For the settlement subscription, opened on its own connection.
    client: redis::Client,
    /// The settlement subscription, started by the first follower (see `told`).
    told: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<told::Told>>>,
}

impl fmt::Debug for RedisStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStores").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What `url` names, with `TCP_NODELAY` on (the `redis` crate leaves it off): the stores keep
/// many small commands in flight on one multiplexed connection, and with Nagle's algorithm a
/// command written while an earlier one is unacknowledged would wait for that acknowledgement.
fn connection_info(url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(info.set_tcp_settings(tcp))
}

impl RedisStores {
    /// Connects to the Redis at `url` (`redis://`, or `rediss://` for TLS when the `redis`
    /// crate is built with a TLS feature: see the crate docs).
    pub async fn connect(url: &str, config: RedisConfig) -> Result<RedisStores, ConnectError> {
        config.check()?;
        let client = redis::Client::open(connection_info(url).map_err(ConnectError::unreachable)?)
            .map_err(ConnectError::unreachable)?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.op_timeout))
            .set_response_timeout(Some(config.op_timeout))
            .set_number_of_retries(2);
        let connect = ConnectionManager::new_with_config(client.clone(), manager);
        let conn = tokio::time::timeout(config.op_timeout, connect)
            .await
            .map_err(|_| ConnectError::unreachable("timed out"))?
            .map_err(ConnectError::unreachable)?;
        let stores = RedisStores { conn, config, client, told: std::sync::Arc::default() };
        for warning in stores.durability_warnings().await {
            // Kept for a log installed later when nothing records it now (`Serve` says it then).
            agent_surface_policy::wiring::warn(&warning);
        }
        Ok(stores)
    }

    /// What in the server's configuration puts the stores' guarantees at risk (see *Running Redis
    /// for these guarantees* in the crate docs): no append-only file, one the operating system
    /// flushes when it likes (`appendfsync no`), or a `maxmemory-policy` that evicts keys.
    /// [`connect`](Self::connect) logs each at `WARN` on `agent_surface::wiring` (kept, when no
    /// subscriber records them yet, for the log `Serve` installs: [`agent_surface_policy::wiring`]).
    /// Empty when the configuration is as advised, and when the server does not let this client
    /// read it (`CONFIG GET` refused, as managed services may; logged at `DEBUG`): then the
    /// operator checks it by hand. (`appendfsync everysec`, Redis' default, is not named: it loses at most the last
    /// second of writes, on a crash of the machine.)
    pub async fn durability_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(appendonly) = self.config_value("appendonly").await
            && appendonly != "yes"
        {
            warnings.push(
                "Redis runs without its append-only file (appendonly no): a restart forgets idempotency records \
                 and used approvals, so a retry may run a call again and an approval may be used twice; set \
                 appendonly yes and appendfsync always"
                    .to_string(),
            );
        } else if self.config_value("appendfsync").await.as_deref() == Some("no") {
            warnings.push(
                "Redis leaves its append-only file to the operating system to flush (appendfsync no): a crash of \
                 the machine may lose the last seconds of records and used approvals; set appendfsync always"
                    .to_string(),
            );
        }
        if let Some(policy) = self.config_value("maxmemory-policy").await.filter(|v| v != "noeviction") {
            warnings.push(format!(
                "Redis may evict keys under memory pressure (maxmemory-policy {policy}): an evicted record lets a \
                 retry run a call again, an evicted rate bucket resets a quota; set maxmemory-policy noeviction"
            ));
        }
        warnings
    }

    /// One configuration parameter of the server (one per `CONFIG GET`, as Redis before 7 reads
    /// them; the reply a map or a flat list, RESP3 or RESP2), or `None` when it cannot be read.
    async fn config_value(&self, name: &str) -> Option<String> {
        let mut conn = self.conn.clone();
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg(name);
        let read = tokio::time::timeout(self.config.op_timeout, get.query_async::<HashMap<String, String>>(&mut conn));
        match read.await {
            Ok(Ok(mut settings)) => settings.remove(name),
            Ok(Err(e)) => {
                tracing::debug!(target: "agent_surface::wiring", error = %agent_surface_policy::redacted(&e), parameter = name, "cannot read the Redis configuration");
                None
            }
            Err(_) => {
                tracing::debug!(target: "agent_surface::wiring", parameter = name, "reading the Redis configuration timed out");
                None
            }
        }
    }

    /// The idempotency store.
    pub fn idempotency(&self) -> RedisIdempotencyStore {
        RedisIdempotencyStore::new(self.clone())
    }

    /// The confirmation store.
    pub fn confirmations(&self) -> RedisConfirmationStore {
        RedisConfirmationStore::new(self.clone())
    }

    /// The task store.
    pub fn tasks(&self) -> RedisTaskStore {
        RedisTaskStore::new(self.clone())
    }

    /// The approval inbox's store: its sessions, used form tokens and form-signing keys, shared
    /// by the replicas (see [`RedisInboxStore`]).
    pub fn inbox(&self) -> RedisInboxStore {
        RedisInboxStore::new(self.clone())
    }

    /// The audit sink: a stream under `{prefix}audit`.
    pub fn audit(&self) -> RedisAuditSink {
        RedisAuditSink::new(self.clone())
    }

    /// A rate limiter with these budgets.
    pub fn rate_limiter(&self, config: RedisRateConfig) -> RedisRateLimiter {
        RedisRateLimiter::new(self.clone(), config)
    }

    /// Every store of a service on this Redis, as one bundle (idempotency records,
    /// confirmations, tasks, the approval inbox's sessions, and the rate limiter of the service's budgets, which measures them
    /// on Redis' clock): what `agent_surface_registry::ServiceBuilder::stores` takes, so that a
    /// replica is never half on Redis and half in memory.
    pub fn bundle(&self) -> agent_surface_policy::Stores {
        let stores = self.clone();
        agent_surface_policy::Stores::new(
            std::sync::Arc::new(self.idempotency()),
            std::sync::Arc::new(self.confirmations()),
            std::sync::Arc::new(self.tasks()),
            move |budgets, _clock| std::sync::Arc::new(stores.rate_limiter(budgets)),
        )
        .with_inbox(std::sync::Arc::new(self.inbox()))
    }

    /// The connection the stores share (it reconnects by itself; cheap to clone), for the
    /// application's own data. Keep that data under keys outside [`RedisConfig::prefix`]'s
    /// store keys (for example under `{prefix}app:`).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.config.prefix)
    }

    /// The channel settlements are announced on: `{prefix}idem-settled`.
    fn settled_channel(&self) -> String {
        format!("{}idem-settled", self.config.prefix)
    }

    /// The settlement subscription, started on first use (by a follower).
    fn told(&self) -> &told::Told {
        self.told.get_or_init(|| told::Told::start(self.client.clone(), self.settled_channel(), self.config.op_timeout))
    }

    /// Runs one command under the time budget; failures are `StoreError::Unavailable`.
    async fn query<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.config.op_timeout, cmd.query_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("redis: {e}"))),
            Err(_) => Err(StoreError::Unavailable(format!("redis: no answer within {:?}", self.config.op_timeout))),
        }
    }

    /// Runs `cmd`, an `EVALSHA` of `script` built with [`evalsha`], under the time budget,
    /// loading the script when Redis does not know it (`NOSCRIPT`: a restarted or flushed server)
    /// and sending it once more, as `Script::invoke_async` does; failures are
    /// `StoreError::Unavailable`.
    async fn eval<T: redis::FromRedisValue>(&self, script: &redis::Script, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        let call = async {
            match cmd.query_async(&mut conn).await {
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    script.load_async(&mut conn).await?;
                    cmd.query_async(&mut conn).await
                }
                answer => answer,
            }
        };
        match tokio::time::timeout(self.config.op_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("redis: {e}"))),
            Err(_) => Err(StoreError::Unavailable(format!("redis: no answer within {:?}", self.config.op_timeout))),
        }
    }

    /// Runs one script under the time budget; failures are `StoreError::Unavailable`.
    async fn run<T: redis::FromRedisValue>(&self, invocation: redis::ScriptInvocation<'_>) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.config.op_timeout, invocation.invoke_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("redis: {e}"))),
            Err(_) => Err(StoreError::Unavailable(format!("redis: no answer within {:?}", self.config.op_timeout))),
        }
    }
}

/// The `EVALSHA` of `script` over `keys` keys, for [`RedisStores::eval`]: the caller adds the keys,
/// then the arguments. Every argument is written once, into the command's one buffer
/// (`Script::key` and `Script::arg` allocate each and copy it again into the command).
fn evalsha(script: &redis::Script, keys: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(keys + 12, bytes + 64);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// The largest integer the scripts' numbers (Lua doubles) hold exactly; every number passed to
/// a script is clamped to it.
const EXACT: u64 = 1 << 53;

/// Milliseconds as the decimal string the scripts compare with `tonumber`.
fn ms(t: agent_surface_core::Timestamp) -> String {
    t.unix_millis().min(EXACT).to_string()
}

/// A duration in whole milliseconds, at least one and at most about 285 years (a key's time to
/// live, which Redis must be able to add to its clock).
fn ttl_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).clamp(1, 1 << 43)
}

/// A fingerprint from its 64 hex digits.
fn parse_hash(hex: &str) -> Option<agent_surface_policy::idempotency::Fingerprint> {
    agent_surface_core::hex::decode::<32>(hex).map(agent_surface_policy::idempotency::Fingerprint::from_bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{RedisConfig, connection_info};

    /// A configuration that cannot keep its promises is refused by name, without overflowing on
    /// a lease too long to double (it was a panic).
    #[test]
    fn a_configuration_that_cannot_hold_is_refused_with_the_setting_named() {
        assert!(RedisConfig::default().check().is_ok());
        let why = |config: RedisConfig| config.check().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(why(RedisConfig { lease: Duration::MAX, ..RedisConfig::default() }).contains("in_flight_retention"));
        let forever =
            RedisConfig { lease: Duration::MAX, in_flight_retention: Duration::MAX, ..RedisConfig::default() };
        assert!(why(forever).contains("lease must be at most"));
        let kept = RedisConfig { retention: Duration::MAX, ..RedisConfig::default() };
        assert!(why(kept).contains("retention must be at most"));
        assert!(why(RedisConfig { op_timeout: Duration::ZERO, ..RedisConfig::default() }).contains("op_timeout"));
    }

    /// Small commands pipelined on one connection are not held back by Nagle's algorithm; the
    /// rest of what the URL says is kept.
    #[test]
    fn connections_are_made_with_tcp_nodelay() {
        let info = connection_info("redis://127.0.0.1:6390/3").expect("a valid URL");
        assert!(info.tcp_settings().nodelay());
        assert_eq!(info.redis_settings().db(), 3);
        assert_eq!(info.addr().to_string(), "127.0.0.1:6390");
        assert!(connection_info("not a url").is_err());
    }
}
