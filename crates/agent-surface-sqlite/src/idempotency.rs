//! [`SqliteIdempotencyStore`]: admission records in the file, one row per `(consumerKey,
//! invocationId)`, each operation one step of the database thread.
//!
//! The file belongs to one process at a time (the crate docs), so this store keeps the
//! semantics of the memory store where a process's own calls are concerned, and adds what a
//! restart needs:
//!
//! - **Leases hold until settled** (`Lease::renew_every` is `None`): the leader is in this
//!   process, which settles on every path. Tokens grow with every lease (a counter that starts
//!   above every token in the file).
//! - **Followers wait in memory** on the leader's record and are handed its result when the
//!   settlement is committed; no polling.
//! - **A restart ends the calls that were in flight.** Opening the file marks every record still
//!   in flight as *lapsed*: its leader's process ended, and whether its effect happened is
//!   unknown. The next admission of the same request takes the record over
//!   (`Admission::TakeOver`, with a greater token), and the registry answers it as the rule for
//!   a takeover says (a second run only where repeating the call is harmless, else
//!   `EXECUTION_FAILED {reason: outcome-unknown}`) — never a silent second execution. A lapsed
//!   record nobody asks about again is deleted `in_flight_retention` after its admission.
//! - **A settlement that could not be written** (an I/O error, a full disk) leaves the record in
//!   flight; the store then treats it as lapsed (its followers learn that the outcome is unknown,
//!   and the next admission takes it over), so a retry is never left waiting on it. It is
//!   remembered in memory until a transaction commits again, which writes it as lapsed.
//! - **Followers belong to one claim.** A settlement or cancellation takes the followers of the
//!   claim it ends as it runs, so an admission carried out after it in the same transaction (a new
//!   claim of a released record, and that claim's followers) waits for its own leader. A
//!   cancelled takeover tells its followers that the outcome is unknown.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, Reach, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};
use tokio::sync::watch;

use crate::db::{Cx, Fail, corrupt};
use crate::memory::CANCELLED_KEPT;
use crate::schema::FORMAT;
use crate::{SqliteConfig, SqliteStores, millis};

/// What a follower of a cancelled claim is asked to wait before it retries.
const VOID_RETRY_AFTER: Duration = Duration::from_secs(1);

/// An `IdempotencyStore` in the SQLite file: at most one execution per `(consumerKey,
/// invocationId)` in the process that holds the file, across its restarts (see the module docs).
///
/// Admission, settlement and cancellation are each one transaction: once `admit` answered
/// `Leader`, the claim is on disk, and once `settle` answered `Ok`, the result is — a crash
/// after either loses neither. Stored results are kept until the `expires_at` of their
/// settlement; a result over [`SqliteConfig::max_result_bytes`] is recorded as withheld
/// (`EXECUTION_FAILED {reason: output-too-large}`), as the other stores do.
#[derive(Clone, Debug)]
pub struct SqliteIdempotencyStore {
    stores: SqliteStores,
}

/// A record as admission reads it.
struct Row {
    done: bool,
    fingerprint: [u8; 32],
    token: u64,
    lapsed: bool,
    result: Option<String>,
    gone_at: i64,
}

fn read(cx: &Cx<'_>, key: &IdempotencyKey) -> Result<Option<Row>, Fail> {
    let row = cx
        .conn
        .prepare_cached(
            "SELECT v, state, fp, token, lapsed, result, gone_at FROM idem WHERE consumer = ?1 AND invocation = ?2",
        )?
        .query_row(params![key.consumer_key, key.invocation_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Vec<u8>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })
        .optional()?;
    let Some((v, state, fp, token, lapsed, result, gone_at)) = row else { return Ok(None) };
    if v > FORMAT {
        return Err(corrupt("an idempotency record of a later format"));
    }
    let fingerprint = <[u8; 32]>::try_from(fp.as_slice()).map_err(|_| corrupt("fingerprint"))?;
    let token = u64::try_from(token).map_err(|_| corrupt("token"))?;
    Ok(Some(Row { done: state == 1, fingerprint, token, lapsed, result, gone_at }))
}

fn token_sql(token: u64) -> Result<i64, Fail> {
    i64::try_from(token).map_err(|_| corrupt("token"))
}

