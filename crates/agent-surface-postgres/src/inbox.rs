//! [`PostgresInboxStore`]: the approval inbox's sessions, used form nonces and form-signing keys in
//! `{schema}.inbox_session`, `{schema}.inbox_nonce` and `{schema}.inbox_key`, shared by every
//! replica, so that replicas behind one address need no sticky routing.
//!
//! Opening a session is one transaction, serialised among replicas by a transaction-scoped
//! advisory lock (sign-ins are rare; the caps then hold exactly); marking a nonce is one
//! statement (`INSERT … ON CONFLICT … WHERE` the held one expired), so of two replicas marking one
//! nonce exactly one gets the row; the key is inserted if absent and then read. No row holds the
//! session id or a usable token (the inbox gives a digest of the id and the token sealed under a
//! key only the id opens).

use agent_surface_core::Timestamp;
use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
use agent_surface_policy::{Reach, StoreError};
use futures_util::future::BoxFuture;

use crate::schema::FORMAT;
use crate::{PostgresStores, corrupt, millis};

/// An [`InboxStore`] in PostgreSQL ([`PostgresStores::inbox`]), shared by every replica.
#[derive(Clone, Debug)]
pub struct PostgresInboxStore {
    stores: PostgresStores,
}

impl PostgresInboxStore {
    pub(crate) fn new(stores: PostgresStores) -> PostgresInboxStore {
        PostgresInboxStore { stores }
    }

    async fn open_now(
        &self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let s = &self.stores;
        s.run(async {
            let mut client = s.client().await?;
            let tx = client.transaction().await?;
            let lock = format!("agent-surface-inbox:{}", s.config().schema);
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock]).await?;
            let now = millis(now);
            let clear = tx
                .prepare_cached(&s.sql("DELETE FROM {s}.inbox_session WHERE lookup = $1 OR expires_at <= $2"))
                .await?;
            tx.execute(&clear, &[&&lookup[..], &now]).await?;
            let per = i64::try_from(limits.per_subject).unwrap_or(i64::MAX);
            let own = tx.prepare_cached(&s.sql("SELECT count(*) FROM {s}.inbox_session WHERE subject = $1")).await?;
            let own: i64 = tx.query_one(&own, &[&session.subject]).await?.get(0);
            if own >= per {
                let oldest = tx
                    .prepare_cached(&s.sql(
                        "DELETE FROM {s}.inbox_session WHERE lookup IN (SELECT lookup FROM {s}.inbox_session
                         WHERE subject = $1 ORDER BY expires_at LIMIT $2)",
                    ))
                    .await?;
                tx.execute(&oldest, &[&session.subject, &(own - per + 1)]).await?;
            }
            let total = i64::try_from(limits.total).unwrap_or(i64::MAX);
            let all = tx.prepare_cached(&s.sql("SELECT count(*) FROM {s}.inbox_session")).await?;
            let all: i64 = tx.query_one(&all, &[]).await?.get(0);
            if all >= total {
                let oldest = tx
                    .prepare_cached(&s.sql(
                        "DELETE FROM {s}.inbox_session WHERE lookup IN (SELECT lookup FROM {s}.inbox_session
                         ORDER BY expires_at LIMIT $1)",
                    ))
                    .await?;
                tx.execute(&oldest, &[&(all - total + 1)]).await?;
            }
            let insert = tx
                .prepare_cached(&s.sql(
                    "INSERT INTO {s}.inbox_session (lookup, v, subject, expires_at, sealed) VALUES ($1, $2, $3, $4, $5)",
                ))
                .await?;
            tx.execute(&insert, &[&&lookup[..], &FORMAT, &session.subject, &millis(session.expires_at), &session.sealed])
                .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }
}

impl InboxStore for PostgresInboxStore {
    fn reach(&self) -> Reach {
        Reach::Shared
    }

    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.open_now(lookup, session, limits, now))
    }

    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>> {
        let s = &self.stores;
        Box::pin(s.run(async move {
            let client = s.client().await?;
            let read = client
                .prepare_cached(&s.sql(
                    "SELECT v, subject, expires_at, sealed FROM {s}.inbox_session WHERE lookup = $1 AND expires_at > $2",
                ))
                .await?;
            let Some(row) = client.query_opt(&read, &[&&lookup[..], &millis(now)]).await? else { return Ok(None) };
            if row.get::<_, i32>(0) > FORMAT {
                return Err(corrupt("an inbox session of a later format"));
            }
            let expires_at = u64::try_from(row.get::<_, i64>(2)).map_err(|_| corrupt("an inbox session"))?;
            Ok(Some(InboxSession::new(row.get::<_, String>(1), Timestamp::from_unix_millis(expires_at), row.get(3))))
        }))
    }

    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>> {
        let s = &self.stores;
        Box::pin(s.run(async move {
            let client = s.client().await?;
            let close = client.prepare_cached(&s.sql("DELETE FROM {s}.inbox_session WHERE lookup = $1")).await?;
            client.execute(&close, &[&&lookup[..]]).await?;
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
        let s = &self.stores;
        Box::pin(s.run(async move {
            let client = s.client().await?;
            let mark = client
                .prepare_cached(&s.sql(
                    "INSERT INTO {s}.inbox_nonce AS n (scope, nonce, v, until) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (scope, nonce) DO UPDATE SET v = EXCLUDED.v, until = EXCLUDED.until
                     WHERE n.until <= $5 RETURNING 1",
                ))
                .await?;
            let marked = client.query_opt(&mark, &[&scope, &nonce, &FORMAT, &millis(until), &millis(now)]).await?;
            Ok(if marked.is_some() { NonceUse::Fresh } else { NonceUse::Used })
        }))
    }

    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let s = &self.stores;
        Box::pin(s.run(async move {
            let client = s.client().await?;
            let read = client
                .prepare_cached(&s.sql("SELECT v FROM {s}.inbox_nonce WHERE scope = $1 AND nonce = $2 AND until > $3"))
                .await?;
            let Some(row) = client.query_opt(&read, &[&scope, &nonce, &millis(now)]).await? else { return Ok(false) };
            if row.get::<_, i32>(0) > FORMAT {
                return Err(corrupt("a used form nonce of a later format"));
            }
            Ok(true)
        }))
    }

    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>> {
        let s = &self.stores;
        Box::pin(s.run(async move {
            let client = s.client().await?;
            // Two statements: the read sees the row of whichever replica inserted first.
            let insert =
                client
                    .prepare_cached(&s.sql(
                        "INSERT INTO {s}.inbox_key (name, v, key) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                    ))
                    .await?;
            client.execute(&insert, &[&name, &FORMAT, &&candidate[..]]).await?;
            let read = client.prepare_cached(&s.sql("SELECT v, key FROM {s}.inbox_key WHERE name = $1")).await?;
            let row = client.query_one(&read, &[&name]).await?;
            if row.get::<_, i32>(0) > FORMAT {
                return Err(corrupt("a form key of a later format"));
            }
            <[u8; 32]>::try_from(row.get::<_, Vec<u8>>(1)).map_err(|_| corrupt("a form key"))
        }))
    }
}
