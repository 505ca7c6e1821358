//! The axum router: `GET {prefix}/capabilities` and `POST {prefix}/invoke`.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::message::Sends;
use agent_surface_policy::{AuthRejectionKind, Identity};
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest, Registry};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use tokio_util::sync::CancellationToken;

use crate::asynchronous;
use crate::auth::{self, Authenticator};
use crate::json::{self, Strict};
use crate::wire::{self, JSON, PROBLEM_JSON, ProtocolFault};

/// The header that carries the invocation id (draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The default consumer header: names one caller's session within its identity.
pub const CONSUMER_HEADER: &str = "agent-surface-consumer";

/// The response header of `POST {prefix}/invoke` that carries the call's correlation id: the id
/// the agent can quote to find the call in the operator log. The registry makes one for every
/// call; it is never the caller's invocation id.
pub const CORRELATION_ID: &str = "agent-surface-correlation-id";

/// How the binding serves.
#[derive(Clone)]
pub struct HttpConfig {
    /// Where the routes are mounted: `""` (the root) or a path such as `/api`. [`router`]
    /// normalizes it: a missing leading `/` is added and trailing slashes are trimmed, so `"api"`
    /// and `"/api/"` both mean `/api`, and `"/"` means the root.
    pub prefix: String,
    /// The largest request body, in bytes (default 1 MiB); a larger body (or declared
    /// `Content-Length`) is the `413` protocol fault `body-too-large`.
    pub max_body_bytes: usize,
    /// How long reading the request body may take once the headers are in (default 30 s); a body
    /// still incomplete then is the `408` protocol fault `request-timeout`.
    pub body_timeout: Duration,
    /// The header naming the caller's session; see [`crate`] for the consumer key.
    pub consumer_header: HeaderName,
    /// Turns headers into an identity; `None`: every caller is anonymous. A `401` carries the
    /// authenticator's [`Authenticator::challenge`] as `WWW-Authenticate` — `Bearer` when there
    /// is no authenticator or the challenge is not a valid header value, since RFC 9110 requires
    /// a challenge on every `401`. A request the authenticator refuses
    /// ([`Authenticator::try_authenticate`], e.g. an OAuth resource server) is answered before
    /// its body is read: the protocol fault `unauthorized` (`401`), `insufficient-scope` (`403`)
    /// or `auth-unavailable` (`503`), with the rejection's `WWW-Authenticate`.
    pub authenticator: Option<Arc<dyn Authenticator>>,
    /// Accepted host names (the port is ignored); the default admits loopback only, which
    /// protects a local server against DNS rebinding. Empty: any host. The host checked is the
    /// authority of an absolute-form request target (`GET http://host/…`), else the `Host`
    /// header. Every request is checked, unknown routes and wrong methods included: another host
    /// is the `403` protocol fault `host-not-allowed`, and more than one `Host` field is the `400`
    /// fault `invalid-header` (whatever this list holds).
    pub allowed_hosts: Vec<String>,
    /// The connection limits [`serve`] applies (connection caps, header timeout, drain); see
    /// `agent_surface_server::Limits`. A router served some other way has the limits of that
    /// server.
    pub limits: agent_surface_server::Limits,
    /// Renders the text served at `GET {prefix}/metrics` — for example the `render` of a
    /// `metrics-exporter-prometheus` handle, with `RegistryConfig::metrics` on; `None` (the
    /// default): no such route. The route answers whoever reaches it (the host check applies, the
    /// authenticator does not: scrapers carry no agent's token), so serve it where only your
    /// scrapers reach it.
    pub metrics: Option<MetricsRenderer>,
    /// What the callers of `/invoke` can send, which decides how error messages are worded
    /// ([`Sends`], see `spec/error-model.md`): [`Sends::Request`] (the default) for clients that
    /// build the request — they may send an `Idempotency-Key`, a `confirmationId`, wait before
    /// retrying — and get each message as built; [`Sends::Arguments`] for agents that reach the
    /// binding through a generic tool that only fills in the body's `input` (an OpenAPI tool, say),
    /// which get the wording that never asks for what they cannot send. Code, retry, details and
    /// repair, the status and `Retry-After` are the same either way.
    pub sends: Sends,
    /// The task runtime for long-running calls (`agent_surface_registry::tasks`); `None` (the
    /// default): no call is answered `202`, and there are no task routes. With it, a call of a
    /// long-running capability whose request carries `Prefer: respond-async` is answered `202
    /// Accepted` with a task once its handler starts, and `GET`/`DELETE {prefix}/tasks/{id}` read
    /// and cancel tasks (see [`crate::asynchronous`]). Give the MCP adapter the same runtime (or
    /// the same store) and a task started over either is read over the other.
    pub tasks: Option<agent_surface_registry::tasks::Tasks>,
}

