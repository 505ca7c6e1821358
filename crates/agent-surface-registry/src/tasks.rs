//! Long-running calls answered before they end, as tasks in a [`TaskStore`]: the runtime every
//! adapter shares (the MCP adapter's tasks extension, the HTTP binding's `202 Accepted`).
//!
//! A call of a capability declared long-running (`CapabilityBuilder::long_running`) that the
//! adapter may answer as a task runs the pipeline as usual; **once the handler starts**,
//! [`Tasks::start`] records a working task in the store and only then returns it, for the adapter
//! to name. Everything before the handler — unknown capability, invalid input, a denial, a rate
//! limit, questions, a confirmation — ends the call before a task exists, and the adapter answers
//! it as any other call ([`Started::Ended`]). So a task is always a call that is really running.
//!
//! **One record, every adapter.** The record's payload is the call's outcome in a form no
//! transport owns ([`TaskOutcome`]: the `InvokeResult` JSON and the correlation id); each adapter
//! renders it its own way when the task is read. A task started over MCP is read over HTTP, and
//! the other way round, when both use the same store.
//!
//! **Who may read a task.** A task created by an authenticated caller belongs to its principal
//! ([`Consumer::principal`], the same on every transport): only that principal reads and cancels
//! it, and to anyone else it does not exist ([`Tasks::find`] answers `None`, as for an unknown
//! id). One created by an anonymous caller is read by whoever holds its id (128 random bits),
//! since an anonymous caller has no key that lasts.
//!
//! **Where it runs.** The call runs in this process; its record is in the store, so any replica
//! (or adapter) sharing the store reads it, and a cancellation recorded by another is seen by the
//! running one within [`TaskConfig::poll_interval`]. If the store cannot create the record, no
//! task is named: the call is answered when it ends.
//!
//! **A task whose process died ends.** The running process holds its task by a lease
//! ([`TaskConfig::lease`]), renewed every third of it while the call runs. When the process dies
//! (or restarts on a durable store, or loses the store for longer than the lease) the lease
//! lapses, and the next [`Tasks::find`] or [`Tasks::cancel`] through any process sharing the store
//! ends the task, in one atomic step of the store ([`TaskStore::end_lapsed`]), as completed with
//! `EXECUTION_FAILED {reason: outcome-unknown}`: its handler started and nobody can say what it
//! did. It is never left working until it is forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Timestamp};
use agent_surface_policy::{
    Clock, Consumer, MemoryTaskStore, StoreError, TaskStore,
    task::{TaskRecord, TaskStatus},
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{Invocation, InvokeOptions, InvokeRequest, Registry};

/// How tasks are kept. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    /// Where task records live (shared by replicas and adapters, or [`MemoryTaskStore`]).
    pub store: Arc<dyn TaskStore>,
    /// How long a task is kept after it ends.
    pub ttl: Duration,
    /// How long a task that has not ended is kept at most (a bound for a record whose end was
    /// never recorded, e.g. after a crash); a running task never expires before it, nor before
    /// its call could have ended: twice the call's time budget (the handler's and its
    /// post-condition's) and a [`lease`](TaskConfig::lease) after it was created.
    pub running_ttl: Duration,
    /// The most tasks running in this process at once; past it, a call is answered when it ends
    /// (a bound on detached work, which no connection limits once a task is named).
    pub max_running: usize,
    /// How often clients are asked to poll, and how often a running task checks the store for a
    /// cancellation recorded by another replica or adapter.
    pub poll_interval: Duration,
    /// How long a running task is held by its process without a renewal: the process renews it
    /// every third of this while the call runs; once it lapses (the process died), reading or
    /// cancelling the task ends it with an unknown outcome. Longer than the longest store outage
    /// a process should survive with its tasks; shorter than a client waits for a dead task.
    pub lease: Duration,
}

impl Default for TaskConfig {
    /// In memory; kept 5 minutes after the end (an hour at most while running); 256 running at
    /// once; polled every 500 ms; held by a 30 s lease.
    fn default() -> TaskConfig {
        TaskConfig {
            store: Arc::new(MemoryTaskStore::default()),
            ttl: Duration::from_secs(300),
            running_ttl: Duration::from_secs(3600),
            max_running: 256,
            poll_interval: Duration::from_millis(500),
            lease: Duration::from_secs(30),
        }
    }
}

impl TaskConfig {
    /// Tasks in `store`, with the default time to live and poll interval.
    pub fn with_store(store: Arc<dyn TaskStore>) -> TaskConfig {
        TaskConfig { store, ..TaskConfig::default() }
    }
}

