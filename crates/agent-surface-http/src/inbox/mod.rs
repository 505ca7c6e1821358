//! The approval inbox: server-rendered pages where a person sees the confirmations that wait for
//! them and approves or denies them (works without JavaScript; the pages carry none).
//!
//! # Overview
//!
//! [`router`] serves, under [`InboxConfig::prefix`] (default `/inbox`):
//!
//! | route | what |
//! |---|---|
//! | `GET {prefix}/` | the pending confirmations the signed-in approver may decide (summary, capability, requester, effect, the input with sensitive fields redacted — folded into a `<details>` when long —, approvals so far — "1 of 2 approvals" — and who decided so far, requested and expires at), and the last 20 decisions from the audit trail that the approver may see: those on confirmations whose page they may open (below), and their own |
//! | `GET {prefix}/c/{id}` | one confirmation (as on the list, not one whose quorum does not count the approver — `403`, as approving it is — unless they requested or decided it): the same, its state ("expired" once its deadline passed), the decisions so far (who, what, when), the input with sensitive fields redacted, and the approve / deny form with an optional note (while the approver may still decide) |
//! | `POST {prefix}/c/{id}` | the decision (`verdict=approve|deny`, `note`, `csrf`) |
//! | `GET`, `POST {prefix}/sign-in` | a form that takes an access token and opens a session (someone already signed in is sent to the inbox, `303`); someone who opened a confirmation's page (an approval URL) before signing in is sent there (`?c=ID`), and back to it after signing in |
//! | `POST {prefix}/sign-out` | ends the session and forgets its cookie |
//! | `GET {prefix}/static/inbox-{hash}.css` | the pages' stylesheet (`text/css`; its name carries a hash of its content, so it is cached for a year as `immutable`, with an `ETag`) |
//!
//! **Who.** The approver is whoever the [`Authenticator`] says the credential proves: a bearer
//! token in `Authorization` (for programs), or the token given to the sign-in form. Signing in
//! opens a session: the cookie `__Host-inbox_session` holds an opaque random id (256 bits;
//! `HttpOnly`, `SameSite=Strict`, `Path=/`, `Max-Age` the session's life, `Secure`; when
//! [`InboxConfig::secure_cookie`] is off for plain-HTTP development, `inbox_session` with
//! `Path={prefix}/`); a request with several live session cookies (one planted beside the
//! person's own) is signed in as nobody. The session is kept in [`InboxConfig::store`] (in the
//! process's memory by default; a shared store lets replicas behind one address serve each
//! other's sessions without sticky routing): under a digest of the id, with the token sealed
//! under a key only the id opens, so the store holds no usable token. The token is never sent
//! back, and is proven again on every request, so a revoked or expired token ends the session at
//! once. A session ends on sign-out (the store forgets it: a copy of the cookie is worth
//! nothing), when the browser signs in again, after [`InboxConfig::session_ttl`] (8 hours by
//! default), or when the store forgets it (a memory store when the process ends); one subject
//! holds at most 8 at once (signing in again ends its oldest, never someone else's). With
//! [`InboxConfig::approver_role`] only identities with that role may use the inbox (signing in
//! with a token without it is refused as a bad token is, and opens no session).
//!
//! **The engine's rules hold.** Decisions go through [`ConfirmationEngine::approve_with_note`] and
//! [`deny_with_note`](ConfirmationEngine::deny_with_note): a requester cannot approve their own
//! request (the page refuses it, `403`), an expired confirmation cannot be decided (`410`), a
//! decision is final (`409`), an approver decides a confirmation once (`409`, also while it
//! waits for the rest of its quorum), an approval from someone its quorum does not count (none
//! of the roles it asks for, not one of its named approvers) is refused (`403`), and one whose
//! role slots are all filled by others too (`409`). The list leaves out the approver's own
//! requests, those they decided already, and those whose quorum does not count them or has no
//! slot left for them. Pages show what the quorum asks for ("1 of 2 approvals (one manager, one
//! security)") and, for role slots, who fills which slot.
//!
//! **Recent decisions.** The list's recent decisions are the last 20 `confirmation.decided`
//! events of [`InboxConfig::audit`] (among its latest 1,000 events) that the approver may see:
//! their own, and those on a confirmation whose page they may open — its quorum counts them, or
//! they requested it or decided it (the detail page's rule, on the record as the engine holds it
//! now). A decision on a confirmation the engine no longer holds (swept after its deadline) is
//! shown only to whoever made it. Telling them apart reads each confirmation once, one record at
//! a time (the store has no batch read; 8 under way at once), at most 100 of them per page (the
//! approver's own decisions need none); when those do not yield 20, the list ends there, shorter,
//! and says that older decisions are on each confirmation's page.
//! A trail or store that does not answer leaves the list out and says so.
//!
//! **Safe as a web page.** Every state change (decide, sign in, sign out) needs the form's token:
//! bound to the session (or bearer token) and to the one action, valid 30 minutes, accepted once,
//! so a forged or replayed post is refused (`403`) — by every replica on one store, since the
//! key that signs the forms and the tokens already used are kept there. The sign-in form's token is bound to a random
//! value in a cookie set with the form ([`SIGN_IN_COOKIE`]; `__Host-` prefixed when `Secure`,
//! `SameSite=Strict`, 30 minutes), so another site cannot post a sign-in form it fetched for
//! itself to sign a victim's browser in as the attacker (login CSRF). Its tokens are kept apart
//! and used up only by a sign-in that succeeds, so posting sign-in forms cannot fill the
//! used-token set that guards decisions and sign-outs. Every post must be
//! `application/x-www-form-urlencoded` (`415` otherwise), and one a browser marks as sent from
//! another site (`Sec-Fetch-Site: cross-site` or `same-site`) is refused (`403`) whatever its token. Every response carries `Cache-Control: no-store` (but the
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
//! let inbox = router(InboxConfig::new(engine, approvers, "approver"));
//! # let _: axum::Router = inbox;
//! ```

