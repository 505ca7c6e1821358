//! Deleting what no operation can see any more: stored results past their window, confirmations
//! past their retention (with their relay keys), tasks past their time to live, rate buckets back
//! to full, inbox sessions past their expiry and used form nonces past their token's, records in flight whose leader's process ended long ago.
//!
//! Every read already treats such rows as absent (it compares them with the `now` it is given),
//! so sweeping only gives their space back. It runs about once a second inside a batch's
//! transaction, under a savepoint of its own (a failure undoes the sweep alone), and deletes at
//! most [`PER_TABLE`] rows of each table per run, measured against the latest `now` an operation
//! was given.

use agent_surface_core::Timestamp;
use rusqlite::{Connection, params};

use crate::millis;

/// The most rows of one table a sweep deletes.
const PER_TABLE: i64 = 512;

/// Deletes expired rows as of `now` (see the module docs).
pub(crate) fn run(conn: &Connection, now: Timestamp) {
    if now.unix_millis() == 0 {
        return;
    }
    let swept = conn.execute_batch("SAVEPOINT sweep").and_then(|()| {
        let now_ms = millis(now);
        let now_ns = now_ms.saturating_mul(1_000_000);
        let mut deleted = 0;
        // In flight only once its leader's process ended (lapsed): a record in flight of this
        // process is kept until it is settled, however long the call runs.
        deleted += conn
            .prepare_cached(
                "DELETE FROM idem WHERE rowid IN (SELECT rowid FROM idem WHERE gone_at <= ?1
               AND (state = 1 OR lapsed = 1) LIMIT ?2)",
            )?
            .execute(params![now_ms, PER_TABLE])?;
        deleted += conn.prepare_cached(
            "DELETE FROM conf_relay WHERE id IN (SELECT id FROM conf WHERE gone_at <= ?1 ORDER BY gone_at LIMIT ?2)",
        )?
        .execute(params![now_ms, PER_TABLE])?;
        deleted += conn
            .prepare_cached(
                "DELETE FROM conf WHERE id IN (SELECT id FROM conf WHERE gone_at <= ?1 ORDER BY gone_at LIMIT ?2)",
            )?
            .execute(params![now_ms, PER_TABLE])?;
        deleted += conn.prepare_cached(
            "DELETE FROM task WHERE id IN (SELECT id FROM task WHERE keep_until <= ?1 ORDER BY keep_until LIMIT ?2)",
        )?
        .execute(params![now_ms, PER_TABLE])?;
        deleted += conn
            .prepare_cached(
                "DELETE FROM rate WHERE bucket IN (SELECT bucket FROM rate WHERE tat <= ?1 ORDER BY tat LIMIT ?2)",
            )?
            .execute(params![now_ns, PER_TABLE])?;
        deleted += conn
            .prepare_cached(
                "DELETE FROM inbox_session WHERE lookup IN (SELECT lookup FROM inbox_session WHERE expires_at <= ?1
                 ORDER BY expires_at LIMIT ?2)",
            )?
            .execute(params![now_ms, PER_TABLE])?;
        deleted += conn
            .prepare_cached(
                "DELETE FROM inbox_nonce WHERE rowid IN (SELECT rowid FROM inbox_nonce WHERE until <= ?1 LIMIT ?2)",
            )?
            .execute(params![now_ms, PER_TABLE])?;
        conn.execute_batch("RELEASE sweep")?;
        Ok(deleted)
    });
    match swept {
        Ok(0) => {}
        Ok(deleted) => tracing::debug!(target: "agent_surface::store", deleted, "expired SQLite store rows deleted"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO sweep; RELEASE sweep");
            tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "sweeping the SQLite store failed");
        }
    }
}
