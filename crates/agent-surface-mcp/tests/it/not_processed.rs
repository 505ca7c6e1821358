//! Issue 27: "not processed", stated by the runtime, and the reference a model can quote — one
//! table over the phases that can stop a call × every transport a model reads a result through:
//! MCP in both eras (the text block and the structured content), the HTTP binding (the problem
//! document) and the embedded toolset in each provider's format.
//!
//! Every error raised before the handler started says `notProcessed: true` in the payload the
//! model reads; one raised after never does. Every payload names the call's correlation id, the
//! same one the transport hands out of band (`_meta`, a header, the tool outcome), made by the
//! registry and never the caller's invocation id.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
use agent_surface_mcp::{McpConfig, McpServer};
use agent_surface_policy::{
    AuditConfig, AuthorityDecision, CallInfo, Consumer, FnPolicy, MemoryRateLimiter, Policies, Quota, RateLimitConfig,
};
use agent_surface_registry::{Answers, Ctx, InvokeOptions, InvokeRequest, Mount, Registry, RegistryConfig};
use agent_surface_testing::FlakyAuditSink;
use agent_surface_toolset::{Arguments, Provider, RecoveryConfig, ToolCall, Toolset, ToolsetConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation, MetaObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One way a call stops: the capability and input that make it stop there, and what the model
/// must read.
struct Case {
    /// The phase, as the matrix names it (and "audit" for strict audit's refusal, reported by
    /// the execution phase before the handler starts).
    phase: &'static str,
    capability: &'static str,
    input: Value,
    /// Sent first under the same invocation id (for a conflict at admission).
    first: Option<Value>,
    code: ErrorCode,
    not_processed: bool,
}

fn cases() -> Vec<Case> {
    let case = |phase, capability, input, code, not_processed| Case {
        phase,
        capability,
        input,
        first: None,
        code,
        not_processed,
    };
    vec![
        Case {
            first: Some(json!({"n": 1})),
            ..case("admission", "shop.buy", json!({"n": 2}), ErrorCode::InvocationConflict, true)
        },
        case("resolve", "shop.nothing", json!({}), ErrorCode::CapabilityNotFound, true),
        case("availability", "shop.closed", json!({}), ErrorCode::CapabilityNotAvailable, true),
        case("authority", "shop.secret", json!({}), ErrorCode::NotAuthorized, true),
        case("input", "shop.buy", json!({"n": "many"}), ErrorCode::InvalidInput, true),
        case("input (questions)", "shop.ask", json!({}), ErrorCode::ExecutionFailed, true),
        case("rate", "shop.quota", json!({}), ErrorCode::RateLimited, true),
        case("confirmation", "shop.gated", json!({}), ErrorCode::ExecutionFailed, true),
        case("audit", "shop.logged", json!({}), ErrorCode::ExecutionFailed, true),
        case("execute", "shop.fail", json!({}), ErrorCode::ExecutionFailed, false),
        case("output", "shop.bad", json!({}), ErrorCode::ExecutionFailed, false),
    ]
}

/// A registry with a capability that stops in each phase.
fn registry() -> (Registry, Mount) {
    let policy = FnPolicy::new("np", |call: &CallInfo<'_>| {
        Ok(if call.capability == "shop.secret" {
            AuthorityDecision::Deny { origin: Origin::Client }
        } else {
            AuthorityDecision::Allow
        })
    });
    let hourly = Some(Quota::new(NonZeroU32::MIN, Duration::from_secs(3600)));
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        capability_quotas: [("shop.quota".to_string(), hourly)].into(),
        ..Default::default()
    });
    let sink = Arc::new(FlakyAuditSink::default());
    sink.set_failing(true);
    let registry = Registry::new(RegistryConfig {
        authority: Some(Arc::new(Policies::default_allow().global(policy))),
        rate_limiter: Some(Arc::new(limiter)),
        audit: Some(AuditConfig::new(sink)),
        // No confirmation engine: a gated capability cannot be decided (before its handler).
        confirmation: None,
        ..Default::default()
    });
    let counted = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let ok = |_c: Ctx, _v: Value| async move { Ok::<_, AgentSurfaceError>(json!({"done": true})) };
    registry
        .define("shop", |t| {
            t.capability("buy", "Buy.").effect(Effect::Read).raw_handler(counted.clone(), None, ok);
            t.capability("closed", "Closed.").effect(Effect::Read).raw_handler(counted.clone(), None, ok);
            t.capability("secret", "Secret.").effect(Effect::Read).raw_handler(counted.clone(), None, ok);
            t.capability("quota", "Once an hour.").effect(Effect::Read).raw_handler(counted.clone(), None, ok);
            t.capability("ask", "Asks first.")
                .effect(Effect::Write)
                .ask(|_: &Ctx, _: &Value, _: &Answers| -> Result<Vec<agent_surface_registry::Question>, _> {
                    panic!("the ask step's lookup failed")
                })
                .raw_handler(counted.clone(), None, ok);
            t.capability("gated", "Gated.")
                .effect(Effect::Destructive)
                .confirm(|_: &Value| "Do it.")
                .raw_handler(counted.clone(), None, ok);
            t.capability("logged", "Audited strictly.").effect(Effect::Write).strict_audit().raw_handler(
                counted.clone(),
                None,
                ok,
            );
            t.capability("fail", "Fails.").effect(Effect::Write).raw_handler(counted.clone(), None, |_c: Ctx, _v: Value| async move {
                Err::<Value, _>(AgentSurfaceError::internal("the warehouse said no"))
            });
            let output = json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
            t.capability("bad", "Bad output.").effect(Effect::Read).raw_handler(counted.clone(), Some(output), ok);
        })
        .unwrap();
    let mount = registry.mount("shop", "main").unwrap();
    assert!(registry.disable("shop.closed", "Closed for stocktaking."));
    (registry, mount)
}

