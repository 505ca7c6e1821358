//! The streamable HTTP transport, on axum, with DNS-rebinding protection and pluggable
//! authentication.
//!
//! [`router`] mounts `rmcp`'s `StreamableHttpService` at [`McpHttpConfig::path`]: one
//! [`McpServer`] per legacy MCP session (`Mcp-Session-Id`) and one per modern (2026-07-28,
//! stateless) request, which `rmcp` serves without a session. Requests whose
//! `Host` is not in [`McpHttpConfig::allowed_hosts`], or that carry an `Origin` outside
//! [`McpHttpConfig::allowed_origins`], are refused with HTTP 403 before any MCP processing; the
//! defaults admit loopback only. A body over [`McpHttpConfig::max_body_bytes`] gets HTTP 413.
//!
//! Each request's identity comes from the configured [`Authenticator`]
//! ([`crate::McpConfig::authenticator`]), which reads the request headers; no authenticator (or
//! no identity found) means an anonymous consumer, and the registry's authority policy decides
//! what that consumer may see and call (`NOT_AUTHENTICATED` where an identity is required).
//! An authenticator that rejects ([`Authenticator::try_authenticate`], e.g. the OAuth 2.1
//! resource server of `agent-surface-oauth`) has every request at the endpoint — `POST`, `GET`
//! and `DELETE` — answered before MCP sees it: `401`/`403`/`503` with its `WWW-Authenticate`
//! challenge and a JSON body of `error` and `error_description` only ([`authenticated`]).
//!
//! **Duplicate ids.** `rmcp` routes a legacy session's answers by JSON-RPC id, so a request under
//! the id of one still in progress would take that one's answer. The router holds each request's
//! id from before `rmcp` sees it until its response has been sent or its connection dropped, in
//! its legacy session; a duplicate is answered `400` with JSON-RPC `-32600` (`A request with this
//! id is already in progress`), and a request past [`McpHttpConfig::max_requests_in_flight`] in
//! its session the same way with `data.maxRequestsInFlight`. A modern (stateless) request is
//! answered on its own response, routes nothing by id, and holds nothing. The design is in
//! `spec/adapters.md` ("Request ids").
//!
//! **Shutdown.** Cancelling the `streams` token given to [`router`] ends the transport's event
//! streams and legacy sessions, and with them the calls they carry: cancel it when the drain is
//! over, not when the shutdown starts. [`serve_http`] does so (the drain of
//! `agent_surface_server`: it waits for the calls in flight up to the `drain_timeout` of
//! [`McpHttpConfig::limits`], then disposes the registry); a router served by hand gets the same
//! from `agent_surface_server::serve_with` with `Drain::streams`. Long-lived streams that carry no
//! call's answer — a legacy session's `GET` stream, a modern `subscriptions/listen` — are marked
//! `agent_surface_server::OpenStream`, so the drain does not wait for them.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_registry::Registry;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::inflight::{Held, Holding, InFlightIds, Scope};
use crate::server::Authenticated;
use crate::{McpConfig, McpServer};

/// Defined in `agent-surface-policy` (shared with the HTTP binding).
pub use agent_surface_policy::{Authenticator, BearerTokens};

/// The HTTP side of the server.
#[derive(Clone, Debug)]
pub struct McpHttpConfig {
    /// Where the MCP endpoint is mounted.
    pub path: String,
    /// Accepted `Host` values (names, or `name:port`); the default admits loopback only, which
    /// is what protects a local server against DNS rebinding. Empty: any host.
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` values (`scheme://host:port`, `:*` for any port); requests without
    /// `Origin` are always accepted. The default admits loopback origins only.
    pub allowed_origins: Vec<String>,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How often an idle SSE stream gets a keep-alive comment.
    pub sse_keep_alive: Option<Duration>,
    /// Answer a modern (2026-07-28, stateless) request whose reply is one message as plain JSON
    /// (`Content-Type: application/json`) rather than as an event stream of one event. A call that
    /// reports progress (or sends anything else) before its result is still answered as an event
    /// stream, so nothing is lost. Both forms are ones every MCP client must read; the JSON one
    /// costs client and server less per call. Legacy sessions answer on their event streams either
    /// way. Default: on.
    pub json_responses: bool,
    /// The connection limits [`serve_http`] applies (connection caps, header timeout, drain);
    /// see `agent_surface_server::Limits`.
    pub limits: agent_surface_server::Limits,
    /// The most legacy (2025-11-25) sessions open at once; an `initialize` past it is refused
    /// with `503 Service Unavailable` and `Retry-After`. Modern requests open no session.
    pub max_sessions: usize,
    /// How long a legacy session may stay without traffic before it is closed. `rmcp` does not
    /// count a call in progress as traffic: keep it above the longest a call may wait (a wait-mode
    /// confirmation, an elicitation).
    pub session_idle: Duration,
    /// The most requests one legacy session may have in progress at once (each holds its JSON-RPC id, as a 32-byte digest, until its
    /// response is sent); one more is refused with `-32600` and `data.maxRequestsInFlight`. See
    /// [the module docs](self) on duplicate ids.
    pub max_requests_in_flight: usize,
}

