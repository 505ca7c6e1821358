//! Authentication from HTTP request headers, shared by the HTTP-speaking adapters (MCP over
//! streamable HTTP, the HTTP binding): an [`Authenticator`] turns headers into an [`Identity`],
//! or — through [`Authenticator::try_authenticate`] — refuses the request at the transport with an
//! [`AuthRejection`] (`401`/`403` and a `WWW-Authenticate` challenge, as an OAuth resource server
//! does).

use std::collections::HashMap;

use futures_util::future::BoxFuture;

use crate::Identity;

/// Turns an HTTP request's headers into the caller's identity.
///
/// `None` means anonymous: the call still runs, and the registry's authority policy decides
/// (`NOT_AUTHENTICATED` where an identity is required). Through [`authenticate`] alone an
/// authenticator never answers the request itself, so a bad token and no token look the same to
/// the caller. An authenticator that must answer at the transport — an OAuth 2.1 resource
/// server refusing a missing, invalid or under-scoped token with `401`/`403` — also provides
/// [`try_authenticate`]; both transports call that, and its default keeps every request.
///
/// [`authenticate`]: Authenticator::authenticate
/// [`try_authenticate`]: Authenticator::try_authenticate
pub trait Authenticator: Send + Sync + 'static {
    /// The identity the headers prove, or `None` (anonymous).
    fn authenticate<'a>(&'a self, headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>>;

    /// The identity the headers prove, `None` (anonymous), or an [`AuthRejection`]: the transport
    /// then answers the request itself (its status, `WWW-Authenticate` and a generic body) and
    /// nothing of MCP or the binding runs. The default wraps [`Authenticator::authenticate`] and
    /// never rejects.
    ///
    /// ```
    /// use agent_surface_policy::{Authenticator, BearerTokens, Identity};
    ///
    /// let auth = BearerTokens::new([("t-alice", Identity::new("alice"))]);
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// // No token is anonymous; the registry's authority policy decides.
    /// assert_eq!(auth.try_authenticate(&http::HeaderMap::new()).await, Ok(None));
    /// # });
    /// ```
    fn try_authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> BoxFuture<'a, Result<Option<Identity>, AuthRejection>> {
        Box::pin(async move { Ok(self.authenticate(headers).await) })
    }

    /// The `WWW-Authenticate` challenge sent with `401` (`NOT_AUTHENTICATED`).
    ///
    /// RFC 9110 §11.6.1 requires a challenge on every `401`, so an adapter sends `Bearer` when
    /// no authenticator is configured, and falls back to `Bearer` when this value is not a valid
    /// header value.
    fn challenge(&self) -> &str {
        "Bearer"
    }
}

/// Why a request is refused at the transport; see [`AuthRejection`].
///
/// Each kind declares its HTTP status and its RFC 6750 error code here, where it is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthRejectionKind {
    /// No credentials (RFC 6750 §3.1: no error code): `401`.
    MissingToken,
    /// Credentials that do not prove an identity (malformed, expired, not yet valid, wrong
    /// issuer or audience, bad signature, unknown key): `401`, `invalid_token`.
    InvalidToken,
    /// A valid token without a scope the resource requires: `403`, `insufficient_scope`.
    InsufficientScope,
    /// The server cannot check credentials now (its signing keys are unreachable): `503`.
    Unavailable,
}

impl AuthRejectionKind {
    /// (status, RFC 6750 error code, generic description).
    const fn row(self) -> (http::StatusCode, Option<&'static str>, &'static str) {
        match self {
            AuthRejectionKind::MissingToken => {
                (http::StatusCode::UNAUTHORIZED, None, "This resource requires a bearer access token.")
            }
            AuthRejectionKind::InvalidToken => (
                http::StatusCode::UNAUTHORIZED,
                Some("invalid_token"),
                "The access token is not valid for this resource.",
            ),
            AuthRejectionKind::InsufficientScope => (
                http::StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                "The access token lacks a scope this resource requires.",
            ),
            AuthRejectionKind::Unavailable => {
                (http::StatusCode::SERVICE_UNAVAILABLE, None, "Credentials cannot be checked right now; retry later.")
            }
        }
    }

    /// The HTTP status the transport answers with.
    pub const fn status(self) -> http::StatusCode {
        self.row().0
    }