/// What the model reads after one call: the payload, and the correlation id the transport
/// handed out of band.
struct Read {
    payload: Value,
    out_of_band: String,
}

const KEY: &str = "agent-surface/invocationId";

fn params(case: &Case, input: &Value, key: &str) -> CallToolRequestParams {
    let tool = agent_surface_registry::id::tool_name(case.capability).unwrap();
    let mut p = CallToolRequestParams::new(tool).with_arguments(input.as_object().cloned().unwrap_or_default());
    p.meta = Some(RequestMetaObject(MetaObject(json!({KEY: key}).as_object().cloned().unwrap())));
    p
}

/// The payload of an MCP error result: its text block, which the structured content (when
/// there is any) repeats.
fn mcp_read(result: &rmcp::model::CallToolResult) -> Read {
    let wire = serde_json::to_value(result).unwrap();
    assert_eq!(wire["isError"], true, "{wire}");
    let payload: Value = serde_json::from_str(wire["content"][0]["text"].as_str().unwrap()).unwrap();
    if let Some(structured) = wire.get("structuredContent") {
        assert_eq!(structured, &payload, "the structured content is the text block's payload");
    }
    let out_of_band = wire["_meta"]["agent-surface/correlationId"].as_str().unwrap().to_string();
    Read { payload, out_of_band }
}

/// A client of the modern era (discover lifecycle, no `initialize`).
struct Modern;

impl ClientHandler for Modern {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("it-not-processed", "0"))
    }
}

/// The first object in `item` (a provider's tool result) that is an error payload, whether the
/// provider carries it as text or as JSON.
fn find_payload(item: &Value) -> Option<Value> {
    match item {
        Value::String(s) => serde_json::from_str::<Value>(s).ok().filter(|v| v.get("code").is_some()),
        Value::Object(map) if map.contains_key("code") && map.contains_key("retry") => Some(item.clone()),
        Value::Object(map) => map.values().find_map(find_payload),
        Value::Array(items) => items.iter().find_map(find_payload),
        _ => None,
    }
}