impl Default for McpHttpConfig {
    fn default() -> Self {
        McpHttpConfig {
            path: "/mcp".to_string(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()],
            allowed_origins: vec!["http://localhost:*".into(), "http://127.0.0.1:*".into(), "http://[::1]:*".into()],
            max_body_bytes: 4 * 1024 * 1024,
            sse_keep_alive: Some(Duration::from_secs(15)),
            json_responses: true,
            limits: agent_surface_server::Limits::default(),
            max_sessions: 1_000,
            session_idle: Duration::from_secs(600),
            max_requests_in_flight: 1_024,
        }
    }
}

/// An axum router serving MCP at `http.path`; `new_session` builds the handler of each new
/// legacy session and of each modern request. Use [`router`] for a registry; this is for
/// handlers that wrap [`McpServer`]. Cancelling `streams` ends the event streams and sessions
/// (see [the module docs](self)).
pub fn router_with<H, F>(new_session: F, http: &McpHttpConfig, streams: CancellationToken) -> axum::Router
where
    H: ServerHandler + Send + 'static,
    F: Fn() -> H + Send + Sync + 'static,
{
    endpoint(new_session, http, streams, None)
}

/// What the endpoint's one handler holds, shared by every request behind one `Arc`.
struct Endpoint<H: ServerHandler + Send + 'static> {
    service: StreamableHttpService<H, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// The host check and the authenticator of [`guarded`], when it applies.
    guard: Option<(Vec<String>, Arc<dyn Authenticator>)>,
    max_sessions: usize,
    max_body: usize,
    opening: Arc<std::sync::Mutex<usize>>,
    in_flight: Arc<InFlightIds>,
}

/// The router of [`router_with`], and of [`router`] with `guard` (the hosts admitted and the
/// authenticator). Every step a request goes through before `rmcp` — the host check and the
/// authenticator when guarded, the screen, the legacy id's hold, the session slot — runs in one
/// handler, in that order, rather than in a middleware layer each: axum boxes a layered route's
/// service again for every layer, and clones (allocates) every box beneath a layer once per
/// request at each layer (33 allocations a request for the three layers this replaced).
fn endpoint<H, F>(
    new_session: F,
    http: &McpHttpConfig,
    streams: CancellationToken,
    guard: Option<(Vec<String>, Arc<dyn Authenticator>)>,
) -> axum::Router
where
    H: ServerHandler + Send + 'static,
    F: Fn() -> H + Send + Sync + 'static,
{
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(http.allowed_hosts.clone())
        .with_max_request_body_bytes(http.max_body_bytes)
        .with_sse_keep_alive(http.sse_keep_alive)
        .with_json_response(http.json_responses)
        .with_cancellation_token(streams);
    config = if http.allowed_hosts.is_empty() { config.disable_allowed_hosts() } else { config };
    config = if http.allowed_origins.is_empty() {
        config.disable_allowed_origins()
    } else {
        config.with_allowed_origins(http.allowed_origins.clone())
    };
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(http.session_idle);
    let sessions = Arc::new(sessions);
    let new_session = move || Ok(new_session());
    // Shared behind one `Arc`: axum clones a route's service for every request, and
    // `StreamableHttpService`'s clone copies its configuration (the allowed hosts and origins
    // among it).
    let endpoint = Arc::new(Endpoint {
        service: StreamableHttpService::new(new_session, sessions.clone(), config),
        sessions,
        guard,
        max_sessions: http.max_sessions,
        max_body: http.max_body_bytes,
        opening: Arc::new(std::sync::Mutex::new(0)),
        in_flight: InFlightIds::new(http.max_requests_in_flight),
    });
    let service = {
        use axum::handler::HandlerWithoutStateExt;
        let handle = move |request: axum::extract::Request| {
            let endpoint = endpoint.clone();
            async move { endpoint.serve(request).await }
        };
        handle.into_service()
    };
    axum::Router::new().route_service(&http.path, service)
}

