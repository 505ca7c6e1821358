//! Long-running capabilities as MCP tasks (the `io.modelcontextprotocol/tasks` extension of MCP
//! 2026-07-28).
//!
//! With [`crate::McpConfig::tasks`] set, the server advertises the extension. A call of a
//! capability declared long-running (`CapabilityBuilder::long_running`), from a modern client
//! whose request declares the extension, runs the pipeline as usual; **once the handler starts**,
//! the adapter records a working task in the [`TaskStore`](agent_surface_policy::TaskStore) and only then answers
//! `resultType: "task"` with its id. Everything before the handler — unknown tool, invalid input,
//! a denial, a rate limit, questions, an approval round trip — is answered in the call itself,
//! as for any other capability, so a task is always a call that is really running.
//!
//! | request | answer |
//! |---|---|
//! | `tasks/get` | the task: `working`; `completed` with the tool result, encoded as the call's direct answer would be (with [`crate::McpConfig::tool_failure`], an error's tool-failure object as of the task's end) — a capability error is a completed task whose result has `isError: true`, never `failed`; `cancelled` |
//! | `tasks/cancel` | acknowledged (a store failure when the cancellation can be neither recorded nor fired in this process: `-32603`, nothing would end the call); the running call's cancellation fires: a call that had not started its effect ends `cancelled`, a write interrupted after its handler started ends `completed` with `EXECUTION_FAILED {reason: outcome-unknown}` (the usual rule) |
//! | `tasks/update` | acknowledged; answers are ignored (a task never waits for input: questions are asked before it starts) |
//! | another principal's task, an unknown or expired id | JSON-RPC `-32602` |
//!
//! **Who may read a task.** A task created by an authenticated principal is read and cancelled
//! by that principal only; one created by an anonymous caller by whoever holds its id (128 random
//! bits), since an anonymous modern request has no key that lasts.
//!
//! **One runtime for every adapter.** The runtime is `agent_surface_registry::tasks` ([`Tasks`],
//! [`TaskConfig`], re-exported here); a record holds the call's outcome in a form no transport
//! owns, rendered as a `CallToolResult` when it is read. A task started over the HTTP binding
//! (`202 Accepted`) is read here, and one started here is read over HTTP, when both use the same
//! store.
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
//! the task, in one atomic step of the store (`TaskStore::end_lapsed`), as `completed` with
//! `EXECUTION_FAILED {reason: outcome-unknown}`: its handler started and nobody can say what it
//! did (the idempotency record, when the call carried a key, says the same to a retry). It is
//! never left `working` until it is forgotten. The runtime does this for every adapter
//! ([`Tasks::find`]).

use agent_surface_core::Timestamp;
use agent_surface_policy::{
    Consumer, StoreError,
    task::{TaskRecord, TaskStatus},
};
use agent_surface_registry::tasks::TaskOutcome;
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest, Registry};
use rmcp::ErrorData;
use rmcp::model::{CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload};
use serde_json::Value;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::codec;
use crate::fault::ProtocolFault;

pub use agent_surface_registry::tasks::{TaskConfig, Tasks};

/// What running a call as a task came to.
pub(crate) enum Started {
    /// A task was created and named.
    Task(CreateTaskResult),
    /// The call ended before its handler started (or no task could be created): answer it.
    Ended(Invocation),
}

/// Runs `invoke`; answers a task once the handler starts, or the invocation if it ends first.
/// `request` is the request's own cancellation, which counts until a task is named.
pub(crate) async fn start(
    tasks: &Tasks,
    registry: &Registry,
    invoke: InvokeRequest,
    options: InvokeOptions,
    request: CancellationToken,
) -> Started {
    match tasks.start(registry, invoke, options, request).await {
        agent_surface_registry::tasks::Started::Task(record) => {
            Started::Task(CreateTaskResult::new(view(tasks, &record, record.created_at)))
        }
        agent_surface_registry::tasks::Started::Ended(invocation) => Started::Ended(invocation),
    }
}

/// The record of `id` as `consumer` may see it; `-32602` otherwise.
async fn find(tasks: &Tasks, id: &str, consumer: &Consumer, now: Timestamp) -> Result<TaskRecord, ErrorData> {
    match tasks.find(id, consumer, now).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(unknown(id)),
        Err(e) => Err(store_failed(&e)),
    }
}

fn unknown(id: &str) -> ErrorData {
    ProtocolFault::UnknownTask(truncate(id)).error()
}

fn store_failed(e: &StoreError) -> ErrorData {
    tracing::error!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(e), "task store failed");
    ProtocolFault::TaskStoreFailed.error()
}

