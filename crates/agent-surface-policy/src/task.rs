//! Where long-running calls live while they run and after: the [`TaskStore`] trait and
//! [`MemoryTaskStore`], its bounded in-process implementation.
//!
//! A task is a call that an adapter answered before it finished (MCP's tasks extension): the
//! caller gets the task id at once and asks for the outcome later. The store holds one record per
//! task: its status, the adapter's payload for that status (the final result, as the adapter
//! encodes it), and whether a cancellation was requested. The record is created *before* the
//! answer that names the task is sent, so any replica that shares the store can answer for it.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::Timestamp;
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::store::StoreError;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for input from the client.
    InputRequired,
    /// Finished with a result (a capability error is a result too). Final.
    Completed,
    /// Finished with a protocol fault. Final.
    Failed,
    /// Ended by a cancellation before it ran to an outcome. Final.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }

    /// The status as MCP spells it (`working`, `input_required`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// One task.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TaskRecord {
    /// The task id (fresh, unguessable: it is all an anonymous caller needs to read the task).
    pub id: String,
    /// The consumer key of the authenticated principal that created it: only that principal may
    /// read or cancel it. `None` for an anonymous caller: whoever holds the id.
    pub owner: Option<String>,
    /// Where it is.
    pub status: TaskStatus,
    /// A short, agent-safe description of the current state.
    pub status_message: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
    /// Until when the store keeps it once it is final; a task that is not final yet is kept
    /// until [`TaskRecord::running_until`] (so a slow call's record never expires under it).
    pub expires_at: Timestamp,
    /// Until when the store keeps a task that is not final (a bound for a record whose end was
    /// never recorded, e.g. after a crash).
    pub running_until: Timestamp,
    /// The adapter's payload for the status, opaque to the store: the result of a completed
    /// task, the error of a failed one, the open questions of one that needs input.
    pub payload: Option<Value>,
    /// A cancellation was requested (by any replica); the one running the task honours it.
    pub cancel_requested: bool,
    /// Until when the process running the task holds it, while it is not final: that process
    /// renews it ([`TaskStore::renew`]) while the call runs. A task whose lease lapsed is
    /// *abandoned* — its process died or restarted, or lost the store for longer than the lease
    /// — and whoever reads it next ends it ([`TaskStore::end_lapsed`]). `None`: no lease (a
    /// record written before leases, or by an adapter that does not renew), held until
    /// [`TaskRecord::running_until`].
    pub lease_until: Option<Timestamp>,
}

impl TaskRecord {
    /// A working task created `now`, kept for `ttl` (and, while it runs, at least `running`).
    pub fn working(
        id: impl Into<String>,
        owner: Option<String>,
        now: Timestamp,
        ttl: Duration,
        running: Duration,
    ) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner,
            status: TaskStatus::Working,
            status_message: None,
            created_at: now,
            updated_at: now,
            expires_at: now.saturating_add(ttl),
            running_until: now.saturating_add(running.max(ttl)),
            payload: None,
            cancel_requested: false,
            lease_until: None,
        }
    }

    /// The same, held by its process for `lease` from its creation (see
    /// [`TaskRecord::lease_until`]).
    pub fn with_lease(mut self, lease: Duration) -> TaskRecord {
        self.lease_until = Some(self.created_at.saturating_add(lease));
        self
    }

    /// Whether the task is abandoned at `now`: not final, and its lease lapsed (`lease_until <=
    /// now`). A task without a lease is never abandoned.
    pub fn is_abandoned(&self, now: Timestamp) -> bool {
        !self.status.is_terminal() && self.lease_until.is_some_and(|until| until <= now)
    }

    /// Whether the store no longer keeps it at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        let until = if self.status.is_terminal() { self.expires_at } else { self.running_until };
        until <= now
    }

    /// Roughly how many bytes the record holds (what [`MemoryTaskStore`] budgets).
    pub fn size(&self) -> usize {
        let payload = self.payload.as_ref().map_or(0, |p| p.to_string().len());
        let message = self.status_message.as_ref().map_or(0, String::len);
        let owner = self.owner.as_ref().map_or(0, String::len);
        std::mem::size_of::<TaskRecord>() + self.id.len() + owner + message + payload
    }
}