    /// The RFC 6750 `error` code, if the kind has one.
    pub const fn error(self) -> Option<&'static str> {
        self.row().1
    }

    /// A fixed description, safe to send (it names nothing of the request).
    pub const fn description(self) -> &'static str {
        self.row().2
    }
}

/// A request refused by [`Authenticator::try_authenticate`]: the transport answers it with
/// [`AuthRejection::status`], [`AuthRejection::challenge`] as `WWW-Authenticate`, and a generic
/// body ([`AuthRejection::body`], or the HTTP binding's problem document). Nothing of the token
/// or of why it failed is in any of them: the reason goes to the operator log (target
/// `agent_surface::auth`).
///
/// ```
/// use agent_surface_policy::{AuthRejection, AuthRejectionKind};
///
/// let r = AuthRejection::new(AuthRejectionKind::InvalidToken, r#"Bearer error="invalid_token""#);
/// assert_eq!(r.status(), 401);
/// assert_eq!(r.body(), r#"{"error":"invalid_token","error_description":"The access token is not valid for this resource."}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRejection {
    kind: AuthRejectionKind,
    challenge: Option<String>,
}

impl AuthRejection {
    /// A rejection of `kind` with its `WWW-Authenticate` value (e.g. `Bearer
    /// resource_metadata="…"`). A transport falls back to `Bearer` for a `401`/`403` whose
    /// challenge is not a valid header value.
    pub fn new(kind: AuthRejectionKind, challenge: impl Into<String>) -> AuthRejection {
        AuthRejection { kind, challenge: Some(challenge.into()) }
    }

    /// A rejection without a challenge (`Unavailable`).
    pub fn without_challenge(kind: AuthRejectionKind) -> AuthRejection {
        AuthRejection { kind, challenge: None }
    }

    /// Why.
    pub fn kind(&self) -> AuthRejectionKind {
        self.kind
    }

    /// The HTTP status.
    pub fn status(&self) -> http::StatusCode {
        self.kind.status()
    }

    /// The `WWW-Authenticate` value, if any.
    pub fn challenge(&self) -> Option<&str> {
        self.challenge.as_deref()
    }

    /// The `WWW-Authenticate` header a transport sends: the challenge, or `Bearer` when it is
    /// not a valid header value or when a `401` has none (RFC 9110 §11.6.1 wants a challenge on
    /// every `401`); `None` for a rejection without a challenge that is not a `401`.
    ///
    /// ```
    /// use agent_surface_policy::{AuthRejection, AuthRejectionKind};
    ///
    /// let bad = AuthRejection::new(AuthRejectionKind::MissingToken, "Bearer\n");
    /// assert_eq!(bad.www_authenticate().unwrap(), "Bearer");
    /// assert!(AuthRejection::without_challenge(AuthRejectionKind::Unavailable).www_authenticate().is_none());
    /// ```
    pub fn www_authenticate(&self) -> Option<http::HeaderValue> {
        match self.challenge.as_deref().map(http::HeaderValue::from_str) {
            Some(Ok(value)) => Some(value),
            Some(Err(_)) => Some(http::HeaderValue::from_static("Bearer")),
            None if self.status() == http::StatusCode::UNAUTHORIZED => Some(http::HeaderValue::from_static("Bearer")),
            None => None,
        }
    }

