//! [`PostgresIdempotencyStore`]: admission records shared by replicas, one row per
//! `(consumerKey, invocationId)` in `{schema}.idem`, leases on the database's clock.
//!
//! The record's states and fields are those of the Redis store (`run`, `done`, `gone`, `void`;
//! see the schema module), and so are the rules: a lease lasts
//! [`PostgresConfig::lease`](crate::PostgresConfig::lease) from its admission or last renewal on
//! the database's clock, a settlement writes only under the token that holds the record, a
//! cancelled attempt voids its claim (or settles its takeover with the unknown outcome) and is
//! remembered for ten minutes so that its admission, should the database run it later, claims
//! nothing.
//!
//! **Claims that never started.** A leader marks its record started (`IdempotencyStore::start`)
//! just before its handler runs, under its token and only while its lease holds. A claim whose
//! lease lapsed unmarked never had a handler run under it, so the next admission of the same
//! request claims it afresh (`Admission::Leader`, a new token), its followers learn that nothing
//! ran, and neither `start` nor `renew` revives the lapsed lease. Only a marked record, or one
//! taken over, is taken over with its unknown outcome; a cancelled takeover settles the record
//! with `EXECUTION_FAILED {reason: outcome-unknown}`, kept for `in_flight_retention`, rather than
//! freeing it.
//!
//! **Claims marked by their admission.** A call whose repetition is harmless (idempotent or
//! read-only) is admitted with `IdempotencyStore::admit_started`: the claim is written marked
//! started by the admission's own statement, and its leader sends no `start`. Such a claim whose
//! lease lapses is taken over, and the registry runs the harmless call again. Cancelling the
//! attempt that made it voids it, as it voids an unmarked claim: that attempt's caller never
//! learnt of the claim, so no handler ran under it. The two marks are told apart by the claiming
//! attempt, which a claim keeps until its leader marks it (`start` clears it): a claim still
//! holding the cancelled attempt was marked, if at all, by that attempt's own admission.
//!
//! Round trips: an admission is one statement (it claims the key unless a record holds it or
//! the attempt was cancelled, and otherwise answers the record as it stands: a replay, a
//! conflict, a follower of a live lease); the start mark, a settlement and a renewal are one
//! statement each (the settlement notifies the record's followers in the same statement,
//! delivered at its commit). A new call is three statements, two when its repetition is harmless
//! (its admission writes the mark); a replay is one.
//! Only what must change a record it found — a takeover of a lapsed lease, a fresh claim of a
//! released record — reads the row `FOR UPDATE` in a transaction. A cancellation locks it through
//! an insert instead, which waits for a claim of the key whose admission has not committed yet (a
//! `SELECT … FOR UPDATE` would not see it, and the claim would outlive its cancellation), and
//! leaves a voided record where there is none, so that an admission racing it takes the locked
//! path and finds its attempt cancelled: the locked path asks for the cancellation once it holds
//! the row's lock, which a cancellation takes too. A replay
//! writes nothing, so it waits for no flush of the write-ahead log.

use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, Reach, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use futures_util::future::BoxFuture;
use tokio::sync::broadcast;

use crate::listen::{ANY, digest};
use crate::schema::FORMAT;
use crate::{Fail, PostgresStores, corrupt, ms};

/// How long a released result, or a record voided by a cancellation, stays readable at least,
/// for followers that have not looked yet ([`PostgresIdempotencyStore::readable`]); an admission
/// in the meantime treats the key as free.
const RELEASED_READABLE: Duration = Duration::from_secs(10);

/// How long a cancelled attempt is remembered (its admission, should the database run it later,
/// is refused).
const CANCEL_MARKER: Duration = Duration::from_secs(600);

