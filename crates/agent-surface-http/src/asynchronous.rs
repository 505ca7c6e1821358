//! Calls that outlast one plain answer: progress as Server-Sent Events, and long-running calls
//! answered `202 Accepted` with a task resource.
//!
//! **Progress (SSE).** `POST {prefix}/invoke` with `Accept: text/event-stream` (preferred to
//! `application/json`: a client that accepts both alike, as MCP clients do, gets JSON) runs the
//! call as usual. A call that ends before its handler starts with an error (invalid input, a denial, a
//! rate limit, …) is answered exactly as without the header: its status, `Retry-After` and
//! problem body. Otherwise the answer is `200 text/event-stream`: one `progress` event per
//! report the handler makes (`{"progress", "total"?, "message"?}`; reports that come faster than
//! the client reads are merged into the latest), then one `result` event, then the end of the
//! stream. The `result` event's data is the [envelope] of the answer the call would have
//! had: `{"status", "correlationId", "retryAfter"?, "body"}`. A comment line keeps an idle stream
//! alive every 15 s. A client that closes the stream cancels the call, as one that drops a plain
//! request does.
//!
//! **Tasks (`202 Accepted`).** With [`crate::HttpConfig::tasks`] set, a call of a long-running
//! capability whose request carries `Prefer: respond-async` (RFC 7240) runs as a task
//! (`agent_surface_registry::tasks`): once its handler starts, the binding answers `202` with
//! `Location: {prefix}/tasks/{id}`, `Preference-Applied: respond-async` and the task's view.
//! Anything that ends the call before its handler starts is answered in the call itself. The
//! preference is ignored (the call is answered when it ends) for another capability, without
//! tasks configured, and when the process runs its most tasks at once. `GET {prefix}/tasks/{id}`
//! answers the view — with `result`, the envelope, once completed; `DELETE` asks for the end of
//! a running task (`202`, the view as it was) or acknowledges a finished one (`200`). A task is
//! its principal's: another caller, like an unknown or expired id, gets the `404` protocol fault
//! `task-not-found`. The store is the one the MCP adapter uses when both are given the same
//! runtime, so a task started over either is read and cancelled over the other.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::InvokeResult;
use agent_surface_policy::task::{TaskRecord, TaskStatus};
use agent_surface_registry::tasks::{Started, TaskOutcome, Tasks, ttl};
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest, Progress, ProgressSink, Registry};
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::wire::{self, JSON};

/// The media type of an event stream.
pub const EVENT_STREAM: &str = "text/event-stream";

/// How often an idle event stream carries a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The longest task id looked up (longer ones are not ids this runtime makes).
const MAX_TASK_ID: usize = 128;

/// Whether the request prefers an event stream to JSON: `Accept` gives `text/event-stream` a
/// quality above zero and above that of `application/json` (its own range, else `application/*`,
/// else `*/*`; absent: zero). A client that accepts both alike (`application/json,
/// text/event-stream`, as MCP clients send) gets the plain JSON answer.
pub(crate) fn prefers_event_stream(headers: &HeaderMap) -> bool {
    // Most calls name no event stream at all: they are answered without parsing `Accept`.
    if !headers.get_all(header::ACCEPT).iter().any(|v| names_event_stream(v.as_bytes())) {
        return false;
    }
    // The quality of the first member naming each range, read in one pass over `Accept`.
    const RANGES: [&str; 4] = [EVENT_STREAM, "application/json", "application/*", "*/*"];
    let mut quality: [Option<f32>; 4] = [None; 4];
    for member in members(headers, header::ACCEPT) {
        let mut parts = member.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let Some(i) = RANGES.iter().position(|range| media.eq_ignore_ascii_case(range)) else { continue };
        if quality[i].is_none() {
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
            quality[i] = Some(q);
        }
    }
    // JSON's quality is that of its most specific range listed.
    let stream = quality[0].unwrap_or(0.0);
    stream > 0.0 && stream > quality[1..].iter().find_map(|q| *q).unwrap_or(0.0)
}

/// Whether an `Accept` field's value holds `text/event-stream` anywhere (any case): a field
/// without it cannot give an event stream a quality.
fn names_event_stream(value: &[u8]) -> bool {
    // Only a window that starts with a `t` is compared.
    value.windows(EVENT_STREAM.len()).any(|w| w[0] | 0x20 == b't' && w.eq_ignore_ascii_case(EVENT_STREAM.as_bytes()))
}

