//! [`PostgresConfirmationStore`]: confirmations in `{schema}.conf`, one row per record, each
//! operation one transaction.
//!
//! A row holds the record as JSON (`agent_surface_policy::stored::StoredConfirmation`, format
//! [`FORMAT`](crate::schema::FORMAT)) and, beside it, what the indexes and the single-use rules
//! need: its state, its deadline, when it is gone (deadline +
//! [`PostgresConfig::retention`](crate::PostgresConfig::retention)), whether its expiry event
//! is recorded and until when a claim to record it holds, and the consumption token while it may be reinstated. An operation reads the row
//! `FOR UPDATE`, decides with the rules every store shares (`ConfirmationRecord::decide` and
//! `ConfirmationRecord::consume`, the memory store's: the quorum's matching, the requester rule,
//! the order of the checks), and writes the row back in the same transaction: two
//! replicas deciding, consuming or withdrawing one record queue on its row lock.
//!
//! The confirmations relayed to callers live in `conf_relay`: a relay key (a digest of the
//! call's binding, never a consumer key or an input) → a confirmation id, one key per record.
//! `insert_relayed` claims the key first (an insert that waits for a racing claim of the same
//! key to commit), then either answers the open record the key holds or adds the new record and
//! points the key at it: identical calls racing without evidence, on any replicas, open one
//! confirmation between them.

use agent_surface_core::Timestamp;
use agent_surface_policy::stored::{StoredConfirmation, state_name};
use agent_surface_policy::{
    ConfirmationRecord, ConfirmationStore, Reach, StoreError,
    confirmation::{
        ApprovalVerdict, ConfirmationBinding, ConfirmationState, Consumed, Decided, Inserted, Rejection, RelayKey,
        SlotSet,
    },
};
use deadpool_postgres::Transaction;
use futures_util::future::BoxFuture;

use crate::schema::FORMAT;
use crate::{Fail, PostgresStores, corrupt, millis};

fn parse(v: i32, text: &str) -> Result<ConfirmationRecord, Fail> {
    if v > FORMAT {
        return Err(corrupt("a confirmation of a later format"));
    }
    let stored: StoredConfirmation = serde_json::from_str(text).map_err(|_| corrupt("a confirmation"))?;
    stored.into_record().ok_or_else(|| corrupt("a confirmation"))
}

/// A confirmation store in PostgreSQL (see the module docs): the semantics the
/// `ConfirmationStore` trait documents, shared by every replica, each operation one transaction
/// answered after its commit. Records are kept until `expires_at +`
/// [`PostgresConfig::retention`](crate::PostgresConfig::retention).
#[derive(Clone, Debug)]
pub struct PostgresConfirmationStore {
    stores: PostgresStores,
}

impl PostgresConfirmationStore {
    pub(crate) fn new(stores: PostgresStores) -> PostgresConfirmationStore {
        PostgresConfirmationStore { stores }
    }

    /// The live record `id` (not past its retention), locked, and its consumption token.
    async fn live(
        &self,
        tx: &Transaction<'_>,
        id: &str,
        now: Timestamp,
    ) -> Result<Option<(ConfirmationRecord, Option<String>)>, Fail> {
        let read = tx
            .prepare_cached(
                &self.stores.sql("SELECT v, record, token FROM {s}.conf WHERE id = $1 AND gone_at > $2 FOR UPDATE"),
            )
            .await?;
        let row = tx.query_opt(&read, &[&id, &millis(now)]).await?;
        row.map(|row| Ok((parse(row.get(0), row.get::<_, &str>(1))?, row.get(2)))).transpose()
    }

    /// Writes `record` back (its state, decisions and token).
    async fn write(&self, tx: &Transaction<'_>, record: &ConfirmationRecord, token: Option<&str>) -> Result<(), Fail> {
        let text = serde_json::to_string(&StoredConfirmation::of(record)).map_err(|_| corrupt("a confirmation"))?;
        let write = tx
            .prepare_cached(
                &self.stores.sql("UPDATE {s}.conf SET v = $2, state = $3, record = $4, token = $5 WHERE id = $1"),
            )
            .await?;
        tx.execute(&write, &[&record.id, &FORMAT, &state_name(&record.state).0, &text, &token]).await?;
        Ok(())
    }

