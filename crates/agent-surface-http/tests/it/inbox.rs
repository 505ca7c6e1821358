//! The approval inbox through its router: sign-in, the list and the detail page, decisions by a
//! second person, the engine's rules, and the page's defences (CSRF, escaping, headers).

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use agent_surface_http::inbox::{DEFAULT_SESSION_TTL, InboxConfig, SESSION_COOKIE, SIGN_IN_COOKIE, router};
use agent_surface_policy::{
    AuditSink, Authenticator, BearerTokens, Clock, ConfirmationConfig, ConfirmationEngine, Consumer, Identity,
    ManualClock, MemoryAuditSink, Quorum, Scope, confirmation::ConfirmationState,
};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt;

#[derive(Deserialize, JsonSchema)]
struct Refund {
    order: String,
    cents: u64,
    #[allow(dead_code, reason = "only its redaction matters here")]
    card: String,
}

struct Env {
    registry: Registry,
    engine: Arc<ConfirmationEngine>,
    app: axum::Router,
    _mount: agent_surface_registry::Mount,
}

fn env() -> Env {
    env_with(Vec::new())
}

fn env_with(quorums: Vec<(Scope, Quorum)>) -> Env {
    env_at(quorums, None, None, DEFAULT_SESSION_TTL)
}

/// The inbox with `quorums`; with a `clock`, the engine (and so the inbox) reads it and
/// confirmations last a minute; `authenticator` in place of the test's tokens.
fn env_at(
    quorums: Vec<(Scope, Quorum)>,
    clock: Option<ManualClock>,
    authenticator: Option<Arc<dyn Authenticator>>,
    session_ttl: Duration,
) -> Env {
    env_trail(quorums, clock, authenticator, session_ttl, Trail::Kept)
}

/// What the inbox of [`env_trail`] is given to list recent decisions from.
#[derive(Clone, Copy, PartialEq)]
enum Trail {
    /// The engine's audit trail.
    Kept,
    /// None.
    Absent,
    /// A trail that fails to read back, saying where it lives in its error.
    Unreadable,
}

/// An audit trail whose reads fail with an error naming its address.
#[derive(Debug)]
struct UnreadableTrail;

impl AuditSink for UnreadableTrail {
    fn record<'a>(
        &'a self,
        _: &'a agent_surface_policy::AuditEvent,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn recent<'a>(
        &'a self,
        _: usize,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<Vec<agent_surface_policy::AuditEvent>, agent_surface_policy::AuditError>,
    > {
        let e = agent_surface_policy::AuditError::new("connection refused: redis://:hunter2@10.1.2.3:6379/0");
        Box::pin(std::future::ready(Err(e)))
    }
}

/// [`env_at`], the inbox given the audit trail, none, or one it cannot read (`trail`).
fn env_trail(
    quorums: Vec<(Scope, Quorum)>,
    clock: Option<ManualClock>,
    authenticator: Option<Arc<dyn Authenticator>>,
    session_ttl: Duration,
    trail: Trail,
) -> Env {
    let audit = Arc::new(MemoryAuditSink::default());
    let defaults = ConfirmationConfig::default();
    let (clock, ttl) = match clock {
        Some(c) => (Arc::new(c) as Arc<dyn Clock>, Duration::from_secs(60)),
        None => (defaults.clock.clone(), defaults.ttl),
    };
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        audit: Some(audit.clone()),
        quorums,
        approval_base_url: Some("https://shop.example/inbox/c/".into()),
        clock: clock.clone(),
        ttl,
        ..defaults
    }));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), clock, ..Default::default() });
    registry
        .define("orders", |t| {
            t.capability("refund", "Refund an order.")
                .effect(Effect::External)
                .sensitive(&["card"])
                .confirm(|i: &Refund| format!("Refund {} cents on <b>{}</b>.", i.cents, i.order))
                .handler(|_c: Ctx, i: Refund| async move { Ok::<_, AgentSurfaceError>(json!({"refunded": i.cents})) });
        })
        .unwrap();
    let mount = registry.mount("orders", "main").unwrap();
    let tokens = BearerTokens::new([
        ("t-alice", Identity::new("alice").with_role("approver")),
        ("t-manager", Identity::new("manager").with_role("approver")),
        ("t-intern", Identity::new("intern")),
        ("t-carol", Identity::new("carol").with_role("approver").with_role("finance")),
        ("t-dave", Identity::new("dave").with_role("approver").with_role("finance")),
        // For role slots: a manager, another one, a security officer, and one who is both.
        ("t-max", Identity::new("max").with_role("approver").with_role("manager")),
        ("t-moe", Identity::new("moe").with_role("approver").with_role("manager")),
        ("t-sam", Identity::new("sam").with_role("approver").with_role("security")),
        ("t-dana", Identity::new("dana").with_role("approver").with_role("manager").with_role("security")),
    ]);
    let authenticator = authenticator.unwrap_or_else(|| Arc::new(tokens));
    let config = InboxConfig {
        audit: match trail {
            Trail::Kept => Some(audit as Arc<dyn AuditSink>),
            Trail::Absent => None,
            Trail::Unreadable => Some(Arc::new(UnreadableTrail) as Arc<dyn AuditSink>),
        },
        secure_cookie: false,
        session_ttl,
        ..InboxConfig::new(engine.clone(), authenticator, "approver")
    };
    Env { registry, engine, app: router(config), _mount: mount }
}

fn alice() -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated(r#"http:principal:["alice"]:default"#, Identity::new("alice")))
}

fn refund() -> InvokeRequest {
    refund_of(4200)
}

fn refund_of(cents: u64) -> InvokeRequest {
    InvokeRequest::new("orders.refund", json!({"order": "A-1", "cents": cents, "card": "4111 1111 1111 1111"}))
}

struct Page {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Page {
    /// The value of the hidden `csrf` field of the form whose action ends with `action`.
    fn csrf(&self, action: &str) -> String {
        let at =
            self.body.find(&format!("{action}\"")).unwrap_or_else(|| panic!("no form for {action}: {}", self.body));
        let rest = &self.body[at..];
        let start = rest.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
        rest[start..start + rest[start..].find('"').unwrap()].to_string()
    }

    /// The `name=value` of the cookie `name` the response sets.
    fn cookie(&self, name: &str) -> Option<String> {
        self.headers.get_all(header::SET_COOKIE).iter().find_map(|v| {
            let pair = v.to_str().unwrap().split(';').next().unwrap();
            pair.starts_with(&format!("{name}=")).then(|| pair.to_string())
        })
    }

    /// The sign-in form's cookie (its token is bound to it), as a `Cookie` header's value.
    fn sign_in_cookie(&self) -> String {
        self.cookie(SIGN_IN_COOKIE).unwrap_or_else(|| panic!("no sign-in cookie: {:?}", self.headers))
    }
}

impl Env {
    /// `method uri` with `headers` (a `Host` is added) and `body`.
    async fn request(&self, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Page {
        let mut request = Request::builder().method(method).uri(uri).header(header::HOST, "localhost:8080");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.app.clone().oneshot(request.body(Body::from(body.to_string())).unwrap()).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        Page { status: parts.status, headers: parts.headers, body }
    }

    async fn send(&self, method: &str, uri: &str, cookie: Option<&str>, form: Option<&str>) -> Page {
        let mut request = Request::builder().method(method).uri(uri).header(header::HOST, "localhost:8080");
        if let Some(c) = cookie {
            request = request.header(header::COOKIE, c);
        }
        let body = match form {
            Some(f) => {
                request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                Body::from(f.to_string())
            }
            None => Body::empty(),
        };
        let response = self.app.clone().oneshot(request.body(body).unwrap()).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        Page { status: parts.status, headers: parts.headers, body }
    }

    /// Posts the sign-in form (fetched for a new browser) with `token`.
    async fn try_sign_in(&self, token: &str) -> Page {
        let form = self.send("GET", "/inbox/sign-in", None, None).await;
        let csrf = form.csrf("/inbox/sign-in");
        let pre = form.sign_in_cookie();
        self.send("POST", "/inbox/sign-in", Some(&pre), Some(&format!("token={token}&csrf={csrf}"))).await
    }

    /// Signs in with `token` through the form; returns the cookie to send.
    async fn sign_in(&self, token: &str) -> String {
        let signed = self.try_sign_in(token).await;
        assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
        let set = signed.headers[header::SET_COOKIE].to_str().unwrap().to_string();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/inbox/"] {
            assert!(set.contains(attribute), "{set}");
        }
        let cookie = set.split(';').next().unwrap().to_string();
        assert!(cookie.starts_with(&format!("{SESSION_COOKIE}=")), "{cookie}");
        // An opaque session id: the token stays on the server.
        assert!(!cookie.contains(token), "{cookie}");
        cookie
    }