/// Whether the request prefers an asynchronous answer: a `Prefer` preference `respond-async`
/// (RFC 7240 §4.1, any case).
pub(crate) fn prefers_respond_async(headers: &HeaderMap) -> bool {
    members(headers, http::HeaderName::from_static("prefer")).any(|member| {
        let name = member.split([';', '=']).next().unwrap_or_default().trim();
        name.eq_ignore_ascii_case("respond-async")
    })
}

/// The comma-separated members of every field `name`, trimmed (fields that are not visible
/// ASCII are skipped).
fn members(headers: &HeaderMap, name: http::HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|m| !m.is_empty())
}

/// The answer a call would have had, as one JSON object: `status` (the HTTP status), the call's
/// `correlationId`, `retryAfter` (seconds, when the plain answer carries `Retry-After`), and
/// `body` (the plain answer's body: the `InvokeResult` of a success, the problem of an error).
///
/// ```
/// use agent_surface_core::InvokeResult;
/// use agent_surface_http::asynchronous::envelope;
///
/// let e = envelope(&InvokeResult::ok(serde_json::json!({"n": 1}), None), "c-1");
/// assert_eq!(e, serde_json::json!({"status": 200, "correlationId": "c-1", "body": {"status": "ok", "output": {"n": 1}}}));
/// ```
pub fn envelope(result: &InvokeResult, correlation_id: &str) -> Value {
    let encoded = wire::encode(result);
    let mut e = Map::new();
    e.insert("status".into(), Value::from(encoded.status.as_u16()));
    e.insert("correlationId".into(), Value::from(correlation_id));
    if let Some(seconds) = encoded.retry_after {
        e.insert("retryAfter".into(), Value::from(seconds));
    }
    // The body is JSON by construction.
    e.insert("body".into(), serde_json::from_str(&encoded.body).unwrap_or(Value::Null));
    Value::Object(e)
}

/// One event of the stream: `event: {name}` and the JSON on one `data` line.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn progress_data(p: &Progress) -> Value {
    let mut data = Map::new();
    data.insert("progress".into(), json!(p.done));
    if let Some(total) = p.total {
        data.insert("total".into(), json!(total));
    }
    if let Some(message) = &p.message {
        data.insert("message".into(), Value::from(message.as_str()));
    }
    Value::Object(data)
}

/// Keeps the latest report not sent yet (a handler that reports faster than the client reads
/// never queues more than one).
struct Latest {
    report: Mutex<Option<Progress>>,
    ready: tokio::sync::Notify,
}

impl ProgressSink for Latest {
    fn report(&self, progress: Progress) {
        *self.report.lock().unwrap_or_else(PoisonError::into_inner) = Some(progress);
        self.ready.notify_one();
    }
}

