//! Who is calling: a pluggable [`Authenticator`] turns request headers into an identity, and the
//! consumer key follows from the identity and the consumer header.

use agent_surface_policy::{Consumer, Identity};

/// A boxed future, as [`Authenticator::authenticate`] returns it.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Defined in `agent-surface-policy` (shared with the MCP adapter's HTTP transport).
pub use agent_surface_policy::{Authenticator, BearerTokens};

/// Whether `value` is a valid consumer-header value: 1 to 64 of `[A-Za-z0-9._-]`.
pub(crate) fn valid_session(value: &str) -> bool {
    (1..=64).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The consumer of a request: `http:{principal}:{session}` when signed in (the principal is
/// [`Identity::principal_key`]: the issuer and the subject, so that one subject name at two
/// identity providers is two callers), else `http-anonymous:{session}`; `session` is the consumer
/// header's value, or `default`.
///
/// The session part cannot contain `:` and comes last, so two (principal, session) pairs never
/// share a key. An anonymous session name is a claim, not a proof: deployments that need
/// anonymous callers isolated from each other must authenticate them.
pub(crate) fn consumer(identity: Option<Identity>, session: Option<&str>) -> Consumer {
    let session = session.unwrap_or("default");
    match identity {
        Some(identity) => Consumer::signed_in_session("http:", identity, &format!(":{session}")),
        None => Consumer::anonymous(format!("http-anonymous:{session}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_subject_at_two_issuers_is_two_consumers() {
        let at = |issuer: &str| Identity::new("alice").with_claim("iss", issuer);
        let a = consumer(Some(at("https://idp.example")), None);
        let b = consumer(Some(at("https://other-idp.example")), None);
        assert_ne!(a.key(), b.key());
        assert_eq!(a.key(), consumer(Some(at("https://idp.example")), Some("default")).key());
        assert_eq!(a.key(), r#"http:principal:["https://idp.example","alice"]:default"#);
        // Sessions still tell one user's callers apart, and a subject without an issuer is kept
        // apart from every issuer's.
        assert_ne!(a.key(), consumer(Some(at("https://idp.example")), Some("s2")).key());
        assert_ne!(consumer(Some(Identity::new("alice")), None).key(), a.key());
    }
}
