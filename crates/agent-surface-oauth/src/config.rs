//! [`ResourceServerConfig`]: what the resource server accepts.

use std::time::Duration;

use jsonwebtoken::Algorithm;

use crate::Jwks;

/// What the resource server accepts. Build it with struct update syntax over `Default`, then
/// [`crate::ResourceServer::new`] checks it.
///
/// ```
/// use agent_surface_oauth::{Jwks, ResourceServerConfig};
///
/// let config = ResourceServerConfig {
///     resource: "https://shop.example/mcp".into(),
///     authorization_servers: vec!["https://id.example".into()],
///     required_scopes: vec!["shop".into()],
///     jwks: Jwks::from_json(r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#)?,
///     ..Default::default()
/// };
/// # let _ = config;
/// # Ok::<(), agent_surface_oauth::JwksError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ResourceServerConfig {
    /// This resource's identifier (RFC 8707, RFC 9728 `resource`): an absolute `https` URI —
    /// `http` for development — without query or fragment, e.g. `https://shop.example/mcp`. A
    /// token's `aud` must name it exactly; the metadata document is served at its well-known
    /// path ([`crate::ResourceServer::metadata_path`]). A resource at the root is named with or
    /// without its trailing `/` (clients that parse the URL send `https://shop.example/`).
    pub resource: String,
    /// The issuer identifiers of the authorization servers that may issue tokens for this
    /// resource: listed in the metadata (`authorization_servers`), and a token's `iss` must be
    /// one of them. At least one.
    pub authorization_servers: Vec<String>,
    /// The authorization servers' signing keys.
    pub jwks: Jwks,
    /// The signature algorithms accepted (default every asymmetric one `jsonwebtoken` knows:
    /// RS256/384/512, PS256/384/512, ES256/384, EdDSA). HMAC algorithms are refused by
    /// [`crate::ResourceServer::new`]; `none` is never accepted. A JWK with an `alg` member
    /// verifies that algorithm only.
    pub algorithms: Vec<Algorithm>,
    /// How far `exp` and `nbf` may be off (clock skew; default 60 s).
    pub leeway: Duration,
    /// The scopes every request needs (default none); a token without one of them is answered
    /// `403` with `error="insufficient_scope"` and these scopes in the challenge.
    pub required_scopes: Vec<String>,
    /// The scopes listed in the metadata (`scopes_supported`); empty (the default): the
    /// required scopes.
    pub scopes_supported: Vec<String>,
    /// The claims whose values become the identity's roles, in order, duplicates dropped: a
    /// string claim is split on spaces (`scope`), an array claim gives its strings (`roles`,
    /// `scp` as some identity providers write scopes). Default `["roles"]`: roles decide who may
    /// call what (`RequireRole`) and who approves (the inbox's approver role, quorum roles), and
    /// a scope is what a client asked for, which many authorization servers grant to any client
    /// that asks. Add `"scope"` and `"scp"` only where the authorization server grants those
    /// scopes per person.
    pub role_claims: Vec<String>,
    /// The longest token read, in bytes (default 8 KiB); a longer one is `invalid_token`.
    pub max_token_bytes: usize,
}

impl Default for ResourceServerConfig {
    fn default() -> Self {
        ResourceServerConfig {
            resource: String::new(),
            authorization_servers: Vec::new(),
            jwks: Jwks::default(),
            algorithms: vec![
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
                Algorithm::ES256,
                Algorithm::ES384,
                Algorithm::EdDSA,
            ],
            leeway: Duration::from_secs(60),
            required_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            role_claims: vec!["roles".into()],
            max_token_bytes: 8 * 1024,
        }
    }
}

/// Why a [`ResourceServerConfig`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `resource` is not an absolute `http`/`https` URI without query and fragment.
    #[error("the resource must be an absolute http(s) uri without query or fragment")]
    InvalidResource,
    /// `authorization_servers` is empty.
    #[error("at least one authorization server is needed")]
    NoAuthorizationServer,
    /// `algorithms` is empty or names an HMAC algorithm.
    #[error("the algorithms must be asymmetric, and at least one")]
    Algorithms,
    /// A scope or an authorization server holds a character that cannot go into a challenge
    /// (`"`, `\`, a control character; a space inside a scope).
    #[error("a scope or an authorization server holds a character a challenge cannot carry")]
    Unquotable,
    /// `jwks` is a fixed set without a key (`Jwks::default()`, left by struct update syntax): every
    /// token, a valid one included, would be refused as not valid.
    #[error("the jwks holds no key: give the authorization servers' keys (Jwks::from_file, Jwks::remote)")]
    NoKeys,
    /// `jwks` is fetched over plain `http` from a host that is not the loopback: whoever can
    /// change the document on the way can sign tokens.
    #[error("the jwks url must be https (http only on a loopback address): whoever changes it in transit signs tokens")]
    InsecureJwksUrl,
    /// `jsonwebtoken` cannot tell which cryptography provider to use (its `rust_crypto` and
    /// `aws_lc_rs` features both on through another crate, and none installed): it would panic
    /// at the first token. Install one with `jsonwebtoken::crypto::CryptoProvider::install_default`
    /// before building the resource server.
    #[error("jsonwebtoken has no cryptography provider: install one (CryptoProvider::install_default) first")]
    NoCryptoProvider,
}
