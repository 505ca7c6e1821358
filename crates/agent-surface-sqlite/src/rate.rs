//! [`SqliteRateLimiter`]: rate budgets in the file, GCRA in one step of the database thread.
//!
//! Each bucket is one row, `{kind}:{id}` (the kinds and ids of `RateBudgets`), holding its
//! theoretical arrival time in nanoseconds on the registry's clock. One operation tests every
//! bucket a call needs and takes a unit from all of them or from none (a refused call costs
//! nothing), exactly as the memory limiter and the Redis limiter do; the budgets survive a
//! restart, so restarting the server does not hand every consumer a fresh burst.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_core::details::RateLimitReason;
use agent_surface_policy::{CallInfo, Clock, RateBudgets, RateDecision, RateLimiter, Reach, Scope};
use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};

use crate::db::{Cx, Fail, corrupt};
use crate::schema::FORMAT;
use crate::{SqliteStores, millis};

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A [`RateLimiter`] whose budgets live in the file ([`SqliteStores::rate_limiter`]).
///
/// A store that does not answer makes the call fail closed (`RateDecision::Unavailable`: the
/// pipeline answers a transient store failure, never an open budget).
#[derive(Clone)]
pub struct SqliteRateLimiter {
    stores: SqliteStores,
    budgets: Arc<RateBudgets>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SqliteRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteRateLimiter").field("budgets", &self.budgets).finish_non_exhaustive()
    }
}

/// One bucket of a call: its row's name, the emission interval and the burst tolerance (ns).
type Wanted = (String, i64, i64);

/// Takes a unit from every bucket or from none; `Err(wait in ns)` when one of them is spent.
fn take(cx: &mut Cx<'_>, wanted: &[Wanted], now: Timestamp) -> Result<Result<(), i64>, Fail> {
    cx.saw(now);
    let now_ns = millis(now).saturating_mul(1_000_000);
    let mut next = Vec::with_capacity(wanted.len());
    let mut wait = 0i64;
    for (bucket, emission, tolerance) in wanted {
        let row = cx
            .conn
            .prepare_cached("SELECT v, tat FROM rate WHERE bucket = ?1")?
            .query_row(params![bucket], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .optional()?;
        if row.is_some_and(|(v, _)| v > FORMAT) {
            return Err(corrupt("a rate bucket of a later format"));
        }
        let tat = row.map_or(now_ns, |(_, tat)| tat).max(now_ns);
        let conforms_at = tat.saturating_sub(*tolerance);
        if now_ns < conforms_at {
            wait = wait.max(conforms_at - now_ns);
        } else {
            next.push(tat.saturating_add(*emission));
        }
    }
    if wait > 0 {
        return Ok(Err(wait));
    }
    for ((bucket, _, _), tat) in wanted.iter().zip(next) {
        cx.conn
            .prepare_cached("INSERT OR REPLACE INTO rate (bucket, v, tat) VALUES (?1, ?2, ?3)")?
            .execute(params![bucket, FORMAT, tat])?;
    }
    Ok(Ok(()))
}

impl SqliteRateLimiter {
    /// A limiter over `stores` with `budgets`, on `clock` (the registry's: the pipeline's `now`
    /// is what it measures with; the clock is named for the wiring report).
    pub fn new(stores: SqliteStores, budgets: RateBudgets, clock: Arc<dyn Clock>) -> SqliteRateLimiter {
        SqliteRateLimiter { stores, budgets: Arc::new(budgets), clock }
    }

    async fn acquire_now(&self, call: CallInfo<'_>, now: Timestamp) -> RateDecision {
        let wanted: Vec<Wanted> = self
            .budgets
            .buckets(&call)
            .map(|b| {
                let emission = nanos(b.quota.emission_interval()).max(1);
                let tolerance = emission.saturating_mul(i64::from(b.quota.limit().get()) - 1);
                (format!("{}:{}", b.kind.as_str(), b.id()), emission, tolerance)
            })
            .collect();
        if wanted.is_empty() {
            return RateDecision::Allow(None);
        }
        match self.stores.db.run(move |cx| take(cx, &wanted, now)).await {
            Ok(Ok(())) => RateDecision::Allow(None),
            Ok(Err(wait_ns)) => {
                let wait = u64::try_from(wait_ns).unwrap_or(u64::MAX);
                let retry_after = Duration::from_millis(wait.div_ceil(1_000_000).max(1));
                tracing::debug!(
                    target: "agent_surface::rate",
                    capability = call.capability,
                    consumer = call.consumer.key(),
                    retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
                    "rate limited"
                );
                RateDecision::Limited { reason: RateLimitReason::Rate, retry_after }
            }
            Err(e) => RateDecision::Unavailable(format!("sqlite rate budget unreadable: {e}")),
        }
    }
}

impl RateLimiter for SqliteRateLimiter {
    fn reach(&self) -> Reach {
        Reach::Durable
    }

    fn clock(&self) -> Option<Arc<dyn Clock>> {
        Some(self.clock.clone())
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(self.acquire_now(call, now))
    }

    fn scopes(&self) -> Vec<Scope> {
        self.budgets.scopes()
    }
}