    /// A JSON body for transports without a problem format of their own:
    /// `{"error", "error_description"}` (no `error` for a kind without a code).
    pub fn body(&self) -> String {
        let description = serde_json::Value::from(self.kind.description());
        match self.kind.error() {
            Some(error) => format!(r#"{{"error":"{error}","error_description":{description}}}"#),
            None => format!(r#"{{"error_description":{description}}}"#),
        }
    }
}

/// An [`Authenticator`] over a fixed table of bearer tokens (`Authorization: Bearer TOKEN`), for
/// development and tests.
///
/// The scheme name is matched case-insensitively (RFC 9110 §11.1: `bearer TOKEN` and
/// `BEARER TOKEN` are the same credentials); the token itself is compared exactly.
///
/// | the request carries | [`try_authenticate`](Authenticator::try_authenticate) (both transports) |
/// |---|---|
/// | a token the table holds | its identity |
/// | no `Authorization` field, or another scheme (`Basic …`) | anonymous: the registry's authority policy decides (`NOT_AUTHENTICATED` where an identity is required) |
/// | a `Bearer` token the table does not hold, an empty one, an unreadable field, or two fields | refused at the transport: `401`, `WWW-Authenticate: Bearer error="invalid_token", …` |
///
/// A token that proves nothing is refused rather than served as anonymous, so a caller with a
/// mistyped or revoked token learns that its credentials are wrong (and an OAuth-aware client
/// can act on `invalid_token`) instead of running as nobody. The operator log says at `INFO`
/// (target `agent_surface::auth`) that such a token was presented — never the token.
/// [`authenticate`](Authenticator::authenticate), which cannot refuse (the approval inbox signs
/// people in with it), answers `None` for it.
///
/// ```
/// use agent_surface_policy::{AuthRejectionKind, Authenticator, BearerTokens, Identity};
///
/// let auth = BearerTokens::new([("t-alice", Identity::new("alice").with_role("support"))]);
/// let with = |value: &str| {
///     let mut headers = http::HeaderMap::new();
///     headers.insert("authorization", value.parse().unwrap());
///     headers
/// };
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(auth.try_authenticate(&with("Bearer t-alice")).await.unwrap().unwrap().subject, "alice");
/// assert_eq!(auth.try_authenticate(&http::HeaderMap::new()).await, Ok(None));
/// let refused = auth.try_authenticate(&with("Bearer t-alcie")).await.unwrap_err();
/// assert_eq!((refused.kind(), refused.status().as_u16()), (AuthRejectionKind::InvalidToken, 401));
/// assert!(auth.authenticate(&with("Bearer t-alcie")).await.is_none());
/// # });
/// ```
#[derive(Clone, Debug, Default)]
pub struct BearerTokens {
    tokens: HashMap<String, Identity>,
}

impl BearerTokens {
    /// A table of tokens and the identities they stand for.
    pub fn new<T: Into<String>>(tokens: impl IntoIterator<Item = (T, Identity)>) -> BearerTokens {
        BearerTokens { tokens: tokens.into_iter().map(|(t, i)| (t.into(), i)).collect() }
    }
}

impl BearerTokens {
    /// The identity the headers prove, `Ok(None)` for no credentials in the `Bearer` scheme, or
    /// `Err(())` for credentials that prove nothing (logged here, without the token).
    fn identify(&self, headers: &http::HeaderMap) -> Result<Option<Identity>, ()> {
        let mut fields = headers.get_all(http::header::AUTHORIZATION).iter();
        let Some(field) = fields.next() else { return Ok(None) };
        let unproven = |what: &str| {
            tracing::info!(target: "agent_surface::auth", "{what}; the request is refused as invalid_token");
            Err(())
        };
        if fields.next().is_some() {
            return unproven("a request carried two Authorization fields");
        }
        let Ok(value) = field.to_str() else {
            return unproven("an Authorization field that is not visible ASCII was presented");
        };
        let value = value.trim_matches([' ', '\t']);
        let scheme = value.split([' ', '\t']).next().unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Ok(None);
        }
        match bearer_token(value).and_then(|token| self.tokens.get(token)) {
            Some(identity) => Ok(Some(identity.clone())),
            None => unproven("a bearer token this service does not know was presented"),
        }
    }
}

impl Authenticator for BearerTokens {
    fn authenticate<'a>(&'a self, headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>> {
        Box::pin(std::future::ready(self.identify(headers).ok().flatten()))
    }

    fn try_authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> BoxFuture<'a, Result<Option<Identity>, AuthRejection>> {
        let answer = self.identify(headers).map_err(|()| {
            AuthRejection::new(
                AuthRejectionKind::InvalidToken,
                format!(
                    r#"Bearer error="invalid_token", error_description="{}""#,
                    AuthRejectionKind::InvalidToken.description()
                ),
            )
        });
        Box::pin(std::future::ready(answer))
    }
}

/// The token of an `Authorization` value in the `Bearer` scheme (scheme name case-insensitive,
/// RFC 9110 §11.1), or `None` for another scheme or no token.
///
/// ```
/// use agent_surface_policy::authn::bearer_token;
/// assert_eq!(bearer_token("bearer abc"), Some("abc"));
/// assert_eq!(bearer_token("Basic abc"), None);
/// assert_eq!(bearer_token("Bearer "), None);
/// ```
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim_matches([' ', '\t']);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