mod csrf;
mod html;
mod session;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::inbox::{InboxStore, MemoryInboxStore, SessionLimits};
use agent_surface_policy::{
    ApprovalError, AuditEvent, AuditKind, AuditSink, Authenticator, Clock, ConfirmationEngine, ConfirmationRecord,
    Identity, StoreError, confirmation::ConfirmationState,
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
use session::Sessions;

/// The cookie that holds a signed-in approver's session id (an opaque random value; the token
/// the person signed in with stays on the server): named `__Host-inbox_session` (with `Path=/`)
/// when the cookies are `Secure`, so that another host (a sibling subdomain) cannot plant one,
/// else `inbox_session`.
pub const SESSION_COOKIE: &str = "inbox_session";

/// The cookie the sign-in form is bound to (a random value set with the form, so that another
/// site cannot sign a browser in): named `__Host-inbox_signin` when the cookies are `Secure`
/// (the prefix makes the browser refuse one set by another host, a sibling subdomain), else
/// `inbox_signin`.
pub const SIGN_IN_COOKIE: &str = "inbox_signin";

/// The default [`InboxConfig::session_ttl`]: 8 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 60 * 60);

/// The only body type the inbox's forms are read as.
const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// The most pending confirmations a page lists.
const MAX_LISTED: usize = 200;

/// The most recent decisions a page shows (the latest its viewer may see).
const MAX_RECENT: usize = 20;

/// The most audit events a page reads back to find its recent decisions among.
const RECENT_EVENTS: usize = 1000;

/// The most confirmations a page reads to tell which recent decisions its viewer may see: the
/// confirmation store has no batch read, so this bounds the list's store round trips.
const MAX_RECENT_READS: usize = 100;

/// How many of those reads a page has under way at once.
const RECENT_READS_AT_ONCE: usize = 8;

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
    /// The role an identity needs to use the inbox ([`InboxConfig::new`] takes it). `None` lets
    /// every identity the authenticator knows approve, an agent's token included: set it only
    /// for an authenticator that knows approvers alone.
    pub approver_role: Option<String>,
    /// The path prefix (default `/inbox`).
    pub prefix: String,
    /// Whether the cookies are marked `Secure` (default `true`; turn it off only to try the
    /// inbox over plain HTTP on a loopback address). With it, the sign-in form's cookie carries
    /// the `__Host-` prefix.
    pub secure_cookie: bool,
    /// How long a sign-in lasts (default [`DEFAULT_SESSION_TTL`]), at most: the session also
    /// ends on sign-out, and as soon as the token it was opened with no longer signs anyone in
    /// (the token is checked again on every request, so a revoked or expired token ends it).
    pub session_ttl: Duration,
    /// Accepted host names, compared as [`HttpConfig::allowed_hosts`](crate::HttpConfig::allowed_hosts)
    /// are (the port ignored; empty: any host); the default admits loopback only. Give it the
    /// names the binding's routes admit.
    pub allowed_hosts: Vec<String>,
    /// Where the sessions, the form-signing keys and the used form tokens are kept (default: a
    /// [`MemoryInboxStore`] of this configuration's, one process). Give the backend's shared
    /// store (`Stores::inbox`) so replicas behind one address need no sticky routing.
    pub store: Arc<dyn InboxStore>,
}

