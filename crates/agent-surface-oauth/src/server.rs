//! [`ResourceServer`]: bearer JWT access tokens → [`Identity`], or a rejection with its
//! challenge.

use std::fmt;

use agent_surface_policy::{AuthRejection, AuthRejectionKind, Authenticator, Identity, authn::bearer_token};
use futures_util::future::BoxFuture;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, AlgorithmFamily, Validation};
use serde_json::{Map, Value};

use crate::jwks::Unavailable;
use crate::{ConfigError, ResourceServerConfig};

/// The well-known path prefix of protected resource metadata (RFC 9728 §3).
pub const METADATA_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The most keys one token is checked against (a token that names no `kid`).
const MAX_CANDIDATE_KEYS: usize = 4;

/// An OAuth 2.1 resource server: an [`Authenticator`] that admits a request only with a valid
/// bearer JWT access token for this resource, and serves the protected resource metadata.
///
/// Give it to both transports as their authenticator (`McpConfig::authenticator`,
/// `agent_surface_http::HttpConfig::authenticator`), and mount [`ResourceServer::metadata_router`]
/// at the root of the server. See the crate documentation.
pub struct ResourceServer {
    config: ResourceServerConfig,
    /// The `aud` values that name this resource: the resource, and for one at the root also its
    /// form with (or without) the trailing `/` that URL parsers add (`https://h` is `https://h/`).
    audiences: Vec<String>,
    metadata_path: String,
    metadata_url: String,
    metadata_json: String,
    /// `Bearer resource_metadata="…"`.
    challenge: String,
    invalid_challenge: String,
    scope_challenge: String,
}

impl fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.config.resource)
            .field("authorization_servers", &self.config.authorization_servers)
            .finish_non_exhaustive()
    }
}

/// Whether `s` can sit inside a quoted challenge parameter as is.
fn quotable(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_control() && c != '"' && c != '\\')
}

