//! [`PostgresAuditSink`]: the audit trail in `{schema}.audit`, one row per event (its JSON, the
//! same object as one line of the JSON Lines sink), in the order recorded, the oldest deleted
//! past [`PostgresConfig::audit_max_len`](crate::PostgresConfig::audit_max_len) events.
//!
//! `record` returns once the event's statement is committed. Events of every replica go to one
//! trail; copy the table elsewhere when the trail must outlive its bound.

use agent_surface_policy::{AuditError, AuditEvent, AuditSink};
use futures_util::future::BoxFuture;

use crate::schema::FORMAT;
use crate::{PostgresStores, corrupt};

/// The audit trail in PostgreSQL ([`PostgresStores::audit`]).
#[derive(Clone, Debug)]
pub struct PostgresAuditSink {
    stores: PostgresStores,
}

impl PostgresAuditSink {
    pub(crate) fn new(stores: PostgresStores) -> PostgresAuditSink {
        PostgresAuditSink { stores }
    }
}

impl AuditSink for PostgresAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        let keep = i64::try_from(self.stores.inner.config.audit_max_len).unwrap_or(i64::MAX);
        Box::pin(async move {
            let json = serde_json::to_string(event).map_err(|e| AuditError::new(format!("audit event: {e}")))?;
            let written = self.stores.run(async {
                let client = self.stores.client().await?;
                // One statement: the event in, and at most the one event past the bound out.
                let record = client
                    .prepare_cached(&self.stores.sql(
                        "WITH i AS (INSERT INTO {s}.audit (v, event) VALUES ($1, $2) RETURNING seq)
                         DELETE FROM {s}.audit WHERE seq <= (SELECT seq FROM i) - $3",
                    ))
                    .await?;
                client.execute(&record, &[&FORMAT, &json, &keep]).await?;
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
            let read = self.stores.run(async {
                let client = self.stores.client().await?;
                let recent = client
                    .prepare_cached(&self.stores.sql("SELECT v, event FROM {s}.audit ORDER BY seq DESC LIMIT $1"))
                    .await?;
                let mut events = Vec::new();
                for row in client.query(&recent, &[&limit]).await? {
                    if row.get::<_, i32>(0) > FORMAT {
                        return Err(corrupt("an audit event of a later format"));
                    }
                    events.push(
                        serde_json::from_str::<AuditEvent>(row.get::<_, &str>(1))
                            .map_err(|_| corrupt("an audit event"))?,
                    );
                }
                events.reverse();
                Ok(events)
            });
            read.await.map_err(|e| AuditError::new(e.to_string()))
        })
    }
}