impl InboxConfig {
    /// An inbox for `engine`'s confirmations, open to the identities `authenticator` knows that
    /// have `approver_role`. The role is required here: an inbox open to every identity the
    /// authenticator knows would let an agent's own token (or another agent's) approve what an
    /// agent asked for, which the approval exists to prevent.
    pub fn new(
        engine: Arc<ConfirmationEngine>,
        authenticator: Arc<dyn Authenticator>,
        approver_role: impl Into<String>,
    ) -> InboxConfig {
        InboxConfig {
            engine,
            authenticator,
            audit: None,
            approver_role: Some(approver_role.into()),
            prefix: "/inbox".to_string(),
            secure_cookie: true,
            session_ttl: DEFAULT_SESSION_TTL,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            store: Arc::new(MemoryInboxStore::default()),
        }
    }
}

impl std::fmt::Debug for InboxConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxConfig")
            .field("approver_role", &self.approver_role)
            .field("prefix", &self.prefix)
            .field("secure_cookie", &self.secure_cookie)
            .field("session_ttl", &self.session_ttl)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

struct Inbox {
    config: InboxConfig,
    csrf: Csrf,
    /// The sign-in form's tokens, apart (a key and used set of their own): whoever fills their
    /// used set (anyone may fetch the form) holds up sign-in only, never a signed-in approver's
    /// decision or sign-out.
    sign_in_csrf: Csrf,
    sessions: Sessions,
    /// The stylesheet's path (`{prefix}/static/inbox-{hash}.css`), linked from every page.
    stylesheet: String,
}

/// Who is asking: the identity, what its form tokens are bound to (`session:{id}` for a signed-in
/// browser, `bearer:{token}` for a bearer token), and the session, if any.
struct Approver {
    identity: Identity,
    binding: String,
    session: Option<String>,
    /// The sign-out form's token, for the pages' header.
    sign_out: String,
}

/// The inbox's routes (see the [module](self)); merge them into the application's router.
pub fn router(config: InboxConfig) -> Router {
    routes(inbox_state(config))
}

/// The inbox's state.
fn inbox_state(mut config: InboxConfig) -> Arc<Inbox> {
    let trimmed = config.prefix.trim_end_matches('/');
    config.prefix =
        if trimmed.is_empty() || trimmed.starts_with('/') { trimmed.to_string() } else { format!("/{trimmed}") };
    let prefix = &config.prefix;
    let stylesheet = format!("{prefix}/static/inbox-{}.css", stylesheet_hash());
    let ttl_ms = u64::try_from(config.session_ttl.as_millis()).unwrap_or(u64::MAX);
    Arc::new(Inbox {
        csrf: Csrf::new("forms", config.store.clone()),
        sign_in_csrf: Csrf::new("sign-in", config.store.clone()),
        sessions: Sessions::new(ttl_ms, SessionLimits::default(), config.store.clone()),
        stylesheet,
        config,
    })
}

