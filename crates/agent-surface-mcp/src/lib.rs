//! Serves an agent-surface [`Registry`](agent_surface_registry::Registry) as an MCP server, on the official Rust SDK (`rmcp`).
//!
//! # Overview
//!
//! [`McpServer`] implements `rmcp`'s `ServerHandler` by hand, because the tool list is dynamic.
//! Both protocol eras are served, decided per request: legacy clients (2025-11-25 and earlier)
//! open a session with `initialize`; modern ones (2026-07-28) send self-contained, stateless
//! requests.
//!
//! - **`tools/list`** is the consumer's snapshot: one tool per visible capability, named
//!   `type-capability`, with its input schema, output schema, description and annotations derived
//!   from the declared effect and idempotence ([`tools`]). Hidden capabilities are absent. Modern
//!   lists carry cache hints (`ttlMs`, `cacheScope: private`). When a surface change alters the
//!   list, a legacy session gets `notifications/tools/list_changed`, a modern client on its
//!   `subscriptions/listen` stream.
//! - **`tools/call`** runs [`Registry::invoke`](agent_surface_registry::Registry::invoke). The invocation id, surface id and version,
//!   confirmation id and target come from the request's `_meta` ([`meta`]); the MCP request id and
//!   progress token never stand in for them. Cancellation: `notifications/cancelled`, or for a
//!   modern HTTP request, the client hanging up. Handler progress becomes
//!   `notifications/progress` when the request has a progress token.
//! - **Capability errors are tool results** with `isError: true` whose only text block is the
//!   payload `{code, message, retry, details?}` as JSON, losslessly ([`codec`]); never
//!   `structuredContent` on errors, so clients that validate it against the output schema still
//!   receive them. JSON-RPC errors are for protocol faults only: malformed frames, unknown
//!   methods, oversized messages, `_meta` of the wrong type, a `requestState` that does not open,
//!   a question the client has not declared the capability for (`-32021`). `CAPABILITY_NOT_FOUND`
//!   is in-band by default; [`UnknownTool::ProtocolError`] gives the MCP specification's `-32602`.
//! - **`CONFIRMATION_REQUIRED`** is settled by asking the person when the client can: a legacy
//!   client through `elicitation/create` ([`confirm`]), a modern one through an input-required
//!   round trip ([`mrtr`]), which also carries a capability's own questions. Otherwise it goes to
//!   the model (two-phase).
//! - **Keys**: authenticated callers are keyed on their principal ([`principal_key`]), so
//!   idempotency records, confirmations and quotas hold across connections, sessions and
//!   replicas; anonymous callers on the server's own key.
//! - **Transports**: stdio ([`serve_stdio`], feature `stdio`) with a framing that answers every
//!   unusable frame with a JSON-RPC error ([`stdio`]), and streamable HTTP on axum with
//!   DNS-rebinding protection, a pluggable [`http::Authenticator`] and a graceful drain on
//!   shutdown ([`http::serve_http`]; feature `http`).
//!
//! - **Composition**: an application's own resources, prompts, completions (anything an `rmcp`
//!   `ServerHandler` answers) are served beside the tools from the same server:
//!   [`McpServer::with_fallback`] ([`compose`]), [`serve_stdio_with`],
//!   `http::router_with_fallback`.
//!
//! `spec/adapters.md` (section "MCP") is the normative description; `docs/mcp.md` the user guide.
//!
//! # Examples
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, Effect};
//! use agent_surface_mcp::{McpConfig, McpServer, codec};
//! use agent_surface_registry::{Ctx, Registry, RegistryConfig};
//! use rmcp::{ServiceExt, model::CallToolRequestParams};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Add { a: i64, b: i64 }
//! #[derive(Serialize, JsonSchema)]
//! struct Sum { sum: i64 }
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let registry = Registry::new(RegistryConfig::default());
//! registry.define("calc", |t| {
//!     t.capability("add", "Add two integers.")
//!         .effect(Effect::Read)
//!         .handler(|_ctx: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(Sum { sum: i.a + i.b }) })
//! })?;
//! let _mounted = registry.mount("calc", "default")?;
//!
//! // Serve it over an in-memory pipe (in production: `serve_stdio` or `http::serve_http`).
//! let (client_io, server_io) = tokio::io::duplex(64 * 1024);
//! let (read, write) = tokio::io::split(server_io);
//! let server = McpServer::new(registry, McpConfig::default());
//! tokio::spawn(agent_surface_mcp::serve_io(server, read, write, 1 << 20));
//!
//! // Any MCP client; here rmcp's own.
//! let client = ().serve(client_io).await.unwrap();
//! let tools = client.list_all_tools().await.unwrap();
//! assert_eq!(tools[0].name, "calc-add");
//!
//! let args = serde_json::json!({"a": 2, "b": 3}).as_object().cloned();
//! let result = client.call_tool(CallToolRequestParams::new("calc-add").with_arguments(args.unwrap())).await.unwrap();
//! assert_eq!(codec::decode(&result).unwrap().output(), Some(&serde_json::json!({"sum": 5})));
//!
//! let result = client.call_tool(CallToolRequestParams::new("calc-mul")).await.unwrap();
//! assert_eq!(result.is_error, Some(true));
//! assert_eq!(codec::decode(&result).unwrap().code(), Some(agent_surface_core::ErrorCode::CapabilityNotFound));
//! client.cancel().await.unwrap();
//! # Ok::<_, agent_surface_core::DefinitionError>(())
//! # }).unwrap();
//! ```

