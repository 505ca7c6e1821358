//! [`SqliteInboxStore`]: the approval inbox's sessions, used form nonces and form-signing keys in
//! the file (tables `inbox_session`, `inbox_nonce`, `inbox_key`), each operation one step of the
//! database thread. Sessions outlive a restart of the server; no row holds the session id or a
//! usable token (the inbox gives a digest of the id and the token sealed under a key only the id
//! opens).

use agent_surface_core::Timestamp;
use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
use agent_surface_policy::{Reach, StoreError};
use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};

use crate::db::{Cx, Fail, corrupt};
use crate::schema::FORMAT;
use crate::{SqliteStores, millis};

/// An [`InboxStore`] in the file ([`SqliteStores::inbox`]): one server, whose sessions survive its
/// restart.
#[derive(Clone, Debug)]
pub struct SqliteInboxStore {
    stores: SqliteStores,
}

impl SqliteInboxStore {
    pub(crate) fn new(stores: SqliteStores) -> SqliteInboxStore {
        SqliteInboxStore { stores }
    }
}

fn count(cx: &Cx<'_>, sql: &str, subject: Option<&str>) -> Result<i64, Fail> {
    let mut statement = cx.conn.prepare_cached(sql)?;
    Ok(match subject {
        Some(s) => statement.query_row(params![s], |r| r.get(0))?,
        None => statement.query_row([], |r| r.get(0))?,
    })
}

fn open(
    cx: &mut Cx<'_>,
    lookup: [u8; 32],
    session: &InboxSession,
    limits: SessionLimits,
    now: Timestamp,
) -> Result<(), Fail> {
    cx.saw(now);
    let conn = cx.conn;
    conn.prepare_cached("DELETE FROM inbox_session WHERE lookup = ?1 OR expires_at <= ?2")?
        .execute(params![&lookup[..], millis(now)])?;
    let per = i64::try_from(limits.per_subject).unwrap_or(i64::MAX);
    let own = count(cx, "SELECT count(*) FROM inbox_session WHERE subject = ?1", Some(&session.subject))?;
    if own >= per {
        cx.conn
            .prepare_cached(
                "DELETE FROM inbox_session WHERE lookup IN (SELECT lookup FROM inbox_session WHERE subject = ?1
                 ORDER BY expires_at LIMIT ?2)",
            )?
            .execute(params![session.subject, own - per + 1])?;
    }
    let total = i64::try_from(limits.total).unwrap_or(i64::MAX);
    let all = count(cx, "SELECT count(*) FROM inbox_session", None)?;
    if all >= total {
        cx.conn
            .prepare_cached(
                "DELETE FROM inbox_session WHERE lookup IN (SELECT lookup FROM inbox_session ORDER BY expires_at LIMIT ?1)",
            )?
            .execute(params![all - total + 1])?;
    }
    cx.conn
        .prepare_cached(
            "INSERT INTO inbox_session (lookup, v, subject, expires_at, sealed) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![&lookup[..], FORMAT, session.subject, millis(session.expires_at), session.sealed])?;
    Ok(())
}

fn read(cx: &mut Cx<'_>, lookup: [u8; 32], now: Timestamp) -> Result<Option<InboxSession>, Fail> {
    cx.saw(now);
    let row = cx
        .conn
        .prepare_cached(
            "SELECT v, subject, expires_at, sealed FROM inbox_session WHERE lookup = ?1 AND expires_at > ?2",
        )?
        .query_row(params![&lookup[..], millis(now)], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, Vec<u8>>(3)?))
        })
        .optional()?;
    let Some((v, subject, expires_at, sealed)) = row else { return Ok(None) };
    if v > FORMAT {
        return Err(corrupt("an inbox session of a later format"));
    }
    let expires_at = Timestamp::from_unix_millis(u64::try_from(expires_at).map_err(|_| corrupt("an inbox session"))?);
    Ok(Some(InboxSession::new(subject, expires_at, sealed)))
}

/// Until when `nonce` of `scope` is marked used, if it is at `now`.
fn used_until(cx: &Cx<'_>, scope: &str, nonce: &str, now: Timestamp) -> Result<bool, Fail> {
    let row = cx
        .conn
        .prepare_cached("SELECT v FROM inbox_nonce WHERE scope = ?1 AND nonce = ?2 AND until > ?3")?
        .query_row(params![scope, nonce, millis(now)], |r| r.get::<_, i64>(0))
        .optional()?;
    if row.is_some_and(|v| v > FORMAT) {
        return Err(corrupt("a used form nonce of a later format"));
    }
    Ok(row.is_some())
}

impl InboxStore for SqliteInboxStore {
    fn reach(&self) -> Reach {
        Reach::Durable
    }

    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.stores.db.run(move |cx| open(cx, lookup, &session, limits, now)))
    }

    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>> {
        Box::pin(self.stores.db.run(move |cx| read(cx, lookup, now)))
    }

    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.stores.db.run(move |cx| {
            cx.conn.prepare_cached("DELETE FROM inbox_session WHERE lookup = ?1")?.execute(params![&lookup[..]])?;
            Ok(())
        }))
    }

    fn use_nonce<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<NonceUse, StoreError>> {
        let (scope, nonce) = (scope.to_string(), nonce.to_string());
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            if used_until(cx, &scope, &nonce, now)? {
                return Ok(NonceUse::Used);
            }
            cx.conn
                .prepare_cached("INSERT OR REPLACE INTO inbox_nonce (scope, nonce, v, until) VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![scope, nonce, FORMAT, millis(until)])?;
            Ok(NonceUse::Fresh)
        }))
    }

    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (scope, nonce) = (scope.to_string(), nonce.to_string());
        Box::pin(self.stores.db.run(move |cx| used_until(cx, &scope, &nonce, now)))
    }

    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>> {
        let name = name.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.conn
                .prepare_cached("INSERT OR IGNORE INTO inbox_key (name, v, key) VALUES (?1, ?2, ?3)")?
                .execute(params![name, FORMAT, &candidate[..]])?;
            let (v, key) = cx
                .conn
                .prepare_cached("SELECT v, key FROM inbox_key WHERE name = ?1")?
                .query_row(params![name], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
            if v > FORMAT {
                return Err(corrupt("a form key of a later format"));
            }
            <[u8; 32]>::try_from(key).map_err(|_| corrupt("a form key"))
        }))
    }
}
