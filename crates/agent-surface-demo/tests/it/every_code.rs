//! One real call per code, through every transport: the embedded toolset (an OpenAI Chat model
//! turn handled by a `Toolset`), MCP (an `rmcp` client over an in-process session) and HTTP (the
//! axum binding on a loopback port, a plain HTTP/1.1 client). All three serve the *same* live
//! registry, so a call answered on one transport is answered on the others with the same code,
//! retry, details and repair, byte for byte. Only the message may differ, by what the binding lets
//! an agent send (`spec/error-model.md`, "Messages are true to their transport"): the toolset and
//! MCP carry the wording for a model, which sends only a tool's arguments; HTTP the payload as
//! built.
//!
//! What makes the answers comparable byte for byte:
//!
//! - the registry runs on a [`ManualClock`] that only the test moves, so `retryAfterMs`,
//!   `expiresAt` and `timeoutMs` do not depend on when a transport got its turn;
//! - the confirmation gate is a fixture ([`fixture_gate`], an `FnGate`) that issues the same confirmation id
//!   for every request. Ids of the real `ConfirmationEngine` are fresh per request by design (its
//!   guarantees are proven in `agent-surface-policy`); here the point is what the transports carry;
//! - the in-flight codes (`TIMEOUT`, `COMPONENT_UNMOUNTED`, `CANCELLED`) are produced by the test
//!   acting while the handler is known to be running (the clock advanced past the budget, the
//!   instance unmounted, the caller gone), each through the transport's own means of cancelling:
//!   the toolset's cancellation token, MCP `notifications/cancelled`, an HTTP client that hangs
//!   up. A cancelled MCP request and a dropped HTTP connection get no answer by definition, so the
//!   caller asks again with the same invocation id and reads the recorded outcome. Abandoning a
//!   write the same way gives `EXECUTION_FAILED {reason: outcome-unknown}` on every transport.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin};
use agent_surface_core::message::Sends;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, ErrorPayload, InvokeResult, SafeText, Timestamp};
use agent_surface_http::{BearerTokens, HttpConfig};
use agent_surface_mcp::{McpConfig, McpServer, codec};
use agent_surface_policy::{
    AuthorityDecision, CallInfo, ConfirmationDecision, ConfirmationGate, Consumer, FnPolicy, Identity, ManualClock,
    MemoryRateLimiter, Policies, Quota, RateLimitConfig, RequireIdentity, RequireRole,
};
use agent_surface_registry::{Ctx, Mount, Registry, RegistryConfig};
use agent_surface_testing::{FnGate, Secrets, assert_text_has_no_leak, http};
use agent_surface_toolset::{
    Approval, ConfirmationPrompt, Provider, RecoveryConfig, RecoveryHost, Toolset, ToolsetConfig,
};
use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, MetaObject, RequestMetaObject};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{RoleClient, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What the failing handler's error says internally; no transport may carry it.
const SECRET_SQL: &str = "SELECT token FROM sessions WHERE user_id = 42";
const SECRET_URL: &str = "postgres://svc:hunter2@db.internal:5432/notes";

/// A gate for capabilities that declare one: every request without evidence gets the same
/// confirmation id and expiry; every presented id is refused as denied.
fn fixture_gate() -> impl ConfirmationGate {
    FnGate::new(|call, evidence, now| match (call.declared_gate, evidence) {
        (None, _) => ConfirmationDecision::Proceed,
        (Some(gate), None) => ConfirmationDecision::Required {
            confirmation_id: "c-5f1d0c2a9e7b4f31".into(),
            summary: gate.summary.cloned().unwrap_or_else(|| SafeText::from("Delete a note.")),
            expires_at: now.saturating_add(Duration::from_secs(300)),
            origin: Origin::Client,
        },
        (Some(_), Some(_)) => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Denied),
    })
}

/// Tracks the runs of `slow.wait`, whose handler never finishes on its own.
#[derive(Default)]
struct Probe {
    started: AtomicUsize,
    ended: AtomicUsize,
}

