//! `BearerTokens`: the `Authorization` scheme name is case-insensitive, the token is exact.

use agent_surface_policy::{Authenticator, BearerTokens, Identity};

async fn subject(auth: &BearerTokens, authorization: &str) -> Option<String> {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, authorization.parse().unwrap());
    auth.authenticate(&headers).await.map(|i| i.subject)
}

#[tokio::test]
async fn the_bearer_scheme_matches_case_insensitively() {
    let auth = BearerTokens::new([("t-x", Identity::new("x"))]);
    for value in ["Bearer t-x", "bearer t-x", "BEARER t-x", "bEaReR t-x", "Bearer   t-x"] {
        assert_eq!(subject(&auth, value).await.as_deref(), Some("x"), "{value}");
    }
    for value in ["Bearer T-X", "Basic t-x", "Bearert-x", "Bearer", "Bearer ", "t-x", "Bearer t-x2"] {
        assert_eq!(subject(&auth, value).await, None, "{value}");
    }
}

/// An unknown token is anonymous, and the operator is told one was presented (at `INFO`), never
/// which.
#[test]
fn an_unknown_token_is_anonymous_and_the_operator_is_told() {
    let auth = BearerTokens::new([("t-x", Identity::new("x"))]);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let (who, log) = agent_surface_testing::capture_operator_log(|| runtime.block_on(subject(&auth, "Bearer t-typo")));
    assert_eq!(who, None);
    assert!(log.contains("a bearer token this service does not know was presented"), "{log}");
    assert!(!log.contains("t-typo"), "{log}");
    // A known token, or another scheme: nothing to say.
    for value in ["Bearer t-x", "Basic dDp4"] {
        let (_, log) = agent_surface_testing::capture_operator_log(|| runtime.block_on(subject(&auth, value)));
        assert!(!log.contains("does not know"), "{value}: {log}");
    }
    // No `Authorization` at all.
    let (who, log) = agent_surface_testing::capture_operator_log(|| {
        runtime.block_on(async { auth.authenticate(&http::HeaderMap::new()).await })
    });
    assert!(who.is_none() && !log.contains("does not know"), "{log}");
}