fn routes(state: Arc<Inbox>) -> Router {
    let prefix = state.config.prefix.clone();
    let stylesheet = state.stylesheet.clone();
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
    /// A session's token is proven again each time: one that no longer signs anyone in (revoked,
    /// expired) ends the session. An error: the store did not answer, or the authenticator cannot
    /// check credentials now (the session is kept: nothing says its token went bad).
    async fn approver(&self, headers: &HeaderMap) -> Result<Option<Approver>, StoreError> {
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if let Some(token) = authorization.and_then(agent_surface_policy::authn::bearer_token) {
            let Some(identity) = self.authenticate(token).await? else { return Ok(None) };
            return self.signed_in(identity, format!("bearer:{token}"), None).await.map(Some);
        }
        // Several session cookies (one planted beside this browser's own) prove nobody: which of
        // them is the person's cannot be told, so none is used.
        let mut live = Vec::new();
        for id in cookies(headers, self.session_cookie()) {
            if let Some(token) = self.sessions.credential(&id, self.now()).await? {
                live.push((id, token));
            }
        }
        let mut live = live.into_iter();
        let Some((id, token)) = live.next() else { return Ok(None) };
        if live.any(|(other, _)| other != id) {
            tracing::warn!(target: "agent_surface::inbox", "several live session cookies: none is used");
            return Ok(None);
        }
        let Some(identity) = self.authenticate(&token).await? else {
            tracing::info!(target: "agent_surface::inbox", "session ended: its token no longer signs anyone in");
            self.sessions.close(&id).await?;
            return Ok(None);
        };
        self.signed_in(identity, format!("session:{id}"), Some(id)).await.map(Some)
    }

    /// The approver `identity`, its forms bound to `binding`.
    async fn signed_in(
        &self,
        identity: Identity,
        binding: String,
        session: Option<String>,
    ) -> Result<Approver, StoreError> {
        let sign_out = self.csrf.issue(&binding, "sign-out", self.now()).await?;
        Ok(Approver { identity, binding, session, sign_out })
    }

    /// Who `token` proves, as the authenticator says for `Authorization: Bearer {token}`
    /// ([`Authenticator::try_authenticate`]): `None` for a token that proves nobody; an error
    /// when the authenticator cannot check credentials now (`AuthRejectionKind::Unavailable`, an
    /// OAuth resource server whose signing keys were never fetched), which is no verdict on the
    /// token.
    async fn authenticate(&self, token: &str) -> Result<Option<Identity>, StoreError> {
        let mut proof = HeaderMap::new();
        let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) else { return Ok(None) };
        proof.insert(header::AUTHORIZATION, value);
        match self.config.authenticator.try_authenticate(&proof).await {
            Ok(identity) => Ok(identity),
            Err(rejection) if rejection.kind() == agent_surface_policy::AuthRejectionKind::Unavailable => {
                Err(StoreError::Unavailable("the authenticator cannot check credentials now".into()))
            }
            Err(_) => Ok(None),
        }
    }

    /// The fields of a form post, or the refusal: `415` unless the body is
    /// `application/x-www-form-urlencoded`, `403` when the browser says another site sent it
    /// (`Sec-Fetch-Site: cross-site` or `same-site`; a request without the header, from a
    /// program, is judged by its form token alone).
    #[allow(clippy::result_large_err, reason = "the refusal is the response the handler returns at once")]
    fn form(&self, headers: &HeaderMap, body: &[u8]) -> Result<HashMap<String, String>, Response> {
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case(FORM_CONTENT_TYPE) {
            return Err(self.message(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Form refused",
                "Send the form as application/x-www-form-urlencoded.",
            ));
        }
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).unwrap_or("none");
        if !matches!(site, "same-origin" | "none") {
            tracing::warn!(target: "agent_surface::inbox", sec_fetch_site = site, "form from another site refused");
            return Err(self.message(StatusCode::FORBIDDEN, "Form refused", "This form was sent from another site."));
        }
        Ok(form_fields(body))
    }

    /// The name of the session cookie (see [`SESSION_COOKIE`]).
    fn session_cookie(&self) -> &'static str {
        if self.config.secure_cookie { "__Host-inbox_session" } else { SESSION_COOKIE }
    }

    /// The name of the cookie the sign-in form is bound to (see [`SIGN_IN_COOKIE`]).
    fn sign_in_cookie(&self) -> &'static str {
        if self.config.secure_cookie { "__Host-inbox_signin" } else { SIGN_IN_COOKIE }
    }

    /// A `Set-Cookie` value: `name=value` with the attributes every inbox cookie has, `path`,
    /// and `Max-Age` (`0` forgets the cookie).
    fn set_cookie(&self, name: &str, value: &str, path: &str, max_age: u64) -> String {
        let secure = if self.config.secure_cookie { "; Secure" } else { "" };
        format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
    }

    /// The sign-in form's cookie, set with `value` (or forgotten with `None`); its path is `/`
    /// when `Secure` (the `__Host-` prefix requires it), else the inbox's.
    fn sign_in_cookie_header(&self, value: Option<&str>) -> String {
        let path = if self.config.secure_cookie { "/".to_string() } else { format!("{}/", self.prefix()) };
        let max_age = if value.is_some() { csrf::TOKEN_TTL_MS / 1000 } else { 0 };
        self.set_cookie(self.sign_in_cookie(), value.unwrap_or_default(), &path, max_age)
    }

    /// The session cookie, set to `id` (until the session ends) or forgotten with `None`; its
    /// path is `/` when `Secure` (the `__Host-` prefix requires it), else the inbox's.
    fn session_cookie_header(&self, id: Option<&str>) -> String {
        let path = if self.config.secure_cookie { "/".to_string() } else { format!("{}/", self.prefix()) };
        let max_age = if id.is_some() { self.config.session_ttl.as_secs() } else { 0 };
        self.set_cookie(self.session_cookie(), id.unwrap_or_default(), &path, max_age)
    }

    /// Whether `identity` may use the inbox (has [`InboxConfig::approver_role`], if one is set).
    fn may_use(&self, identity: &Identity) -> bool {
        self.config.approver_role.as_ref().is_none_or(|role| identity.has_role(role))
    }

    /// The approver, or the response that sends the caller away (sign in, or not allowed).
    /// The signed-in approver, or the response that sends the person elsewhere: to the sign-in
    /// form when nobody is signed in (which brings them back to the confirmation `then` once
    /// they are), a `403` page when the identity may not use the inbox.
    async fn require(&self, headers: &HeaderMap, then: Option<&str>) -> Result<Approver, Response> {
        let approver = self.approver(headers).await.map_err(|e| store_down(self, &e))?;
        let Some(approver) = approver else {
            let back = then.map(|id| format!("?c={}", percent_path(id))).unwrap_or_default();
            return Err(redirect(&format!("{}/sign-in{back}", self.prefix()), &[]));
        };
        if !self.may_use(&approver.identity) {
            return Err(self.message(StatusCode::FORBIDDEN, "Not allowed", "You may not decide confirmations."));
        }
        Ok(approver)
    }

    fn page(&self, status: StatusCode, title: &str, approver: Option<&Approver>, body: &str) -> Response {
        let signed = approver.map(|a| (a.identity.subject.as_str(), self.prefix(), a.sign_out.as_str()));
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
    let recent = recent_decisions(&inbox, &approver.identity).await;
    let body = html::inbox(inbox.prefix(), &pending, &recent);
    inbox.page(StatusCode::OK, "Approvals", Some(&approver), &body)
}