/// What a follower of a cancelled claim is asked to wait before it retries.
const VOID_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A new call's admission, one statement: claims the key unless a record holds it or the
/// attempt was cancelled, and otherwise answers the record as it stands (without a lock). $1
/// consumer, $2 invocation, $3 fingerprint, $4 lease (ms), $5 attempt, $6 time to live (ms), $7
/// format, $8 whether the claim is marked started as it is made (`admit_started`). Answers the
/// new token (or null), then the record's state, fingerprint, whether its lease holds, its
/// result, whether it is kept, and in how many ms its lease lapses (nulls when there is none).
const CLAIM: &str = "WITH held AS (
  SELECT state, fp, coalesce(lease_until > clock_timestamp(), false) AS live, result,
    keep_until > clock_timestamp() AS kept,
    coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint, 0) AS lapses_ms
  FROM {s}.idem WHERE consumer = $1 AND invocation = $2
), claimed AS (
  INSERT INTO {s}.idem (consumer, invocation, v, state, fp, token, lease_until, attempt, takeover, started, result, keep_until)
  SELECT $1, $2, $7, 'run', $3, nextval('{s}.idem_token'), clock_timestamp() + $4::bigint * interval '1 millisecond', $5,
    false, $8::boolean, NULL, clock_timestamp() + $6::bigint * interval '1 millisecond'
  WHERE NOT EXISTS (SELECT 1 FROM held)
    AND NOT EXISTS (SELECT 1 FROM {s}.idem_cancel WHERE attempt = $5 AND keep_until > clock_timestamp())
  ON CONFLICT (consumer, invocation) DO NOTHING
  RETURNING token
)
SELECT (SELECT token FROM claimed), held.state, held.fp, held.live, held.result, held.kept, held.lapses_ms
FROM (SELECT 1) AS one LEFT JOIN held ON true";

/// The record, locked, as an admission reads it.
const READ_FOR_UPDATE: &str = "SELECT state, fp, token, coalesce(lease_until > clock_timestamp(), false), result,
  keep_until > clock_timestamp(), coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint, 0),
  started OR takeover
FROM {s}.idem WHERE consumer = $1 AND invocation = $2 FOR UPDATE";

/// The record as a follower reads it (no lock).
const LOOK: &str = "SELECT state, fp, coalesce(lease_until > clock_timestamp(), false), result,
  keep_until > clock_timestamp(), coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint, 0),
  started OR takeover
FROM {s}.idem WHERE consumer = $1 AND invocation = $2";

/// [`LOOK`], waiting for a change of the row that has not committed yet (and reading its
/// outcome): the look that is about to answer "nothing ran" for a claim that lapsed unmarked
/// confirms it so, since a leader's mark (`START`) may have been judged within its lease and not
/// committed yet when the plain look read the row.
const LOOK_LOCKED: &str = "SELECT state, fp, coalesce(lease_until > clock_timestamp(), false), result,
  keep_until > clock_timestamp(), coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint, 0),
  started OR takeover
FROM {s}.idem WHERE consumer = $1 AND invocation = $2 FOR SHARE";

/// A fresh claim over a record that is free (released, voided, expired, or lapsed before its
/// leader marked it started: nothing ran under it). $3 fingerprint, $4
/// lease (ms), $5 attempt, $6 time to live (ms), $7 format, $8 whether it is marked started.
const RECLAIM: &str = "UPDATE {s}.idem SET v = $7, state = 'run', fp = $3, token = nextval('{s}.idem_token'),
  lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond', attempt = $5, takeover = false,
  started = $8::boolean,
  result = NULL,
  keep_until = clock_timestamp() + $6::bigint * interval '1 millisecond'
WHERE consumer = $1 AND invocation = $2 RETURNING token";

/// A takeover of a record whose lease lapsed. $3 lease (ms), $4 attempt, $5 time to live (ms).
const TAKE_OVER: &str = "UPDATE {s}.idem SET token = nextval('{s}.idem_token'),
  lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond', attempt = $4, takeover = true, started = true,
  keep_until = clock_timestamp() + $5::bigint * interval '1 millisecond'
WHERE consumer = $1 AND invocation = $2 RETURNING token";

/// Settlement under the token that holds the record, notifying its followers. $3 token, $4
/// fingerprint, $5 `done` or `gone`, $6 result, $7 time to live (ms), $8 channel, $9 digest.
/// Answers how many rows it settled.
const SETTLE: &str = "WITH u AS (
  UPDATE {s}.idem SET state = $5, result = $6, lease_until = NULL, attempt = NULL, takeover = false, started = false,
    keep_until = clock_timestamp() + $7::bigint * interval '1 millisecond'
  WHERE consumer = $1 AND invocation = $2 AND state = 'run' AND token = $3 AND fp = $4
  RETURNING 1
), n AS (SELECT pg_notify($8, $9) FROM u)
SELECT (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM n)";

