//! Long-running capabilities as MCP tasks (the `io.modelcontextprotocol/tasks` extension of MCP
//! 2026-07-28).
//!
//! With [`crate::McpConfig::tasks`] set, the server advertises the extension. A call of a
//! capability declared long-running (`CapabilityBuilder::long_running`), from a modern client
//! whose request declares the extension, runs the pipeline as usual; **once the handler starts**,
//! the adapter records a working task in the [`TaskStore`] and only then answers
//! `resultType: "task"` with its id. Everything before the handler — unknown tool, invalid input,
//! a denial, a rate limit, questions, an approval round trip — is answered in the call itself,
//! as for any other capability, so a task is always a call that is really running.
//!
//! | request | answer |
//! |---|---|
//! | `tasks/get` | the task: `working`; `completed` with the tool result — a capability error is a completed task whose result has `isError: true`, never `failed`; `cancelled` |
//! | `tasks/cancel` | acknowledged; the running call's cancellation fires: a call that had not started its effect ends `cancelled`, a write interrupted after its handler started ends `completed` with `EXECUTION_FAILED {reason: outcome-unknown}` (the usual rule) |
//! | `tasks/update` | acknowledged; answers are ignored (a task never waits for input: questions are asked before it starts) |
//! | another principal's task, an unknown or expired id | JSON-RPC `-32602` |
//!
//! **Who may read a task.** A task created by an authenticated principal is read and cancelled
//! by that principal only; one created by an anonymous caller by whoever holds its id (128 random
//! bits), since an anonymous modern request has no key that lasts.
//!
//! **Where it runs.** The call runs in this process; its record is in the store, so any replica
//! sharing the store answers `tasks/get`, and a `tasks/cancel` taken by another replica is seen by
//! the running one within [`TaskConfig::poll_interval`]. If the store cannot create the record,
//! no task is named: the call is answered when it ends.
//!
//! **A task whose process died ends.** The running process holds its task by a lease
//! ([`TaskConfig::lease`]), renewed every third of it while the call runs. When the process dies
//! (or restarts on a durable store, or loses the store for longer than the lease) the lease
//! lapses, and the next `tasks/get` or `tasks/cancel` through any process sharing the store ends
//! the task, in one atomic step of the store ([`TaskStore::end_lapsed`]), as `completed` with
//! `EXECUTION_FAILED {reason: outcome-unknown}`: its handler started and nobody can say what it
//! did (the idempotency record, when the call carried a key, says the same to a retry). It is
//! never left `working` until it is forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Timestamp};
use agent_surface_policy::{Clock, Consumer, MemoryTaskStore, StoreError, TaskRecord, TaskStatus, TaskStore};
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest, Registry};
use rmcp::ErrorData;
use rmcp::model::{CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload};
use tokio_util::sync::CancellationToken;

use crate::codec;

/// How tasks are kept. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    /// Where task records live (shared by replicas, or [`MemoryTaskStore`]).
    pub store: Arc<dyn TaskStore>,
    /// How long a task is kept after it ends (`ttlMs`).
    pub ttl: Duration,
    /// How long a task that has not ended is kept at most (a bound for a record whose end was
    /// never recorded, e.g. after a crash); a running task never expires before it.
    pub running_ttl: Duration,
    /// The most tasks running in this process at once; past it, a call is answered when it ends
    /// (a bound on detached work, which no connection limits once a task is named).
    pub max_running: usize,
    /// How often clients are asked to poll (`pollIntervalMs`), and how often a running task
    /// checks the store for a cancellation taken by another replica.
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
/// one per server configuration (every connection and request shares it).
///
/// ```
/// use agent_surface_mcp::McpConfig;
/// use agent_surface_mcp::tasks::{TaskConfig, Tasks};
///
/// let config = McpConfig { tasks: Some(Tasks::new(TaskConfig::default())), ..Default::default() };
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    config: TaskConfig,
    /// The cancellation of each task running here.
    running: Mutex<HashMap<String, CancellationToken>>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// What running a call as a task came to.
pub(crate) enum Started {
    /// A task was created and named.
    Task(CreateTaskResult),
    /// The call ended before its handler started (or no task could be created): answer it.
    Ended(Invocation),
}