impl Latest {
    fn take(&self) -> Option<Progress> {
        self.report.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The answer of a call whose invoke task ended abnormally (a panic outside the pipeline's
/// guard), its cause on the operator channel: `EXECUTION_FAILED {reason: outcome-unknown}` — the
/// handler may have run. With `invocation_id` the record's answer (a repeat under the id only
/// replays what the record says); without, the untracked form, which says that a repeat would run
/// the action again.
pub(crate) fn lost(invocation_id: Option<String>, cause: &tokio::task::JoinError) -> InvokeResult {
    tracing::error!(target: "agent_surface::http", cause = %agent_surface_policy::redacted(cause), "the invoke task ended abnormally");
    let error = match invocation_id {
        Some(_) => agent_surface_core::AgentSurfaceError::outcome_unknown(),
        None => agent_surface_core::AgentSurfaceError::outcome_unknown_untracked(),
    };
    InvokeResult::error(error.into_payload(), invocation_id)
}

/// Runs the call for a client that accepts an event stream; `plain` renders a call answered
/// without a stream (or the end of a call task that failed). `guard` cancels the call when dropped: it moves into the stream,
/// so a client that closes the stream cancels the call.
pub(crate) async fn stream(
    registry: Registry,
    request: InvokeRequest,
    options: InvokeOptions,
    guard: DropGuard,
    sends: agent_surface_core::message::Sends,
    plain: impl FnOnce(Result<Invocation, tokio::task::JoinError>) -> Response,
) -> Response {
    let latest = Arc::new(Latest { report: Mutex::new(None), ready: tokio::sync::Notify::new() });
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Mutex::new(Some(started_tx));
    let options = options.with_progress(latest.clone()).with_execute_hook(Arc::new(move || {
        if let Some(tx) = started_tx.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = tx.send(());
        }
    }));
    let invocation_id = request.invocation_id.clone();
    let mut call = tokio::spawn(async move { registry.invoke_detailed(request, options).await });
    let mut started_rx = started_rx;
    // Until the handler starts, the call may still be answered plainly.
    let early = tokio::select! {
        biased;
        done = &mut call => Some(done),
        // No start signal: the call ended without reaching its handler.
        started = &mut started_rx => match started {
            Ok(()) => None,
            Err(_) => Some((&mut call).await),
        },
    };
    if let Some(done) = early {
        // A call whose handler ran is answered as a stream however soon it ended (its last
        // report, then its result, an error included): which shape a client gets does not
        // depend on how the threads raced. One that never reached its handler (a refusal, a
        // replay) is answered plainly, a success as its `result` event.
        let ran = started_rx.try_recv().is_ok();
        return match done {
            Ok(invocation) if ran || invocation.result.is_ok() => {
                let mut frames = Vec::new();
                if let Some(p) = latest.take().filter(|_| ran) {
                    frames.extend_from_slice(&event("progress", &progress_data(&p)));
                }
                frames.extend_from_slice(&event("result", &result_data(&invocation, sends)));
                sse_response(Body::from(frames))
            }
            other => plain(other),
        };
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _guard = guard;
        let ended = loop {
            tokio::select! {
                biased;
                done = &mut call => break done,
                // The client closed the stream: the guard cancels the call now, not at the next
                // report or keep-alive that fails to send.
                () = tx.closed() => return,
                () = latest.ready.notified() => {
                    if let Some(p) = latest.take()
                        && tx.send(event("progress", &progress_data(&p))).await.is_err()
                    {
                        return; // The client went away: the guard cancels the call.
                    }
                }
                () = tokio::time::sleep(KEEP_ALIVE) => {
                    if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                        return;
                    }
                }
            }
        };
        // The last report goes before the result; none after it.
        if let Some(p) = latest.take() {
            let _ = tx.send(event("progress", &progress_data(&p))).await;
        }
        let data = match ended {
            Ok(invocation) => result_data(&invocation, sends),
            Err(e) => {
                envelope(&lost(invocation_id, &e), &agent_surface_registry::CorrelationId::generate().to_string())
            }
        };
        let _ = tx.send(event("result", &data)).await;
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (Ok::<_, std::convert::Infallible>(frame), rx))
    });
    sse_response(Body::from_stream(frames))
}

fn result_data(invocation: &Invocation, sends: agent_surface_core::message::Sends) -> Value {
    envelope(&invocation.result.worded_for(sends), &invocation.correlation_id.to_string())
}

fn sse_response(body: Body) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, EVENT_STREAM), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// Runs the call as a task: `202` once its handler starts, else `plain` answers the invocation.
/// `base` is the path the binding's routes are reached under (the `Location` starts with it).
pub(crate) async fn start_task(
    tasks: &Tasks,
    registry: &Registry,
    base: &str,
    request: InvokeRequest,
    options: InvokeOptions,
    cancel: CancellationToken,
    plain: impl FnOnce(Result<Invocation, tokio::task::JoinError>) -> Response,
) -> Response {
    match tasks.start(registry, request, options, cancel).await {
        Started::Ended(invocation) => plain(Ok(invocation)),
        Started::Task(record) => {
            let mut response = view_response(StatusCode::ACCEPTED, tasks, &record, record.created_at, None);
            let headers = response.headers_mut();
            if let Ok(location) = HeaderValue::from_str(&format!("{base}/tasks/{}", record.id)) {
                headers.insert(header::LOCATION, location);
            }
            headers.insert("preference-applied", HeaderValue::from_static("respond-async"));
            response
        }
    }
}

/// A task as the binding shows it: `taskId`, `status` (`working`, `completed`, `cancelled`, or
/// `failed`/`input_required` for a record another implementation wrote), `createdAt`,
/// `updatedAt`, `ttlMs`, `pollIntervalMs`, `cancelRequested`, and `result` (the envelope) once
/// completed.
fn view(tasks: &Tasks, record: &TaskRecord, now: agent_surface_core::Timestamp, result: Option<Value>) -> Value {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
    let mut v = json!({
        "taskId": record.id,
        "status": record.status.as_str(),
        "createdAt": record.created_at.to_rfc3339(),
        "updatedAt": record.updated_at.to_rfc3339(),
        "ttlMs": millis(ttl(record, now)),
        "pollIntervalMs": millis(tasks.config().poll_interval),
        "cancelRequested": record.cancel_requested,
    });
    if let Some(message) = &record.status_message {
        v["statusMessage"] = Value::from(message.as_str());
    }
    if let Some(result) = result {
        v["result"] = result;
    }
    v
}

