//! Composition: an application's own `rmcp` handler (a resource, a prompt, a completion, a
//! subscription) served beside the registry's tools from one server, on both protocol eras and
//! both transports.

use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_mcp::http::{McpHttpConfig, router_with_fallback};
use agent_surface_mcp::{McpConfig, McpServer, codec};
use agent_surface_registry::Ctx;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourcesResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
    ResourceContents, Role, ServerCapabilities, ServerConfig, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{RequestContext, RunningService, SubscriptionContext};
use rmcp::{ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{fixture, params};

/// The application's own handler: one resource, one prompt with one argument, its completion,
/// and resource-list changes on a subscription (one announced as soon as it is opened).
#[derive(Clone)]
struct Library;

const README: &str = "docs://readme";
/// A resource that takes [`SLOW_READ`] to read.
const SLOW: &str = "docs://slow";
const SLOW_READ: Duration = Duration::from_millis(1_500);
const TOPICS: [&str; 3] = ["orders", "refunds", "returns"];

impl ServerHandler for Library {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_list_changed()
            .build();
        ServerConfig::new(capabilities).with_instructions("The library's documents.")
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(README, "readme").with_mime_type("text/plain")]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri == SLOW {
            tokio::time::sleep(SLOW_READ).await;
            return Ok(ReadResourceResult::new(vec![ResourceContents::text("Slow.", SLOW)]).into());
        }
        if request.uri != README {
            return Err(ErrorData::resource_not_found("no such resource", Some(json!({"uri": request.uri}))));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text("Read me first.", README)]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let topic = PromptArgument::new("topic").with_required(true);
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "summarize",
            Some("Summarize a topic."),
            Some(vec![topic]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let topic = request.arguments.as_ref().and_then(|a| a.get("topic")).and_then(Value::as_str).unwrap_or("");
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, format!("Summarize {topic}."))]).into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let values = match &request.r#ref {
            Reference::Prompt(p) if p.name == "summarize" && request.argument.name == "topic" => {
                TOPICS.iter().filter(|t| t.starts_with(&request.argument.value)).map(|t| t.to_string()).collect()
            }
            _ => Vec::new(),
        };
        Ok(CompleteResult::new(CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?))
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed;
        Some(accepted)
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        if subscription.accepted().resources_list_changed == Some(true) {
            let _ = subscription.sink().notify_resource_list_changed().await;
        }
        subscription.cancelled().await;
        Ok(())
    }
}

type Client = RunningService<RoleClient, ()>;

/// Serves the fixture's tools with [`Library`] beside them over a pipe, to a client of `era`.
async fn connect(registry: &agent_surface_registry::Registry, modern: bool, composed: bool) -> Client {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_io);
    let server = McpServer::new(registry.clone(), McpConfig::default());
    if composed {
        tokio::spawn(agent_surface_mcp::serve_io(server.with_fallback(Library), read, write, 1 << 20));
    } else {
        tokio::spawn(agent_surface_mcp::serve_io(server, read, write, 1 << 20));
    }
    if modern {
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        ().serve_with_lifecycle(client_io, lifecycle).await.unwrap()
    } else {
        ().serve(client_io).await.unwrap()
    }
}