/// Where tasks live.
///
/// | operation | atomic effect |
/// |---|---|
/// | [`create`](TaskStore::create) | adds a working record under a fresh id (set-if-absent); returns once it is stored |
/// | [`get`](TaskStore::get) | the record, if kept |
/// | [`finish`](TaskStore::finish) | a non-final record → the given status and payload, kept for its time to live from now; a final one is left as it is |
/// | [`request_cancel`](TaskStore::request_cancel) | marks a non-final record as cancel-requested |
/// | [`renew`](TaskStore::renew) | a non-final record's lease → the given instant |
/// | [`end_lapsed`](TaskStore::end_lapsed) | a non-final record whose lease lapsed → completed with the given payload |
///
/// Every operation is required: a task whose process died must end (the adapter ends it through
/// [`end_lapsed`](TaskStore::end_lapsed) once its lease lapses), and a store that could not renew
/// or end would leave it `working` until [`TaskRecord::running_until`] and then forget it.
///
/// `now` is passed in (from the registry's clock) rather than read.
pub trait TaskStore: Send + Sync + fmt::Debug + 'static {
    /// Adds `record`. An id that exists already is an error; so is a full store.
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The record with `id`, if the store still keeps it.
    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Moves the record `id`, unless it is final already, to `status` with `payload` and
    /// `message`, and keeps it for its time to live (`expires_at - created_at`) from `now`.
    /// Returns whether it moved; [`StoreError::Full`] when the payload does not fit the store's
    /// budget (nothing changed: finish it again with a smaller payload).
    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Marks the record `id` as cancel-requested unless it is final; returns the record after
    /// the call (`None` for an unknown id).
    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Atomically sets the lease of the record `id`, unless it is final, to `until` (its process
    /// is alive and the call runs); returns the record after the call (`None` for an unknown id),
    /// so that the running process also learns of a cancellation requested meanwhile. A final
    /// record is returned unchanged — also one that was ended as abandoned while its process was
    /// cut off: that process then learns its task was ended.
    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Atomically ends the record `id` if it is abandoned at `now` ([`TaskRecord::is_abandoned`]:
    /// not final, and its lease lapsed): it becomes [`TaskStatus::Completed`] with `payload` and
    /// `message`, kept for its time to live from `now`, as [`finish`](Self::finish) does. Returns
    /// the record after the call (`None` for an unknown id): ended, or unchanged when it was not
    /// abandoned (final already, renewed meanwhile, or without a lease). The check and the move
    /// are one step, so a process that renews at the last moment keeps its task, and of a finish
    /// and an end racing exactly one lands. [`StoreError::Full`] as for `finish`.
    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;
}

impl<S: TaskStore + ?Sized> TaskStore for std::sync::Arc<S> {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).create(record, now)
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        (**self).get(id, now)
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).finish(id, status, payload, message, now)
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        (**self).request_cancel(id, now)
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        (**self).renew(id, until, now)
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        (**self).end_lapsed(id, payload, message, now)
    }
}

/// The bounds of a [`MemoryTaskStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryTaskStoreConfig {
    /// The most records held at once.
    pub capacity: usize,
    /// The most bytes held at once ([`TaskRecord::size`] summed).
    pub max_bytes: usize,
}

impl Default for MemoryTaskStoreConfig {
    /// 10 000 records, 64 MiB.
    fn default() -> MemoryTaskStoreConfig {
        MemoryTaskStoreConfig { capacity: 10_000, max_bytes: 64 * 1024 * 1024 }
    }
}

impl MemoryTaskStoreConfig {
    /// At most `capacity` records and `max_bytes` bytes.
    pub fn new(capacity: usize, max_bytes: usize) -> MemoryTaskStoreConfig {
        MemoryTaskStoreConfig { capacity, max_bytes }
    }
}

/// A [`TaskStore`] in this process's memory, bounded by count and bytes.
///
/// Expired records go first; when the store is still full, the oldest *final* record is dropped
/// (a running task is never dropped to make room: creating another then fails with
/// [`StoreError::Full`], and the adapter answers the call without a task; finishing one with a
/// payload that does not fit fails the same way, and the adapter finishes it with a smaller
/// one). Records do not survive a restart.
pub struct MemoryTaskStore {
    config: MemoryTaskStoreConfig,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, TaskRecord>,
    /// Ids in creation order.
    order: VecDeque<String>,
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, id: &str) {
        if let Some(r) = self.records.remove(id) {
            self.bytes = self.bytes.saturating_sub(r.size());
        }
    }
}

