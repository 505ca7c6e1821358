//! Client helpers for agent-surface servers: the recovery decision table applied to an `rmcp`
//! client.
//!
//! # Overview
//!
//! [`RecoveringClient`] wraps an `rmcp` client peer (`Peer<RoleClient>`). Each
//! [`RecoveringClient::call`] is one *intent*: it is sent with the agent-surface `_meta` keys and,
//! while the error's row of the client decision table ([`agent_surface_core::decision`], the rows
//! the reference driver and the Python helper act on too) says so, repaired and sent again:
//!
//! - `_meta["agent-surface/invocationId"]` on every attempt: the intent's id (by default
//!   `{id_prefix}-{nonce}-{n}`, unique per client: [`RecoveryConfig::id_prefix`]), a fresh one per
//!   retry where the row says `fresh` (`{id}#r{n}`), one derived from the request after
//!   `INVOCATION_CONFLICT` (`{id}#c{hash}`);
//! - `agent-surface/surfaceId` and `agent-surface/surfaceVersion` of the last
//!   [`RecoveringClient::list_tools`], so a destructive call planned against an old surface is
//!   refused (`STALE_CAPABILITY`) instead of run; updated, for that intent's retry only, after a
//!   re-listing (the next intents carry those of the last `list_tools`, the listing the model was
//!   shown), never dropped;
//! - `agent-surface/toolVersion` of the tool as the last listing showed it, so a call of any
//!   effect planned on a definition that changed since is refused (`STALE_CAPABILITY {reason:
//!   tool-version-mismatch}`); never dropped, and never swapped for another version under the
//!   same arguments. That refusal is not retried: the error is returned
//!   ([`Stop::ReturnedToCaller`], [`Recovery::refreshed`] set), and the caller lists the tools
//!   again ([`RecoveringClient::list_tools`]) so that the model reads the new definition before it
//!   calls again (the same arguments may mean something else now); so is any other
//!   `after-refresh` error whose re-listing shows the tool under another version;
//! - `after-delay`: waits `details.retryAfterMs` through [`Wait`] (bounded by the
//!   [`RecoveryConfig`]); `after-refresh`: re-lists (bypassing rmcp's list cache) and retries
//!   only if the tool is still listed and enabled (no `_meta` [`UNAVAILABLE_REASON`]) and the
//!   instance it names is still listed (whether or not the listing changed: a `binding-failed`
//!   precondition is retried once, as its row says); a replaced registration is
//!   retargeted to the error's `liveRegistrationId` (or the named instance's live registration),
//!   and a registration that is gone is never named again (a tool with one instance lists no
//!   registrations: then an unmount or a replacement error says the named one is gone);
//!   `yes` (`TIMEOUT`, `CANCELLED`): retries under a fresh id, and so does a re-listing after
//!   `COMPONENT_UNMOUNTED {phase: mid-flight}`, without asking the host: only a read or an
//!   idempotent call gets these codes once its handler started (`spec/error-model.md`,
//!   *Interrupted calls*), so the code decides, never the tool's declarations;
//!   `with-confirmation`: asks the
//!   [`ClientHost`] (a person, never the model) and, once the host answers that the approval is
//!   recorded on the server ([`ClientHost::confirm`]), retries with
//!   `agent-surface/confirmationId`; an unknown outcome is repeated only if the host verifies
//!   that nothing took effect; `no` comes back to the caller, never repeated
//!   ([`Stop::ReturnedToCaller`]); the
//!   same failure twice in a row after its prescribed action ends the loop
//!   ([`Stop::NotConverging`]), where a failure sent under newer surface tokens is not the same
//!   (the surface moved again after the re-listing), and a wait's failure met again after its
//!   delay is waited for again, within the bounds on the delays ([`Stop::DelayTooLong`]) and the
//!   attempts ([`Stop::BudgetExhausted`]).
//!
//! A transport or protocol failure of the call is the `Err` ([`ClientError::Service`], `rmcp`'s
//! `ServiceError` as it came), and so is, from [`RecoveringClient::list_tools`], a `tools/list`
//! whose pages do not end (a cursor named twice, or more than [`RecoveryConfig::max_list_pages`]
//! pages); a tool error is never an `Err`: it is the [`Recovery`]'s result, with the decoded
//! payload (a re-listing inside [`RecoveringClient::call`] that fails hands that error back).
//!
//! # Examples
//!
//! ```no_run
//! use agent_surface_client::{Intent, RecoveringClient, RecoveryConfig, Stop};
//! # async fn demo(peer: rmcp::Peer<rmcp::RoleClient>) -> Result<(), agent_surface_client::ClientError> {
//! let client = RecoveringClient::new(peer, RecoveryConfig::default());
//! client.list_tools().await?; // what the agent plans on (and the surface tokens)
//! let args = serde_json::json!({"zip": "10115"}).as_object().cloned().unwrap_or_default();
//! let recovery = client.call(Intent::new("shipping-quote", args)).await?;
//! match recovery.stop {
//!     Stop::Succeeded => println!("{:?}", recovery.result.structured_content),
//!     stop => println!("ended {stop}: {:?}", recovery.payload.map(|p| p.code())),
//! }
//! # Ok(()) }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::decision::{Action, IdRule, decide_payload};
use agent_surface_core::details::TARGET_ARGUMENT;
use agent_surface_core::json::canonical_json;
use agent_surface_core::{ErrorCode, ErrorPayload};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, MetaObject, RequestMetaObject, Tool};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

