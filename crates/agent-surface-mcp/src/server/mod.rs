//! [`McpServer`]: the `rmcp` server handler over a [`Registry`], one per MCP session.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use agent_surface_core::InvokeResult;
use agent_surface_policy::{Consumer, Identity};
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest, Registry, id};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{McpConfig, UnknownTool};
use crate::fault::ProtocolFault;
use crate::tasks::Tasks;
use crate::{codec, meta, tools};

mod legacy;
mod modern;
mod progress;

/// The methods the adapter answers itself (beside `tasks/*` and `subscriptions/listen`): a request
/// of one of them whose params do not fit is `-32602`, not an unknown method.
pub(crate) const SERVED_METHODS: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];

/// What the session last listed: the consumer it listed for and a hash of the tools, so that a
/// surface change is announced only when this consumer's tool list really changed.
#[derive(Default)]
struct Listed {
    consumer: Option<Consumer>,
    hash: u64,
}

struct Session {
    registry: Registry,
    config: Arc<McpConfig>,
    /// The session's consumer key: fresh per session, never shared; made when first asked for
    /// (a server whose callers are all signed in never needs it: over HTTP, `rmcp` builds one
    /// server per modern request, and each key costs a call to the system's random source).
    key: std::sync::OnceLock<Arc<str>>,
    /// The consumer of calls that have no authenticator (stdio).
    /// The configured identity's consumer ([`McpConfig::identity`]); `None`: anonymous, under
    /// [`Session::key`].
    default_consumer: Option<Consumer>,
    listed: Arc<Mutex<Listed>>,
    /// Cancelled when the session ends (the handler is dropped); stops the list watcher.
    closed: CancellationToken,
    /// The JSON-RPC ids of the `tools/call` requests in progress: a second request under an id
    /// still in progress is refused rather than run (its answer could not be told apart). The
    /// adapter's transports refuse such a request before `rmcp` routes it (`stdio.rs`,
    /// `inflight.rs`), which this guard, running after the routing, cannot do; it stays for
    /// handlers served over other transports.
    calls_in_flight: Arc<Mutex<std::collections::HashSet<rmcp::model::RequestId>>>,
    /// Set by the session's `initialize`; a second one is refused.
    initialized: std::sync::atomic::AtomicBool,
    /// Set when the list watcher starts (the first `notifications/initialized`): `rmcp` hands
    /// every repeat of the notification to the handler, and each would start another watcher,
    /// held until the session ends — a client repeating it could grow the server without bound.
    watching: std::sync::atomic::AtomicBool,
}

/// A `tools/call` id held in [`Session::calls_in_flight`] until the call is answered.
struct InFlight {
    ids: Arc<Mutex<std::collections::HashSet<rmcp::model::RequestId>>>,
    id: rmcp::model::RequestId,
}

impl InFlight {
    /// Holds `id`, unless a call under it is still in progress.
    fn hold(
        ids: &Arc<Mutex<std::collections::HashSet<rmcp::model::RequestId>>>,
        id: &rmcp::model::RequestId,
    ) -> Option<InFlight> {
        let mut held = ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.insert(id.clone()).then(|| InFlight { ids: ids.clone(), id: id.clone() })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.id);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

/// What serving a call came to: a result (with the questions it stopped for, if any), or a
/// question for the person (modern clients).
enum Answered {
    Result(Invocation),
    Ask(rmcp::model::InputRequiredResult),
    Task(rmcp::model::CreateTaskResult),
}

/// An MCP server over a [`Registry`]: implements `rmcp`'s [`ServerHandler`] by hand (the tool
/// list is dynamic). Create one per connection or legacy MCP session ([`McpServer::new`]; over
/// HTTP, `rmcp` also creates one per modern request). Idempotency records, confirmations and rate
/// limits are keyed on the caller's principal when it is authenticated (the same on every
/// request, connection and replica), otherwise on this server's own key (see
/// [`McpServer::consumer_key`]).
///
/// Both protocol eras are served, decided per request as `rmcp` does: a legacy request
/// (2025-11-25 and earlier: `initialize`, sessions) and a modern one (2026-07-28: stateless,
/// version and client capabilities in every request's `_meta`).
///
/// - `tools/list`: the consumer's snapshot as tools ([`crate::tools`]), with the surface id and
///   version in the result's `_meta`.
/// - `tools/call`: [`Registry::invoke`] with the invocation members from `_meta`
///   ([`crate::meta`]), the request's cancellation, and the result encoded by [`crate::codec`].
///   `CONFIRMATION_REQUIRED` may be settled through elicitation ([`crate::confirm`]).
/// - `notifications/tools/list_changed` when a surface change alters the tool list: to a legacy
///   session unsolicited, to a modern client on its `subscriptions/listen` stream.
/// - `notifications/progress` for the handler's progress reports, when the request carried a
///   progress token.
#[derive(Clone)]
pub struct McpServer {
    session: Arc<Session>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("consumer_key", &self.consumer_key()).finish_non_exhaustive()
    }
}