/// The latest [`MAX_RECENT`] decisions from the audit trail that `viewer` may see, newest first:
/// those on a confirmation whose page they may open ([`may_see`]), read from the engine now, and
/// their own. A decision on a confirmation the engine no longer holds (swept after its deadline)
/// is shown only to whoever made it, as is one whose event names no confirmation. The store reads
/// one record at a time, so the confirmations are read [`RECENT_READS_AT_ONCE`] at a time, each
/// once, at most [`MAX_RECENT_READS`] of them (the viewer's own decisions need none); the list
/// ends where that budget does, and says so. A trail or store that does not answer: [`html::Recent::Unavailable`].
async fn recent_decisions(inbox: &Inbox, viewer: &Identity) -> html::Recent {
    use futures_util::StreamExt;
    let Some(audit) = &inbox.config.audit else { return html::Recent::NoTrail };
    let events = match audit.recent(RECENT_EVENTS).await {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(target: "agent_surface::inbox", error = %agent_surface_policy::redacted(&e), "recent decisions unavailable");
            return html::Recent::Unavailable;
        }
    };
    let subject = viewer.subject.as_str();
    let decisions: Vec<AuditEvent> =
        events.into_iter().rev().filter(|e| matches!(e.kind, AuditKind::ConfirmationDecided { .. })).collect();
    // The confirmations to read, each once, in the order the walk below comes to them.
    let mut first_seen = HashSet::new();
    let wanted: Vec<String> = decisions
        .iter()
        .filter(|e| !decided_by(e, subject))
        .filter_map(|e| e.confirmation_id.clone())
        .filter(|id| first_seen.insert(id.clone()))
        .take(MAX_RECENT_READS)
        .collect();
    let engine = &inbox.config.engine;
    let mut reads = futures_util::stream::iter(wanted)
        .map(|id| async move {
            let record = engine.get(&id).await;
            (id, record)
        })
        .buffered(RECENT_READS_AT_ONCE);
    let mut visible: HashMap<String, bool> = HashMap::new();
    let mut listed = Vec::new();
    let mut cut = false;
    'events: for event in decisions {
        if listed.len() == MAX_RECENT {
            break;
        }
        let shown = match &event.confirmation_id {
            _ if decided_by(&event, subject) => true,
            None => false,
            Some(id) => loop {
                if let Some(&shown) = visible.get(id) {
                    break shown;
                }
                match reads.next().await {
                    Some((read, Ok(record))) => {
                        visible.insert(read, record.is_some_and(|r| may_see(&r, viewer)));
                    }
                    Some((_, Err(e))) => {
                        tracing::warn!(target: "agent_surface::inbox", error = %agent_surface_policy::redacted(&e), "recent decisions unavailable");
                        return html::Recent::Unavailable;
                    }
                    // Past the reads' budget: the list ends here.
                    None => {
                        cut = true;
                        break 'events;
                    }
                }
            },
        };
        if shown {
            listed.push(event);
        }
    }
    html::Recent::Listed(listed, cut)
}

/// Whether `event` is a decision made by `subject` (by exactly that name).
fn decided_by(event: &AuditEvent, subject: &str) -> bool {
    matches!(&event.kind, AuditKind::ConfirmationDecided { approver, .. } if approver == subject)
}

