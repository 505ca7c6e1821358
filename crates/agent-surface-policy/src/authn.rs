//! Authentication from HTTP request headers, shared by the HTTP-speaking adapters (MCP over
//! streamable HTTP, the HTTP binding): an [`Authenticator`] turns headers into an [`Identity`].

use std::collections::HashMap;

use futures_util::future::BoxFuture;

use crate::Identity;

/// Turns an HTTP request's headers into the caller's identity.
///
/// `None` means anonymous: the call still runs, and the registry's authority policy decides
/// (`NOT_AUTHENTICATED` where an identity is required). An authenticator never answers the
/// request itself, so a bad token and no token look the same to the caller.
pub trait Authenticator: Send + Sync + 'static {
    /// The identity the headers prove, or `None` (anonymous).
    fn authenticate<'a>(&'a self, headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>>;

    /// The `WWW-Authenticate` challenge sent with `401` (`NOT_AUTHENTICATED`).
    ///
    /// RFC 9110 §11.6.1 requires a challenge on every `401`, so an adapter sends `Bearer` when
    /// no authenticator is configured, and falls back to `Bearer` when this value is not a valid
    /// header value.
    fn challenge(&self) -> &str {
        "Bearer"
    }
}

/// An [`Authenticator`] over a fixed table of bearer tokens (`Authorization: Bearer TOKEN`), for
/// development and tests.
///
/// The scheme name is matched case-insensitively (RFC 9110 §11.1: `bearer TOKEN` and
/// `BEARER TOKEN` are the same credentials); the token itself is compared exactly.
///
/// ```
/// use agent_surface_policy::{Authenticator, BearerTokens};
/// use agent_surface_policy::Identity;
///
/// let auth = BearerTokens::new([("t-alice", Identity::new("alice").with_role("support"))]);
/// let mut headers = http::HeaderMap::new();
/// headers.insert("authorization", "Bearer t-alice".parse().unwrap());
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(auth.authenticate(&headers).await.unwrap().subject, "alice");
/// assert!(auth.authenticate(&http::HeaderMap::new()).await.is_none());
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

impl Authenticator for BearerTokens {
    fn authenticate<'a>(&'a self, headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>> {
        let identity = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|token| self.tokens.get(token))
            .cloned();
        Box::pin(std::future::ready(identity))
    }
}

/// The token of an `Authorization` value in the `Bearer` scheme (scheme name case-insensitive,
/// RFC 9110 §11.1), or `None` for another scheme or no token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim_matches([' ', '\t']);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