impl MemoryTaskStore {
    /// An empty store.
    pub fn new(config: MemoryTaskStoreConfig) -> MemoryTaskStore {
        MemoryTaskStore { config, inner: Mutex::new(Inner::default()) }
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bytes its records hold.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each critical section leaves `Inner` consistent; a poisoned lock guards valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops expired records, then the oldest final ones other than `keep`, until `extra` more
    /// bytes (and, for a new record, one more record) fit. Returns whether they fit.
    fn make_room(&self, inner: &mut Inner, extra: usize, new_record: bool, keep: &str, now: Timestamp) -> bool {
        let expired: Vec<String> =
            inner.records.values().filter(|r| r.is_expired(now) && r.id != keep).map(|r| r.id.clone()).collect();
        for id in expired {
            inner.remove(&id);
        }
        inner.order.retain(|id| inner.records.contains_key(id));
        let fits = |inner: &Inner| {
            (!new_record || inner.records.len() < self.config.capacity)
                && inner.bytes.saturating_add(extra) <= self.config.max_bytes
        };
        while !fits(inner) {
            let evictable = |id: &String| id != keep && inner.records.get(id).is_some_and(|r| r.status.is_terminal());
            let Some(pos) = inner.order.iter().position(evictable) else {
                return false;
            };
            if let Some(id) = inner.order.remove(pos) {
                inner.remove(&id);
            }
        }
        true
    }

    fn live<'i>(inner: &'i mut Inner, id: &str, now: Timestamp) -> Option<&'i mut TaskRecord> {
        inner.records.get_mut(id).filter(|r| !r.is_expired(now))
    }
}
impl Default for MemoryTaskStore {
    fn default() -> MemoryTaskStore {
        MemoryTaskStore::new(MemoryTaskStoreConfig::default())
    }
}

impl fmt::Debug for MemoryTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTaskStore").field("config", &self.config).field("len", &self.len()).finish()
    }
}

impl TaskStore for MemoryTaskStore {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            if inner.records.contains_key(&record.id) {
                return Err(StoreError::Unavailable(format!("task id {} already exists", record.id)));
            }
            let size = record.size();
            if !self.make_room(&mut inner, size, true, &record.id, now) {
                return Err(StoreError::Full { capacity: self.config.capacity });
            }
            inner.bytes += size;
            inner.order.push_back(record.id.clone());
            inner.records.insert(record.id.clone(), record);
            Ok(())
        })
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            Ok(Self::live(&mut inner, id, now).map(|r| r.clone()))
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let Some(record) = Self::live(&mut inner, id, now) else { return Ok(false) };
            if record.status.is_terminal() {
                return Ok(false);
            }
            self.finish_now(&mut inner, id, status, payload, message, now).map(|_| true)
        })
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let Some(record) = Self::live(&mut inner, id, now) else { return Ok(None) };
            if !record.status.is_terminal() {
                record.cancel_requested = true;
            }
            Ok(Some(record.clone()))
        })
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let Some(record) = Self::live(&mut inner, id, now) else { return Ok(None) };
            if !record.status.is_terminal() {
                record.lease_until = Some(until);
            }
            Ok(Some(record.clone()))
        })
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            let Some(record) = Self::live(&mut inner, id, now) else { return Ok(None) };
            if !record.is_abandoned(now) {
                return Ok(Some(record.clone()));
            }
            self.finish_now(&mut inner, id, TaskStatus::Completed, payload, message, now).map(Some)
        })
    }
}

