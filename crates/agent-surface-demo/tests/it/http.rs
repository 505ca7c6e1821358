//! `agent-surface-demo serve --http`: raw HTTP/1.1 against the streamable HTTP transport.

use serde_json::{Value, json};

use crate::served::{self, Response, Server};

/// `POST /mcp` with `Host: host`.
fn post(server: &Server, host: &str, headers: &[(&str, &str)], body: &str) -> Response {
    served::post(&server.addr, "/mcp", host, headers, body)
}

fn start() -> Server {
    served::start(&["--token", "t-sam=sam:support"])
}

fn call(server: &Server, session: &str, token: Option<&str>, tool: &str, arguments: Value) -> Value {
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let r = post(server, &server.addr, &headers, &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let answer = r.messages().into_iter().find(|m| m["id"] == 2).unwrap_or_else(|| panic!("no answer in {}", r.body));
    answer["result"].clone()
}

fn payload(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[test]
fn a_foreign_host_or_origin_is_refused_before_any_mcp_processing() {
    let server = start();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let r = post(&server, "evil.example.com", &[], &ping);
    assert!((400..500).contains(&r.status), "{}", r.status);
    let r = post(&server, &server.addr, &[("Origin", "http://evil.example.com")], &ping);
    assert!((400..500).contains(&r.status), "{}", r.status);
    let origin = format!("http://{}", server.addr);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "0"}}});
    let r = post(&server, &server.addr, &[("Origin", &origin)], &init.to_string());
    assert_eq!(r.status, 200, "a loopback origin is accepted");
}

#[test]
fn an_oversized_body_is_refused() {
    let server = start();
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 << 20));
    let r = post(&server, &server.addr, &[], &big);
    assert_eq!(r.status, 413);
}