impl<H: ServerHandler + Send + 'static> Endpoint<H> {
    /// One request: the host and the authenticator (when guarded), the screen, the legacy id's
    /// hold and the session slot, then `rmcp`.
    async fn serve(&self, mut request: axum::extract::Request) -> axum::response::Response {
        if let Some((allowed, authenticator)) = &self.guard {
            // The host is checked before the token, as `rmcp` checks it (after): a client must not
            // be sent to sign in by a server that will then refuse its host.
            if let Some(refused) = host_refusal(allowed, &request) {
                return refused;
            }
            if let Err(refused) = sign_in(authenticator.as_ref(), &mut request).await {
                return refused;
            }
        }
        let open_stream = is_open_stream(&request);
        let ends_session = request.method() == axum::http::Method::DELETE;
        let (mut request, screened) = match screen_body(request, self.max_body).await {
            Ok(screened) => screened,
            Err(Refused::Answer(refused)) => return refused,
            Err(Refused::FailsRequest(failed, refused)) => {
                // `rmcp` fails the session's request it answered (see `malformed_answer`); the
                // client is answered the refusal, as for any message the server cannot use.
                let _ = self.service.handle(*failed).await;
                return refused;
            }
        };
        // A legacy request's id is held in its session until its response has been sent: `rmcp` routes answers by id (see `crate::inflight`).
        let held = match screened.as_ref().map_or(Ok(None), |s| hold_id(&self.in_flight, &request, s)) {
            Ok(held) => held,
            Err((refusal, id)) => {
                // The id is not logged: it may be as long as the body.
                tracing::debug!(target: "agent_surface::mcp", ?refusal, "request refused: its id or its scope is taken");
                return jsonrpc_refusal(refusal, Some(id));
            }
        };
        // A request keeps its id in progress until its handler is over, after its client hung up
        // too: the hold travels with the request (`rmcp` hands the request's parts to the
        // handler's context) and is dropped with the handler's context (see `crate::inflight`).
        if held.is_some()
            && let Some(id) = screened.as_ref().and_then(|s| s.id.as_ref())
            && let Some(session) = request.headers().get(MCP_SESSION_ID)
        {
            let running = self.in_flight.running(Scope::Session(session.as_bytes()), id);
            request.extensions_mut().insert(Arc::new(running));
        }
        // Every `initialize` opens a session (whatever era it names): it takes a slot,
        // counted together with the sessions open, before it reaches `rmcp`.
        let opens = screened.is_some_and(|s| s.initialize) && !request.headers().contains_key(MCP_SESSION_ID);
        let _slot = if opens {
            let open = self.sessions.sessions.read().await.len();
            match Slot::take(&self.opening, open, self.max_sessions) {
                Some(slot) => Some(slot),
                None => {
                    tracing::warn!(target: "agent_surface::mcp", max = self.max_sessions, "session cap reached; initialize refused");
                    return session_cap_response();
                }
            }
        } else {
            None
        };
        let mut response = self.service.handle(request).await.map(axum::body::Body::new);
        if ends_session && response.status() == axum::http::StatusCode::ACCEPTED {
            // `rmcp` answers a session's end `202`, which MCP does not name; the official clients
            // take `200` or `204` (the Python SDK logs any other answer as a failed termination).
            *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
        }
        if open_stream {
            response.extensions_mut().insert(agent_surface_server::OpenStream);
        }
        match held {
            Some(held) => {
                response.map(|body| axum::body::Body::from_stream(Holding::new(body.into_data_stream(), held)))
            }
            None => response,
        }
    }
}

