//! [`SqliteTaskStore`]: task records in the file, one row per task (the record as JSON,
//! `agent_surface_policy::stored::StoredTask`, and
//! `keep_until`, when it may be deleted), each operation one step of the database thread.

use agent_surface_core::Timestamp;
use agent_surface_policy::stored::{StoredTask, task_keep_until};
use agent_surface_policy::{
    StoreError, TaskStore,
    task::{TaskRecord, TaskStatus},
};
use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::db::{Cx, Fail, corrupt};
use crate::schema::FORMAT;
use crate::{SqliteStores, millis};

/// The record `id`, if kept at `now`.
fn live(cx: &Cx<'_>, id: &str, now: Timestamp) -> Result<Option<TaskRecord>, Fail> {
    let row = cx
        .conn
        .prepare_cached("SELECT v, record FROM task WHERE id = ?1 AND keep_until > ?2")?
        .query_row(params![id, millis(now)], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .optional()?;
    let Some((v, text)) = row else { return Ok(None) };
    if v > FORMAT {
        return Err(corrupt("a task of a later format"));
    }
    let stored: StoredTask = serde_json::from_str(&text).map_err(|_| corrupt("a task"))?;
    stored.into_record().ok_or_else(|| corrupt("a task")).map(Some)
}

fn write(cx: &Cx<'_>, record: &TaskRecord) -> Result<(), Fail> {
    let text = serde_json::to_string(&StoredTask::of(record)).map_err(|_| corrupt("a task"))?;
    cx.conn.prepare_cached("UPDATE task SET v = ?2, keep_until = ?3, record = ?4 WHERE id = ?1")?.execute(params![
        record.id,
        FORMAT,
        millis(task_keep_until(record)),
        text
    ])?;
    Ok(())
}

/// A [`TaskStore`] in the file: a task created (and answered to its caller) before a crash is
/// there after it, with its status as last recorded. Payloads over
/// [`SqliteConfig::max_task_payload_bytes`](crate::SqliteConfig::max_task_payload_bytes) are
/// refused with `StoreError::Full` (the adapter then stores a smaller one).
#[derive(Clone, Debug)]
pub struct SqliteTaskStore {
    stores: SqliteStores,
}

impl SqliteTaskStore {
    pub(crate) fn new(stores: SqliteStores) -> SqliteTaskStore {
        SqliteTaskStore { stores }
    }

    fn too_large(&self, payload: Option<&Value>) -> Option<StoreError> {
        let max = self.stores.config.max_task_payload_bytes;
        payload.is_some_and(|p| p.to_string().len() > max).then_some(StoreError::Full { capacity: max })
    }
}

impl TaskStore for SqliteTaskStore {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Some(refused) = self.too_large(record.payload.as_ref()) {
            return Box::pin(std::future::ready(Err(refused)));
        }
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let text = serde_json::to_string(&StoredTask::of(&record)).map_err(|_| corrupt("a task"))?;
            // An id no longer kept may be used again.
            cx.conn
                .prepare_cached("DELETE FROM task WHERE id = ?1 AND keep_until <= ?2")?
                .execute(params![record.id, millis(now)])?;
            let created = cx
                .conn
                .prepare_cached("INSERT OR IGNORE INTO task (id, v, keep_until, record) VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![record.id, FORMAT, millis(task_keep_until(&record)), text])?;
            if created == 0 {
                return Err(StoreError::Unavailable(format!("task id {} already exists", record.id)).into());
            }
            Ok(())
        }))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            live(cx, &id, now)
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
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let Some(record) = live(cx, &id, now)? else { return Ok(false) };
            if record.status.is_terminal() {
                return Ok(false);
            }
            finish_now(cx, record, status, payload, message, now)?;
            Ok(true)
        }))
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let Some(mut record) = live(cx, &id, now)? else { return Ok(None) };
            if !record.status.is_terminal() && !record.cancel_requested {
                record.cancel_requested = true;
                write(cx, &record)?;
            }
            Ok(Some(record))
        }))
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let Some(mut record) = live(cx, &id, now)? else { return Ok(None) };
            if !record.status.is_terminal() {
                record.lease_until = Some(until);
                write(cx, &record)?;
            }
            Ok(Some(record))
        }))
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
        let id = id.to_string();
        Box::pin(self.stores.db.run(move |cx| {
            cx.saw(now);
            let Some(record) = live(cx, &id, now)? else { return Ok(None) };
            if !record.is_abandoned(now) {
                return Ok(Some(record));
            }
            finish_now(cx, record, TaskStatus::Completed, payload, message, now).map(Some)
        }))
    }
}

/// Moves `record` (live, not final) to `status`, kept its time to live from `now`; the record after.
fn finish_now(
    cx: &Cx<'_>,
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
    write(cx, &record)?;
    Ok(record)
}