    /// Adds a pending record (an id that exists already is an error).
    async fn insert_in(&self, tx: &Transaction<'_>, record: &ConfirmationRecord, now: Timestamp) -> Result<(), Fail> {
        let text = serde_json::to_string(&StoredConfirmation::of(record)).map_err(|_| corrupt("a confirmation"))?;
        let gone_at = millis(record.expires_at.saturating_add(self.stores.inner.config.retention));
        // An id whose record is past its retention may be used again (its relay key goes with it).
        let gone = tx
            .execute(
                &tx.prepare_cached(&self.stores.sql("DELETE FROM {s}.conf WHERE id = $1 AND gone_at <= $2")).await?,
                &[&record.id, &millis(now)],
            )
            .await?;
        if gone > 0 {
            tx.execute(
                &tx.prepare_cached(&self.stores.sql("DELETE FROM {s}.conf_relay WHERE id = $1")).await?,
                &[&record.id],
            )
            .await?;
        }
        let insert = tx
            .prepare_cached(&self.stores.sql(
                "INSERT INTO {s}.conf (id, v, state, expires_at, gone_at, expiry_claimed, token, record)
                 VALUES ($1, $2, $3, $4, $5, false, NULL, $6) ON CONFLICT (id) DO NOTHING",
            ))
            .await?;
        let inserted = tx
            .execute(
                &insert,
                &[&record.id, &FORMAT, &state_name(&record.state).0, &millis(record.expires_at), &gone_at, &text],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::Unavailable(format!("confirmation id {} already exists", record.id)).into());
        }
        Ok(())
    }

    /// Runs `op` in one transaction, committed before the answer.
    async fn in_tx<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        F: for<'t, 'c> FnOnce(&'t Self, &'t Transaction<'c>) -> BoxFuture<'t, Result<T, Fail>> + Send,
        T: Send,
    {
        self.stores
            .run(async {
                let mut client = self.stores.client().await?;
                let tx = client.transaction().await?;
                let answer = op(self, &tx).await?;
                tx.commit().await?;
                Ok(answer)
            })
            .await
    }

    async fn decide_now(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &str,
        slots: SlotSet,
        now: Timestamp,
    ) -> Result<Decided, StoreError> {
        let (id, approver) = (id.to_string(), approver.to_string());
        self.in_tx(move |store, tx| {
            Box::pin(async move {
                let approver = approver.as_str();
                let Some((mut record, token)) = store.live(tx, &id, now).await? else { return Ok(Decided::Unknown) };
                let decided = record.decide(verdict, approver, slots, now);
                if decided == Decided::Done {
                    store.write(tx, &record, token.as_deref()).await?;
                } else if decided.drops_consumption_token(verdict) && token.is_some() {
                    store.write(tx, &record, None).await?;
                }
                Ok(decided)
            })
        })
        .await
    }

    /// Makes `key` hold `id`, and only `key` (one key per record: the record's earlier key goes).
    async fn relay(&self, tx: &Transaction<'_>, key: &[u8], id: &str) -> Result<(), Fail> {
        tx.execute(
            &tx.prepare_cached(&self.stores.sql("DELETE FROM {s}.conf_relay WHERE id = $1 AND key <> $2")).await?,
            &[&id, &key],
        )
        .await?;
        tx.execute(
            &tx.prepare_cached(&self.stores.sql(
                "INSERT INTO {s}.conf_relay (key, v, id) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET v = EXCLUDED.v, id = EXCLUDED.id",
            ))
            .await?,
            &[&key, &FORMAT, &id],
        )
        .await?;
        Ok(())
    }

    /// Records as a listing reads them: `SELECT v, record …` with `$1` now and `$2` the limit.
    async fn records(
        &self,
        sql: &'static str,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<ConfirmationRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.stores
            .run(async {
                let client = self.stores.client().await?;
                let list = client.prepare_cached(&self.stores.sql(sql)).await?;
                let rows = client.query(&list, &[&millis(now), &limit]).await?;
                rows.iter().map(|row| parse(row.get(0), row.get::<_, &str>(1))).collect()
            })
            .await
    }
}

