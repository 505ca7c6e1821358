//! One payload, every transport: the embedded toolset, MCP, HTTP and the CLI carry the same
//! payload JSON bytes for the same result.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_toolset::{Arguments, Provider, ResultFormat, ToolCall, encode_result};
use serde_json::{Value, json};

/// The payload part of an HTTP problem body: `{` and everything from the `code` member on.
fn http_payload(body: &str) -> String {
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

/// Every code (every example and representative case of the conformance kit): the three
/// encoders put the same bytes on the wire, and those bytes are core's serialization.
#[test]
fn every_code_has_the_same_payload_bytes_on_every_transport() {
    let mut codes = std::collections::BTreeSet::new();
    for result in agent_surface_testing::cases() {
        let Some(payload) = result.error_payload() else { continue };
        codes.insert(payload.code());
        let core = serde_json::to_string(payload).unwrap();
        assert_eq!(toolset_payload(&result), core, "toolset");
        assert_eq!(mcp_payload(&result), core, "mcp");
        assert_eq!(http_payload(&agent_surface_http::wire::encode(&result).body), core, "http");
    }
    assert_eq!(codes.len(), ErrorCode::ALL.len(), "every code is covered");
}

struct Served {
    child: std::process::Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Served {
    let mut child = crate::demo()
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://").unwrap().strip_suffix("/mcp").unwrap().to_string();
    Served { child, addr }
}

fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    (status, headers, body.to_string())
}

/// The JSON-RPC message of a JSON or SSE body.
fn message(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .next()
        .unwrap()
}

fn mcp_session(addr: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let (_, headers, _) = post(addr, "/mcp", &[], &init.to_string());
    let session = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id")).unwrap().1.clone();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(addr, "/mcp", &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")], &done.to_string());
    session
}

/// Real calls of the demo shop, each through MCP and HTTP (`serve --http`, `/mcp` and `/api`)
/// and the CLI (`call --json`, its own process): the same payload bytes.
#[test]
fn demo_calls_carry_the_same_payload_over_mcp_http_and_cli() {
    let server = serve();
    let session = mcp_session(&server.addr);
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
        let (status, _, http_body) = post(&server.addr, "/api/invoke", &[], &body);
        assert_ne!(status, 200, "{capability}: {http_body}");
        let http = http_payload(&http_body);
        // MCP.
        let tool = capability.replace('.', "-");
        let call = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": {"name": tool, "arguments": input}});
        let (_, _, mcp_body) = post(
            &server.addr,
            "/mcp",
            &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")],
            &call.to_string(),
        );
        let mcp = message(&mcp_body);
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
        assert_eq!(http, mcp, "{capability}: HTTP and MCP differ");
        assert_eq!(cli_payload, mcp, "{capability}: CLI and MCP differ");
        codes.push(cli["error"]["code"].as_str().unwrap().to_string());
    }
    // The calls reach different phases.
    codes.sort();
    codes.dedup();
    assert!(codes.len() >= 4, "{codes:?}");
}