/// Whether the record was settled by this very token with this very result (a settlement
/// repeated after an attempt whose answer was lost, which landed). $3 token, $4 fingerprint, $5
/// result.
const SETTLED_BEFORE: &str = "SELECT EXISTS (SELECT 1 FROM {s}.idem WHERE consumer = $1 AND invocation = $2
  AND state IN ('done', 'gone') AND token = $3 AND fp = $4 AND result = $5 AND keep_until > clock_timestamp())";

/// Renewal under the token that holds the record, unless its lease lapsed before it was marked
/// started (that lapse is final). $3 token, $4 lease (ms), $5 time to live (ms).
const RENEW: &str = "UPDATE {s}.idem SET lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond',
  keep_until = clock_timestamp() + $5::bigint * interval '1 millisecond'
WHERE consumer = $1 AND invocation = $2 AND state = 'run' AND token = $3
  AND (started OR takeover OR lease_until > clock_timestamp())";

/// The mark that a handler is about to start, under the token that holds the record and only
/// while its lease holds; renews the lease. It clears the claiming attempt: a claim its leader
/// learnt of can no longer be cancelled as one nobody learnt of. $3 token, $4 lease (ms), $5 time
/// to live (ms).
const START: &str = "UPDATE {s}.idem SET started = true, attempt = NULL,
  lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond',
  keep_until = clock_timestamp() + $5::bigint * interval '1 millisecond'
WHERE consumer = $1 AND invocation = $2 AND state = 'run' AND token = $3 AND lease_until > clock_timestamp()";

/// The record of a key being cancelled, locked: inserted as a voided record when there is none (an
/// insert waits for a claim of the key that has not committed yet, and then locks it). $1
/// consumer, $2 invocation, $3 format, $4 how long a voided record stays (ms). Answers the
/// record's state, its claiming attempt and whether it is a takeover.
const LOCK_FOR_CANCEL: &str = "INSERT INTO {s}.idem (consumer, invocation, v, state, fp, token, keep_until)
VALUES ($1, $2, $3, 'void', ''::bytea, 0, clock_timestamp() + $4::bigint * interval '1 millisecond')
ON CONFLICT (consumer, invocation) DO UPDATE SET v = {s}.idem.v
RETURNING state, attempt, takeover";

/// The mark of a cancelled attempt. $1 attempt, $2 how long (ms).
const MARK_CANCELLED: &str = "INSERT INTO {s}.idem_cancel (attempt, keep_until)
VALUES ($1, clock_timestamp() + $2::bigint * interval '1 millisecond')
ON CONFLICT (attempt) DO UPDATE SET keep_until = EXCLUDED.keep_until";

/// An `IdempotencyStore` in PostgreSQL: at most one execution per `(consumerKey, invocationId)`
/// across every replica that connects to the database.
///
/// - **Admission** claims the key if it is free (one statement), else reads the record `FOR
///   UPDATE` and replays a stored result, conflicts on another fingerprint, joins a call in
///   flight, or takes over a call whose leader's lease lapsed (`Admission::TakeOver`).
/// - **Leases** last [`PostgresConfig::lease`](crate::PostgresConfig::lease) on the database's
///   clock; the registry renews them every third of that while the call runs. A replica that
///   dies mid-call stops renewing; after the lease, the next identical call takes the record
///   over, and the registry answers it `EXECUTION_FAILED {reason: outcome-unknown}` for a
///   capability whose repetition is not harmless — never a second execution.
/// - **Settlement** writes only if the fencing token still holds the record (else
///   `StoreError::LeaseLost`); a settlement repeated under the lease that made it is answered as
///   settled.
/// - **Followers** on any replica wait for the settlement's notification (see the crate docs),
///   and look at the record when the leader's lease would lapse; a follower whose leader's lease
///   lapsed, whose record went or now belongs to another request, or whose looks fail for a
///   whole lease, is answered `EXECUTION_FAILED {reason: outcome-unknown}`. A released result
///   stays readable for a lease, two op timeouts and a second (10 s at least); a look that finds
///   a claim lapsed before its leader marked it started confirms it under a lock before it
///   answers that nothing ran.
///
/// A record in flight is kept for
/// [`PostgresConfig::in_flight_retention`](crate::PostgresConfig::in_flight_retention) after its
/// leader's last admission or renewal, stored results until the `expires_at` of their settlement
/// (counted from the settlement on the database's clock).
#[derive(Clone, Debug)]
pub struct PostgresIdempotencyStore {
    stores: PostgresStores,
}

