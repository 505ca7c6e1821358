//! [`RedisIdempotencyStore`]: admission records shared by replicas, one hash per
//! `(consumerKey, invocationId)`, one script per operation, leases on Redis' clock.
//!
//! | field | holds |
//! |---|---|
//! | `s` | the state: `run` (a leader holds it), `done` (a stored result), `gone` (a released result, readable briefly by followers, otherwise absent), `void` (a claim cancelled before its handler started, readable briefly by followers, otherwise absent) |
//! | `fp` | the request's fingerprint (64 hex digits) |
//! | `t` | the fencing token of the lease that holds (or last held) the record |
//! | `le` | while `run`: when the lease lapses (Unix milliseconds on Redis' clock) |
//! | `a` | while `run`: the attempt (32 hex digits) whose admission made the claim |
//! | `k` | while `run`: how the claim was made, `lead` or `takeover` |
//! | `go` | while `run`: `1` once a handler may have started under the record (its leader marked it started, or it was taken over); `2` from the claim on when its admission marked it (`IdempotencyStore::admit_started`, a capability that may run twice) |
//! | `v` | while `run`: the claim's format, `2` since claims are marked started; a claim without it (an older build's) counts as started |
//! | `r` | once `done` or `gone`: the result (JSON) |
//!
//! Tokens come from one counter per prefix (`{prefix}idem-fence:`), so no two leases ever share
//! one, even across a record that was released and claimed again; the counter never falls below
//! Redis' clock in microseconds, so tokens keep growing even if it were lost. A record in flight lives
//! `in_flight_retention` past its leader's last admission or renewal, so it always outlives the
//! lease by far: a retry after a crash finds it and is never taken for a new call.
//!
//! # Cancelled admissions
//!
//! A caller whose admission did not answer within its budget (Redis stalled) tells its caller
//! that nothing ran; but the script it sent stays queued on the connection and runs when Redis
//! resumes, claiming the record for a leader that will never run. The registry therefore cancels
//! the attempt (`IdempotencyStore::cancel`), and the `CANCEL` script, one atomic step:
//!
//! - finds the record `run` under that attempt, made by `lead`: the handler never started, so the
//!   record becomes `void`, readable as long as a released result
//!   ([`RedisIdempotencyStore::readable`]; followers that joined the claim, on any replica,
//!   learn that nothing ran — `EXECUTION_FAILED {reason: transport}`, retry after a delay — never
//!   an unknown outcome), and the next admission leads afresh;
//! - finds it `run` under that attempt, made by `takeover`: the earlier leader may have run (and,
//!   displaced, its settlement is refused, so it answered its caller the unknown outcome), so the
//!   record is settled as the takeover would have settled it for a write —
//!   `EXECUTION_FAILED {reason: outcome-unknown}`, kept for `in_flight_retention` — rather than
//!   freed, or left in flight for nobody to settle;
//! - in every case sets `{prefix}idem-cancel:{attempt}` for [`CANCEL_MARKER`]: an admission of that
//!   attempt that Redis runs later is refused (`StoreError::AttemptCancelled`) and claims nothing.
//!
//! # Claims that never started
//!
//! A leader marks its record started (`IdempotencyStore::start`, the `START` script) just before
//! its handler runs, under its fencing token and only while its lease holds. A claim whose lease
//! lapsed unmarked never had a handler run under it — its leader stalled or died between admission
//! and execution, or the admission landed after its caller gave up and the cancellation had not
//! arrived yet — so the next admission claims it afresh (`lead`, under a new token), followers
//! polling it learn that nothing ran, and neither `START` nor `RENEW` revives the lapsed lease:
//! the lapse is final. Only a marked record (`go`), or one taken over, is taken over with an
//! unknown outcome. This is what keeps a stalled admission from turning a call that never ran into
//! `outcome-unknown`.
//!
//! A call whose capability may run twice without harm (idempotent or read-only) is marked by its
//! admission instead (`IdempotencyStore::admit_started`: `go` = `2` from the claim on, and no
//! `START`), two round trips a call rather than three: lapsed, its record is taken over and the
//! call run again, which is harmless for it. `CANCEL` still voids such a claim, as an unmarked
//! one: the caller that cancels its attempt never started a handler under it.
//!
//! Commands on one connection run in order, so a cancellation sent on the connection the admission
//! went out on runs after it (the first two cases). A reconnect can lose the cancellation (the
//! registry retries it, at most a second apart, until Redis answers, for up to 30 s) or let it
//! overtake the admission queued on the old connection (the third case: the marker refuses it).

