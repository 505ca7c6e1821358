//! The axum router: `GET {prefix}/capabilities` and `POST {prefix}/invoke`.

use std::sync::Arc;

use agent_surface_registry::{InvokeOptions, InvokeRequest, Registry};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Authenticator};
use crate::wire::{self, JSON, PROBLEM_JSON, ProtocolFault};

/// The header that carries the invocation id (draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The default consumer header: names one caller's session within its identity.
pub const CONSUMER_HEADER: &str = "agent-surface-consumer";

/// How the binding serves.
#[derive(Clone)]
pub struct HttpConfig {
    /// Where the routes are mounted (`""` or `/api`: no trailing slash).
    pub prefix: String,
    /// The largest request body, in bytes (default 1 MiB); a larger body is `413`.
    pub max_body_bytes: usize,
    /// The header naming the caller's session; see [`crate`] for the consumer key.
    pub consumer_header: HeaderName,
    /// Turns headers into an identity; `None`: every caller is anonymous.
    pub authenticator: Option<Arc<dyn Authenticator>>,
    /// Accepted `Host` names (the port is ignored); the default admits loopback only, which
    /// protects a local server against DNS rebinding. Empty: any host. Another host is a `403`
    /// protocol fault.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            prefix: String::new(),
            max_body_bytes: 1024 * 1024,
            consumer_header: HeaderName::from_static(CONSUMER_HEADER),
            authenticator: None,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
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
            .field("consumer_header", &self.consumer_header)
            .field("authenticator", &self.authenticator.is_some())
            .field("allowed_hosts", &self.allowed_hosts)
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

fn method_not_allowed(allow: &'static str) -> MethodRouter<Shared> {
    MethodRouter::new().fallback(move || async move {
        let mut response = fault(ProtocolFault::MethodNotAllowed);
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
        response
    })
}

/// The binding's router for `registry`: `GET {prefix}/capabilities` answers the caller's
/// snapshot, `POST {prefix}/invoke` runs one call. Every other path is a `404` protocol fault,
/// every other method a `405` one.
pub fn router(registry: Registry, config: HttpConfig) -> Router {
    let prefix = config.prefix.trim_end_matches('/').to_string();
    let state = Arc::new(AppState { registry, config });
    Router::new()
        .route(&format!("{prefix}/capabilities"), get(capabilities).merge(method_not_allowed("GET, HEAD")))
        .route(&format!("{prefix}/invoke"), post(invoke).merge(method_not_allowed("POST")))
        .fallback(|| async { fault(ProtocolFault::NotFound) })
        .with_state(state)
}

/// Serves `registry` on `listener` until `shutdown` is cancelled.
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
    axum::serve(listener, router(registry, config)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

/// Whether the `Host` header names an allowed host (port ignored).
fn host_allowed(config: &HttpConfig, headers: &HeaderMap) -> bool {
    if config.allowed_hosts.is_empty() {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    };
    config.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// The consumer of a request, or the fault its headers make.
async fn consumer(state: &AppState, headers: &HeaderMap) -> Result<agent_surface_policy::Consumer, ProtocolFault> {
    if !host_allowed(&state.config, headers) {
        return Err(ProtocolFault::HostNotAllowed);
    }
    let session = match headers.get(&state.config.consumer_header) {
        None => None,
        Some(v) => match v.to_str() {
            Ok(s) if auth::valid_session(s) => Some(s),
            _ => return Err(ProtocolFault::InvalidHeader),
        },
    };
    let identity = match &state.config.authenticator {
        Some(a) => a.authenticate(headers).await,
        None => None,
    };
    Ok(auth::consumer(identity, session))
}

async fn capabilities(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let consumer = match consumer(&state, &headers).await {
        Ok(c) => c,
        Err(f) => return fault(f),
    };
    let snapshot = state.registry.snapshot(&consumer).await;
    match serde_json::to_string(&snapshot) {
        Ok(body) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, JSON), (header::CACHE_CONTROL, "no-store")], body).into_response()
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(JSON)
}

/// The `Idempotency-Key` value: a bare token or a structured-field string (`"…"`), 1 to 255
/// visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ProtocolFault> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let raw = value.to_str().map_err(|_| ProtocolFault::InvalidHeader)?.trim();
    let key = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw);
    if (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(Some(key.to_string()))
    } else {
        Err(ProtocolFault::InvalidHeader)
    }
}

async fn parse_request(headers: &HeaderMap, body: Body, max_body_bytes: usize) -> Result<InvokeRequest, ProtocolFault> {
    if !is_json(headers) {
        return Err(ProtocolFault::UnsupportedMediaType);
    }
    // A declared length over the cap is refused before anything is read.
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes as u64) {
        return Err(ProtocolFault::BodyTooLarge);
    }
    // Read only now, after the headers passed: at most `max_body_bytes`. A failure is the cap
    // (http-body-util's `LengthLimitError`, "length limit exceeded") or a broken body.
    let body: Bytes = axum::body::to_bytes(body, max_body_bytes).await.map_err(|e| {
        if e.to_string().contains("length limit exceeded") {
            ProtocolFault::BodyTooLarge
        } else {
            ProtocolFault::MalformedJson
        }
    })?;
    // Two steps, so that the fault says which: not JSON at all (syntax, depth, encoding), or JSON
    // that is not an invoke request.
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|_| ProtocolFault::MalformedJson)?;
    if !value.is_object() {
        // serde would read a struct from an array too; the wire shape is an object.
        return Err(ProtocolFault::InvalidRequest);
    }
    let mut request: InvokeRequest = serde_json::from_value(value).map_err(|_| ProtocolFault::InvalidRequest)?;
    match (idempotency_key(headers)?, &request.invocation_id) {
        (Some(key), Some(id)) if &key != id => return Err(ProtocolFault::InvocationIdMismatch),
        (Some(key), _) => request.invocation_id = Some(key),
        (None, _) => {}
    }
    Ok(request)
}

async fn invoke(State(state): State<Shared>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if !host_allowed(&state.config, &headers) {
        return fault(ProtocolFault::HostNotAllowed);
    }
    let request = match parse_request(&headers, body, state.config.max_body_bytes).await {
        Ok(r) => r,
        Err(f) => {
            tracing::debug!(target: "agent_surface::http", kind = f.kind(), "protocol fault");
            return fault(f);
        }
    };
    let consumer = match consumer(&state, &headers).await {
        Ok(c) => c,
        Err(f) => return fault(f),
    };
    // The call runs in its own task under a cancellation token that fires when this handler is
    // dropped (the client went away): the pipeline then ends it with `CANCELLED` and records it,
    // instead of being dropped mid-phase.
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let registry = state.registry.clone();
    let options = InvokeOptions::new(consumer).with_cancellation(cancel);
    let result = match tokio::spawn(async move { registry.invoke(request, options).await }).await {
        Ok(result) => result,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let encoded = wire::encode(&result);
    let mut response = (encoded.status, [(header::CONTENT_TYPE, encoded.content_type)], encoded.body).into_response();
    if let Some(seconds) = encoded.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if encoded.status == StatusCode::UNAUTHORIZED {
        let challenge = state.config.authenticator.as_ref().map_or("Bearer", |a| a.challenge());
        if let Ok(v) = HeaderValue::from_str(challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    response
}
