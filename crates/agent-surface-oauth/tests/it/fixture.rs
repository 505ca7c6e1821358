//! Test keys (committed under `tests/keys`), tokens minted with them, and both transports
//! guarded by one resource server.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_oauth::{Jwks, ResourceServer, ResourceServerConfig};
use agent_surface_policy::{Policies, RequireRole};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub(crate) const RESOURCE: &str = "http://localhost/mcp";
pub(crate) const ISSUER: &str = "https://id.example";
pub(crate) const METADATA_URL: &str = "http://localhost/.well-known/oauth-protected-resource/mcp";

pub(crate) fn key_file(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/keys/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

pub(crate) fn jwks_json() -> String {
    String::from_utf8(key_file("jwks.json")).unwrap()
}

/// A signing key and the `kid` its public half has in `jwks.json`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Signer {
    Rsa,
    Ec,
    Ed,
    /// Another RSA key, not in the JWKS, that claims `rsa-1`.
    Impostor,
}

impl Signer {
    fn parts(self) -> (Algorithm, &'static str, EncodingKey) {
        match self {
            Signer::Rsa => (Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&key_file("rsa.pem")).unwrap()),
            Signer::Ec => (Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(&key_file("ec.pem")).unwrap()),
            Signer::Ed => (Algorithm::EdDSA, "ed-1", EncodingKey::from_ed_pem(&key_file("ed25519.pem")).unwrap()),
            Signer::Impostor => {
                (Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&key_file("rsa-other.pem")).unwrap())
            }
        }
    }
}

pub(crate) fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Valid claims for [`RESOURCE`]: subject `alice`, scopes `shop orders`, role `admin`.
pub(crate) fn claims() -> Value {
    json!({
        "iss": ISSUER,
        "aud": RESOURCE,
        "sub": "alice",
        "iat": now(),
        "exp": now() + 600,
        "scope": "shop orders",
        "roles": ["admin"],
    })
}

/// `claims` with `changes` merged in (`null` removes a member).
pub(crate) fn with(changes: Value) -> Value {
    let mut claims = claims();
    for (k, v) in changes.as_object().unwrap() {
        if v.is_null() {
            claims.as_object_mut().unwrap().remove(k);
        } else {
            claims[k] = v.clone();
        }
    }
    claims
}

pub(crate) fn mint(signer: Signer, claims: &Value) -> String {
    let (alg, kid, key) = signer.parts();
    mint_with(Header { kid: Some(kid.into()), ..Header::new(alg) }, claims, &key)
}

pub(crate) fn mint_with(header: Header, claims: &Value, key: &EncodingKey) -> String {
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// An unsigned token (`alg: none`), as an attacker writes it by hand.
pub(crate) fn unsigned(claims: &Value) -> String {
    let header = base64_url(br#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#);
    format!("{header}.{}.", base64_url(claims.to_string().as_bytes()))
}

/// Unpadded base64url.
pub(crate) fn base64_url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

pub(crate) fn config() -> ResourceServerConfig {
    ResourceServerConfig {
        resource: RESOURCE.into(),
        authorization_servers: vec![ISSUER.into()],
        jwks: Jwks::from_json(&jwks_json()).unwrap(),
        required_scopes: vec!["shop".into()],
        ..Default::default()
    }
}

pub(crate) fn resource_server() -> Arc<ResourceServer> {
    Arc::new(ResourceServer::new(config()).unwrap())
}

/// `echo.say` for anyone the transport admits; `admin.purge` for the `admin` role only.
pub(crate) fn registry() -> Registry {
    let policies = Policies::new().for_type("admin", RequireRole::new("admin"));
    let registry = Registry::new(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    registry
        .define("echo", |t| {
            t.capability("say", "Echoes the text.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                None,
                |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"said": input["text"]})) },
            );
        })
        .unwrap();
    registry
        .define("admin", |t| {
            t.capability("purge", "Purges.").effect(Effect::Read).raw_handler(
                json!({"type": "object"}),
                None,
                |_ctx: Ctx, _input: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("echo", "main").unwrap());
    std::mem::forget(registry.mount("admin", "main").unwrap());
    registry
}

/// Which transport a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Mcp,
    Binding,
}

/// The MCP transport at `/mcp` and the binding under `/api`, both guarded by `oauth`, with its
/// metadata at the root: one app, as a service would mount them.
pub(crate) fn app(oauth: Arc<ResourceServer>) -> axum::Router {
    let registry = registry();
    let mcp = agent_surface_mcp::McpConfig { authenticator: Some(oauth.clone()), ..Default::default() };
    let api = agent_surface_http::HttpConfig { authenticator: Some(oauth.clone()), ..Default::default() };
    agent_surface_mcp::http::router(registry.clone(), mcp, &Default::default(), CancellationToken::new())
        .nest("/api", agent_surface_http::router(registry, api))
        .merge(oauth.metadata_router())
}

/// An answer: status, `WWW-Authenticate` (if any), content type and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) challenge: Option<String>,
    pub(crate) content_type: Option<String>,
    pub(crate) body: String,
}

/// One request: an MCP `initialize` (legacy era) or the binding's `GET /api/capabilities`,
/// with `authorization` as the `Authorization` value.
pub(crate) async fn send(app: &axum::Router, transport: Transport, authorization: Option<&str>) -> Answer {
    let builder = match transport {
        Transport::Mcp => http::Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream"),
        Transport::Binding => http::Request::get("/api/capabilities"),
    };
    let builder = builder.header("host", "localhost");
    let builder = match authorization {
        Some(value) => builder.header("authorization", value),
        None => builder,
    };
    let body = match transport {
        Transport::Mcp => json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
        .to_string(),
        Transport::Binding => String::new(),
    };
    request(app, builder.body(axum::body::Body::from(body)).unwrap()).await
}

pub(crate) async fn request(app: &axum::Router, request: http::Request<axum::body::Body>) -> Answer {
    use http_body_util::BodyExt;
    let response = app.clone().oneshot(request).await.unwrap();
    let header = |name: http::header::HeaderName| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    let (status, challenge, content_type) =
        (response.status().as_u16(), header(http::header::WWW_AUTHENTICATE), header(http::header::CONTENT_TYPE));
    // An accepted MCP `initialize` may answer as an event stream that stays open: read its first
    // frame only.
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Ok(Some(Ok(frame))) = tokio::time::timeout(Duration::from_secs(5), body.frame()).await {
        if let Ok(data) = frame.into_data() {
            bytes.extend_from_slice(&data);
            if content_type.as_deref() == Some("text/event-stream") && !bytes.is_empty() {
                break;
            }
        }
    }
    Answer { status, challenge, content_type, body: String::from_utf8_lossy(&bytes).into_owned() }
}