use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
use agent_surface_policy::{
    IdempotencyStore, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use futures_util::future::BoxFuture;
use redis::Script;

use crate::told::TOLD_MAX_POLL;
use crate::{RedisStores, evalsha, parse_hash, ttl_ms};

/// Redis' clock in milliseconds, as the first lines of every script that reads it.
const NOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Admission. KEYS: the record, the token counter, the attempt's cancellation marker. ARGV:
/// fingerprint, lease (ms), time to live of a record in flight (ms), attempt, `2` to mark a claim
/// started as it is made (`go`; else `0`). Returns `{verdict,
/// value}`: `lead`/`takeover` and the token, `follow` and the token, `replay` and the result,
/// `conflict` and the stored fingerprint, `cancelled` (the attempt was cancelled: nothing claimed).
const ADMIT: &str = r"
if redis.call('EXISTS', KEYS[3]) == 1 then return {'cancelled', ''} end
-- Tokens grow with every lease and never fall below Redis' clock in microseconds, so that they
-- keep growing even if the counter itself were lost (a restore from an older snapshot).
local function next_token()
  local tok = redis.call('INCR', KEYS[2])
  local floor = now * 1000
  if tok < floor then
    redis.call('SET', KEYS[2], string.format('%d', floor))
    tok = floor
  end
  return tok
end
local f = redis.call('HMGET', KEYS[1], 's', 'fp', 't', 'le', 'r', 'go', 'k', 'v')
local s = f[1]
if s == 'run' or s == 'done' then
  if f[2] ~= ARGV[1] then return {'conflict', f[2]} end
  if s == 'done' then return {'replay', f[5]} end
  if tonumber(f[4]) > now then return {'follow', f[3]} end
  local tok = next_token()
  local le = string.format('%d', now + tonumber(ARGV[2]))
  -- A lapsed claim that was never marked started ran nothing: it is claimed afresh. A claim of an
  -- older build (no `v`) or one taken over may have run.
  if f[6] ~= '1' and f[6] ~= '2' and f[7] ~= 'takeover' and f[8] == '2' then
    redis.call('HSET', KEYS[1], 't', string.format('%d', tok), 'le', le, 'a', ARGV[4], 'k', 'lead')
    if ARGV[5] == '2' then redis.call('HSET', KEYS[1], 'go', '2') end
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {'lead', string.format('%d', tok)}
  end
  redis.call('HSET', KEYS[1], 't', string.format('%d', tok), 'le', le, 'a', ARGV[4], 'k', 'takeover', 'go', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'takeover', string.format('%d', tok)}
end
local tok = next_token()
-- A released or voided record (`gone`, `void`) is cleared before it is claimed afresh; a new key
-- has nothing to clear (every record this store writes has `s`), so it costs no `DEL`.
if s then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 's', 'run', 'fp', ARGV[1], 't', string.format('%d', tok),
  'le', string.format('%d', now + tonumber(ARGV[2])), 'a', ARGV[4], 'k', 'lead', 'v', '2')
if ARGV[5] == '2' then redis.call('HSET', KEYS[1], 'go', '2') end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'lead', string.format('%d', tok)}
";

