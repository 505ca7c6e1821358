//! The stdio transport: newline-delimited JSON-RPC over a byte stream, with a JSON-RPC error for
//! every frame the server cannot use.
//!
//! `rmcp`'s own stdio framing ignores unparsable lines and drops oversized ones silently. This
//! transport answers them instead, as JSON-RPC 2.0 asks, and keeps serving:
//!
//! | frame | answer |
//! |---|---|
//! | not JSON (or not UTF-8) | `-32700` parse error, no `id` (below) |
//! | longer than `max_message_bytes` | `-32600` invalid request, no `id`, `data: {"maxMessageBytes": N}`; the line is skipped without being buffered |
//! | more JSON values than one per 16 bytes of `max_message_bytes` (`agent_surface_core::json::too_many_values`) | `-32600` invalid request, no `id`, `data: {"maxMessageValues": N}`; not parsed |
//! | a member name repeated in one object | `-32600` invalid request, no `id`; not parsed (`serde_json` would keep the last one) |
//! | a method name over 128 bytes | `-32601` method not found, no `id`, the name not echoed |
//! | JSON, but not a JSON-RPC 2.0 message (batch array, missing `jsonrpc`, bad `id`, …) | `-32600` invalid request, with the request's `id` when it has a usable one |
//! | a request whose `params` do not fit its method | `-32602` invalid params, with its `id` |
//! | a request under the id of one not answered yet on this connection (a cancelled one included, until its handler is over) | `-32600` invalid request, with its `id`; not run, and the first keeps its answer |
//! | a notification that does not parse | nothing (JSON-RPC never answers a notification) |
//! | a request for an unknown method | `-32601` method not found (from `rmcp`) |
//!
//! An answer to a frame whose request id cannot be read carries no `id` member. JSON-RPC 2.0 writes
//! `"id": null` there, but MCP's schema types a response's `id` as a string or an integer and lets
//! an error whose request id could not be read leave it out; clients that check messages against
//! that schema refuse a `null` id.
//!
//! **Cancellation keeps the id.** `rmcp` routes a handler's answer by its request id, and forgets a
//! request once `notifications/cancelled` names it, while its handler may still be running: a new
//! request under the same id would then be given the cancelled one's answer, and lose its own. So
//! [`crate::serve_io`] gives each handler a cancellation token that this transport fires, and a
//! `notifications/cancelled` for a request in progress stops here instead of reaching `rmcp` (nor
//! the service's `on_cancelled`): the handler sees its `RequestContext::ct` fire, the id stays in
//! progress until the handler is over, and the cancelled request's answer is not sent (MCP asks
//! for none). A [`LineTransport`] served some other way passes the notification on and frees the
//! id at once, as before.
//!
//! Reads are bounded and cancel-safe (the service loop polls `receive` inside `select!`): a
//! partial line stays buffered across cancelled polls, and an error answer that is being written
//! is resumed, never duplicated or torn.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, JsonRpcRequest,
    NumberOrString, ProtocolVersion, RequestId, ServerConfig, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{NotificationContext, RequestContext, RxJsonRpcMessage, Service, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::fault::ProtocolFault;

/// A server transport over any byte stream pair: [`crate::serve_stdio`] runs it over the
/// process's standard streams; tests run it over in-memory pipes.
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max_line: usize,
    /// Set while the tail of an oversized line is being skipped.
    discarding: bool,
    write: Arc<Mutex<Option<W>>>,
    /// An error answer being written; resumed by the next `receive` if a poll was cancelled.
    pending: Option<BoxFuture<'static, std::io::Result<()>>>,
    /// The requests handed to the service and not answered yet: a request reusing one's id is
    /// refused here, since `rmcp` would let it take the first one's place (its answer and its
    /// cancellation would be lost).
    requests: Arc<Requests>,
    /// Whether the handlers take their cancellation from [`Requests`] ([`Cancellable`]): then a
    /// cancellation is handled here and never reaches `rmcp`.
    cancels_handlers: bool,
    /// The ids of the server's own requests sent and not answered yet (`elicitation/create`, say):
    /// a malformed response fails the one it names ([`malformed_answer`]), and no other.
    asked: Arc<std::sync::Mutex<Asked>>,
}

/// The ids of the server's requests awaiting their answers, oldest first; at most
/// [`Asked::MAX`] (a request never answered, whose waiter gave up, leaves its id until then).
#[derive(Default)]
struct Asked(std::collections::VecDeque<RequestId>);

impl Asked {
    const MAX: usize = 1_024;