/// What a [`ClientHost`] answers when a person is asked to approve a call. In this client,
/// [`Approved`](Approval::Approved) means *the approval is recorded where the server will see
/// it*, not "the person said yes": see [`ClientHost::confirm`] for what the host does first, and
/// what happens otherwise.
pub use agent_surface_core::decision::Approval;
pub use agent_surface_core::decision::{Stop, Verification};
/// The future [`ClientHost`] and [`Wait`] return, `Pin<Box<dyn Future<Output = T> + Send + 'a>>`
/// (`futures-util`'s, re-exported so that an implementation names it without depending on
/// `futures-util`): write the body as `Box::pin(async move { … })`.
pub use futures_util::future::BoxFuture;

/// The Rust example of the user guide's chapter on recovery (`docs/recovery.md`), compiled as a
/// doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/recovery.md")]
struct UserGuideRecovery;

/// `_meta` key of the invocation id (the idempotency key).
pub const INVOCATION_ID: &str = "agent-surface/invocationId";
/// `_meta` key of the surface id the call was planned on.
pub const SURFACE_ID: &str = "agent-surface/surfaceId";
/// `_meta` key of the surface version the call was planned on.
pub const SURFACE_VERSION: &str = "agent-surface/surfaceVersion";
/// `_meta` key, on a listed tool, of its version, and on a call, of the version it was planned
/// on (from the one table of the version's wire names,
/// [`agent_surface_core::tool_version::wire`]; no field is standardized yet).
pub const TOOL_VERSION: &str = agent_surface_core::tool_version::wire::MCP_META;
/// `_meta` key of approved confirmation evidence.
pub const CONFIRMATION_ID: &str = "agent-surface/confirmationId";
/// `_meta` key of the call's target (`{"instanceId": ...}` or `{"registrationId": ...}`).
pub const TARGET: &str = "agent-surface/target";
/// `_meta` key, on a listed tool, of whether the capability is idempotent.
pub const IDEMPOTENT: &str = "agent-surface/idempotent";
/// `_meta` key, on a listed tool, of why it is disabled right now (absent when enabled).
pub const UNAVAILABLE_REASON: &str = "agent-surface/unavailableReason";
/// `_meta` key, on a listed tool with several instances, of the live instances
/// (`[{instanceId, registrationId}]`).
pub const INSTANCES: &str = "agent-surface/instances";