/// Renewal: the lease and the record's time to live start again. KEYS: the record. ARGV: token,
/// lease (ms), time to live of a record in flight (ms). Returns 1, or 0 when the token no longer
/// holds the record, or its lease lapsed before it was marked started (that lapse is final).
const RENEW: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 't', 'le', 'go', 'v')
if f[1] ~= 'run' or f[2] ~= ARGV[1] then return 0 end
if f[4] ~= '1' and f[4] ~= '2' and f[5] == '2' and tonumber(f[3]) <= now then return 0 end
redis.call('HSET', KEYS[1], 'le', string.format('%d', now + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// The mark that a handler is about to start. KEYS: the record. ARGV: token, lease (ms), time to
/// live of a record in flight (ms). Returns 1 (marked, and the lease renewed), or 0 when the token
/// no longer holds the record or its lease lapsed: the handler must not start.
const START: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 't', 'le')
if f[1] ~= 'run' or f[2] ~= ARGV[1] or tonumber(f[3]) <= now then return 0 end
redis.call('HSET', KEYS[1], 'go', '1', 'le', string.format('%d', now + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Settlement. KEYS: the record. ARGV: token, fingerprint, `done` or `gone`, result, time to live
/// (ms), the settlement channel (the record's key is published on it). Returns 1, or 0 when the token no longer holds the record (nothing is written). A record
/// this very token already settled with this very result (a retry after an attempt whose answer
/// was lost, which landed) is answered 1 and left as it is: no other lease ever carries the token.
const SETTLE: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 't', 'fp', 'r')
if (f[1] == 'done' or f[1] == 'gone') and f[2] == ARGV[1] and f[3] == ARGV[2] and f[4] == ARGV[4] then
  return 1
end
if f[1] ~= 'run' or f[2] ~= ARGV[1] or f[3] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[3], 'r', ARGV[4])
redis.call('HDEL', KEYS[1], 'le')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PUBLISH', ARGV[6], KEYS[1])
return 1
";

/// Cancellation of an admission attempt. KEYS: the record, the attempt's cancellation marker.
/// ARGV: attempt, the marker's time to live (ms), how long a voided record stays readable (ms),
/// the unknown outcome (a result, JSON), how long it is kept (ms), the settlement channel. Returns 1 when the attempt's
/// claim was voided, 2 when its takeover was settled with the unknown outcome, 0 when the record
/// holds no claim of the attempt (the marker then refuses the admission if it comes).
const CANCEL: &str = r"
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
local f = redis.call('HMGET', KEYS[1], 's', 'a', 'k', 'go')
if f[1] ~= 'run' or f[2] ~= ARGV[1] then return 0 end
if f[3] == 'takeover' or f[4] == '1' then
  redis.call('HSET', KEYS[1], 's', 'done', 'r', ARGV[4])
  redis.call('HDEL', KEYS[1], 'le', 'a', 'k', 'go', 'v')
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PUBLISH', ARGV[6], KEYS[1])
  return 2
end
redis.call('HSET', KEYS[1], 's', 'void')
redis.call('HDEL', KEYS[1], 'le', 'a', 'k', 'v')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[6], KEYS[1])
return 1
";

/// A follower's look at the record. KEYS: the record. Returns `{}` when there is none, `{s, fp,
/// r}` once settled, `{'run', fp, t, live}` in flight (`live` is `1` while the lease holds),
/// `{'void', fp}` for a claim cancelled before its handler started or whose lease lapsed before
/// it was marked started (nothing ran under it).
const POLL: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 'fp', 't', 'le', 'r', 'go', 'k', 'v')
if not f[1] then return {} end
if f[1] == 'void' then return {'void', f[2]} end
if f[1] == 'run' then
  local live = '0'
  if tonumber(f[4]) > now then live = '1' end
  if live == '0' and f[6] ~= '1' and f[6] ~= '2' and f[7] ~= 'takeover' and f[8] == '2' then return {'void', f[2]} end
  return {'run', f[2], f[3], live}
end
return {f[1], f[2], f[5]}
";

/// The least time a released result stays readable, for followers on other replicas that poll
/// for it (see [`RedisIdempotencyStore::readable`]); an admission in the meantime treats the key
/// as free.
const RELEASED_READABLE: Duration = Duration::from_secs(10);

/// How long a cancelled attempt is remembered, so that its admission is refused should Redis run
/// it after the cancellation (it was queued on a connection the client has given up on, which
/// Redis reads when it resumes). Far longer than a command stays queued on a connection; each
/// marker is a few dozen bytes, and only admissions that failed leave one.
const CANCEL_MARKER: Duration = Duration::from_secs(600);

/// What a follower of a cancelled claim is asked to wait before it retries.
const VOID_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A follower's first poll comes after this (or its announcement); each next one waits twice as
/// long, up to [`TOLD_MAX_POLL`] while settlements are announced, [`MAX_POLL`] while not.
const FIRST_POLL: Duration = Duration::from_millis(2);

/// The longest wait between two polls of a follower while the settlement subscription is down:
/// then the most a follower learns its leader's result later than the leader settled (plus one
/// round trip).
const MAX_POLL: Duration = Duration::from_millis(50);