#[test]
fn the_authenticator_turns_a_bearer_token_into_the_callers_identity() {
    let server = start();
    let session = served::mcp_session(&server);
    let args = json!({"orderId": "A-1001", "amountCents": 500});
    let anonymous = call(&server, &session, None, "refunds-issue", args.clone());
    assert_eq!(payload(&anonymous)["code"], "NOT_AUTHENTICATED");
    // A token the service does not know is refused at the transport, before MCP reads the body.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "refunds-issue", "arguments": args}})
    .to_string();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Authorization", "Bearer t-nobody"),
    ];
    let wrong = post(&server, &server.addr, &headers, &body);
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let challenge = wrong.header("WWW-Authenticate").unwrap_or_default();
    assert!(challenge.starts_with(r#"Bearer error="invalid_token""#), "{challenge}");
    assert!(!wrong.body.contains("t-nobody"), "{}", wrong.body);
    let sam = call(&server, &session, Some("t-sam"), "refunds-issue", args);
    assert_eq!(sam["isError"], false, "{sam}");
    assert_eq!(sam["structuredContent"]["amountCents"], 500);
}

/// `tickets-open` makes a second execution visible: one `Idempotency-Key` runs it once (the same
/// ticket), another key runs it again (a new ticket).
#[test]
fn one_idempotency_key_opens_one_ticket() {
    let server = crate::served::start(&[]);
    let open = |key: &str| {
        let body = serde_json::json!({"capability": "tickets.open", "input": {"subject": "Printer jam"}}).to_string();
        let r = crate::served::post(&server.addr, "/api/invoke", "127.0.0.1", &[("Idempotency-Key", key)], &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        v["output"]["ticketId"].as_str().expect("a ticket id").to_string()
    };
    let first = open("k-1");
    assert_eq!(open("k-1"), first, "the same key replays the same execution");
    assert_ne!(open("k-2"), first, "another key is another execution");
}

/// `GET path` on the server: the status, the head and the body.
fn get(server: &Server, path: &str) -> (u16, String, String) {
    get_as(server, path, &server.addr)
}

/// `GET path` with `Host: host` (the testing kit's client): the status, the header fields
/// (`name: value` lines) and the body.
fn get_as(server: &Server, path: &str, host: &str) -> (u16, String, String) {
    let r = agent_surface_testing::http::request_blocking(&server.addr, "GET", path, &[("Host", host)], b"");
    let head: String = r.headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    (r.status, head, r.body)
}

/// After a scripted mix of calls over MCP and the HTTP binding, `/metrics` (and `/api/metrics`)
/// serve the counts by capability, code, retry and transport, the phase-group durations, the
/// calls in flight and the store gauges, in the Prometheus text format.
#[test]
fn metrics_count_a_scripted_mix_of_calls() {
    let server = start();
    let invoke = |body: Value, key: Option<&str>| {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        served::post(&server.addr, "/api/invoke", &server.addr, &headers, &body.to_string())
    };
    for _ in 0..3 {
        assert_eq!(invoke(json!({"capability": "orders.get", "input": {"orderId": "A-1001"}}), None).status, 200);
    }
    assert_eq!(invoke(json!({"capability": "orders.get", "input": {"orderId": 7}}), None).status, 422);
    assert_eq!(invoke(json!({"capability": "made.up", "input": {}}), None).status, 404);
    // A destructive call asks for a confirmation (pending until a person decides).
    let asked = invoke(json!({"capability": "orders.cancel", "input": {"orderId": "A-1001"}}), Some("k-1"));
    assert_eq!(asked.status, 428, "{}", asked.body);
    let session = served::mcp_session(&server);
    let over_mcp = call(&server, &session, None, "orders-get", json!({"orderId": "A-1001"}));
    assert_eq!(over_mcp["isError"], false, "{over_mcp}");

    let (status, head, text) = get(&server, "/api/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    let value = |series: &str| text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
    let calls = |labels: &str| value(&format!("agent_surface_calls_total{{{labels}}}"));
    assert_eq!(calls(r#"capability="orders.get",code="OK",retry="none",transport="http""#), Some(3.0), "{text}");
    assert_eq!(calls(r#"capability="orders.get",code="OK",retry="none",transport="mcp""#), Some(1.0), "{text}");
    assert_eq!(
        calls(r#"capability="orders.get",code="INVALID_INPUT",retry="with-changes",transport="http""#),
        Some(1.0)
    );
    assert_eq!(
        calls(r#"capability="-",code="CAPABILITY_NOT_FOUND",retry="after-refresh",transport="http""#),
        Some(1.0)
    );
    assert_eq!(
        calls(r#"capability="orders.cancel",code="CONFIRMATION_REQUIRED",retry="with-confirmation",transport="http""#),
        Some(1.0)
    );
    assert!(!text.contains("made.up"), "agent-chosen names never become labels");
    assert!(
        text.contains(r#"agent_surface_call_duration_seconds_count{capability="orders.get",phase_group="execute"}"#),
        "{text}"
    );
    assert_eq!(value("agent_surface_confirmations_pending"), Some(1.0), "{text}");
    assert!(value(r#"agent_surface_store_entries{store="idempotency"}"#).is_some(), "{text}");
    // Durations are histograms (buckets aggregate across replicas).
    assert!(text.contains("agent_surface_call_duration_seconds_bucket{"), "{text}");
    // Behind the binding's host check, as every route.
    let (status, _, _) = get_as(&server, "/api/metrics", "evil.example");
    assert_eq!(status, 403);
}

/// Served with `--allowed-host`, a public name is admitted on both transports; others are not.
#[test]
fn an_allowed_host_is_admitted_on_both_transports() {
    let server = served::start(&["--allowed-host", "shop.example"]);
    let (status, head, _) = get_as(&server, "/api/capabilities", "shop.example");
    assert_eq!(status, 200, "{head}");
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "ping")];
    // Past the host check, MCP itself answers (here: the modern era's missing `_meta`).
    let r = served::post(&server.addr, "/mcp", "shop.example", &headers, &ping);
    assert_ne!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("\"jsonrpc\""), "{}", r.body);
    let (status, _, _) = get_as(&server, "/api/capabilities", "other.example");
    assert_eq!(status, 403);
    let r = served::post(&server.addr, "/mcp", "other.example", &headers, &ping);
    assert_eq!(r.status, 403, "{}", r.body);
}

/// The approval inbox admits the hosts the other routes admit (loopback and `--allowed-host`),
/// and no other: a page served under a rebound name reaches nothing.
#[test]
fn the_inbox_admits_the_allowed_hosts_only() {
    let server = served::start(&["--allowed-host", "shop.example", "--token", "t-maria=maria:approver"]);
    for host in [server.addr.as_str(), "shop.example"] {
        let (status, head, body) = get_as(&server, "/inbox/sign-in", host);
        assert_eq!(status, 200, "{host}: {head}");
        assert!(body.contains("id=\"sign-in\""), "{body}");
    }
    let (status, head, body) = get_as(&server, "/inbox/sign-in", "other.example");
    assert_eq!(status, 403, "{head}");
    assert!(body.contains("host-not-allowed"), "{body}");
}