/// Counts a run as ended when the pipeline drops the handler's future.
struct EndGuard(Arc<Probe>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoteId {
    id: String,
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

struct Fixture {
    registry: Registry,
    clock: Arc<ManualClock>,
    probe: Arc<Probe>,
    slow: Mutex<Option<Mount>>,
    vault: Mutex<Option<Mount>>,
    _mounts: Vec<Mount>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_795_957_200_000)));
    let authority = Policies::default_allow()
        .with_clock(clock.clone())
        .for_capability("admin.purge", FnPolicy::new("admins-only", |_: &CallInfo<'_>| Ok(AuthorityDecision::Hide)))
        .for_type("refund", RequireIdentity)
        .for_type("refund", RequireRole::new("support"));
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.clone(),
        capability_quotas: [("quote.ping".to_string(), Some(Quota::new(NonZeroU32::MIN, Duration::from_secs(3600))))]
            .into(),
        ..Default::default()
    });
    let registry = Registry::new(RegistryConfig {
        clock: clock.clone(),
        authority: Some(Arc::new(authority)),
        rate_limiter: Some(Arc::new(limiter)),
        confirmation: Some(Arc::new(fixture_gate())),
        ..Default::default()
    });
    let probe = Arc::new(Probe::default());

    let ok = |_c: Ctx, _: Nothing| async move { Ok::<_, AgentSurfaceError>(json!({"done": true})) };
    registry
        .define("note", |t| {
            t.capability("read", "Read a note.").effect(Effect::Read).idempotent().handler(
                |_c: Ctx, i: NoteId| async move {
                    match i.id.as_str() {
                        "missing" => Err(AgentSurfaceError::precondition_failed("No note has this id.")),
                        "boom" => Err(AgentSurfaceError::internal(std::io::Error::other(format!(
                            "{SECRET_SQL} at {SECRET_URL}"
                        )))),
                        _ => Ok(json!({"id": i.id, "text": "hello"})),
                    }
                },
            );
            t.capability("delete", "Delete a note. Needs the user's approval.")
                .effect(Effect::Destructive)
                .confirm(|i: &NoteId| format!("Delete note {}.", i.id))
                .handler(|_c: Ctx, i: NoteId| async move { Ok::<_, AgentSurfaceError>(json!({"deleted": i.id})) });
        })
        .unwrap();
    registry
        .define("vault", |t| {
            t.capability("seal", "Seal the vault. Cannot be undone.").effect(Effect::Destructive).handler(ok);
        })
        .unwrap();
    registry
        .define("admin", |t| {
            t.capability("purge", "Purge every cache.").effect(Effect::Destructive).handler(ok);
        })
        .unwrap();
    registry
        .define("loyalty", |t| {
            t.capability("redeem", "Redeem loyalty points.").effect(Effect::Write).handler(ok);
        })
        .unwrap();
    registry
        .define("refund", |t| {
            t.capability("issue", "Issue a refund.").effect(Effect::External).handler(ok);
        })
        .unwrap();
    registry
        .define("cart", |t| {
            t.capability("view", "Show a cart.").effect(Effect::Read).idempotent().handler(ok);
        })
        .unwrap();
    registry
        .define("quote", |t| {
            t.capability("ping", "Ask for a quote.").effect(Effect::Read).idempotent().handler(ok);
        })
        .unwrap();
    let slow_probe = probe.clone();
    registry
        .define("slow", move |t| {
            let hang = move |_c: Ctx, _: Nothing| {
                let probe = slow_probe.clone();
                async move {
                    let _guard = EndGuard(probe.clone());
                    probe.started.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    Ok::<_, AgentSurfaceError>(json!({}))
                }
            };
            t.capability("wait", "Wait for a slow lookup.")
                .effect(Effect::Read)
                .idempotent()
                .time_budget(Duration::from_secs(2))
                .handler(hang.clone());
            // A write that may commit before it is stopped: abandoned, it is an unknown outcome.
            t.capability("write", "Write slowly.")
                .effect(Effect::Write)
                .time_budget(Duration::from_secs(2))
                .handler(hang);
        })
        .unwrap();
    assert!(registry.disable("loyalty.redeem", "The loyalty programme opens on Monday."));

    let mut mounts = Vec::new();
    for ty in ["note", "admin", "loyalty", "refund", "quote"] {
        mounts.push(registry.mount(ty, "main").unwrap());
    }
    let cart = |id: &str, description: &str| {
        registry.mount_with("cart", id, agent_surface_registry::Instance::new().description(description)).unwrap()
    };
    mounts.push(cart("left", "The cart on the left."));
    mounts.push(cart("right", "The cart on the right."));
    let slow = Mutex::new(Some(registry.mount("slow", "main").unwrap()));
    let vault = Mutex::new(Some(registry.mount("vault", "main").unwrap()));
    Fixture { registry, clock, probe, slow, vault, _mounts: mounts }
}