fn admit(
    cx: &mut Cx<'_>,
    config: &SqliteConfig,
    key: &IdempotencyKey,
    fingerprint: Fingerprint,
    attempt: Attempt,
    now: Timestamp,
) -> Result<Admission, Fail> {
    cx.saw(now);
    if !cx.mem.cancelled.is_empty() && cx.mem.cancelled.contains(&attempt) {
        return Err(StoreError::AttemptCancelled.into());
    }
    let now_ms = millis(now);
    let row = read(cx, key)?.filter(|row| row.gone_at > now_ms || !(row.done || row.lapsed));
    let gone_at = millis(now.saturating_add(config.in_flight_retention));
    let attempt_bytes = attempt.as_u128().to_be_bytes();
    if let Some(row) = row {
        if row.fingerprint != *fingerprint.as_bytes() {
            return Ok(Admission::Conflict { stored: Fingerprint::from_bytes(row.fingerprint) });
        }
        if row.done {
            let text = row.result.ok_or_else(|| corrupt("a stored result"))?;
            let result = serde_json::from_str(&text).map_err(|_| corrupt("a stored result"))?;
            return Ok(Admission::Replay(result));
        }
        let lapsed = row.lapsed || cx.mem.orphaned.get(key) == Some(&row.token);
        if !lapsed {
            let sender = cx.mem.followers.entry(key.clone()).or_insert_with(|| watch::channel(None).0);
            return Ok(Admission::Follower(agent_surface_policy::idempotency::follow(
                sender.subscribe(),
                key.invocation_id.clone(),
            )));
        }
        let token = cx.mem.next_token();
        cx.conn
            .prepare_cached(
                "UPDATE idem SET token = ?3, attempt = ?4, takeover = 1, lapsed = 0, gone_at = ?5
                 WHERE consumer = ?1 AND invocation = ?2",
            )?
            .execute(params![key.consumer_key, key.invocation_id, token_sql(token)?, attempt_bytes, gone_at])?;
        let taken = key.clone();
        cx.after(move |mem, committed| {
            if committed {
                mem.orphaned.remove(&taken);
            }
        });
        return Ok(Admission::TakeOver(Lease::until_settled(token)));
    }
    let token = cx.mem.next_token();
    cx.conn
        .prepare_cached(
            "INSERT OR REPLACE INTO idem (consumer, invocation, v, state, fp, token, attempt, takeover, lapsed, result, gone_at)
             VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, 0, 0, NULL, ?7)",
        )?
        .execute(params![
            key.consumer_key,
            key.invocation_id,
            FORMAT,
            fingerprint.as_bytes(),
            token_sql(token)?,
            attempt_bytes,
            gone_at
        ])?;
    Ok(Admission::Leader(Lease::until_settled(token)))
}

fn settle(
    cx: &mut Cx<'_>,
    config: &SqliteConfig,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    lease: Lease,
    settlement: Settlement,
    now: Timestamp,
) -> Result<(), Fail> {
    cx.saw(now);
    let holds = read(cx, &key)?
        .is_some_and(|row| !row.done && row.token == lease.token && row.fingerprint == *fingerprint.as_bytes());
    if !holds {
        return Err(StoreError::LeaseLost.into());
    }
    let (stored, result) = match settlement {
        Settlement::Store { result, expires_at } if expires_at > now => (Some(expires_at), result),
        Settlement::Store { result, .. } | Settlement::Release { result } => (None, result),
    };
    // Registered before the write, so that a write that fails leaves the record lapsed. The
    // followers are this claim's: taken now, so that an admission later in the same batch (a
    // new claim once this one is released, and its followers) waits for its own leader.
    let token = lease.token;
    let for_followers = result.clone();
    let hook_key = key.clone();
    let followers = cx.mem.followers.remove(&key);
    cx.after(move |mem, committed| {
        if committed {
            tell(followers, for_followers);
            return;
        }
        tracing::error!(
            target: "agent_surface::invoke",
            "a settlement could not be written; the record stays in flight and its retries learn that the outcome is unknown"
        );
        mem.orphaned.insert(hook_key, token);
        tell(followers, InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None));
    });
    match stored {
        Some(expires_at) => {
            let mut text = serde_json::to_string(&result).map_err(|_| corrupt("a result"))?;
            if text.len() > config.max_result_bytes {
                // The caller and the followers have the result; the record keeps that it was
                // withheld, so that a retry learns the call ran and never runs it again.
                let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
                text = serde_json::to_string(&InvokeResult::error(withheld.into_payload(), None))
                    .map_err(|_| corrupt("a result"))?;
            }
            cx.conn
                .prepare_cached(
                    "UPDATE idem SET state = 1, result = ?3, attempt = NULL, takeover = 0, lapsed = 0, gone_at = ?4
                     WHERE consumer = ?1 AND invocation = ?2",
                )?
                .execute(params![key.consumer_key, key.invocation_id, text, millis(expires_at)])?;
        }
        None => {
            cx.conn
                .prepare_cached("DELETE FROM idem WHERE consumer = ?1 AND invocation = ?2")?
                .execute(params![key.consumer_key, key.invocation_id])?;
        }
    }
    Ok(())
}