/// Why a listing or a call ended without an answer to act on.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The transport or the protocol failed: `rmcp`'s error, as it came.
    Service(ServiceError),
    /// The server's `tools/list` named, as the next page, a cursor it had named before in the
    /// same listing: following it would go round for ever.
    RepeatedCursor {
        /// The cursor named twice.
        cursor: String,
    },
    /// The server's `tools/list` still named a next page after
    /// [`RecoveryConfig::max_list_pages`] pages.
    TooManyPages {
        /// The bound that was reached.
        max_pages: u32,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Service(e) => write!(f, "{e}"),
            ClientError::RepeatedCursor { cursor } => {
                write!(f, "tools/list named the cursor {cursor:?} twice: its pages do not end")
            }
            ClientError::TooManyPages { max_pages } => {
                write!(f, "tools/list named a next page after {max_pages} pages")
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Service(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ServiceError> for ClientError {
    fn from(e: ServiceError) -> ClientError {
        ClientError::Service(e)
    }
}

/// A `tools/list` result: the tools and the surface tokens of the list's `_meta`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Listing {
    /// The tools, as listed.
    pub tools: Vec<Tool>,
    /// `_meta["agent-surface/surfaceId"]`.
    pub surface_id: Option<String>,
    /// `_meta["agent-surface/surfaceVersion"]`.
    pub surface_version: Option<u64>,
}

impl Listing {
    /// The listed tool of this name.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// A confirmation to put before a person (never the model).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ConfirmationPrompt {
    /// The tool to run.
    pub tool: String,
    /// Its arguments.
    pub args: JsonObject,
    /// The id to present once approved.
    pub confirmation_id: String,
    /// What will happen, in the author's words.
    pub summary: String,
    /// When the pending confirmation expires (RFC 3339).
    pub expires_at: String,
    /// The page where a person approves it (`details.approvalUrl`), when the service serves one:
    /// show it to the person, or send it to whoever may approve.
    pub approval_url: Option<String>,
}

/// The person and the state behind the client. The defaults hand decisions back: no one to
/// approve in-process, and an unknown outcome is never repeated.
///
/// Both methods return a [`BoxFuture`] (re-exported by this crate):
///
/// ```
/// use agent_surface_client::{Approval, BoxFuture, ClientHost, ConfirmationPrompt};
///
/// /// Nobody can approve from here: confirmations go back to the caller.
/// struct Relay;
///
/// impl ClientHost for Relay {
///     fn confirm<'a>(&'a self, _prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
///         Box::pin(async move { Approval::Unavailable })
///     }
/// }
/// ```
pub trait ClientHost: Send + Sync {
    /// Asks a person to approve the call, and answers only once the server can tell.
    /// Default: [`Approval::Unavailable`].
    ///
    /// The client does not approve anything itself: on [`Approval::Approved`] it sends the same
    /// call again (the same invocation id) with `_meta["agent-surface/confirmationId"]`, and the
    /// server runs it only if its own confirmation store holds the confirmation as approved.
    /// So answer `Approved` only once the approval is **recorded on the server**:
    ///
    /// - a person who may approve (never the requester: the server refuses an approval by the
    ///   requester) approved it in the service's approval inbox, at the page the error names as
    ///   `details.approvalUrl` ([`ConfirmationPrompt::approval_url`]:
    ///   `{public_url}/inbox/c/{confirmation_id}`), or through another
    ///   channel the service offers its approvers, and the host knows they did; or
    /// - the host runs in the service's process and `ConfirmationEngine::approve(&prompt.confirmation_id,
    ///   &approver)` returned `Ok(())` — with a quorum of several approvers, once the last one
    ///   approved (until then the confirmation is still pending).
    ///
    /// A "yes" in the client's own interface records nothing. Answered `Approved` while the
    /// confirmation is still pending, the call is sent once more, the server answers
    /// `CONFIRMATION_REQUIRED` again (the same confirmation, still pending), and the convergence
    /// guard ends the intent: [`Stop::NotConverging`] after two requests. Nothing ran, and the
    /// confirmation stays pending until someone decides it or it expires.
    ///
    /// A host that cannot have the approval recorded answers [`Approval::Unavailable`]: the
    /// error goes back to the caller ([`Stop::ReturnedToCaller`], [`Recovery::payload`] with its
    /// `approvalUrl`), so that the user is told where a person approves it; once approved, the
    /// same call repeated by the same caller runs (the server presents the approval it relayed).
    /// [`Approval::Denied`] ends the intent ([`Stop::Denied`]) without another request; the
    /// confirmation is denied on the server only if the host denies it there too (the inbox,
    /// `ConfirmationEngine::deny`), else it stays pending until it expires.
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        let _ = prompt;
        Box::pin(std::future::ready(Approval::Unavailable))
    }

    /// Whether a call of `tool` that may have run took effect. Default: [`Verification::Unknown`].
    fn verify<'a>(
        &'a self,
        tool: &'a str,
        args: &'a JsonObject,
        payload: &'a ErrorPayload,
    ) -> BoxFuture<'a, Verification> {
        let _ = (tool, args, payload);
        Box::pin(std::future::ready(Verification::Unknown))
    }
}

/// The default host.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHost;

impl ClientHost for NoHost {}

/// How the loop waits on `after-delay` (tests advance a test clock instead).
pub trait Wait: Send + Sync {
    /// Waits `delay`.
    fn wait(&self, delay: Duration) -> BoxFuture<'_, ()>;
}

/// Waits with `tokio::time::sleep`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioWait;

impl Wait for TokioWait {
    fn wait(&self, delay: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// The loop's bounds (defaults: the decision table's [`agent_surface_core::decision::BOUNDS`]).
/// Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// The most requests one intent may send, the first included.
    pub max_attempts: u32,
    /// The longest single wait honored; a longer delay ends the loop ([`Stop::DelayTooLong`]).
    pub max_delay: Duration,
    /// The most waiting in all, for one intent.
    pub max_total_delay: Duration,
    /// The wait when a `wait` row's payload names no delay.
    pub default_delay: Duration,
    /// The prefix of the invocation ids of intents that bring none: `{prefix}-{nonce}-{n}`, where
    /// `nonce` is 16 random hexadecimal digits drawn once per [`RecoveringClient`] and `n` counts
    /// its intents from 1. The nonce keeps two clients of the same person (one consumer key on
    /// the server) from sending the same id, which would replay one's stored result to the other.
    pub id_prefix: String,
    /// The most `tools/list` pages one listing reads (default 1000); a server that names a next
    /// page after as many ends the listing with [`ClientError::TooManyPages`].
    pub max_list_pages: u32,
}

impl Default for RecoveryConfig {
    fn default() -> RecoveryConfig {
        let b = agent_surface_core::decision::BOUNDS;
        RecoveryConfig {
            max_attempts: b.max_attempts,
            max_delay: b.max_delay,
            max_total_delay: b.max_total_delay,
            default_delay: b.default_delay,
            id_prefix: "rmcp".to_string(),
            max_list_pages: 1000,
        }
    }
}

/// One tool call to recover.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Intent {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: JsonObject,
    /// The invocation id (default: `{id_prefix}-{nonce}-{n}`, unique per client; see
    /// [`RecoveryConfig::id_prefix`]).
    pub invocation_id: Option<String>,
    /// The target (`_meta["agent-surface/target"]`), e.g. `{"instanceId": "cart-bob"}`.
    pub target: Option<Value>,
}

