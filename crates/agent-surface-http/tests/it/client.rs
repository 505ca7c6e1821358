//! A minimal HTTP/1.1 client over `tokio::net::TcpStream` and a test registry served on
//! `127.0.0.1:0`.

use std::net::SocketAddr;
use std::time::Duration;

use agent_surface_core::AgentSurfaceError;
use agent_surface_core::Effect;
use agent_surface_core::details::RateLimitReason;
use agent_surface_http::{BearerTokens, HttpConfig};
use agent_surface_policy::Identity;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) registry: Registry,
    shutdown: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `echo.say {text}` answers `{said}`; `fail.with {kind}` returns a handler error of that kind.
pub(crate) fn registry() -> Registry {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("echo", |t| {
            t.capability("say", "Echoes the text.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false}),
                None,
                |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"said": input["text"]})) },
            );
        })
        .unwrap();
    registry
        .define("fail", |t| {
            t.capability("with", "Fails as asked.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}),
                None,
                |_ctx: Ctx, input: Value| async move {
                    Err::<Value, _>(match input["kind"].as_str() {
                        Some("rate") => {
                            AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1200))
                        }
                        Some("auth") => AgentSurfaceError::not_authenticated(),
                        Some("secret") => AgentSurfaceError::internal(std::io::Error::other(
                            "SELECT * FROM users WHERE token='sk-live-123' at postgres://db.internal:5432",
                        )),
                        _ => AgentSurfaceError::handler_failed("The operation failed. Do not retry it."),
                    })
                },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("echo", "main").unwrap());
    std::mem::forget(registry.mount("fail", "main").unwrap());
    registry
}

pub(crate) async fn start(mut config: HttpConfig) -> Server {
    if config.authenticator.is_none() {
        config.authenticator =
            Some(std::sync::Arc::new(BearerTokens::new([("t-sam", Identity::new("sam").with_role("support"))])));
    }
    start_as_configured(config).await
}

/// Like [`start`], but `config` is used as given (no authenticator added).
pub(crate) async fn start_as_configured(config: HttpConfig) -> Server {
    let registry = registry();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(agent_surface_http::serve(registry.clone(), config, listener, shutdown.clone()));
    Server { addr, registry, shutdown }
}

#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Asserts a protocol fault of `kind` with `status`.
    #[track_caller]
    pub(crate) fn assert_fault(&self, status: u16, kind: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.header("content-type"), Some("application/problem+json"));
        let v = self.json();
        assert_eq!(v["type"], format!("urn:agent-surface:protocol:{kind}"), "{self:?}");
        assert_eq!(v["status"], status);
        assert!(v.get("code").is_none(), "a protocol fault never has a code: {self:?}");
    }
}

/// Sends one request (`Connection: close`) and reads the whole response.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    exchange(addr, "127.0.0.1", method, path, headers, body).await
}

/// A bodiless request with another `Host`.
pub(crate) async fn send_as(addr: SocketAddr, host: &str, method: &str, path: &str) -> Response {
    exchange(addr, host, method, path, &[], b"").await
}

async fn exchange(
    addr: SocketAddr,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    send_raw(addr, &bytes).await
}

/// Writes `bytes` as they are (the whole request, head and body) and reads the response.
///
/// The write side stays open: the server (hyper without half-close) takes an end of input while
/// a request is in progress for a client that went away and drops the call, so a half-close here
/// would race the answer.
pub(crate) async fn send_raw(addr: SocketAddr, bytes: &[u8]) -> Response {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer (413) before reading everything; a failed write is not the test's
    // business, the response is.
    let (mut read, mut write) = stream.split();
    let writer = async {
        let _ = write.write_all(bytes).await;
    };
    let mut raw = Vec::new();
    let reader = async {
        let _ = read.read_to_end(&mut raw).await;
    };
    tokio::join!(writer, reader);
    parse_response(&raw)
}

/// Parses a whole HTTP/1.1 response (no chunked decoding: the binding sends lengths).
pub(crate) fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response: {text:?}"));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Response { status, headers, body: body.to_string() }
}

/// `POST {path}` with a JSON body.
pub(crate) async fn post_json(addr: SocketAddr, path: &str, extra: &[(&str, &str)], body: &str) -> Response {
    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend_from_slice(extra);
    send(addr, "POST", path, &headers, body.as_bytes()).await
}