/// What [`HttpConfig::metrics`] holds: renders the current metrics as Prometheus text.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// The media type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            prefix: String::new(),
            max_body_bytes: 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            consumer_header: HeaderName::from_static(CONSUMER_HEADER),
            authenticator: None,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            limits: agent_surface_server::Limits::default(),
            metrics: None,
            sends: Sends::Request,
            tasks: None,
        }
    }
}

impl HttpConfig {
    /// The default configuration with routes under `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> HttpConfig {
        HttpConfig { prefix: prefix.into(), ..HttpConfig::default() }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("prefix", &self.prefix)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("body_timeout", &self.body_timeout)
            .field("consumer_header", &self.consumer_header)
            .field("authenticator", &self.authenticator.is_some())
            .field("allowed_hosts", &self.allowed_hosts)
            .field("metrics", &self.metrics.is_some())
            .field("sends", &self.sends)
            .field("tasks", &self.tasks.is_some())
            .finish()
    }
}

struct AppState {
    registry: Registry,
    config: HttpConfig,
}

type Shared = Arc<AppState>;

fn fault(fault: ProtocolFault) -> Response {
    (fault.status(), [(header::CONTENT_TYPE, PROBLEM_JSON)], fault.body()).into_response()
}

/// The `500` protocol fault `internal`; the cause goes to the operator log only.
fn internal(what: &'static str, cause: &dyn std::fmt::Display) -> Response {
    tracing::error!(target: "agent_surface::http", cause = %agent_surface_policy::redacted(cause), "{what}");
    fault(ProtocolFault::Internal)
}

fn method_not_allowed(allow: &'static str) -> MethodRouter<Shared> {
    MethodRouter::new().fallback(move || async move {
        let mut response = fault(ProtocolFault::MethodNotAllowed);
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
        response
    })
}

/// `prefix` with a leading `/` and no trailing one (`""` for the root).
fn normalize_prefix(prefix: &str) -> String {
    match prefix.trim_end_matches('/') {
        "" => String::new(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    }
}

/// The binding's router for `registry`: `GET {prefix}/capabilities` answers the caller's
/// snapshot, `POST {prefix}/invoke` runs one call (or streams it, or answers a task: see
/// [`crate::asynchronous`]), `GET {prefix}/openapi.json` describes what the caller can do
/// ([`crate::openapi`]), `GET`/`DELETE {prefix}/tasks/{id}` read and cancel tasks when
/// [`HttpConfig::tasks`] is set, and, when [`HttpConfig::metrics`] is set, `GET {prefix}/metrics`
/// serves the metrics text. Every other path is a `404` protocol fault,
/// every other method a `405` one.
pub fn router(registry: Registry, mut config: HttpConfig) -> Router {
    config.prefix = normalize_prefix(&config.prefix);
    let prefix = config.prefix.clone();
    let metrics = config.metrics.clone();
    let has_tasks = config.tasks.is_some();
    let state = Arc::new(AppState { registry, config });
    let mut router = Router::new()
        .route(&format!("{prefix}/capabilities"), get(capabilities).merge(method_not_allowed("GET, HEAD")))
        .route(&format!("{prefix}/invoke"), post(invoke).merge(method_not_allowed("POST")))
        .route(&format!("{prefix}/openapi.json"), get(openapi).merge(method_not_allowed("GET, HEAD")));
    if has_tasks {
        let task = get(get_task).delete(cancel_task).merge(method_not_allowed("GET, HEAD, DELETE"));
        router = router.route(&format!("{prefix}/tasks/{{id}}"), task);
    }
    if let Some(render) = metrics {
        let serve = get(move || async move {
            ([(header::CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT))], render()).into_response()
        });
        router = router.route(&format!("{prefix}/metrics"), serve.merge(method_not_allowed("GET, HEAD")));
    }
    router
        .fallback(|| async { fault(ProtocolFault::NotFound) })
        // After the routes and the fallback, so that it guards all of them.
        .layer(middleware::from_fn_with_state(state.clone(), host_guard))
        .with_state(state)
}