fn token_sql(token: u64) -> Result<i64, Fail> {
    i64::try_from(token).map_err(|_| corrupt("token"))
}

fn token_of(token: i64) -> Result<u64, Fail> {
    u64::try_from(token).map_err(|_| corrupt("token"))
}

fn fingerprint_of(bytes: &[u8]) -> Result<Fingerprint, Fail> {
    <[u8; 32]>::try_from(bytes).map(Fingerprint::from_bytes).map_err(|_| corrupt("fingerprint"))
}

/// What a follower's look found.
enum Looked {
    /// The leader is still at it; its lease lapses in this long.
    Waiting(Duration),
    /// The result of this request.
    Settled(InvokeResult),
    /// The leader's result cannot be learnt here: its lease lapsed, or the record went or now
    /// belongs to another request.
    Lost,
    /// The claim was cancelled, or its lease lapsed, before its handler started: nothing ran.
    Void,
    /// The claim's lease lapsed with no mark that its handler started, as a look without a lock
    /// read it: [`Void`](Looked::Void) once a locked look confirms it.
    Unmarked,
}

/// What an admission decided, before a follower's wait is built.
enum Admitted {
    Done(Admission),
    Follow(Duration),
    /// The row went between the claim and the read: try again.
    Again,
}

impl PostgresIdempotencyStore {
    /// How long a released result, or a record voided by a cancellation, stays readable: at least
    /// [`RELEASED_READABLE`], and longer than a follower may go without reading it — a follower
    /// cut off from the database keeps trying for as long as a lease lasts, each try taking up to
    /// `op_timeout` — so that it reads what happened rather than finding nothing and answering an
    /// unknown outcome for a call that never ran (as the Redis store's window).
    fn readable(&self) -> Duration {
        let config = &self.stores.inner.config;
        let follower =
            config.lease.saturating_add(config.op_timeout.saturating_mul(2)).saturating_add(Duration::from_secs(1));
        RELEASED_READABLE.max(follower)
    }

    pub(crate) fn new(stores: PostgresStores) -> PostgresIdempotencyStore {
        PostgresIdempotencyStore { stores }
    }

    fn lease(&self, token: u64) -> Lease {
        Lease { token, renew_every: Some(self.stores.inner.config.lease / 3) }
    }

    /// Admits `key`; with `started`, a claim it makes (fresh or taken over) is marked started as
    /// it is made ([`IdempotencyStore::admit_started`]).
    async fn admit_now(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        started: bool,
    ) -> Result<Admission, StoreError> {
        // Subscribed before the admission, so that no settlement after it goes unheard.
        let woken = self.stores.inner.listener.subscribe();
        let decided = self.stores.run(self.admit_tx(key, fingerprint, attempt, started)).await?;
        match decided {
            Admitted::Done(admission) => Ok(admission),
            Admitted::Follow(lapses_in) => {
                Ok(Admission::Follower(Box::pin(follow(self.clone(), key.clone(), fingerprint, woken, lapses_in))))
            }
            Admitted::Again => Err(StoreError::Unavailable("postgres: an admission kept racing".to_string())),
        }
    }

