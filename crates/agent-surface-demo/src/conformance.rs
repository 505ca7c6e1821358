//! `serve --http … --conformance`: the fixture tools the MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls by fixed names.
//!
//! The fixtures are ordinary capabilities of a `conformance` type, so they go through the whole
//! pipeline; a thin wrapper around [`McpServer`] lists them under the names the suite expects
//! (`test_simple_text`, which are not `type-capability` tool names) and maps those names back on
//! `tools/call`. Everything else is the adapter, unchanged, composed with the suite's resource,
//! prompt and completion fixtures (`library::Library::conformance`, served through
//! `McpServer::with_fallback`). The scenarios whose features the demo does not offer (media
//! content, logging, sampling, legacy elicitation forms, resource templates and subscriptions,
//! more prompts) are listed with reasons in the expected-failure files of
//! `crates/agent-surface-mcp/tests/clients/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_surface_core::{AgentSurfaceError, DefinitionError, Effect};
use agent_surface_mcp::http::McpHttpConfig;
use agent_surface_mcp::{Composed, McpConfig, McpServer};
use agent_surface_registry::{Answers, Ctx, Mount, Question, Registry};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams, CompleteResult, CustomRequest,
    CustomResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
    SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::library::Library;

/// (name the suite calls, tool name of the capability behind it).
const ALIASES: [(&str, &str); 23] = [
    ("test_simple_text", "conformance-simple_text"),
    ("test_error_handling", "conformance-error_handling"),
    ("json_schema_2020_12_tool", "conformance-json_schema_2020_12_tool"),
    ("test_tool_with_progress", "conformance-tool_with_progress"),
    ("test_logging_tool", "conformance-logging_tool"),
    ("test_streaming_elicitation", "conformance-streaming_elicitation"),
    ("test_trigger_tool_change", "conformance-trigger_tool_change"),
    ("test_missing_capability", "conformance-missing_capability"),
    ("test_input_required_result_elicitation", "conformance-ir_elicitation"),
    ("test_input_required_result_sampling", "conformance-ir_sampling"),
    ("test_input_required_result_list_roots", "conformance-ir_list_roots"),
    ("test_input_required_result_request_state", "conformance-ir_request_state"),
    ("test_input_required_result_multiple_inputs", "conformance-ir_multiple_inputs"),
    ("test_input_required_result_multi_round", "conformance-ir_multi_round"),
    ("test_input_required_result_tampered_state", "conformance-ir_tampered_state"),
    ("test_input_required_result_capabilities", "conformance-ir_capabilities"),
    ("greet", "conformance-greet"),
    ("slow_compute", "conformance-slow_compute"),
    ("failing_job", "conformance-failing_job"),
    ("protocol_error_job", "conformance-protocol_error_job"),
    ("confirm_delete", "conformance-confirm_delete"),
    ("multi_input", "conformance-multi_input"),
    ("test_tool_with_task", "conformance-tool_with_task"),
];

/// The empty input schema of every fixture.
fn no_input() -> Value {
    json!({"type": "object", "properties": {}})
}

/// A form asking for one string (or boolean) field.
fn form(key: &str, message: &str, field: &str, kind: &str) -> Question {
    let schema = json!({"type": "object", "properties": {field: {"type": kind}}, "required": [field]});
    Question::form(key, message, schema)
}

/// The questions of `conformance.{name}` still open, given the answers so far.
fn open_questions(name: &str, answers: &Answers) -> Vec<Question> {
    let name_form = || form("user_name", "What is your name?", "name", "string");
    let confirm = || form("confirm", "Please confirm", "ok", "boolean");
    let mut open = Vec::new();
    match name {
        "ir_elicitation" if answers.form("user_name").is_none() => open.push(name_form()),
        "ir_sampling" if answers.sample_text("capital_question").is_none() => {
            open.push(Question::sample("capital_question", "What is the capital of France?", 100));
        }
        "ir_list_roots" if answers.roots("client_roots").is_none() => open.push(Question::roots("client_roots")),
        "ir_request_state" | "ir_tampered_state" if answers.form("confirm").is_none() => open.push(confirm()),
        "ir_multiple_inputs" => {
            if answers.form("user_name").is_none() {
                open.push(name_form());
            }
            if answers.sample_text("greeting").is_none() {
                open.push(Question::sample("greeting", "Generate a greeting", 50));
            }
            if answers.roots("client_roots").is_none() {
                open.push(Question::roots("client_roots"));
            }
        }
        "ir_multi_round" => {
            if answers.form("step1").is_none() {
                open.push(form("step1", "Step 1: What is your name?", "name", "string"));
            } else if answers.form("step2").is_none() {
                open.push(form("step2", "Step 2: What is your favorite color?", "color", "string"));
            }
        }
        "ir_capabilities" => {
            // Asks only what the client declared it can answer; done once anything is answered.
            let answered = answers.form("elicit_input").is_some() || answers.sample_text("sample_input").is_some();
            if !answered {
                if answers.abilities().form {
                    open.push(form("elicit_input", "Elicitation input", "value", "string"));
                }
                if answers.abilities().sample {
                    open.push(Question::sample("sample_input", "Sample request", 50));
                }
            }
        }
        "missing_capability" if answers.sample_text("needs_sampling").is_none() => {
            open.push(Question::sample("needs_sampling", "Say anything.", 10));
        }
        "tool_with_task" if answers.form("user_name").is_none() => open.push(name_form()),
        "confirm_delete" if answers.form("confirm").is_none() => {
            open.push(form("confirm", "Delete the file?", "confirm", "boolean"));
        }
        "multi_input" => {
            if answers.form("first").is_none() {
                open.push(form("first", "First input?", "value", "string"));
            }
            if answers.form("second").is_none() {
                open.push(form("second", "Second input?", "value", "string"));
            }
        }
        _ => {}
    }
    open
}