impl ConfirmationStore for PostgresConfirmationStore {
    fn reach(&self) -> Reach {
        Reach::Shared
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.in_tx(move |store, tx| Box::pin(async move { store.insert_in(tx, &record, now).await })))
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        let key = key.as_bytes().to_vec();
        Box::pin(self.in_tx(move |store, tx| {
            Box::pin(async move {
                // Claim the key first: a racing claim of the same key commits (or rolls back)
                // before this one goes on, and then its record is the one found below.
                let claim = tx
                    .prepare_cached(&store.stores.sql(
                        "INSERT INTO {s}.conf_relay (key, v, id) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING",
                    ))
                    .await?;
                let claimed = tx.execute(&claim, &[&key, &FORMAT, &record.id]).await? == 1;
                if !claimed {
                    let held: Option<String> = tx
                        .query_opt(
                            &tx.prepare_cached(
                                &store.stores.sql("SELECT id FROM {s}.conf_relay WHERE key = $1 FOR UPDATE"),
                            )
                            .await?,
                            &[&key],
                        )
                        .await?
                        .map(|row| row.get(0));
                    if let Some(held) = held
                        && let Some((open, _)) = store.live(tx, &held, now).await?
                        && matches!(open.state, ConfirmationState::Pending | ConfirmationState::Approved { .. })
                        && now < open.expires_at
                        && open.binding == record.binding
                    {
                        return Ok(Inserted::Held(Box::new(open)));
                    }
                }
                store.insert_in(tx, &record, now).await?;
                store.relay(tx, &key, &record.id).await?;
                Ok(Inserted::New)
            })
        }))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        Box::pin(self.stores.run(async move {
            let client = self.stores.client().await?;
            let read = client
                .prepare_cached(&self.stores.sql("SELECT v, record FROM {s}.conf WHERE id = $1 AND gone_at > $2"))
                .await?;
            let row = client.query_opt(&read, &[&id, &millis(now)]).await?;
            row.map(|row| parse(row.get(0), row.get::<_, &str>(1))).transpose()
        }))
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(self.decide_now(id, verdict, approver, SlotSet::ANY, now))
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(self.decide_now(id, verdict, approver, slots, now))
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        let (id, expected) = (id.to_string(), expected.clone());
        Box::pin(self.in_tx(move |store, tx| {
            Box::pin(async move {
                let Some((mut record, _)) = store.live(tx, &id, now).await? else { return Ok(Err(Rejection::Unknown)) };
                let approved_by = match record.consume(&expected, now) {
                    Ok(approved_by) => approved_by,
                    Err(rejection) => return Ok(Err(rejection)),
                };
                let token = agent_surface_core::id::random_id("k-");
                store.write(tx, &record, Some(&token)).await?;
                Ok(Ok(Consumed::new(approved_by).with_token(token)))
            })
        }))
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.in_tx(move |store, tx| {
            Box::pin(async move {
                let Some((mut record, token)) = store.live(tx, &id, now).await? else { return Ok(None) };
                if record.state == ConfirmationState::Pending {
                    record.state = ConfirmationState::Withdrawn;
                    store.write(tx, &record, token.as_deref()).await?;
                }
                Ok(Some(record.state))
            })
        }))
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(self.records(
            "SELECT v, record FROM {s}.conf WHERE state = 'pending' AND expires_at > $1 ORDER BY expires_at, id LIMIT $2",
            now,
            limit,
        ))
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.stores.run(async move {
            // One statement: a claim of a live record whose expiry is neither recorded nor under a
            // claim that holds (a racing claimer waits for the row and then finds it claimed), or
            // no record (nothing to record twice).
            let client = self.stores.client().await?;
            let claim = client
                .prepare_cached(&self.stores.sql(
                    "WITH u AS (UPDATE {s}.conf SET expiry_claim_until = $3
                       WHERE id = $1 AND gone_at > $2 AND NOT expiry_claimed
                         AND (expiry_claim_until IS NULL OR expiry_claim_until <= $2) RETURNING 1)
                     SELECT (SELECT count(*) FROM u) = 1
                       OR NOT EXISTS (SELECT 1 FROM {s}.conf WHERE id = $1 AND gone_at > $2)",
                ))
                .await?;
            Ok(client.query_one(&claim, &[&id, &millis(now), &millis(until)]).await?.get(0))
        }))
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.stores.run(async move {
            let client = self.stores.client().await?;
            let recorded = client
                .prepare_cached(&self.stores.sql(
                    "UPDATE {s}.conf SET expiry_claimed = true, expiry_claim_until = NULL WHERE id = $1 AND gone_at > $2",
                ))
                .await?;
            client.execute(&recorded, &[&id, &millis(now)]).await?;
            Ok(())
        }))
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (id, expected, token) = (id.to_string(), expected.clone(), token.to_string());
        Box::pin(self.in_tx(move |store, tx| {
            Box::pin(async move {
                let Some((mut record, held)) = store.live(tx, &id, now).await? else { return Ok(false) };
                if !record.binding.mismatch(&expected).is_empty() || now >= record.expires_at {
                    return Ok(false);
                }
                let ConfirmationState::Consumed { approved_by } = &record.state else { return Ok(false) };
                if held.as_deref() != Some(token.as_str()) {
                    return Ok(false);
                }
                record.state = ConfirmationState::Approved { by: approved_by.clone() };
                store.write(tx, &record, None).await?;
                Ok(true)
            })
        }))
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(self.records(
            "SELECT v, record FROM {s}.conf WHERE NOT expiry_claimed AND state IN ('pending', 'approved', 'withdrawn')
               AND expires_at <= $1 AND gone_at > $1 AND (expiry_claim_until IS NULL OR expiry_claim_until <= $1)
             ORDER BY expires_at, id LIMIT $2",
            now,
            limit,
        ))
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (key, id) = (key.as_bytes().to_vec(), id.to_string());
        Box::pin(self.in_tx(move |store, tx| {
            Box::pin(async move {
                if store.live(tx, &id, now).await?.is_none() {
                    return Ok(());
                }
                store.relay(tx, &key, &id).await
            })
        }))
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let key = key.as_bytes().to_vec();
        Box::pin(self.stores.run(async move {
            let client = self.stores.client().await?;
            let read = client
                .prepare_cached(&self.stores.sql(
                    "SELECT r.id FROM {s}.conf_relay r JOIN {s}.conf c ON c.id = r.id WHERE r.key = $1 AND c.gone_at > $2",
                ))
                .await?;
            Ok(client.query_opt(&read, &[&key, &millis(now)]).await?.map(|row| row.get(0)))
        }))
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = now;
        let key = key.as_bytes().to_vec();
        Box::pin(self.stores.run(async move {
            let client = self.stores.client().await?;
            let forget = client
                .prepare_cached(&self.stores.sql("DELETE FROM {s}.conf_relay WHERE key = $1 AND id = $2"))
                .await?;
            client.execute(&forget, &[&key, &id]).await?;
            Ok(())
        }))
    }
}