fn cancel(cx: &mut Cx<'_>, key: IdempotencyKey, attempt: Attempt, now: Timestamp) -> Result<(), Fail> {
    cx.saw(now);
    let claim = cx
        .conn
        .prepare_cached("SELECT state, attempt, takeover FROM idem WHERE consumer = ?1 AND invocation = ?2")?
        .query_row(params![key.consumer_key, key.invocation_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<Vec<u8>>>(1)?, r.get::<_, bool>(2)?))
        })
        .optional()?;
    let ours = attempt.as_u128().to_be_bytes();
    match claim {
        Some((0, Some(claimed), takeover)) if claimed == ours => {
            // This claim's followers, taken now (see `settle`), answered once the change is
            // committed and left waiting on the claim if it is not.
            let followers = cx.mem.followers.remove(&key);
            if takeover {
                // The earlier leader may have run: the record must be taken over again, never
                // freed, and its followers learn that the outcome is unknown.
                cx.conn
                    .prepare_cached(
                        "UPDATE idem SET lapsed = 1, attempt = NULL WHERE consumer = ?1 AND invocation = ?2",
                    )?
                    .execute(params![key.consumer_key, key.invocation_id])?;
                tracing::warn!(
                    target: "agent_surface::invoke",
                    %attempt,
                    "an admission nobody learnt of had taken an idempotency record over; its lease was made to lapse"
                );
                cx.after(move |mem, committed| {
                    if committed {
                        let unknown = AgentSurfaceError::outcome_unknown().into_payload();
                        tell(followers, InvokeResult::error(unknown, Some(key.invocation_id)));
                    } else {
                        wait_again(mem, key, followers);
                    }
                });
            } else {
                cx.conn
                    .prepare_cached("DELETE FROM idem WHERE consumer = ?1 AND invocation = ?2")?
                    .execute(params![key.consumer_key, key.invocation_id])?;
                tracing::warn!(
                    target: "agent_surface::invoke",
                    %attempt,
                    "an admission nobody learnt of had claimed an idempotency record; the claim was voided"
                );
                let invocation_id = key.invocation_id.clone();
                cx.after(move |mem, committed| {
                    if committed {
                        let nothing_ran = AgentSurfaceError::transient(VOID_RETRY_AFTER);
                        tell(followers, InvokeResult::error(nothing_ran.into_payload(), Some(invocation_id)));
                    } else {
                        wait_again(mem, key, followers);
                    }
                });
            }
        }
        _ => {
            if cx.mem.cancelled.len() == CANCELLED_KEPT {
                cx.mem.cancelled.pop_front();
            }
            cx.mem.cancelled.push_back(attempt);
        }
    }
    Ok(())
}

/// Answers the followers of one claim, taken out of `Memory::followers` by the operation that
/// ended it.
fn tell(followers: Option<watch::Sender<Option<InvokeResult>>>, result: InvokeResult) {
    if let Some(sender) = followers {
        sender.send_replace(Some(result));
    }
}

/// Puts back the followers of a claim whose end was not committed: they wait on it again. A
/// sender made meanwhile belongs to an operation of the same failed transaction, which was
/// answered with its failure.
fn wait_again(
    mem: &mut crate::memory::Memory,
    key: IdempotencyKey,
    followers: Option<watch::Sender<Option<InvokeResult>>>,
) {
    if let Some(sender) = followers {
        mem.followers.insert(key, sender);
    }
}

/// Marks every record in flight as lapsed (its leader's process has ended): run when the file is
/// opened. Returns how many there were.
pub(crate) fn lapse_all(conn: &rusqlite::Connection) -> rusqlite::Result<usize> {
    conn.execute("UPDATE idem SET lapsed = 1 WHERE state = 0 AND lapsed = 0", [])
}

/// The largest fencing token in the file.
pub(crate) fn last_token(conn: &rusqlite::Connection) -> rusqlite::Result<u64> {
    let max: i64 = conn.query_row("SELECT coalesce(max(token), 0) FROM idem", [], |r| r.get(0))?;
    Ok(u64::try_from(max).unwrap_or(0))
}

impl SqliteIdempotencyStore {
    pub(crate) fn new(stores: SqliteStores) -> SqliteIdempotencyStore {
        SqliteIdempotencyStore { stores }
    }

    fn config(&self) -> Arc<SqliteConfig> {
        self.stores.config.clone()
    }
}

impl IdempotencyStore for SqliteIdempotencyStore {
    fn reach(&self) -> Reach {
        Reach::Durable
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        let (config, key) = (self.config(), key.clone());
        Box::pin(self.stores.db.run(move |cx| admit(cx, &config, &key, fingerprint, attempt, now)))
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = key.clone();
        Box::pin(self.stores.db.run(move |cx| cancel(cx, key, attempt, now)))
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (config, key) = (self.config(), key.clone());
        Box::pin(self.stores.db.run(move |cx| settle(cx, &config, key, fingerprint, lease, settlement, now)))
    }

    /// Nothing to mark: leases hold until settled in this one process (only a restart lapses
    /// them, and then every record in flight is taken over as one whose handler may have run),
    /// and an admission its caller gave up on is cancelled on the same owner thread, after it.
    fn start<'a>(
        &'a self,
        _key: &'a IdempotencyKey,
        _lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = key.clone();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let lapsed_here = |row: &Row| cx.mem.orphaned.get(&key) == Some(&row.token);
            match read(cx, &key)? {
                Some(row) if !row.done && !row.lapsed && row.token == lease.token && !lapsed_here(&row) => Ok(()),
                _ => Err(StoreError::LeaseLost.into()),
            }
        }))
    }
}
