//! The approval inbox: server-rendered pages where a person sees the confirmations that wait for
//! them and approves or denies them (works without JavaScript; the pages carry none).
//!
//! # Overview
//!
//! [`router`] serves, under [`InboxConfig::prefix`] (default `/inbox`):
//!
//! | route | what |
//! |---|---|
//! | `GET {prefix}/` | the pending confirmations the signed-in approver may decide (summary, capability, requester, effect, approvals so far — "1 of 2 approvals" —, requested and expires at), and the recent decisions from the audit trail |
//! | `GET {prefix}/c/{id}` | one confirmation: the same, its state, the decisions so far (who, what, when), the input with sensitive fields redacted, and the approve / deny form with an optional note (while the approver may still decide) |
//! | `POST {prefix}/c/{id}` | the decision (`verdict=approve|deny`, `note`, `csrf`) |
//! | `GET`, `POST {prefix}/sign-in` | a form that takes an access token and keeps it in a cookie (someone already signed in is sent to the inbox, `303`); someone who opened a confirmation's page (an approval URL) before signing in is sent there (`?c=ID`), and back to it after signing in |
//! | `POST {prefix}/sign-out` | forgets the cookie |
//! | `GET {prefix}/static/inbox-{hash}.css` | the pages' stylesheet (`text/css`; its name carries a hash of its content, so it is cached for a year as `immutable`, with an `ETag`) |
//!
//! **Who.** The approver is whoever the [`Authenticator`] says the credential proves: a bearer
//! token in `Authorization`, or the token the sign-in form stored in the cookie `inbox_session`
//! (`HttpOnly`, `SameSite=Strict`, `Path={prefix}`, and `Secure` unless
//! [`InboxConfig::secure_cookie`] is off for plain-HTTP development). With
//! [`InboxConfig::approver_role`] only identities with that role may use the inbox.
//!
//! **The engine's rules hold.** Decisions go through [`ConfirmationEngine::approve_with_note`] and
//! [`deny_with_note`](ConfirmationEngine::deny_with_note): a requester cannot approve their own
//! request (the page refuses it, `403`), an expired confirmation cannot be decided (`410`), a
//! decision is final (`409`), an approver decides a confirmation once (`409`, also while it
//! waits for the rest of its quorum), and an approval from someone with none of the roles its
//! quorum asks for is refused (`403`). The list leaves out the approver's own requests, those
//! they decided already, and those whose quorum does not count them.
//!
//! **Safe as a web page.** Every state change (decide, sign in, sign out) needs the form's token:
//! bound to the credential and to the one action, valid 30 minutes, accepted once, so a forged or
//! replayed post is refused (`403`). Every response carries `Cache-Control: no-store` (but the
//! stylesheet), a `Content-Security-Policy` that allows nothing but this origin's stylesheets and
//! forms posting to this origin (`default-src 'none'; style-src 'self'; form-action 'self';
//! frame-ancestors 'none'; base-uri 'none'`: no script, no inline style),
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and `X-Frame-Options: DENY`;
//! every value on a page is HTML-escaped. Bodies are capped at 16 KiB.
//!
//! **Host check.** As on the HTTP binding's routes, every request's host (the authority of an
//! absolute-form target, else the `Host` header; the port ignored) must be one of
//! [`InboxConfig::allowed_hosts`] — loopback by default, which protects a local inbox against DNS
//! rebinding: another host is the `403` protocol fault `host-not-allowed`, several `Host` fields
//! the `400` fault `invalid-header` (problem details, as the binding answers them).
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use agent_surface_http::inbox::{InboxConfig, router};
//! use agent_surface_policy::{BearerTokens, ConfirmationConfig, ConfirmationEngine, Identity};
//!
//! let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
//! let approvers = Arc::new(BearerTokens::new([("t-manager", Identity::new("manager").with_role("approver"))]));
//! let inbox = router(InboxConfig { approver_role: Some("approver".into()), ..InboxConfig::new(engine, approvers) });
//! # let _: axum::Router = inbox;
//! ```

mod csrf;
mod html;

use std::sync::Arc;

use agent_surface_policy::{
    ApprovalError, AuditKind, AuditSink, Authenticator, Clock, ConfirmationEngine, ConfirmationState, Identity,
};
use agent_surface_server::HostCheck;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::wire::{PROBLEM_JSON, ProtocolFault};