#[tokio::test]
async fn both_eras_get_the_tools_and_the_applications_resource_prompt_and_completion_from_one_server() {
    let f = fixture();
    for modern in [false, true] {
        let era = if modern { "2026-07-28" } else { "2025-11-25" };
        let client = connect(&f.registry, modern, true).await;
        let info = client.peer_info().expect("the server's information");
        let caps = &info.capabilities;
        assert!(caps.tools.as_ref().is_some_and(|t| t.list_changed == Some(true)), "{era}: {caps:?}");
        assert!(caps.resources.is_some() && caps.prompts.is_some() && caps.completions.is_some(), "{era}: {caps:?}");
        assert_eq!(
            info.server_info.as_ref().map(|s| s.name.clone()),
            Some(McpConfig::default().name),
            "{era}: the adapter names the server"
        );
        let instructions = info.instructions.as_deref().unwrap_or_default();
        assert!(instructions.ends_with("The library's documents."), "{era}: {instructions}");

        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "store-echo"), "{era}");
        let echoed = client.call_tool(params("store-echo", json!({"text": "hi"}), Value::Null)).await.unwrap();
        assert_eq!(codec::decode(&echoed).unwrap().output(), Some(&json!({"text": "hi"})), "{era}");

        let resources = client.list_all_resources().await.unwrap();
        assert_eq!(resources.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), [README], "{era}");
        let read = client.read_resource(ReadResourceRequestParams::new(README)).await.unwrap();
        assert!(
            matches!(&read.contents[..], [ResourceContents::TextResourceContents { text, .. }] if text == "Read me first."),
            "{era}: {read:?}"
        );
        let prompts = client.list_all_prompts().await.unwrap();
        assert_eq!(prompts[0].name, "summarize", "{era}");
        let args = json!({"topic": "refunds"}).as_object().cloned().unwrap();
        let prompt = client.get_prompt(GetPromptRequestParams::new("summarize").with_arguments(args)).await.unwrap();
        assert_eq!(serde_json::to_value(&prompt.messages[0].content).unwrap()["text"], "Summarize refunds.", "{era}");
        let completed = client.complete_prompt_simple("summarize", "topic", "re").await.unwrap();
        assert_eq!(completed, ["refunds", "returns"], "{era}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn the_adapter_alone_serves_no_resources() {
    let f = fixture();
    for modern in [false, true] {
        let client = connect(&f.registry, modern, false).await;
        let caps = client.peer_info().unwrap().capabilities.clone();
        assert!(caps.resources.is_none() && caps.prompts.is_none());
        match client.list_resources(None).await {
            Err(rmcp::ServiceError::McpError(e)) => assert_eq!(e.code.0, -32601, "{e:?}"),
            other => panic!("expected method not found, got {other:?}"),
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn one_subscription_carries_the_tool_list_and_the_applications_changes() {
    let f = fixture();
    let client = connect(&f.registry, true, true).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().resources_list_changed().build();
    let mut subscription = client.peer().listen(filter).await.unwrap();
    let acknowledged = subscription.acknowledged();
    assert_eq!((acknowledged.tools_list_changed, acknowledged.resources_list_changed), (Some(true), Some(true)));
    let next = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await.expect("in time");
    assert!(matches!(next, Ok(Some(ServerNotification::ResourceListChangedNotification(_)))), "{next:?}");
    f.registry
        .define("more", |t| {
            t.capability("ping", "Answer.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
            )
        })
        .unwrap();
    let _more = f.registry.mount("more", "main").unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await.expect("in time");
    assert!(matches!(next, Ok(Some(ServerNotification::ToolListChangedNotification(_)))), "{next:?}");
    client.cancel().await.unwrap();
}

/// `POST /mcp` with `body` and `headers`: the status and the body.
async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &Value) -> (u16, String) {
    let mut all = vec![("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    let r = agent_surface_testing::http::request(addr, "POST", "/mcp", &all, body.to_string().as_bytes()).await;
    let session = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id")).map(|(_, v)| v.clone());
    (r.status, format!("{}{}", session.map(|s| format!("session:{s}\n")).unwrap_or_default(), r.body))
}

/// The JSON-RPC message in a response body (plain JSON, or the last `data:` line of an event
/// stream).
fn message(body: &str) -> Value {
    let data = body.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).rfind(|d| !d.is_empty());
    let json = data.unwrap_or_else(|| body.lines().last().unwrap_or_default());
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn modern(method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "compose", "version": "0"}});
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// The fixture's tools with [`Library`] beside them over streamable HTTP: the address, the token
/// that shuts the server down, and its task.
async fn serve_composed(
    f: &crate::support::Fixture,
) -> (std::net::SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let http = McpHttpConfig::default();
    let streams = CancellationToken::new();
    let app = router_with_fallback(f.registry.clone(), McpConfig::default(), || Library, &http, streams);
    let shutdown = CancellationToken::new();
    let drain = agent_surface_server::Drain::default();
    let server = tokio::spawn(agent_surface_server::serve_with(listener, app, http.limits, shutdown.clone(), drain));
    (addr, shutdown, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_both_eras_reach_the_application_and_the_tools() {
    let f = fixture();
    let (addr, shutdown, server) = serve_composed(&f).await;

    // Legacy: a session, then the resource and a tool call in it.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "compose", "version": "0"}}});
    let (status, raw) = post(addr, &[], &init).await;
    assert_eq!(status, 200, "{raw}");
    let session = raw.lines().next().and_then(|l| l.strip_prefix("session:")).expect("a session").to_string();
    let caps = &message(&raw)["result"]["capabilities"];
    for capability in ["tools", "resources", "prompts", "completions"] {
        assert!(caps.get(capability).is_some(), "{capability}: {caps}");
    }
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let (status, _) = post(addr, &headers, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(status, 202);
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": README}});
    let (_, raw) = post(addr, &headers, &read).await;
    assert_eq!(message(&raw)["result"]["contents"][0]["text"], "Read me first.", "{raw}");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "store-echo", "arguments": {"text": "legacy"}}});
    let (_, raw) = post(addr, &headers, &call).await;
    assert_eq!(message(&raw)["result"]["structuredContent"], json!({"text": "legacy"}), "{raw}");

    // Modern: stateless requests, each to a fresh composed server.
    let modern_headers = |method: &'static str, name: &'static str| {
        [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method), ("Mcp-Name", name)]
    };
    let get = modern("prompts/get", json!({"name": "summarize", "arguments": {"topic": "orders"}}));
    let (status, raw) = post(addr, &modern_headers("prompts/get", "summarize"), &get).await;
    assert_eq!(status, 200, "{raw}");
    assert_eq!(message(&raw)["result"]["messages"][0]["content"]["text"], "Summarize orders.", "{raw}");
    let complete = modern(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "summarize"}, "argument": {"name": "topic", "value": "or"}}),
    );
    let (_, raw) =
        post(addr, &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "completion/complete")], &complete).await;
    assert_eq!(message(&raw)["result"]["completion"]["values"], json!(["orders"]), "{raw}");
    let call = modern("tools/call", json!({"name": "store-echo", "arguments": {"text": "modern"}}));
    let (_, raw) = post(addr, &modern_headers("tools/call", "store-echo"), &call).await;
    assert_eq!(message(&raw)["result"]["structuredContent"], json!({"text": "modern"}), "{raw}");
    let unknown = modern("resources/read", json!({"uri": "docs://nothing"}));
    let (_, raw) = post(addr, &modern_headers("resources/read", "docs://nothing"), &unknown).await;
    assert_eq!(message(&raw)["error"]["code"], -32602, "the application's not-found, in the modern code: {raw}");

    shutdown.cancel();
    server.await.unwrap().unwrap();
}