impl Tasks {
    /// A runtime with `config`.
    pub fn new(config: TaskConfig) -> Tasks {
        Tasks { inner: Arc::new(Inner { config, running: Mutex::new(HashMap::new()) }) }
    }

    /// The configuration.
    pub fn config(&self) -> &TaskConfig {
        &self.inner.config
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inner.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The owner recorded for `consumer`'s tasks: its principal key when authenticated.
    fn owner(consumer: &Consumer) -> Option<String> {
        consumer.identity().map(|_| consumer.key().to_string())
    }

    /// Runs `invoke`; answers a task once the handler starts, or the invocation if it ends first.
    /// `request` is the request's own cancellation, which counts until a task is named.
    pub(crate) async fn start(
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
        // task is named, and by `tasks/cancel` after.
        let token = CancellationToken::new();
        options = options.with_cancellation(token.clone());
        let owner = Self::owner(&options.consumer);
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
                tracing::warn!(target: "agent_surface::mcp", max = self.inner.config.max_running, "too many tasks running; answering the call when it ends");
            }
            return Started::Ended(self.wait(&mut done_rx, &request, &token).await);
        }
        let clock = registry.config().clock.clone();
        let now = clock.now();
        let config = &self.inner.config;
        let record =
            TaskRecord::working(new_task_id(), owner, now, config.ttl, config.running_ttl).with_lease(config.lease);
        if let Err(e) = self.inner.config.store.create(record.clone(), now).await {
            tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "cannot create a task; answering the call when it ends");
            return Started::Ended(self.wait(&mut done_rx, &request, &token).await);
        }
        self.running().insert(record.id.clone(), token.clone());
        let this = self.clone();
        let id = record.id.clone();
        tokio::spawn(async move { this.settle(id, done_rx, token, clock).await });
        Started::Task(CreateTaskResult::new(self.view(&record)))
    }

    /// Waits for the end of a call answered directly; the request's cancellation still counts.
    async fn wait(
        &self,
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

    /// Waits for the task's call to end and records its outcome; meanwhile, watches the store for
    /// a cancellation taken by another replica.
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
                            tracing::warn!(target: "agent_surface::mcp", task_id = %id, "task ended elsewhere while it ran here (its lease lapsed)");
                        }
                        Err(e) => {
                            tracing::warn!(target: "agent_surface::mcp", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot renew a task's lease");
                        }
                        _ => {}
                    }
                }
            }
        };
        self.running().remove(&id);
        let (status, payload) = if invocation.result.code() == Some(ErrorCode::Cancelled) {
            (TaskStatus::Cancelled, None)
        } else {
            (TaskStatus::Completed, serde_json::to_value(codec::encode_invocation(invocation)).ok())
        };
        let finished = match store.finish(&id, status, payload, None, clock.now()).await {
            // The result does not fit the store: it is withheld, as an output over the cap is.
            Err(StoreError::Full { .. }) => {
                tracing::warn!(target: "agent_surface::mcp", task_id = %id, "task result over the store's budget; withheld");
                let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
                let payload = serde_json::to_value(codec::encode(InvokeResult::error(withheld.into_payload(), None)));
                store.finish(&id, TaskStatus::Completed, payload.ok(), None, clock.now()).await
            }
            other => other,
        };
        if let Err(e) = finished {
            tracing::error!(target: "agent_surface::mcp", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot record the end of a task");
        }
    }

    /// The record of `id` as `consumer` may see it; `-32602` otherwise.
    async fn find(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<TaskRecord, ErrorData> {
        let unknown = || ErrorData::invalid_params(format!("Unknown task: {}", truncate(id)), None);
        let record = match self.inner.config.store.get(id, now).await {
            Ok(Some(record)) => record,
            Ok(None) => return Err(unknown()),
            Err(e) => {
                tracing::error!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "task store failed");
                return Err(ErrorData::internal_error("The task store is unavailable; try again later.", None));
            }
        };
        match &record.owner {
            Some(owner) if consumer.identity().is_none() || consumer.key() != owner => Err(unknown()),
            _ => Ok(record),
        }
    }

    /// The record of `id` as `consumer` may see it, ended first if it was abandoned (its lease
    /// lapsed: the process running it died).
    async fn find_live(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<TaskRecord, ErrorData> {
        let record = self.find(id, consumer, now).await?;
        if !record.is_abandoned(now) {
            return Ok(record);
        }
        let unknown = InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None);
        let payload = serde_json::to_value(codec::encode(unknown)).ok();
        match self.inner.config.store.end_lapsed(id, payload, None, now).await {
            Ok(Some(ended)) => {
                if ended.status.is_terminal() && ended.updated_at == now {
                    tracing::warn!(target: "agent_surface::mcp", task_id = %id, "task abandoned (its lease lapsed): ended with an unknown outcome");
                }
                Ok(ended)
            }
            Ok(None) => Err(ErrorData::invalid_params(format!("Unknown task: {}", truncate(id)), None)),
            Err(e) => {
                tracing::error!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "task store failed");
                Err(ErrorData::internal_error("The task store is unavailable; try again later.", None))
            }
        }
    }

    /// `tasks/get`.
    pub(crate) async fn get(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<GetTaskResult, ErrorData> {
        let record = self.find_live(id, consumer, now).await?;
        let payload = match record.status {
            TaskStatus::Completed => {
                let result = record.payload.as_ref().and_then(|p| p.as_object()).cloned().unwrap_or_default();
                TaskPayload::Completed { result }
            }
            TaskStatus::Failed => {
                let error = record.payload.as_ref().and_then(|p| p.as_object()).cloned().unwrap_or_default();
                TaskPayload::Failed { error }
            }
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            // A task never waits for input; one recorded so by another implementation of the
            // store reads as still working.
            _ => TaskPayload::Working,
        };
        Ok(GetTaskResult::new(DetailedTask::new(self.view(&record), payload)))
    }

    /// `tasks/cancel`: acknowledged for any task the caller may see, final or not.
    pub(crate) async fn cancel(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<(), ErrorData> {
        let record = self.find_live(id, consumer, now).await?;
        if record.status.is_terminal() {
            return Ok(());
        }
        if let Err(e) = self.inner.config.store.request_cancel(id, now).await {
            tracing::warn!(target: "agent_surface::mcp", task_id = %id, error = %agent_surface_policy::redacted(&e), "cannot record a task cancellation");
        }
        if let Some(token) = self.running().get(id) {
            token.cancel();
        }
        Ok(())
    }

    /// `tasks/update`: acknowledged for any task the caller may see.
    pub(crate) async fn update(&self, id: &str, consumer: &Consumer, now: Timestamp) -> Result<(), ErrorData> {
        self.find(id, consumer, now).await.map(drop)
    }

    fn view(&self, record: &TaskRecord) -> Task {
        let config = &self.inner.config;
        let status = match record.status {
            TaskStatus::Working => rmcp::model::TaskStatus::Working,
            TaskStatus::InputRequired => rmcp::model::TaskStatus::InputRequired,
            TaskStatus::Completed => rmcp::model::TaskStatus::Completed,
            TaskStatus::Failed => rmcp::model::TaskStatus::Failed,
            _ => rmcp::model::TaskStatus::Cancelled,
        };
        let ttl = record.expires_at.saturating_duration_since(record.created_at);
        let mut task =
            Task::new(record.id.clone(), status, record.created_at.to_rfc3339(), record.updated_at.to_rfc3339())
                .with_ttl_ms(millis(ttl).max(1))
                .with_poll_interval_ms(millis(config.poll_interval).max(1));
        if let Some(message) = &record.status_message {
            task = task.with_status_message(message.clone());
        }
        task
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// An id for a log line or an error message, cut to 64 characters.
fn truncate(id: &str) -> String {
    id.chars().take(64).collect()
}

/// The answer when a call's task was lost (it panicked outside the pipeline's guard, which the
/// pipeline prevents): the outcome is unknown.
fn lost() -> Invocation {
    let result =
        InvokeResult::error(agent_surface_core::AgentSurfaceError::outcome_unknown_untracked().into_payload(), None);
    Invocation::new(result)
}

/// `t-` and 32 hex digits: 128 bits from the operating system's random source.
fn new_task_id() -> String {
    agent_surface_core::id::random_id("t-")
}