    async fn request_confirmation(&self) -> String {
        self.request_confirmation_of(refund()).await
    }

    async fn request_confirmation_of(&self, request: InvokeRequest) -> String {
        self.request_confirmation_as(request, alice()).await
    }

    /// Asks for a confirmation of `request`, called with `options` (the requester).
    async fn request_confirmation_as(&self, request: InvokeRequest, options: InvokeOptions) -> String {
        let inv = self.registry.invoke_detailed(request, options).await;
        let p = inv.result.error_payload().unwrap();
        assert_eq!(p.code(), ErrorCode::ConfirmationRequired);
        p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string()
    }
}

#[tokio::test]
async fn a_second_person_approves_in_the_inbox_and_the_agent_repeat_runs_once() {
    let env = env();
    let id = env.request_confirmation().await;

    // Not signed in: sent to the sign-in form. A bad token signs no one in.
    let away = env.send("GET", "/inbox/", None, None).await;
    assert_eq!(away.status, StatusCode::SEE_OTHER);
    assert_eq!(away.headers[header::LOCATION], "/inbox/sign-in");
    let form = env.send("GET", "/inbox/sign-in", None, None).await;
    let csrf = form.csrf("/inbox/sign-in");
    let pre = form.sign_in_cookie();
    let bad = env.send("POST", "/inbox/sign-in", Some(&pre), Some(&format!("token=t-nobody&csrf={csrf}"))).await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert_eq!(bad.sign_in_cookie(), pre, "the same binding, renewed with the new form");

    let manager = env.sign_in("t-manager").await;
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert_eq!(list.status, StatusCode::OK);
    // The summary is escaped, never markup.
    assert!(list.body.contains("Refund 4200 cents on &lt;b&gt;A-1&lt;/b&gt;."), "{}", list.body);
    assert!(!list.body.contains("<b>A-1"));
    assert!(list.body.contains(&format!("/inbox/c/{id}")));
    assert!(list.body.contains("orders.refund") && list.body.contains("alice") && list.body.contains("external"));

    let detail = env.send("GET", &format!("/inbox/c/{id}"), Some(&manager), None).await;
    assert!(detail.body.contains("[redacted]"), "{}", detail.body);
    // The number's digit groups, not "4111" alone: a random id on the page may contain that.
    assert!(
        !detail.body.contains("4111 1111") && !detail.body.contains("1111 1111"),
        "the sensitive field is never shown"
    );
    let csrf = detail.csrf(&format!("/inbox/c/{id}"));
    let decided = env
        .send(
            "POST",
            &format!("/inbox/c/{id}"),
            Some(&manager),
            Some(&format!("verdict=approve&note=ok+by+me&csrf={csrf}")),
        )
        .await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let record = env.engine.get(&id).await.unwrap().unwrap();
    assert_eq!(record.state, ConfirmationState::Approved { by: "manager".into() });

    // The agent's repeat with the id runs once.
    let ok = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(ok.result.output(), Some(&json!({"refunded": 4200})));
    let again = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(again.result.code(), Some(ErrorCode::ConfirmationInvalid));

    // The list is empty now, and the decision shows among the recent ones.
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(list.body.contains("id=\"empty\""), "{}", list.body);
    assert!(
        list.body.contains("<td>manager</td><td><span class=\"badge approved\">approved</span></td><td>orders.refund</td><td>alice</td><td>ok by me</td>"),
        "{}",
        list.body
    );
}

/// A quorum of two approvers with the role `finance`: the list and the detail page show the
/// approvals so far, an approver without the role is refused, an approver decides once (`409`),
/// the agent's repeat waits for the second approval and then runs once, and the trail shows both.
#[tokio::test]
async fn a_quorum_of_two_needs_two_distinct_approvers_with_the_role() {
    let env = env_with(vec![(Scope::capability("orders.refund"), Quorum::of(2).with_role("finance"))]);
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let approve = |csrf: &str| format!("verdict=approve&csrf={csrf}");

    // Without the role: not listed, and not shown either (refused as an approval would be).
    let manager = env.sign_in("t-manager").await;
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(list.body.contains("id=\"empty\""), "{}", list.body);
    let refused = env.send("GET", &path, Some(&manager), None).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert!(refused.body.contains("does not count you") && !refused.body.contains("id=\"decide\""));

    // The first approver: 0 of 2, then 1 of 2; the confirmation stays pending.
    let carol = env.sign_in("t-carol").await;
    let list = env.send("GET", "/inbox/", Some(&carol), None).await;
    assert!(list.body.contains("<td class=\"approvals\">0 of 2 approvals (role: finance)</td>"), "{}", list.body);
    let first = env.send("GET", &path, Some(&carol), None).await;
    let second = env.send("GET", &path, Some(&carol), None).await;
    assert!(first.body.contains("id=\"no-decisions\""), "{}", first.body);
    let decided = env.send("POST", &path, Some(&carol), Some(&approve(&first.csrf(&path)))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let detail = env.send("GET", &path, Some(&carol), None).await;
    assert!(detail.body.contains("<dd id=\"approvals\">1 of 2 approvals (role: finance)</dd>"), "{}", detail.body);
    assert!(
        detail.body.contains("<td>carol</td><td><span class=\"badge approved\">approved</span></td>"),
        "{}",
        detail.body
    );
    assert!(!detail.body.contains("id=\"decide\""), "no form for an approver who decided: {}", detail.body);
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending);
    // Once per approver: a second decision (with a valid form token) is a conflict.
    let again = env.send("POST", &path, Some(&carol), Some(&approve(&second.csrf(&path)))).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(env.send("GET", "/inbox/", Some(&carol), None).await.body.contains("id=\"empty\""));

    // The agent's repeat still waits for the quorum.
    let waiting = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(waiting.result.code(), Some(ErrorCode::ConfirmationRequired));

    // The second approver sees 1 of 2 and completes the quorum.
    let dave = env.sign_in("t-dave").await;
    let list = env.send("GET", "/inbox/", Some(&dave), None).await;
    assert!(list.body.contains("<td class=\"approvals\">1 of 2 approvals (role: finance)</td>"), "{}", list.body);
    // … and who decided so far.
    assert!(
        list.body.contains("<td class=\"decided\">carol <span class=\"badge approved\">approved</span></td>"),
        "{}",
        list.body
    );
    let detail = env.send("GET", &path, Some(&dave), None).await;
    let decided = env.send("POST", &path, Some(&dave), Some(&approve(&detail.csrf(&path)))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    assert_eq!(
        env.engine.get(&id).await.unwrap().unwrap().state,
        ConfirmationState::Approved { by: "carol, dave".into() }
    );
    let detail = env.send("GET", &path, Some(&dave), None).await;
    assert!(detail.body.contains("<dd id=\"approvals\">2 of 2 approvals (role: finance)</dd>"), "{}", detail.body);

    let ok = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(ok.result.output(), Some(&json!({"refunded": 4200})));
    let list = env.send("GET", "/inbox/", Some(&dave), None).await;
    for who in ["carol", "dave"] {
        assert!(
            list.body.contains(&format!(
                "<td>{who}</td><td><span class=\"badge approved\">approved</span></td><td>orders.refund</td>"
            )),
            "{}",
            list.body
        );
    }
}

/// A denial by any approver ends a quorum, after an approval too.
#[tokio::test]
async fn a_denial_ends_a_quorum() {
    let env = env_with(vec![(Scope::capability_type("orders"), Quorum::of(2))]);
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let manager = env.sign_in("t-manager").await;
    let detail = env.send("GET", &path, Some(&manager), None).await;
    let approved =
        env.send("POST", &path, Some(&manager), Some(&format!("verdict=approve&csrf={}", detail.csrf(&path)))).await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let carol = env.sign_in("t-carol").await;
    let detail = env.send("GET", &path, Some(&carol), None).await;
    assert!(detail.body.contains("1 of 2 approvals"), "{}", detail.body);
    let denied =
        env.send("POST", &path, Some(&carol), Some(&format!("verdict=deny&csrf={}", detail.csrf(&path)))).await;
    assert_eq!(denied.status, StatusCode::SEE_OTHER);
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Denied { by: "carol".into() });
    let dave = env.sign_in("t-dave").await;
    let detail = env.send("GET", &path, Some(&dave), None).await;
    assert!(!detail.body.contains("id=\"decide\""), "a denied confirmation has no form: {}", detail.body);
    let refused = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(refused.result.code(), Some(ErrorCode::ConfirmationInvalid));
}

/// The payload names the confirmation's page in the inbox (`details.approvalUrl`) and tells the
/// agent a person must approve it there; the approver follows that URL, approves, and the agent's
/// plain repeat of the same call (no id: a model cannot send one) runs once.
#[tokio::test]
async fn the_approval_url_leads_to_the_inbox_and_the_plain_repeat_runs() {
    let env = env();
    let inv = env.registry.invoke_detailed(refund(), alice()).await;
    let p = inv.result.error_payload().unwrap();
    assert_eq!(p.code(), ErrorCode::ConfirmationRequired);
    let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    let url = p.detail("approvalUrl").and_then(Value::as_str).unwrap().to_string();
    assert_eq!(url, format!("https://shop.example/inbox/c/{id}"));
    assert!(
        p.message().contains("a person must approve it at the approval page in details.approvalUrl"),
        "{}",
        p.message()
    );
    assert!(p.message().contains("then repeat the same call"), "{}", p.message());

    let path = url.strip_prefix("https://shop.example").unwrap();
    let manager = env.sign_in("t-manager").await;
    let detail = env.send("GET", path, Some(&manager), None).await;
    assert_eq!(detail.status, StatusCode::OK);
    let decided =
        env.send("POST", path, Some(&manager), Some(&format!("verdict=approve&csrf={}", detail.csrf(path)))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);

    let ran = env.registry.invoke_detailed(refund(), alice()).await;
    assert_eq!(ran.result.output(), Some(&json!({"refunded": 4200})));
    let again = env.registry.invoke_detailed(refund(), alice()).await;
    assert_eq!(again.result.code(), Some(ErrorCode::ConfirmationRequired), "a new request, not a second run");
}

#[tokio::test]
async fn forged_and_replayed_posts_are_refused() {
    let env = env();
    let id = env.request_confirmation().await;
    let manager = env.sign_in("t-manager").await;
    let path = format!("/inbox/c/{id}");

    // No token, a made-up token, a token for another confirmation, another person's token.
    let other_id = env.request_confirmation_of(refund_of(1)).await;
    assert_ne!(other_id, id);
    let other = env
        .send("GET", &format!("/inbox/c/{other_id}"), Some(&manager), None)
        .await
        .csrf(&format!("/inbox/c/{other_id}"));
    let bob = env.sign_in("t-alice").await;
    let bobs = env.send("GET", &path, Some(&bob), None).await.csrf(&path);
    for csrf in ["", "0123.456.789", other.as_str(), bobs.as_str()] {
        let forged = env.send("POST", &path, Some(&manager), Some(&format!("verdict=approve&csrf={csrf}"))).await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "token {csrf:?}");
    }
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending);

    // A real token works once; replayed, it is refused before the engine is asked.
    let csrf = env.send("GET", &path, Some(&manager), None).await.csrf(&path);
    let form = format!("verdict=deny&csrf={csrf}");
    assert_eq!(env.send("POST", &path, Some(&manager), Some(&form)).await.status, StatusCode::SEE_OTHER);
    let replayed = env.send("POST", &path, Some(&manager), Some(&form)).await;
    assert_eq!(replayed.status, StatusCode::FORBIDDEN);
    // A denial is final: the detail page offers no form, a new token cannot change it.
    let detail = env.send("GET", &path, Some(&manager), None).await;
    assert!(detail.body.contains("denied by manager") && !detail.body.contains("id=\"decide\""), "{}", detail.body);
    let denied = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(denied.result.error_payload().unwrap().detail("reason"), Some(&json!("denied")));
}