impl Fixture {
    /// Waits until `slow.wait` has started `n` runs in all and the pipeline armed the run's time
    /// budget on the clock (so advancing the clock now times it out).
    async fn running(&self, n: usize) {
        wait_until(|| self.probe.started.load(Ordering::SeqCst) >= n && self.clock.pending_sleeps() > 0).await;
    }

    /// Waits until every run of `slow.wait` has been dropped by the pipeline.
    async fn idle(&self) {
        wait_until(|| self.probe.ended.load(Ordering::SeqCst) == self.probe.started.load(Ordering::SeqCst)).await;
    }

    fn remount_slow(&self) {
        let mount = self.registry.mount("slow", "main").unwrap();
        *self.slow.lock().unwrap_or_else(PoisonError::into_inner) = Some(mount);
    }
}

async fn wait_until(condition: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for the fixture");
}

/// Who calls: nobody signed in, or alice (signed in, without the `support` role).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Anonymous,
    Alice,
}

/// One call: what any transport sends.
#[derive(Clone, Debug)]
struct Call {
    capability: &'static str,
    input: Value,
    who: Who,
    invocation_id: Option<String>,
    confirmation_id: Option<String>,
    surface: Option<(String, u64)>,
}

fn call(capability: &'static str, input: Value) -> Call {
    Call { capability, input, who: Who::Alice, invocation_id: None, confirmation_id: None, surface: None }
}

impl Call {
    fn by(mut self, who: Who) -> Call {
        self.who = who;
        self
    }

    fn id(mut self, id: &str) -> Call {
        self.invocation_id = Some(id.to_string());
        self
    }

    fn evidence(mut self, id: &str) -> Call {
        self.confirmation_id = Some(id.to_string());
        self
    }

    fn planned_at(mut self, surface_id: &str, version: u64) -> Call {
        self.surface = Some((surface_id.to_string(), version));
        self
    }
}

// ---- The embedded toolset ----------------------------------------------------------------

/// A host that approves every confirmation at once (so the toolset's recovery loop presents the
/// evidence: the only way a model turn sends a confirmation id).
struct ApproveAll;

impl RecoveryHost for ApproveAll {
    fn confirm<'a>(&'a self, _prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        Box::pin(std::future::ready(Approval::Approved))
    }
}

/// A toolset whose recovery loop sends exactly one request (two when a confirmation is approved),
/// so each call's own answer is what comes back.
fn toolset(f: &Fixture, who: Who, approve: bool) -> Arc<Toolset> {
    let consumer = match who {
        Who::Anonymous => Consumer::anonymous("toolset-anonymous"),
        Who::Alice => Consumer::authenticated("toolset-alice", Identity::new("alice")),
    };
    let mut config = ToolsetConfig {
        recovery: RecoveryConfig { max_attempts: if approve { 2 } else { 1 }, ..Default::default() },
        ..Default::default()
    };
    if approve {
        config.host = Arc::new(ApproveAll);
    }
    Arc::new(Toolset::new(f.registry.clone(), consumer, config))
}

