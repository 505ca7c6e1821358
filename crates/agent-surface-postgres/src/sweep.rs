//! Deleting what no operation can see any more: idempotency records past their time to live,
//! cancellation marks past theirs, confirmations past their retention (with their relay keys),
//! tasks past their time to live, rate buckets back to full, inbox sessions past their expiry and
//! used form nonces past their token's.
//!
//! Every read already treats such rows as absent, so sweeping only gives their space back. Each
//! replica sweeps every `PostgresConfig::sweep_every` (the sweeps of several replicas do not
//! conflict: a row is deleted once), at most [`PER_TABLE`] rows of each table per run, measured
//! on the database's clock. Confirmations, tasks, inbox sessions and used form nonces carry the registry's times,
//! which are the replicas' clocks: they are swept only [`SKEW`] after their time on the
//! database's clock, so that a database clock ahead of the replicas' by up to that much delays a
//! deletion rather than removing a record its replicas still read as live (a pending
//! confirmation, a task within its time to live, a nonce whose form could be replayed).

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::Inner;

/// How far the database's clock may run ahead of the replicas' before a sweep could delete a
/// record they still read as live.
const SKEW: Duration = Duration::from_secs(60);

/// The most rows of one table a sweep deletes.
const PER_TABLE: i64 = 1_000;

const SWEEP: &str = "
WITH now AS (SELECT clock_timestamp() AS t, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms,
  (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2 AS app),
idem AS (DELETE FROM {s}.idem WHERE ctid IN
  (SELECT ctid FROM {s}.idem WHERE keep_until <= (SELECT t FROM now) LIMIT $1) RETURNING 1),
cancelled AS (DELETE FROM {s}.idem_cancel WHERE ctid IN
  (SELECT ctid FROM {s}.idem_cancel WHERE keep_until <= (SELECT t FROM now) LIMIT $1) RETURNING 1),
gone AS (SELECT id FROM {s}.conf WHERE gone_at <= (SELECT app FROM now) ORDER BY gone_at LIMIT $1),
relay AS (DELETE FROM {s}.conf_relay WHERE id IN (SELECT id FROM gone) RETURNING 1),
conf AS (DELETE FROM {s}.conf WHERE id IN (SELECT id FROM gone) RETURNING 1),
task AS (DELETE FROM {s}.task WHERE id IN
  (SELECT id FROM {s}.task WHERE keep_until <= (SELECT app FROM now) ORDER BY keep_until LIMIT $1) RETURNING 1),
rate AS (DELETE FROM {s}.rate WHERE bucket IN
  (SELECT bucket FROM {s}.rate WHERE tat <= (SELECT ms FROM now) * 1000 ORDER BY tat LIMIT $1) RETURNING 1),
session AS (DELETE FROM {s}.inbox_session WHERE lookup IN
  (SELECT lookup FROM {s}.inbox_session WHERE expires_at <= (SELECT app FROM now) ORDER BY expires_at LIMIT $1)
  RETURNING 1),
nonce AS (DELETE FROM {s}.inbox_nonce WHERE ctid IN
  (SELECT ctid FROM {s}.inbox_nonce WHERE until <= (SELECT app FROM now) LIMIT $1) RETURNING 1)
SELECT (SELECT count(*) FROM idem) + (SELECT count(*) FROM cancelled) + (SELECT count(*) FROM relay)
  + (SELECT count(*) FROM conf) + (SELECT count(*) FROM task) + (SELECT count(*) FROM rate)
  + (SELECT count(*) FROM session) + (SELECT count(*) FROM nonce)";

/// Starts the sweeper of `inner`'s stores; it ends when they are dropped.
pub(crate) fn start(inner: Weak<Inner>, mut stopped: watch::Receiver<()>) {
    tokio::spawn(async move {
        loop {
            let every = match inner.upgrade() {
                Some(inner) => inner.config.sweep_every,
                None => return,
            };
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stopped.changed() => return,
            }
            let Some(inner) = inner.upgrade() else { return };
            let stores = crate::PostgresStores { inner };
            let swept = stores
                .run(async {
                    let client = stores.client().await?;
                    let sweep = client.prepare_cached(&stores.sql(SWEEP)).await?;
                    let skew = i64::try_from(SKEW.as_millis()).unwrap_or(i64::MAX);
                    Ok(client.query_one(&sweep, &[&PER_TABLE, &skew]).await?.get::<_, i64>(0))
                })
                .await;
            drop(stores);
            match swept {
                Ok(0) => {}
                Ok(deleted) => {
                    tracing::debug!(target: "agent_surface::store", deleted, "expired PostgreSQL store rows deleted")
                }
                Err(e) => {
                    tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "sweeping the PostgreSQL store failed")
                }
            }
        }
    });
}
