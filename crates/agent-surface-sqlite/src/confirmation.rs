//! [`SqliteConfirmationStore`]: confirmations in the file, one row per record, each operation
//! one step of the database thread.
//!
//! A row holds the record as JSON (`agent_surface_policy::stored::StoredConfirmation`, format [`FORMAT`](crate::schema::FORMAT)) and,
//! beside it, what the indexes and the single-use rules need: its state, its deadline, when it is
//! gone (deadline + [`SqliteConfig::retention`](crate::SqliteConfig::retention)), whether its
//! expiry was claimed, and the consumption token while it may be reinstated. An operation reads
//! the row, decides with the rules every store shares (`ConfirmationRecord::decide` and
//! `ConfirmationRecord::consume`, the memory store's: the quorum's matching, the requester rule,
//! the order of the checks), and writes the row back, in one transaction that nothing else
//! interleaves with; its answer is sent once that transaction is on disk.
//!
//! The confirmations relayed to callers live in `conf_relay`: a relay key (a digest of the call's
//! binding, never a consumer key or an input) → a confirmation id, one key per record, deleted
//! with the record. `insert_relayed` reads the key, and either answers the open record it holds
//! or adds the new record and claims the key, in one transaction: identical calls racing
//! without evidence open one confirmation between them.

use agent_surface_core::Timestamp;
use agent_surface_policy::stored::{StoredConfirmation, state_name};
use agent_surface_policy::{
    ConfirmationRecord, ConfirmationStore, Reach, StoreError,
    confirmation::{
        ApprovalVerdict, ConfirmationBinding, ConfirmationState, Consumed, Decided, Inserted, Rejection, RelayKey,
        SlotSet,
    },
};
use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};

use crate::db::{Cx, Fail, corrupt};
use crate::schema::FORMAT;
use crate::{SqliteStores, millis};

fn parse(v: i64, text: &str) -> Result<ConfirmationRecord, Fail> {
    if v > FORMAT {
        return Err(corrupt("a confirmation of a later format"));
    }
    let stored: StoredConfirmation = serde_json::from_str(text).map_err(|_| corrupt("a confirmation"))?;
    stored.into_record().ok_or_else(|| corrupt("a confirmation"))
}

/// A confirmation store in the file (see the module docs): the semantics the
/// `ConfirmationStore` trait documents, each operation one transaction, every state change on
/// disk before it is answered — an approval given before a crash is there after it, and
/// evidence consumed before a crash stays consumed. Records are kept until `expires_at +`
/// [`SqliteConfig::retention`](crate::SqliteConfig::retention).
#[derive(Clone, Debug)]
pub struct SqliteConfirmationStore {
    stores: SqliteStores,
}

/// The live record `id` (not past its retention) and its consumption token.
fn live(cx: &Cx<'_>, id: &str, now: Timestamp) -> Result<Option<(ConfirmationRecord, Option<String>)>, Fail> {
    let row = cx
        .conn
        .prepare_cached("SELECT v, record, token FROM conf WHERE id = ?1 AND gone_at > ?2")?
        .query_row(params![id, millis(now)], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?))
        })
        .optional()?;
    row.map(|(v, text, token)| Ok((parse(v, &text)?, token))).transpose()
}

/// Writes `record` back (its state, decisions and token).
fn write(cx: &Cx<'_>, record: &ConfirmationRecord, token: Option<&str>) -> Result<(), Fail> {
    let text = serde_json::to_string(&StoredConfirmation::of(record)).map_err(|_| corrupt("a confirmation"))?;
    cx.conn
        .prepare_cached("UPDATE conf SET v = ?2, state = ?3, record = ?4, token = ?5 WHERE id = ?1")?
        .execute(params![record.id, FORMAT, state_name(&record.state).0, text, token])?;
    Ok(())
}

fn decide(
    cx: &mut Cx<'_>,
    id: &str,
    verdict: ApprovalVerdict,
    approver: &str,
    slots: SlotSet,
    now: Timestamp,
) -> Result<Decided, Fail> {
    cx.saw(now);
    let Some((mut record, token)) = live(cx, id, now)? else { return Ok(Decided::Unknown) };
    let decided = record.decide(verdict, approver, slots, now);
    if decided == Decided::Done {
        write(cx, &record, token.as_deref())?;
    } else if decided.drops_consumption_token(verdict) && token.is_some() {
        write(cx, &record, None)?;
    }
    Ok(decided)
}

