//! [`McpServer`]: the `rmcp` server handler over a [`Registry`], one per MCP session.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_surface_core::details::{ConfirmationInvalidReason, ConfirmationRequiredDetails};
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult};
use agent_surface_policy::Consumer;
use agent_surface_registry::{InvokeOptions, InvokeRequest, Registry, id};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientResult, CustomRequest, CustomResult, ElicitRequest,
    ElicitRequestParams, ElicitationAction, ElicitationSchema, ErrorCode as RpcErrorCode, Implementation,
    ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, ServerRequest, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{McpConfig, UnknownTool};
use crate::confirm::ConfirmationAnswer;
use crate::{codec, meta, tools};

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
    /// The session's consumer key: fresh per session, never shared.
    key: Arc<str>,
    /// The consumer of calls that have no authenticator (stdio).
    default_consumer: Consumer,
    listed: Arc<Mutex<Listed>>,
    /// Cancelled when the session ends (the handler is dropped); stops the list watcher.
    closed: CancellationToken,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

/// An MCP server over a [`Registry`]: implements `rmcp`'s [`ServerHandler`] by hand (the tool
/// list is dynamic). Create one per MCP session ([`McpServer::new`]); each gets its own consumer
/// key, so idempotency records, confirmations and rate limits are per session.
///
/// - `tools/list`: the consumer's snapshot as tools ([`crate::tools`]), with the surface id and
///   version in the result's `_meta`.
/// - `tools/call`: [`Registry::invoke`] with the invocation members from `_meta`
///   ([`crate::meta`]), the request's cancellation, and the result encoded by [`crate::codec`].
///   `CONFIRMATION_REQUIRED` may be settled through elicitation ([`crate::confirm`]).
/// - `notifications/tools/list_changed` when a surface change alters this session's tool list.
#[derive(Clone)]
pub struct McpServer {
    session: Arc<Session>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("consumer_key", &self.session.key).finish_non_exhaustive()
    }
}

/// A fresh consumer key: `mcp-` and 16 hex digits.
fn new_session_key() -> String {
    use std::hash::BuildHasher;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("mcp-{:016x}", h.finish())
}

fn hash_tools(tools: &[Tool]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(tools).unwrap_or_default().hash(&mut h);
    h.finish()
}

impl McpServer {
    /// A server for one MCP session over `registry`.
    pub fn new(registry: Registry, config: impl Into<Arc<McpConfig>>) -> McpServer {
        let config = config.into();
        let key: Arc<str> = Arc::from(new_session_key());
        let default_consumer = match &config.identity {
            Some(identity) => Consumer::authenticated(key.clone(), identity.clone()),
            None => Consumer::anonymous(key.clone()),
        };
        McpServer {
            session: Arc::new(Session {
                registry,
                config,
                key,
                default_consumer,
                listed: Arc::default(),
                closed: CancellationToken::new(),
            }),
        }
    }

    /// This session's consumer key.
    pub fn consumer_key(&self) -> &str {
        &self.session.key
    }

    /// The registry served.
    pub fn registry(&self) -> &Registry {
        &self.session.registry
    }

    /// The consumer of one request. With an authenticator configured, the identity it finds in
    /// the HTTP request (consumer `{sessionKey}:{subject}`), or an anonymous consumer when it finds
    /// none — never the configured identity; without one, the session key with the configured
    /// identity (if any).
    async fn consumer(&self, context: &RequestContext<RoleServer>) -> Consumer {
        #[cfg(feature = "http")]
        if let Some(auth) = &self.session.config.authenticator {
            let parts = context.extensions.get::<http::request::Parts>();
            let identity = match parts {
                Some(parts) => auth.authenticate(&parts.headers).await,
                None => None,
            };
            return match identity {
                // Another subject in the same session never shares its records.
                Some(identity) => {
                    let key = format!("{}:{}", self.session.key, identity.subject);
                    Consumer::authenticated(key, identity)
                }
                None => Consumer::anonymous(self.session.key.clone()),
            };
        }
        let _ = context;
        self.session.default_consumer.clone()
    }