/// An `IdempotencyStore` in Redis: at most one execution per `(consumerKey, invocationId)` across
/// every replica that connects to it.
///
/// - **Admission** is one script: claim the key if absent (with the fingerprint and a lease),
///   replay a stored result, conflict on another fingerprint, join a call in flight, or take over
///   a call whose leader's lease lapsed (see `Admission::TakeOver`).
/// - **Leases** last [`RedisConfig::lease`](crate::RedisConfig::lease) on Redis' clock (`TIME`),
///   not the replicas'; the registry renews them every third of that while the call runs. A
///   replica that dies mid-call stops renewing; after the lease, the next identical call takes
///   the record over, and the registry answers it `EXECUTION_FAILED {reason: outcome-unknown}`
///   for a capability whose repetition is not harmless — never a second execution.
/// - **Settlement** is one script that writes only if the fencing token still holds the record: a
///   leader that ran past its lease and was taken over records nothing (`StoreError::LeaseLost`).
/// - **Cancellation** of an admission the caller gave up on is one script: it voids the claim
///   that admission made (or settles its takeover with the unknown outcome), and marks the attempt so that its
///   admission, should Redis run it later, claims nothing (see the module docs).
/// - **Followers** on any replica are told: every script that ends a record in flight publishes
///   its key on `{prefix}idem-settled` in the same step, and each `RedisStores` keeps one
///   subscription (opened by its first follower, reopened after a failure) that wakes the
///   followers of that record, which read the result with one poll — about one round trip after
///   the leader settled. Followers also poll at widening intervals (2 ms doubling up to 500 ms, or
///   a quarter of the lease if that is shorter but not under 50 ms, while the subscription is up;
///   up to 50 ms while it is down), to notice a leader whose lease lapsed (nothing is announced
///   then) and in case an announcement is lost. A released result (one that is not stored, e.g.
///   `RATE_LIMITED`) stays readable for the lease plus two operation budgets and a second (at
///   least 10 s) so that followers get it. A follower whose leader's lease lapsed after it
///   marked the record started, whose record went or now belongs to another request, or whose
///   polls fail for a whole lease, is answered `EXECUTION_FAILED {reason: outcome-unknown}` (not
///   stored here) — never an answer that invites a fresh id; the registry then admits the request
///   once more, which takes over a record whose lease lapsed and settles it, so that a dead
///   leader's record does not stay in flight.
///
/// A record in flight is kept for [`RedisConfig::in_flight_retention`](crate::RedisConfig::in_flight_retention)
/// after its leader's last admission or renewal, stored results until the `expires_at` of their
/// settlement. There is no capacity of its own:
/// Redis' memory is the bound (with `maxmemory-policy noeviction`, a full Redis refuses writes,
/// which fails calls closed).
#[derive(Clone, Debug)]
pub struct RedisIdempotencyStore {
    stores: RedisStores,
    scripts: std::sync::Arc<Scripts>,
}

#[derive(Debug)]
struct Scripts {
    admit: Script,
    renew: Script,
    settle: Script,
    start: Script,
    cancel: Script,
    poll: Script,
    /// The token counter's key, `{prefix}idem-fence:`, named once.
    fence: String,
    /// The settlement channel, `{prefix}idem-settled`, named once.
    channel: String,
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: an idempotency record is corrupt ({what})"))
}

fn token_of(s: &str) -> Result<u64, StoreError> {
    s.parse().map_err(|_| corrupt("token"))
}

impl RedisIdempotencyStore {
    /// How long a released result, or a record voided by a cancellation, stays readable: at least
    /// [`RELEASED_READABLE`], and longer than a follower may go without reading it — a follower
    /// cut off from Redis keeps trying for as long as a lease lasts, each try taking up to
    /// `op_timeout` — so that it reads what happened rather than finding nothing and answering
    /// an unknown outcome for a call that never ran.
    fn readable(&self) -> Duration {
        let config = &self.stores.config;
        let follower =
            config.lease.saturating_add(config.op_timeout.saturating_mul(2)).saturating_add(Duration::from_secs(1));
        RELEASED_READABLE.max(follower)
    }

    pub(crate) fn new(stores: RedisStores) -> RedisIdempotencyStore {
        let with_now = |body: &str| Script::new(&format!("{NOW}{body}"));
        let scripts = Scripts {
            admit: with_now(ADMIT),
            renew: with_now(RENEW),
            settle: Script::new(SETTLE),
            start: with_now(START),
            cancel: Script::new(CANCEL),
            poll: with_now(POLL),
            fence: stores.key("idem-fence", ""),
            channel: stores.settled_channel(),
        };
        RedisIdempotencyStore { stores, scripts: std::sync::Arc::new(scripts) }
    }