#[tokio::test]
async fn every_pre_handler_error_says_not_processed_on_every_transport_with_its_correlation_id() {
    let (registry, _mount) = registry();
    // The hourly quota is spent before any transport calls.
    let spent = registry
        .invoke(InvokeRequest::new("shop.quota", json!({})), InvokeOptions::new(Consumer::anonymous("setup")))
        .await;
    assert!(spent.is_ok(), "{spent:?}");

    // MCP, legacy era.
    let legacy = crate::support::connect(&registry, McpConfig::default(), None).await;
    // MCP, modern era.
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(agent_surface_mcp::serve_io(
        McpServer::new(registry.clone(), McpConfig::default()),
        read,
        write,
        1 << 20,
    ));
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let modern = Modern.serve_with_lifecycle(client_io, lifecycle).await.unwrap();
    // The HTTP binding.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(agent_surface_http::serve(registry.clone(), Default::default(), listener, shutdown));
    // The embedded toolset, one request per call (the table checks the first answer).
    let toolset = Toolset::new(
        registry.clone(),
        Consumer::anonymous("toolset"),
        ToolsetConfig { recovery: RecoveryConfig { max_attempts: 1, ..Default::default() }, ..Default::default() },
    );

    let transports = ["mcp-legacy", "mcp-modern", "http", "openai-chat", "openai-responses", "anthropic", "gemini"];
    let n = AtomicUsize::new(0);
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases() {
        for transport in transports {
            // A key of its own per call; the conflict case reuses it once.
            let key = format!("k-{}", n.fetch_add(1, Ordering::SeqCst));
            let mut reads = Vec::new();
            for input in case.first.iter().chain([&case.input]) {
                let read = match transport {
                    "mcp-legacy" => {
                        let raw = legacy.client.call_tool(params(&case, input, &key)).await.unwrap();
                        (!raw.is_error.unwrap_or(false)).then_some(()).map_or_else(|| Some(mcp_read(&raw)), |()| None)
                    }
                    "mcp-modern" => match modern.call_tool_once(params(&case, input, &key)).await.unwrap() {
                        CallToolResponse::Complete(raw) if raw.is_error == Some(true) => Some(mcp_read(&raw)),
                        CallToolResponse::Complete(_) => None,
                        other => panic!("{}: a complete result, not {other:?}", case.phase),
                    },
                    "http" => {
                        let body = json!({"capability": case.capability, "input": input}).to_string();
                        let r = agent_surface_testing::http::post_json(
                            addr,
                            "/invoke",
                            &[("Idempotency-Key", &key)],
                            &body,
                        )
                        .await;
                        let out_of_band = r.header("agent-surface-correlation-id").unwrap().to_string();
                        let problem = r.json();
                        (problem.get("code").is_some()).then_some(Read { payload: problem, out_of_band })
                    }
                    provider => {
                        let provider = match provider {
                            "openai-chat" => Provider::OpenAiChat,
                            "openai-responses" => Provider::OpenAiResponses,
                            "anthropic" => Provider::Anthropic,
                            _ => Provider::Gemini,
                        };
                        let call = ToolCall {
                            provider,
                            call_id: key.clone(),
                            provider_id: provider != Provider::Gemini,
                            tool_name: agent_surface_registry::id::tool_name(case.capability).unwrap(),
                            arguments: Arguments::Json(input.clone()),
                        };
                        let outcome = toolset.call(&call).await;
                        outcome.result.error_payload().map(|_| Read {
                            payload: find_payload(&outcome.item)
                                .unwrap_or_else(|| panic!("no payload in {}", outcome.item)),
                            out_of_band: outcome.correlation_id.expect("a request was sent").to_string(),
                        })
                    }
                };
                reads.push(read);
            }
            let name = format!("{} × {transport}", case.phase);
            let Some(Some(read)) = reads.pop() else {
                failures.push(format!("{name}: succeeded"));
                continue;
            };
            checked += 1;
            let p = &read.payload;
            if p["code"] != case.code.as_str() {
                failures.push(format!("{name}: {} instead of {}", p["code"], case.code));
            }
            let stated = p.get("notProcessed").cloned().unwrap_or(Value::Bool(false));
            if stated != case.not_processed {
                failures.push(format!("{name}: notProcessed {stated}, expected {}", case.not_processed));
            }
            let id = p["correlationId"].as_str().unwrap_or("");
            if id != read.out_of_band || !id.starts_with("c-") || id.contains(&key) {
                failures.push(format!("{name}: correlationId {id:?}, out of band {:?}", read.out_of_band));
            }
        }
    }
    assert!(failures.is_empty(), "{checked} checked:\n{}", failures.join("\n"));
    assert_eq!(checked, 11 * transports.len());
    legacy.client.cancel().await.unwrap();
    modern.cancel().await.unwrap();
}

/// Issue 27, wire mappings as data: the proposed structured tool-failure object (SEP-3313) only
/// when the adapter is told to, under our own `_meta` key and never the protocol's reserved
/// prefix, its class and code from the wire table and its correlation id the call's.
#[tokio::test]
async fn the_tool_failure_object_is_emitted_only_behind_its_flag_under_our_key() {
    let (registry, _mount) = registry();
    let off = crate::support::connect(&registry, McpConfig::default(), None).await;
    let on = crate::support::connect(&registry, McpConfig { tool_failure: true, ..Default::default() }, None).await;
    let case = Case {
        phase: "authority",
        capability: "shop.secret",
        input: json!({}),
        first: None,
        code: ErrorCode::NotAuthorized,
        not_processed: true,
    };
    let wire = |r: rmcp::model::CallToolResult| serde_json::to_value(r).unwrap();
    let plain = wire(off.client.call_tool(params(&case, &case.input, "t-1")).await.unwrap());
    assert!(plain["_meta"].get("agent-surface/toolFailure").is_none(), "{plain}");
    let flagged = wire(on.client.call_tool(params(&case, &case.input, "t-2")).await.unwrap());
    let failure = &flagged["_meta"]["agent-surface/toolFailure"];
    assert_eq!(failure["class"], "governance", "{flagged}");
    assert_eq!(failure["code"], "permission_denied");
    assert!(failure.get("retryable").is_none(), "only a reliability failure is retryable");
    assert_eq!(failure["correlationId"], flagged["_meta"]["agent-surface/correlationId"]);
    assert_eq!(
        failure["agentGuidance"],
        mcp_read(&serde_json::from_value(flagged.clone()).unwrap()).payload["message"]
    );
    assert!(flagged["_meta"].as_object().unwrap().keys().all(|k| !k.starts_with("io.modelcontextprotocol/")));
    // A capability's quota stays in band: a reliability failure with its delay, never -32023.
    let quota = Case { capability: "shop.quota", code: ErrorCode::RateLimited, ..case };
    let _ = registry
        .invoke(InvokeRequest::new("shop.quota", json!({})), InvokeOptions::new(Consumer::anonymous("setup")))
        .await;
    let limited = wire(on.client.call_tool(params(&quota, &quota.input, "t-3")).await.unwrap());
    assert_eq!(limited["isError"], true, "{limited}");
    let failure = &limited["_meta"]["agent-surface/toolFailure"];
    assert_eq!((failure["class"].as_str(), failure["retryable"].as_bool()), (Some("reliability"), Some(true)));
    assert!(failure["retryNotBefore"].as_u64().is_some(), "{failure}");
    off.client.cancel().await.unwrap();
    on.client.cancel().await.unwrap();
}
