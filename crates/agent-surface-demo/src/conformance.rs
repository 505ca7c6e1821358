//! `serve --http … --conformance`: the fixture tools the MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls by fixed names.
//!
//! The fixtures are ordinary capabilities of a `conformance` type, so they go through the whole
//! pipeline; a thin wrapper around [`McpServer`] lists them under the names the suite expects
//! (`test_simple_text`, which are not `type-capability` tool names) and maps those names back on
//! `tools/call`. Everything else is the adapter, unchanged. The scenarios whose features the
//! adapter does not offer (media content, logging, progress, sampling, resources, prompts,
//! completion, arbitrary elicitation forms) are listed with reasons in
//! `crates/agent-surface-mcp/tests/clients/conformance-expected-failures.yml`.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, DefinitionError, Effect};
use agent_surface_mcp::http::HttpConfig;
use agent_surface_mcp::{McpConfig, McpServer};
use agent_surface_registry::{Ctx, Mount, Registry};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// (name the suite calls, tool name of the capability behind it).
const ALIASES: [(&str, &str); 3] = [
    ("test_simple_text", "conformance-simple_text"),
    ("test_error_handling", "conformance-error_handling"),
    ("json_schema_2020_12_tool", "conformance-json_schema_2020_12_tool"),
];

/// Defines the `conformance` type and mounts its instance; keep the handle while serving.
pub(crate) fn define(registry: &Registry) -> Result<Mount, DefinitionError> {
    registry.define("conformance", |t| {
        t.capability("simple_text", "Returns a simple text response (conformance fixture).")
            .effect(Effect::Read)
            .idempotent()
            .raw_handler(json!({"type": "object", "properties": {}}), None, |_ctx: Ctx, _input: Value| async move {
                Ok::<_, AgentSurfaceError>(Value::String("This is a simple text response for testing.".to_string()))
            });
        t.capability("error_handling", "Always fails with a tool error (conformance fixture).")
            .effect(Effect::Read)
            .raw_handler(json!({"type": "object", "properties": {}}), None, |_ctx: Ctx, _input: Value| async move {
                Err::<Value, _>(AgentSurfaceError::handler_failed(
                    "This tool intentionally returns an error for testing. Do not retry it.",
                ))
            });
        t.capability("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features")
            .effect(Effect::Read)
            .raw_handler(
                json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "type": "object",
                            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                        }
                    },
                    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                    "additionalProperties": false
                }),
                None,
                |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"received": input})) },
            );
    })?;
    registry.mount("conformance", "fixtures")
}

/// The adapter, with the fixture tools under the suite's names.
pub(crate) struct ConformanceServer {
    inner: McpServer,
}

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = self.inner.list_tools(request, context).await?;
        for tool in &mut result.tools {
            if let Some((alias, _)) = ALIASES.iter().find(|(_, name)| *name == tool.name) {
                tool.name = (*alias).into();
            }
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some((_, name)) = ALIASES.iter().find(|(alias, _)| *alias == request.name) {
            request.name = (*name).into();
        }
        self.inner.call_tool(request, context).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.inner.on_initialized(context).await;
    }
}

/// The HTTP router serving the wrapped adapter.
pub(crate) fn router(
    registry: Registry,
    config: McpConfig,
    http: &HttpConfig,
    shutdown: CancellationToken,
) -> axum::Router {
    let config = Arc::new(config);
    agent_surface_mcp::http::router_with(
        move || ConformanceServer { inner: McpServer::new(registry.clone(), config.clone()) },
        http,
        shutdown,
    )
}