/// Serves `registry` on `listener` until `shutdown` is cancelled, with `config.limits` (a
/// connection cap, a header timeout that also closes idle connections, a bounded drain). While it
/// serves, the registry's confirmation gate does its periodic work (the `ConfirmationEngine`'s
/// expiry sweep, every `ConfirmationConfig::sweep_interval`; `agent_surface_registry::Periodic`).
///
/// On shutdown it drains (`agent_surface_server`'s drain, with the `drain_timeout` and
/// `cancel_grace` of [`HttpConfig::limits`]): new connections are refused; the calls in flight
/// finish and are answered. Calls still running when the drain timeout passes are cancelled by
/// **disposing `registry`** — each ends `CANCELLED`, or `EXECUTION_FAILED {reason:
/// outcome-unknown}` for a write whose handler had started (recorded under its invocation id) —
/// and their answers get the grace to go out; then `serve` returns.
///
/// Disposing is right when the registry ends with this server, or with servers that all shut
/// down on the same token. A registry that goes on serving elsewhere must not be disposed: serve
/// [`router`] with `agent_surface_server::serve_with` and a cancel step of your own, or none (the
/// calls left are then cancelled when their connections are dropped, unanswered).
///
/// ```no_run
/// use agent_surface_http::{HttpConfig, serve};
/// use agent_surface_registry::{Registry, RegistryConfig};
///
/// # async fn run() -> std::io::Result<()> {
/// let registry = Registry::new(RegistryConfig::default());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// serve(registry, HttpConfig::default(), listener, tokio_util::sync::CancellationToken::new()).await
/// # }
/// ```
pub async fn serve(
    registry: Registry,
    config: HttpConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let limits = config.limits.clone();
    let mut drain = agent_surface_server::Drain::cancelling({
        let registry = registry.clone();
        move || registry.dispose()
    });
    // The calls answered as tasks run on after their requests: the drain waits for them too.
    if let Some(tasks) = config.tasks.clone() {
        drain = drain.waiting_for(move || tasks.idle());
    }
    let periodic = agent_surface_registry::Periodic::start(&registry, &shutdown);
    let served = agent_surface_server::serve_with(listener, router(registry, config), limits, shutdown, drain).await;
    periodic.stop().await;
    served
}

/// Refuses a request whose host is not allowed before any route sees it.
async fn host_guard(State(state): State<Shared>, request: Request, next: Next) -> Response {
    match check_host(&state.config, request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(f) => {
            tracing::debug!(target: "agent_surface::http", kind = f.kind(), "protocol fault");
            fault(f)
        }
    }
}

/// Checks the request's host (port ignored): the authority of an absolute-form target, else the
/// one `Host` header. Several `Host` fields are `invalid-header` (RFC 9112 §3.2).
fn check_host(config: &HttpConfig, uri: &Uri, headers: &HeaderMap) -> Result<(), ProtocolFault> {
    match agent_surface_server::check_host(&config.allowed_hosts, uri, headers) {
        agent_surface_server::HostCheck::Allowed => Ok(()),
        agent_surface_server::HostCheck::NotAllowed => Err(ProtocolFault::HostNotAllowed),
        agent_surface_server::HostCheck::Repeated => Err(ProtocolFault::InvalidHeader),
    }
}