/// The model turn that calls `c` (OpenAI Chat Completions), its tool call id standing for the
/// invocation id.
fn model_turn(c: &Call) -> Value {
    let tool = c.capability.replace('.', "-");
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call_id = c.invocation_id.clone().unwrap_or_else(|| format!("call_{}", CALLS.fetch_add(1, Ordering::Relaxed)));
    json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": tool, "arguments": c.input.to_string()}}
    ]}}]})
}

/// The payload text the model reads in the tool message.
async fn via_toolset(toolset: &Toolset, c: &Call) -> String {
    let turn = toolset.handle(Provider::OpenAiChat, &model_turn(c)).await.expect("the model turn parses");
    let [outcome] = &turn.outcomes[..] else { panic!("one call, one outcome: {:?}", turn.outcomes) };
    assert_eq!(turn.messages.len(), 1);
    assert_eq!(turn.messages[0]["role"], "tool");
    assert_eq!(turn.messages[0]["tool_call_id"], outcome.call.call_id.as_str());
    turn.messages[0]["content"].as_str().expect("the tool message has text content").to_string()
}

async fn toolset_call(f: &Fixture, c: &Call) -> String {
    // Confirmation evidence can only come from the host's approval in a model loop.
    let approve = c.confirmation_id.is_some();
    // A toolset sends the tokens of its own tool list (see `stale_each`), never the call's.
    assert!(c.surface.is_none());
    via_toolset(&toolset(f, c.who, approve), c).await
}

// ---- MCP -----------------------------------------------------------------------------------

struct McpClients {
    anonymous: RunningService<RoleClient, ()>,
    alice: RunningService<RoleClient, ()>,
}

async fn mcp_session(registry: &Registry, identity: Option<Identity>) -> RunningService<RoleClient, ()> {
    let config = McpConfig { identity, ..Default::default() };
    let server = McpServer::new(registry.clone(), config);
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(agent_surface_mcp::serve_io(server, read, write, 4 << 20));
    ().serve(tokio::io::split(client_io)).await.expect("MCP handshake")
}

impl McpClients {
    async fn new(registry: &Registry) -> McpClients {
        McpClients {
            anonymous: mcp_session(registry, None).await,
            alice: mcp_session(registry, Some(Identity::new("alice"))).await,
        }
    }

    fn client(&self, who: Who) -> &RunningService<RoleClient, ()> {
        match who {
            Who::Anonymous => &self.anonymous,
            Who::Alice => &self.alice,
        }
    }
}

fn mcp_params(c: &Call) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(c.capability.replace('.', "-"));
    if let Value::Object(input) = &c.input {
        params = params.with_arguments(input.clone());
    }
    let mut meta = serde_json::Map::new();
    if let Some(id) = &c.invocation_id {
        meta.insert("agent-surface/invocationId".into(), json!(id));
    }
    if let Some(id) = &c.confirmation_id {
        meta.insert("agent-surface/confirmationId".into(), json!(id));
    }
    if let Some((surface_id, version)) = &c.surface {
        meta.insert("agent-surface/surfaceId".into(), json!(surface_id));
        meta.insert("agent-surface/surfaceVersion".into(), json!(version));
    }
    if !meta.is_empty() {
        let mut m = RequestMetaObject::new();
        m.extend(RequestMetaObject(MetaObject(meta)));
        params.meta = Some(m);
    }
    params
}

/// The payload text of the tool result, checked to be an `isError` result whose only content is
/// that text.
fn mcp_payload(result: &rmcp::model::CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(result.structured_content.is_none(), "{result:?}");
    let decoded = codec::decode(result).expect("the result decodes");
    assert!(decoded.error_payload().is_some());
    let value = serde_json::to_value(result).unwrap();
    let [content] = value["content"].as_array().expect("content").as_slice() else { panic!("{value}") };
    content["text"].as_str().expect("text content").to_string()
}

async fn mcp_call(clients: &McpClients, c: &Call) -> String {
    let result = clients.client(c.who).peer().call_tool(mcp_params(c)).await.expect("tools/call");
    mcp_payload(&result)
}

// ---- HTTP ----------------------------------------------------------------------------------