    async fn admit_tx(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        started: bool,
    ) -> Result<Admitted, Fail> {
        let config = &self.stores.inner.config;
        let (lease, keep) = (ms(config.lease), ms(config.in_flight_retention));
        let attempt_bytes = attempt.as_u128().to_be_bytes().to_vec();
        let fp = fingerprint.as_bytes().to_vec();
        let mut client = self.stores.client().await?;
        for _ in 0..4 {
            let claim = client.prepare_cached(&self.stores.sql(CLAIM)).await?;
            let row = client
                .query_one(
                    &claim,
                    &[&key.consumer_key, &key.invocation_id, &fp, &lease, &attempt_bytes, &keep, &FORMAT, &started],
                )
                .await?;
            if let Some(token) = row.get::<_, Option<i64>>(0) {
                return Ok(Admitted::Done(Admission::Leader(self.lease(token_of(token)?))));
            }
            // A record that is kept, not released or voided, and whose lease (if in flight)
            // holds, is answered as it stands: a stored result is never changed, and a follower
            // looks again before it is answered. The rest (no record: the attempt was cancelled,
            // or a racing claim; a free record; a lapsed lease) is decided under the row's lock.
            let state: Option<String> = row.get(1);
            let kept = row.get::<_, Option<bool>>(5) == Some(true);
            if let Some(state) = state.filter(|s| kept && (s == "done" || s == "run")) {
                let stored_fp: Vec<u8> = row.get(2);
                if stored_fp != fp {
                    return Ok(Admitted::Done(Admission::Conflict { stored: fingerprint_of(&stored_fp)? }));
                }
                if state == "done" {
                    let text: String = row.get::<_, Option<String>>(4).ok_or_else(|| corrupt("a stored result"))?;
                    let result = serde_json::from_str(&text).map_err(|_| corrupt("a stored result"))?;
                    return Ok(Admitted::Done(Admission::Replay(result)));
                }
                if row.get::<_, Option<bool>>(3) == Some(true) {
                    let lapses_ms = row.get::<_, Option<i64>>(6).unwrap_or(0);
                    return Ok(Admitted::Follow(Duration::from_millis(u64::try_from(lapses_ms).unwrap_or(0))));
                }
            }
            let tx = client.transaction().await?;
            let read = tx.prepare_cached(&self.stores.sql(READ_FOR_UPDATE)).await?;
            let row = tx.query_opt(&read, &[&key.consumer_key, &key.invocation_id]).await?;
            // Asked once the row is locked: a cancellation of this attempt locks the same row, so
            // either it committed before this read (and its mark is seen here), or it waits for
            // this transaction and then finds the claim this attempt makes, which it voids. (With
            // no row at all, the claim above was refused or raced a sweep: the mark tells which.)
            let cancelled: bool = tx
                .query_one(
                    &tx.prepare_cached(&self.stores.sql(
                        "SELECT EXISTS (SELECT 1 FROM {s}.idem_cancel WHERE attempt = $1 AND keep_until > clock_timestamp())",
                    ))
                    .await?,
                    &[&attempt_bytes],
                )
                .await?
                .get(0);
            if cancelled {
                return Err(StoreError::AttemptCancelled.into());
            }
            let Some(row) = row else {
                // Deleted between the claim and the read (a sweep): claim again.
                continue;
            };
            let (state, stored_fp, live, result, kept, lapses_ms): (String, Vec<u8>, bool, Option<String>, bool, i64) =
                (row.get(0), row.get(1), row.get(3), row.get(4), row.get(5), row.get(6));
            let may_have_run: bool = row.get(7);
            // A claim whose lease lapsed before its leader marked it started ran nothing: the
            // same request claims it afresh.
            let never_started = state == "run" && !live && !may_have_run && stored_fp == fp;
            let free = !kept || state == "gone" || state == "void" || never_started;
            let decided = if free {
                let reclaim = tx.prepare_cached(&self.stores.sql(RECLAIM)).await?;
                let row = tx
                    .query_one(
                        &reclaim,
                        &[&key.consumer_key, &key.invocation_id, &fp, &lease, &attempt_bytes, &keep, &FORMAT, &started],
                    )
                    .await?;
                Admitted::Done(Admission::Leader(self.lease(token_of(row.get(0))?)))
            } else if stored_fp != fp {
                Admitted::Done(Admission::Conflict { stored: fingerprint_of(&stored_fp)? })
            } else if state == "done" {
                let text = result.ok_or_else(|| corrupt("a stored result"))?;
                let result = serde_json::from_str(&text).map_err(|_| corrupt("a stored result"))?;
                Admitted::Done(Admission::Replay(result))
            } else if state != "run" {
                return Err(corrupt("an idempotency record's state"));
            } else if live {
                Admitted::Follow(Duration::from_millis(u64::try_from(lapses_ms).unwrap_or(0)))
            } else {
                let take = tx.prepare_cached(&self.stores.sql(TAKE_OVER)).await?;
                let row = tx
                    .query_one(&take, &[&key.consumer_key, &key.invocation_id, &lease, &attempt_bytes, &keep])
                    .await?;
                Admitted::Done(Admission::TakeOver(self.lease(token_of(row.get(0))?)))
            };
            tx.commit().await?;
            return Ok(decided);
        }
        Ok(Admitted::Again)
    }