    fn sent(&mut self, id: RequestId) {
        if self.0.len() == Self::MAX {
            self.0.pop_front();
        }
        self.0.push_back(id);
    }

    /// Whether `id` names a request awaiting its answer; it no longer does after this.
    fn answered(&mut self, id: &RequestId) -> bool {
        let Some(at) = self.0.iter().position(|a| a == id) else { return false };
        self.0.remove(at);
        true
    }
}

/// The requests of one connection in progress, by id, shared by the transport (which holds an id
/// from the request's arrival until its answer goes out) and [`Cancellable`] (which gives each
/// handler the token a cancellation fires).
#[derive(Default)]
pub(crate) struct Requests {
    held: std::sync::Mutex<HashMap<RequestId, Held>>,
}

/// One request in progress.
#[derive(Default)]
struct Held {
    /// The client cancelled it: its answer is not sent.
    cancelled: bool,
    /// Its handler's cancellation, once the handler started.
    token: Option<CancellationToken>,
}

impl Requests {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `id` for a request that arrived; `false` when a request under it is in progress.
    fn hold(&self, id: &RequestId) -> bool {
        match self.lock().entry(id.clone()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(Held::default());
                true
            }
        }
    }

    /// The client cancelled `id`: its handler's token fires (now, or when it starts). `false`
    /// when no request under `id` is in progress.
    fn cancel(&self, id: &RequestId) -> bool {
        let mut held = self.lock();
        let Some(request) = held.get_mut(id) else { return false };
        request.cancelled = true;
        if let Some(token) = &request.token {
            token.cancel();
        }
        true
    }

    /// The answer to `id` is going out: frees the id; `true` when the request was cancelled.
    fn answered(&self, id: &RequestId) -> bool {
        self.lock().remove(id).is_some_and(|request| request.cancelled)
    }

    /// Frees `id` without an answer.
    fn forget(&self, id: &RequestId) {
        self.lock().remove(id);
    }

    /// The handler of `id` starts, cancelled through `token`; fired at once if the client has
    /// cancelled the request already.
    fn started(&self, id: &RequestId, token: &CancellationToken) {
        if let Some(request) = self.lock().get_mut(id) {
            if request.cancelled {
                token.cancel();
            }
            request.token = Some(token.clone());
        }
    }
}

/// A service whose handlers are cancelled by the [`LineTransport`] it is served over (see the
/// module documentation): the transport fires each request's handler token (its
/// `RequestContext::ct`, which `rmcp` makes per request) on `notifications/cancelled`.
pub(crate) struct Cancellable<S> {
    inner: S,
    requests: Arc<Requests>,
}

impl<S> Cancellable<S> {
    /// `inner`, cancelled through `transport`, which from now on handles cancellations itself.
    pub(crate) fn new<R, W>(inner: S, transport: &mut LineTransport<R, W>) -> Cancellable<S> {
        transport.cancels_handlers = true;
        Cancellable { inner, requests: transport.requests.clone() }
    }
}

impl<S: Service<RoleServer>> Service<RoleServer> for Cancellable<S> {
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, ErrorData>> + Send + '_ {
        // The handler's own token: `rmcp` makes it for this request alone (a child of the
        // request's token in its pool), so firing it stops this handler and nothing of `rmcp`'s.
        self.requests.started(&context.id, &context.ct);
        self.inner.handle_request(request, context)
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.inner.handle_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

impl<R, W> std::fmt::Debug for LineTransport<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport").field("max_line", &self.max_line).finish_non_exhaustive()
    }
}

enum Step {
    Line,
    More,
    Oversized,
    EndDiscard,
}