impl MemoryTaskStore {
    /// Moves the live, non-final record `id` to `status`; the record after.
    fn finish_now(
        &self,
        inner: &mut Inner,
        id: &str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Result<TaskRecord, StoreError> {
        let Some(record) = inner.records.get(id) else {
            return Err(StoreError::Unavailable(format!("task {id} vanished")));
        };
        let before = record.size();
        let mut finished = record.clone();
        finished.status = status;
        finished.payload = payload;
        finished.status_message = message;
        finished.updated_at = now;
        finished.expires_at = now.saturating_add(record.expires_at.saturating_duration_since(record.created_at));
        let growth = finished.size().saturating_sub(before);
        if !self.make_room(inner, growth, false, id, now) {
            return Err(StoreError::Full { capacity: self.config.capacity });
        }
        let after = finished.size();
        if let Some(record) = inner.records.get_mut(id) {
            *record = finished.clone();
        }
        inner.bytes = inner.bytes.saturating_sub(before).saturating_add(after);
        Ok(finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(1_795_957_200_000 + ms)
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        futures_util::FutureExt::now_or_never(f).expect("the memory store never waits")
    }

    fn new(id: &str, t: u64, ttl_secs: u64) -> TaskRecord {
        TaskRecord::working(id, None, at(t), Duration::from_secs(ttl_secs), Duration::from_secs(3600))
    }

    #[test]
    fn a_task_moves_once_to_a_final_status() {
        let store = MemoryTaskStore::default();
        run(store.create(new("t-1", 0, 60), at(0))).unwrap();
        assert!(run(store.create(new("t-1", 0, 60), at(0))).is_err());
        let cancelled = run(store.request_cancel("t-1", at(1))).unwrap().unwrap();
        assert!(cancelled.cancel_requested);
        assert!(run(store.finish("t-1", TaskStatus::Completed, Some(Value::from(1)), None, at(2))).unwrap());
        assert!(!run(store.finish("t-1", TaskStatus::Cancelled, None, None, at(3))).unwrap());
        let record = run(store.get("t-1", at(4))).unwrap().unwrap();
        assert_eq!(
            (record.status, record.payload, record.updated_at),
            (TaskStatus::Completed, Some(Value::from(1)), at(2))
        );
        // A cancellation after the end changes nothing.
        assert_eq!(run(store.request_cancel("t-1", at(5))).unwrap().unwrap().status, TaskStatus::Completed);
        // Kept for its time to live from its end, then gone.
        assert!(run(store.get("t-1", at(60_001))).unwrap().is_some());
        assert_eq!(run(store.get("t-1", at(60_002))).unwrap(), None);
    }

    #[test]
    fn a_running_task_outlives_its_time_to_live_and_a_payload_over_budget_is_refused() {
        let record = new("slow", 0, 1);
        let store = MemoryTaskStore::new(MemoryTaskStoreConfig::new(10, record.size() + 100));
        run(store.create(record, at(0))).unwrap();
        // Still there long after its time to live: it has not finished.
        assert!(run(store.get("slow", at(600_000))).unwrap().is_some());
        let big = Value::String("x".repeat(1000));
        assert!(matches!(
            run(store.finish("slow", TaskStatus::Completed, Some(big), None, at(600_000))),
            Err(StoreError::Full { .. })
        ));
        assert!(run(store.finish("slow", TaskStatus::Completed, Some(Value::from(1)), None, at(600_000))).unwrap());
        assert_eq!(run(store.get("slow", at(600_500))).unwrap().unwrap().status, TaskStatus::Completed);
        assert_eq!(run(store.get("slow", at(601_000))).unwrap(), None);
    }

    #[test]
    fn a_full_store_drops_final_tasks_and_never_running_ones() {
        let store = MemoryTaskStore::new(MemoryTaskStoreConfig::new(2, usize::MAX));
        run(store.create(new("a", 0, 60), at(0))).unwrap();
        run(store.create(new("b", 0, 60), at(0))).unwrap();
        assert!(matches!(run(store.create(new("c", 0, 60), at(0))), Err(StoreError::Full { capacity: 2 })));
        run(store.finish("a", TaskStatus::Completed, None, None, at(1))).unwrap();
        run(store.create(new("c", 1, 60), at(1))).unwrap();
        assert_eq!(run(store.get("a", at(1))).unwrap(), None);
        assert!(run(store.get("b", at(1))).unwrap().is_some());
    }

    #[test]
    fn bytes_are_budgeted() {
        let base = new("a", 0, 60).size();
        let store = MemoryTaskStore::new(MemoryTaskStoreConfig::new(100, 2 * base + 1100));
        run(store.create(new("a", 0, 60), at(0))).unwrap();
        let big = Value::String("x".repeat(1000));
        run(store.finish("a", TaskStatus::Completed, Some(big), None, at(1))).unwrap();
        assert!(store.bytes() > 1000);
        run(store.create(new("b", 2, 60), at(2))).unwrap();
        // The third does not fit: the final, large record makes room; the running one stays.
        run(store.create(new("c", 3, 60), at(3))).unwrap();
        assert_eq!(run(store.get("a", at(3))).unwrap(), None);
        assert_eq!(store.len(), 2);
    }
}