    async fn settle_now(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (state, result, keep) = match settlement {
            // The window is counted from now on the database's clock.
            Settlement::Store { result, expires_at } if expires_at > now => {
                ("done", result, expires_at.saturating_duration_since(now))
            }
            Settlement::Store { result, .. } | Settlement::Release { result } => ("gone", result, self.readable()),
        };
        let max = self.stores.inner.config.max_result_bytes;
        let settled = self.stores.run(async {
            let mut text = serde_json::to_string(&result).map_err(|_| corrupt("a result"))?;
            if text.len() > max {
                // The leader's caller and followers on this replica have the result; the record
                // keeps that it was withheld, so a retry learns the call ran and never runs it again.
                let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
                text = serde_json::to_string(&InvokeResult::error(withheld.into_payload(), None))
                    .map_err(|_| corrupt("a result"))?;
            }
            let token = token_sql(lease.token)?;
            let fp = fingerprint.as_bytes().to_vec();
            let client = self.stores.client().await?;
            let settle = client.prepare_cached(&self.stores.sql(SETTLE)).await?;
            let channel = self.stores.inner.listener.channel().to_string();
            let woken = digest(&key.consumer_key, &key.invocation_id);
            let keep = ms(keep);
            let row = client
                .query_one(
                    &settle,
                    &[&key.consumer_key, &key.invocation_id, &token, &fp, &state, &text, &keep, &channel, &woken],
                )
                .await?;
            if row.get::<_, i64>(0) == 1 {
                return Ok(true);
            }
            let before = client.prepare_cached(&self.stores.sql(SETTLED_BEFORE)).await?;
            Ok(client.query_one(&before, &[&key.consumer_key, &key.invocation_id, &token, &fp, &text]).await?.get(0))
        });
        if settled.await? { Ok(()) } else { Err(StoreError::LeaseLost) }
    }