/// Holds the id of a legacy request (`screened`) in its session (`Mcp-Session-Id`). An
/// `initialize`, a notification, a response, and a request without a session (a modern request,
/// answered on its own response: `rmcp` routes nothing of it by id) hold nothing. A request whose
/// id is in progress in its session, or whose session is full, is refused (with its id), to be
/// answered before `rmcp` routes it.
fn hold_id(
    in_flight: &Arc<InFlightIds>,
    request: &axum::extract::Request,
    screened: &crate::frame::Screened,
) -> Result<Option<Held>, (crate::fault::ProtocolFault, rmcp::model::RequestId)> {
    let Some(id) = screened.id.as_ref().filter(|_| screened.request && !screened.initialize) else {
        return Ok(None);
    };
    let Some(session) = request.headers().get(MCP_SESSION_ID) else { return Ok(None) };
    in_flight.hold(Scope::Session(session.as_bytes()), id).map(Some).map_err(|refusal| (refusal, id.clone()))
}

/// `400` with the JSON-RPC error of `refusal`, under the refused request's `id`; with no `id`
/// member when it could not be read (as over stdio: MCP's schema has no `null` id).
fn jsonrpc_refusal(
    refusal: crate::fault::ProtocolFault,
    id: Option<rmcp::model::RequestId>,
) -> axum::response::Response {
    let mut body = serde_json::json!({"jsonrpc": "2.0", "error": refusal.error()});
    if let (Some(id), Some(object)) = (id, body.as_object_mut()) {
        object.insert("id".to_string(), serde_json::json!(id));
    }
    axum::response::Response::builder()
        .status(axum::http::StatusCode::BAD_REQUEST)
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap_or_default()
}

/// Whether `request` opens a long-lived stream that carries no call's answer: a legacy session's
/// `GET` of its standalone stream (or the resumption of it), or a modern `subscriptions/listen`
/// (whose `Mcp-Method` header `rmcp` requires to match the body). A `GET` that resumes a request's
/// stream (`Last-Event-ID` of the form `index/request`, as `rmcp` numbers the events of a
/// request's stream) carries that request's answer: the drain waits for it, as for the `POST`
/// whose connection it replaces.
fn is_open_stream(request: &axum::extract::Request) -> bool {
    match *request.method() {
        axum::http::Method::GET => {
            !request.headers().get(LAST_EVENT_ID).is_some_and(|id| id.as_bytes().contains(&b'/'))
        }
        axum::http::Method::POST => {
            request.headers().get(MCP_METHOD).is_some_and(|m| m.as_bytes() == b"subscriptions/listen")
        }
        _ => false,
    }
}

/// A session being opened, counted until its `initialize` is answered (by then the session is
/// in the session manager's count).
struct Slot(Arc<std::sync::Mutex<usize>>);