    /// `{prefix}idem:{length of the consumer key}:{consumer key}:{invocation id}`: the length keeps
    /// two different pairs from ever naming the same key.
    fn key(&self, key: &IdempotencyKey) -> String {
        let (consumer, mut digits) = (&key.consumer_key, [0; 20]);
        concat(&[
            &self.stores.config.prefix,
            "idem:",
            decimal(consumer.len(), &mut digits),
            ":",
            consumer,
            ":",
            &key.invocation_id,
        ])
    }

    fn lease(&self, token: u64) -> Lease {
        Lease { token, renew_every: Some(self.stores.config.lease / 3) }
    }

    /// `{prefix}idem-cancel:{attempt}`: the marker of a cancelled attempt (`attempt` as
    /// [`attempt_hex`] writes it).
    fn marker(&self, attempt: &str) -> String {
        concat(&[&self.stores.config.prefix, "idem-cancel:", attempt])
    }

    /// Admits `key`; with `mark`, a claim made is marked started by its admission (`go` = `2`).
    async fn admit_now(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        mark: bool,
    ) -> Result<Admission, StoreError> {
        let config = &self.stores.config;
        let record = self.key(key);
        let (mut attempt_buf, mut fp_buf) = ([0; 32], [0; 64]);
        let attempt = attempt_hex(attempt, &mut attempt_buf);
        let marker = self.marker(attempt);
        let mut call = evalsha(&self.scripts.admit, 3, record.len() + self.scripts.fence.len() + marker.len() + 160);
        call.arg(&record)
            .arg(&self.scripts.fence)
            .arg(marker)
            .arg(fingerprint_hex(fingerprint, &mut fp_buf))
            .arg(ttl_ms(config.lease))
            .arg(ttl_ms(config.in_flight_retention))
            .arg(attempt)
            .arg(if mark { "2" } else { "0" });
        let answer: (String, String) = self.stores.eval(&self.scripts.admit, &call).await?;
        Ok(match answer.0.as_str() {
            "cancelled" => return Err(StoreError::AttemptCancelled),
            "lead" => Admission::Leader(self.lease(token_of(&answer.1)?)),
            "takeover" => Admission::TakeOver(self.lease(token_of(&answer.1)?)),
            "follow" => {
                Admission::Follower(Box::pin(follow(self.clone(), record, fingerprint, key.invocation_id.clone())))
            }
            "replay" => Admission::Replay(serde_json::from_str(&answer.1).map_err(|_| corrupt("result"))?),
            "conflict" => Admission::Conflict { stored: parse_hash(&answer.1).ok_or_else(|| corrupt("fingerprint"))? },
            _ => return Err(corrupt("admission")),
        })
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
            // The window is counted from now on Redis' clock (as a time to live).
            Settlement::Store { result, expires_at } if expires_at > now => {
                ("done", result, expires_at.saturating_duration_since(now))
            }
            Settlement::Store { result, .. } | Settlement::Release { result } => ("gone", result, self.readable()),
        };
        let mut result = serde_json::to_string(&result).map_err(|e| corrupt(&e.to_string()))?;
        if result.len() > self.stores.config.max_result_bytes {
            // The leader's caller and followers on this replica have the result; the record keeps
            // that it was withheld, so a retry learns the call ran and never runs it again.
            let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
            result = serde_json::to_string(&InvokeResult::error(withheld.into_payload(), None))
                .map_err(|e| corrupt(&e.to_string()))?;
        }
        let record = self.key(key);
        let mut fp_buf = [0; 64];
        let mut call = evalsha(&self.scripts.settle, 1, record.len() + result.len() + self.scripts.channel.len() + 120);
        call.arg(record)
            .arg(lease.token)
            .arg(fingerprint_hex(fingerprint, &mut fp_buf))
            .arg(state)
            .arg(result)
            .arg(ttl_ms(keep))
            .arg(&self.scripts.channel);
        let settled: i64 = self.stores.eval(&self.scripts.settle, &call).await?;
        if settled == 1 { Ok(()) } else { Err(StoreError::LeaseLost) }
    }

    async fn cancel_now(&self, key: &IdempotencyKey, attempt: Attempt) -> Result<(), StoreError> {
        let unknown = InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None);
        let unknown = serde_json::to_string(&unknown).map_err(|e| corrupt(&e.to_string()))?;
        let mut attempt_buf = [0; 32];
        let hex = attempt_hex(attempt, &mut attempt_buf);
        let mut call = evalsha(&self.scripts.cancel, 2, 512);
        call.arg(self.key(key))
            .arg(self.marker(hex))
            .arg(hex)
            .arg(ttl_ms(CANCEL_MARKER))
            .arg(ttl_ms(self.readable()))
            .arg(unknown)
            .arg(ttl_ms(self.stores.config.in_flight_retention))
            .arg(&self.scripts.channel);
        let outcome: i64 = self.stores.eval(&self.scripts.cancel, &call).await?;
        match outcome {
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
        let record = self.key(key);
        let mut call = evalsha(&self.scripts.start, 1, record.len() + 64);
        call.arg(record)
            .arg(lease.token)
            .arg(ttl_ms(self.stores.config.lease))
            .arg(ttl_ms(self.stores.config.in_flight_retention));
        let started: i64 = self.stores.eval(&self.scripts.start, &call).await?;
        if started == 1 { Ok(()) } else { Err(StoreError::LeaseLost) }
    }

    async fn renew_now(&self, key: &IdempotencyKey, lease: Lease) -> Result<(), StoreError> {
        let record = self.key(key);
        let mut call = evalsha(&self.scripts.renew, 1, record.len() + 64);
        call.arg(record)
            .arg(lease.token)
            .arg(ttl_ms(self.stores.config.lease))
            .arg(ttl_ms(self.stores.config.in_flight_retention));
        let renewed: i64 = self.stores.eval(&self.scripts.renew, &call).await?;
        if renewed == 1 { Ok(()) } else { Err(StoreError::LeaseLost) }
    }
}