    async fn cancel_now(&self, key: &IdempotencyKey, attempt: Attempt) -> Result<(), StoreError> {
        let outcome = self.stores.run(async {
            let attempt_bytes = attempt.as_u128().to_be_bytes().to_vec();
            let mut client = self.stores.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                &tx.prepare_cached(&self.stores.sql(MARK_CANCELLED)).await?,
                &[&attempt_bytes, &ms(CANCEL_MARKER)],
            )
            .await?;
            // The record, locked; or, where there is none, a voided one in its place. An insert
            // waits for an admission of the key that has not committed yet (a `SELECT … FOR
            // UPDATE` would not see its claim, which would then outlive this cancellation), and
            // the voided record sends an admission that raced this one to the locked path, where
            // it finds the attempt cancelled.
            let claim = Some(
                tx.query_one(
                    &tx.prepare_cached(&self.stores.sql(LOCK_FOR_CANCEL)).await?,
                    &[&key.consumer_key, &key.invocation_id, &FORMAT, &ms(self.readable())],
                )
                .await?,
            );
            let ours = claim.as_ref().is_some_and(|row| {
                row.get::<_, String>(0) == "run"
                    && row.get::<_, Option<Vec<u8>>>(1).as_deref() == Some(&attempt_bytes[..])
            });
            // The attempt's caller never learnt of its claim, so it never marked it started (and a
            // leader's mark clears the claiming attempt, `START`): a claim still holding this
            // attempt and marked started was marked by its own admission (`admit_started`), and is
            // voided as an unmarked one is. Only a takeover may have had a handler run under it (an
            // earlier leader's).
            let outcome = match claim {
                Some(row) if ours && row.get::<_, bool>(2) => {
                    // A handler may have run under the record (an earlier leader's, displaced and
                    // answered the unknown outcome): it is settled as the takeover would have
                    // settled it for a write, never freed nor left in flight.
                    let unknown = InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None);
                    let unknown = serde_json::to_string(&unknown).map_err(|_| corrupt("a result"))?;
                    tx.execute(
                        &tx.prepare_cached(&self.stores.sql(
                            "UPDATE {s}.idem SET state = 'done', result = $3, lease_until = NULL, attempt = NULL,
                               takeover = false, started = false,
                               keep_until = clock_timestamp() + $4::bigint * interval '1 millisecond'
                             WHERE consumer = $1 AND invocation = $2",
                        ))
                        .await?,
                        &[
                            &key.consumer_key,
                            &key.invocation_id,
                            &unknown,
                            &ms(self.stores.inner.config.in_flight_retention),
                        ],
                    )
                    .await?;
                    let channel = self.stores.inner.listener.channel().to_string();
                    let woken = digest(&key.consumer_key, &key.invocation_id);
                    tx.execute("SELECT pg_notify($1, $2)", &[&channel, &woken]).await?;
                    2
                }
                Some(_) if ours => {
                    let channel = self.stores.inner.listener.channel().to_string();
                    let woken = digest(&key.consumer_key, &key.invocation_id);
                    tx.execute(
                        &tx.prepare_cached(&self.stores.sql(
                            "UPDATE {s}.idem SET state = 'void', lease_until = NULL, attempt = NULL, takeover = false,
                               started = false, keep_until = clock_timestamp() + $3::bigint * interval '1 millisecond'
                             WHERE consumer = $1 AND invocation = $2",
                        ))
                        .await?,
                        &[&key.consumer_key, &key.invocation_id, &ms(self.readable())],
                    )
                    .await?;
                    tx.execute("SELECT pg_notify($1, $2)", &[&channel, &woken]).await?;
                    1
                }
                _ => 0,
            };
            tx.commit().await?;
            Ok(outcome)
        });
        match outcome.await? {
            1 => tracing::warn!(
                target: "agent_surface::invoke",
                %attempt,
                "an admission nobody learnt of had claimed an idempotency record; the claim was voided"
            ),
            2 => tracing::warn!(
                target: "agent_surface::invoke",
                %attempt,
                "an admission nobody learnt of had taken an idempotency record over; the record now holds the unknown outcome"
            ),
            _ => {}
        }
        Ok(())
    }

    async fn start_now(&self, key: &IdempotencyKey, lease: Lease) -> Result<(), StoreError> {
        self.guarded(START, key, lease).await
    }

    async fn renew_now(&self, key: &IdempotencyKey, lease: Lease) -> Result<(), StoreError> {
        self.guarded(RENEW, key, lease).await
    }

    /// Runs [`START`] or [`RENEW`] (the same arguments): `LeaseLost` when it changed nothing.
    async fn guarded(&self, sql: &'static str, key: &IdempotencyKey, lease: Lease) -> Result<(), StoreError> {
        let config = &self.stores.inner.config;
        let renewed = self.stores.run(async {
            let token = token_sql(lease.token)?;
            let client = self.stores.client().await?;
            let renew = client.prepare_cached(&self.stores.sql(sql)).await?;
            Ok(client
                .execute(
                    &renew,
                    &[
                        &key.consumer_key,
                        &key.invocation_id,
                        &token,
                        &ms(config.lease),
                        &ms(config.in_flight_retention),
                    ],
                )
                .await?)
        });
        if renewed.await? == 1 { Ok(()) } else { Err(StoreError::LeaseLost) }
    }

    async fn look(&self, key: &IdempotencyKey, fingerprint: &Fingerprint) -> Result<Looked, StoreError> {
        self.stores
            .run(async {
                let client = self.stores.client().await?;
                let look = client.prepare_cached(&self.stores.sql(LOOK)).await?;
                let row = client.query_opt(&look, &[&key.consumer_key, &key.invocation_id]).await?;
                let first = looked(row, fingerprint)?;
                if !matches!(first, Looked::Unmarked) {
                    return Ok(first);
                }
                // About to say that nothing ran: read the row again, waiting for a mark that may
                // be committing (the plain look saw the version before it).
                let locked = client.prepare_cached(&self.stores.sql(LOOK_LOCKED)).await?;
                let row = client.query_opt(&locked, &[&key.consumer_key, &key.invocation_id]).await?;
                Ok(match looked(row, fingerprint)? {
                    Looked::Unmarked => Looked::Void,
                    other => other,
                })
            })
            .await
    }
}

