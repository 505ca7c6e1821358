//! Every token case, on the MCP transport and on the HTTP binding: the status, the exact
//! `WWW-Authenticate`, a body that names nothing of the token; the metadata document; in-band
//! refusals left to the pipeline.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::fixture::{
    Answer, METADATA_URL, Signer, Transport, app, claims, key_file, mint, mint_with, now, resource_server, send,
    unsigned, with,
};

const MISSING: &str = r#"Bearer resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp""#;
const INVALID: &str = r#"Bearer error="invalid_token", error_description="The access token is not valid for this resource.", resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp""#;
const SCOPE: &str = r#"Bearer error="insufficient_scope", scope="shop", resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp""#;

/// What a case expects: admitted, or refused with this status and challenge.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Admitted,
    Refused(u16, &'static str),
}

#[track_caller]
fn check_answer(transport: Transport, case: &str, token: Option<&str>, answer: &Answer, expect: Expect) {
    let at = format!("{transport:?} / {case}: {answer:?}");
    match expect {
        Expect::Admitted => assert_eq!(answer.status, 200, "{at}"),
        Expect::Refused(status, challenge) => {
            assert_eq!(answer.status, status, "{at}");
            assert_eq!(answer.challenge.as_deref(), Some(challenge), "{at}");
            let body: Value = serde_json::from_str(&answer.body).expect(&at);
            match transport {
                // Only `error` and `error_description`, fixed texts.
                Transport::Mcp => {
                    assert_eq!(answer.content_type.as_deref(), Some("application/json"), "{at}");
                    let error = if status == 403 {
                        Some("insufficient_scope")
                    } else if challenge == INVALID {
                        Some("invalid_token")
                    } else {
                        None
                    };
                    assert_eq!(body.get("error").and_then(Value::as_str), error, "{at}");
                    assert!(body["error_description"].is_string(), "{at}");
                    assert_eq!(body.as_object().unwrap().len(), 1 + usize::from(error.is_some()), "{at}");
                }
                // The binding's protocol fault: a problem without `code`.
                Transport::Binding => {
                    assert_eq!(answer.content_type.as_deref(), Some("application/problem+json"), "{at}");
                    let kind = if status == 403 { "insufficient-scope" } else { "unauthorized" };
                    assert_eq!(body["type"], format!("urn:agent-surface:protocol:{kind}"), "{at}");
                    assert!(body.get("code").is_none(), "{at}");
                }
            }
            if let Some(token) = token {
                for part in token.split(['.', ' ']).filter(|p| p.len() > 8) {
                    assert!(!answer.body.contains(part), "{at}: the body echoes the token");
                }
            }
        }
    }
}

/// `(case, Authorization value, expectation)` for every case.
fn cases() -> Vec<(&'static str, Option<String>, Expect)> {
    use Expect::{Admitted, Refused};
    let bearer = |t: String| Some(format!("Bearer {t}"));
    let public_pem = key_file("rsa.pub.pem");
    vec![
        ("valid RS256", bearer(mint(Signer::Rsa, &claims())), Admitted),
        ("valid ES256", bearer(mint(Signer::Ec, &claims())), Admitted),
        ("valid EdDSA", bearer(mint(Signer::Ed, &claims())), Admitted),
        ("scheme name in lower case", Some(format!("bearer {}", mint(Signer::Ed, &claims()))), Admitted),
        (
            "aud as an array naming the resource",
            bearer(mint(Signer::Rsa, &with(json!({"aud": ["other", crate::fixture::RESOURCE]})))),
            Admitted,
        ),
        ("expired 30 s ago, within the leeway", bearer(mint(Signer::Rsa, &with(json!({"exp": now() - 30})))), Admitted),
        ("no token", None, Refused(401, MISSING)),
        ("another scheme", Some("Basic YWxpY2U6cHc=".into()), Refused(401, MISSING)),
        ("not a jwt", bearer("not-a-jwt".into()), Refused(401, INVALID)),
        ("expired", bearer(mint(Signer::Rsa, &with(json!({"exp": now() - 120})))), Refused(401, INVALID)),
        ("not yet valid", bearer(mint(Signer::Rsa, &with(json!({"nbf": now() + 300})))), Refused(401, INVALID)),
        (
            "wrong audience",
            bearer(mint(Signer::Rsa, &with(json!({"aud": "http://localhost/other"})))),
            Refused(401, INVALID),
        ),
        ("no audience", bearer(mint(Signer::Rsa, &with(json!({"aud": null})))), Refused(401, INVALID)),
        (
            "wrong issuer",
            bearer(mint(Signer::Rsa, &with(json!({"iss": "https://evil.example"})))),
            Refused(401, INVALID),
        ),
        (
            "issuer array smuggling the right one",
            bearer(mint(Signer::Rsa, &with(json!({"iss": ["https://evil.example", crate::fixture::ISSUER]})))),
            Refused(401, INVALID),
        ),
        ("no subject", bearer(mint(Signer::Rsa, &with(json!({"sub": null})))), Refused(401, INVALID)),
        ("no expiry", bearer(mint(Signer::Rsa, &with(json!({"exp": null})))), Refused(401, INVALID)),
        (
            "bad signature (another key claiming rsa-1)",
            bearer(mint(Signer::Impostor, &claims())),
            Refused(401, INVALID),
        ),
        ("alg none", bearer(unsigned(&claims())), Refused(401, INVALID)),
        (
            "HS256 keyed with the public key (algorithm confusion)",
            bearer(mint_with(
                Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::HS256) },
                &claims(),
                &EncodingKey::from_secret(&public_pem).unwrap(),
            )),
            Refused(401, INVALID),
        ),
        (
            "unknown kid",
            bearer(mint_with(
                Header { kid: Some("rsa-9".into()), ..Header::new(Algorithm::RS256) },
                &claims(),
                &EncodingKey::from_rsa_pem(&key_file("rsa.pem")).unwrap(),
            )),
            Refused(401, INVALID),
        ),
        (
            "a key used with another algorithm than its JWK's (RS256 key as PS256)",
            bearer(mint_with(
                Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::PS256) },
                &claims(),
                &EncodingKey::from_rsa_pem(&key_file("rsa.pem")).unwrap(),
            )),
            Refused(401, INVALID),
        ),
        ("missing scope", bearer(mint(Signer::Rsa, &with(json!({"scope": "orders"})))), Refused(403, SCOPE)),
        ("no scope at all", bearer(mint(Signer::Ed, &with(json!({"scope": null})))), Refused(403, SCOPE)),
    ]
}

