//! The approval inbox's store on Redis (its store kit suites: `kit.rs`): two inboxes (two replicas behind one
//! address, no sticky routing) that serve each other's sessions and forms.

use std::sync::Arc;

use agent_surface_http::inbox::{InboxConfig, SESSION_COOKIE, SIGN_IN_COOKIE, router};
use agent_surface_policy::{BearerTokens, ConfirmationConfig, ConfirmationEngine, Identity};
use agent_surface_redis::RedisStores;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use tower::ServiceExt;

use crate::support;

const TOKEN: &str = "t-manager-3f9a7c1e5b2d8f4a6c0e9b7d5a3f1c8e";

fn inbox(redis: &RedisStores) -> Router {
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let tokens = BearerTokens::new([(TOKEN, Identity::new("manager").with_role("approver"))]);
    router(InboxConfig {
        secure_cookie: false,
        store: Arc::new(redis.inbox()),
        ..InboxConfig::new(engine, Arc::new(tokens), "approver")
    })
}

async fn send(app: &Router, method: &str, uri: &str, cookie: &str, form: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "localhost")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (parts.status, parts.headers, String::from_utf8(body.to_vec()).unwrap())
}

/// The `name=value` of the cookie `name` a response sets.
fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    let set = headers.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string());
    set.filter_map(|v| v.split(';').next().map(str::to_string)).find(|p| p.starts_with(&format!("{name}=")))
}

/// The value of the first form's `csrf` field on `page`.
fn csrf(page: &str) -> String {
    page.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap().to_string()
}

/// Two inboxes on one Redis, as two replicas behind one address whose requests land on either:
/// a sign-in form fetched from one is accepted by the other (one key), a form used on one is
/// refused when replayed to the other (one set of used tokens), a session opened on one is
/// served and ended on the other — and what Redis holds reveals no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_inboxes_on_one_redis_serve_each_others_sessions_and_refuse_replays() {
    let Some(redis_a) = support::stores("inbox-routers").await else { return };
    let redis_b = support::replica(&redis_a).await;
    let (a, b) = (inbox(&redis_a), inbox(&redis_b));

    // The form from A, posted to B, signs in.
    let (_, headers, page) = send(&a, "GET", "/inbox/sign-in", "", "").await;
    let pre = set_cookie(&headers, SIGN_IN_COOKIE).unwrap();
    let form = format!("token={TOKEN}&csrf={}", csrf(&page));
    let (status, headers, page) = send(&b, "POST", "/inbox/sign-in", &pre, &form).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "a form one replica issued is accepted by the other: {page}");
    let session = set_cookie(&headers, SESSION_COOKIE).unwrap();

    // The same form replayed to A is refused: its token was used on B.
    let (status, headers, page) = send(&a, "POST", "/inbox/sign-in", &pre, &form).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("not valid any more"), "{page}");
    assert_eq!(set_cookie(&headers, SESSION_COOKIE), None);

    // The session opened on B is served by A.
    let (status, _, page) = send(&a, "GET", "/inbox/", &session, "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("manager"), "{page}");

    // Nothing Redis holds for the inbox contains the token (in the clear), nor the session id.
    let id = session.split_once('=').unwrap().1.to_string();
    let mut conn = redis_a.connection();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", redis_a.config().prefix)).query_async(&mut conn).await.unwrap();
    assert!(keys.iter().any(|k| k.contains("inbox-s:")), "the session is in Redis: {keys:?}");
    for key in &keys {
        assert!(!key.contains(&id) && !key.contains(TOKEN), "{key}");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query_async(&mut conn).await.unwrap();
        let holds = |needle: &[u8]| dump.windows(needle.len()).any(|w| w == needle);
        assert!(!holds(TOKEN.as_bytes()) && !holds(id.as_bytes()), "{key} holds the token or the session id");
    }

    // A's sign-out form, posted to B, ends the session for both; then A's form is refused on A.
    let sign_out = csrf(&page);
    let (status, headers, _) = send(&b, "POST", "/inbox/sign-out", &session, &format!("csrf={sign_out}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers[header::LOCATION].to_str().unwrap().ends_with("/inbox/sign-in"));
    let (status, headers, _) = send(&a, "GET", "/inbox/", &session, "").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "a session ended on one replica is over on the other");
    assert!(headers[header::LOCATION].to_str().unwrap().contains("/inbox/sign-in"));
}