/// What a follower's look at `row` found ([`Looked::Unmarked`] for a claim that lapsed before its
/// leader marked it started, which the look confirms before it answers [`Looked::Void`]).
fn looked(row: Option<tokio_postgres::Row>, fingerprint: &Fingerprint) -> Result<Looked, Fail> {
    let Some(row) = row else { return Ok(Looked::Lost) };
    let (state, fp, live, result, kept, lapses_ms): (String, Vec<u8>, bool, Option<String>, bool, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
    let may_have_run: bool = row.get(6);
    if !kept || fp != fingerprint.as_bytes() {
        return Ok(Looked::Lost);
    }
    Ok(match state.as_str() {
        "void" => Looked::Void,
        "run" if live => Looked::Waiting(Duration::from_millis(u64::try_from(lapses_ms).unwrap_or(0))),
        // Lapsed before its leader marked it started: nothing ran under it.
        "run" if !may_have_run => Looked::Unmarked,
        "run" => Looked::Lost,
        "done" | "gone" => {
            let text = result.ok_or_else(|| corrupt("a stored result"))?;
            Looked::Settled(serde_json::from_str(&text).map_err(|_| corrupt("a stored result"))?)
        }
        _ => return Err(corrupt("an idempotency record's state")),
    })
}

/// Waits until a notification for `mine` (or for everyone) arrives, or `within` passes.
async fn woken_for(woken: &mut broadcast::Receiver<String>, mine: &str, within: Duration) {
    let wait = async {
        loop {
            match woken.recv().await {
                Ok(d) if d == mine || d == ANY => return,
                Ok(_) => {}
                // Fell behind: look anyway. Closed: the stores are gone; the lease bounds the wait.
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    let _ = tokio::time::timeout(within, wait).await;
}

/// A follower on any replica: waits for the settlement's notification, and looks at the record
/// when woken or when the leader's lease would lapse. Looks that fail are retried for as long as
/// a lease lasts; after that, or when the leader is lost, the follower learns that the outcome
/// is unknown.
async fn follow(
    store: PostgresIdempotencyStore,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    mut woken: broadcast::Receiver<String>,
    lapses_in: Duration,
) -> InvokeResult {
    let lease = store.stores.inner.config.lease;
    let mine = digest(&key.consumer_key, &key.invocation_id);
    // A little past the lapse, so that the look finds it lapsed rather than just alive.
    let margin = Duration::from_millis(5);
    let mut wait = (lapses_in + margin).min(lease + margin);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        woken_for(&mut woken, &mine, wait).await;
        match store.look(&key, &fingerprint).await {
            Ok(Looked::Waiting(lapses_in)) => {
                failing_since = None;
                wait = (lapses_in + margin).min(lease + margin);
            }
            Ok(Looked::Settled(result)) => return result,
            Ok(Looked::Void | Looked::Unmarked) => {
                tracing::warn!(
                    target: "agent_surface::invoke",
                    "the call this request joined ended before its handler started; the follower is told to retry"
                );
                let nothing_ran = AgentSurfaceError::transient(VOID_RETRY_AFTER);
                return InvokeResult::error(nothing_ran.into_payload(), Some(key.invocation_id));
            }
            Ok(Looked::Lost) => {
                tracing::warn!(
                    target: "agent_surface::invoke",
                    "the call this request joined lost its leader; the follower is told to reconcile"
                );
                break;
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() < lease {
                    tracing::warn!(target: "agent_surface::invoke", error = %agent_surface_policy::redacted(&e), "a follower could not look at its leader's record");
                    wait = Duration::from_millis(50);
                    continue;
                }
                tracing::error!(
                    target: "agent_surface::invoke",
                    error = %agent_surface_policy::redacted(&e),
                    "a follower could not look at its leader's record for a whole lease; it is told to reconcile"
                );
                break;
            }
        }
    }
    InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), Some(key.invocation_id))
}

impl IdempotencyStore for PostgresIdempotencyStore {
    fn reach(&self) -> Reach {
        Reach::Shared
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        Box::pin(self.admit_now(key, fingerprint, attempt, false))
    }

    /// [`admit`](Self::admit), the claim (fresh, or a takeover) written marked started by the
    /// same statement: one statement when the key is free.
    fn admit_started<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(Admission, bool), StoreError>> {
        Box::pin(async move {
            let admission = self.admit_now(key, fingerprint, attempt, true).await?;
            let marked = matches!(admission, Admission::Leader(_) | Admission::TakeOver(_));
            Ok((admission, marked))
        })
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.cancel_now(key, attempt))
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.settle_now(key, fingerprint, lease, settlement, now))
    }

    fn start<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.start_now(key, lease))
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.renew_now(key, lease))
    }
}
