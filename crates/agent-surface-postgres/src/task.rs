//! [`PostgresTaskStore`]: task records in `{schema}.task`, one row per task (the record as JSON,
//! `agent_surface_policy::stored::StoredTask`, and `keep_until`, when it may be deleted), each
//! operation one transaction.

use agent_surface_core::Timestamp;
use agent_surface_policy::stored::{StoredTask, task_keep_until};
use agent_surface_policy::{
    StoreError, TaskStore,
    task::{TaskRecord, TaskStatus},
};
use deadpool_postgres::Transaction;
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::schema::FORMAT;
use crate::{Fail, PostgresStores, corrupt, millis};

/// A [`TaskStore`] in PostgreSQL, shared by every replica: a task created on one replica is
/// read, cancelled and finished through any other, and a task answered to its caller survives
/// the database's restart. Payloads over
/// [`PostgresConfig::max_task_payload_bytes`](crate::PostgresConfig::max_task_payload_bytes) are
/// refused with `StoreError::Full` (the adapter then stores a smaller one).
#[derive(Clone, Debug)]
pub struct PostgresTaskStore {
    stores: PostgresStores,
}

fn parse(v: i32, text: &str) -> Result<TaskRecord, Fail> {
    if v > FORMAT {
        return Err(corrupt("a task of a later format"));
    }
    let stored: StoredTask = serde_json::from_str(text).map_err(|_| corrupt("a task"))?;
    stored.into_record().ok_or_else(|| corrupt("a task"))
}

impl PostgresTaskStore {
    pub(crate) fn new(stores: PostgresStores) -> PostgresTaskStore {
        PostgresTaskStore { stores }
    }

    fn too_large(&self, payload: Option<&Value>) -> Option<StoreError> {
        let max = self.stores.inner.config.max_task_payload_bytes;
        payload.is_some_and(|p| p.to_string().len() > max).then_some(StoreError::Full { capacity: max })
    }

    /// The record `id`, if kept at `now`, locked.
    async fn live(&self, tx: &Transaction<'_>, id: &str, now: Timestamp) -> Result<Option<TaskRecord>, Fail> {
        let read = tx
            .prepare_cached(
                &self.stores.sql("SELECT v, record FROM {s}.task WHERE id = $1 AND keep_until > $2 FOR UPDATE"),
            )
            .await?;
        let row = tx.query_opt(&read, &[&id, &millis(now)]).await?;
        row.map(|row| parse(row.get(0), row.get::<_, &str>(1))).transpose()
    }

    async fn write(&self, tx: &Transaction<'_>, record: &TaskRecord) -> Result<(), Fail> {
        let text = serde_json::to_string(&StoredTask::of(record)).map_err(|_| corrupt("a task"))?;
        let write = tx
            .prepare_cached(&self.stores.sql("UPDATE {s}.task SET v = $2, keep_until = $3, record = $4 WHERE id = $1"))
            .await?;
        tx.execute(&write, &[&record.id, &FORMAT, &millis(task_keep_until(record)), &text]).await?;
        Ok(())
    }

    async fn finish_now(
        &self,
        id: &str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.stores
            .run(async {
                let mut client = self.stores.client().await?;
                let tx = client.transaction().await?;
                let Some(record) = self.live(&tx, id, now).await? else { return Ok(false) };
                if record.status.is_terminal() {
                    return Ok(false);
                }
                self.move_to(&tx, record, status, payload, message, now).await?;
                tx.commit().await?;
                Ok(true)
            })
            .await
    }

    /// Moves `record` (live, not final) to `status`, kept its time to live from `now`; the
    /// record after.
    async fn move_to(
        &self,
        tx: &Transaction<'_>,
        mut record: TaskRecord,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Result<TaskRecord, Fail> {
        let ttl = record.expires_at.saturating_duration_since(record.created_at);
        record.status = status;
        record.payload = payload;
        record.status_message = message;
        record.updated_at = now;
        record.expires_at = now.saturating_add(ttl);
        self.write(tx, &record).await?;
        Ok(record)
    }

    async fn renew_now(&self, id: &str, until: Timestamp, now: Timestamp) -> Result<Option<TaskRecord>, StoreError> {
        self.stores
            .run(async {
                let mut client = self.stores.client().await?;
                let tx = client.transaction().await?;
                let Some(mut record) = self.live(&tx, id, now).await? else { return Ok(None) };
                if !record.status.is_terminal() {
                    record.lease_until = Some(until);
                    self.write(&tx, &record).await?;
                }
                tx.commit().await?;
                Ok(Some(record))
            })
            .await
    }

    async fn end_lapsed_now(
        &self,
        id: &str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Result<Option<TaskRecord>, StoreError> {
        self.stores
            .run(async {
                let mut client = self.stores.client().await?;
                let tx = client.transaction().await?;
                let Some(record) = self.live(&tx, id, now).await? else { return Ok(None) };
                if !record.is_abandoned(now) {
                    return Ok(Some(record));
                }
                let ended = self.move_to(&tx, record, TaskStatus::Completed, payload, message, now).await?;
                tx.commit().await?;
                Ok(Some(ended))
            })
            .await
    }

    async fn request_cancel_now(&self, id: &str, now: Timestamp) -> Result<Option<TaskRecord>, StoreError> {
        self.stores
            .run(async {
                let mut client = self.stores.client().await?;
                let tx = client.transaction().await?;
                let Some(mut record) = self.live(&tx, id, now).await? else { return Ok(None) };
                if !record.status.is_terminal() && !record.cancel_requested {
                    record.cancel_requested = true;
                    self.write(&tx, &record).await?;
                }
                tx.commit().await?;
                Ok(Some(record))
            })
            .await
    }
}

impl TaskStore for PostgresTaskStore {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Some(refused) = self.too_large(record.payload.as_ref()) {
            return Box::pin(std::future::ready(Err(refused)));
        }
        Box::pin(self.stores.run(async move {
            let text = serde_json::to_string(&StoredTask::of(&record)).map_err(|_| corrupt("a task"))?;
            let client = self.stores.client().await?;
            // One statement: an id no longer kept may be used again; a kept one is refused.
            let create = client
                .prepare_cached(&self.stores.sql(
                    "INSERT INTO {s}.task AS t (id, v, keep_until, record) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, keep_until = EXCLUDED.keep_until, record = EXCLUDED.record
                     WHERE t.keep_until <= $5",
                ))
                .await?;
            let created = client
                .execute(&create, &[&record.id, &FORMAT, &millis(task_keep_until(&record)), &text, &millis(now)])
                .await?;
            if created == 0 {
                return Err(StoreError::Unavailable(format!("task id {} already exists", record.id)).into());
            }
            Ok(())
        }))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(self.stores.run(async move {
            let client = self.stores.client().await?;
            let read = client
                .prepare_cached(&self.stores.sql("SELECT v, record FROM {s}.task WHERE id = $1 AND keep_until > $2"))
                .await?;
            let row = client.query_opt(&read, &[&id, &millis(now)]).await?;
            row.map(|row| parse(row.get(0), row.get::<_, &str>(1))).transpose()
        }))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        if let Some(refused) = self.too_large(payload.as_ref()) {
            return Box::pin(std::future::ready(Err(refused)));
        }
        Box::pin(self.finish_now(id, status, payload, message, now))
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(self.request_cancel_now(id, now))
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(self.renew_now(id, until, now))
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        if let Some(refused) = self.too_large(payload.as_ref()) {
            return Box::pin(std::future::ready(Err(refused)));
        }
        Box::pin(self.end_lapsed_now(id, payload, message, now))
    }
}
