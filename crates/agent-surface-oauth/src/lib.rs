//! An OAuth 2.1 resource server for the agent-surface HTTP transports (MCP over streamable HTTP,
//! the HTTP binding), as the MCP authorization specification asks of an MCP server.
//!
//! # Overview
//!
//! [`ResourceServer`] is an `agent_surface_policy::Authenticator`. Both transports take it as
//! their authenticator and call its `try_authenticate` before anything else of a request:
//!
//! | request | answer |
//! |---|---|
//! | no `Authorization: Bearer` | `401`, `WWW-Authenticate: Bearer resource_metadata="<url>"` |
//! | a token that is not valid for this resource | `401`, `Bearer error="invalid_token", error_description="…", resource_metadata="<url>"` |
//! | a valid token without a required scope | `403`, `Bearer error="insufficient_scope", scope="…", resource_metadata="<url>"` |
//! | the keys of a remote JWKS were never fetched | `503` |
//! | a valid token | the call runs with the token's [`Identity`](agent_surface_policy::Identity) |
//!
//! A token is valid when it is a JWS-signed JWT (RFC 7519) whose header names an accepted
//! asymmetric algorithm ([`ResourceServerConfig::algorithms`]; `none` and HMAC never), whose
//! signature verifies with a key of the [`Jwks`] (by `kid`; a JWK with `alg` verifies only that
//! algorithm), whose `iss` is one of [`ResourceServerConfig::authorization_servers`], whose `aud`
//! names [`ResourceServerConfig::resource`] (RFC 8707), whose `exp` has not passed and `nbf` has
//! (with [`ResourceServerConfig::leeway`]), and that has a string `sub`. The identity's subject
//! is `sub`, its roles the values of [`ResourceServerConfig::role_claims`] (default the `roles`
//! array: scopes, which a client asks for, are roles only where named), its claims every claim of the token — so
//! `agent_surface_mcp::principal_key` keys it on (`iss`, `sub`).
//!
//! [`ResourceServer::metadata_router`] serves the protected resource metadata (RFC 9728) at
//! [`ResourceServer::metadata_path`]: `resource`, `authorization_servers`, `scopes_supported`,
//! `bearer_methods_supported: ["header"]`; challenges point to it by absolute URL.
//!
//! Nothing of a token, of a claim or of the JWKS location reaches a response: bodies and
//! challenges carry fixed texts only. The reason of each refusal goes to the operator log,
//! target `agent_surface::auth` (`DEBUG` for a missing token, `INFO` for a refused one, `WARN`
//! when keys cannot be had).
//!
//! Keys come from a JWKS document ([`Jwks::from_file`], [`Jwks::from_json`]) or a URL
//! ([`Jwks::remote`]) fetched through a [`FetchJwks`] hook — the crate brings no HTTP client, so
//! it pulls in no TLS stack; plug in the client you have. A fetched document is cached for
//! [`RemoteJwks::refresh`], and a token naming an unknown `kid` (key rotation) makes it refetched,
//! at most once per [`RemoteJwks::min_refetch_interval`].
//!
//! In-band refusals are unchanged: a policy that needs a role or an identity still answers the
//! agent `NOT_AUTHORIZED` / `NOT_AUTHENTICATED` through the pipeline (`docs/operations.md`,
//! "Authentication", says which layer answers what).
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//!
//! use agent_surface_oauth::{Jwks, ResourceServer, ResourceServerConfig};
//! use agent_surface_registry::{Registry, RegistryConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! let jwks = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
//! let oauth = Arc::new(ResourceServer::new(ResourceServerConfig {
//!     resource: "https://shop.example".into(),
//!     authorization_servers: vec!["https://id.example".into()],
//!     jwks: Jwks::from_json(jwks)?,
//!     ..Default::default()
//! })?);
//! assert_eq!(oauth.metadata_url(), "https://shop.example/.well-known/oauth-protected-resource");
//!
//! let registry = Registry::new(RegistryConfig::default());
//! let mcp = agent_surface_mcp::McpConfig { authenticator: Some(oauth.clone()), ..Default::default() };
//! let api = agent_surface_http::HttpConfig { authenticator: Some(oauth.clone()), ..Default::default() };
//! let app = agent_surface_mcp::http::router(registry.clone(), mcp, &Default::default(), CancellationToken::new())
//!     .nest("/api", agent_surface_http::router(registry, api))
//!     .merge(oauth.metadata_router());
//! # drop(app);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod config;
mod jwks;
mod server;

pub use config::{ConfigError, ResourceServerConfig};
pub use jsonwebtoken::Algorithm;
pub use jwks::{FetchError, FetchJwks, Jwks, JwksError, MAX_JWKS_BYTES, RemoteJwks};
pub use server::{METADATA_WELL_KNOWN, ResourceServer};