#[tokio::test]
async fn every_token_case_on_both_transports() {
    let app = app(resource_server());
    for transport in [Transport::Mcp, Transport::Binding] {
        for (case, authorization, expect) in cases() {
            let answer = send(&app, transport, authorization.as_deref()).await;
            let token = authorization.as_deref().and_then(|a| a.split_once(' ')).map(|(_, t)| t);
            check_answer(transport, case, token, &answer, expect);
        }
    }
}

#[tokio::test]
async fn two_authorization_fields_are_an_invalid_token() {
    let app = app(resource_server());
    let token = format!("Bearer {}", mint(Signer::Rsa, &claims()));
    for transport in [Transport::Mcp, Transport::Binding] {
        let uri = if transport == Transport::Mcp { "/mcp" } else { "/api/capabilities" };
        let request = http::Request::get(uri)
            .header("host", "localhost")
            .header("authorization", &token)
            .header("authorization", &token)
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = crate::fixture::request(&app, request).await;
        assert_eq!((answer.status, answer.challenge.as_deref()), (401, Some(INVALID)), "{transport:?}");
    }
}

#[tokio::test]
async fn every_method_of_the_mcp_endpoint_needs_a_token() {
    let app = app(resource_server());
    for method in ["GET", "DELETE", "POST"] {
        let request = http::Request::builder()
            .method(method)
            .uri("/mcp")
            .header("host", "localhost")
            .header("mcp-session-id", "anything")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = crate::fixture::request(&app, request).await;
        assert_eq!((answer.status, answer.challenge.as_deref()), (401, Some(MISSING)), "{method}");
    }
}

/// A host the server does not answer to is refused before the token is asked for, on both
/// transports: a client is never sent to sign in by a server that would then refuse its host.
#[tokio::test]
async fn a_foreign_host_is_refused_before_the_token() {
    let app = app(resource_server());
    let token = format!("Bearer {}", mint(Signer::Rsa, &claims()));
    for (uri, authorization) in [("/mcp", None), ("/mcp", Some(token.as_str())), ("/api/capabilities", None)] {
        let mut request = http::Request::get(uri).header("host", "evil.example");
        if let Some(a) = authorization {
            request = request.header("authorization", a);
        }
        let answer = crate::fixture::request(&app, request.body(axum::body::Body::empty()).unwrap()).await;
        assert_eq!((answer.status, answer.challenge.as_deref()), (403, None), "{uri} {authorization:?}");
    }
}

#[tokio::test]
async fn the_binding_refuses_before_reading_the_body() {
    // A body that is not JSON at all: the 401 comes first.
    let app = app(resource_server());
    let request = http::Request::post("/api/invoke")
        .header("host", "localhost")
        .header("content-type", "text/plain")
        .body(axum::body::Body::from("garbage"))
        .unwrap();
    let answer = crate::fixture::request(&app, request).await;
    assert_eq!((answer.status, answer.challenge.as_deref()), (401, Some(MISSING)));
}