/// A finished task's tool result: the recorded outcome as the call would have been answered
/// directly ([`codec::encode_outcome`]: the correlation id in `_meta`, and with `tool_failure` an
/// error's tool-failure object, reported as of `ended_at`, when the task ended); a payload of
/// another shape (written by an older version of this adapter, which stored the
/// `CallToolResult` itself) as it is.
fn completed(payload: Option<&Value>, tool_failure: bool, ended_at: Timestamp) -> serde_json::Map<String, Value> {
    let Some(payload) = payload else { return serde_json::Map::new() };
    let Some(outcome) = TaskOutcome::from_payload(payload) else {
        return payload.as_object().cloned().unwrap_or_default();
    };
    let result = codec::encode_outcome(outcome.result, outcome.correlation_id, tool_failure.then_some(ended_at));
    match serde_json::to_value(result) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// `tasks/get`; `tool_failure` is [`crate::McpConfig::tool_failure`].
pub(crate) async fn get(
    tasks: &Tasks,
    id: &str,
    consumer: &Consumer,
    now: Timestamp,
    tool_failure: bool,
) -> Result<GetTaskResult, ErrorData> {
    let record = find(tasks, id, consumer, now).await?;
    let payload = match record.status {
        TaskStatus::Completed => {
            TaskPayload::Completed { result: completed(record.payload.as_ref(), tool_failure, record.updated_at) }
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
    Ok(GetTaskResult::new(DetailedTask::new(view(tasks, &record, now), payload)))
}

/// `tasks/cancel`: acknowledged for any task the caller may see, final or not.
pub(crate) async fn cancel(tasks: &Tasks, id: &str, consumer: &Consumer, now: Timestamp) -> Result<(), ErrorData> {
    match tasks.cancel(id, consumer, now).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(unknown(id)),
        Err(e) => Err(store_failed(&e)),
    }
}

/// `tasks/update`: acknowledged for any task the caller may see.
pub(crate) async fn update(tasks: &Tasks, id: &str, consumer: &Consumer, now: Timestamp) -> Result<(), ErrorData> {
    find(tasks, id, consumer, now).await.map(drop)
}

fn view(tasks: &Tasks, record: &TaskRecord, now: Timestamp) -> Task {
    let config = tasks.config();
    let status = match record.status {
        TaskStatus::Working => rmcp::model::TaskStatus::Working,
        TaskStatus::InputRequired => rmcp::model::TaskStatus::InputRequired,
        TaskStatus::Completed => rmcp::model::TaskStatus::Completed,
        TaskStatus::Failed => rmcp::model::TaskStatus::Failed,
        _ => rmcp::model::TaskStatus::Cancelled,
    };
    let ttl = agent_surface_registry::tasks::ttl(record, now);
    let mut task = Task::new(record.id.clone(), status, record.created_at.to_rfc3339(), record.updated_at.to_rfc3339())
        .with_ttl_ms(millis(ttl).max(1))
        .with_poll_interval_ms(millis(config.poll_interval).max(1));
    if let Some(message) = &record.status_message {
        task = task.with_status_message(message.clone());
    }
    task
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// An id for a log line or an error message, cut to 64 characters.
fn truncate(id: &str) -> String {
    id.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use agent_surface_core::details::RateLimitReason;
    use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
    use agent_surface_registry::tasks::TaskOutcome;
    use serde_json::{Value, json};

    /// A task's error result carries the tool failure when the adapter is configured for it, as
    /// of the time the task ended: reading it later gives the same bytes.
    #[test]
    fn a_task_error_carries_its_tool_failure_as_of_its_end() {
        let mut payload =
            AgentSurfaceError::rate_limited(RateLimitReason::Rate, std::time::Duration::from_secs(5)).into_payload();
        payload.set_correlation_id(Some("c-1"));
        let outcome = TaskOutcome { result: InvokeResult::error(payload, None), correlation_id: "c-1".into() };
        let stored = outcome.to_payload();
        let ended = Timestamp::from_unix_millis(1_000_000);

        let with = Value::Object(super::completed(Some(&stored), true, ended));
        let failure = &with["_meta"]["agent-surface/toolFailure"];
        assert_eq!(failure["retryNotBefore"], json!(1_005_000), "{with}");
        assert_eq!(failure["correlationId"], "c-1");
        assert_eq!(with["_meta"]["agent-surface/correlationId"], "c-1");
        assert_eq!(Value::Object(super::completed(Some(&stored), true, ended)), with, "the same on every read");

        let without = Value::Object(super::completed(Some(&stored), false, ended));
        assert!(without["_meta"].get("agent-surface/toolFailure").is_none(), "{without}");
    }
}