fn view_response(
    status: StatusCode,
    tasks: &Tasks,
    record: &TaskRecord,
    now: agent_surface_core::Timestamp,
    result: Option<Value>,
) -> Response {
    let body = view(tasks, record, now, result).to_string();
    (status, [(header::CONTENT_TYPE, JSON), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// What a task request came to, before it is rendered.
pub(crate) enum TaskAnswer {
    /// The view, with this status.
    View(Response),
    /// The `task-not-found` fault.
    NotFound,
    /// The store failed, or a record holds what this version cannot read: the `internal` fault
    /// (logged with this text).
    Internal(&'static str),
}

/// `GET {prefix}/tasks/{id}`.
pub(crate) async fn get_task(
    tasks: &Tasks,
    id: &str,
    consumer: &agent_surface_policy::Consumer,
    now: agent_surface_core::Timestamp,
    sends: agent_surface_core::message::Sends,
) -> TaskAnswer {
    if id.len() > MAX_TASK_ID {
        return TaskAnswer::NotFound;
    }
    let record = match tasks.find(id, consumer, now).await {
        Ok(Some(record)) => record,
        Ok(None) => return TaskAnswer::NotFound,
        Err(e) => {
            tracing::error!(target: "agent_surface::http", error = %agent_surface_policy::redacted(&e), "task store failed");
            return TaskAnswer::Internal("the task store failed");
        }
    };
    let result = match record.status {
        TaskStatus::Completed => match TaskOutcome::of_record(&record) {
            Some(outcome) => Some(envelope(&outcome.result.worded_for(sends), &outcome.correlation_id)),
            None => return TaskAnswer::Internal("a completed task holds a payload of another shape"),
        },
        _ => None,
    };
    TaskAnswer::View(view_response(StatusCode::OK, tasks, &record, now, result))
}

/// `DELETE {prefix}/tasks/{id}`.
pub(crate) async fn cancel_task(
    tasks: &Tasks,
    id: &str,
    consumer: &agent_surface_policy::Consumer,
    now: agent_surface_core::Timestamp,
) -> TaskAnswer {
    if id.len() > MAX_TASK_ID {
        return TaskAnswer::NotFound;
    }
    match tasks.cancel(id, consumer, now).await {
        Ok(Some(mut record)) => {
            let status = if record.status.is_terminal() {
                StatusCode::OK
            } else {
                record.cancel_requested = true;
                StatusCode::ACCEPTED
            };
            TaskAnswer::View(view_response(status, tasks, &record, now, None))
        }
        Ok(None) => TaskAnswer::NotFound,
        Err(e) => {
            tracing::error!(target: "agent_surface::http", error = %agent_surface_policy::redacted(&e), "task store failed");
            TaskAnswer::Internal("the task store failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn an_event_stream_is_chosen_only_when_preferred_to_json() {
        for yes in [
            &["text/event-stream"][..],
            &["application/json;q=0.5, TEXT/Event-Stream"],
            &["a/b", "text/event-stream"],
            &["text/event-stream, */*;q=0.1"],
            &["text/event-stream;q=0.9, application/*;q=0.2, application/json;q=0.1"],
            &["*/*, application/json;q=0.1, text/event-stream;q=0.5"],
        ] {
            assert!(prefers_event_stream(&headers("accept", yes)), "{yes:?}");
        }
        for no in [
            &[][..],
            &["application/json"],
            &["application/json, text/event-stream"],
            &["text/event-stream", "application/json"],
            &["text/event-stream, */*"],
            &["application/json, text/event-stream;q=0.5"],
            &["text/event-stream;q=0"],
            &["text/*"],
            &["text/event-streams"],
            // The first member naming a range gives its quality.
            &["text/event-stream;q=0.5, text/event-stream, application/json;q=0.8"],
        ] {
            assert!(!prefers_event_stream(&headers("accept", no)), "{no:?}");
        }
    }

    #[test]
    fn respond_async_is_one_preference_among_others() {
        for yes in [&["respond-async"][..], &["wait=10, Respond-Async"], &["handling=lenient", "respond-async; x=1"]] {
            assert!(prefers_respond_async(&headers("prefer", yes)), "{yes:?}");
        }
        for no in [&[][..], &["wait=10"], &["respond-asynchronously"], &["return=minimal"]] {
            assert!(!prefers_respond_async(&headers("prefer", no)), "{no:?}");
        }
    }
}