/// A legacy request of the application's own (a `resources/read`) whose client hung up keeps its
/// id in progress while its handler runs, as a `tools/call` does: `rmcp` keeps the request's
/// answer route until the handler answers, and a request that reused the id would take it (and be
/// answered the first request's result, or never). Once the handler is over, the id is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_request_keeps_its_id_while_its_handler_runs_after_its_client_hung_up() {
    let f = fixture();
    let (addr, shutdown, server) = serve_composed(&f).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "compose", "version": "0"}}});
    let (_, raw) = post(addr, &[], &init).await;
    let session = raw.lines().next().and_then(|l| l.strip_prefix("session:")).expect("a session").to_string();
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let (status, _) = post(addr, &headers, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(status, 202);

    // The slow read, whose client hangs up while it runs.
    let slow = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {"uri": SLOW}});
    let all: Vec<(&str, &str)> =
        [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
            .into_iter()
            .chain(headers)
            .collect();
    let bytes = agent_surface_testing::http::request_bytes("POST", "/mcp", &all, slow.to_string().as_bytes());
    let started = tokio::time::Instant::now();
    let mut dropped = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut dropped, &bytes).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Its id, reused while the read runs: refused, not routed to the read's answer.
    let read = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {"uri": README}});
    let (status, raw) =
        tokio::time::timeout(Duration::from_secs(5), post(addr, &headers, &read)).await.expect("answered");
    assert!(started.elapsed() < SLOW_READ, "the check ran while the read did");
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains(r#""code":-32600"#) && raw.contains("already in progress"), "{raw}");

    // Once the read is over, the id is free, and answered its own result.
    tokio::time::sleep_until(started + SLOW_READ + Duration::from_millis(300)).await;
    let (_, raw) = tokio::time::timeout(Duration::from_secs(5), post(addr, &headers, &read)).await.expect("answered");
    assert_eq!(message(&raw)["result"]["contents"][0]["text"], "Read me first.", "{raw}");
    shutdown.cancel();
    server.await.unwrap().unwrap();
}