impl Intent {
    /// A call of `tool` with `args`.
    pub fn new(tool: impl Into<String>, args: JsonObject) -> Intent {
        Intent { tool: tool.into(), args, invocation_id: None, target: None }
    }

    /// With this invocation id.
    pub fn with_invocation_id(mut self, id: impl Into<String>) -> Intent {
        self.invocation_id = Some(id.into());
        self
    }

    /// With this target.
    pub fn with_target(mut self, target: Value) -> Intent {
        self.target = Some(target);
        self
    }
}

/// How an intent ended.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery {
    /// The last result received; after the person denied a confirmation
    /// ([`Stop::Denied`]), the denial instead (`CONFIRMATION_INVALID {reason: denied}`, as the
    /// server words it), which is what the model is to be told.
    pub result: CallToolResult,
    /// Its agent-surface payload, when it is an error that carries one.
    pub payload: Option<ErrorPayload>,
    /// Why the loop stopped.
    pub stop: Stop,
    /// How many requests were sent.
    pub attempts: u32,
    /// Whether the surface moved under the call (a re-listing, a refused tool version): the
    /// caller lists the tools again ([`RecoveringClient::list_tools`]) and shows the model the
    /// new list. The client never adopts a re-listing on its own: until the caller lists again,
    /// calls keep the tokens of the listing the model was shown, so one planned on a definition
    /// that changed is refused, not run.
    pub refreshed: bool,
    /// Each request: its invocation id and its error code (`None`: success).
    pub calls: Vec<(String, Option<ErrorCode>)>,
}

/// The answer after the person denied a confirmation: `CONFIRMATION_INVALID {reason: denied}`,
/// as the server words it over MCP.
fn denied() -> (CallToolResult, ErrorPayload) {
    let payload = agent_surface_core::decision::denied_answer();
    let text = payload.to_wire_text();
    (CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]), payload)
}

/// The agent-surface payload of an error result: its text block (or structured content).
pub fn payload_of(result: &CallToolResult) -> Option<ErrorPayload> {
    if result.is_error != Some(true) {
        return None;
    }
    let from_text = result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .find_map(|t| serde_json::from_str::<ErrorPayload>(&t.text).ok());
    from_text.or_else(|| result.structured_content.clone().and_then(|v| serde_json::from_value(v).ok()))
}

/// An `rmcp` client that recovers as the decision table says. See the [crate documentation](crate).
pub struct RecoveringClient {
    peer: Peer<RoleClient>,
    config: RecoveryConfig,
    host: Arc<dyn ClientHost>,
    wait: Arc<dyn Wait>,
    planned: Mutex<Option<Listing>>,
    /// `{id_prefix}-{nonce}`: what this client's default invocation ids start with.
    id_scope: String,
    next_id: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for RecoveringClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoveringClient").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The failure the convergence guard compares: a repeat sent under other surface tokens (the
/// surface moved again after the re-listing) is progress, not the same failure.
#[derive(Clone, Debug, PartialEq)]
struct Failure {
    code: ErrorCode,
    reason: Option<Value>,
    target: Option<Value>,
    surface: (Option<Value>, Option<Value>),
    tool_version: Option<Value>,
}

impl RecoveringClient {
    /// Wraps `peer` (from `RunningService::peer()`), with no host and tokio's timer.
    pub fn new(peer: Peer<RoleClient>, config: RecoveryConfig) -> RecoveringClient {
        RecoveringClient::with(peer, config, Arc::new(NoHost), Arc::new(TokioWait))
    }

