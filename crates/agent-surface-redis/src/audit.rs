//! [`RedisAuditSink`]: the audit trail as a Redis stream, shared by replicas.
//!
//! One stream, `{prefix}audit`; each event is one entry (`XADD`) with the single field `e`
//! holding the event's JSON (the same object as one line of the JSON Lines sink). The stream is
//! trimmed to about [`RedisConfig::audit_max_len`](crate::RedisConfig::audit_max_len) entries
//! (`MAXLEN ~`); copy it elsewhere (`XREAD`) when the trail must outlive that. An event is
//! recorded once Redis has answered the `XADD`: durable as far as Redis' persistence is (run it
//! with `appendfsync always`, see the crate docs).

use agent_surface_policy::{AuditError, AuditEvent, AuditSink};
use futures_util::future::BoxFuture;
use redis::Value;

use crate::RedisStores;

/// The audit trail on a Redis stream `{prefix}audit`, one entry per event (field `e`, the event's JSON); build it with
/// [`RedisStores::audit`].
#[derive(Clone, Debug)]
pub struct RedisAuditSink {
    stores: RedisStores,
    key: String,
}

impl RedisAuditSink {
    pub(crate) fn new(stores: RedisStores) -> RedisAuditSink {
        let key = format!("{}audit", stores.config.prefix);
        RedisAuditSink { stores, key }
    }

    /// The stream's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Runs one command under the time budget.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, AuditError> {
        let mut conn = self.stores.conn.clone();
        let timeout = self.stores.config.op_timeout;
        match tokio::time::timeout(timeout, cmd.query_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(AuditError::new(format!("redis: {e}"))),
            Err(_) => Err(AuditError::new(format!("redis: no answer within {timeout:?}"))),
        }
    }
}

impl AuditSink for RedisAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            let json = serde_json::to_string(event).map_err(|e| AuditError::new(format!("audit event: {e}")))?;
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&self.key).arg("MAXLEN").arg("~").arg(self.stores.config.audit_max_len).arg("*").arg("e").arg(json);
            self.query::<Value>(&cmd).await.map(drop)
        })
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut cmd = redis::cmd("XREVRANGE");
            cmd.arg(&self.key).arg("+").arg("-").arg("COUNT").arg(limit);
            let entries: Value = self.query(&cmd).await?;
            let mut events = parse_entries(entries);
            events.reverse();
            Ok(events)
        })
    }
}

/// The events of an `XRANGE`/`XREVRANGE` answer: `[[id, [field, value, …]], …]`; entries that do
/// not hold an event are skipped.
fn parse_entries(value: Value) -> Vec<AuditEvent> {
    let Value::Array(entries) = value else { return Vec::new() };
    let mut events = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(mut parts) = entry else { continue };
        let Some(Value::Array(fields)) = parts.pop() else { continue };
        let mut fields = fields.into_iter();
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            if let (Value::BulkString(name), Value::BulkString(value)) = (name, value)
                && name == b"e"
                && let Ok(event) = serde_json::from_slice(&value)
            {
                events.push(event);
            }
        }
    }
    events
}