fn consume(
    cx: &mut Cx<'_>,
    id: &str,
    expected: &ConfirmationBinding,
    now: Timestamp,
) -> Result<Result<Consumed, Rejection>, Fail> {
    cx.saw(now);
    let Some((mut record, _)) = live(cx, id, now)? else { return Ok(Err(Rejection::Unknown)) };
    let approved_by = match record.consume(expected, now) {
        Ok(approved_by) => approved_by,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let token = agent_surface_core::id::random_id("k-");
    write(cx, &record, Some(&token))?;
    Ok(Ok(Consumed::new(approved_by).with_token(token)))
}

fn reinstate(
    cx: &mut Cx<'_>,
    id: &str,
    expected: &ConfirmationBinding,
    token: &str,
    now: Timestamp,
) -> Result<bool, Fail> {
    cx.saw(now);
    let Some((mut record, held)) = live(cx, id, now)? else { return Ok(false) };
    if !record.binding.mismatch(expected).is_empty() || now >= record.expires_at {
        return Ok(false);
    }
    let ConfirmationState::Consumed { approved_by } = &record.state else { return Ok(false) };
    if held.as_deref().map(str::as_bytes) != Some(token.as_bytes()) {
        return Ok(false);
    }
    record.state = ConfirmationState::Approved { by: approved_by.clone() };
    write(cx, &record, None)?;
    Ok(true)
}

/// Adds a pending record (an id that exists already is an error).
fn insert(
    cx: &mut Cx<'_>,
    record: ConfirmationRecord,
    retention: std::time::Duration,
    now: Timestamp,
) -> Result<(), Fail> {
    cx.saw(now);
    let text = serde_json::to_string(&StoredConfirmation::of(&record)).map_err(|_| corrupt("a confirmation"))?;
    let gone_at = millis(record.expires_at.saturating_add(retention));
    // An id whose record is past its retention may be used again (its relay key goes with it).
    let gone = cx
        .conn
        .prepare_cached("DELETE FROM conf WHERE id = ?1 AND gone_at <= ?2")?
        .execute(params![record.id, millis(now)])?;
    if gone > 0 {
        cx.conn.prepare_cached("DELETE FROM conf_relay WHERE id = ?1")?.execute(params![record.id])?;
    }
    let inserted = cx
        .conn
        .prepare_cached(
            "INSERT OR IGNORE INTO conf (id, v, state, expires_at, gone_at, expiry_claimed, token, record)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, NULL, ?6)",
        )?
        .execute(params![record.id, FORMAT, state_name(&record.state).0, millis(record.expires_at), gone_at, text])?;
    if inserted == 0 {
        return Err(StoreError::Unavailable(format!("confirmation id {} already exists", record.id)).into());
    }
    Ok(())
}

/// Makes `key` hold `id`, and only `key` (one key per record: the record's earlier key goes).
fn relay(cx: &Cx<'_>, key: &[u8; 32], id: &str) -> Result<(), Fail> {
    cx.conn.prepare_cached("DELETE FROM conf_relay WHERE id = ?1")?.execute(params![id])?;
    cx.conn.prepare_cached("INSERT OR REPLACE INTO conf_relay (key, v, id) VALUES (?1, ?2, ?3)")?.execute(params![
        key.as_slice(),
        FORMAT,
        id
    ])?;
    Ok(())
}

/// Records as a listing reads them: `SELECT v, record …`.
fn records(cx: &Cx<'_>, sql: &str, now: Timestamp, limit: usize) -> Result<Vec<ConfirmationRecord>, Fail> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut statement = cx.conn.prepare_cached(sql)?;
    let rows =
        statement.query_map(params![millis(now), limit], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (v, text) = row?;
        out.push(parse(v, &text)?);
    }
    Ok(out)
}

impl SqliteConfirmationStore {
    pub(crate) fn new(stores: SqliteStores) -> SqliteConfirmationStore {
        SqliteConfirmationStore { stores }
    }
}

impl ConfirmationStore for SqliteConfirmationStore {
    fn reach(&self) -> Reach {
        Reach::Durable
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        let retention = self.stores.config.retention;
        Box::pin(self.stores.db.run(move |cx| insert(cx, record, retention, now)))
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        let (retention, key) = (self.stores.config.retention, *key.as_bytes());
        Box::pin(self.stores.db.run(move |cx| {
            let held = cx
                .conn
                .prepare_cached("SELECT id FROM conf_relay WHERE key = ?1")?
                .query_row(params![key.as_slice()], |r| r.get::<_, String>(0))
                .optional()?;
            if let Some(held) = held
                && let Some((open, _)) = live(cx, &held, now)?
                && matches!(open.state, ConfirmationState::Pending | ConfirmationState::Approved { .. })
                && now < open.expires_at
                && open.binding == record.binding
            {
                return Ok(Inserted::Held(Box::new(open)));
            }
            let id = record.id.clone();
            insert(cx, record, retention, now)?;
            relay(cx, &key, &id)?;
            Ok(Inserted::New)
        }))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            Ok(live(cx, &id, now)?.map(|(record, _)| record))
        }))
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        self.decide_in_slots(id, verdict, approver, SlotSet::ANY, now)
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        let (id, approver) = (id.to_string(), approver.to_string());
        Box::pin(self.stores.db.run(move |cx| decide(cx, &id, verdict, &approver, slots, now)))
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        let (id, expected) = (id.to_string(), expected.clone());
        Box::pin(self.stores.db.run(move |cx| consume(cx, &id, &expected, now)))
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let Some((mut record, token)) = live(cx, &id, now)? else { return Ok(None) };
            if record.state == ConfirmationState::Pending {
                record.state = ConfirmationState::Withdrawn;
                write(cx, &record, token.as_deref())?;
            }
            Ok(Some(record.state))
        }))
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            records(
                cx,
                "SELECT v, record FROM conf WHERE state = 'pending' AND expires_at > ?1
                 ORDER BY expires_at, id LIMIT ?2",
                now,
                limit,
            )
        }))
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let held = cx
                .conn
                .prepare_cached("SELECT expiry_claimed, expiry_claim_until FROM conf WHERE id = ?1 AND gone_at > ?2")?
                .query_row(params![id, millis(now)], |r| Ok((r.get::<_, bool>(0)?, r.get::<_, Option<i64>>(1)?)))
                .optional()?;
            match held {
                None => Ok(true),
                Some((true, _)) => Ok(false),
                Some((false, Some(claimed))) if claimed > millis(now) => Ok(false),
                Some((false, _)) => {
                    cx.conn
                        .prepare_cached("UPDATE conf SET expiry_claim_until = ?2 WHERE id = ?1")?
                        .execute(params![id, millis(until)])?;
                    Ok(true)
                }
            }
        }))
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            cx.conn
                .prepare_cached(
                    "UPDATE conf SET expiry_claimed = 1, expiry_claim_until = NULL WHERE id = ?1 AND gone_at > ?2",
                )?
                .execute(params![id, millis(now)])?;
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
        Box::pin(self.stores.db.run(move |cx| reinstate(cx, &id, &expected, &token, now)))
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            records(
                cx,
                "SELECT v, record FROM conf WHERE expiry_claimed = 0 AND state IN ('pending', 'approved', 'withdrawn')
                   AND expires_at <= ?1 AND gone_at > ?1 AND (expiry_claim_until IS NULL OR expiry_claim_until <= ?1)
                 ORDER BY expires_at, id LIMIT ?2",
                now,
                limit,
            )
        }))
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (key, id) = (*key.as_bytes(), id.to_string());
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            if live(cx, &id, now)?.is_none() {
                return Ok(());
            }
            relay(cx, &key, &id)
        }))
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let key = *key.as_bytes();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let id = cx
                .conn
                .prepare_cached(
                    "SELECT r.id FROM conf_relay r JOIN conf c ON c.id = r.id WHERE r.key = ?1 AND c.gone_at > ?2",
                )?
                .query_row(params![key.as_slice(), millis(now)], |r| r.get::<_, String>(0))
                .optional()?;
            Ok(id)
        }))
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (key, id) = (*key.as_bytes(), id.to_string());
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            cx.conn
                .prepare_cached("DELETE FROM conf_relay WHERE key = ?1 AND id = ?2")?
                .execute(params![key.as_slice(), id])?;
            Ok(())
        }))
    }
}
