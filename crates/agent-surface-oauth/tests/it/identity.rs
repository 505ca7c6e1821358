//! What policies see: the identity a valid token maps to, and what the operator log learns
//! about a refused one.

use agent_surface_policy::Authenticator;
use serde_json::json;

use crate::fixture::{ISSUER, Signer, claims, mint, resource_server, with};

fn headers(token: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
    headers
}

#[tokio::test]
async fn claims_map_to_the_identity() {
    let oauth = resource_server();
    let token =
        mint(Signer::Ec, &with(json!({"scope": "shop orders shop", "roles": ["admin", "orders"], "tenant": "t1"})));
    let identity = oauth.try_authenticate(&headers(&token)).await.unwrap().unwrap();
    assert_eq!(identity.subject, "alice");
    // `roles` only, by default: a scope is what the client asked for.
    assert_eq!(identity.roles, ["admin", "orders"]);
    assert_eq!(identity.claims["iss"], ISSUER);
    assert_eq!(identity.claims["tenant"], "t1");
    // Keyed on (iss, sub) by the MCP adapter.
    assert_eq!(agent_surface_mcp::principal_key(&identity), r#"principal:["https://id.example","alice"]"#);
    // `authenticate` (never rejecting) gives the same identity, and nothing for a bad token.
    assert_eq!(oauth.authenticate(&headers(&token)).await, Some(identity));
    assert_eq!(oauth.authenticate(&headers("x.y.z")).await, None);
}

/// Scopes are not roles by default (a client that asks for the `approver` scope must not become
/// an approver); a service whose authorization server grants scopes per person names them, and
/// an `scp` array (as some identity providers write scopes) counts as `scope` does.
#[tokio::test]
async fn scopes_become_roles_only_when_named() {
    let token = mint(Signer::Rsa, &with(json!({"scope": "shop approver", "scp": ["orders.read", "shop"]})));
    let identity = resource_server().try_authenticate(&headers(&token)).await.unwrap().unwrap();
    assert_eq!(identity.roles, ["admin"], "the fixture's roles alone");
    let named = ["scope", "scp", "roles"].map(String::from).to_vec();
    let config = agent_surface_oauth::ResourceServerConfig { role_claims: named, ..crate::fixture::config() };
    let oauth = agent_surface_oauth::ResourceServer::new(config).unwrap();
    let identity = oauth.try_authenticate(&headers(&token)).await.unwrap().unwrap();
    assert_eq!(identity.roles, ["shop", "approver", "orders.read", "admin"], "scope, then scp, then roles");
}

#[tokio::test]
async fn role_claims_are_configurable() {
    let config =
        agent_surface_oauth::ResourceServerConfig { role_claims: vec!["groups".into()], ..crate::fixture::config() };
    let oauth = agent_surface_oauth::ResourceServer::new(config).unwrap();
    let token = mint(Signer::Rsa, &with(json!({"groups": ["ops", "dev"]})));
    let identity = oauth.try_authenticate(&headers(&token)).await.unwrap().unwrap();
    assert_eq!(identity.roles, ["ops", "dev"]);
}

#[test]
fn the_operator_log_gets_the_reason_never_the_token() {
    let oauth = resource_server();
    let token = mint(Signer::Rsa, &with(json!({"exp": crate::fixture::now() - 3600})));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (refused, log) = agent_surface_testing::capture_operator_log(|| {
        runtime.block_on(oauth.try_authenticate(&headers(&token))).unwrap_err()
    });
    assert_eq!(refused.status(), 401);
    assert!(log.contains("agent_surface::auth") && log.contains("expired"), "{log}");
    for part in token.split('.') {
        assert!(!log.contains(part), "{log}");
    }
    let _ = claims();
}

/// Several authorization servers share one key set, and a subject is one person whichever of them
/// issued it: the construction says so on the operator channel, once, and keeps it for a log
/// installed later when nothing records it yet (the guide builds this before `Serve` installs
/// the log); one issuer says nothing.
#[test]
fn several_issuers_are_reported_at_construction() {
    let several = agent_surface_oauth::ResourceServerConfig {
        authorization_servers: vec![crate::fixture::ISSUER.into(), "https://other-idp.example".into()],
        ..crate::fixture::config()
    };
    let (built, log) =
        agent_surface_testing::capture_operator_log(|| agent_surface_oauth::ResourceServer::new(several.clone()));
    assert!(built.is_ok());
    assert_eq!(log.matches("several authorization servers (2) share one key set").count(), 1, "{log}");
    // The only test of this binary that takes the kept warnings.
    let unrecorded = |warnings: Vec<String>| warnings.iter().filter(|w| w.contains("share one key set")).count();
    assert_eq!(unrecorded(agent_surface_policy::wiring::take_unrecorded()), 0, "recorded, so not kept");
    let nobody = tracing::subscriber::NoSubscriber::default();
    let built = tracing::subscriber::with_default(nobody, || agent_surface_oauth::ResourceServer::new(several));
    assert!(built.is_ok());
    assert_eq!(unrecorded(agent_surface_policy::wiring::take_unrecorded()), 1);
    let (_, log) = agent_surface_testing::capture_operator_log(|| {
        agent_surface_oauth::ResourceServer::new(crate::fixture::config())
    });
    assert!(!log.contains("several authorization servers"), "{log}");
}

/// Configurations that would refuse every valid token, accept keys an attacker on the way could
/// swap, or panic at the first token are refused when the resource server is built.
#[test]
fn keys_that_cannot_serve_are_refused_at_construction() {
    use agent_surface_oauth::{ConfigError, FetchError, Jwks, RemoteJwks, ResourceServer, ResourceServerConfig};
    use futures_util::future::BoxFuture;
    use std::sync::Arc;

    let none = ResourceServerConfig { jwks: Jwks::default(), ..crate::fixture::config() };
    assert_eq!(ResourceServer::new(none).unwrap_err(), ConfigError::NoKeys);
    let fetch = |_: &str| -> BoxFuture<'static, Result<Vec<u8>, FetchError>> { Box::pin(async { Ok(Vec::new()) }) };
    let remote = |url: &str| ResourceServerConfig {
        jwks: Jwks::remote(RemoteJwks::new(url, Arc::new(fetch))),
        ..crate::fixture::config()
    };
    for insecure in ["http://id.example/jwks", "ftp://id.example/jwks", "id.example/jwks"] {
        assert_eq!(ResourceServer::new(remote(insecure)).unwrap_err(), ConfigError::InsecureJwksUrl, "{insecure}");
    }
    for fine in ["https://id.example/jwks", "http://127.0.0.1:9/jwks", "http://localhost/jwks", "http://[::1]/jwks"] {
        assert!(ResourceServer::new(remote(fine)).is_ok(), "{fine}");
    }
}