#[tokio::test]
async fn the_metadata_document_is_served_at_the_path_suffixed_well_known_uri() {
    let app = app(resource_server());
    let request =
        http::Request::get("/.well-known/oauth-protected-resource/mcp").body(axum::body::Body::empty()).unwrap();
    let answer = crate::fixture::request(&app, request).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    let document: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        document,
        json!({
            "resource": "http://localhost/mcp",
            "authorization_servers": ["https://id.example"],
            "scopes_supported": ["shop"],
            "bearer_methods_supported": ["header"],
        })
    );
    // The challenges name it by absolute URL.
    assert!(MISSING.contains(METADATA_URL));
}

#[test]
fn a_resource_at_the_root_has_its_metadata_at_the_root() {
    let config = agent_surface_oauth::ResourceServerConfig {
        resource: "https://shop.example/".into(),
        ..crate::fixture::config()
    };
    let server = agent_surface_oauth::ResourceServer::new(config).unwrap();
    assert_eq!(server.metadata_path(), "/.well-known/oauth-protected-resource");
    assert_eq!(server.metadata_url(), "https://shop.example/.well-known/oauth-protected-resource");
}

/// URL parsers write a root resource with a trailing `/` (the TypeScript SDK sends
/// `resource=https://shop.example/`), so a root resource accepts both forms — and nothing else.
#[tokio::test]
async fn a_root_resource_is_named_with_or_without_its_trailing_slash() {
    use agent_surface_policy::Authenticator;
    let oauth = agent_surface_oauth::ResourceServer::new(agent_surface_oauth::ResourceServerConfig {
        resource: "https://shop.example".into(),
        ..crate::fixture::config()
    })
    .unwrap();
    for (aud, admitted) in [
        ("https://shop.example", true),
        ("https://shop.example/", true),
        ("https://shop.example//", false),
        ("https://shop.example/mcp", false),
    ] {
        let token = mint(Signer::Ed, &with(json!({"aud": aud})));
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        assert_eq!(oauth.try_authenticate(&headers).await.is_ok(), admitted, "{aud}");
    }
}

#[test]
fn configurations_that_cannot_be_safe_are_refused() {
    use agent_surface_oauth::{Algorithm, ConfigError, ResourceServer, ResourceServerConfig};
    let check = |config: ResourceServerConfig, want: ConfigError| {
        assert_eq!(ResourceServer::new(config).unwrap_err(), want);
    };
    let base = crate::fixture::config;
    check(
        ResourceServerConfig { algorithms: vec![Algorithm::HS256, Algorithm::RS256], ..base() },
        ConfigError::Algorithms,
    );
    check(ResourceServerConfig { algorithms: vec![], ..base() }, ConfigError::Algorithms);
    check(ResourceServerConfig { resource: "/mcp".into(), ..base() }, ConfigError::InvalidResource);
    check(ResourceServerConfig { resource: "ftp://x/mcp".into(), ..base() }, ConfigError::InvalidResource);
    check(ResourceServerConfig { resource: "https://x/mcp?a=1".into(), ..base() }, ConfigError::InvalidResource);
    check(ResourceServerConfig { authorization_servers: vec![], ..base() }, ConfigError::NoAuthorizationServer);
    check(ResourceServerConfig { required_scopes: vec!["a\"b".into()], ..base() }, ConfigError::Unquotable);
}

#[test]
fn symmetric_keys_in_a_jwks_never_verify() {
    let jwks = r#"{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}]}"#;
    assert!(matches!(agent_surface_oauth::Jwks::from_json(jwks), Err(agent_surface_oauth::JwksError::NoUsableKey)));
}

/// The transport answers for tokens; the pipeline still answers for policies: a valid token
/// without the `admin` role gets the in-band `NOT_AUTHORIZED`, not a transport `403`.
#[tokio::test]
async fn policy_refusals_stay_in_band() {
    let app = app(resource_server());
    let token = mint(Signer::Rsa, &with(json!({"roles": null})));
    let request = http::Request::post("/api/invoke")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::from(r#"{"capability":"admin.purge","input":{}}"#))
        .unwrap();
    let answer = crate::fixture::request(&app, request).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["code"], "NOT_AUTHORIZED", "{answer:?}");
    assert_eq!(answer.challenge, None);

    let token = mint(Signer::Rsa, &claims());
    let request = http::Request::post("/api/invoke")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::from(r#"{"capability":"admin.purge","input":{}}"#))
        .unwrap();
    let answer = crate::fixture::request(&app, request).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}