/// A fresh consumer key: `mcp-` and 32 hex digits, 128 bits nobody can guess.
fn new_session_key() -> String {
    agent_surface_core::id::random_id("mcp-")
}

fn hash_tools(tools: &[Tool]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(tools).unwrap_or_default().hash(&mut h);
    h.finish()
}

impl Session {
    /// The session's consumer key, made on first use.
    fn key(&self) -> &Arc<str> {
        self.key.get_or_init(|| Arc::from(new_session_key()))
    }
}

impl McpServer {
    /// A server for one MCP session over `registry`.
    pub fn new(registry: Registry, config: impl Into<Arc<McpConfig>>) -> McpServer {
        let config = config.into();
        let default_consumer = config.identity.clone().map(Consumer::signed_in);
        McpServer {
            session: Arc::new(Session {
                registry,
                config,
                key: std::sync::OnceLock::new(),
                default_consumer,
                listed: Arc::default(),
                closed: CancellationToken::new(),
                calls_in_flight: Arc::default(),
                initialized: std::sync::atomic::AtomicBool::new(false),
                watching: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// This server's own consumer key, used for anonymous callers: a legacy session's or a stdio
    /// connection's key, or (over HTTP, where `rmcp` builds a server per modern request) one
    /// modern request's. Authenticated callers are keyed on their principal instead
    /// ([`principal_key`]).
    pub fn consumer_key(&self) -> &str {
        self.session.key()
    }

    /// The registry served.
    pub fn registry(&self) -> &Registry {
        &self.session.registry
    }

    /// The consumer of one request. With an authenticator configured, the identity it finds in
    /// the HTTP request, keyed on its principal, or an anonymous consumer under this server's key
    /// when it finds none — never the configured identity; without one, the configured identity
    /// (keyed on its principal) or, with none, an anonymous consumer under this server's key.
    async fn consumer(&self, context: &RequestContext<RoleServer>) -> Consumer {
        #[cfg(feature = "http")]
        if let Some(auth) = &self.session.config.authenticator {
            let parts = context.extensions.get::<http::request::Parts>();
            let identity = match parts {
                // Checked already by the transport (`http::authenticated`).
                Some(parts) => match parts.extensions.get::<Authenticated>() {
                    Some(found) => found.0.clone(),
                    None => auth.authenticate(&parts.headers).await,
                },
                None => None,
            };
            return match identity {
                Some(identity) => Consumer::signed_in(identity),
                None => Consumer::anonymous(self.session.key().clone()),
            };
        }
        let _ = context;
        match &self.session.default_consumer {
            Some(consumer) => consumer.clone(),
            None => Consumer::anonymous(self.session.key().clone()),
        }
    }

    /// The task runtime, the caller and the clock reading for a `tasks/*` request (`rmcp` answers
    /// those methods with -32601 itself when the extension is not advertised; this is the same
    /// answer should one arrive anyway).
    async fn task_caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(&Tasks, Consumer, agent_surface_core::Timestamp), ErrorData> {
        let tasks = self.session.config.tasks.as_ref().ok_or_else(|| ProtocolFault::TasksNotOffered.error())?;
        Ok((tasks, self.consumer(context).await, self.session.registry.config().clock.now()))
    }
}

/// What the HTTP transport's authentication found for one request (`http::authenticated`),
/// handed to the server in the request's extensions so that the headers are checked once.
#[cfg(feature = "http")]
#[derive(Clone, Debug)]
pub(crate) struct Authenticated(pub(crate) Option<agent_surface_policy::Identity>);

/// The adapter's own answer to a declined approval: `CONFIRMATION_INVALID` for `reason`, saying
/// `notProcessed` as the registry's refusals at the confirmation phase do (the call stopped before
/// its handler, so nothing it asked for was done).
fn declined(reason: agent_surface_core::details::ConfirmationInvalidReason) -> agent_surface_core::ErrorPayload {
    let mut payload = agent_surface_core::AgentSurfaceError::confirmation_invalid(reason).into_payload();
    payload.set_not_processed(true);
    payload
}

/// The adapter's own answer to a call cancelled while it waited for the person's answer to an
/// elicitation: `CANCELLED`, saying `notProcessed` — the call stopped at the confirmation phase,
/// before its handler, so nothing it asked for was done. (`rmcp` drops an answer to a request its
/// client cancelled; this one still reaches the operator channel and the metrics.)
fn cancelled_while_asking(invocation_id: Option<String>) -> agent_surface_core::InvokeResult {
    let mut payload = agent_surface_core::AgentSurfaceError::cancelled().into_payload();
    payload.set_not_processed(true);
    agent_surface_core::InvokeResult::error(payload, invocation_id)
}

/// The consumer key of an authenticated principal: [`Identity::principal_key`], `principal:` and
/// the JSON array of its issuer (when the identity carries an `iss` claim) and subject — the same
/// on every request, connection, transport and replica, and unambiguous whatever the strings hold.
///
/// ```
/// use agent_surface_mcp::principal_key;
/// use agent_surface_policy::Identity;
/// assert_eq!(principal_key(&Identity::new("alice")), r#"principal:["alice"]"#);
/// let issued = Identity::new("alice").with_claim("iss", "https://id.example");
/// assert_eq!(principal_key(&issued), r#"principal:["https://id.example","alice"]"#);
/// ```
pub fn principal_key(identity: &Identity) -> String {
    identity.principal_key()
}

/// Over streamable HTTP, the request's `Idempotency-Key` header is its invocation id, as on the
/// HTTP binding (the registry's one rule, `idempotency_key_header`), so that a client that sets a
/// header but no `_meta` gets exactly-once too. With `_meta` `agent-surface/invocationId` as well,
/// the two must be equal. An invalid header, or two ids that differ, is `-32602`.
#[cfg(feature = "http")]
fn idempotency_header(context: &RequestContext<RoleServer>, invoke: &mut InvokeRequest) -> Result<(), ErrorData> {
    let Some(parts) = context.extensions.get::<http::request::Parts>() else { return Ok(()) };
    // A name made once: looked up by a `&str`, the name is parsed on every call.
    const IDEMPOTENCY_KEY: http::HeaderName = http::HeaderName::from_static("idempotency-key");
    let fields = parts.headers.get_all(IDEMPOTENCY_KEY).iter().map(|v| v.as_bytes());
    let key = agent_surface_registry::idempotency_key_header(fields)
        .map_err(|e| ProtocolFault::InvalidIdempotencyKey(e.to_string()).error())?;
    match (key, &invoke.invocation_id) {
        (None, _) => Ok(()),
        (Some(key), Some(id)) if key != *id => Err(ProtocolFault::InvocationIdMismatch.error()),
        (Some(key), _) => {
            invoke.invocation_id = Some(key);
            Ok(())
        }
    }
}

/// Whether the request is in the modern era (2026-07-28 or later: no `initialize`, no
/// server-to-client requests, answers may be input-required).
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// A modern request over HTTP from an anonymous caller has a consumer key of its own (no session
/// keeps one across requests: `McpServer::consumer_key`), so a two-phase `CONFIRMATION_REQUIRED`
/// relayed to it could never be honoured: its repeat, under another key, meets neither the
/// approval nor the evidence (`mismatch`), and each repeat asks anew. Such an answer becomes
/// `NOT_AUTHENTICATED` (`notProcessed`: nothing ran), which is what the call needs: a caller the
/// server knows again (or an approval asked in person, whose round continues under the key
/// sealed in its state). Any other answer is relayed as it is.
fn unrepeatable(invocation: Invocation, consumer: &Consumer, context: &RequestContext<RoleServer>) -> Invocation {
    #[cfg(feature = "http")]
    if consumer.identity().is_none()
        && context.extensions.get::<http::request::Parts>().is_some()
        && invocation.result.code() == Some(agent_surface_core::ErrorCode::ConfirmationRequired)
    {
        tracing::info!(
            target: "agent_surface::mcp",
            correlation_id = %invocation.correlation_id,
            "an anonymous modern HTTP caller cannot repeat a call for its approval; answered NOT_AUTHENTICATED"
        );
        let mut payload = agent_surface_core::AgentSurfaceError::not_authenticated().into_payload();
        payload.set_not_processed(true);
        let id = invocation.result.invocation_id().map(str::to_string);
        return Invocation::answered(InvokeResult::error(payload, id), invocation.correlation_id);
    }
    let _ = (consumer, context);
    invocation
}

/// Sends `notifications/tools/list_changed` whenever a surface change alters the tool list this
/// session last listed, until the session ends.
async fn watch_surface(
    registry: Registry,
    listed: Arc<Mutex<Listed>>,
    peer: Peer<RoleServer>,
    closed: CancellationToken,
) {
    let mut versions = registry.subscribe();
    versions.mark_unchanged();
    loop {
        tokio::select! {
            _ = closed.cancelled() => return,
            changed = versions.changed() => if changed.is_err() { return },
        }
        if peer.is_transport_closed() {
            return;
        }
        let consumer = listed.lock().unwrap_or_else(PoisonError::into_inner).consumer.clone();
        let Some(consumer) = consumer else { continue };
        let hash = hash_tools(&tools::tools(&registry.snapshot(&consumer).await));
        let changed = {
            let mut l = listed.lock().unwrap_or_else(PoisonError::into_inner);
            let changed = l.hash != hash;
            l.hash = hash;
            changed
        };
        if changed && peer.notify_tool_list_changed().await.is_err() {
            return;
        }
    }
}

/// The request handlers behind the boxed `ServerHandler` methods.
impl McpServer {
    /// `tools/call`: the call prepared from the request (in the modern era, its round opened
    /// first), then made by the era's flow ([`McpServer::modern_call`] or
    /// [`McpServer::first_call`]) with progress relayed, and its outcome relayed.
    async fn serve_call(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // One call per JSON-RPC id at a time: a duplicate of an id still in progress is a
        // protocol fault, not a second execution.
        let Some(_in_flight) = InFlight::hold(&self.session.calls_in_flight, &context.id) else {
            tracing::debug!(target: "agent_surface::mcp", id = ?context.id, "tools/call with the id of a call in progress refused");
            return Err(ProtocolFault::IdInProgress.error());
        };
        let mut consumer = self.consumer(&context).await;
        // A name that is not a tool name can never resolve; it gets the same answer as any
        // unknown tool.
        let capability = id::capability_from_tool_name(&request.name).unwrap_or_default();
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        let mut round = if is_modern(&context) {
            Some(self.open_round(&request, &arguments, &mut consumer, &context)?)
        } else {
            None
        };
        let mut invoke = InvokeRequest::new(capability, arguments);
        meta::apply(&context.meta, &mut invoke).map_err(|e| ProtocolFault::InvalidMeta(e.to_string()).error())?;
        #[cfg(feature = "http")]
        idempotency_header(&context, &mut invoke)?;
        let mut options =
            InvokeOptions::new(consumer.clone()).with_cancellation(context.ct.clone()).with_transport("mcp");
        if let Some(parent) = meta::trace_parent(&context.meta) {
            options = options.with_trace_parent(parent);
        }
        let outcome = match &mut round {
            Some(round) => self.modern_call(round, invoke, options, &context).await,
            None => progress::relayed(&context, options, |options| self.first_call(invoke, options, &context)).await,
        };
        let invocation = match outcome {
            Answered::Result(invocation) => invocation,
            Answered::Ask(question) => return Ok(question.into()),
            Answered::Task(task) => return Ok(CallToolResponse::Task(task)),
        };
        if let Some(round) = &round
            && let Some(ask) = self.ask_modern(&invocation, round, &request.name, &consumer, &context).await?
        {
            return Ok(ask.into());
        }
        let invocation = if round.is_some() { unrepeatable(invocation, &consumer, &context) } else { invocation };
        self.relay(invocation, &request.name)
    }

    /// The result of a call as the client gets it: a tool result, or in the spec-strict mode the
    /// JSON-RPC error the matrix gives its code.
    fn relay(&self, invocation: Invocation, tool: &str) -> Result<CallToolResponse, ErrorData> {
        if self.session.config.unknown_tool == UnknownTool::ProtocolError
            && let Some(error) = codec::strict_protocol_error(&invocation.result, tool)
        {
            return Err(error);
        }
        if let InvokeResult::Error { .. } = &invocation.result {
            tracing::debug!(
                target: "agent_surface::mcp",
                tool = %tool,
                code = ?invocation.result.code(),
                correlation_id = %invocation.correlation_id,
                "tool error"
            );
        }
        Ok(codec::encode_invocation_with(invocation, self.session.config.tool_failure).into())
    }

    /// Marks the session initialized; a second `initialize` is refused: answered, it would make
    /// `rmcp` record the version it names — negotiated or not — as the session's, and the
    /// session would change protocol era mid-way (found by fuzzing).
    pub(crate) fn claim_initialize(&self) -> Result<(), ErrorData> {
        if self.session.initialized.swap(true, Ordering::AcqRel) {
            tracing::debug!(target: "agent_surface::mcp", "a second initialize refused");
            return Err(ProtocolFault::AlreadyInitialized.error());
        }
        Ok(())
    }

    /// Sends `notifications/tools/list_changed` on `sink` whenever a surface change alters the
    /// tool list of the caller of `context`, until the request is cancelled or the sink closed.
    pub(crate) async fn watch_tool_list(&self, context: &RequestContext<RoleServer>, sink: &SubscriptionSink) {
        let consumer = self.consumer(context).await;
        let registry = &self.session.registry;
        let mut versions = registry.subscribe();
        versions.mark_unchanged();
        let mut listed = hash_tools(&tools::tools(&registry.snapshot(&consumer).await));
        loop {
            tokio::select! {
                () = context.ct.cancelled() => return,
                changed = versions.changed() => if changed.is_err() { return },
            }
            let hash = hash_tools(&tools::tools(&registry.snapshot(&consumer).await));
            if hash != listed {
                listed = hash;
                if sink.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// `tools/list`.
    async fn serve_list(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let consumer = self.consumer(&context).await;
        let snapshot = self.session.registry.snapshot(&consumer).await;
        let tools = tools::tools(&snapshot);
        {
            let mut l = self.session.listed.lock().unwrap_or_else(PoisonError::into_inner);
            l.hash = hash_tools(&tools);
            l.consumer = Some(consumer);
        }
        let mut result = ListToolsResult::with_all_items(tools);
        if is_modern(&context) {
            // What a client may cache: the list is per consumer (authority may hide tools), and
            // holds until the surface changes (which `subscriptions/listen` announces).
            let config = &self.session.config;
            result = result.with_ttl_ms(config.list_ttl.as_millis().try_into().unwrap_or(u64::MAX));
            result = result.with_cache_scope(CacheScope::Private);
        }
        let mut m = MetaObject::new();
        m.insert(meta::SURFACE_ID.to_string(), Value::String(snapshot.surface_id));
        m.insert(meta::SURFACE_VERSION.to_string(), Value::from(snapshot.version));
        result.meta = Some(m);
        Ok(result)
    }
}

impl ServerHandler for McpServer {
    /// A session is initialized once. A second `initialize` is refused: answered, it would make
    /// `rmcp` record the version it names — negotiated or not — as the session's, and the
    /// session would change protocol era mid-way (found by fuzzing).
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        self.claim_initialize()?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    fn get_info(&self) -> ServerConfig {
        let config = &self.session.config;
        let capabilities = ServerCapabilities::builder().enable_tools().enable_tool_list_changed();
        let capabilities = if config.tasks.is_some() { capabilities.enable_tasks() } else { capabilities };
        let info = ServerConfig::new(capabilities.build())
            .with_server_info(Implementation::new(config.name.clone(), config.version.clone()));
        match &config.instructions {
            Some(i) => info.with_instructions(i.clone()),
            None => info,
        }
    }

    /// Boxed for the reason [`ServerHandler::call_tool`] is.
    fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, ErrorData>> + Send + '_ {
        Box::pin(self.serve_list(request, context))
    }

    /// Boxed: `rmcp` spawns one task per request holding its handler's future inline, so a large
    /// future here would be moved (copied) on every call; the box keeps the task small.
    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + Send + '_ {
        Box::pin(self.serve_call(request, context))
    }

    /// `rmcp` parses a request of a known method whose params do not fit as a custom request;
    /// for the methods this server serves that is `-32602` (invalid params), not `-32601`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method;
        // `initialize` does not exist in the modern era: it is an unknown method there.
        let served = SERVED_METHODS.contains(&method.as_str()) && !(method == "initialize" && is_modern(&context));
        if served {
            Err(ProtocolFault::InvalidParams(method).error())
        } else {
            Err(ProtocolFault::UnknownMethod(method).error())
        }
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, ErrorData>> + Send + '_ {
        // Boxed for the reason `call_tool` is.
        Box::pin(async move {
            let (tasks, consumer, now) = self.task_caller(&context).await?;
            crate::tasks::get(tasks, &request.task_id, &consumer, now, self.session.config.tool_failure).await
        })
    }

    fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        // Boxed for the reason `call_tool` is.
        Box::pin(async move {
            let (tasks, consumer, now) = self.task_caller(&context).await?;
            crate::tasks::update(tasks, &request.task_id, &consumer, now).await
        })
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        // Boxed for the reason `call_tool` is.
        Box::pin(async move {
            let (tasks, consumer, now) = self.task_caller(&context).await?;
            crate::tasks::cancel(tasks, &request.task_id, &consumer, now).await
        })
    }

    /// Modern clients learn of tool-list changes on a `subscriptions/listen` stream.
    fn accepted_subscription_filter(&self, _requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    /// Sends `notifications/tools/list_changed` on the subscription whenever a surface change
    /// alters the caller's tool list, until the client closes it.
    fn listen(&self, subscription: SubscriptionContext) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        // Boxed for the reason `call_tool` is.
        Box::pin(async move {
            if subscription.accepted().tools_list_changed != Some(true) {
                subscription.cancelled().await;
                return Ok(());
            }
            self.watch_tool_list(subscription.request_context(), subscription.sink()).await;
            Ok(())
        })
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let s = &self.session;
        // One watcher a session, however often the client says it is initialized.
        if s.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(watch_surface(s.registry.clone(), s.listed.clone(), context.peer, s.closed.clone()));
    }
}

#[cfg(test)]
mod tests {
    use agent_surface_core::ErrorCode;

    /// A call cancelled while the adapter asked the person stopped before its handler: the answer
    /// says so, as the registry's own stops before the handler do.
    #[test]
    fn a_call_cancelled_while_asking_says_nothing_ran() {
        let result = super::cancelled_while_asking(Some("inv-1".into()));
        let payload = result.error_payload().expect("an error");
        assert_eq!(payload.code(), ErrorCode::Cancelled);
        assert!(payload.not_processed());
        assert_eq!(result.invocation_id(), Some("inv-1"));
    }

    /// A server's own consumer key, made when first asked for: `mcp-` and 32 hex digits, the same
    /// every time it is asked, and another for every server; a server whose configured identity
    /// serves every call never makes one.
    #[test]
    fn each_server_has_its_own_key_made_on_first_use() {
        use agent_surface_registry::{Registry, RegistryConfig};
        let registry = Registry::new(RegistryConfig::default());
        let signed_in = super::McpServer::new(
            registry.clone(),
            super::McpConfig { identity: Some(agent_surface_policy::Identity::new("alice")), ..Default::default() },
        );
        assert!(signed_in.session.key.get().is_none(), "not made before it is needed");
        let (a, b) = (
            super::McpServer::new(registry.clone(), super::McpConfig::default()),
            super::McpServer::new(registry, super::McpConfig::default()),
        );
        let key = a.consumer_key().to_owned();
        assert!(key.len() == 36 && key.starts_with("mcp-") && key[4..].bytes().all(|c| c.is_ascii_hexdigit()), "{key}");
        assert_eq!(a.consumer_key(), key, "stable");
        assert_ne!(b.consumer_key(), key, "another server, another key");
    }
}