async fn http_server(registry: &Registry) -> String {
    let config = HttpConfig {
        prefix: "/api".into(),
        authenticator: Some(Arc::new(BearerTokens::new([("t-alice", Identity::new("alice"))]))),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = agent_surface_http::router(registry.clone(), config);
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// The request for `c`: `POST /api/invoke` with its JSON body, the invocation id as
/// `Idempotency-Key`, Alice's bearer token.
fn http_request(c: &Call) -> (String, Vec<(&'static str, String)>) {
    let mut body = json!({"capability": c.capability, "input": c.input});
    if let Some(id) = &c.confirmation_id {
        body["confirmationId"] = json!(id);
    }
    if let Some((surface_id, version)) = &c.surface {
        body["surfaceId"] = json!(surface_id);
        body["surfaceVersion"] = json!(version);
    }
    let mut headers = vec![("Content-Type", "application/json".to_string())];
    if let Some(id) = &c.invocation_id {
        headers.push(("Idempotency-Key", id.clone()));
    }
    if c.who == Who::Alice {
        headers.push(("Authorization", "Bearer t-alice".into()));
    }
    (body.to_string(), headers)
}

/// Sends `c` with the kit's HTTP client and returns the whole response.
async fn http_send(addr: &str, c: &Call) -> http::Response {
    let (body, headers) = http_request(c);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    http::request(addr, "POST", "/api/invoke", &headers, body.as_bytes()).await
}

/// Sends `c` and returns the payload part of the problem body (`{` and everything from the
/// `code` member on), after checking the status against the matrix and the problem type.
async fn http_call(addr: &str, c: &Call) -> String {
    let response = http_send(addr, c).await;
    assert!(response.body.contains(",\"code\":"), "not a capability error: {response:?}");
    let payload = crate::transports::http_payload(&response.body);
    let parsed: ErrorPayload = serde_json::from_str(&payload).expect("the payload part parses");
    // The matrix's HTTP status analog for this payload.
    let expected = agent_surface_http::wire::encode(&InvokeResult::error(parsed.clone(), None)).status;
    assert_eq!(response.status, expected, "{response:?}");
    let problem = response.json();
    assert_eq!(problem["type"], format!("urn:agent-surface:error:{}", parsed.code().as_str()));
    let content_type = response.header("content-type").unwrap_or_default();
    assert!(content_type.starts_with("application/problem+json"), "{response:?}");
    payload
}

// ---- The calls -----------------------------------------------------------------------------

struct Transports {
    f: Fixture,
    mcp: McpClients,
    http: String,
}

/// The payload of one code's call (as HTTP carries it: the wording for a whole request), checked
/// against the other transports.
struct Answers {
    code: ErrorCode,
    payload: String,
    /// Whether the toolset's and MCP's message differs from HTTP's.
    reworded: bool,
}

/// The payload without its message: what every transport carries byte for byte.
fn without_message(payload: &ErrorPayload) -> Value {
    let mut json = payload.to_json();
    json.as_object_mut().unwrap().remove("message");
    json
}

fn same(code: ErrorCode, toolset: String, mcp: String, http: String) -> Answers {
    let parse = |who: &str, text: &str| -> ErrorPayload {
        let parsed: ErrorPayload =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{who}'s payload ({e}): {text}"));
        // The bytes are core's own serialization of the payload.
        assert_eq!(serde_json::to_string(&parsed).unwrap(), text, "{code}: {who}");
        // Each call names its own correlation id; the rest is the same on every transport.
        let mut parsed = parsed;
        assert!(parsed.correlation_id().is_some_and(|id| id.starts_with("c-")), "{code}: {who}: {text}");
        parsed.set_correlation_id(None);
        parsed
    };
    let (over_toolset, over_mcp, over_http) = (parse("toolset", &toolset), parse("MCP", &mcp), parse("HTTP", &http));
    assert_eq!(over_http.code(), code, "HTTP answered {http}");
    assert_eq!(without_message(&over_toolset), without_message(&over_http), "{code}: the toolset and HTTP differ");
    assert_eq!(without_message(&over_mcp), without_message(&over_http), "{code}: MCP and HTTP differ");
    // HTTP carries the message as built; the toolset and MCP the wording for a model.
    assert_eq!(*over_http.worded_for(Sends::Request), over_http, "{code}");
    let for_a_model = over_http.worded_for(Sends::Arguments);
    assert_eq!(over_toolset, *for_a_model, "{code}: the toolset's message");
    assert_eq!(over_mcp, *for_a_model, "{code}: MCP's message");
    Answers { code, payload: http, reworded: over_toolset.message() != over_http.message() }
}

impl Transports {
    async fn new() -> Transports {
        let f = fixture();
        let mcp = McpClients::new(&f.registry).await;
        let http = http_server(&f.registry).await;
        Transports { f, mcp, http }
    }

    /// The same call on each transport, one after the other.
    async fn each(&self, code: ErrorCode, c: Call) -> Answers {
        let toolset = toolset_call(&self.f, &c).await;
        let mcp = mcp_call(&self.mcp, &c).await;
        let http = http_call(&self.http, &c).await;
        same(code, toolset, mcp, http)
    }

    /// `slow.wait` on each transport: started, then `act` once the handler runs.
    async fn in_flight(&self, code: ErrorCode, act: impl Fn(&Fixture)) -> Answers {
        let c = call("slow.wait", json!({}));
        let mut answers = Vec::new();
        for transport in ["toolset", "mcp", "http"] {
            let n = self.f.probe.started.load(Ordering::SeqCst) + 1;
            let pending: tokio::task::JoinHandle<String> = match transport {
                "toolset" => {
                    let toolset = toolset(&self.f, c.who, false);
                    let c = c.clone();
                    tokio::spawn(async move { via_toolset(&toolset, &c).await })
                }
                "mcp" => {
                    let peer = self.mcp.client(c.who).peer().clone();
                    let params = mcp_params(&c);
                    tokio::spawn(async move { mcp_payload(&peer.call_tool(params).await.expect("tools/call")) })
                }
                _ => {
                    let (addr, c) = (self.http.clone(), c.clone());
                    tokio::spawn(async move { http_call(&addr, &c).await })
                }
            };
            self.f.running(n).await;
            act(&self.f);
            answers.push(pending.await.expect("the call's task"));
            self.f.idle().await;
        }
        let [toolset, mcp, http] = <[String; 3]>::try_from(answers).unwrap();
        same(code, toolset, mcp, http)
    }

    /// `capability` started and then abandoned by its caller, each transport by its own means;
    /// then asked again under the same invocation id (the toolset gets its answer at once).
    async fn abandoned(&self, capability: &'static str, code: ErrorCode) -> Answers {
        let tag = capability.replace('.', "-");
        // The toolset: its cancellation token.
        let c = call(capability, json!({}));
        let n = self.f.probe.started.load(Ordering::SeqCst) + 1;
        let ts = toolset(&self.f, Who::Alice, false);
        let pending = {
            let (ts, c) = (ts.clone(), c.clone().id(&format!("call_cancel_{tag}")));
            tokio::spawn(async move { via_toolset(&ts, &c).await })
        };
        self.f.running(n).await;
        ts.cancellation().cancel();
        let toolset = pending.await.unwrap();
        self.f.idle().await;

        // MCP: `notifications/cancelled`; the request is never answered.
        let c = call(capability, json!({})).id(&format!("cancel-mcp-{tag}"));
        let n = self.f.probe.started.load(Ordering::SeqCst) + 1;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(mcp_params(&c)));
        let handle = self
            .mcp
            .alice
            .peer()
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .expect("the request is sent");
        self.f.running(n).await;
        handle.cancel(Some("the user pressed stop".into())).await.expect("the cancellation is sent");
        self.f.idle().await;
        let mcp = mcp_call(&self.mcp, &c).await;

        // HTTP: the client hangs up while the call runs.
        let c = call(capability, json!({})).id(&format!("cancel-http-{tag}"));
        let n = self.f.probe.started.load(Ordering::SeqCst) + 1;
        // A raw socket, not the kit's client: the test hangs up before any answer comes.
        let (body, headers) = http_request(&c);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut stream = TcpStream::connect(&self.http).await.unwrap();
        stream.write_all(&http::request_bytes("POST", "/api/invoke", &headers, body.as_bytes())).await.unwrap();
        self.f.running(n).await;
        drop(stream);
        self.f.idle().await;
        let http = http_call(&self.http, &c).await;
        same(code, toolset, mcp, http)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_per_code_gives_the_same_payload_on_every_transport() {
    let t = Transports::new().await;
    let f = &t.f;
    let mut answers = Vec::new();

    answers.push(t.each(ErrorCode::CapabilityNotFound, call("admin.purge", json!({}))).await);
    answers.push(t.each(ErrorCode::CapabilityNotAvailable, call("loyalty.redeem", json!({}))).await);
    answers.push(t.each(ErrorCode::AmbiguousInstance, call("cart.view", json!({}))).await);
    answers.push(t.each(ErrorCode::InvalidInput, call("note.read", json!({"id": 5}))).await);
    answers.push(t.each(ErrorCode::NotAuthenticated, call("refund.issue", json!({})).by(Who::Anonymous)).await);
    answers.push(t.each(ErrorCode::NotAuthorized, call("refund.issue", json!({}))).await);
    answers.push(t.each(ErrorCode::PreconditionFailed, call("note.read", json!({"id": "missing"}))).await);
    let failed = t.each(ErrorCode::ExecutionFailed, call("note.read", json!({"id": "boom"}))).await;
    let secrets = Secrets::new().sql(SECRET_SQL).url(SECRET_URL);
    assert_text_has_no_leak("EXECUTION_FAILED payload", &failed.payload, &secrets);
    answers.push(failed);
    // Asked anonymously: a signed-in user's repeat of a call whose confirmation was relayed to
    // them presents that confirmation on every transport (the memory is keyed on the principal),
    // and this fixture's gate denies every presented id; anonymous callers are apart per transport.
    let anonymous = Call { who: Who::Anonymous, ..call("note.delete", json!({"id": "n-1"})) };
    answers.push(t.each(ErrorCode::ConfirmationRequired, anonymous).await);
    answers.push(
        t.each(
            ErrorCode::ConfirmationInvalid,
            call("note.delete", json!({"id": "n-1"})).evidence("c-5f1d0c2a9e7b4f31"),
        )
        .await,
    );

    // The same invocation id for a different request. The first request succeeds on each
    // transport (the toolset's id is the model's tool call id).
    let first = call("note.read", json!({"id": "n-1"})).id("conflict-1");
    for_each_transport_ok(&t, &first).await;
    answers.push(t.each(ErrorCode::InvocationConflict, call("note.read", json!({"id": "n-2"})).id("conflict-1")).await);

    // One quote an hour for everyone: the first call takes it, the rest wait the same time,
    // since the clock stands still.
    let quote = call("quote.ping", json!({}));
    assert!(toolset_call(f, &quote).await.contains("\"done\":true"));
    answers.push(t.each(ErrorCode::RateLimited, quote).await);

    answers.push(stale_each(&t).await);

    answers.push(t.in_flight(ErrorCode::Timeout, |f| f.clock.advance(Duration::from_secs(2))).await);
    answers.push(
        t.in_flight(ErrorCode::ComponentUnmounted, |f| {
            drop(f.slow.lock().unwrap_or_else(PoisonError::into_inner).take());
            // A fresh instance for the next transport's call; the running one stays unmounted.
            f.remount_slow();
        })
        .await,
    );
    answers.push(t.abandoned("slow.wait", ErrorCode::Cancelled).await);
    // The same for a write: it may have committed, so every transport records an unknown outcome
    // (retry `no`: verify the state or ask the user), never `CANCELLED`.
    let unknown = t.abandoned("slow.write", ErrorCode::ExecutionFailed).await;
    let parsed: ErrorPayload = serde_json::from_str(&unknown.payload).unwrap();
    assert_eq!(parsed.detail("reason"), Some(&json!("outcome-unknown")), "{}", unknown.payload);
    answers.push(unknown);

    let codes: std::collections::BTreeSet<ErrorCode> = answers.iter().map(|a| a.code).collect();
    assert_eq!(codes.len(), ErrorCode::ALL.len(), "one call per code, every code: {codes:?}");
    // The calls whose HTTP message asks for what a model cannot send (a fresh invocationId, a
    // wait, the target) reach a model worded otherwise; the others read the same everywhere.
    let reworded: Vec<ErrorCode> = answers.iter().filter(|a| a.reworded).map(|a| a.code).collect();
    use ErrorCode as C;
    let expected =
        [C::InvocationConflict, C::RateLimited, C::StaleCapability, C::Timeout, C::ComponentUnmounted, C::Cancelled];
    assert_eq!(reworded, expected);
}

/// The first request of the conflict pair succeeds on every transport.
async fn for_each_transport_ok(t: &Transports, c: &Call) {
    let toolset = toolset(&t.f, c.who, false);
    let turn = toolset.handle(Provider::OpenAiChat, &model_turn(c)).await.unwrap();
    assert!(turn.outcomes[0].result.is_ok(), "{:?}", turn.outcomes[0].result);
    let result = t.mcp.client(c.who).peer().call_tool(mcp_params(c)).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let response = http_send(&t.http, c).await;
    assert_eq!(response.status, 200, "{response:?}");
}

/// `STALE_CAPABILITY`: a destructive call planned against the surface before the vault was
/// remounted. The toolset lists its tools before the change (its requests carry that listing's
/// tokens); MCP and HTTP present the same tokens explicitly.
async fn stale_each(t: &Transports) -> Answers {
    let f = &t.f;
    let toolset = toolset(f, Who::Alice, false);
    toolset.tools(Provider::OpenAiChat).await;
    let listed = toolset.listed().expect("listed");
    drop(f.vault.lock().unwrap_or_else(PoisonError::into_inner).take());
    *f.vault.lock().unwrap_or_else(PoisonError::into_inner) = Some(f.registry.mount("vault", "main").unwrap());
    assert!(f.registry.version() > listed.version);
    let c = call("vault.seal", json!({})).planned_at(&listed.surface_id, listed.version);
    let toolset = via_toolset(&toolset, &c).await;
    let mcp = mcp_call(&t.mcp, &c).await;
    let http = http_call(&t.http, &c).await;
    same(ErrorCode::StaleCapability, toolset, mcp, http)
}

/// The reserved target argument on every transport: each listing offers it for a capability two
/// instances can handle (an enum of their ids), and a call that sets it runs on that instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_argument_is_listed_and_lifted_on_every_transport() {
    use agent_surface_registry::TARGET_ARGUMENT;
    let t = Transports::new().await;
    let expected = json!(["left", "right"]);

    let tools = toolset(&t.f, Who::Alice, false).tools(Provider::OpenAiChat).await;
    let tool = tools.as_array().unwrap().iter().find(|d| d["function"]["name"] == "cart-view").expect("listed");
    assert_eq!(tool["function"]["parameters"]["properties"][TARGET_ARGUMENT]["enum"], expected, "{tool}");

    let listed = t.mcp.alice.peer().list_all_tools().await.expect("tools/list");
    let tool = listed.iter().find(|tool| tool.name == "cart-view").expect("listed");
    assert_eq!(tool.input_schema["properties"][TARGET_ARGUMENT]["enum"], expected);

    let listing = http::request(&t.http, "GET", "/api/capabilities", &[("Authorization", "Bearer t-alice")], b"").await;
    let snapshot = listing.json();
    let cart = snapshot["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "cart.view").unwrap();
    assert_eq!(cart["inputSchema"]["properties"][TARGET_ARGUMENT]["enum"], expected, "{cart}");

    for_each_transport_ok(&t, &call("cart.view", json!({TARGET_ARGUMENT: "right"}))).await;
}