/// What `conformance.{name}` answers once its questions are answered.
fn answered(name: &str, answers: &Answers) -> String {
    let field = |key: &str, field: &str| {
        answers.form(key).and_then(|f| f.get(field)).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    match name {
        "ir_elicitation" => format!("Hello, {}!", field("user_name", "name")),
        "ir_sampling" => format!("The model said: {}", answers.sample_text("capital_question").unwrap_or_default()),
        "ir_list_roots" => format!("{} roots", answers.roots("client_roots").map_or(0, Vec::len)),
        "ir_multiple_inputs" => format!("All inputs received for {}", field("user_name", "name")),
        "ir_multi_round" => {
            format!("Multi-round complete for {} who likes {}", field("step1", "name"), field("step2", "color"))
        }
        "ir_capabilities" => "capabilities-ok".to_string(),
        "missing_capability" => "Success".to_string(),
        "tool_with_task" => format!("Hello, {}!", field("user_name", "name")),
        "confirm_delete" => "Deleted.".to_string(),
        "multi_input" => "Both inputs received.".to_string(),
        _ => "state-ok".to_string(),
    }
}

/// What `test_trigger_tool_change` does: disables or enables `test_logging_tool`, which changes
/// the tool list (a disabled tool carries its unavailable reason).
struct ToolChange {
    registry: Registry,
    disabled: AtomicBool,
}

impl ToolChange {
    fn toggle(&self) {
        const TARGET: &str = "conformance.logging_tool";
        if self.disabled.fetch_xor(true, Ordering::SeqCst) {
            self.registry.enable(TARGET);
        } else {
            self.registry.disable(TARGET, "Disabled by test_trigger_tool_change.");
        }
    }
}

/// Defines the `conformance` type and mounts its instance; keep the handle while serving.
pub(crate) fn define(registry: &Registry) -> Result<Mount, DefinitionError> {
    registry.define(crate::policy::CONFORMANCE, |t| {
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
        t.capability("tool_with_progress", "Reports progress in three steps, then answers (conformance fixture).")
            .effect(Effect::Read)
            .idempotent()
            .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _input: Value| async move {
                for step in [0u32, 50, 100] {
                    ctx.progress(f64::from(step), Some(100.0), Some(&format!("Completed step {step} of 100")));
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Ok::<_, AgentSurfaceError>(Value::String("Progress complete.".to_string()))
            });
        t.capability("logging_tool", "Answers without logging to the client (conformance fixture).")
            .effect(Effect::Read)
            .idempotent()
            .raw_handler(json!({"type": "object", "properties": {}}), None, |_ctx: Ctx, _input: Value| async move {
                // The operator channel is `tracing`; nothing reaches the client's log.
                Ok::<_, AgentSurfaceError>(Value::String("Logging evaluated".to_string()))
            });
        t.capability("streaming_elicitation", "Answers on its stream without asking the client (conformance fixture).")
            .effect(Effect::Read)
            .idempotent()
            .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _input: Value| async move {
                ctx.progress(1.0, None, Some("Streaming"));
                Ok::<_, AgentSurfaceError>(Value::String("Streaming complete".to_string()))
            });
        t.capability("trigger_tool_change", "Changes the tool list (conformance fixture).")
            .effect(Effect::Write)
            .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _input: Value| async move {
                ctx.state::<ToolChange>().toggle();
                Ok::<_, AgentSurfaceError>(Value::String("Tool list changed".to_string()))
            });
        // The tasks extension's fixtures: long-running capabilities become tasks once they run.
        t.capability("greet", "Greets by name (conformance fixture).").effect(Effect::Read).idempotent().raw_handler(
            json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            None,
            |_ctx: Ctx, input: Value| async move {
                Ok::<_, AgentSurfaceError>(Value::String(format!("Hello, {}!", input["name"].as_str().unwrap_or(""))))
            },
        );
        t.capability("slow_compute", "Sleeps for the given seconds (conformance fixture).")
            .effect(Effect::Read)
            .idempotent()
            .long_running()
            .time_budget(std::time::Duration::from_secs(120))
            .raw_handler(
                json!({"type": "object", "properties": {"seconds": {"type": "integer"}, "label": {"type": "string"}}}),
                None,
                |ctx: Ctx, input: Value| async move {
                    let seconds = input["seconds"].as_u64().unwrap_or(1).min(100);
                    tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
                    let _ = ctx;
                    Ok::<_, AgentSurfaceError>(Value::String(format!(
                        "Computed {}",
                        input["label"].as_str().unwrap_or("")
                    )))
                },
            );
        t.capability("failing_job", "Fails after a second (conformance fixture).")
            .effect(Effect::Read)
            .long_running()
            .raw_handler(no_input(), None, |_ctx: Ctx, _input: Value| async move {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                Err::<Value, _>(AgentSurfaceError::handler_failed("The job failed on purpose."))
            });
        t.capability("protocol_error_job", "Would fail with a protocol error (conformance fixture).")
            .effect(Effect::Read)
            .long_running()
            .raw_handler(no_input(), None, |_ctx: Ctx, _input: Value| async move {
                // Capability errors are tool results; a protocol fault is never the handler's.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                Err::<Value, _>(AgentSurfaceError::handler_failed("The job failed on purpose."))
            });
        for name in ["tool_with_task", "confirm_delete", "multi_input"] {
            t.capability(name, "Asks first, then runs long (conformance fixture).")
                .effect(Effect::Read)
                .idempotent()
                .long_running()
                .ask(move |_ctx: &Ctx, _input: &Value, answers: &Answers| Ok(open_questions(name, answers)))
                .raw_handler(json!({"type": "object"}), None, move |ctx: Ctx, _input: Value| async move {
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    Ok::<_, AgentSurfaceError>(Value::String(answered(name, ctx.answers())))
                });
        }
        for name in [
            "missing_capability",
            "ir_elicitation",
            "ir_sampling",
            "ir_list_roots",
            "ir_request_state",
            "ir_multiple_inputs",
            "ir_multi_round",
            "ir_tampered_state",
            "ir_capabilities",
        ] {
            t.capability(name, "Asks the client for input before it runs (conformance fixture).")
                .effect(Effect::Read)
                .idempotent()
                .ask(move |_ctx: &Ctx, _input: &Value, answers: &Answers| Ok(open_questions(name, answers)))
                .raw_handler(no_input(), None, move |ctx: Ctx, _input: Value| async move {
                    Ok::<_, AgentSurfaceError>(Value::String(answered(name, ctx.answers())))
                });
        }
    })?;
    // The registry holding itself is a cycle that lives as long as the demo process, as the
    // fixtures do.
    registry.provide(ToolChange { registry: registry.clone(), disabled: AtomicBool::new(false) });
    registry.mount(crate::policy::CONFORMANCE, "fixtures")
}