impl ResourceServer {
    /// A resource server with `config`, once checked.
    pub fn new(config: ResourceServerConfig) -> Result<ResourceServer, ConfigError> {
        let uri: http::Uri = config.resource.parse().map_err(|_| ConfigError::InvalidResource)?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(ConfigError::InvalidResource);
        };
        if !matches!(scheme, "http" | "https")
            || uri.query().is_some()
            || config.resource.contains('#')
            || !quotable(&config.resource)
        {
            return Err(ConfigError::InvalidResource);
        }
        if config.authorization_servers.is_empty() {
            return Err(ConfigError::NoAuthorizationServer);
        }
        if config.authorization_servers.len() > 1 {
            // One key set serves every issuer: a key of one signs for all of them, and approvals,
            // quorums and the inbox compare subjects, which only one issuer makes unique.
            // Kept for a log installed later when nothing records it now (`Serve` says it then).
            agent_surface_policy::wiring::warn(&format!(
                "several authorization servers ({}) share one key set: any of their keys is accepted for every \
                 one of them, and a subject is taken to be the same person whichever issued it; trust them alike, \
                 or run one resource server per issuer",
                config.authorization_servers.len()
            ));
        }
        if config.algorithms.is_empty() || config.algorithms.iter().any(|a| a.family() == AlgorithmFamily::Hmac) {
            return Err(ConfigError::Algorithms);
        }
        match config.jwks.unusable() {
            Some(crate::jwks::Unusable::NoKeys) => return Err(ConfigError::NoKeys),
            Some(crate::jwks::Unusable::InsecureUrl) => return Err(ConfigError::InsecureJwksUrl),
            None => {}
        }
        // Checked once here, so that no token reaches a `decode` that would panic for want of it.
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(ConfigError::NoCryptoProvider);
        }
        let scopes_ok =
            config.required_scopes.iter().chain(&config.scopes_supported).all(|s| quotable(s) && !s.contains(' '));
        if !scopes_ok || !config.authorization_servers.iter().all(|s| quotable(s)) {
            return Err(ConfigError::Unquotable);
        }
        // RFC 9728 §3.1: the well-known segment goes between the host and the resource's path.
        let path = uri.path().trim_end_matches('/');
        let audiences = if path.is_empty() {
            let root = config.resource.trim_end_matches('/');
            vec![root.to_string(), format!("{root}/")]
        } else {
            vec![config.resource.clone()]
        };
        let metadata_path = format!("{METADATA_WELL_KNOWN}{path}");
        let metadata_url = format!("{scheme}://{authority}{metadata_path}");
        let scopes_supported =
            if config.scopes_supported.is_empty() { &config.required_scopes } else { &config.scopes_supported };
        let metadata_json = serde_json::json!({
            "resource": config.resource,
            "authorization_servers": config.authorization_servers,
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
        })
        .to_string();
        let challenge = format!("Bearer resource_metadata=\"{metadata_url}\"");
        let invalid_challenge = format!(
            "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata_url}\"",
            AuthRejectionKind::InvalidToken.description()
        );
        let scope_challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata_url}\"",
            config.required_scopes.join(" ")
        );
        Ok(ResourceServer {
            config,
            audiences,
            metadata_path,
            metadata_url,
            metadata_json,
            challenge,
            invalid_challenge,
            scope_challenge,
        })
    }

    /// The path of the metadata document (RFC 9728 §3.1): `/.well-known/oauth-protected-resource`
    /// followed by the resource's path, e.g. `/.well-known/oauth-protected-resource/mcp` for
    /// `https://shop.example/mcp`.
    pub fn metadata_path(&self) -> &str {
        &self.metadata_path
    }

    /// The absolute URL of the metadata document, as challenges name it (`resource_metadata`).
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The resource this server guards (`ResourceServerConfig::resource`): its host is one the
    /// transports must admit (their `allowed_hosts`).
    pub fn resource(&self) -> &str {
        &self.config.resource
    }

    /// The metadata document: `resource`, `authorization_servers`, `scopes_supported` and
    /// `bearer_methods_supported: ["header"]`.
    pub fn metadata_json(&self) -> &str {
        &self.metadata_json
    }

    /// An axum router serving the metadata document at [`ResourceServer::metadata_path`]
    /// (`GET`/`HEAD`, `application/json`, cacheable for five minutes). Merge it at the root of
    /// the server, next to the transports: it needs no token.
    ///
    /// The transports do not serve it themselves: one resource server usually guards both (MCP
    /// and the HTTP binding on one listener), its document has one path, and the binding is
    /// often nested under a prefix where a well-known path cannot live.
    pub fn metadata_router(&self) -> axum::Router {
        let body = self.metadata_json.clone();
        axum::Router::new().route(
            &self.metadata_path,
            axum::routing::get(move || {
                let body = body.clone();
                async move {
                    (
                        [
                            (http::header::CONTENT_TYPE, "application/json"),
                            (http::header::CACHE_CONTROL, "public, max-age=300"),
                        ],
                        body,
                    )
                }
            }),
        )
    }

    /// The configuration.
    pub fn config(&self) -> &ResourceServerConfig {
        &self.config
    }

    /// The identity a request's headers prove, or why not (for the operator log).
    async fn check(&self, headers: &http::HeaderMap) -> Result<Identity, Refused> {
        let mut fields = headers.get_all(http::header::AUTHORIZATION).iter();
        let (Some(value), None) = (fields.next(), fields.next()) else {
            return Err(if headers.contains_key(http::header::AUTHORIZATION) {
                Refused::Invalid("several authorization fields")
            } else {
                Refused::Missing
            });
        };
        let Some(token) = value.to_str().ok().and_then(bearer_token) else {
            // Another scheme: no bearer credentials (RFC 6750 §3.1).
            return Err(Refused::Missing);
        };
        if token.len() > self.config.max_token_bytes {
            return Err(Refused::Invalid("token too long"));
        }
        // Unsigned (`alg: none`) and unknown algorithms fail here: `Algorithm` has no such member.
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refused::Invalid("malformed token or header"))?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(Refused::Invalid("algorithm not accepted"));
        }
        let keys = self.config.jwks.keys(header.kid.as_deref()).await.map_err(|Unavailable| Refused::Unavailable)?;
        let mut candidates = keys
            .keys
            .iter()
            .filter(|k| header.kid.is_none() || k.kid == header.kid)
            .filter(|k| k.fits(header.alg))
            // A token without `kid` is tried against the fitting keys: a few, so that an
            // unauthenticated caller cannot make one request cost a signature check per key of a
            // large key set.
            .take(MAX_CANDIDATE_KEYS)
            .peekable();
        if candidates.peek().is_none() {
            return Err(Refused::Invalid("no key for this kid and algorithm"));
        }
        let validation = self.validation(header.alg);
        let mut last = None;
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
                Ok(data) => return self.identity(data.claims),
                Err(e) => last = Some(e.into_kind()),
            }
        }
        Err(Refused::Invalid(match last {
            Some(ErrorKind::InvalidSignature) => "bad signature",
            Some(ErrorKind::ExpiredSignature) => "expired",
            Some(ErrorKind::ImmatureSignature) => "not yet valid",
            Some(ErrorKind::InvalidAudience) => "audience is not this resource",
            Some(ErrorKind::InvalidIssuer) => "issuer not accepted",
            Some(ErrorKind::MissingRequiredClaim(_)) => "a required claim (exp, iss, aud, sub) is missing",
            Some(ErrorKind::InvalidClaimFormat(_)) => "a claim has the wrong type",
            _ => "invalid token",
        }))
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut validation = Validation::new(alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_audience(&self.audiences);
        validation.set_issuer(&self.config.authorization_servers);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation
    }

    /// The identity of valid claims, unless a required scope is missing.
    fn identity(&self, claims: Map<String, Value>) -> Result<Identity, Refused> {
        let Some(Value::String(subject)) = claims.get("sub") else {
            return Err(Refused::Invalid("sub is not a string"));
        };
        // `jsonwebtoken` accepts an array `iss` that merely contains an accepted issuer.
        if !matches!(claims.get("iss"), Some(Value::String(_))) {
            return Err(Refused::Invalid("iss is not a string"));
        }
        let granted = scopes(&claims);
        if !self.config.required_scopes.iter().all(|s| granted.iter().any(|g| g == s)) {
            return Err(Refused::Scope);
        }
        let mut identity = Identity::new(subject.clone());
        for claim in &self.config.role_claims {
            for role in strings(claims.get(claim)) {
                if !identity.has_role(role) {
                    identity = identity.with_role(role);
                }
            }
        }
        identity.claims = claims;
        Ok(identity)
    }
}

