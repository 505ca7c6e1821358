//! A test registry served on `127.0.0.1:0`, and the testing kit's HTTP/1.1 client
//! (`agent_surface_testing::http`) with the binding's own checks.

use std::net::SocketAddr;
use std::time::Duration;

use agent_surface_core::AgentSurfaceError;
use agent_surface_core::Effect;
use agent_surface_core::details::RateLimitReason;
use agent_surface_http::{BearerTokens, HttpConfig};
use agent_surface_policy::Identity;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};
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

pub(crate) use agent_surface_testing::http::{Response, parse_response, post_json, send_raw};

/// What the binding's tests check of a response beyond the kit's [`Response`].
pub(crate) trait ResponseExt {
    /// Asserts a protocol fault of `kind` with `status`.
    fn assert_fault(&self, status: u16, kind: &str);
}

impl ResponseExt for Response {
    #[track_caller]
    fn assert_fault(&self, status: u16, kind: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.header("content-type"), Some("application/problem+json"));
        let v = self.json();
        assert_eq!(v["type"], format!("urn:agent-surface:protocol:{kind}"), "{self:?}");
        assert_eq!(v["status"], status);
        assert!(v.get("code").is_none(), "a protocol fault never has a code: {self:?}");
    }
}

/// Sends one request (`Connection: close`) and reads the whole response (the testing kit's
/// client, which never half-closes its write side).
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    agent_surface_testing::http::request(addr, method, path, headers, body).await
}

/// A bodiless request with another `Host`.
pub(crate) async fn send_as(addr: SocketAddr, host: &str, method: &str, path: &str) -> Response {
    agent_surface_testing::http::request(addr, method, path, &[("Host", host)], b"").await
}