/// The adapter, with the fixture tools under the suite's names, composed with the suite's
/// resource, prompt and completion.
pub(crate) struct ConformanceServer {
    inner: Composed<Library>,
}

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.inner.initialize(request, context).await
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.inner.list_resources(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.inner.list_resource_templates(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.inner.read_resource(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.inner.list_prompts(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.inner.get_prompt(request, context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.inner.complete(request, context).await
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

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.inner.listen(subscription).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.inner.on_custom_request(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.inner.get_task(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.update_task(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.cancel_task(request, context).await
    }
}

impl ConformanceServer {
    /// The wrapped adapter for one connection.
    pub(crate) fn new(registry: Registry, config: Arc<McpConfig>) -> ConformanceServer {
        ConformanceServer { inner: McpServer::new(registry, config).with_fallback(Library::conformance()) }
    }
}

/// The HTTP router serving the wrapped adapter.
pub(crate) fn router(
    registry: Registry,
    config: McpConfig,
    http: &McpHttpConfig,
    shutdown: CancellationToken,
) -> axum::Router {
    let authenticator = config.authenticator.clone();
    let config = Arc::new(config);
    let app = agent_surface_mcp::http::router_with(
        move || ConformanceServer::new(registry.clone(), config.clone()),
        http,
        shutdown,
    );
    match authenticator {
        Some(authenticator) => agent_surface_mcp::http::authenticated(app, authenticator),
        None => app,
    }
}