use csrf::{Csrf, form_fields};

/// The cookie that holds a signed-in approver's token.
pub const SESSION_COOKIE: &str = "inbox_session";

/// The most pending confirmations a page lists.
const MAX_LISTED: usize = 200;

/// The most recent decisions a page shows.
const MAX_RECENT: usize = 20;

/// The largest request body the inbox reads.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// What the pages may load: this origin's stylesheets, nothing else (no script, no inline style);
/// forms post to this origin only.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The inbox's configuration. Build it with struct update syntax over [`InboxConfig::new`].
#[derive(Clone)]
pub struct InboxConfig {
    /// The engine whose confirmations are decided (the one the registry asks).
    pub engine: Arc<ConfirmationEngine>,
    /// Who the approver is, from a bearer token.
    pub authenticator: Arc<dyn Authenticator>,
    /// Where the recent decisions come from (the sink the engine writes to); `None`: none shown.
    pub audit: Option<Arc<dyn AuditSink>>,
    /// The role an identity needs to use the inbox; `None`: any signed-in identity.
    pub approver_role: Option<String>,
    /// The path prefix (default `/inbox`).
    pub prefix: String,
    /// Whether the session cookie is marked `Secure` (default `true`; turn it off only to try the
    /// inbox over plain HTTP on a loopback address).
    pub secure_cookie: bool,
    /// Accepted host names, compared as [`HttpConfig::allowed_hosts`](crate::HttpConfig::allowed_hosts)
    /// are (the port ignored; empty: any host); the default admits loopback only. Give it the
    /// names the binding's routes admit.
    pub allowed_hosts: Vec<String>,
}

impl InboxConfig {
    /// An inbox for `engine`'s confirmations, approvers known to `authenticator`.
    pub fn new(engine: Arc<ConfirmationEngine>, authenticator: Arc<dyn Authenticator>) -> InboxConfig {
        InboxConfig {
            engine,
            authenticator,
            audit: None,
            approver_role: None,
            prefix: "/inbox".to_string(),
            secure_cookie: true,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
        }
    }
}

impl std::fmt::Debug for InboxConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxConfig")
            .field("approver_role", &self.approver_role)
            .field("prefix", &self.prefix)
            .field("secure_cookie", &self.secure_cookie)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

struct Inbox {
    config: InboxConfig,
    csrf: Csrf,
    /// The stylesheet's path (`{prefix}/static/inbox-{hash}.css`), linked from every page.
    stylesheet: String,
}

/// Who is asking: the identity and the credential it was proven with (tokens are bound to it).
struct Approver {
    identity: Identity,
    credential: String,
}

/// The inbox's routes (see the [module](self)); merge them into the application's router.
pub fn router(mut config: InboxConfig) -> Router {
    let trimmed = config.prefix.trim_end_matches('/');
    config.prefix =
        if trimmed.is_empty() || trimmed.starts_with('/') { trimmed.to_string() } else { format!("/{trimmed}") };
    let prefix = config.prefix.clone();
    let mut key = [0u8; 32];
    agent_surface_core::id::fill_random(&mut key);
    let stylesheet = format!("{prefix}/static/inbox-{}.css", stylesheet_hash());
    let state = Arc::new(Inbox { config, csrf: Csrf::new(key), stylesheet: stylesheet.clone() });
    let mut router = Router::new();
    if !prefix.is_empty() {
        router = router.route(&prefix, get(list));
    }
    router
        .route(&format!("{prefix}/"), get(list))
        .route(&format!("{prefix}/c/{{id}}"), get(show).post(decide))
        .route(&format!("{prefix}/sign-in"), get(sign_in_form).post(sign_in))
        .route(&format!("{prefix}/sign-out"), axum::routing::post(sign_out))
        .route(&stylesheet, get(stylesheet_file))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(secure_headers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), host_guard))
        .with_state(state)
}

/// The pages' stylesheet.
const STYLESHEET: &str = include_str!("inbox.css");

/// The first 16 hex digits of the stylesheet's SHA-256: its name and its `ETag`.
fn stylesheet_hash() -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(STYLESHEET.as_bytes());
    agent_surface_core::hex::Hex(&digest[..8]).to_string()
}