impl Slot {
    /// A slot, unless `open` sessions and those being opened already reach `max`.
    fn take(opening: &Arc<std::sync::Mutex<usize>>, open: usize, max: usize) -> Option<Slot> {
        let mut n = opening.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if open + *n >= max {
            return None;
        }
        *n += 1;
        Some(Slot(opening.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut n = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *n = n.saturating_sub(1);
    }
}

/// How long a request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The header names this module reads on every request, made once (looked up by a `&str`, a name
/// is parsed on every call).
const MCP_SESSION_ID: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-session-id");
/// The header that resumes an event stream after the last event the client received.
const LAST_EVENT_ID: axum::http::HeaderName = axum::http::HeaderName::from_static("last-event-id");
/// See [`MCP_SESSION_ID`].
const MCP_METHOD: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-method");

/// Why [`screen_body`] did not hand a request on.
enum Refused {
    /// Answer this, and nothing else.
    Answer(axum::response::Response),
    /// A legacy session's response to one of the server's requests that cannot be read: hand
    /// `rmcp` the first (an error under that request's id, in the same session, so that the
    /// request fails at once instead of waiting out its timeout — an `elicitation/create` a call
    /// waits on, say), and answer the client the second.
    FailsRequest(Box<axum::extract::Request>, axum::response::Response),
}

/// Reads a `POST` body (at most `max_body` bytes, within [`BODY_TIMEOUT`]) and refuses one that
/// holds more JSON values than one per 16 bytes of `max_body` before anything parses it: parsed,
/// a message of many tiny values takes many times its size.
async fn screen_body(
    request: axum::extract::Request,
    max_body: usize,
) -> Result<(axum::extract::Request, Option<crate::frame::Screened>), Refused> {
    if request.method() != axum::http::Method::POST {
        return Ok((request, None));
    }
    let refuse = |status: axum::http::StatusCode, text: &'static str| {
        axum::response::Response::builder()
            .status(status)
            .header(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(axum::body::Body::from(text))
            .unwrap_or_default()
    };
    let json = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<mime::Mime>().ok())
        .is_some_and(|media| media.essence_str() == mime::APPLICATION_JSON.essence_str());
    if !json {
        return Err(Refused::Answer(refuse(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Send the message as application/json.",
        )));
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return Err(Refused::Answer(refuse(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "The request body is too large.",
            )));
        }
        Err(_) => {
            return Err(Refused::Answer(refuse(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                "The request body took too long.",
            )));
        }
    };
    let screened = match crate::frame::screen(&bytes, max_body) {
        Ok(screened) => screened,
        Err((crate::fault::ProtocolFault::TooManyValues(_), _)) => {
            tracing::debug!(target: "agent_surface::mcp", "request with too many JSON values refused");
            let refused =
                refuse(axum::http::StatusCode::PAYLOAD_TOO_LARGE, "The request body holds too many JSON values.");
            return Err(fails_request(parts, crate::frame::response_id(&bytes), refused));
        }
        Err((refusal, id)) => {
            // A JSON-RPC error, as for any message the server cannot use.
            tracing::debug!(target: "agent_surface::mcp", ?refusal, "request refused before parsing");
            let answers = id.is_none().then(|| crate::frame::response_id(&bytes)).flatten();
            return Err(fails_request(parts, answers, jsonrpc_refusal(refusal, id)));
        }
    };
    // A response to one of the server's requests that `rmcp` cannot read: it would refuse it and
    // leave the request waiting.
    if let Some(answers) = &screened.answers
        && serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes).is_err()
    {
        tracing::debug!(target: "agent_surface::mcp", "a response that does not parse refused");
        let refused = jsonrpc_refusal(crate::fault::ProtocolFault::NotJsonRpc, None);
        return Err(fails_request(parts, Some(answers.clone()), refused));
    }
    Ok((axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes)), Some(screened)))
}

/// `refused`, after an error under `answers` (a legacy session's request of the server's, which a
/// response that cannot be read named) is handed to `rmcp` in the same session: see
/// [`Refused::FailsRequest`]. Without a session or such an id, `refused` alone.
fn fails_request(
    mut parts: axum::http::request::Parts,
    answers: Option<rmcp::model::RequestId>,
    refused: axum::response::Response,
) -> Refused {
    let Some(id) = answers.filter(|_| parts.headers.contains_key(MCP_SESSION_ID)) else {
        return Refused::Answer(refused);
    };
    let error = crate::fault::ProtocolFault::UnreadableResponse.error();
    let message = rmcp::model::ClientJsonRpcMessage::error(error, Some(id));
    // The body is another one now.
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    match serde_json::to_vec(&message) {
        Ok(body) => Refused::FailsRequest(
            Box::new(axum::extract::Request::from_parts(parts, axum::body::Body::from(body))),
            refused,
        ),
        Err(_) => Refused::Answer(refused),
    }
}

