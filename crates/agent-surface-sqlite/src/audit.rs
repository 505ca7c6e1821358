//! [`SqliteAuditSink`]: the audit trail in the file, one row per event (its JSON, the same object
//! as one line of the JSON Lines sink), in the order recorded, the oldest deleted past
//! [`SqliteConfig::audit_max_len`](crate::SqliteConfig::audit_max_len) events.
//!
//! `record` returns once the event's transaction is committed: with the default durability, on
//! disk. The events of one call go in order; copy the table elsewhere when the trail must outlive
//! its bound.

use agent_surface_policy::{AuditError, AuditEvent, AuditSink};
use futures_util::future::BoxFuture;
use rusqlite::params;

use crate::SqliteStores;
use crate::db::corrupt;
use crate::schema::FORMAT;

/// The audit trail in the file ([`SqliteStores::audit`]).
#[derive(Clone, Debug)]
pub struct SqliteAuditSink {
    stores: SqliteStores,
}

impl SqliteAuditSink {
    pub(crate) fn new(stores: SqliteStores) -> SqliteAuditSink {
        SqliteAuditSink { stores }
    }
}

impl AuditSink for SqliteAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        let keep = i64::try_from(self.stores.config.audit_max_len).unwrap_or(i64::MAX);
        Box::pin(async move {
            let json = serde_json::to_string(event).map_err(|e| AuditError::new(format!("audit event: {e}")))?;
            let written = self.stores.db.run(move |cx| {
                cx.conn
                    .prepare_cached("INSERT INTO audit (v, event) VALUES (?1, ?2)")?
                    .execute(params![FORMAT, json])?;
                let seq = cx.conn.last_insert_rowid();
                // One row in, at most one out: the bound holds exactly and costs one probe.
                cx.conn.prepare_cached("DELETE FROM audit WHERE seq <= ?1")?.execute(params![seq - keep])?;
                Ok(())
            });
            written.await.map_err(|e| AuditError::new(e.to_string()))
        })
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let read = self.stores.db.run(move |cx| {
                let mut statement = cx.conn.prepare_cached("SELECT v, event FROM audit ORDER BY seq DESC LIMIT ?1")?;
                let rows =
                    statement.query_map(params![limit], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
                let mut events = Vec::new();
                for row in rows {
                    let (v, text) = row?;
                    if v > FORMAT {
                        return Err(corrupt("an audit event of a later format"));
                    }
                    events.push(serde_json::from_str::<AuditEvent>(&text).map_err(|_| corrupt("an audit event"))?);
                }
                events.reverse();
                Ok(events)
            });
            read.await.map_err(|e| AuditError::new(e.to_string()))
        })
    }
}