pub mod codec;
pub mod compose;
mod config;
pub mod confirm;
mod fault;
mod frame;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
mod inflight;
pub mod meta;
pub mod mrtr;
mod server;
pub mod stdio;
pub mod tasks;
pub mod tools;

pub use compose::Composed;
pub use config::{McpConfig, UnknownTool};
/// The official Rust MCP SDK this adapter is built on, re-exported so that an application's own
/// `rmcp::ServerHandler` ([`compose`]) or `RequestStateCodec` ([`mrtr::ApprovalStates`]) is of the
/// version the adapter uses.
pub use rmcp;
pub use server::{McpServer, principal_key};

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a server stopped with an error (the MCP handshake failed, or the session's task died).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeError(String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServeError {}

/// Runs one MCP connection of `server` (an [`McpServer`], or a handler wrapping one) over a byte
/// stream pair (newline-delimited JSON-RPC, the [`stdio::LineTransport`]) until the peer closes
/// it; messages over `max_message_bytes` are refused. Legacy clients open a session with
/// `initialize`; modern ones send self-contained requests. `notifications/cancelled` reaches a
/// request's handler through its `RequestContext::ct`, and the request's id stays in use until
/// that handler is over ([`stdio`]).
pub async fn serve_io<S, R, W>(server: S, read: R, write: W, max_message_bytes: usize) -> Result<(), ServeError>
where
    S: rmcp::ServerHandler,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let mut transport = stdio::LineTransport::new(read, write, max_message_bytes);
    // Handlers are cancelled by the transport, which keeps a cancelled request's id until its
    // handler is over (`stdio`, "Cancellation keeps the id").
    let server = stdio::Cancellable::new(server, &mut transport);
    let running = server.serve(transport).await.map_err(|e| ServeError(format!("MCP handshake failed: {e}")))?;
    running.waiting().await.map(drop).map_err(|e| ServeError(format!("MCP session task failed: {e}")))
}

/// Serves `registry` to the MCP client on this process's standard input and output until the
/// client closes them. Logs must go to standard error.
///
/// ```no_run
/// # async fn run(registry: agent_surface_registry::Registry) -> Result<(), agent_surface_mcp::ServeError> {
/// agent_surface_mcp::serve_stdio(registry, agent_surface_mcp::McpConfig::default()).await
/// # }
/// ```
#[cfg(feature = "stdio")]
pub async fn serve_stdio(registry: agent_surface_registry::Registry, config: McpConfig) -> Result<(), ServeError> {
    let (read, write) = rmcp::transport::stdio_pipes();
    let max = config.max_message_bytes;
    serve_io(McpServer::new(registry, config), read, write, max).await
}

/// [`serve_stdio`] with `app`, the application's own handler, answering every method that is not
/// about tools or tasks (resources, prompts, completions, …) beside the registry's tools
/// ([`compose`]).
///
/// ```no_run
/// # struct MyResources;
/// # impl rmcp::ServerHandler for MyResources {}
/// # async fn run(registry: agent_surface_registry::Registry) -> Result<(), agent_surface_mcp::ServeError> {
/// agent_surface_mcp::serve_stdio_with(registry, agent_surface_mcp::McpConfig::default(), MyResources).await
/// # }
/// ```
#[cfg(feature = "stdio")]
pub async fn serve_stdio_with<H: rmcp::ServerHandler>(
    registry: agent_surface_registry::Registry,
    config: McpConfig,
    app: H,
) -> Result<(), ServeError> {
    let (read, write) = rmcp::transport::stdio_pipes();
    let max = config.max_message_bytes;
    serve_io(McpServer::new(registry, config).with_fallback(app), read, write, max).await
}