/// `503` with `Retry-After` for an `initialize` past the session cap.
fn session_cap_response() -> axum::response::Response {
    axum::response::Response::builder()
        .status(axum::http::StatusCode::SERVICE_UNAVAILABLE)
        .header(axum::http::header::RETRY_AFTER, "5")
        .header(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(axum::body::Body::from("Too many open sessions; retry later."))
        .unwrap_or_default()
}

/// An axum router serving `registry` over MCP at `http.path`, one [`McpServer`] per legacy
/// session or modern request. With [`McpConfig::authenticator`] set, every request first goes
/// through [`authenticated`]. Cancelling `streams` ends the event streams and sessions, and the
/// calls they carry: give it `agent_surface_server::Drain::streams` (see
/// [the module docs](self)).
pub fn router(registry: Registry, config: McpConfig, http: &McpHttpConfig, streams: CancellationToken) -> axum::Router {
    let guard = guard(&config, http);
    let config = Arc::new(config);
    endpoint(move || McpServer::new(registry.clone(), config.clone()), http, streams, guard)
}

/// [`router`] with the application's own handler beside the tools: `new_app` builds it for each
/// [`McpServer`] (each legacy session and each modern request), and it answers every method that
/// is not about tools or tasks — resources, prompts, completions, … (see
/// [`crate::compose`]). Authentication, the host check and the limits are the same as
/// [`router`]'s, for its methods too.
///
/// ```no_run
/// use agent_surface_mcp::{McpConfig, http::{McpHttpConfig, router_with_fallback}};
/// use agent_surface_registry::{Registry, RegistryConfig};
/// use agent_surface_server::Drain;
///
/// #[derive(Clone)]
/// struct MyResources; // implements rmcp::ServerHandler: list_resources, read_resource, …
/// impl rmcp::ServerHandler for MyResources {}
///
/// # async fn run() -> std::io::Result<()> {
/// let registry = Registry::new(RegistryConfig::default());
/// let http = McpHttpConfig::default();
/// let drain = Drain::cancelling({ let registry = registry.clone(); move || registry.dispose() });
/// let app = router_with_fallback(registry, McpConfig::default(), || MyResources, &http, drain.streams.clone());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// agent_surface_server::serve_with(listener, app, http.limits, shutdown, drain).await
/// # }
/// ```
pub fn router_with_fallback<H, F>(
    registry: Registry,
    config: McpConfig,
    new_app: F,
    http: &McpHttpConfig,
    streams: CancellationToken,
) -> axum::Router
where
    H: ServerHandler + Send + 'static,
    F: Fn() -> H + Send + Sync + 'static,
{
    let guard = guard(&config, http);
    let config = Arc::new(config);
    let new_session = move || McpServer::new(registry.clone(), config.clone()).with_fallback(new_app());
    endpoint(new_session, http, streams, guard)
}

/// What guards [`router`]'s endpoint: with an authenticator, every request's host is checked
/// (`agent_surface_server::check_host`, against `http.allowed_hosts`) and then its headers shown
/// to the authenticator, before anything else (see [`Endpoint::serve`]).
fn guard(config: &McpConfig, http: &McpHttpConfig) -> Option<(Vec<String>, Arc<dyn Authenticator>)> {
    config.authenticator.clone().map(|authenticator| (http.allowed_hosts.clone(), authenticator))
}

/// The answer to a request whose host is not `allowed` (`agent_surface_server::check_host`): the
/// same `403` `rmcp`'s own check answers (which still runs, behind), or `400` for a repeated
/// `Host`; `None` for an allowed one.
fn host_refusal(allowed: &[String], request: &axum::extract::Request) -> Option<axum::response::Response> {
    use agent_surface_server::HostCheck;
    let answer = |status: axum::http::StatusCode, text: &'static str| {
        tracing::debug!(target: "agent_surface::mcp", status = status.as_u16(), "host refused before authentication");
        axum::response::Response::builder()
            .status(status)
            .header(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(axum::body::Body::from(text))
            .unwrap_or_default()
    };
    match agent_surface_server::check_host(allowed, request.uri(), request.headers()) {
        HostCheck::Allowed => None,
        HostCheck::NotAllowed => {
            Some(answer(axum::http::StatusCode::FORBIDDEN, "Forbidden: Host header is not allowed"))
        }
        HostCheck::Repeated => {
            Some(answer(axum::http::StatusCode::BAD_REQUEST, "Bad Request: more than one Host header"))
        }
    }
}

/// `app` with every request first shown to `authenticator`'s
/// [`try_authenticate`](Authenticator::try_authenticate): a rejected request is answered at once
/// (the rejection's status, its [`AuthRejection::www_authenticate`] and
/// [`AuthRejection::body`]); an admitted
/// one carries its identity to the [`McpServer`], which then does not ask the authenticator
/// again. [`router`] applies it; a [`router_with`] app applies it itself, with the
/// authenticator of its [`McpConfig`].
///
/// [`AuthRejection::body`]: agent_surface_policy::AuthRejection::body
/// [`AuthRejection::www_authenticate`]: agent_surface_policy::AuthRejection::www_authenticate
pub fn authenticated(app: axum::Router, authenticator: Arc<dyn Authenticator>) -> axum::Router {
    app.layer(axum::middleware::from_fn(move |mut request: axum::extract::Request, next: axum::middleware::Next| {
        let authenticator = authenticator.clone();
        async move {
            match sign_in(authenticator.as_ref(), &mut request).await {
                Ok(()) => next.run(request).await,
                Err(refused) => refused,
            }
        }
    }))
}

/// Shows `request`'s headers to `authenticator`: an admitted request carries its identity to the
/// [`McpServer`] (`Authenticated`); a rejected one gets its answer ([`rejected`]).
async fn sign_in(
    authenticator: &dyn Authenticator,
    request: &mut axum::extract::Request,
) -> Result<(), axum::response::Response> {
    let identity = authenticator.try_authenticate(request.headers()).await.map_err(|rejection| rejected(&rejection))?;
    request.extensions_mut().insert(Authenticated(identity));
    Ok(())
}

/// The answer to a request the authenticator refused.
fn rejected(rejection: &agent_surface_policy::AuthRejection) -> axum::response::Response {
    use axum::http::header;
    tracing::debug!(target: "agent_surface::mcp", status = rejection.status().as_u16(), "refused by the authenticator");
    let mut response = axum::response::Response::builder()
        .status(rejection.status())
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(rejection.body()))
        .unwrap_or_default();
    if let Some(challenge) = rejection.www_authenticate() {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// Serves `registry` over streamable HTTP on `listener` until `shutdown` is cancelled, then
/// drains (`agent_surface_server`'s drain, with the `drain_timeout` and `cancel_grace` of
/// [`McpHttpConfig::limits`]): new connections are refused; the calls in flight finish, their
/// answers sent; a legacy session's idle event stream does not hold the drain. Calls still
/// running when the drain timeout passes are cancelled by **disposing `registry`** — each ends
/// `CANCELLED`, or `EXECUTION_FAILED {reason: outcome-unknown}` for a write whose handler had
/// started — and their answers get the grace to go out; then the streams end and `serve_http`
/// returns. Calls answered as MCP tasks (with [`McpConfig::tasks`]) count as calls in flight until
/// they end and their ends are recorded (`Drain::waiting_for`, `Tasks::idle`).
///
/// Disposing is right when the registry ends with this server, or with servers that all shut
/// down on the same token. A registry that goes on serving elsewhere must not be disposed: serve
/// [`router`] with `agent_surface_server::serve_with` and a cancel step of your own (or none:
/// the calls left are then dropped with their connections):
///
/// ```no_run
/// use agent_surface_mcp::{McpConfig, http::{McpHttpConfig, router}};
/// use agent_surface_registry::{Registry, RegistryConfig};
/// use agent_surface_server::Drain;
///
/// # async fn run() -> std::io::Result<()> {
/// # let registry = Registry::new(RegistryConfig::default());
/// let http = McpHttpConfig::default();
/// let drain = Drain::default(); // no cancel step
/// let app = router(registry, McpConfig::default(), &http, drain.streams.clone());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// agent_surface_server::serve_with(listener, app, http.limits, shutdown, drain).await
/// # }
/// ```
///
/// ```no_run
/// use agent_surface_mcp::{McpConfig, http::{McpHttpConfig, serve_http}};
/// use agent_surface_registry::{Registry, RegistryConfig};
///
/// # async fn run() -> std::io::Result<()> {
/// let registry = Registry::new(RegistryConfig::default());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// serve_http(registry, McpConfig::default(), McpHttpConfig::default(), listener, shutdown).await
/// # }
/// ```
pub async fn serve_http(
    registry: Registry,
    config: McpConfig,
    http: McpHttpConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut drain = agent_surface_server::Drain::cancelling({
        let registry = registry.clone();
        move || registry.dispose()
    });
    // The calls answered as tasks run on after their requests: the drain waits for them too.
    if let Some(tasks) = config.tasks.clone() {
        drain = drain.waiting_for(move || tasks.idle());
    }
    let periodic = agent_surface_registry::Periodic::start(&registry, &shutdown);
    let app = router(registry, config, &http, drain.streams.clone());
    let served = agent_surface_server::serve_with(listener, app, http.limits, shutdown, drain).await;
    periodic.stop().await;
    served
}