enum ReadLine {
    Line,
    Oversized,
    Eof,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading requests from `read` and writing answers to `write`; lines longer
    /// than `max_message_bytes` are refused.
    pub fn new(read: R, write: W, max_message_bytes: usize) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line: max_message_bytes.max(1),
            discarding: false,
            write: Arc::new(Mutex::new(Some(write))),
            pending: None,
            requests: Arc::default(),
            cancels_handlers: false,
            asked: Arc::default(),
        }
    }

    /// Reads one `\n`-terminated line into `self.line`, never buffering more than `max_line`
    /// bytes; cancel-safe (only synchronous work between `fill_buf` and `consume`).
    async fn read_line(&mut self) -> std::io::Result<ReadLine> {
        loop {
            let (consumed, step) = {
                let available = self.read.fill_buf().await?;
                if available.is_empty() {
                    return Ok(ReadLine::Eof);
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    (take, if newline.is_some() { Step::EndDiscard } else { Step::More })
                } else if self.line.len() + take > self.max_line + 1 {
                    // `+ 1`: the newline itself does not count against the limit.
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Step::Oversized)
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, if newline.is_some() { Step::Line } else { Step::More })
                }
            };
            self.read.consume(consumed);
            match step {
                Step::Line => return Ok(ReadLine::Line),
                Step::More => {}
                Step::EndDiscard => self.discarding = false,
                Step::Oversized => return Ok(ReadLine::Oversized),
            }
        }
    }

    /// Whether `id` named one of the server's requests awaiting its answer, which it no longer
    /// does: only such a request may be failed by a malformed answer, and never before the
    /// handshake, when the server has asked nothing (`rmcp` would end the connection on anything
    /// but `initialize`).
    fn take_asked(&self, id: &RequestId) -> bool {
        self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).answered(id)
    }

    fn answer(&mut self, fault: &ProtocolFault, id: Option<RequestId>) {
        let message: ServerJsonRpcMessage = ServerJsonRpcMessage::error(fault.error(), id);
        self.pending = Some(Box::pin(write_message(self.write.clone(), message)));
    }
}

fn frame(message: &impl serde::Serialize) -> std::io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

async fn write_message<W: AsyncWrite + Send + Unpin>(
    write: Arc<Mutex<Option<W>>>,
    message: ServerJsonRpcMessage,
) -> std::io::Result<()> {
    let bytes = frame(&message)?;
    let mut guard = write.lock().await;
    let Some(w) = guard.as_mut() else {
        return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "transport closed"));
    };
    w.write_all(&bytes).await?;
    w.flush().await
}

/// Parses a screened message as `rmcp` would (`serde_json::from_slice::<ClientJsonRpcMessage>`),
/// with the same result, faster for a `tools/call` request.
///
/// `rmcp` reads a client message through two untagged enums: the message kinds, and the client
/// request types, tried in order until one accepts the method — `tools/call` is the fourteenth,
/// so every call first builds (and drops) thirteen errors. A message the screen found to have
/// the shape of a `tools/call` request is parsed as one directly; that is the variant the untagged
/// parse would end in, since no earlier request type accepts the method `tools/call` and only
/// `CustomRequest`, the last one, accepts any. If it does not parse as one (its params do not fit),
/// the general parse decides, so the answer is the same as `rmcp`'s.
fn parse(bytes: &[u8], screened: &crate::frame::Screened) -> serde_json::Result<ClientJsonRpcMessage> {
    if screened.tools_call
        && let Ok(call) = serde_json::from_slice::<JsonRpcRequest<CallToolRequest>>(bytes)
    {
        let JsonRpcRequest { jsonrpc, id, request } = call;
        return Ok(JsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc,
            id,
            request: ClientRequest::CallToolRequest(request),
        }));
    }
    serde_json::from_slice::<ClientJsonRpcMessage>(bytes)
}

/// The id of a request that failed to parse, when it has a usable one.
fn request_id(value: &Value) -> Option<RequestId> {
    match value.get("id")? {
        Value::String(s) => Some(NumberOrString::String(Arc::from(s.as_str()))),
        Value::Number(n) => n.as_i64().map(NumberOrString::Number),
        _ => None,
    }
}

/// What `rmcp` is handed for a malformed response to the server's request `id`: an error under
/// that id, so that the request (an `elicitation/create` a call waits on, say) fails at once
/// instead of waiting out its timeout for an answer that came and could not be read. Nothing is
/// sent to the client (the id is the server's: an error under it would read, to a client with a
/// request of that id pending, as that request's answer).
fn malformed_answer(id: RequestId) -> RxJsonRpcMessage<RoleServer> {
    tracing::debug!(target: "agent_surface::mcp", ?id, "a malformed response fails the request it answers");
    rmcp::model::JsonRpcMessage::error(ProtocolFault::UnreadableResponse.error(), Some(id))
}