/// Whether `viewer` may see the confirmation `record` (its page, its decisions): its quorum counts
/// them, or they requested it or decided it already — by exactly that name: the look-alike
/// matching that refuses a self-approval would otherwise show the call, and hand out its form, to
/// someone whose name only resembles the requester's.
fn may_see(record: &ConfirmationRecord, viewer: &Identity) -> bool {
    let subject = viewer.subject.as_str();
    record.quorum.admits(viewer)
        || record.requester.as_deref() == Some(subject)
        || record.decisions.iter().any(|d| d.approver == subject)
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
    // As the list: a confirmation whose quorum does not count this approver is not theirs to
    // see (refused as deciding it is), unless they requested it or decided it already.
    if !may_see(&record, &approver.identity) {
        return not_counted(&inbox);
    }
    let open = record.state == ConfirmationState::Pending
        && inbox.now() < record.expires_at
        && !record.decided_by(&approver.identity.subject);
    let csrf = match open {
        true => match inbox.csrf.issue(&approver.binding, &format!("decide:{id}"), inbox.now()).await {
            Ok(token) => Some(token),
            Err(e) => return store_down(&inbox, &e),
        },
        false => None,
    };
    let body = html::detail(inbox.prefix(), &record, csrf.as_deref(), inbox.now());
    inbox.page(StatusCode::OK, "Confirmation", Some(&approver), &body)
}

async fn decide(State(inbox): State<Arc<Inbox>>, Path(id): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let approver = match inbox.require(&headers, None).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let form = match inbox.form(&headers, &body) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let token = form.get("csrf").map(String::as_str).unwrap_or_default();
    if let Err(why) = inbox.csrf.redeem(token, &approver.binding, &format!("decide:{id}"), inbox.now()).await {
        if why == csrf::Refused::Unavailable {
            return store_unanswered(&inbox);
        }
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
        Ok(()) => redirect(&format!("{}/c/{}", inbox.prefix(), percent_path(&id)), &[]),
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
        Err(ApprovalError::NotEligible) => not_counted(&inbox),
        Err(ApprovalError::SlotsTaken) => inbox.message(
            StatusCode::CONFLICT,
            "Not counted",
            "The places you could fill in this confirmation's quorum are taken; it waits for approvers with another \
             role.",
        ),
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
        return redirect(&after_sign_in(&inbox, then.as_deref()), &[]);
    }
    // The form's token is bound to a random value in a cookie of this browser's (kept when it has
    // one, so that two open forms both work), which another site can neither read nor set.
    let binding = cookie(&headers, inbox.sign_in_cookie()).filter(|v| is_sign_in_value(v)).unwrap_or_else(|| {
        let mut raw = [0u8; 16];
        agent_surface_core::id::fill_random(&mut raw);
        agent_surface_core::hex::Hex(&raw).to_string()
    });
    let token = match inbox.sign_in_csrf.issue(&format!("sign-in:{binding}"), "sign-in", inbox.now()).await {
        Ok(token) => token,
        Err(e) => return store_down(&inbox, &e),
    };
    let page = html::sign_in(inbox.prefix(), &token, then.as_deref(), false);
    let mut response = inbox.page(StatusCode::OK, "Sign in", None, &page);
    append_cookie(&mut response, &inbox.sign_in_cookie_header(Some(&binding)));
    response
}

