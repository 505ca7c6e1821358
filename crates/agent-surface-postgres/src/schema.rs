//! The schema's tables and their migrations, applied when the stores connect.
//!
//! The schema version is the one row of `{schema}.meta` (with the name `agent-surface`, which
//! marks the schema as this crate's); [`MIGRATIONS`]`[n]` takes it from version `n` to `n + 1`.
//! Connecting takes a transaction-scoped advisory lock named after the schema (replicas starting
//! together wait for each other), applies the missing migrations and the new version in the same
//! transaction (a failure leaves the schema as it was), and refuses a schema of a later version
//! than this build knows, or a schema of that name that holds tables of another program.
//!
//! Every row carries the format version of what it holds (`v`, [`FORMAT`]).
//!
//! | table | one row per | holds |
//! |---|---|---|
//! | `idem` | `(consumer key, invocation id)` | `state` (`run`: a leader holds it; `done`: a stored result; `gone`: a released result, readable by followers for a few seconds; `void`: a claim cancelled before its handler started, likewise), fingerprint, fencing token, `lease_until` while `run`, the claiming attempt until its leader marks the claim started, whether the claim was a takeover, whether it is marked started (by its leader, `IdempotencyStore::start`, or by the admission that claimed it, `IdempotencyStore::admit_started`), the result, `keep_until` (all times on the database's clock) |
//! | `idem_cancel` | cancelled attempt | until when its admission is refused |
//! | `conf` | confirmation | the record as JSON (`agent_surface_policy::stored`), and beside it what the indexes need: state, deadline, `gone_at` (deadline + retention), whether its expiry was claimed, the consumption token while it may be reinstated (Unix milliseconds on the registry's clock) |
//! | `conf_relay` | relay key (a digest) | the id of the confirmation relayed for that call |
//! | `task` | task | the record as JSON, and `keep_until` (its deadline while running, its time to live once final) |
//! | `rate` | rate bucket | its theoretical arrival time (GCRA, microseconds on the database's clock) |
//! | `audit` | audit event | the event's JSON, in the order recorded |
//! | `inbox_session` | approval inbox session | under a digest of its id (`lookup`): the subject, `expires_at`, and the credential sealed under a key only the id opens (never a usable token) |
//! | `inbox_nonce` | used form token | its scope and nonce, and `until` when the token could still be presented |
//! | `inbox_key` | form-signing key | the 32-byte key of a name, set once |
//!
//! Fencing tokens come from the sequence `idem_token`: no two leases ever share one.

use deadpool_postgres::Object;

use crate::ConnectError;

/// The format version of the rows this build writes.
pub(crate) const FORMAT: i32 = 1;

/// The mark of a schema that is this crate's, in `meta.name`.
const NAME: &str = "agent-surface";

/// Each migration, in order: `MIGRATIONS[n]` takes the schema from version `n` to `n + 1`.
/// `{s}` is the quoted schema name.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE {s}.idem (
  consumer text NOT NULL,
  invocation text NOT NULL,
  v integer NOT NULL,
  state text NOT NULL,
  fp bytea NOT NULL,
  token bigint NOT NULL,
  lease_until timestamptz,
  attempt bytea,
  takeover boolean NOT NULL DEFAULT false,
  started boolean NOT NULL DEFAULT false,
  result text,
  keep_until timestamptz NOT NULL,
  PRIMARY KEY (consumer, invocation)
);
CREATE INDEX idem_keep ON {s}.idem (keep_until);
CREATE SEQUENCE {s}.idem_token;

CREATE TABLE {s}.idem_cancel (
  attempt bytea PRIMARY KEY,
  keep_until timestamptz NOT NULL
);
CREATE INDEX idem_cancel_keep ON {s}.idem_cancel (keep_until);

CREATE TABLE {s}.conf (
  id text PRIMARY KEY,
  v integer NOT NULL,
  state text NOT NULL,
  expires_at bigint NOT NULL,
  gone_at bigint NOT NULL,
  expiry_claimed boolean NOT NULL DEFAULT false,
  token text,
  record text NOT NULL
);
CREATE INDEX conf_pending ON {s}.conf (expires_at, id) WHERE state = 'pending';
CREATE INDEX conf_open ON {s}.conf (expires_at, id)
  WHERE NOT expiry_claimed AND state IN ('pending', 'approved', 'withdrawn');
CREATE INDEX conf_gone ON {s}.conf (gone_at);

CREATE TABLE {s}.conf_relay (
  key bytea PRIMARY KEY,
  v integer NOT NULL,
  id text NOT NULL
);
CREATE INDEX conf_relay_id ON {s}.conf_relay (id);

