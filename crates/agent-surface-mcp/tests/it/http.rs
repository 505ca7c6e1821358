//! The streamable HTTP transport's own limits: legacy sessions are capped (and idle ones closed).

use std::time::Duration;

use agent_surface_mcp::McpConfig;
use agent_surface_mcp::http::{HttpConfig, serve_http};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::support::fixture;

/// `POST /mcp` with `body` and extra `headers`: the status, the headers and the body.
async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut raw)).await;
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, raw)
}

/// Past `max_sessions`, a legacy `initialize` is refused with `503` and `Retry-After`; modern
/// (stateless) requests, which open no session, are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_are_capped() {
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let http = HttpConfig { max_sessions: 3, ..HttpConfig::default() };
    tokio::spawn(serve_http(f.registry.clone(), McpConfig::default(), http, listener, shutdown.clone()));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cap", "version": "0"}}})
    .to_string();
    for n in 0..3 {
        let (status, raw) = post(addr, &[], &init).await;
        assert_eq!(status, 200, "session {n}: {raw}");
        assert!(raw.to_ascii_lowercase().contains("mcp-session-id"), "{raw}");
    }
    let (status, raw) = post(addr, &[], &init).await;
    assert_eq!(status, 503, "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after: 5"), "{raw}");
    // An `initialize` dressed as the stateless era still opens a session: it is capped too.
    let modern_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "cap", "version": "0"}}})
    .to_string();
    let (status, raw) = post(addr, &[("MCP-Protocol-Version", "2026-07-28")], &modern_init).await;
    assert_eq!(status, 503, "{raw}");
    // A modern request needs no session.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "cap", "version": "0"}}}})
    .to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let (status, raw) = post(addr, &headers, &list).await;
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains("store-echo"), "{raw}");
    shutdown.cancel();
}

/// A body of many tiny JSON values is refused (`413`) before anything parses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_many_tiny_values_is_refused_unparsed() {
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let http = HttpConfig { max_body_bytes: 64 * 1024, ..HttpConfig::default() };
    tokio::spawn(serve_http(f.registry.clone(), McpConfig::default(), http, listener, shutdown.clone()));
    // 64 KiB admits 4,096 values; this body has 10,000 in 20 KB.
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"x","version":"0"}},"pad":[{}0]}}}}"#,
        "0,".repeat(10_000)
    );
    let (status, raw) = post(addr, &[], &body).await;
    assert_eq!(status, 413, "{raw}");
    shutdown.cancel();
}

/// Over HTTP too, a repeated member name is refused before parsing (a JSON-RPC error, `400`), and
/// nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_member_name_is_refused_over_http() {
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(serve_http(
        f.registry.clone(),
        McpConfig::default(),
        HttpConfig::default(),
        listener,
        shutdown.clone(),
    ));
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"store-count","name":"store-count","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"x","version":"0"}}}}"#;
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "store-count")];
    let (status, raw) = post(addr, &headers, body).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains("-32600"), "{raw}");
    assert_eq!(f.runs.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    shutdown.cancel();
}

/// On streamable HTTP, the caller's trace is the one in the MCP request's `_meta` (SEP-414; the
/// OpenTelemetry MCP conventions: the MCP and HTTP contexts are independent), not the
/// `traceparent` header of the HTTP request that carried it.
#[test]
fn over_http_the_trace_parent_is_the_meta_one_not_the_header() {
    let ((), log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let f = fixture();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let shutdown = CancellationToken::new();
            let server =
                serve_http(f.registry.clone(), McpConfig::default(), HttpConfig::default(), listener, shutdown.clone());
            tokio::spawn(server);
            let call = |meta: serde_json::Value| {
                let mut m = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "0"}});
                m.as_object_mut().unwrap().extend(meta.as_object().unwrap().clone());
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "store-count", "arguments": {}, "_meta": m}})
                .to_string()
            };
            let header = ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
            let headers = [
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "store-count"),
                header,
            ];
            let meta = json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
            let (status, raw) = post(addr, &headers, &call(meta)).await;
            assert_eq!(status, 200, "{raw}");
            let (status, raw) = post(addr, &headers, &call(json!({}))).await;
            assert_eq!(status, 200, "{raw}");
            shutdown.cancel();
        })
    });
    assert!(log.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736 parent_id=00f067aa0ba902b7"), "{log}");
    assert!(!log.contains("0af7651916cd43dd8448eb211c80319c"), "the header is not read: {log}");
}