/// `GET {prefix}/static/inbox-{hash}.css`: the stylesheet, cached for a year (a new content is a
/// new name); `304` when the client already holds it.
async fn stylesheet_file(headers: HeaderMap) -> Response {
    let etag = format!("\"{}\"", stylesheet_hash());
    let cached = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let status = if cached { StatusCode::NOT_MODIFIED } else { StatusCode::OK };
    let body = if cached { "" } else { STYLESHEET };
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    if !cached {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/css; charset=utf-8"));
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable"));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, value);
    }
    response
}

/// Refuses a request whose host is not allowed before any route sees it (the binding's check and
/// its problem details).
async fn host_guard(State(inbox): State<Arc<Inbox>>, request: axum::extract::Request, next: Next) -> Response {
    let fault = match agent_surface_server::check_host(&inbox.config.allowed_hosts, request.uri(), request.headers()) {
        HostCheck::Allowed => return next.run(request).await,
        HostCheck::NotAllowed => ProtocolFault::HostNotAllowed,
        HostCheck::Repeated => ProtocolFault::InvalidHeader,
    };
    tracing::debug!(target: "agent_surface::inbox", kind = fault.kind(), "protocol fault");
    secure_headers((fault.status(), [(header::CONTENT_TYPE, PROBLEM_JSON)], fault.body()).into_response()).await
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    // Every response but the stylesheet's (which sets its own).
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

impl Inbox {
    fn prefix(&self) -> &str {
        &self.config.prefix
    }

    fn now(&self) -> agent_surface_core::Timestamp {
        self.config.engine.config().clock.now()
    }

    /// The approver, from a bearer token or the session cookie; `None` when neither proves one.
    async fn approver(&self, headers: &HeaderMap) -> Option<Approver> {
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let credential = match authorization.and_then(agent_surface_policy::bearer_token) {
            Some(token) => token.to_string(),
            None => session_cookie(headers)?,
        };
        let mut proof = HeaderMap::new();
        proof.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {credential}")).ok()?);
        let identity = self.config.authenticator.authenticate(&proof).await?;
        Some(Approver { identity, credential })
    }

    /// The approver, or the response that sends the caller away (sign in, or not allowed).
    /// The signed-in approver, or the response that sends the person elsewhere: to the sign-in
    /// form when nobody is signed in (which brings them back to the confirmation `then` once
    /// they are), a `403` page when the identity may not use the inbox.
    async fn require(&self, headers: &HeaderMap, then: Option<&str>) -> Result<Approver, Response> {
        let Some(approver) = self.approver(headers).await else {
            let back = then.map(|id| format!("?c={}", percent_path(id))).unwrap_or_default();
            return Err(redirect(&format!("{}/sign-in{back}", self.prefix()), None));
        };
        if let Some(role) = &self.config.approver_role
            && !approver.identity.has_role(role)
        {
            return Err(self.message(StatusCode::FORBIDDEN, "Not allowed", "You may not decide confirmations."));
        }
        Ok(approver)
    }

    fn page(&self, status: StatusCode, title: &str, approver: Option<&Approver>, body: &str) -> Response {
        let signed_in = approver.map(|a| {
            let token = self.csrf.issue(&a.credential, "sign-out", self.now());
            (a.identity.subject.clone(), token)
        });
        let signed = signed_in.as_ref().map(|(s, t)| (s.as_str(), self.prefix(), t.as_str()));
        let html = html::page(title, &self.stylesheet, signed, body);
        (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"))], html).into_response()
    }

    fn message(&self, status: StatusCode, title: &str, text: &str) -> Response {
        self.page(status, title, None, &html::message(self.prefix(), text))
    }
}

async fn list(State(inbox): State<Arc<Inbox>>, headers: HeaderMap) -> Response {
    let approver = match inbox.require(&headers, None).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let pending = match inbox.config.engine.pending_for(&approver.identity, MAX_LISTED).await {
        Ok(p) => p,
        Err(e) => return unavailable(&inbox, &e.to_string()),
    };
    let recent = recent_decisions(&inbox).await;
    let body = html::inbox(inbox.prefix(), &pending, &recent);
    inbox.page(StatusCode::OK, "Approvals", Some(&approver), &body)
}

/// The latest decisions from the audit trail, newest first.
async fn recent_decisions(inbox: &Inbox) -> Vec<agent_surface_policy::AuditEvent> {
    let Some(audit) = &inbox.config.audit else { return Vec::new() };
    match audit.recent(1000).await {
        Ok(events) => events
            .into_iter()
            .rev()
            .filter(|e| matches!(e.kind, AuditKind::ConfirmationDecided { .. }))
            .take(MAX_RECENT)
            .collect(),
        Err(e) => {
            tracing::warn!(target: "agent_surface::inbox", error = %e, "recent decisions unavailable");
            Vec::new()
        }
    }
}

async fn show(State(inbox): State<Arc<Inbox>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    // Someone who follows an approval URL before signing in comes back here after signing in.
    let approver = match inbox.require(&headers, Some(&id)).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let record = match inbox.config.engine.get(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return inbox.message(StatusCode::NOT_FOUND, "Not found", "There is no such confirmation."),
        Err(e) => return unavailable(&inbox, &e.to_string()),
    };
    let open = record.state == ConfirmationState::Pending
        && inbox.now() < record.expires_at
        && !record.decided_by(&approver.identity.subject);
    let csrf = open.then(|| inbox.csrf.issue(&approver.credential, &format!("decide:{id}"), inbox.now()));
    let body = html::detail(inbox.prefix(), &record, csrf.as_deref());
    inbox.page(StatusCode::OK, "Confirmation", Some(&approver), &body)
}

async fn decide(State(inbox): State<Arc<Inbox>>, Path(id): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let approver = match inbox.require(&headers, None).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let form = form_fields(&body);
    let token = form.get("csrf").map(String::as_str).unwrap_or_default();
    if let Err(why) = inbox.csrf.redeem(token, &approver.credential, &format!("decide:{id}"), inbox.now()) {
        tracing::warn!(target: "agent_surface::inbox", confirmation_id = %id, refused = ?why, "form token refused");
        return inbox.message(
            StatusCode::FORBIDDEN,
            "Form refused",
            "This form is not valid any more. Open the confirmation again.",
        );
    }
    let note = form.get("note").map(String::as_str);
    let engine = &inbox.config.engine;
    let decided = match form.get("verdict").map(String::as_str) {
        Some("approve") => engine.approve_with_note(&id, &approver.identity, note).await,
        Some("deny") => engine.deny_with_note(&id, &approver.identity, note).await,
        _ => return inbox.message(StatusCode::BAD_REQUEST, "Form refused", "Choose approve or deny."),
    };
    match decided {
        Ok(()) => redirect(&format!("{}/c/{}", inbox.prefix(), percent_path(&id)), None),
        Err(ApprovalError::SelfApproval) => inbox.message(
            StatusCode::FORBIDDEN,
            "Not allowed",
            "You requested this action; another person must approve it.",
        ),
        Err(ApprovalError::Expired) => {
            inbox.message(StatusCode::GONE, "Expired", "This confirmation expired; a new request starts a new one.")
        }
        Err(ApprovalError::AlreadyDecided(_)) => {
            inbox.message(StatusCode::CONFLICT, "Already decided", "This confirmation was already decided.")
        }
        Err(ApprovalError::DecidedBefore) => inbox.message(
            StatusCode::CONFLICT,
            "Already decided",
            "You decided this confirmation already; it waits for other approvers.",
        ),
        Err(ApprovalError::NotEligible) => {
            inbox.message(StatusCode::FORBIDDEN, "Not allowed", "This confirmation needs approvers with another role.")
        }
        Err(ApprovalError::Unknown) => {
            inbox.message(StatusCode::NOT_FOUND, "Not found", "There is no such confirmation.")
        }
        Err(ApprovalError::NoApprover) => {
            inbox.message(StatusCode::FORBIDDEN, "Not allowed", "Your identity has no subject.")
        }
        Err(e) => unavailable(&inbox, &e.to_string()),
    }
}

async fn sign_in_form(State(inbox): State<Arc<Inbox>>, uri: Uri, headers: HeaderMap) -> Response {
    // `?c=ID`: the confirmation to show once signed in (see `Inbox::require`).
    let then = form_fields(uri.query().unwrap_or_default().as_bytes()).remove("c").filter(|c| !c.is_empty());
    // Already signed in (as someone who may use the inbox): the inbox, not the form.
    if inbox.require(&headers, None).await.is_ok() {
        return redirect(&after_sign_in(&inbox, then.as_deref()), None);
    }
    let token = inbox.csrf.issue("", "sign-in", inbox.now());
    inbox.page(StatusCode::OK, "Sign in", None, &html::sign_in(inbox.prefix(), &token, then.as_deref(), false))
}

/// Where signing in leads: the confirmation `then` (an id, percent-encoded into a path under the
/// inbox's prefix, so the form can send nobody off the inbox), else the list.
fn after_sign_in(inbox: &Inbox, then: Option<&str>) -> String {
    match then {
        Some(id) => format!("{}/c/{}", inbox.prefix(), percent_path(id)),
        None => format!("{}/", inbox.prefix()),
    }
}

async fn sign_in(State(inbox): State<Arc<Inbox>>, body: Bytes) -> Response {
    let form = form_fields(&body);
    let then = form.get("c").map(String::as_str).filter(|c| !c.is_empty());
    let csrf = form.get("csrf").map(String::as_str).unwrap_or_default();
    if inbox.csrf.redeem(csrf, "", "sign-in", inbox.now()).is_err() {
        return inbox.message(StatusCode::FORBIDDEN, "Form refused", "This form is not valid any more. Sign in again.");
    }
    let token = form.get("token").map(|t| t.trim().to_string()).unwrap_or_default();
    let valid = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic() && b != b';' && b != b',');
    let mut proof = HeaderMap::new();
    let identity = match valid.then(|| HeaderValue::from_str(&format!("Bearer {token}"))) {
        Some(Ok(value)) => {
            proof.insert(header::AUTHORIZATION, value);
            inbox.config.authenticator.authenticate(&proof).await
        }
        _ => None,
    };
    if identity.is_none() {
        let again = inbox.csrf.issue("", "sign-in", inbox.now());
        let page = html::sign_in(inbox.prefix(), &again, then, true);
        return inbox.page(StatusCode::UNAUTHORIZED, "Sign in", None, &page);
    }
    let secure = if inbox.config.secure_cookie { "; Secure" } else { "" };
    let cookie = format!("{SESSION_COOKIE}={token}; Path={}/; HttpOnly; SameSite=Strict{secure}", inbox.prefix());
    redirect(&after_sign_in(&inbox, then), Some(&cookie))
}

async fn sign_out(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(approver) = inbox.approver(&headers).await else {
        return redirect(&format!("{}/sign-in", inbox.prefix()), None);
    };
    let form = form_fields(&body);
    let csrf = form.get("csrf").map(String::as_str).unwrap_or_default();
    if inbox.csrf.redeem(csrf, &approver.credential, "sign-out", inbox.now()).is_err() {
        return inbox.message(StatusCode::FORBIDDEN, "Form refused", "This form is not valid any more.");
    }
    let secure = if inbox.config.secure_cookie { "; Secure" } else { "" };
    let cookie = format!("{SESSION_COOKIE}=; Path={}/; HttpOnly; SameSite=Strict; Max-Age=0{secure}", inbox.prefix());
    redirect(&format!("{}/sign-in", inbox.prefix()), Some(&cookie))
}

fn unavailable(inbox: &Inbox, error: &str) -> Response {
    tracing::error!(target: "agent_surface::inbox", error, "confirmation store failed");
    inbox.message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "The confirmations cannot be read now. Try again shortly.",
    )
}

/// `303 See Other` to `location`, setting `cookie` if given.
fn redirect(location: &str, cookie: Option<&str>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The session cookie's value, if the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == SESSION_COOKIE && !value.is_empty()).then(|| value.to_string())
    })
}

/// What a path segment percent-encodes: every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~`.
const PATH_SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// An id as a path segment: unreserved characters kept, everything else percent-encoded.
fn percent_path(id: &str) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::utf8_percent_encode(id, PATH_SEGMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_path_segments_that_decode_back() {
        assert_eq!(percent_path("c-0aF9._~").to_string(), "c-0aF9._~");
        assert_eq!(percent_path("a/b?c#d e&f=g+h%").to_string(), "a%2Fb%3Fc%23d%20e%26f%3Dg%2Bh%25");
        assert_eq!(percent_path("../é").to_string(), "..%2F%C3%A9");
        assert_eq!(percent_path("").to_string(), "");
        // As a query value, the encoded id reads back as the id (the sign-in page's `?c=`).
        for id in ["c-1", "a&c=b", "x+y z", "é/%"] {
            let query = format!("c={}", percent_path(id));
            assert_eq!(csrf::form_fields(query.as_bytes())["c"], id);
        }
    }
}