/// `parts` one after the other, in one allocation: the keys of every call are built this way, as
/// `format!` costs several times as much for a few pieces of text.
fn concat(parts: &[&str]) -> String {
    let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        text.push_str(part);
    }
    text
}

/// `n` in decimal digits, written into the end of `buf`.
fn decimal(mut n: usize, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        // A digit: n % 10 < 10.
        buf[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// `attempt` as the 32 lower-case hex digits its `Display` writes (the `a` field and the
/// cancellation marker's key), written into `buf` without the formatting machinery.
fn attempt_hex(attempt: Attempt, buf: &mut [u8; 32]) -> &str {
    agent_surface_core::hex::encode_into(&attempt.as_u128().to_be_bytes(), buf)
}

/// `fingerprint` as the 64 lower-case hex digits its `Display` writes (the `fp` field), written
/// into `buf`.
fn fingerprint_hex(fingerprint: Fingerprint, buf: &mut [u8; 64]) -> &str {
    agent_surface_core::hex::encode_into(fingerprint.as_bytes(), buf)
}

/// What a follower's poll found.
enum Polled {
    /// The leader is still at it (or a successor with the same request is).
    Waiting,
    /// The result of this request.
    Settled(InvokeResult),
    /// The leader's result cannot be learnt here: its lease lapsed, or the record went or now
    /// belongs to another request.
    Lost,
    /// The claim was cancelled, or its lease lapsed, before its handler started: nothing ran.
    Void,
}

async fn poll(store: &RedisIdempotencyStore, record: &str, fingerprint: &str) -> Result<Polled, StoreError> {
    let mut call = evalsha(&store.scripts.poll, 1, record.len());
    call.arg(record);
    let answer: Vec<String> = store.stores.eval(&store.scripts.poll, &call).await?;
    Ok(match answer.as_slice() {
        [] => Polled::Lost,
        [s, _] if s == "void" => Polled::Void,
        [s, fp, _token, live] if s == "run" => {
            if fp == fingerprint && live == "1" {
                Polled::Waiting
            } else {
                Polled::Lost
            }
        }
        [_, fp, result] if fp == fingerprint => {
            Polled::Settled(serde_json::from_str(result).map_err(|_| corrupt("result"))?)
        }
        [_, _, _] => Polled::Lost,
        _ => return Err(corrupt("poll")),
    })
}

/// A follower on any replica: woken by the leader's announced settlement, and polling with
/// backoff meanwhile (see the store's docs), until it has the result. Polls that fail are
/// retried for as long as a lease lasts (the leader may still be at it); after that, or when the
/// leader is lost, the follower learns that the outcome is unknown.
async fn follow(
    store: RedisIdempotencyStore,
    record: String,
    fingerprint: Fingerprint,
    invocation_id: String,
) -> InvokeResult {
    let fingerprint = fingerprint.to_string();
    let told = store.stores.told();
    let watch = told.watch(&record);
    let mut wait = FIRST_POLL;
    let mut failing_since: Option<tokio::time::Instant> = None;
    // Armed before each poll (and before the first wait), so that a settlement announced after
    // the poll that missed it still wakes the wait.
    let mut announced = Box::pin(watch.notify().notified());
    announced.as_mut().enable();
    loop {
        tokio::select! {
            () = announced.as_mut() => {}
            () = tokio::time::sleep(wait) => {}
        }
        // Announced settlements wake the follower, so polls only watch for a lapsed lease (and
        // a lost announcement): far apart while the subscription is up.
        let longest =
            if told.is_up() { TOLD_MAX_POLL.min(store.stores.config.lease / 4).max(MAX_POLL) } else { MAX_POLL };
        wait = (wait * 2).min(longest);
        announced = Box::pin(watch.notify().notified());
        announced.as_mut().enable();
        match poll(&store, &record, &fingerprint).await {
            Ok(Polled::Waiting) => failing_since = None,
            Ok(Polled::Settled(result)) => return result,
            Ok(Polled::Void) => {
                tracing::warn!(
                    target: "agent_surface::invoke",
                    "the call this request joined ended before its handler started; the follower is told to retry"
                );
                let nothing_ran = AgentSurfaceError::transient(VOID_RETRY_AFTER);
                return InvokeResult::error(nothing_ran.into_payload(), Some(invocation_id));
            }
            Ok(Polled::Lost) => {
                tracing::warn!(
                    target: "agent_surface::invoke",
                    "the call this request joined lost its leader; the follower is told to reconcile"
                );
                break;
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() < store.stores.config.lease {
                    tracing::warn!(target: "agent_surface::invoke", error = %agent_surface_policy::redacted(&e), "a follower could not poll its leader");
                    continue;
                }
                tracing::error!(
                    target: "agent_surface::invoke",
                    error = %agent_surface_policy::redacted(&e),
                    "a follower could not poll its leader for a whole lease; it is told to reconcile"
                );
                break;
            }
        }
    }
    InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), Some(invocation_id))
}

