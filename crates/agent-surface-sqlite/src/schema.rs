//! The file's schema and its migrations, applied when a file is opened.
//!
//! The schema version is SQLite's `user_version`; [`MIGRATIONS`]`[n]` takes a file from version
//! `n` to `n + 1`. Opening applies the missing ones in one transaction (a crash in the middle
//! leaves the file as it was), so opening is idempotent, and refuses a file of a later version
//! than this build knows (it would misread it). The file is marked as this crate's with
//! SQLite's `application_id`, so that a path that names another program's database is refused
//! rather than written into.
//!
//! Every row carries the format version of what it holds (`v`, [`FORMAT`]): a later build reads
//! the rows an earlier one wrote, and a row of an unknown, later format is reported, never
//! misread.
//!
//! | table | one row per | holds |
//! |---|---|---|
//! | `idem` | `(consumer key, invocation id)` | in flight (`state` 0: fingerprint, fencing token, the claiming attempt, whether it was a takeover, whether its leader's process ended) or a stored result (`state` 1: fingerprint, result JSON); `gone_at`: when it may be deleted |
//! | `conf` | confirmation | the record as JSON, and beside it what the indexes need: state, deadline, `gone_at` (deadline + retention), whether its expiry event is recorded (`expiry_claimed`) and until when a claim to record it holds (`expiry_claim_until`), the consumption token while it may be reinstated |
//! | `conf_relay` | relay key (a digest) | the id of the confirmation relayed for that call |
//! | `task` | task | the record as JSON, and `keep_until` (its deadline while running, its time to live once final) |
//! | `rate` | rate bucket | its theoretical arrival time (GCRA, nanoseconds on the registry's clock) |
//! | `audit` | audit event | the event's JSON, in the order recorded |
//! | `inbox_session` | approval inbox session | under a digest of its id (`lookup`): the subject, `expires_at`, and the credential sealed under a key only the id opens (never a usable token) |
//! | `inbox_nonce` | used form token | its scope and nonce, and `until` when the token could still be presented |
//! | `inbox_key` | form-signing key | the 32-byte key of a name, set once |

use rusqlite::Connection;

/// The format version of the rows this build writes.
pub(crate) const FORMAT: i64 = 1;

/// The value of `application_id` that marks a file as this crate's (`ASsq`).
const APPLICATION_ID: i64 = 0x4153_7371;

/// Each migration, in order: `MIGRATIONS[n]` takes the schema from version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    r"
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
",
    r"
-- 2: an expiry's claim holds until a deadline (expiry_claim_until), and expiry_claimed = 1 means
-- its event is recorded; a claim made by version 1 was for good, and reads as recorded.
ALTER TABLE conf ADD COLUMN expiry_claim_until INTEGER;
",
    r"
-- 3: the approval inbox's sessions (a digest of the session id, the subject, the expiry and the
-- sealed credential: never a usable token), its used form nonces and its form-signing keys.
CREATE TABLE inbox_session (
  lookup BLOB PRIMARY KEY,
  v INTEGER NOT NULL,
  subject TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  sealed BLOB NOT NULL
);
CREATE INDEX inbox_session_subject ON inbox_session (subject, expires_at);
CREATE INDEX inbox_session_expiry ON inbox_session (expires_at);

CREATE TABLE inbox_nonce (
  scope TEXT NOT NULL,
  nonce TEXT NOT NULL,
  v INTEGER NOT NULL,
  until INTEGER NOT NULL,
  PRIMARY KEY (scope, nonce)
);
CREATE INDEX inbox_nonce_until ON inbox_nonce (until);

CREATE TABLE inbox_key (
  name TEXT PRIMARY KEY,
  v INTEGER NOT NULL,
  key BLOB NOT NULL
);
",
];

/// Why a file cannot be brought to this build's schema.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// SQLite failed.
    Sql(rusqlite::Error),
    /// The file is another program's database.
    Foreign,
    /// The file was written by a later build (its schema version).
    Newer(i64),
}

impl From<rusqlite::Error> for Refusal {
    fn from(e: rusqlite::Error) -> Refusal {
        Refusal::Sql(e)
    }
}

/// The schema version this build writes.
pub(crate) fn current() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// Brings the file to the current schema, inside the caller's transaction.
pub(crate) fn migrate(conn: &Connection) -> Result<(), Refusal> {
    let application: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    if application != APPLICATION_ID && (application != 0 || tables != 0) {
        return Err(Refusal::Foreign);
    }
    if version > current() {
        return Err(Refusal::Newer(version));
    }
    let from = usize::try_from(version).unwrap_or(0);
    for migration in &MIGRATIONS[from..] {
        conn.execute_batch(migration)?;
    }
    if from < MIGRATIONS.len() {
        conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};", current()))?;
    }
    Ok(())
}