    /// Wraps `peer`, asking `host` and waiting through `wait`.
    pub fn with(
        peer: Peer<RoleClient>,
        config: RecoveryConfig,
        host: Arc<dyn ClientHost>,
        wait: Arc<dyn Wait>,
    ) -> RecoveringClient {
        // Random per client: a counter alone starts at 1 in every client, and the server keys
        // idempotency by consumer and id, so two clients of one person would share records.
        let nonce = agent_surface_core::id::random_bytes();
        let id_scope = format!("{}-{}", config.id_prefix, agent_surface_core::hex::Hex(&nonce[..8]));
        RecoveringClient {
            peer,
            config,
            host,
            wait,
            planned: Mutex::new(None),
            id_scope,
            next_id: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Lists the tools (all pages, never from rmcp's response cache) and keeps the listing the
    /// next calls are planned on. A server whose pages do not end (a cursor named twice, more
    /// than [`RecoveryConfig::max_list_pages`] pages) is an error, never an endless loop.
    pub async fn list_tools(&self) -> Result<Listing, ClientError> {
        let listing = self.fetch().await?;
        *self.planned.lock().unwrap_or_else(PoisonError::into_inner) = Some(listing.clone());
        Ok(listing)
    }

    async fn fetch(&self) -> Result<Listing, ClientError> {
        self.peer.clear_response_cache().await;
        let mut tools = Vec::new();
        let mut cursor = None;
        let mut first_meta = None;
        let mut seen = HashSet::new();
        let mut pages = 0u32;
        loop {
            let params = cursor.map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = self.peer.list_tools(params).await?;
            pages += 1;
            if first_meta.is_none() {
                first_meta = Some(page.meta.clone().unwrap_or_default());
            }
            tools.extend(page.tools);
            let Some(next) = page.next_cursor else { break };
            if pages >= self.config.max_list_pages {
                return Err(ClientError::TooManyPages { max_pages: self.config.max_list_pages });
            }
            if !seen.insert(next.clone()) {
                return Err(ClientError::RepeatedCursor { cursor: next });
            }
            cursor = Some(next);
        }
        let meta = first_meta.unwrap_or_default();
        Ok(Listing {
            tools,
            surface_id: meta.0.get(SURFACE_ID).and_then(Value::as_str).map(str::to_string),
            surface_version: meta.0.get(SURFACE_VERSION).and_then(Value::as_u64),
        })
    }

    /// Sends `intent` and recovers as the decision table says. Never panics; sends at most
    /// [`RecoveryConfig::max_attempts`] requests.
    pub async fn call(&self, intent: Intent) -> Result<Recovery, ClientError> {
        let planned = self.planned.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut meta = JsonObject::new();
        let first_id = intent.invocation_id.clone().unwrap_or_else(|| {
            let n = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("{}-{n}", self.id_scope)
        });
        meta.insert(INVOCATION_ID.into(), Value::from(first_id.clone()));
        if let Some(p) = &planned {
            if let Some(id) = &p.surface_id {
                meta.insert(SURFACE_ID.into(), Value::from(id.clone()));
            }
            if let Some(v) = p.surface_version {
                meta.insert(SURFACE_VERSION.into(), Value::from(v));
            }
            if let Some(v) = p.tool(&intent.tool).and_then(tool_version) {
                meta.insert(TOOL_VERSION.into(), v);
            }
        }
        if let Some(target) = &intent.target {
            meta.insert(TARGET.into(), target.clone());
        }
        let mut base_id = first_id;
        let mut attempts = 0u32;
        let mut waited = Duration::ZERO;
        let mut refreshed = false;
        let mut last_failure: Option<Failure> = None;
        let mut prompted: Vec<String> = Vec::new();
        // Whether a `retry-once` row (a not-processed failure) was already followed.
        let mut retried_once = false;
        let mut calls = Vec::new();
        loop {
            attempts += 1;
            let mut params = CallToolRequestParams::new(intent.tool.clone()).with_arguments(intent.args.clone());
            params.meta = Some(RequestMetaObject(MetaObject(meta.clone())));
            let result = self.peer.call_tool(params).await?;
            let payload = payload_of(&result);
            let id = meta.get(INVOCATION_ID).and_then(Value::as_str).unwrap_or_default().to_string();
            calls.push((id.clone(), payload.as_ref().map(ErrorPayload::code)));
            let end = |stop: Stop, calls: Vec<_>, refreshed: bool| {
                Ok(Recovery { result: result.clone(), payload: payload.clone(), stop, attempts, refreshed, calls })
            };
            if result.is_error != Some(true) {
                return end(Stop::Succeeded, calls, refreshed);
            }
            let Some(p) = &payload else {
                // Not an agent-surface error: nothing to act on mechanically.
                return end(Stop::ReturnedToCaller, calls, refreshed);
            };
            let decision = decide_payload(p);
            if decision.action == Action::RefreshThenAsk {
                // The tool's definition changed: the model reads the new definition
                // (`refreshed`: the caller lists the tools again and shows it) before anything
                // calls the tool again. Until then calls keep the tokens of the listing the
                // model was shown, so a blind repeat is refused again rather than sent under the
                // new version with arguments built for the old one.
                return end(Stop::ReturnedToCaller, calls, true);
            }
            if matches!(decision.action, Action::Stop | Action::ChangeInput) {
                return end(Stop::ReturnedToCaller, calls, refreshed);
            }
            let failure = Failure {
                code: p.code(),
                reason: p.detail("reason").or_else(|| p.detail("phase")).cloned(),
                target: meta.get(TARGET).cloned(),
                surface: (meta.get(SURFACE_ID).cloned(), meta.get(SURFACE_VERSION).cloned()),
                tool_version: meta.get(TOOL_VERSION).cloned(),
            };
            // A wait is not held to the guard: the limit may lift after the next delay, and the
            // bounds on the delays and the attempts end the waiting.
            if decision.action != Action::Wait && last_failure.as_ref() == Some(&failure) {
                return end(Stop::NotConverging, calls, refreshed);
            }
            last_failure = Some(failure);
            if attempts >= self.config.max_attempts {
                return end(Stop::BudgetExhausted, calls, refreshed);
            }
            // Only an unknown outcome (a call with an effect, interrupted) is verified first; an
            // interrupted read or idempotent call comes back as TIMEOUT, CANCELLED or a mid-flight
            // unmount and repeats as its row says.
            if decision.action == Action::Verify {
                match self.host.verify(&intent.tool, &intent.args, p).await {
                    Verification::NotApplied => {}
                    Verification::Applied => return end(Stop::VerifiedApplied, calls, refreshed),
                    Verification::Unknown => return end(Stop::Unverified, calls, refreshed),
                }
            }
            let mut fresh = decision.invocation_id == IdRule::Fresh;
            match decision.action {
                Action::NewId => {
                    // The request as sent: its target is the one a re-listing retargeted it to.
                    base_id = conflict_id(&id, &intent, meta.get(TARGET), meta.get(CONFIRMATION_ID));
                    meta.insert(INVOCATION_ID.into(), Value::from(base_id.clone()));
                    fresh = false;
                }
                Action::Wait => {
                    let millis = decision.wait_field.and_then(|f| p.detail(f)).and_then(Value::as_u64);
                    let delay = millis.map_or(self.config.default_delay, Duration::from_millis);
                    if delay > self.config.max_delay || waited + delay > self.config.max_total_delay {
                        return end(Stop::DelayTooLong, calls, refreshed);
                    }
                    self.wait.wait(delay).await;
                    waited += delay;
                }
                Action::Refresh => {
                    // A re-listing that fails does not replace the answer: the error goes back, as
                    // it came (`refreshed` false: nothing was re-listed).
                    let Ok(listing) = self.fetch().await else {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    };
                    refreshed = true;
                    // Still listed and enabled, and what the call names still there.
                    let Some(tool) = listing.tool(&intent.tool).filter(|t| enabled(t)) else {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    };
                    // The tool's definition changed since the call was planned: the arguments
                    // were built for the old one and may mean something else now. As after
                    // `tool-version-mismatch`, the caller lists the tools again and the model
                    // reads the new definition before anything calls the tool again.
                    if let Some(sent) = meta.get(TOOL_VERSION)
                        && tool_version(tool).as_ref() != Some(sent)
                    {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    }
                    if !instance_listed(tool, intent.args.get(TARGET_ARGUMENT)) {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    }
                    let target = match meta.get(TARGET) {
                        Some(target) => match retarget(target, p, tool) {
                            Some(t) => Some(t),
                            None => return end(Stop::ReturnedToCaller, calls, refreshed),
                        },
                        None => None,
                    };
                    // Retried whether or not the listing changed, as the row says: a
                    // `binding-failed` precondition moves with state no listing shows, and the
                    // same failure again ends the loop (the convergence guard).
                    if let Some(target) = target {
                        meta.insert(TARGET.into(), target);
                    }
                    // Tokens are updated, never dropped (the tool version is the re-listed one
                    // already: a different one returned above).
                    if let (true, Some(id)) = (meta.contains_key(SURFACE_ID), &listing.surface_id) {
                        meta.insert(SURFACE_ID.into(), Value::from(id.clone()));
                    }
                    if let (true, Some(v)) = (meta.contains_key(SURFACE_VERSION), listing.surface_version) {
                        meta.insert(SURFACE_VERSION.into(), Value::from(v));
                    }
                    // The re-listing serves this intent's retry only: other calls keep the
                    // listing the model was shown (a call planned alongside this one, on a tool
                    // whose definition changed too, is refused rather than sent under the new
                    // version with arguments built for the old one).
                }
                Action::Reconfirm => {
                    meta.remove(CONFIRMATION_ID);
                }
                Action::Confirm => {
                    let Some(confirmation_id) = p.detail("confirmationId").and_then(Value::as_str) else {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    };
                    if prompted.iter().any(|c| c == confirmation_id) {
                        return end(Stop::ReturnedToCaller, calls, refreshed);
                    }
                    prompted.push(confirmation_id.to_string());
                    let text = |k: &str| p.detail(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    let prompt = ConfirmationPrompt {
                        tool: intent.tool.clone(),
                        args: intent.args.clone(),
                        confirmation_id: confirmation_id.to_string(),
                        summary: text("summary"),
                        expires_at: text("expiresAt"),
                        approval_url: p.detail("approvalUrl").and_then(Value::as_str).map(str::to_string),
                    };
                    match self.host.confirm(&prompt).await {
                        Approval::Approved => {
                            meta.insert(CONFIRMATION_ID.into(), Value::from(confirmation_id));
                        }
                        Approval::Denied => {
                            // What the model is told is the denial, as the server words it, not
                            // the request for approval it answered.
                            let (result, payload) = denied();
                            return Ok(Recovery {
                                result,
                                payload: Some(payload),
                                stop: Stop::Denied,
                                attempts,
                                refreshed,
                                calls,
                            });
                        }
                        Approval::Unavailable => return end(Stop::ReturnedToCaller, calls, refreshed),
                    }
                }
                // Nothing ran: one repeat, and only one, whatever the next failure says.
                Action::RetryOnce if retried_once => return end(Stop::NotConverging, calls, refreshed),
                Action::RetryOnce => retried_once = true,
                Action::Retry | Action::Verify => {}
                // A row this version does not know: the caller decides.
                _ => return end(Stop::ReturnedToCaller, calls, refreshed),
            }
            if fresh {
                meta.insert(INVOCATION_ID.into(), Value::from(format!("{base_id}#r{}", attempts + 1)));
            }
        }
    }
}

/// Whether a listed tool is enabled (no `_meta` [`UNAVAILABLE_REASON`]).
fn enabled(tool: &Tool) -> bool {
    tool.meta.as_ref().is_none_or(|m| !m.0.contains_key(UNAVAILABLE_REASON))
}

/// The live instances a listed tool names in its `_meta` [`INSTANCES`] (instance id,
/// registration id); `None` when it names none (a tool with at most one instance).
fn instances(tool: &Tool) -> Option<Vec<(String, String)>> {
    let listed = tool.meta.as_ref()?.0.get(INSTANCES)?.as_array()?;
    let text = |i: &Value, k: &str| i.get(k).and_then(Value::as_str).map(str::to_string);
    Some(listed.iter().filter_map(|i| Some((text(i, "instanceId")?, text(i, "registrationId")?))).collect())
}

/// Whether the instance a call names (an instance id) is still listed for `tool`; `true` when
/// the call names none or the tool lists no instances.
fn instance_listed(tool: &Tool, named: Option<&Value>) -> bool {
    match (named.and_then(Value::as_str), instances(tool)) {
        (Some(id), Some(listed)) => listed.iter().any(|(iid, _)| iid == id),
        _ => true,
    }
}

/// The target to retry with after a re-listing: a registration that is no longer listed is
/// replaced by the error's `liveRegistrationId` or by the named instance's live registration;
/// `None` when what the target names is gone (nothing to call).
///
/// A registration is live when the listing shows it. A tool with at most one instance lists
/// none, and then only the error can tell: one about the call's target (`COMPONENT_UNMOUNTED`,
/// `STALE_CAPABILITY {reason: registration-replaced}`) says the named registration is gone, and
/// its `liveRegistrationId` is the server's word for the live one; any other error (say, a
/// binding that failed) was not about the registration, which stays.
fn retarget(target: &Value, payload: &ErrorPayload, tool: &Tool) -> Option<Value> {
    let mut t = target.as_object()?.clone();
    let listed = instances(tool);
    let iid = t.get("instanceId").and_then(Value::as_str).map(str::to_string);
    if !instance_listed(tool, iid.as_ref().map(|i| Value::from(i.as_str())).as_ref()) {
        return None;
    }
    let Some(rid) = t.get("registrationId").and_then(Value::as_str).map(str::to_string) else {
        return Some(Value::Object(t));
    };
    let live = |r: &str| listed.as_ref().is_some_and(|l| l.iter().any(|(_, lr)| lr == r));
    let replacement =
        payload.detail("liveRegistrationId").and_then(Value::as_str).filter(|r| listed.is_none() || live(r));
    let about_target = payload.code() == ErrorCode::ComponentUnmounted
        || (payload.code() == ErrorCode::StaleCapability
            && payload.detail("reason").and_then(Value::as_str) == Some("registration-replaced"));
    let of_instance = || {
        let (listed, iid) = (listed.as_ref()?, iid.as_ref()?);
        listed.iter().find(|(i, _)| i == iid).map(|(_, r)| r.clone())
    };
    match replacement {
        Some(r) if r != rid => {
            t.insert("registrationId".into(), Value::from(r));
        }
        _ if live(&rid) => {}
        // Not listed, and the error was not about it: nothing says it is gone.
        _ if listed.is_none() && !about_target => {}
        _ => {
            t.insert("registrationId".into(), Value::from(of_instance()?));
        }
    }
    Some(Value::Object(t))
}

/// The version a listed tool carries in its `_meta`, if any.
fn tool_version(tool: &Tool) -> Option<Value> {
    tool.meta.as_ref().and_then(|m| m.get(TOOL_VERSION)).filter(|v| v.is_string()).cloned()
}

/// `{id}#c{hash}`: the hash (SHA-256, 64 bits) over the tool, the canonical arguments, the
/// target and the confirmation, so another request that conflicted on `id` gets another id.
fn conflict_id(id: &str, intent: &Intent, target: Option<&Value>, confirmation: Option<&Value>) -> String {
    let args = canonical_json(&Value::Object(intent.args.clone()));
    let target = target.map(canonical_json).unwrap_or_default();
    let confirmation = confirmation.and_then(Value::as_str).unwrap_or_default();
    let digest = agent_surface_core::digest::sha256_parts([
        intent.tool.as_bytes(),
        args.as_bytes(),
        target.as_bytes(),
        confirmation.as_bytes(),
    ]);
    format!("{id}#c{}", agent_surface_core::hex::Hex(&digest[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    fn tool(meta: Option<Value>, annotations: ToolAnnotations) -> Tool {
        let mut t = Tool::new("t", "A tool.", Arc::new(JsonObject::new())).annotate(annotations);
        t.meta = meta.and_then(|m| m.as_object().cloned()).map(MetaObject);
        t
    }

    /// The derivation's test vector, pinned: the Python helper (`clients/python`, `conflict_id`)
    /// must derive the same ids from the same requests, byte for byte (its check is in
    /// `crates/agent-surface-mcp/tests/clients/python/recovery_loop.py`).
    #[test]
    fn the_conflict_id_has_a_pinned_test_vector() {
        let args = serde_json::json!({"zip": "10115", "n": 2.50, "b": [true, null], "\u{20ac}": "x"});
        let intent = Intent::new("shipping-quote", args.as_object().cloned().unwrap_or_default());
        let targeted = intent.clone().with_target(serde_json::json!({"instanceId": "cart-bob"}));
        let confirmed = Value::from("c-1");
        let ids = [
            conflict_id("i-1", &intent, None, None),
            conflict_id("i-1", &targeted, targeted.target.as_ref(), None),
            conflict_id("i-1", &targeted, targeted.target.as_ref(), Some(&confirmed)),
        ];
        // The target hashed is the one sent (a retargeted call's), not the intent's first.
        let retargeted = serde_json::json!({"registrationId": "r-2"});
        assert_ne!(conflict_id("i-1", &targeted, Some(&retargeted), None), ids[1]);
        assert_eq!(ids, ["i-1#c8d329d79907829d8", "i-1#cc0a7be0dcedf7e98", "i-1#c9cacb8ec606c0d8f"]);
    }

    #[test]
    fn a_stale_registration_is_retargeted_and_a_gone_instance_is_not() {
        let listed = serde_json::json!({INSTANCES: [
            {"instanceId": "a", "registrationId": "r-a2"}, {"instanceId": "b", "registrationId": "r-b"}]});
        let t = tool(Some(listed), ToolAnnotations::new());
        let stale: ErrorPayload = serde_json::from_value(serde_json::json!({"code": "STALE_CAPABILITY",
            "message": "m", "retry": "after-refresh",
            "details": {"reason": "registration-replaced", "liveRegistrationId": "r-a2"}}))
        .unwrap();
        let plain: ErrorPayload = serde_json::from_value(serde_json::json!({"code": "COMPONENT_UNMOUNTED",
            "message": "m", "retry": "after-refresh", "details": {"phase": "resolve"}}))
        .unwrap();
        let by_registration = serde_json::json!({"registrationId": "r-a1"});
        assert_eq!(retarget(&by_registration, &stale, &t), Some(serde_json::json!({"registrationId": "r-a2"})));
        assert_eq!(retarget(&by_registration, &plain, &t), None);
        let both = serde_json::json!({"instanceId": "a", "registrationId": "r-a1"});
        let live = serde_json::json!({"instanceId": "a", "registrationId": "r-a2"});
        assert_eq!(retarget(&both, &plain, &t), Some(live));
        assert_eq!(retarget(&serde_json::json!({"instanceId": "c"}), &plain, &t), None);
        assert!(!instance_listed(&t, Some(&Value::from("c"))));
        assert!(instance_listed(&t, Some(&Value::from("b"))));
    }

    /// A tool with one instance lists no instances: a registration the error says is gone is not
    /// called again, the error's live registration is taken, and one the error was not about
    /// stays.
    #[test]
    fn without_listed_instances_the_error_tells_whether_a_registration_is_gone() {
        let t = tool(None, ToolAnnotations::new());
        let payload = |v: Value| serde_json::from_value::<ErrorPayload>(v).unwrap();
        let unmounted = payload(serde_json::json!({"code": "COMPONENT_UNMOUNTED", "message": "m",
            "retry": "after-refresh", "details": {"phase": "resolve"}}));
        let replaced = payload(serde_json::json!({"code": "STALE_CAPABILITY", "message": "m",
            "retry": "after-refresh", "details": {"reason": "registration-replaced", "liveRegistrationId": "r-new"}}));
        let binding = payload(serde_json::json!({"code": "PRECONDITION_FAILED", "message": "m",
            "retry": "after-refresh", "details": {"reason": "binding-failed"}}));
        let old = serde_json::json!({"registrationId": "r-old"});
        assert_eq!(retarget(&old, &unmounted, &t), None);
        assert_eq!(retarget(&old, &replaced, &t), Some(serde_json::json!({"registrationId": "r-new"})));
        assert_eq!(retarget(&old, &binding, &t), Some(old.clone()));
    }
}