/// The identity the authenticator finds, or the answer to a request it refuses (before anything
/// else of the request is read).
async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Option<Identity>, Response> {
    let Some(authenticator) = &state.config.authenticator else {
        return Ok(None);
    };
    authenticator.try_authenticate(headers).await.map_err(|rejection| {
        let kind = match rejection.kind() {
            AuthRejectionKind::InsufficientScope => ProtocolFault::InsufficientScope,
            AuthRejectionKind::Unavailable => ProtocolFault::AuthUnavailable,
            _ => ProtocolFault::Unauthorized,
        };
        tracing::debug!(target: "agent_surface::http", kind = kind.kind(), "refused by the authenticator");
        let mut response = fault(kind);
        if let Some(challenge) = rejection.www_authenticate() {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    })
}

/// The consumer of a request with `identity`, or the fault its consumer header makes.
fn consumer(
    state: &AppState,
    headers: &HeaderMap,
    identity: Option<Identity>,
) -> Result<agent_surface_policy::Consumer, ProtocolFault> {
    let session = match headers.get(&state.config.consumer_header) {
        None => None,
        Some(v) => match v.to_str() {
            Ok(s) if auth::valid_session(s) => Some(s),
            _ => return Err(ProtocolFault::InvalidHeader),
        },
    };
    Ok(auth::consumer(identity, session))
}

async fn capabilities(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let identity = match authenticate(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let consumer = match consumer(&state, &headers, identity) {
        Ok(c) => c,
        Err(f) => return fault(f),
    };
    let snapshot = state.registry.snapshot(&consumer).await;
    match serde_json::to_string(&snapshot) {
        Ok(body) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, JSON), (header::CACHE_CONTROL, "no-store")], body).into_response()
        }
        Err(e) => internal("the snapshot could not be serialized", &e),
    }
}

/// `GET {prefix}/openapi.json`: the OpenAPI document of what this caller can do (see
/// [`crate::openapi`]).
async fn openapi(State(state): State<Shared>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let identity = match authenticate(&state, &parts.headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let consumer = match consumer(&state, &parts.headers, identity) {
        Ok(c) => c,
        Err(f) => return fault(f),
    };
    let snapshot = state.registry.snapshot(&consumer).await;
    let base = public_base(&parts, "/openapi.json");
    let bearer = state.config.authenticator.as_ref().is_some_and(|a| {
        a.challenge().split_whitespace().next().is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer"))
    });
    let shape = crate::openapi::Shape { base: &base, tasks: state.config.tasks.is_some(), bearer };
    let document = crate::openapi::document(&snapshot, &shape);
    (StatusCode::OK, [(header::CONTENT_TYPE, JSON), (header::CACHE_CONTROL, "no-store")], document.to_string())
        .into_response()
}

/// Whether the body is declared as JSON: exactly one `Content-Type` field, a media type (as the
/// `mime` crate parses it) whose essence is `application/json`, and every `charset` parameter
/// (if any) `utf-8` (case-insensitive, quoted or not).
fn is_json(headers: &HeaderMap) -> bool {
    let mut fields = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (fields.next(), fields.next()) else {
        return false;
    };
    let Some(media) = value.to_str().ok().and_then(|v| v.parse::<mime::Mime>().ok()) else {
        return false;
    };
    media.essence_str() == mime::APPLICATION_JSON.essence_str()
        && media.params().all(|(name, value)| name != "charset" || value == "utf-8")
}

/// Whether the body has no content coding: every `Content-Encoding` member is `identity`.
fn identity_coding(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().all(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').map(str::trim).filter(|c| !c.is_empty()).all(|c| c.eq_ignore_ascii_case("identity"))
        })
    })
}

/// Whether `id` can be an invocation id on this binding, as a decoded `Idempotency-Key` and a
/// body `invocationId` must be: the registry's rule for every transport.
fn valid_invocation_id(id: &str) -> bool {
    agent_surface_registry::is_valid_invocation_id(id)
}

/// The `Idempotency-Key` value (the registry's one rule for HTTP transports,
/// [`agent_surface_registry::idempotency_key_header`]).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ProtocolFault> {
    // Header names made once, here and below: looked up by a `&str`, a name is parsed on every
    // call.
    const NAME: HeaderName = HeaderName::from_static(IDEMPOTENCY_KEY);
    agent_surface_registry::idempotency_key_header(headers.get_all(NAME).iter().map(|v| v.as_bytes()))
        .map_err(|_| ProtocolFault::InvalidHeader)
}

/// How much of a body over the cap is still read (and dropped) before the `413` goes out, as a
/// multiple of the cap. A server that answers while the client is still sending and then closes
/// the connection makes the kernel reset it, and the client may lose the answer; reading the rest
/// of a moderately oversized body lets the `413` arrive. Past this much, the connection is
/// closed.
const DRAIN_FACTOR: usize = 4;