/// Whether `value` is what the sign-in form's cookie holds: 32 hex digits.
fn is_sign_in_value(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where signing in leads: the confirmation `then` (an id, percent-encoded into a path under the
/// inbox's prefix, so the form can send nobody off the inbox), else the list.
fn after_sign_in(inbox: &Inbox, then: Option<&str>) -> String {
    match then {
        Some(id) => format!("{}/c/{}", inbox.prefix(), percent_path(id)),
        None => format!("{}/", inbox.prefix()),
    }
}

async fn sign_in(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> Response {
    let form = match inbox.form(&headers, &body) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let then = form.get("c").map(String::as_str).filter(|c| !c.is_empty());
    let csrf = form.get("csrf").map(String::as_str).unwrap_or_default();
    // The token must have been issued to this browser (its sign-in cookie): a form another site
    // posts, with a token it fetched for itself, signs nobody in (login CSRF). It is only
    // checked here and used up once the access token signs someone in: a failed attempt records
    // nothing (so unauthenticated posts cannot fill the used set), a replayed successful form is
    // refused, and of two posts of one form at once only one signs in.
    let binding = cookie(&headers, inbox.sign_in_cookie()).filter(|v| is_sign_in_value(v));
    let checked = match &binding {
        Some(b) => inbox.sign_in_csrf.check(csrf, &format!("sign-in:{b}"), "sign-in", inbox.now()).await,
        None => Err(csrf::Refused::Forged),
    };
    if checked == Err(csrf::Refused::Unavailable) {
        return store_unanswered(&inbox);
    }
    let Some(binding) = binding.filter(|_| checked.is_ok()) else {
        tracing::warn!(target: "agent_surface::inbox", refused = ?checked.err(), "sign-in form refused");
        return refuse_sign_in_form(&inbox);
    };
    let token = form.get("token").map(|t| t.trim().to_string()).unwrap_or_default();
    let valid = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic() && b != b';' && b != b',');
    let identity = match valid {
        true => match inbox.authenticate(&token).await {
            Ok(identity) => identity,
            Err(e) => return store_down(&inbox, &e),
        },
        false => None,
    };
    // An identity that may not use the inbox is refused as a bad token is, and opens no session.
    let Some(identity) = identity.filter(|i| inbox.may_use(i)) else {
        let again = match inbox.sign_in_csrf.issue(&format!("sign-in:{binding}"), "sign-in", inbox.now()).await {
            Ok(token) => token,
            Err(e) => return store_down(&inbox, &e),
        };
        let page = html::sign_in(inbox.prefix(), &again, then, true);
        let mut response = inbox.page(StatusCode::UNAUTHORIZED, "Sign in", None, &page);
        // The cookie lives as long as the new form's token.
        append_cookie(&mut response, &inbox.sign_in_cookie_header(Some(&binding)));
        return response;
    };
    if let Err(why) = inbox.sign_in_csrf.redeem(csrf, &format!("sign-in:{binding}"), "sign-in", inbox.now()).await {
        if why == csrf::Refused::Unavailable {
            return store_unanswered(&inbox);
        }
        tracing::warn!(target: "agent_surface::inbox", refused = ?why, "sign-in form refused");
        return refuse_sign_in_form(&inbox);
    }
    // A session this browser held before (signing in as someone else) ends with the new one.
    for previous in cookies(&headers, inbox.session_cookie()) {
        if let Err(e) = inbox.sessions.close(&previous).await {
            return store_down(&inbox, &e);
        }
    }
    let session = match inbox.sessions.open(&token, &identity.subject, inbox.now()).await {
        Ok(session) => session,
        Err(e) => return store_down(&inbox, &e),
    };
    let cookies = [inbox.session_cookie_header(Some(&session)), inbox.sign_in_cookie_header(None)];
    redirect(&after_sign_in(&inbox, then), &cookies)
}

/// `403`: the confirmation's quorum does not count this approver.
fn not_counted(inbox: &Inbox) -> Response {
    inbox.message(
        StatusCode::FORBIDDEN,
        "Not allowed",
        "This confirmation's quorum does not count you: it needs named approvers or approvers with another role.",
    )
}

/// `403`: the sign-in form's token is refused.
fn refuse_sign_in_form(inbox: &Inbox) -> Response {
    inbox.message(StatusCode::FORBIDDEN, "Form refused", "This form is not valid any more. Sign in again.")
}

async fn sign_out(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> Response {
    let approver = match inbox.approver(&headers).await {
        Ok(Some(approver)) => approver,
        Ok(None) => return redirect(&format!("{}/sign-in", inbox.prefix()), &[]),
        Err(e) => return store_down(&inbox, &e),
    };
    let form = match inbox.form(&headers, &body) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let csrf = form.get("csrf").map(String::as_str).unwrap_or_default();
    let redeemed = inbox.csrf.redeem(csrf, &approver.binding, "sign-out", inbox.now()).await;
    if redeemed == Err(csrf::Refused::Unavailable) {
        return store_unanswered(&inbox);
    }
    if redeemed.is_err() {
        return inbox.message(StatusCode::FORBIDDEN, "Form refused", "This form is not valid any more.");
    }
    if let Some(session) = &approver.session
        && let Err(e) = inbox.sessions.close(session).await
    {
        return store_down(&inbox, &e);
    }
    redirect(&format!("{}/sign-in", inbox.prefix()), &[inbox.session_cookie_header(None)])
}

/// `503`: the inbox's store did not answer (the cause goes to the operator log only).
fn store_down(inbox: &Inbox, error: &StoreError) -> Response {
    tracing::error!(target: "agent_surface::inbox", error = %agent_surface_policy::redacted(error), "inbox store failed");
    store_unanswered(inbox)
}

/// `503`: the inbox's store did not answer (the cause was logged where it failed).
fn store_unanswered(inbox: &Inbox) -> Response {
    inbox.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "The inbox cannot be used now. Try again shortly.")
}

fn unavailable(inbox: &Inbox, error: &str) -> Response {
    tracing::error!(target: "agent_surface::inbox", error = %agent_surface_policy::redacted(error), "confirmation store failed");
    inbox.message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "The confirmations cannot be read now. Try again shortly.",
    )
}

/// `303 See Other` to `location`, setting `cookies`.
fn redirect(location: &str, cookies: &[String]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    for cookie in cookies {
        append_cookie(&mut response, cookie);
    }
    response
}

/// Adds a `Set-Cookie` field to `response`.
fn append_cookie(response: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// The value of the cookie `name`, if the request carries one that is not empty (the first).
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    cookies(headers, name).into_iter().next()
}

/// Every value that is not empty of the cookies named `name` the request carries, in order.
fn cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| {
            let (n, value) = c.trim().split_once('=')?;
            (n == name && !value.is_empty()).then(|| value.to_string())
        })
        .collect()
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
    use agent_surface_policy::inbox::MemoryInboxStoreConfig;
    use agent_surface_policy::{BearerTokens, ConfirmationConfig};
    use axum::body::Body;
    use tower::ServiceExt;

    async fn send(app: &Router, method: &str, uri: &str, cookie: &str, form: &str) -> (StatusCode, HeaderMap, String) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "localhost")
            .header(header::COOKIE, cookie)
            .header(header::CONTENT_TYPE, FORM_CONTENT_TYPE)
            .body(Body::from(form.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, String::from_utf8(body.to_vec()).unwrap())
    }

    /// The `name=value` of the cookie `name` a response sets.
    fn set_cookie(headers: &HeaderMap, name: &str) -> String {
        let set = headers.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string());
        set.filter_map(|v| v.split(';').next().map(str::to_string))
            .find(|p| p.starts_with(&format!("{name}=")))
            .unwrap()
    }

    /// Signs in with `token` through the form (a new browser): the status and the session cookie.
    async fn sign_in(app: &Router, token: &str) -> (StatusCode, Option<String>) {
        let (_, headers, page) = send(app, "GET", "/inbox/sign-in", "", "").await;
        let pre = set_cookie(&headers, SIGN_IN_COOKIE);
        let csrf = page.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap();
        let (status, headers, _) =
            send(app, "POST", "/inbox/sign-in", &pre, &format!("token={token}&csrf={csrf}")).await;
        let session = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_string))
            .find(|p| p.starts_with(&format!("{SESSION_COOKIE}=")));
        (status, session)
    }

    /// Whoever fills the sign-in form's used tokens (anyone may fetch the form) holds up sign-in
    /// only: a signed-in approver still decides and signs out. Failed sign-ins use up nothing.
    /// (A bounded store keeps at most 2 used tokens per set here.)
    #[tokio::test]
    async fn a_full_sign_in_set_does_not_hold_up_decisions() {
        let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
        let tokens = BearerTokens::new([
            ("t-manager", Identity::new("manager").with_role("approver")),
            ("t-mallory", Identity::new("mallory").with_role("approver")),
        ]);
        let config = InboxConfig {
            secure_cookie: false,
            store: Arc::new(MemoryInboxStore::new(MemoryInboxStoreConfig::with_max_used_per_scope(2))),
            ..InboxConfig::new(engine, Arc::new(tokens), "approver")
        };
        let state = inbox_state(config);
        let app = routes(state.clone());
        // Failed sign-ins record nothing: the two places are still free after many.
        for _ in 0..5 {
            assert_eq!(sign_in(&app, "t-junk").await, (StatusCode::UNAUTHORIZED, None));
        }
        assert_eq!(sign_in(&app, "t-manager").await.0, StatusCode::SEE_OTHER);
        let (status, session) = sign_in(&app, "t-manager").await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let session = session.unwrap();
        // The sign-in set is full now: another sign-in is refused (failing closed) …
        assert_eq!(sign_in(&app, "t-mallory").await.0, StatusCode::FORBIDDEN);
        // … and the manager's decision still gets past its form token to the engine (which
        // knows no such confirmation), as does the sign-out.
        let id = session.split_once('=').unwrap().1;
        let csrf = state.csrf.issue(&format!("session:{id}"), "decide:c-x", state.now()).await.unwrap();
        let (status, _, page) =
            send(&app, "POST", "/inbox/c/c-x", &session, &format!("verdict=deny&csrf={csrf}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
        let csrf = state.csrf.issue(&format!("session:{id}"), "sign-out", state.now()).await.unwrap();
        let (status, _, page) = send(&app, "POST", "/inbox/sign-out", &session, &format!("csrf={csrf}")).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    }

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
