//! [`PostgresRateLimiter`]: rate budgets shared by replicas, GCRA in one transaction.
//!
//! Each bucket is one row of `{schema}.rate`, `{kind}:{id}` (the kinds and ids of `RateBudgets`),
//! holding its theoretical arrival time in microseconds on the database's clock. One transaction
//! locks every bucket a call needs (in a fixed order, so that two calls never wait on each other
//! crosswise), tests them, and takes a unit from all of them or from none (a refused call costs
//! nothing), exactly as the memory and Redis limiters do; replicas whose clocks disagree still
//! share one budget.

use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_core::details::RateLimitReason;
use agent_surface_policy::{CallInfo, RateBudgets, RateDecision, RateLimiter, Reach, Scope};
use futures_util::future::BoxFuture;

use crate::schema::FORMAT;
use crate::{Fail, PostgresStores, corrupt};

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX).max(1)
}

/// A [`RateLimiter`] whose budgets live in PostgreSQL, shared by every replica
/// ([`PostgresStores::rate_limiter`]).
///
/// A store that does not answer makes the call fail closed (`RateDecision::Unavailable`: the
/// pipeline answers a transient store failure, never an open budget).
#[derive(Clone, Debug)]
pub struct PostgresRateLimiter {
    stores: PostgresStores,
    budgets: std::sync::Arc<RateBudgets>,
}

/// One bucket of a call: its row's name, the emission interval and the burst tolerance (µs).
type Wanted = (String, i64, i64);

impl PostgresRateLimiter {
    pub(crate) fn new(stores: PostgresStores, budgets: RateBudgets) -> PostgresRateLimiter {
        PostgresRateLimiter { stores, budgets: std::sync::Arc::new(budgets) }
    }

    /// Takes a unit from every bucket or from none; `Err(wait in µs)` when one of them is spent.
    async fn take(&self, wanted: &[Wanted]) -> Result<Result<(), i64>, Fail> {
        let names: Vec<&str> = wanted.iter().map(|(name, _, _)| name.as_str()).collect();
        let mut client = self.stores.client().await?;
        let tx = client.transaction().await?;
        // Rows for buckets never used (full), then every bucket locked in name order.
        let create = tx
            .prepare_cached(&self.stores.sql(
                "INSERT INTO {s}.rate (bucket, v, tat) SELECT b, $2, 0 FROM unnest($1::text[]) AS b ORDER BY b
                 ON CONFLICT (bucket) DO NOTHING",
            ))
            .await?;
        let read = tx
            .prepare_cached(&self.stores.sql(
                "SELECT bucket, v, tat, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
                 FROM {s}.rate WHERE bucket = ANY($1::text[]) ORDER BY bucket FOR UPDATE",
            ))
            .await?;
        // A full bucket's row may be swept between the insert, which leaves a row it finds
        // unlocked, and the lock: it is made again (a swept row is a full bucket).
        let distinct = names.iter().collect::<std::collections::BTreeSet<_>>().len();
        let mut rows = Vec::new();
        for _ in 0..3 {
            tx.execute(&create, &[&names, &FORMAT]).await?;
            rows = tx.query(&read, &[&names]).await?;
            if rows.len() == distinct {
                break;
            }
        }
        if rows.len() != distinct {
            return Err(Fail::Store(agent_surface_policy::StoreError::Unavailable(
                "postgres: rate buckets kept being swept while they were read".into(),
            )));
        }
        let mut next = Vec::with_capacity(wanted.len());
        let mut wait = 0i64;
        for (bucket, emission, tolerance) in wanted {
            let row = rows.iter().find(|r| r.get::<_, &str>(0) == bucket).ok_or_else(|| corrupt("a rate bucket"))?;
            if row.get::<_, i32>(1) > FORMAT {
                return Err(corrupt("a rate bucket of a later format"));
            }
            let now: i64 = row.get(3);
            let tat = row.get::<_, i64>(2).max(now);
            let conforms_at = tat.saturating_sub(*tolerance);
            if now < conforms_at {
                wait = wait.max(conforms_at - now);
            } else {
                next.push((bucket.as_str(), tat.saturating_add(*emission)));
            }
        }
        if wait > 0 {
            tx.rollback().await?;
            return Ok(Err(wait));
        }
        let write =
            tx.prepare_cached(&self.stores.sql("UPDATE {s}.rate SET v = $2, tat = $3 WHERE bucket = $1")).await?;
        for (bucket, tat) in next {
            tx.execute(&write, &[&bucket, &FORMAT, &tat]).await?;
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    async fn acquire_now(&self, call: CallInfo<'_>) -> RateDecision {
        let mut wanted: Vec<Wanted> = self
            .budgets
            .buckets(&call)
            .map(|b| {
                let emission = micros(b.quota.emission_interval());
                let tolerance = emission.saturating_mul(i64::from(b.quota.limit().get()) - 1);
                (format!("{}:{}", b.kind.as_str(), b.id()), emission, tolerance)
            })
            .collect();
        if wanted.is_empty() {
            return RateDecision::Allow(None);
        }
        wanted.sort_by(|a, b| a.0.cmp(&b.0));
        match self.stores.run(self.take(&wanted)).await {
            Ok(Ok(())) => RateDecision::Allow(None),
            Ok(Err(wait_us)) => {
                let wait = u64::try_from(wait_us).unwrap_or(u64::MAX);
                let retry_after = Duration::from_millis(wait.div_ceil(1_000).max(1));
                RateDecision::Limited { reason: RateLimitReason::Rate, retry_after }
            }
            // The pipeline answers a transient store failure (and logs it as a store fault).
            Err(e) => RateDecision::Unavailable(format!("postgres rate budget unreadable: {e}")),
        }
    }
}

impl RateLimiter for PostgresRateLimiter {
    fn reach(&self) -> Reach {
        Reach::Shared
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, _now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(self.acquire_now(call))
    }

    fn scopes(&self) -> Vec<Scope> {
        self.budgets.scopes()
    }
}
