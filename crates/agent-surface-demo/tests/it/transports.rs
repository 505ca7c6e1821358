//! One payload, every transport: the embedded toolset, MCP, HTTP and the CLI carry the same
//! payload JSON bytes for the same result, the message worded for what each binding lets an agent
//! send (the toolset and MCP: a tool's arguments; HTTP and the CLI: the whole request).

use agent_surface_core::message::Sends;
use agent_surface_core::{ErrorCode, ErrorPayload, InvokeResult};
use agent_surface_toolset::{Arguments, Provider, ResultFormat, ToolCall, encode_result};
use serde_json::{Value, json};

use crate::served;

/// The payload part of an HTTP problem body: `{` and everything from the `code` member on.
pub(crate) fn http_payload(body: &str) -> String {
    let at = body.find(",\"code\":").unwrap_or_else(|| panic!("no code member: {body}"));
    format!("{{{}", &body[at + 1..])
}

fn toolset_payload(result: &InvokeResult) -> String {
    let call = ToolCall {
        provider: Provider::OpenAiChat,
        call_id: "call_1".into(),
        provider_id: true,
        tool_name: "x-y".into(),
        arguments: Arguments::Json(json!({})),
    };
    encode_result(&call, result, &ResultFormat::default())["content"].as_str().unwrap().to_string()
}

fn mcp_payload(result: &InvokeResult) -> String {
    let encoded = serde_json::to_value(agent_surface_mcp::codec::encode(result.clone())).unwrap();
    encoded["content"][0]["text"].as_str().unwrap().to_string()
}

/// The payload's bytes as a binding that lets an agent send only a tool's arguments carries them.
fn for_a_model(payload: &ErrorPayload) -> String {
    serde_json::to_string(&*payload.worded_for(Sends::Arguments)).unwrap()
}

/// Every code (every example and representative case of the conformance kit): the three
/// encoders put the same bytes on the wire, and those bytes are core's serialization — of the
/// payload as built on HTTP, of its wording for a model on the toolset and MCP.
#[test]
fn every_code_has_the_same_payload_bytes_on_every_transport() {
    let mut codes = std::collections::BTreeSet::new();
    for result in agent_surface_testing::cases() {
        let Some(payload) = result.error_payload() else { continue };
        codes.insert(payload.code());
        let core = serde_json::to_string(payload).unwrap();
        assert_eq!(toolset_payload(&result), for_a_model(payload), "toolset");
        assert_eq!(mcp_payload(&result), for_a_model(payload), "mcp");
        assert_eq!(http_payload(&agent_surface_http::wire::encode(&result).body), core, "http");
    }
    assert_eq!(codes.len(), ErrorCode::ALL.len(), "every code is covered");
}

/// Real calls of the demo shop, each through MCP and HTTP (`serve --http`, `/mcp` and `/api`)
/// and the CLI (`call --json`, its own process): the same payload bytes.
#[test]
fn demo_calls_carry_the_same_payload_over_mcp_http_and_cli() {
    let server = served::start(&[]);
    let session = served::mcp_session(&server);
    let calls = [
        ("admin.nothing_here", json!({})),
        ("loyalty.redeem", json!({})),
        ("orders.update_address", json!({"orderId": 7})),
        ("refunds.issue", json!({})),
        ("orders.get", json!({"orderId": "no-such-order"})),
        ("reports.export", json!({})),
    ];
    let mut codes = Vec::new();
    for (i, (capability, input)) in calls.iter().enumerate() {
        // HTTP.
        let body = json!({"capability": capability, "input": input}).to_string();
        let r = served::post(&server.addr, "/api/invoke", "127.0.0.1", &[], &body);
        assert_ne!(r.status, 200, "{capability}: {}", r.body);
        let http = http_payload(&r.body);
        // MCP.
        let tool = capability.replace('.', "-");
        let call = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": {"name": tool, "arguments": input}});
        let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
        let r = served::post(&server.addr, "/mcp", "127.0.0.1", &headers, &call.to_string());
        let mcp = r.messages().into_iter().next().unwrap_or_else(|| panic!("no answer in {}", r.body));
        assert_eq!(mcp["result"]["isError"], true, "{capability}: {mcp}");
        let mcp = mcp["result"]["content"][0]["text"].as_str().unwrap().to_string();
        // CLI.
        let out = crate::demo().args(["call", capability, "--input", &input.to_string(), "--json"]).output().unwrap();
        // The exit status maps from the code (`cli::EXIT_STATUS`).
        let expected_exit = match capability {
            &"admin.nothing_here" => Some(69),
            _ => None,
        };
        assert_ne!(out.status.code(), Some(0), "{capability}");
        if expected_exit.is_some() {
            assert_eq!(out.status.code(), expected_exit, "{capability}");
        }
        let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let cli_payload = {
            let at = stdout.find("\"error\":").unwrap() + "\"error\":".len();
            let end = stdout.rfind('}').unwrap();
            stdout[at..end].to_string()
        };
        // Each call names its own correlation id (in every payload); the rest is byte for byte.
        let sans_id = |text: &str| {
            let mut parsed: ErrorPayload = serde_json::from_str(text).unwrap();
            assert!(parsed.correlation_id().is_some_and(|id| id.starts_with("c-")), "{capability}: {text}");
            parsed.set_correlation_id(None);
            parsed
        };
        let parsed = sans_id(&http);
        assert_eq!(
            for_a_model(&parsed),
            serde_json::to_string(&sans_id(&mcp)).unwrap(),
            "{capability}: HTTP and MCP differ"
        );
        assert_eq!(sans_id(&cli_payload), parsed, "{capability}: CLI and HTTP differ");
        codes.push(cli["error"]["code"].as_str().unwrap().to_string());
    }
    // The calls reach different phases.
    codes.sort();
    codes.dedup();
    assert!(codes.len() >= 4, "{codes:?}");
}