    /// Settles a `CONFIRMATION_REQUIRED` through elicitation when the session can; otherwise
    /// returns `result` unchanged (two-phase).
    async fn confirm_by_elicitation(
        &self,
        result: InvokeResult,
        request: InvokeRequest,
        options: InvokeOptions,
        context: &RequestContext<RoleServer>,
    ) -> InvokeResult {
        let Some(resolver) = &self.session.config.confirmations else { return result };
        let Some(details) = result.error_payload().and_then(|p| p.details_as::<ConfirmationRequiredDetails>()) else {
            return result;
        };
        let message = format!("The assistant asks for your approval: {} Approve this action?", details.summary);
        let elicit = elicit(&context.peer, message);
        let answer = tokio::select! {
            biased;
            _ = context.ct.cancelled() => {
                return InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), request.invocation_id);
            }
            r = tokio::time::timeout(self.session.config.elicitation_timeout, elicit) => r,
        };
        let consumer = &options.consumer;
        let answer = match answer {
            Ok(Ok(ElicitationAction::Accept)) => ConfirmationAnswer::Approved,
            Ok(Ok(_decline_or_cancel)) => ConfirmationAnswer::Denied,
            Ok(Err(e)) => {
                tracing::info!(target: "agent_surface::mcp", error = %e, "elicitation failed; relaying CONFIRMATION_REQUIRED");
                return result;
            }
            Err(_elapsed) => {
                tracing::info!(target: "agent_surface::mcp", "elicitation unanswered; relaying CONFIRMATION_REQUIRED");
                return result;
            }
        };
        let recorded = resolver.resolve(&details.confirmation_id, consumer, answer).await;
        match (answer, recorded) {
            (ConfirmationAnswer::Approved, Ok(())) => {
                let retry = InvokeRequest { confirmation_id: Some(details.confirmation_id), ..request };
                self.session.registry.invoke(retry, options).await
            }
            (ConfirmationAnswer::Approved, Err(e)) => {
                tracing::warn!(target: "agent_surface::mcp", error = %e, "approval not recorded; relaying CONFIRMATION_REQUIRED");
                result
            }
            (ConfirmationAnswer::Denied, recorded) => {
                if let Err(e) = recorded {
                    tracing::warn!(target: "agent_surface::mcp", error = %e, "denial not recorded; the confirmation will expire");
                }
                let denied = AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Denied);
                InvokeResult::error(denied.into_payload(), request.invocation_id)
            }
        }
    }
}

/// Whether the client declared form elicitation at `initialize` (an empty `elicitation` object
/// means form mode).
fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .and_then(|info| info.capabilities.elicitation.clone())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// Asks the person at the client to accept or decline, with no form fields.
async fn elicit(peer: &Peer<RoleServer>, message: String) -> Result<ElicitationAction, String> {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(r)) => Ok(r.action),
        Ok(_) => Err("unexpected response to elicitation/create".to_string()),
        Err(e) => Err(e.to_string()),
    }
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

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let config = &self.session.config;
        let info = ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new(config.name.clone(), config.version.clone()));
        match &config.instructions {
            Some(i) => info.with_instructions(i.clone()),
            None => info,
        }
    }

    async fn list_tools(
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
        let mut m = MetaObject::new();
        m.insert(meta::SURFACE_ID.to_string(), Value::String(snapshot.surface_id));
        m.insert(meta::SURFACE_VERSION.to_string(), Value::from(snapshot.version));
        result.meta = Some(m);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let consumer = self.consumer(&context).await;
        // A name that is not a tool name can never resolve; it gets the same answer as any
        // unknown tool.
        let capability = id::capability_from_tool_name(&request.name).unwrap_or_default();
        let input = Value::Object(request.arguments.unwrap_or_default());
        let mut invoke = InvokeRequest::new(capability, input);
        meta::apply(&context.meta, &mut invoke).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let options = InvokeOptions::new(consumer).with_cancellation(context.ct.clone());
        let wait_mode = self.session.config.confirmations.is_some() && can_elicit(&context.peer);
        let result = if wait_mode {
            let first = self.session.registry.invoke(invoke.clone(), options.clone()).await;
            if first.code() == Some(ErrorCode::ConfirmationRequired) {
                self.confirm_by_elicitation(first, invoke, options, &context).await
            } else {
                first
            }
        } else {
            self.session.registry.invoke(invoke, options).await
        };
        if self.session.config.unknown_tool == UnknownTool::ProtocolError
            && result.code() == Some(ErrorCode::CapabilityNotFound)
        {
            return Err(ErrorData::invalid_params(format!("Unknown tool: {}", request.name), None));
        }
        if let InvokeResult::Error { .. } = &result {
            tracing::debug!(target: "agent_surface::mcp", tool = %request.name, code = ?result.code(), "tool error");
        }
        Ok(codec::encode(result).into())
    }

    /// `rmcp` parses a request of a known method whose params do not fit as a custom request;
    /// for the methods this server serves that is `-32602` (invalid params), not `-32601`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        const SERVED: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];
        let method = request.method;
        if SERVED.contains(&method.as_str()) {
            Err(ErrorData::invalid_params(format!("Invalid params for method `{method}`"), None))
        } else {
            Err(ErrorData::new(RpcErrorCode::METHOD_NOT_FOUND, format!("Method not found: {method}"), None))
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let s = &self.session;
        tokio::spawn(watch_surface(s.registry.clone(), s.listed.clone(), context.peer, s.closed.clone()));
    }
}