#[tokio::test]
async fn the_requester_cannot_approve_and_others_without_the_role_cannot_enter() {
    let env = env();
    let id = env.request_confirmation().await;
    let alice_cookie = env.sign_in("t-alice").await;
    // Her own request is not in her list …
    let list = env.send("GET", "/inbox/", Some(&alice_cookie), None).await;
    assert!(!list.body.contains(&id), "{}", list.body);
    // … and approving it by its address is refused.
    let path = format!("/inbox/c/{id}");
    let csrf = env.send("GET", &path, Some(&alice_cookie), None).await.csrf(&path);
    let refused = env.send("POST", &path, Some(&alice_cookie), Some(&format!("verdict=approve&csrf={csrf}"))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("another person must approve it"));
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending);

    // Someone without the approver role cannot sign in: refused as a bad token is, no session.
    let intern = env.try_sign_in("t-intern").await;
    let bad = env.try_sign_in("t-nobody").await;
    assert_eq!(intern.status, StatusCode::UNAUTHORIZED, "{}", intern.body);
    assert!(intern.cookie(SESSION_COOKIE).is_none(), "no session: {:?}", intern.headers);
    assert_eq!(
        intern.body.replace(&intern.csrf("/inbox/sign-in"), ""),
        bad.body.replace(&bad.csrf("/inbox/sign-in"), "")
    );
    let bearer = env.request("GET", "/inbox/", &[("Authorization", "Bearer t-intern")], "").await;
    assert_eq!(bearer.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn bearer_auth_and_the_page_headers() {
    let env = env();
    let request = Request::get("/inbox/")
        .header(header::HOST, "127.0.0.1")
        .header(header::AUTHORIZATION, "Bearer t-manager")
        .body(Body::empty())
        .unwrap();
    let response = env.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let h = response.headers();
    assert_eq!(h[header::CACHE_CONTROL], "no-store");
    assert_eq!(
        h[header::CONTENT_SECURITY_POLICY],
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    );
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
    assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    // Every page, also a refusal and a redirect.
    let away = env.send("GET", "/inbox/", None, None).await;
    assert_eq!(away.headers[header::CACHE_CONTROL], "no-store");
    // Signing out forgets the cookie.
    let cookie = env.sign_in("t-manager").await;
    assert!(cookie.starts_with(&format!("{SESSION_COOKIE}=")));
    let page = env.send("GET", "/inbox/", Some(&cookie), None).await;
    let csrf = page.csrf("/inbox/sign-out");
    let out = env.send("POST", "/inbox/sign-out", Some(&cookie), Some(&format!("csrf={csrf}"))).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
}

/// The `href` of the page's stylesheet link.
fn stylesheet_href(page: &str) -> String {
    let at = page.find("<link rel=\"stylesheet\" href=\"").expect("a stylesheet link") + 29;
    page[at..at + page[at..].find('"').unwrap()].to_string()
}

#[tokio::test]
async fn the_pages_link_a_stylesheet_the_inbox_serves_and_allow_no_inline_style() {
    let env = env();
    let cookie = env.sign_in("t-manager").await;
    let id = env.request_confirmation().await;
    let sign_in = env.send("GET", "/inbox/sign-in", None, None).await;
    let list = env.send("GET", "/inbox/", Some(&cookie), None).await;
    let detail = env.send("GET", &format!("/inbox/c/{id}"), Some(&cookie), None).await;
    let href = stylesheet_href(&list.body);
    assert!(href.starts_with("/inbox/static/inbox-") && href.ends_with(".css"), "{href}");
    for page in [&sign_in, &list, &detail] {
        assert_eq!(stylesheet_href(&page.body), href, "every page links the same stylesheet");
        // No inline style (the policy would block it) and no script.
        assert!(!page.body.contains("<style") && !page.body.contains("style=\"") && !page.body.contains("<script"));
        let csp = page.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
        assert!(directives.contains(&"style-src 'self'") && directives.contains(&"default-src 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("script-src"), "{csp}");
    }
    // The detail page shows its state as a badge (the list's class), the decisions as badges.
    assert!(detail.body.contains("<dl id=\"detail\" class=\"pending\">"), "{}", detail.body);

    // The stylesheet: CSS, cached for good under its content-hashed name, with an ETag; no session needed.
    let css = env.send("GET", &href, None, None).await;
    assert_eq!(css.status, StatusCode::OK);
    assert_eq!(css.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
    assert_eq!(css.headers[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
    assert_eq!(css.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let etag = css.headers[header::ETAG].to_str().unwrap().to_string();
    let hash = href.trim_start_matches("/inbox/static/inbox-").trim_end_matches(".css");
    assert_eq!(etag, format!("\"{hash}\""));
    assert!(css.body.contains(".badge.approved") && css.body.contains(":focus-visible"), "{}", css.body);
    let request = Request::get(&href)
        .header(header::HOST, "localhost")
        .header(header::IF_NONE_MATCH, &etag)
        .body(Body::empty())
        .unwrap();
    let cached = env.app.clone().oneshot(request).await.unwrap();
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(cached.headers()[header::ETAG], etag.as_str());
    // Another name (an old hash) is not served.
    assert_eq!(
        env.send("GET", "/inbox/static/inbox-0000000000000000.css", None, None).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn the_inbox_checks_the_host_as_the_binding_does() {
    let env = env();
    let cookie = env.sign_in("t-manager").await;
    let send = |host: Vec<&'static str>, uri: &'static str| {
        let mut request = Request::get(uri).header(header::COOKIE, cookie.clone());
        for h in host {
            request = request.header(header::HOST, h);
        }
        env.app.clone().oneshot(request.body(Body::empty()).unwrap())
    };
    assert_eq!(send(vec!["localhost:8080"], "/inbox/").await.unwrap().status(), StatusCode::OK);
    assert_eq!(send(vec!["[::1]:1"], "/inbox/").await.unwrap().status(), StatusCode::OK);
    // A rebound name (the attacker's page, now resolving to loopback) reaches nothing, not even the sign-in form.
    for uri in ["/inbox/", "/inbox/sign-in", "/inbox/c/x"] {
        let refused = send(vec!["evil.example"], uri).await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{uri}");
        assert_eq!(refused.headers()[header::CONTENT_TYPE], "application/problem+json");
        assert_eq!(refused.headers()[header::CACHE_CONTROL], "no-store");
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        let problem: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["type"], "urn:agent-surface:protocol:host-not-allowed", "{problem}");
    }
    assert_eq!(send(vec![], "/inbox/").await.unwrap().status(), StatusCode::FORBIDDEN, "no Host at all");
    assert_eq!(send(vec!["localhost"], "http://evil.example/inbox/").await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(send(vec!["localhost", "localhost"], "/inbox/").await.unwrap().status(), StatusCode::BAD_REQUEST);
    // A decision from a rebound page is refused before its form is read (the request stays pending).
    let id = env.request_confirmation().await;
    let page = env.send("GET", &format!("/inbox/c/{id}"), Some(&cookie), None).await;
    let csrf = page.csrf(&format!("/inbox/c/{id}"));
    let post = Request::post(format!("/inbox/c/{id}"))
        .header(header::HOST, "evil.example")
        .header(header::COOKIE, cookie.clone())
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("verdict=approve&csrf={csrf}")))
        .unwrap();
    assert_eq!(env.app.clone().oneshot(post).await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending);

    // Hosts are configurable as the binding's are; empty admits any.
    let tokens = BearerTokens::new([("t-manager", Identity::new("manager").with_role("approver"))]);
    let open = router(InboxConfig {
        allowed_hosts: Vec::new(),
        ..InboxConfig::new(env.engine.clone(), Arc::new(tokens), "approver")
    });
    let request = Request::get("/inbox/sign-in").header(header::HOST, "inbox.example").body(Body::empty()).unwrap();
    assert_eq!(open.oneshot(request).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn the_sign_in_page_sends_someone_signed_in_to_the_inbox() {
    let env = env();
    let cookie = env.sign_in("t-manager").await;
    let page = env.send("GET", "/inbox/sign-in", Some(&cookie), None).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.headers[header::LOCATION], "/inbox/");
    assert_eq!(page.headers[header::CACHE_CONTROL], "no-store");
    // A bearer token counts too.
    let request = Request::get("/inbox/sign-in")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer t-manager")
        .body(Body::empty())
        .unwrap();
    assert_eq!(env.app.clone().oneshot(request).await.unwrap().status(), StatusCode::SEE_OTHER);
    // Nobody signed in or a stale cookie: the form (someone the inbox does not admit cannot sign
    // in at all).
    for cookie in [None, Some(format!("{SESSION_COOKIE}=t-gone"))] {
        let page = env.send("GET", "/inbox/sign-in", cookie.as_deref(), None).await;
        assert_eq!(page.status, StatusCode::OK, "{cookie:?}");
        assert!(page.body.contains("id=\"sign-in\""), "{}", page.body);
    }
}

/// Someone who follows an approval URL before signing in is sent to the sign-in form, and back to
/// that confirmation once signed in; the way back only ever leads to a confirmation's page under
/// the inbox (the id is percent-encoded into one path segment), whatever the query says.
#[tokio::test]
async fn an_approval_url_opened_before_signing_in_leads_back_to_its_confirmation() {
    let env = env();
    let id = env.request_confirmation().await;
    let detail = format!("/inbox/c/{id}");
    let anonymous = env.send("GET", &detail, None, None).await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    let sign_in = anonymous.headers[header::LOCATION].to_str().unwrap().to_string();
    assert_eq!(sign_in, format!("/inbox/sign-in?c={id}"));

    let form = env.send("GET", &sign_in, None, None).await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(form.body.contains(&format!("name=\"c\" value=\"{id}\"")), "{}", form.body);
    let csrf = form.csrf("/inbox/sign-in");
    let pre = form.sign_in_cookie();
    let signed =
        env.send("POST", "/inbox/sign-in", Some(&pre), Some(&format!("token=t-manager&csrf={csrf}&c={id}"))).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert_eq!(signed.headers[header::LOCATION], detail.as_str());
    let cookie = signed.headers[header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = env.send("GET", &detail, Some(&cookie), None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"decide\""), "{}", page.body);

    // Someone signed in already goes straight there; a bad token keeps the way back in the form.
    let again = env.send("GET", &sign_in, Some(&cookie), None).await;
    assert_eq!(again.headers[header::LOCATION], detail.as_str());
    let form = env.send("GET", &sign_in, None, None).await;
    let csrf = form.csrf("/inbox/sign-in");
    let pre = form.sign_in_cookie();
    let refused =
        env.send("POST", "/inbox/sign-in", Some(&pre), Some(&format!("token=t-nobody&csrf={csrf}&c={id}"))).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains(&format!("name=\"c\" value=\"{id}\"")), "{}", refused.body);

    // Hostile ways back stay on the inbox, and their text is escaped in the form.
    for (c, location) in [
        ("%2F%2Fevil.example%2Fx", "/inbox/c/%2F%2Fevil.example%2Fx"),
        ("https%3A%2F%2Fevil.example", "/inbox/c/https%3A%2F%2Fevil.example"),
        ("..%2F..%2Fmetrics", "/inbox/c/..%2F..%2Fmetrics"),
        ("%22%3E%3Cscript%3E", "/inbox/c/%22%3E%3Cscript%3E"),
    ] {
        let form = env.send("GET", &format!("/inbox/sign-in?c={c}"), None, None).await;
        assert!(!form.body.contains("<script>"), "{}", form.body);
        let csrf = form.csrf("/inbox/sign-in");
        let pre = form.sign_in_cookie();
        let signed =
            env.send("POST", "/inbox/sign-in", Some(&pre), Some(&format!("token=t-manager&csrf={csrf}&c={c}"))).await;
        assert_eq!(signed.headers[header::LOCATION], location, "{c}");
    }
}

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// Login CSRF: another site that fetched a sign-in form for itself (its token, bound to its own
/// sign-in cookie) cannot post it from a victim's browser to sign the victim in as the attacker —
/// not without a sign-in cookie, not with the victim's own, and not from another site at all.
#[tokio::test]
async fn a_sign_in_form_fetched_elsewhere_signs_nobody_in() {
    let env = env();
    // The attacker (carol) fetches a form and its cookie for herself.
    let attackers = env.send("GET", "/inbox/sign-in", None, None).await;
    let (token, their_cookie) = (attackers.csrf("/inbox/sign-in"), attackers.sign_in_cookie());
    let forged = format!("token=t-carol&csrf={token}");
    // The victim's browser: no sign-in cookie, or its own.
    let victims = env.send("GET", "/inbox/sign-in", None, None).await.sign_in_cookie();
    assert_ne!(victims, their_cookie);
    for cookie in [None, Some(victims.as_str())] {
        let mut headers = vec![FORM];
        headers.extend(cookie.map(|c| ("Cookie", c)));
        let refused = env.request("POST", "/inbox/sign-in", &headers, &forged).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{cookie:?}: {}", refused.body);
        assert!(refused.cookie(SESSION_COOKIE).is_none(), "nobody is signed in");
    }
    // A browser that says the form came from another site is refused before the token is read.
    let cross = [FORM, ("Cookie", their_cookie.as_str()), ("Sec-Fetch-Site", "cross-site")];
    let refused = env.request("POST", "/inbox/sign-in", &cross, &forged).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("sent from another site"), "{}", refused.body);
    // A form that is not a form is refused (415).
    let plain = [("Content-Type", "text/plain"), ("Cookie", their_cookie.as_str())];
    assert_eq!(env.request("POST", "/inbox/sign-in", &plain, &forged).await.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The same form in the browser it was issued to signs in: the refusals were the binding's.
    let own = [FORM, ("Cookie", their_cookie.as_str()), ("Sec-Fetch-Site", "same-origin")];
    let signed = env.request("POST", "/inbox/sign-in", &own, &forged).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert!(signed.cookie(SESSION_COOKIE).is_some());
    // Signing in forgets the sign-in cookie.
    let forget = signed.headers.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap()).collect::<Vec<_>>();
    assert!(
        forget.iter().any(|c| c.starts_with(&format!("{SIGN_IN_COOKIE}=;")) && c.contains("Max-Age=0")),
        "{forget:?}"
    );
}

/// Tokens that can be revoked while the inbox runs.
struct Revocable {
    tokens: BearerTokens,
    revoked: Mutex<HashSet<String>>,
}

impl Authenticator for Revocable {
    fn authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> Pin<Box<dyn Future<Output = Option<Identity>> + Send + 'a>> {
        Box::pin(async move {
            let token = headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")?;
            if self.revoked.lock().unwrap().contains(token) {
                return None;
            }
            self.tokens.authenticate(headers).await
        })
    }
}

/// The session cookie holds an opaque id, not the token; the session ends on sign-out (a copy of
/// the cookie kept from before is worth nothing), when it expires, and when its token is revoked
/// (the token is proven again on every request). Bearer tokens keep working for programs.
#[tokio::test]
async fn a_session_is_an_opaque_id_that_ends_on_sign_out_expiry_and_revocation() {
    let clock = ManualClock::new(agent_surface_core::Timestamp::from_unix_millis(1_795_935_600_000));
    let auth = Arc::new(Revocable {
        tokens: BearerTokens::new([("t-manager", Identity::new("manager").with_role("approver"))]),
        revoked: Mutex::new(HashSet::new()),
    });
    let env = env_at(Vec::new(), Some(clock.clone()), Some(auth.clone()), Duration::from_secs(3600));
    let signed_in = |cookie: &str| {
        let cookie = cookie.to_string();
        let env = &env;
        async move { env.send("GET", "/inbox/", Some(&cookie), None).await.status == StatusCode::OK }
    };
    // The raw token as a cookie (what the cookie once held) signs nobody in.
    assert!(!signed_in(&format!("{SESSION_COOKIE}=t-manager")).await);

    // Sign-out ends the session on the server.
    let cookie = env.sign_in("t-manager").await;
    assert!(signed_in(&cookie).await);
    let csrf = env.send("GET", "/inbox/", Some(&cookie), None).await.csrf("/inbox/sign-out");
    let out = env.send("POST", "/inbox/sign-out", Some(&cookie), Some(&format!("csrf={csrf}"))).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(!signed_in(&cookie).await, "the kept cookie is worth nothing after sign-out");

    // A session lasts `session_ttl` (the cookie says so too).
    let form = env.send("GET", "/inbox/sign-in", None, None).await;
    let signed = env
        .send(
            "POST",
            "/inbox/sign-in",
            Some(&form.sign_in_cookie()),
            Some(&format!("token=t-manager&csrf={}", form.csrf("/inbox/sign-in"))),
        )
        .await;
    let set = signed.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(set.contains("Max-Age=3600") && set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    clock.advance(Duration::from_secs(3599));
    assert!(signed_in(&cookie).await);
    clock.advance(Duration::from_secs(1));
    assert!(!signed_in(&cookie).await, "expired");

    // Signing in again from the same browser ends the session it held.
    let first = env.sign_in("t-manager").await;
    let form = env.send("GET", "/inbox/sign-in", None, None).await;
    let both = format!("{first}; {}", form.sign_in_cookie());
    let again = env
        .send(
            "POST",
            "/inbox/sign-in",
            Some(&both),
            Some(&format!("token=t-manager&csrf={}", form.csrf("/inbox/sign-in"))),
        )
        .await;
    assert_eq!(again.status, StatusCode::SEE_OTHER, "{}", again.body);
    assert!(!signed_in(&first).await, "the earlier session ended");
    assert!(signed_in(&again.cookie(SESSION_COOKIE).unwrap()).await);

    // A revoked token ends its sessions, for good.
    let cookie = env.sign_in("t-manager").await;
    assert!(signed_in(&cookie).await);
    auth.revoked.lock().unwrap().insert("t-manager".into());
    assert!(!signed_in(&cookie).await, "revoked");
    auth.revoked.lock().unwrap().clear();
    assert!(!signed_in(&cookie).await, "the session ended; reinstating the token does not revive it");
    let bearer = env.request("GET", "/inbox/", &[("Authorization", "Bearer t-manager")], "").await;
    assert_eq!(bearer.status, StatusCode::OK, "bearer auth works without a session");
}

/// With `Secure` cookies (the default), the sign-in form's cookie is `__Host-` prefixed (which
/// needs `Path=/` and `Secure`), so a sibling host cannot plant one.
#[tokio::test]
async fn secure_cookies_and_the_host_prefix() {
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let tokens = BearerTokens::new([("t-manager", Identity::new("manager").with_role("approver"))]);
    let app = router(InboxConfig::new(engine, Arc::new(tokens), "approver"));
    let request = Request::get("/inbox/sign-in").header(header::HOST, "localhost").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let set = response.headers()[header::SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.starts_with("__Host-inbox_signin="), "{set}");
    for attribute in ["; Path=/;", "; HttpOnly", "; SameSite=Strict", "; Secure", "; Max-Age=1800"] {
        assert!(set.contains(attribute), "{attribute} in {set}");
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let page = String::from_utf8(body.to_vec()).unwrap();
    let csrf = Page { status: StatusCode::OK, headers: http::HeaderMap::new(), body: page }.csrf("/inbox/sign-in");
    let pair = set.split(';').next().unwrap().to_string();
    let post = Request::post("/inbox/sign-in")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, pair)
        .body(Body::from(format!("token=t-manager&csrf={csrf}")))
        .unwrap();
    let signed = app.clone().oneshot(post).await.unwrap();
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let session = signed.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(session.starts_with("__Host-inbox_session=") && session.ends_with("; Secure"), "{session}");
    for attribute in ["; Path=/;", "; HttpOnly", "; SameSite=Strict"] {
        assert!(session.contains(attribute), "{attribute} in {session}");
    }
    // The prefixed cookie signs in; one without the prefix (which a sibling host could set) does not.
    let id = session.split(';').next().unwrap().split_once('=').unwrap().1.to_string();
    for (cookie, status) in
        [(format!("__Host-inbox_session={id}"), StatusCode::OK), (format!("inbox_session={id}"), StatusCode::SEE_OTHER)]
    {
        let list = Request::get("/inbox/").header(header::HOST, "localhost").header(header::COOKIE, &cookie);
        let listed = app.clone().oneshot(list.body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(listed.status(), status, "{cookie}");
    }
}

/// Form posts must be forms (`415` otherwise), and a post a browser marks as sent from another
/// site is refused even with a valid token; nothing changes.
#[tokio::test]
async fn posts_must_be_forms_from_this_site() {
    let env = env();
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let manager = env.sign_in("t-manager").await;
    let csrf = env.send("GET", &path, Some(&manager), None).await.csrf(&path);
    let form = format!("verdict=approve&csrf={csrf}");
    for content_type in [None, Some("application/json"), Some("text/plain"), Some("multipart/form-data; boundary=x")] {
        let mut headers = vec![("Cookie", manager.as_str())];
        headers.extend(content_type.map(|t| ("Content-Type", t)));
        let refused = env.request("POST", &path, &headers, &form).await;
        assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{content_type:?}");
    }
    for site in ["cross-site", "same-site"] {
        let headers = [FORM, ("Cookie", manager.as_str()), ("Sec-Fetch-Site", site)];
        assert_eq!(env.request("POST", &path, &headers, &form).await.status, StatusCode::FORBIDDEN, "{site}");
    }
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Pending);
    // The token was not spent by the refusals: the form, as a browser on this site sends it, decides.
    let headers = [
        ("Content-Type", "application/x-www-form-urlencoded; charset=UTF-8"),
        ("Cookie", manager.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    assert_eq!(env.request("POST", &path, &headers, &form).await.status, StatusCode::SEE_OTHER);
    assert_eq!(env.engine.get(&id).await.unwrap().unwrap().state, ConfirmationState::Approved { by: "manager".into() });
}

/// An expired confirmation cannot be decided: `410 Gone`, even with a form fetched while it was
/// pending; its page then offers no form, and the agent's repeat with the id is refused.
#[tokio::test]
async fn deciding_an_expired_confirmation_is_gone() {
    let clock = ManualClock::new(agent_surface_core::Timestamp::from_unix_millis(1_795_935_600_000));
    let env = env_at(Vec::new(), Some(clock.clone()), None, DEFAULT_SESSION_TTL);
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let manager = env.sign_in("t-manager").await;
    let before = env.send("GET", &path, Some(&manager), None).await;
    assert!(before.body.contains("<dd id=\"state\">pending</dd>"), "{}", before.body);
    let csrf = before.csrf(&path);
    clock.advance(Duration::from_secs(61));
    // Past its deadline the page says so (no sweep has marked it yet).
    let page = env.send("GET", &path, Some(&manager), None).await;
    assert!(page.body.contains("<dd id=\"state\">expired</dd>"), "{}", page.body);
    let gone = env.send("POST", &path, Some(&manager), Some(&format!("verdict=approve&csrf={csrf}"))).await;
    assert_eq!(gone.status, StatusCode::GONE, "{}", gone.body);
    assert!(gone.body.contains("This confirmation expired"), "{}", gone.body);
    let page = env.send("GET", &path, Some(&manager), None).await;
    assert!(!page.body.contains("id=\"decide\""), "{}", page.body);
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(!list.body.contains(&path), "no longer listed: {}", list.body);
    let late = env.registry.invoke_detailed(refund().with_confirmation(&id), alice()).await;
    assert_eq!(late.result.code(), Some(ErrorCode::ConfirmationInvalid));
}

/// One identity signing in over and over ends only its own oldest sessions, never another
/// person's; and a request with several live session cookies (one planted beside the person's
/// own) is signed in as nobody.
#[tokio::test]
async fn sessions_per_person_are_capped_and_several_session_cookies_prove_nobody() {
    let env = env();
    let carol = env.sign_in("t-carol").await;
    let first = env.sign_in("t-manager").await;
    let mut last = String::new();
    for _ in 0..20 {
        last = env.sign_in("t-manager").await;
    }
    let status = |cookie: String| {
        let env = &env;
        async move { env.send("GET", "/inbox/", Some(&cookie), None).await.status }
    };
    assert_eq!(status(first.clone()).await, StatusCode::SEE_OTHER, "the manager's oldest session ended");
    assert_eq!(status(last.clone()).await, StatusCode::OK);
    assert_eq!(status(carol.clone()).await, StatusCode::OK, "carol's session is not crowded out");
    // Two live sessions in one request: which is the person's cannot be told, so neither is used.
    assert_eq!(status(format!("{carol}; {last}")).await, StatusCode::SEE_OTHER);
    // The same one twice, or beside an ended one, is still that session.
    assert_eq!(status(format!("{carol}; {carol}")).await, StatusCode::OK);
    assert_eq!(status(format!("{first}; {carol}")).await, StatusCode::OK);
}

/// The list shows each request's input, its sensitive fields redacted, escaped: whole when
/// short, folded into a `<details>` when long.
#[tokio::test]
async fn the_list_shows_the_redacted_input() {
    let env = env();
    let short = env.request_confirmation().await;
    let long_order = format!("A-<{}>", "9".repeat(80));
    let long = env
        .request_confirmation_of(InvokeRequest::new(
            "orders.refund",
            json!({"order": long_order, "cents": 7, "card": "4111 1111 1111 1111"}),
        ))
        .await;
    let manager = env.sign_in("t-manager").await;
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    let row = |id: &str| {
        let at = list.body.find(&format!("/inbox/c/{id}\"")).unwrap();
        list.body[at..at + list.body[at..].find("</tr>").unwrap()].to_string()
    };
    let short_row = row(&short);
    assert!(
        short_row.contains(
            "<td class=\"input\"><pre>{&quot;card&quot;:&quot;[redacted]&quot;,&quot;cents&quot;:4200,&quot;order&quot;:&quot;A-1&quot;}</pre></td>"
        ),
        "{short_row}"
    );
    assert!(short_row.contains("<td class=\"decided\">—</td>"), "{short_row}");
    let long_row = row(&long);
    assert!(long_row.contains("<td class=\"input\"><details><summary><code>"), "{long_row}");
    assert!(long_row.contains(&format!("A-&lt;{}&gt;", "9".repeat(80))), "the whole input, escaped: {long_row}");
    assert!(long_row.contains("[redacted]"), "{long_row}");
    assert!(!list.body.contains("4111 1111") && !list.body.contains("1111 1111"), "the card is never shown");
}

/// "One manager and one security officer": the pages show the slots and who fills which; dana
/// (both roles) approves first and moves to the security slot when max (manager only) approves;
/// on another request, a second manager-only approver is not listed and is refused (`409`)
/// while the security slot waits.
#[tokio::test]
async fn role_slots_show_who_fills_which_and_refuse_a_taken_slot() {
    let env = env_with(vec![(
        Scope::capability("orders.refund"),
        Quorum::default().with_slot("manager").with_slot("security"),
    )]);
    let approve = |page: &Page, path: &str| format!("verdict=approve&csrf={}", page.csrf(path));
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let dana = env.sign_in("t-dana").await;
    let list = env.send("GET", "/inbox/", Some(&dana), None).await;
    assert!(
        list.body.contains("<td class=\"approvals\">0 of 2 approvals (one manager, one security)</td>"),
        "{}",
        list.body
    );
    let detail = env.send("GET", &path, Some(&dana), None).await;
    assert!(
        detail.body.contains(
            "<dt>Slots</dt><dd><ul id=\"slots\"><li class=\"open\">manager: open</li><li class=\"open\">security: \
             open</li></ul></dd>"
        ),
        "{}",
        detail.body
    );
    let decided = env.send("POST", &path, Some(&dana), Some(&approve(&detail, &path))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let max = env.sign_in("t-max").await;
    let detail = env.send("GET", &path, Some(&max), None).await;
    assert!(detail.body.contains("<li class=\"filled\">manager: dana</li>"), "{}", detail.body);
    let decided = env.send("POST", &path, Some(&max), Some(&approve(&detail, &path))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let detail = env.send("GET", &path, Some(&max), None).await;
    assert!(
        detail.body.contains("<li class=\"filled\">manager: max</li><li class=\"filled\">security: dana</li>"),
        "dana moved to security: {}",
        detail.body
    );
    assert_eq!(
        env.engine.get(&id).await.unwrap().unwrap().state,
        ConfirmationState::Approved { by: "dana, max".into() }
    );

    // Another request: max takes the manager slot; moe (manager only) cannot count.
    let id = env.request_confirmation_of(refund_of(100)).await;
    let path = format!("/inbox/c/{id}");
    let detail = env.send("GET", &path, Some(&max), None).await;
    let decided = env.send("POST", &path, Some(&max), Some(&approve(&detail, &path))).await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    let moe = env.sign_in("t-moe").await;
    let list = env.send("GET", "/inbox/", Some(&moe), None).await;
    assert!(!list.body.contains(&id), "no slot left for moe: {}", list.body);
    let detail = env.send("GET", &path, Some(&moe), None).await;
    let refused = env.send("POST", &path, Some(&moe), Some(&approve(&detail, &path))).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(refused.body.contains("waits for approvers with another role"), "{}", refused.body);
    let sam = env.sign_in("t-sam").await;
    let detail = env.send("GET", &path, Some(&sam), None).await;
    assert!(
        detail.body.contains("<li class=\"filled\">manager: max</li><li class=\"open\">security: open</li>"),
        "{}",
        detail.body
    );
    assert!(env.send("GET", "/inbox/", Some(&sam), None).await.body.contains(&id), "sam can fill security");
}

/// "2 of carol, dave and sam": the pages name the approvers; someone else is not listed and is
/// refused (`403`); two of the named complete it.
#[tokio::test]
async fn named_approvers_are_shown_and_only_they_count() {
    let quorum = Quorum::of(2).with_approver("carol").with_approver("dave").with_approver("sam");
    let env = env_with(vec![(Scope::capability("orders.refund"), quorum)]);
    let id = env.request_confirmation().await;
    let path = format!("/inbox/c/{id}");
    let approve = |page: &Page| format!("verdict=approve&csrf={}", page.csrf(&path));
    let manager = env.sign_in("t-manager").await;
    assert!(env.send("GET", "/inbox/", Some(&manager), None).await.body.contains("id=\"empty\""));
    // As the list, the detail page is not for him: refused as his approval would be, showing nothing.
    let detail = env.send("GET", &path, Some(&manager), None).await;
    assert_eq!(detail.status, StatusCode::FORBIDDEN, "{}", detail.body);
    assert!(detail.body.contains("does not count you") && !detail.body.contains("Refund"), "{}", detail.body);
    assert!(!detail.body.contains("id=\"decide\""), "{}", detail.body);
    for token in ["t-carol", "t-sam"] {
        let who = env.sign_in(token).await;
        let detail = env.send("GET", &path, Some(&who), None).await;
        assert!(detail.body.contains("<dd id=\"approvals\">"), "{}", detail.body);
        if token == "t-carol" {
            assert!(
                detail.body.contains("<dd id=\"approvals\">0 of 2 approvals (2 of carol, dave, sam)</dd>"),
                "{}",
                detail.body
            );
        }
        let decided = env.send("POST", &path, Some(&who), Some(&approve(&detail))).await;
        assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.body);
    }
    assert_eq!(
        env.engine.get(&id).await.unwrap().unwrap().state,
        ConfirmationState::Approved { by: "carol, sam".into() }
    );
}

/// An inbox given no audit trail lists no recent decisions, and says why rather than "No decision
/// yet" (which would be false once anyone decided); the confirmation's own page shows its
/// decisions.
#[tokio::test]
async fn without_an_audit_trail_the_inbox_says_it_lists_no_decisions() {
    let env = env_trail(Vec::new(), None, None, DEFAULT_SESSION_TTL, Trail::Absent);
    let manager = env.sign_in("t-manager").await;
    let inv = env.registry.invoke_detailed(refund(), alice()).await;
    let id = inv.result.error_payload().unwrap().detail("confirmationId").unwrap().as_str().unwrap().to_string();
    env.engine.approve(&id, &Identity::new("manager")).await.unwrap();
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(list.body.contains("id=\"no-trail\"") && list.body.contains("this service keeps none"), "{}", list.body);
    assert!(!list.body.contains("No decision yet"), "{}", list.body);
    let page = env.send("GET", &format!("/inbox/c/{id}"), Some(&manager), None).await;
    assert!(page.body.contains("id=\"decisions\"") && page.body.contains("manager"), "{}", page.body);
}

/// An audit trail that cannot be read just now: the inbox still lists what is pending, says the
/// trail could not be read (not "No decision yet", nor that there is no trail), and nothing of
/// the store's error reaches the page; the operator log has it, redacted.
#[test]
fn an_unreadable_audit_trail_is_said_and_its_error_stays_in_the_operator_log() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (list, log) = agent_surface_testing::capture_operator_log(|| {
        runtime.block_on(async {
            let env = env_trail(Vec::new(), None, None, DEFAULT_SESSION_TTL, Trail::Unreadable);
            let manager = env.sign_in("t-manager").await;
            let inv = env.registry.invoke_detailed(refund(), alice()).await;
            assert_eq!(inv.result.error_payload().unwrap().code(), ErrorCode::ConfirmationRequired);
            env.send("GET", "/inbox/", Some(&manager), None).await
        })
    });
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains("id=\"trail-unavailable\""), "{}", list.body);
    assert!(list.body.contains("Refund 4200 cents"), "the pending request is listed: {}", list.body);
    assert!(!list.body.contains("No decision yet") && !list.body.contains("id=\"no-trail\""), "{}", list.body);
    for secret in ["10.1.2.3", "hunter2", "redis://", "connection refused"] {
        assert!(!list.body.contains(secret), "{secret} on the page: {}", list.body);
    }
    assert!(log.contains("recent decisions unavailable"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
}

/// The manager's token, through an authenticator that can be made unable to check credentials
/// (an OAuth resource server whose signing keys cannot be fetched: `Unavailable`).
#[derive(Clone)]
struct Checkable {
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Authenticator for Checkable {
    fn authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> futures_util::future::BoxFuture<'a, Option<Identity>> {
        Box::pin(async move { self.try_authenticate(headers).await.ok().flatten() })
    }

    fn try_authenticate<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<Identity>, agent_surface_policy::AuthRejection>> {
        let manager = headers.get(header::AUTHORIZATION).is_some_and(|v| v == "Bearer t-manager");
        let down = self.down.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(std::future::ready(match (down, manager) {
            (true, _) => Err(agent_surface_policy::AuthRejection::without_challenge(
                agent_surface_policy::AuthRejectionKind::Unavailable,
            )),
            (false, true) => Ok(Some(Identity::new("manager").with_role("approver"))),
            (false, false) => Ok(None),
        }))
    }
}

/// An authenticator that cannot check credentials just now is no verdict on a session's token:
/// the inbox answers `503` and keeps the session (shared by every replica), which works again once
/// credentials can be checked; a sign-in meanwhile is `503` too, not "that token signs nobody in".
#[tokio::test]
async fn a_session_outlives_an_authenticator_that_cannot_check_credentials_for_a_while() {
    let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let env = env_at(Vec::new(), None, Some(Arc::new(Checkable { down: down.clone() })), DEFAULT_SESSION_TTL);
    let manager = env.sign_in("t-manager").await;
    assert_eq!(env.send("GET", "/inbox/", Some(&manager), None).await.status, StatusCode::OK);
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    let meanwhile = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert_eq!(meanwhile.status, StatusCode::SERVICE_UNAVAILABLE, "{}", meanwhile.body);
    assert_eq!(env.try_sign_in("t-manager").await.status, StatusCode::SERVICE_UNAVAILABLE);
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    let again = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert_eq!(again.status, StatusCode::OK, "the session was kept: {}", again.body);
}

/// The requester may see their own confirmation whatever its quorum, but only by their exact name:
/// an approver whose name merely looks like the requester's (`AIice`, a capital I, for `alice`)
/// is refused as anyone the quorum does not count, and gets no form to decide it with.
#[tokio::test]
async fn a_name_that_only_looks_like_the_requesters_is_not_the_requester() {
    let tokens = BearerTokens::new([
        ("t-alice", Identity::new("alice").with_role("approver")),
        ("t-lookalike", Identity::new("AIice").with_role("approver")),
    ]);
    let quorum = Quorum::of(1).with_approver("carol");
    let env =
        env_at(vec![(Scope::capability("orders.refund"), quorum)], None, Some(Arc::new(tokens)), DEFAULT_SESSION_TTL);
    let id = env.request_confirmation().await;
    let lookalike = env.sign_in("t-lookalike").await;
    let page = env.send("GET", &format!("/inbox/c/{id}"), Some(&lookalike), None).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    assert!(!page.body.contains("csrf"), "{}", page.body);
    // The requester herself still sees it.
    let alice = env.sign_in("t-alice").await;
    assert_eq!(env.send("GET", &format!("/inbox/c/{id}"), Some(&alice), None).await.status, StatusCode::OK);
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

/// Defines and mounts `notes.send` beside `orders.refund`: a second capability, whose
/// confirmations any approver may decide (no quorum is configured for it). Keep the mount.
fn define_notes(env: &Env) -> agent_surface_registry::Mount {
    env.registry
        .define("notes", |t| {
            t.capability("send", "Send a note.")
                .effect(Effect::External)
                .confirm(|i: &Note| format!("Send the note {}.", i.text))
                .handler(|_c: Ctx, i: Note| async move { Ok::<_, AgentSurfaceError>(json!({"sent": i.text})) });
        })
        .unwrap();
    env.registry.mount("notes", "main").unwrap()
}

fn note(text: &str) -> InvokeRequest {
    InvokeRequest::new("notes.send", json!({"text": text}))
}

fn the_manager() -> Identity {
    Identity::new("manager").with_role("approver")
}

fn finance(name: &str) -> Identity {
    Identity::new(name).with_role("approver").with_role("finance")
}

/// The rows of the list's recent decisions (empty when it shows none).
fn recent_rows(list: &Page) -> Vec<String> {
    let Some(table) = list.body.split("<table id=\"recent\">").nth(1) else { return Vec::new() };
    let body = table.split("</tbody>").next().unwrap();
    body.split("<tr>").skip(2).map(str::to_string).collect()
}

/// The recent decisions are those on confirmations the viewer may open (the detail page's rule:
/// the quorum counts them, or they requested or decided it): a decision on a refund only finance
/// counts for is carol's to see, not the manager's; the manager still sees decisions on a note
/// anyone counts for, on a refund he asked for, and his own. Once the engine no longer holds a
/// confirmation (swept after its deadline), each sees only their own decisions on it.
#[tokio::test]
async fn the_recent_decisions_are_those_on_confirmations_the_viewer_may_see() {
    let clock = ManualClock::new(agent_surface_core::Timestamp::from_unix_millis(1_795_935_600_000));
    let quorum = Quorum::of(1).with_role("finance");
    let env =
        env_at(vec![(Scope::capability("orders.refund"), quorum)], Some(clock.clone()), None, DEFAULT_SESSION_TTL);
    let _notes = define_notes(&env);
    let carol = env.sign_in("t-carol").await;
    let manager = env.sign_in("t-manager").await;

    // X: alice's refund, decided by carol in the inbox; not the manager's to open.
    let x = env.request_confirmation().await;
    let path = format!("/inbox/c/{x}");
    let detail = env.send("GET", &path, Some(&carol), None).await;
    let form = format!("verdict=approve&note=x-note&csrf={}", detail.csrf(&path));
    assert_eq!(env.send("POST", &path, Some(&carol), Some(&form)).await.status, StatusCode::SEE_OTHER);
    assert_eq!(env.send("GET", &path, Some(&manager), None).await.status, StatusCode::FORBIDDEN);
    // Y: alice's note, which counts anyone, approved by dave.
    let y = env.request_confirmation_of(note("y")).await;
    env.engine.approve_with_note(&y, &finance("dave"), Some("y-note")).await.unwrap();
    // Z: a refund the manager asked for, approved by carol.
    let as_manager =
        InvokeOptions::new(Consumer::authenticated(r#"http:principal:["manager"]:default"#, the_manager()));
    let z = env.request_confirmation_as(refund_of(7), as_manager).await;
    env.engine.approve_with_note(&z, &finance("carol"), Some("z-note")).await.unwrap();
    // W: alice's note, denied by the manager.
    let w = env.request_confirmation_of(note("w")).await;
    env.engine.deny_with_note(&w, &the_manager(), Some("w-note")).await.unwrap();

    let notes_of = |rows: Vec<String>| -> Vec<String> {
        rows.iter().map(|r| r.rsplit("<td>").next().unwrap().trim_end_matches("</td></tr>\n").to_string()).collect()
    };
    let carols = recent_rows(&env.send("GET", "/inbox/", Some(&carol), None).await);
    assert_eq!(notes_of(carols), ["w-note", "z-note", "y-note", "x-note"]);
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(!list.body.contains("x-note"), "{}", list.body);
    assert_eq!(notes_of(recent_rows(&list)), ["w-note", "z-note", "y-note"]);

    // Past the deadline and the store's retention, the engine holds none of them: only one's own.
    clock.advance(Duration::from_secs(2 * 60 * 60));
    assert!(env.engine.get(&x).await.unwrap().is_none());
    let carols = recent_rows(&env.send("GET", "/inbox/", Some(&carol), None).await);
    assert_eq!(notes_of(carols), ["z-note", "x-note"]);
    let managers = recent_rows(&env.send("GET", "/inbox/", Some(&manager), None).await);
    assert_eq!(notes_of(managers), ["w-note"]);
}

/// A page shows the last 20 decisions its viewer may see, however many newer ones they may not;
/// to tell, it reads at most 100 confirmations, and ends the list there.
#[tokio::test]
async fn the_recent_decisions_fill_the_page_with_those_the_viewer_may_see() {
    let env = env_with(vec![(Scope::capability("orders.refund"), Quorum::of(1).with_role("finance"))]);
    let _notes = define_notes(&env);
    let manager = env.sign_in("t-manager").await;
    let carol = env.sign_in("t-carol").await;
    for n in 0..21 {
        let id = env.request_confirmation_of(note(&format!("n{n}"))).await;
        env.engine.approve(&id, &finance("dave")).await.unwrap();
    }
    let refunds = |from: u64, to: u64| {
        let env = &env;
        async move {
            for cents in from..to {
                let id = env.request_confirmation_of(refund_of(cents)).await;
                env.engine.approve(&id, &finance("carol")).await.unwrap();
            }
        }
    };
    refunds(1, 21).await;
    let rows = recent_rows(&env.send("GET", "/inbox/", Some(&manager), None).await);
    assert_eq!(rows.len(), 20, "{rows:?}");
    assert!(rows.iter().all(|r| r.contains("<td>notes.send</td>")), "{rows:?}");
    // 100 newer decisions he may not see: the reads' budget ends the list before his.
    refunds(21, 101).await;
    let list = env.send("GET", "/inbox/", Some(&manager), None).await;
    assert!(recent_rows(&list).is_empty() && list.body.contains("id=\"recent-cut\""), "{}", list.body);
    assert!(!list.body.contains("id=\"no-recent\""), "it does not say there is none: {}", list.body);
    // Carol's own decisions need no reads.
    let rows = recent_rows(&env.send("GET", "/inbox/", Some(&carol), None).await);
    assert_eq!(rows.len(), 20, "{rows:?}");
    assert!(rows.iter().all(|r| r.contains("<td>carol</td>")), "{rows:?}");
}
