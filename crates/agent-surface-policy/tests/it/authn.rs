//! `BearerTokens`: the `Authorization` scheme name is case-insensitive, the token is exact.

use agent_surface_policy::{AuthRejection, AuthRejectionKind, Authenticator, BearerTokens, Identity};

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

async fn answer(auth: &BearerTokens, fields: &[&[u8]]) -> Result<Option<String>, AuthRejection> {
    let mut headers = http::HeaderMap::new();
    for field in fields {
        headers.append(http::header::AUTHORIZATION, http::HeaderValue::from_bytes(field).unwrap());
    }
    auth.try_authenticate(&headers).await.map(|i| i.map(|i| i.subject))
}

/// A bearer token the table does not hold is refused at the transport as `invalid_token`, not
/// served as anonymous; the operator is told one was presented (at `INFO`), never which.
#[test]
fn an_unknown_token_is_refused_as_invalid_and_the_operator_is_told() {
    let auth = BearerTokens::new([("t-x", Identity::new("x"))]);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for fields in [
        &[&b"Bearer t-typo"[..]][..],
        &[b"bearer T-X"],
        &[b"Bearer"],
        &[b"Bearer   "],
        &[b"Bearer t-x", b"Bearer t-x"],
        &[b"Bearer t-\xe9"],
    ] {
        let (answer, log) = agent_surface_testing::capture_operator_log(|| runtime.block_on(answer(&auth, fields)));
        let refused = answer.expect_err(&format!("{fields:?}"));
        assert_eq!(refused.kind(), AuthRejectionKind::InvalidToken, "{fields:?}");
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.www_authenticate().unwrap(),
            r#"Bearer error="invalid_token", error_description="The access token is not valid for this resource.""#
        );
        assert!(log.contains("invalid_token"), "{fields:?}: {log}");
        assert!(!log.contains("t-typo") && !log.contains("T-X"), "{log}");
        // `authenticate`, which cannot refuse, answers nobody.
        let mut headers = http::HeaderMap::new();
        for field in fields {
            headers.append(http::header::AUTHORIZATION, http::HeaderValue::from_bytes(field).unwrap());
        }
        assert!(runtime.block_on(auth.authenticate(&headers)).is_none(), "{fields:?}");
    }
    // A known token, another scheme, or no `Authorization` at all: nothing refused, nothing said.
    for (fields, who) in [(&[&b"Bearer t-x"[..]][..], Some("x")), (&[b"Basic dDp4"], None), (&[], None)] {
        let (answer, log) = agent_surface_testing::capture_operator_log(|| runtime.block_on(answer(&auth, fields)));
        assert_eq!(answer.unwrap().as_deref(), who, "{fields:?}");
        assert!(!log.contains("invalid_token"), "{fields:?}: {log}");
    }
}