impl IdempotencyStore for RedisIdempotencyStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
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

    /// The mark is written by the admission script (`go` = `2`), so such a call costs two round
    /// trips (admission, settlement) instead of three. `CANCEL` voids a claim so marked as it
    /// voids an unmarked one: the attempt it cancels never started a handler.
    fn admit_started<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(Admission, bool), StoreError>> {
        Box::pin(async move {
            let admission = self.admit_now(key, fingerprint, attempt, true).await?;
            // A takeover is marked (`go` = `1`) by the same script.
            Ok((admission, true))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hex written without the formatting machinery is the text `Display` writes, which
    /// records (`a`, `fp`) and cancellation markers of earlier builds hold: replicas of two builds
    /// must name the same marker and compare the same fingerprint.
    #[test]
    fn hex_is_the_display_text() {
        for value in [0, 1, 0xabc, u128::from(u64::MAX), u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
            let attempt = Attempt::from_u128(value);
            assert_eq!(attempt_hex(attempt, &mut [0; 32]), attempt.to_string());
        }
        let fingerprint = Fingerprint::of(&serde_json::json!({"orderId": "A-1"}));
        assert_eq!(fingerprint_hex(fingerprint, &mut [0; 64]), fingerprint.to_string());
        let mut bytes = [0u8; 32];
        bytes[0] = 0x0f;
        bytes[31] = 0xf0;
        let fingerprint = Fingerprint::from_bytes(bytes);
        assert_eq!(fingerprint_hex(fingerprint, &mut [0; 64]), fingerprint.to_string());
    }

    /// The length in a record's key is the decimal text `format!` writes, for every width
    /// (the format pins cover one key; records of earlier builds must keep their names).
    #[test]
    fn decimal_is_the_display_text() {
        for n in [0, 7, 9, 10, 99, 100, 12_345, usize::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string());
        }
        assert_eq!(concat(&["a:", "", "bc", ":d"]), "a:bc:d");
    }
}