CREATE TABLE {s}.task (
  id text PRIMARY KEY,
  v integer NOT NULL,
  keep_until bigint NOT NULL,
  record text NOT NULL
);
CREATE INDEX task_keep ON {s}.task (keep_until);

CREATE TABLE {s}.rate (
  bucket text PRIMARY KEY,
  v integer NOT NULL,
  tat bigint NOT NULL
);
CREATE INDEX rate_tat ON {s}.rate (tat);

CREATE TABLE {s}.audit (
  seq bigserial PRIMARY KEY,
  v integer NOT NULL,
  event text NOT NULL
);
",
    r"
-- 2: an expiry's claim holds until a deadline (expiry_claim_until, Unix ms), and expiry_claimed
-- means its event is recorded (ConfirmationStore::expiry_recorded).
ALTER TABLE {s}.conf ADD COLUMN expiry_claim_until bigint;
",
    r"
-- 3: the approval inbox's sessions (a digest of the session id, the subject, the expiry in Unix ms
-- on the inbox's clock, and the sealed credential: never a usable token), its used form nonces
-- and its form-signing keys.
CREATE TABLE {s}.inbox_session (
  lookup bytea PRIMARY KEY,
  v integer NOT NULL,
  subject text NOT NULL,
  expires_at bigint NOT NULL,
  sealed bytea NOT NULL
);
CREATE INDEX inbox_session_subject ON {s}.inbox_session (subject, expires_at);
CREATE INDEX inbox_session_expiry ON {s}.inbox_session (expires_at);

CREATE TABLE {s}.inbox_nonce (
  scope text NOT NULL,
  nonce text NOT NULL,
  v integer NOT NULL,
  until bigint NOT NULL,
  PRIMARY KEY (scope, nonce)
);
CREATE INDEX inbox_nonce_until ON {s}.inbox_nonce (until);

CREATE TABLE {s}.inbox_key (
  name text PRIMARY KEY,
  v integer NOT NULL,
  key bytea NOT NULL
);
",
];

/// The schema version this build writes.
pub(crate) fn current() -> i32 {
    i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX)
}

/// Brings the schema `name` (quoted: `quoted`) to the current version (see the module docs).
pub(crate) async fn migrate(client: &mut Object, name: &str, quoted: &str) -> Result<(), ConnectError> {
    let fail = |e: tokio_postgres::Error| {
        ConnectError(format!("cannot migrate the PostgreSQL schema {name}: {}", crate::with_causes(&e)))
    };
    let tx = client.transaction().await.map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&format!("agent-surface:{name}")])
        .await
        .map_err(fail)?;
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {quoted}")).await.map_err(fail)?;
    let tables: i64 =
        tx.query_one("SELECT count(*) FROM pg_tables WHERE schemaname = $1", &[&name]).await.map_err(fail)?.get(0);
    let has_meta: bool = tx
        .query_one("SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'meta')", &[&name])
        .await
        .map_err(fail)?
        .get(0);
    let version = if has_meta {
        let row = tx
            .query_opt(&format!("SELECT name, version FROM {quoted}.meta"), &[])
            .await
            .map_err(fail)?
            .ok_or_else(|| foreign(name))?;
        let (mark, version): (String, i32) = (row.get(0), row.get(1));
        if mark != NAME {
            return Err(foreign(name));
        }
        version
    } else if tables == 0 {
        tx.batch_execute(&format!(
            "CREATE TABLE {quoted}.meta (name text NOT NULL, version integer NOT NULL);
             INSERT INTO {quoted}.meta (name, version) VALUES ('{NAME}', 0);"
        ))
        .await
        .map_err(fail)?;
        0
    } else {
        return Err(foreign(name));
    };
    if version > current() {
        return Err(ConnectError(format!(
            "the PostgreSQL schema {name} was written by a later version of agent-surface-postgres (schema {version}; this build knows up to {})",
            current()
        )));
    }
    let from = usize::try_from(version).unwrap_or(0);
    for migration in &MIGRATIONS[from..] {
        tx.batch_execute(&migration.replace("{s}", quoted)).await.map_err(fail)?;
    }
    if from < MIGRATIONS.len() {
        tx.execute(&format!("UPDATE {quoted}.meta SET version = $1"), &[&current()]).await.map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

fn foreign(name: &str) -> ConnectError {
    ConnectError(format!("the PostgreSQL schema {name} holds tables of another program; choose another schema"))
}