/// The scopes a token grants: `scope` (space-separated, RFC 9068) or `scp` (a string or an
/// array, as some servers write it).
fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut out: Vec<&str> = strings(claims.get("scope")).collect();
    out.extend(strings(claims.get("scp")));
    out
}

/// The strings of a claim: a string split on spaces, or the strings of an array.
fn strings(value: Option<&Value>) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        Some(Value::String(s)) => Box::new(s.split(' ').filter(|s| !s.is_empty())),
        Some(Value::Array(items)) => Box::new(items.iter().filter_map(Value::as_str)),
        _ => Box::new(std::iter::empty()),
    }
}

/// Why a request was refused; the reason goes to the operator log only.
enum Refused {
    Missing,
    Invalid(&'static str),
    Scope,
    Unavailable,
}

impl Authenticator for ResourceServer {
    fn authenticate<'a>(&'a self, headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>> {
        Box::pin(async move { self.try_authenticate(headers).await.ok().flatten() })
    }

    fn try_authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> BoxFuture<'a, Result<Option<Identity>, AuthRejection>> {
        Box::pin(async move {
            match self.check(headers).await {
                Ok(identity) => Ok(Some(identity)),
                Err(Refused::Missing) => {
                    tracing::debug!(target: "agent_surface::auth", "request without a bearer token refused");
                    Err(AuthRejection::new(AuthRejectionKind::MissingToken, self.challenge.clone()))
                }
                Err(Refused::Invalid(reason)) => {
                    tracing::info!(target: "agent_surface::auth", reason, "access token refused");
                    Err(AuthRejection::new(AuthRejectionKind::InvalidToken, self.invalid_challenge.clone()))
                }
                Err(Refused::Scope) => {
                    tracing::info!(target: "agent_surface::auth", "access token without a required scope refused");
                    Err(AuthRejection::new(AuthRejectionKind::InsufficientScope, self.scope_challenge.clone()))
                }
                Err(Refused::Unavailable) => {
                    tracing::warn!(target: "agent_surface::auth", "no signing keys (jwks never fetched); request refused");
                    Err(AuthRejection::without_challenge(AuthRejectionKind::Unavailable))
                }
            }
        })
    }

    fn challenge(&self) -> &str {
        &self.challenge
    }
}
