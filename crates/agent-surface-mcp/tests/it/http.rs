//! The streamable HTTP transport's own limits: legacy sessions are capped (and idle ones closed).

use std::time::Duration;

use agent_surface_mcp::McpConfig;
use agent_surface_mcp::http::{McpHttpConfig, serve_http};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::support::fixture;

/// `POST /mcp` with `body` and extra `headers` (the testing kit's client): the status, and the
/// header fields (`name: value` lines) and the body as one text.
async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    post_as(addr, "application/json", headers, body).await
}

/// [`post`] with this `Content-Type`.
async fn post_as(
    addr: std::net::SocketAddr,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut all = vec![("Content-Type", content_type), ("Accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    let r = agent_surface_testing::http::request(addr, "POST", "/mcp", &all, body.as_bytes()).await;
    let head: String = r.headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    (r.status, format!("{head}\r\n{}", r.body))
}

/// Past `max_sessions`, a legacy `initialize` is refused with `503` and `Retry-After`; modern
/// (stateless) requests, which open no session, are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_are_capped() {
    let f = fixture();
    let (addr, shutdown, _) =
        serve(f.registry.clone(), McpHttpConfig { max_sessions: 3, ..McpHttpConfig::default() }).await;
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

/// A message is JSON when its `Content-Type` parses (`mime`) to the essence `application/json`,
/// whatever the case and parameters; anything else is `415` before the body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_json_media_type_is_accepted() {
    let f = fixture();
    let (addr, shutdown, _) = serve(f.registry.clone(), McpHttpConfig::default()).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mime", "version": "0"}}})
    .to_string();
    for good in ["Application/JSON", "application/json; charset=utf-8", "application/json;charset=\"UTF-8\""] {
        let (status, raw) = post_as(addr, good, &[], &init).await;
        assert_eq!(status, 200, "{good}: {raw}");
    }
    for bad in ["text/plain", "application/jsonx", "application/json-seq", "application/json; charset=\"utf-8", "json"]
    {
        let (status, raw) = post_as(addr, bad, &[], &init).await;
        assert_eq!(status, 415, "{bad}: {raw}");
    }
    shutdown.cancel();
}

/// A body of many tiny JSON values is refused (`413`) before anything parses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_many_tiny_values_is_refused_unparsed() {
    let f = fixture();
    let http = McpHttpConfig { max_body_bytes: 64 * 1024, ..McpHttpConfig::default() };
    let (addr, shutdown, _) = serve(f.registry.clone(), http).await;
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
    let (addr, shutdown, _) = serve(f.registry.clone(), McpHttpConfig::default()).await;
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
            let server = serve_http(
                f.registry.clone(),
                McpConfig::default(),
                McpHttpConfig::default(),
                listener,
                shutdown.clone(),
            );
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

/// A registry with `work.write {ms}`: a write (not idempotent) that takes `ms` milliseconds.
fn slow_registry() -> agent_surface_registry::Registry {
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("work", |t| {
            t.capability("write", "Take a while, then write.").effect(agent_surface_core::Effect::Write).raw_handler(
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
                None,
                |_ctx: Ctx, input: serde_json::Value| async move {
                    tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                    Ok::<_, agent_surface_core::AgentSurfaceError>(json!({"written": true}))
                },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    registry
}

/// Serves `registry` over MCP's HTTP transport with `http`: the address, the shutdown token and the
/// server task.
async fn serve(
    registry: agent_surface_registry::Registry,
    http: McpHttpConfig,
) -> (std::net::SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_http(registry, McpConfig::default(), http, listener, shutdown.clone()));
    (addr, shutdown, server)
}

/// Serves `registry` with `limits`.
async fn serve_draining(
    registry: agent_surface_registry::Registry,
    limits: agent_surface_server::Limits,
) -> (std::net::SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    serve(registry, McpHttpConfig { limits, ..McpHttpConfig::default() }).await
}

/// A modern (stateless) `tools/call` of `work-write` taking `ms`.
async fn call_write(addr: std::net::SocketAddr, ms: u64) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "work-write",
        "arguments": {"ms": ms}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "drain", "version": "0"}}}})
    .to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "work-write")];
    post(addr, &headers, &body).await
}

/// A call started before the shutdown gets its result; a connection after it is refused; the
/// server returns once the call is answered, not at the drain timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_the_call_in_flight_finish_and_refuses_new_connections() {
    let (addr, shutdown, server) = serve_draining(slow_registry(), agent_surface_server::Limits::default()).await;
    let call = tokio::spawn(call_write(addr, 800));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "a connection after the shutdown is refused");
    let (status, raw) = call.await.unwrap();
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains(r#"\"written\":true"#) || raw.contains(r#""written":true"#), "{raw}");
    assert!(raw.contains(r#""isError":false"#), "{raw}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve_http returned").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

/// A call that outlives the drain timeout is cancelled by disposing the registry: a write whose
/// handler had started answers `EXECUTION_FAILED {reason: outcome-unknown}`, and the server
/// returns within about the timeout plus the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_drain_timeout_ends_outcome_unknown() {
    let registry = slow_registry();
    let limits = agent_surface_server::Limits { drain_timeout: Duration::from_millis(300), ..Default::default() };
    let (addr, shutdown, server) = serve_draining(registry.clone(), limits).await;
    let call = tokio::spawn(call_write(addr, 20_000));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve_http returned").unwrap().unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(1500), "{took:?}");
    let (status, raw) = call.await.unwrap();
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains("EXECUTION_FAILED") && raw.contains("outcome-unknown"), "{raw}");
    assert!(registry.is_disposed());
}

/// A legacy session's idle `GET` event stream does not hold the drain: with it open, a call in
/// flight on the session gets its result and the server returns right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_stream_does_not_hold_the_drain() {
    let (addr, shutdown, server) = serve_draining(slow_registry(), agent_surface_server::Limits::default()).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "drain", "version": "0"}}})
    .to_string();
    let (status, raw) = post(addr, &[], &init).await;
    assert_eq!(status, 200, "{raw}");
    let session = raw
        .lines()
        .find_map(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_string()))
        .expect("a session id");
    let session_headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, raw) = post(addr, &session_headers, &initialized).await;
    assert_eq!(status, 202, "{raw}");
    // The session's standalone event stream, held open and never read.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    stream.write_all(get.as_bytes()).await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "work-write", "arguments": {"ms": 600}}})
    .to_string();
    let owned: Vec<(String, String)> = session_headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let call = tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        post(addr, &headers, &call).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    shutdown.cancel();
    let (status, raw) = call.await.unwrap();
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains(r#""isError":false"#) && raw.contains("written"), "{raw}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve_http returned").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "the open stream did not hold it: {:?}", started.elapsed());
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the stream ended with the drain");
}