/// Reads the body, keeping at most `max` bytes, within `timeout`. Over the cap (declared or
/// counted), the rest is drained up to [`DRAIN_FACTOR`] × `max` more and the answer is
/// `body-too-large`.
async fn read_body(body: Body, declared: Option<u64>, max: usize, timeout: Duration) -> Result<Bytes, ProtocolFault> {
    use http_body_util::BodyExt;
    let drain_cap = max.saturating_mul(DRAIN_FACTOR).max(64 * 1024);
    if declared.is_some_and(|n| n > (max as u64).saturating_add(drain_cap as u64)) {
        // Far too large to be worth reading at all.
        return Err(ProtocolFault::BodyTooLarge);
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut body = body;
    let mut kept = Vec::new();
    let mut over = declared.is_some_and(|n| n > max as u64);
    let mut drained = 0usize;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if over => return Err(ProtocolFault::BodyTooLarge),
            Err(_) => return Err(ProtocolFault::RequestTimeout),
            Ok(None) => break,
            Ok(Some(Err(_))) if over => return Err(ProtocolFault::BodyTooLarge),
            Ok(Some(Err(_))) => return Err(ProtocolFault::MalformedJson),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        if !over && kept.len() + data.len() > max {
            over = true;
            kept = Vec::new();
        }
        if over {
            drained = drained.saturating_add(data.len());
            if drained > drain_cap {
                return Err(ProtocolFault::BodyTooLarge);
            }
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if over { Err(ProtocolFault::BodyTooLarge) } else { Ok(Bytes::from(kept)) }
}

async fn parse_request(headers: &HeaderMap, body: Body, config: &HttpConfig) -> Result<InvokeRequest, ProtocolFault> {
    if !is_json(headers) || !identity_coding(headers) {
        return Err(ProtocolFault::UnsupportedMediaType);
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let key = idempotency_key(headers)?;
    // Read only now, after the headers passed: at most `max_body_bytes`, within `body_timeout`.
    let body = read_body(body, declared, config.max_body_bytes, config.body_timeout).await?;
    // Two steps, so that the fault says which: not JSON at all (syntax, depth, encoding), or JSON
    // that is not an invoke request (including a member name repeated in one object).
    // A body of many tiny values is refused as too large before it is parsed: parsed, it would
    // take many times its size.
    let max_values = config.max_body_bytes / agent_surface_core::json::BYTES_PER_VALUE;
    let value = json::parse(&body, max_values).map_err(|e| match e {
        Strict::Malformed => ProtocolFault::MalformedJson,
        Strict::DuplicateMember => ProtocolFault::InvalidRequest,
        Strict::TooManyValues => ProtocolFault::BodyTooLarge,
    })?;
    if !value.is_object() {
        // serde would read a struct from an array too; the wire shape is an object.
        return Err(ProtocolFault::InvalidRequest);
    }
    let mut request: InvokeRequest = serde_json::from_value(value).map_err(|_| ProtocolFault::InvalidRequest)?;
    if request.invocation_id.as_deref().is_some_and(|id| !valid_invocation_id(id)) {
        return Err(ProtocolFault::InvalidRequest);
    }
    match (key, &request.invocation_id) {
        (Some(key), Some(id)) if &key != id => return Err(ProtocolFault::InvocationIdMismatch),
        (Some(key), _) => request.invocation_id = Some(key),
        (None, _) => {}
    }
    Ok(request)
}

/// The answer when the invoke task ended abnormally (a panic outside the pipeline's guard): for
/// a recorded call the `internal` fault, whose advice (send it again with the same
/// `Idempotency-Key`) returns what its record says; for a call without an invocation id, which
/// nothing recorded, `EXECUTION_FAILED {reason: outcome-unknown}` in-band, as the event stream
/// answers it ([`asynchronous::lost`]): the handler may have run, and a repeat would run it again.
fn invoke_task_failed(state: &AppState, tracked: bool, error: tokio::task::JoinError) -> Response {
    if tracked {
        return internal("the invoke task ended abnormally", &error);
    }
    answer(state, Invocation::new(asynchronous::lost(None, &error)))
}

/// The caller's W3C trace context from the `traceparent` and `tracestate` headers
/// ([`agent_surface_registry::trace`]). Whatever is invalid is ignored (a `DEBUG` event, never a
/// fault): a repeated `traceparent`, a value that is not visible ASCII, a malformed one. Repeated
/// `tracestate` fields are one list (RFC 9110 §5.3).
fn trace_parent(headers: &HeaderMap) -> Option<agent_surface_registry::TraceParent> {
    use agent_surface_registry::trace;
    const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    let mut parents = headers.get_all(TRACEPARENT).iter();
    let parent = parents.next()?;
    if parents.next().is_some() {
        trace::ignored("traceparent", "repeated");
        return None;
    }
    let Ok(parent) = parent.to_str() else {
        trace::ignored("traceparent", "not visible ASCII");
        return None;
    };
    let states = headers.get_all(TRACESTATE).iter().map(|v| v.to_str()).collect::<Result<Vec<_>, _>>();
    let state = match states {
        Ok(states) if states.is_empty() => None,
        Ok(states) => Some(states.join(",")),
        Err(_) => {
            trace::ignored("tracestate", "not visible ASCII");
            None
        }
    };
    agent_surface_registry::TraceParent::extract(Some(parent), state.as_deref())
}

/// The path under which this router's routes are reached from outside: the request's original
/// path (before a nesting router stripped its prefix) without `route`, the part after the
/// binding's prefix (`/invoke`). `/api` for `/api/invoke` nested at `/api`, or served with the
/// prefix `/api`.
pub(crate) fn public_base(parts: &http::request::Parts, route: &str) -> String {
    let path = parts.extensions.get::<axum::extract::OriginalUri>().map_or(parts.uri.path(), |o| o.0.path());
    path.strip_suffix(route).unwrap_or_default().to_string()
}

async fn invoke(State(state): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let base = public_base(&parts, "/invoke");
    let headers = parts.headers;
    // A refused caller gets its answer before the body is read.
    let identity = match authenticate(&state, &headers).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let request = match parse_request(&headers, body, &state.config).await {
        Ok(r) => r,
        Err(f) => {
            tracing::debug!(target: "agent_surface::http", kind = f.kind(), "protocol fault");
            let mut response = fault(f);
            if f == ProtocolFault::UnsupportedMediaType && !identity_coding(&headers) {
                // RFC 9110 §12.5.3: say which content codings are acceptable.
                response.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
            }
            return response;
        }
    };
    let consumer = match consumer(&state, &headers, identity) {
        Ok(c) => c,
        Err(f) => return fault(f),
    };
    // The call runs in its own task under a cancellation token that fires when this handler is
    // dropped (the client went away): the pipeline then ends it with `CANCELLED` and records it,
    // instead of being dropped mid-phase.
    let cancel = CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    let registry = state.registry.clone();
    let mut options = InvokeOptions::new(consumer).with_cancellation(cancel.clone()).with_transport("http");
    if let Some(parent) = trace_parent(&headers) {
        options = options.with_trace_parent(parent);
    }
    let plain = {
        let state = state.clone();
        let tracked = request.invocation_id.is_some();
        move |ended: Result<Invocation, tokio::task::JoinError>| match ended {
            Ok(invocation) => answer(&state, invocation),
            Err(e) => invoke_task_failed(&state, tracked, e),
        }
    };
    if let Some(tasks) = state
        .config
        .tasks
        .as_ref()
        .filter(|_| asynchronous::prefers_respond_async(&headers) && registry.is_long_running(&request.capability))
    {
        let _guard = guard;
        return asynchronous::start_task(tasks, &registry, &base, request, options, cancel, plain).await;
    }
    if asynchronous::prefers_event_stream(&headers) {
        return asynchronous::stream(registry, request, options, guard, state.config.sends, plain).await;
    }
    let _guard = guard;
    plain(tokio::spawn(async move { registry.invoke_detailed(request, options).await }).await)
}

/// The plain answer to a call: its status, headers and body.
fn answer(state: &AppState, invocation: Invocation) -> Response {
    let encoded = wire::encode(&invocation.result.worded_for(state.config.sends));
    let mut response = (encoded.status, [(header::CONTENT_TYPE, encoded.content_type)], encoded.body).into_response();
    // Printable ASCII by construction (an invocation id is, and so is a generated id).
    if let Ok(id) = HeaderValue::from_str(&invocation.correlation_id.to_string()) {
        response.headers_mut().insert(HeaderName::from_static(CORRELATION_ID), id);
    }
    if let Some(seconds) = encoded.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if encoded.status == StatusCode::UNAUTHORIZED {
        // RFC 9110 §11.6.1: a 401 always carries a challenge.
        let challenge = state
            .config
            .authenticator
            .as_ref()
            .and_then(|a| HeaderValue::from_str(a.challenge()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("Bearer"));
        response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// The caller of a task request and the clock reading, or the answer to a refused one.
async fn task_caller<'s>(
    state: &'s AppState,
    headers: &HeaderMap,
) -> Result<(&'s agent_surface_registry::tasks::Tasks, agent_surface_policy::Consumer), Response> {
    let identity = authenticate(state, headers).await?;
    let consumer = consumer(state, headers, identity).map_err(fault)?;
    // The routes exist only with a runtime.
    let tasks = state.config.tasks.as_ref().ok_or_else(|| fault(ProtocolFault::NotFound))?;
    Ok((tasks, consumer))
}

fn task_answer(answer: asynchronous::TaskAnswer) -> Response {
    match answer {
        asynchronous::TaskAnswer::View(response) => response,
        asynchronous::TaskAnswer::NotFound => fault(ProtocolFault::TaskNotFound),
        asynchronous::TaskAnswer::Internal(what) => internal(what, &"see the previous event"),
    }
}

async fn get_task(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let (tasks, consumer) = match task_caller(&state, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    // A segment that does not decode names no task.
    let Ok(Path(id)) = id else { return fault(ProtocolFault::TaskNotFound) };
    let now = state.registry.config().clock.now();
    task_answer(asynchronous::get_task(tasks, &id, &consumer, now, state.config.sends).await)
}

async fn cancel_task(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let (tasks, consumer) = match task_caller(&state, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let Ok(Path(id)) = id else { return fault(ProtocolFault::TaskNotFound) };
    let now = state.registry.config().clock.now();
    task_answer(asynchronous::cancel_task(tasks, &id, &consumer, now).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_normalized() {
        for (given, want) in [("", ""), ("/", ""), ("api", "/api"), ("/api/", "/api"), ("a/b//", "/a/b"), ("//", "")] {
            assert_eq!(normalize_prefix(given), want, "{given:?}");
        }
    }

    /// `Content-Type` as the `mime` crate parses it: essence `application/json`, any case, and
    /// every `charset` `utf-8`; one field only.
    #[test]
    fn json_bodies_are_recognized_by_their_media_type() {
        let headers = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        for good in [
            "application/json",
            "Application/JSON",
            "application/json; charset=UTF-8",
            "application/json;charset=\"utf-8\"",
            "application/json; q=1",
        ] {
            assert!(is_json(&headers(&[good])), "{good:?}");
        }
        for bad in [
            "",
            "application/jsonx",
            "application/problem+json",
            "text/json",
            "application/json; charset=latin1",
            "application/json; charset=utf-8; charset=latin1",
            "application/json; charset=\"utf-8",
            "application/json; charset",
            "application",
        ] {
            assert!(!is_json(&headers(&[bad])), "{bad:?}");
        }
        assert!(!is_json(&headers(&[])));
        assert!(!is_json(&headers(&["application/json", "application/json"])));
    }

    /// A recorded call's failed invoke task is the internal fault (its advice: send it again
    /// with the same key); a call without an id, which nothing recorded, is told that its outcome
    /// is unknown and that a repeat would run it again — never to send it again.
    #[tokio::test]
    async fn a_failed_invoke_task_is_the_internal_fault_or_an_unknown_outcome() {
        let failed = || async { tokio::spawn(async { panic!("boom") }).await.unwrap_err() };
        let state = AppState {
            registry: Registry::new(agent_surface_registry::RegistryConfig::default()),
            config: HttpConfig::default(),
        };
        let response = invoke_task_failed(&state, true, failed().await);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(body, ProtocolFault::Internal.body());

        let response = invoke_task_failed(&state, false, failed().await);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (&payload["code"], &payload["retry"]),
            (&serde_json::json!("EXECUTION_FAILED"), &serde_json::json!("no"))
        );
        assert_eq!(payload["details"]["reason"], "outcome-unknown");
        let message = payload["message"].as_str().unwrap();
        assert!(!message.contains("Idempotency-Key") && !message.contains("same invocationId"), "{message}");
    }
}