/// The task runtime: the configuration and the calls running in this process. Cheap to clone;
/// give every adapter of one process the same one (so a cancellation reaches a task started by
/// another adapter at once, not at its next poll).
///
/// ```
/// use agent_surface_registry::tasks::{TaskConfig, Tasks};
///
/// let tasks = Tasks::new(TaskConfig::default());
/// assert_eq!(tasks.config().max_running, 256);
/// ```
#[derive(Clone)]
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    config: TaskConfig,
    /// The cancellation of each task running here.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// The tasks of this process not over yet: running, or recording their end ([`Tasks::idle`]).
    live: std::sync::atomic::AtomicUsize,
    /// Woken when `live` falls to zero.
    idle: tokio::sync::Notify,
}

/// One task of this process counted in [`Inner::live`] until it is dropped (its end recorded, or
/// its settlement dropped with the runtime).
struct Live(Arc<Inner>);

impl Live {
    fn new(inner: &Arc<Inner>) -> Live {
        inner.live.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Live(inner.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// What [`Tasks::start`] came to.
#[derive(Debug)]
pub enum Started {
    /// The handler started and this task was recorded: name it to the caller.
    Task(TaskRecord),
    /// The call ended before its handler started (or no task could be created): answer it.
    Ended(Invocation),
}

/// A finished call's outcome as a task record holds it, whichever adapter started the task:
/// `{"result": <the InvokeResult JSON>, "correlationId": "…"}`.
///
/// ```
/// use agent_surface_core::InvokeResult;
/// use agent_surface_registry::tasks::TaskOutcome;
///
/// let outcome = TaskOutcome { result: InvokeResult::ok(serde_json::json!({"n": 1}), None), correlation_id: "c-1".into() };
/// let stored = outcome.to_payload();
/// assert_eq!(stored["result"]["status"], "ok");
/// assert_eq!(TaskOutcome::from_payload(&stored), Some(outcome));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TaskOutcome {
    /// What the caller receives.
    pub result: InvokeResult,
    /// The call's correlation id (see [`crate::correlation`]).
    pub correlation_id: String,
}

impl TaskOutcome {
    /// The outcome of `invocation`.
    pub fn of(invocation: &Invocation) -> TaskOutcome {
        TaskOutcome { result: invocation.result.clone(), correlation_id: invocation.correlation_id.to_string() }
    }

    /// The payload a record holds.
    pub fn to_payload(&self) -> Value {
        let result = serde_json::to_value(&self.result).unwrap_or_else(|_| self.result.to_json());
        serde_json::json!({ "result": result, "correlationId": self.correlation_id })
    }

    /// The outcome a record's payload holds; `None` for a payload of another shape (one written
    /// by an older version of an adapter).
    pub fn from_payload(payload: &Value) -> Option<TaskOutcome> {
        let result = serde_json::from_value(payload.get("result")?.clone()).ok()?;
        let correlation_id = payload.get("correlationId")?.as_str()?.to_string();
        Some(TaskOutcome { result, correlation_id })
    }

    /// The outcome of a finished `record`, when it holds one this version reads.
    pub fn of_record(record: &TaskRecord) -> Option<TaskOutcome> {
        record.payload.as_ref().and_then(TaskOutcome::from_payload)
    }
}

impl Tasks {
    /// A runtime with `config`.
    pub fn new(config: TaskConfig) -> Tasks {
        Tasks {
            inner: Arc::new(Inner {
                config,
                running: Mutex::new(HashMap::new()),
                live: std::sync::atomic::AtomicUsize::new(0),
                idle: tokio::sync::Notify::new(),
            }),
        }
    }

    /// Completes when no task of this process is left: none running, and each one that ended has
    /// its end recorded in the store (or gave up asking a store that does not answer). A server's
    /// drain waits for it as for the requests in flight (`agent_surface_server::Drain::waiting_for`),
    /// so that a call answered as a task is not dropped with the process mid-run: it finishes
    /// within the drain deadline, or ends once the registry is disposed, and its end is recorded
    /// for the client that polls.
    pub fn idle(&self) -> impl std::future::Future<Output = ()> + Send + use<> {
        let inner = self.inner.clone();
        async move {
            loop {
                // Registered before the count is read, so that the last task ending in between
                // wakes it.
                let notified = inner.idle.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                if inner.live.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TaskConfig {
        &self.inner.config
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inner.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The owner recorded for `consumer`'s tasks: its principal when authenticated (the same on
    /// every transport), `None` for an anonymous caller.
    pub fn owner(consumer: &Consumer) -> Option<String> {
        consumer.identity().map(|_| consumer.principal().to_string())
    }

    /// Runs `invoke`; returns a task once the handler starts, or the invocation if it ends
    /// first. `request` is the request's own cancellation, which counts until a task is named;
    /// after that, only [`Tasks::cancel`] (or a cancellation recorded in the store) ends the call.
    /// Until a task is named, dropping this future cancels the call as `request` does: a
    /// transport that drops a request's handler when its client goes away (HTTP) ends the call
    /// then too, rather than leaving it to run with nobody to answer.
    pub async fn start(
        &self,
        registry: &Registry,
        invoke: InvokeRequest,
        mut options: InvokeOptions,
        request: CancellationToken,
    ) -> Started {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let started_tx = Mutex::new(Some(started_tx));
        options = options.with_execute_hook(Arc::new(move || {
            if let Some(tx) = started_tx.lock().unwrap_or_else(PoisonError::into_inner).take() {
                let _ = tx.send(());
            }
        }));
        // The task outlives the request: its own cancellation, fed by the request's until the
        // task is named, and by a cancellation of the task after.
        let token = CancellationToken::new();
        options = options.with_cancellation(token.clone());
        let unnamed = token.clone().drop_guard();
        let owner = Self::owner(&options.consumer);
        // Kept while it runs for `running_ttl`, and at least as long as the call may still run
        // once its handler started (its budget, as long again for a post-condition) and a lease:
        // a record that expired under a running call would lose its result.
        let budget = handler_budget(registry, &invoke.capability, &options);
        let kept_running =
            self.inner.config.running_ttl.max(budget.saturating_mul(2).saturating_add(self.inner.config.lease));
        let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<Invocation>();
        let running = registry.clone();
        tokio::spawn(async move {
            let invocation = running.invoke_detailed(invoke, options).await;
            let _ = done_tx.send(invocation);
        });
        let started = tokio::select! {
            started = started_rx => started.is_ok(),
            () = request.cancelled() => {
                token.cancel();
                false
            }
        };
        // A caller that hung up meanwhile, or a process at its limit of running tasks: no task.
        let at_limit = self.running().len() >= self.inner.config.max_running;
        if !started || request.is_cancelled() || at_limit {
            if at_limit {
                tracing::warn!(target: "agent_surface::tasks", max = self.inner.config.max_running, "too many tasks running; answering the call when it ends");
            }
            let ended = wait(&mut done_rx, &request, &token).await;
            unnamed.disarm();
            return Started::Ended(ended);
        }
        let clock = registry.config().clock.clone();
        let now = clock.now();
        let config = &self.inner.config;
        let record = TaskRecord::working(new_task_id(), owner, now, config.ttl, kept_running).with_lease(config.lease);
        if let Err(e) = config.store.create(record.clone(), now).await {
            tracing::warn!(target: "agent_surface::tasks", error = %agent_surface_policy::redacted(&e), "cannot create a task; answering the call when it ends");
            let ended = wait(&mut done_rx, &request, &token).await;
            unnamed.disarm();
            return Started::Ended(ended);
        }
        self.running().insert(record.id.clone(), token.clone());
        unnamed.disarm();
        let this = self.clone();
        let id = record.id.clone();
        let live = Live::new(&self.inner);
        tokio::spawn(async move {
            this.settle(id, done_rx, token, clock).await;
            drop(live);
        });
        Started::Task(record)
    }

    /// Waits for the task's call to end and records its outcome; meanwhile, watches the store for
    /// a cancellation recorded by another replica.
    async fn settle(
        self,
        id: String,
        mut done: tokio::sync::oneshot::Receiver<Invocation>,
        token: CancellationToken,
        clock: Arc<dyn Clock>,
    ) {
        let store = &self.inner.config.store;
        let lease = self.inner.config.lease;
        let mut renewed = clock.now();
        let mut ended_elsewhere = false;
        let invocation = loop {
            tokio::select! {
                invocation = &mut done => break invocation.unwrap_or_else(|_| lost()),
                () = tokio::time::sleep(self.inner.config.poll_interval.min(lease / 3).max(Duration::from_millis(10))) => {
                    // Each poll reads the record; every third of the lease it renews it too.
                    let now = clock.now();
                    let read = if now.saturating_duration_since(renewed) >= lease / 3 {
                        let answer = store.renew(&id, now.saturating_add(lease), now).await;
                        if answer.is_ok() {
                            renewed = now;
                        }
                        answer
                    } else {
                        store.get(&id, now).await
                    };
                    match read {
                        Ok(Some(record)) if record.cancel_requested => token.cancel(),
                        Ok(Some(record)) if record.status.is_terminal() && !ended_elsewhere => {
                            ended_elsewhere = true;
                            tracing::warn!(target: "agent_surface::tasks", task_id = %id, "task ended elsewhere while it ran here (its lease lapsed)");
                        }
                        Err(e) => {
                            tracing::warn!(target: "agent_surface::tasks", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot renew a task's lease");
                        }
                        _ => {}
                    }
                }
            }
        };
        self.running().remove(&id);
        let outcome = TaskOutcome::of(&invocation);
        let (status, payload) = if invocation.result.code() == Some(ErrorCode::Cancelled) {
            (TaskStatus::Cancelled, None)
        } else {
            (TaskStatus::Completed, Some(outcome.to_payload()))
        };
        let finished = match finish(store.as_ref(), clock.as_ref(), &id, status, payload, (renewed, lease)).await {
            // The result does not fit the store: it is withheld, as an output over the cap is.
            Err(StoreError::Full { .. }) => {
                tracing::warn!(target: "agent_surface::tasks", task_id = %id, "task result over the store's budget; withheld");
                let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
                let withheld = TaskOutcome {
                    result: InvokeResult::error(
                        withheld.into_payload(),
                        outcome.result.invocation_id().map(str::to_string),
                    ),
                    correlation_id: outcome.correlation_id,
                };
                let payload = Some(withheld.to_payload());
                finish(store.as_ref(), clock.as_ref(), &id, TaskStatus::Completed, payload, (renewed, lease)).await
            }
            other => other,
        };
        if let Err(e) = finished {
            tracing::error!(target: "agent_surface::tasks", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot record the end of a task");
        }
    }

    /// The record of `id` as `consumer` may see it: `None` for an unknown or expired id and for
    /// another principal's task (the two are answered alike). An abandoned task (its lease
    /// lapsed: the process running it died) is ended first, completed with `EXECUTION_FAILED
    /// {reason: outcome-unknown}`.
    pub async fn find(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<Option<TaskRecord>, StoreError> {
        let store = &self.inner.config.store;
        let Some(record) = store.get(id, now).await? else {
            return Ok(None);
        };
        if let Some(owner) = &record.owner
            && Self::owner(consumer).as_deref() != Some(owner.as_str())
        {
            return Ok(None);
        }
        if !record.is_abandoned(now) {
            return Ok(Some(record));
        }
        let unknown = Invocation::new(InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None));
        let ended = store.end_lapsed(id, Some(TaskOutcome::of(&unknown).to_payload()), None, now).await?;
        if let Some(ended) = &ended
            && ended.status.is_terminal()
            && ended.updated_at == now
        {
            tracing::warn!(target: "agent_surface::tasks", task_id = %id, "task abandoned (its lease lapsed): ended with an unknown outcome");
        }
        Ok(ended)
    }

    /// Asks for the end of the task `id`, when `consumer` may see it and it has not ended: the
    /// cancellation is recorded in the store (for the replica running it) and, when it runs in
    /// this process, fired at once. Returns the record as the store left it (final if the call
    /// ended meanwhile; `None` as for [`Tasks::find`]), or the store's failure when the
    /// cancellation could be neither recorded nor fired here. A call that had not started its effect ends cancelled; a write
    /// interrupted after its handler started ends with `EXECUTION_FAILED {reason:
    /// outcome-unknown}` (the usual rule).
    pub async fn cancel(
        &self,
        id: &str,
        consumer: &Consumer,
        now: Timestamp,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let Some(record) = self.find(id, consumer, now).await? else {
            return Ok(None);
        };
        if record.status.is_terminal() {
            return Ok(Some(record));
        }
        let recorded = self.inner.config.store.request_cancel(id, now).await;
        let here = match self.running().get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        };
        match recorded {
            // The record as the store left it: final if the call ended meanwhile.
            Ok(after) => Ok(after),
            // Not recorded, but fired here, where the call runs: it ends.
            Err(e) if here => {
                tracing::warn!(target: "agent_surface::tasks", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot record a task cancellation; the task runs here and was cancelled");
                Ok(Some(record))
            }
            // Neither recorded nor running here: nothing will end it, so the caller must not be
            // told that its cancellation was taken.
            Err(e) => Err(e),
        }
    }
}

/// A task's time to live as its view reports it at `now` (`ttlMs`): how long from its
/// **creation** the store keeps it at least, as MCP defines the field. A final record is kept
/// until it expires (its time to live from its end). A running one is kept at least until its
/// time to live after `now`, were it to end now (and at most until it may no longer be running,
/// [`TaskRecord::running_until`]): the figure grows while it runs, and never promises more than
/// the store keeps — a client that honours it neither gives up on a result the store still holds
/// nor comes back after it is gone.
///
/// ```
/// use std::time::Duration;
/// use agent_surface_core::Timestamp;
/// use agent_surface_policy::task::{TaskRecord, TaskStatus};
/// use agent_surface_registry::tasks::ttl;
/// let at = |ms: u64| Timestamp::from_unix_millis(1_000_000 + ms);
/// let mut record = TaskRecord::working("t-1", None, at(0), Duration::from_secs(300), Duration::from_secs(3600));
/// assert_eq!(ttl(&record, at(0)), Duration::from_secs(300)); // just created: five minutes
/// assert_eq!(ttl(&record, at(1_200_000)), Duration::from_secs(1500)); // 20 minutes in: 25
/// // Ended 20 minutes in, kept five minutes from then: 25 minutes from its creation.
/// record.status = TaskStatus::Completed;
/// record.updated_at = at(1_200_000);
/// record.expires_at = at(1_500_000);
/// assert_eq!(ttl(&record, at(1_300_000)), Duration::from_secs(1500));
/// ```
pub fn ttl(record: &TaskRecord, now: Timestamp) -> Duration {
    let created = record.created_at;
    if record.status.is_terminal() {
        return record.expires_at.saturating_duration_since(created);
    }
    // A running record's `expires_at` is its creation plus the time to live kept after its end.
    let after_end = record.expires_at.saturating_duration_since(created);
    let at_least = now.saturating_duration_since(created).saturating_add(after_end);
    at_least.min(record.running_until.saturating_duration_since(created).max(after_end))
}

/// Waits for the end of a call answered directly; the request's cancellation still counts.
async fn wait(
    done: &mut tokio::sync::oneshot::Receiver<Invocation>,
    request: &CancellationToken,
    token: &CancellationToken,
) -> Invocation {
    tokio::select! {
        invocation = &mut *done => return invocation.unwrap_or_else(|_| lost()),
        () = request.cancelled() => token.cancel(),
    }
    done.await.unwrap_or_else(|_| lost())
}

/// The time budget a call of `capability` with `options` runs its handler under (and, as long
/// again, its post-condition); the registry's default for a name it does not know.
fn handler_budget(registry: &Registry, capability: &str, options: &InvokeOptions) -> Duration {
    let inner = &registry.inner;
    match inner.read().capabilities.get(capability) {
        Some(def) => crate::pipeline::time_budget(inner, def, options),
        None => options.time_budget.unwrap_or(inner.config.default_time_budget),
    }
}

/// Records the end of task `id`. A store that does not answer is asked again, the waits doubling
/// from 100 ms to 5 s, while the lease last renewed at `renewed` holds (until it lapses no other
/// process ends the task as abandoned): given up at once, a known result would be read later as
/// an unknown outcome, once the lease lapsed. `finish` leaves a final record as it is, so an
/// attempt that landed unanswered makes the next one a no-op, and one made after another process
/// ended the task changes nothing.
async fn finish(
    store: &dyn TaskStore,
    clock: &dyn Clock,
    id: &str,
    status: TaskStatus,
    payload: Option<Value>,
    lease: (Timestamp, Duration),
) -> Result<bool, StoreError> {
    let (renewed, lease) = lease;
    let holds = lease.saturating_sub(clock.now().saturating_duration_since(renewed));
    let (mut wait, mut waited) = (Duration::from_millis(100), Duration::ZERO);
    loop {
        match store.finish(id, status, payload.clone(), None, clock.now()).await {
            Err(StoreError::Unavailable(e)) if waited + wait < holds => {
                tracing::warn!(target: "agent_surface::tasks", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot record the end of a task yet; trying again");
                tokio::time::sleep(wait).await;
                waited += wait;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// The answer when a call's task was lost (it panicked outside the pipeline's guard, which the
/// pipeline prevents): the outcome is unknown.
fn lost() -> Invocation {
    let result = InvokeResult::error(AgentSurfaceError::outcome_unknown_untracked().into_payload(), None);
    Invocation::new(result)
}

/// `t-` and 32 hex digits: 128 bits from the operating system's random source.
fn new_task_id() -> String {
    agent_surface_core::id::random_id("t-")
}