/// How to answer a line that is JSON but not a message the server can take.
fn classify(value: &Value) -> Option<(ProtocolFault, Option<RequestId>)> {
    let Some(obj) = value.as_object() else {
        return Some((ProtocolFault::NotAnObject, None));
    };
    let envelope_ok = obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let method = obj.get("method").and_then(Value::as_str);
    let id = request_id(value);
    match (method, obj.contains_key("id")) {
        // A notification, however malformed, is never answered.
        (Some(_), false) if envelope_ok => None,
        // Nor is a response (to one of the server's requests): its id is the server's, and an
        // error under it would read as the answer to a client's request of that id. (One with a
        // usable id fails that request instead: [`malformed_answer`].)
        (None, _) if obj.contains_key("result") || obj.contains_key("error") => None,
        (Some(m), true) if envelope_ok && id.is_some() => Some((ProtocolFault::InvalidParams(m.to_string()), id)),
        _ => Some((ProtocolFault::NotJsonRpc, id)),
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let rmcp::model::JsonRpcMessage::Request(r) = &item {
            self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).sent(r.id.clone());
        }
        // An answer frees its request's id; a cancelled request's answer is not sent.
        let answered = match &item {
            rmcp::model::JsonRpcMessage::Response(r) => Some(&r.id),
            rmcp::model::JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered
            && self.requests.answered(id)
        {
            tracing::debug!(target: "agent_surface::mcp", ?id, "the answer to a cancelled request dropped");
            return futures_util::future::Either::Left(std::future::ready(Ok(())));
        }
        futures_util::future::Either::Right(write_message(self.write.clone(), item))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(pending) = self.pending.as_mut() {
                let written = pending.await;
                self.pending = None;
                if let Err(e) = written {
                    tracing::debug!(target: "agent_surface::mcp", error = %e, "cannot write an error answer; closing");
                    return None;
                }
            }
            match self.read_line().await {
                Ok(ReadLine::Line) => {}
                Ok(ReadLine::Oversized) => {
                    tracing::debug!(target: "agent_surface::mcp", max = self.max_line, "message over the size limit refused");
                    self.answer(&ProtocolFault::MessageTooLarge(self.max_line), None);
                    continue;
                }
                Ok(ReadLine::Eof) => return None,
                Err(e) => {
                    tracing::debug!(target: "agent_surface::mcp", error = %e, "stdin read failed; closing");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let mut bytes = line.as_slice();
            bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                self.line = line;
                self.line.clear();
                continue;
            }
            // Checked before parsing: a message of many tiny values would grow far past its size
            // once parsed, and a repeated member name would be read as its last occurrence.
            let screened = match crate::frame::screen(bytes, self.max_line) {
                Ok(screened) => screened,
                Err((refusal, id)) => {
                    tracing::debug!(target: "agent_surface::mcp", ?refusal, "message refused before parsing");
                    let failed = id
                        .is_none()
                        .then(|| crate::frame::response_id(bytes))
                        .flatten()
                        .filter(|id| self.take_asked(id));
                    self.line = line;
                    self.line.clear();
                    self.answer(&refusal, id);
                    if let Some(failed) = failed {
                        return Some(malformed_answer(failed));
                    }
                    continue;
                }
            };
            let parsed = parse(bytes, &screened);
            let answer = match parsed {
                Ok(message) => {
                    self.line = line;
                    self.line.clear();
                    match &message {
                        rmcp::model::JsonRpcMessage::Request(r) if !self.requests.hold(&r.id) => {
                            tracing::debug!(target: "agent_surface::mcp", id = ?r.id, "request with the id of one in progress refused");
                            self.answer(&ProtocolFault::IdInProgress, Some(r.id.clone()));
                            continue;
                        }
                        rmcp::model::JsonRpcMessage::Response(r) => {
                            self.take_asked(&r.id);
                        }
                        rmcp::model::JsonRpcMessage::Error(e) => {
                            if let Some(id) = &e.id {
                                self.take_asked(id);
                            }
                        }
                        rmcp::model::JsonRpcMessage::Notification(n) => {
                            if let ClientNotification::CancelledNotification(c) = &n.notification
                                && let Some(id) = &c.params.request_id
                            {
                                if !self.cancels_handlers {
                                    // `rmcp` cancels the handler and drops its answer: the id
                                    // is free again.
                                    self.requests.forget(id);
                                } else if self.requests.cancel(id) {
                                    // Cancelled here; the id is held until the handler is over.
                                    continue;
                                }
                            }
                        }
                        _ => {}
                    }
                    return Some(message);
                }
                Err(_) => match serde_json::from_slice::<Value>(bytes) {
                    Err(_) => Some((ProtocolFault::NotJson, None)),
                    Ok(value) => match crate::frame::response_id(bytes).filter(|id| self.take_asked(id)) {
                        Some(failed) => {
                            self.line = line;
                            self.line.clear();
                            return Some(malformed_answer(failed));
                        }
                        None => classify(&value),
                    },
                },
            };
            self.line = line;
            self.line.clear();
            if let Some((fault, id)) = answer {
                tracing::debug!(target: "agent_surface::mcp", code = fault.error().code.0, "refused a frame");
                self.answer(&fault, id);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut guard = self.write.lock().await;
        if let Some(mut w) = guard.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}
