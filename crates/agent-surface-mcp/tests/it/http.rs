//! The streamable HTTP transport's own limits: legacy sessions are capped (and idle ones closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    counted_slow_registry().0
}

/// [`slow_registry`], and how many times its handler has started.
fn counted_slow_registry() -> (agent_surface_registry::Registry, Arc<AtomicUsize>) {
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    let registry = Registry::new(RegistryConfig::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    registry
        .define("work", move |t| {
            t.capability("write", "Take a while, then write.").effect(agent_surface_core::Effect::Write).raw_handler(
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
                None,
                move |_ctx: Ctx, input: serde_json::Value| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                        Ok::<_, agent_surface_core::AgentSurfaceError>(json!({"written": true}))
                    }
                },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    (registry, runs)
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

/// Reads `stream` into `seen` until `found` says what it needs is there (or the stream ends, or
/// five seconds pass).
async fn read_until(stream: &mut tokio::net::TcpStream, seen: &mut String, found: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buffer = [0u8; 4096];
    while !found(seen) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => seen.push_str(&String::from_utf8_lossy(&buffer[..n])),
            Err(_) => {}
        }
    }
}

/// A call whose `POST` connection dropped and whose client resumed its event stream with `GET`
/// and the `Last-Event-ID` of that stream holds the drain as the `POST` did: a shutdown lets the
/// call finish, and its answer reaches the resumed stream (a resumed request's stream is not an
/// idle stream the drain may end at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_request_stream_holds_the_drain_until_its_answer() {
    let (addr, shutdown, server) = serve_draining(slow_registry(), agent_surface_server::Limits::default()).await;
    let session = open_session(addr).await;
    let headers: String = session.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let body = legacy_write(2, 1_500);
    let mut posted = tokio::net::TcpStream::connect(addr).await.unwrap();
    let post = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    posted.write_all(post.as_bytes()).await.unwrap();
    // The stream's first event (its priming event) names the stream: `index/request`.
    let mut seen = String::new();
    let event_id = |seen: &str| {
        seen.lines()
            .find_map(|l| l.strip_prefix("id:").map(str::trim).filter(|id| id.contains('/')).map(str::to_string))
    };
    read_until(&mut posted, &mut seen, |s| event_id(s).is_some()).await;
    let last = event_id(&seen).unwrap_or_else(|| panic!("a request stream's event id: {seen:?}"));
    drop(posted);

    let mut resumed = tokio::net::TcpStream::connect(addr).await.unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{headers}Last-Event-ID: {last}\r\n\r\n"
    );
    resumed.write_all(get.as_bytes()).await.unwrap();
    let mut answer = String::new();
    read_until(&mut resumed, &mut answer, |s| s.contains("\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    shutdown.cancel();
    read_until(&mut resumed, &mut answer, |s| s.contains("written")).await;
    assert!(
        answer.contains(r#""isError":false"#) && answer.contains("written"),
        "the answer on the resumed stream: {answer}"
    );
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve_http returned").unwrap().unwrap();
}

/// Opens a legacy (2025-11-25) session: the headers of its later requests.
async fn open_session(addr: std::net::SocketAddr) -> Vec<(String, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ids", "version": "0"}}})
    .to_string();
    let (status, raw) = post(addr, &[], &init).await;
    assert_eq!(status, 200, "{raw}");
    let session = raw
        .lines()
        .find_map(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_string()))
        .expect("a session id");
    let headers =
        vec![("Mcp-Session-Id".to_string(), session), ("MCP-Protocol-Version".to_string(), "2025-11-25".to_string())];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, raw) = post_owned(addr, &headers, initialized).await;
    assert_eq!(status, 202, "{raw}");
    headers
}

/// [`post`] with owned headers, to be spawned.
async fn post_owned(addr: std::net::SocketAddr, headers: &[(String, String)], body: String) -> (u16, String) {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    post(addr, &headers, &body).await
}

/// A legacy `tools/call` of `work-write` taking `ms`, under JSON-RPC id `id`.
fn legacy_write(id: i64, ms: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "work-write", "arguments": {"ms": ms}}})
    .to_string()
}

/// A modern `tools/call` of `work-write` taking `ms`, under JSON-RPC id `id`, with `headers`
/// besides the modern ones.
async fn modern_write(addr: std::net::SocketAddr, id: i64, ms: u64, headers: &[(String, String)]) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "work-write",
        "arguments": {"ms": ms}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "ids", "version": "0"}}}})
    .to_string();
    let mut all: Vec<(String, String)> =
        [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "work-write")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    all.extend_from_slice(headers);
    post_owned(addr, &all, body).await
}

/// Whether `raw` is the refusal of a request whose id is in progress: HTTP `400` and the JSON-RPC
/// error `-32600` under that id.
#[track_caller]
fn check_in_progress(status: u16, raw: &str, id: i64) {
    assert_eq!(status, 400, "{raw}");
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"));
    assert_eq!(answer["id"], id, "{raw}");
    assert_eq!(answer["error"]["code"], -32600, "{raw}");
    assert_eq!(answer["error"]["message"], "A request with this id is already in progress", "{raw}");
}

/// Whether `raw` is `work-write`'s successful result.
#[track_caller]
fn check_written(status: u16, raw: &str) {
    assert_eq!(status, 200, "{raw}");
    assert!(raw.contains(r#""isError":false"#) && raw.contains("written"), "{raw}");
}

/// In a legacy session, a `tools/call` (or any request) under the id of a call still in progress
/// is refused (`-32600`) at once and never runs, and the first call still gets its own result at once (not
/// at the session's idle timeout); once it is answered, the id may be used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_id_in_a_legacy_session_is_refused_and_the_first_call_answered() {
    let (registry, runs) = counted_slow_registry();
    let (addr, shutdown, _) = serve(registry, McpHttpConfig::default()).await;
    let session = open_session(addr).await;
    let first = tokio::spawn({
        let session = session.clone();
        async move { post_owned(addr, &session, legacy_write(7, 800)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let (status, raw) = post_owned(addr, &session, legacy_write(7, 0)).await;
    check_in_progress(status, &raw, 7);
    assert!(started.elapsed() < Duration::from_millis(500), "refused at once: {:?}", started.elapsed());
    // Whatever its method: `rmcp` routes every answer by id.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}).to_string();
    let (status, raw) = post_owned(addr, &session, ping).await;
    check_in_progress(status, &raw, 7);
    let (status, raw) =
        tokio::time::timeout(Duration::from_secs(5), first).await.expect("the first call answered").unwrap();
    check_written(status, &raw);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the duplicate never ran");
    // Answered, the id is free again.
    let (status, raw) = tokio::time::timeout(Duration::from_secs(5), post_owned(addr, &session, legacy_write(7, 0)))
        .await
        .expect("answered");
    check_written(status, &raw);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    shutdown.cancel();
}

/// A legacy session ended with `DELETE` is answered `204`, which both official clients take as
/// ended (`rmcp` answers `202`; the Python SDK logs that as a failed termination), and is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_is_answered_no_content() {
    let (addr, shutdown, _) = serve(slow_registry(), McpHttpConfig::default()).await;
    let session = open_session(addr).await;
    let headers: Vec<(&str, &str)> = session.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ended = agent_surface_testing::http::request(addr, "DELETE", "/mcp", &headers, b"").await;
    assert_eq!(ended.status, 204, "{}", ended.body);
    assert!(ended.body.is_empty(), "{}", ended.body);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let (status, raw) = post_owned(addr, &session, ping).await;
    assert_eq!(status, 404, "the session is gone: {raw}");
    shutdown.cancel();
}

/// In the modern era a request has no session and is answered on its own HTTP response: two of
/// one user's clients numbering their requests alike are both served, and neither loses its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_requests_under_one_id_are_each_answered() {
    let (registry, runs) = counted_slow_registry();
    let (addr, shutdown) = serve_for_alice(registry).await;
    let alice = vec![("Authorization".to_string(), "Bearer t-alice".to_string())];
    let first = tokio::spawn({
        let alice = alice.clone();
        async move { modern_write(addr, 7, 800, &alice).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, raw) = tokio::time::timeout(Duration::from_secs(5), modern_write(addr, 7, 0, &alice))
        .await
        .expect("the second call answered");
    check_written(status, &raw);
    let (status, raw) = modern_write(addr, 7, 0, &[]).await;
    check_written(status, &raw);
    let (status, raw) =
        tokio::time::timeout(Duration::from_secs(5), first).await.expect("the first call answered").unwrap();
    check_written(status, &raw);
    assert_eq!(runs.load(Ordering::SeqCst), 3, "each request ran");
    shutdown.cancel();
}

/// A legacy session holds at most `max_requests_in_flight` requests in progress: one more is
/// refused (`-32600`, `data.maxRequestsInFlight`). A request's place is freed when its response
/// has been sent or its connection dropped; a `tools/call`'s id stays in progress while its call
/// runs (`rmcp` keeps the request's route until the call answers, and a request that reused the
/// id would take it), and is free once the call is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_a_bounded_number_of_ids_freed_when_the_connection_drops() {
    let (registry, runs) = counted_slow_registry();
    let http = McpHttpConfig { max_requests_in_flight: 1, ..McpHttpConfig::default() };
    let (addr, shutdown, _) = serve(registry, http).await;
    let session = open_session(addr).await;
    let first = tokio::spawn({
        let session = session.clone();
        async move { post_owned(addr, &session, legacy_write(1, 800)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, raw) = post_owned(addr, &session, legacy_write(2, 0)).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains(r#""code":-32600"#) && raw.contains(r#""maxRequestsInFlight":1"#), "{raw}");
    let (status, raw) = tokio::time::timeout(Duration::from_secs(5), first).await.expect("answered").unwrap();
    check_written(status, &raw);
    // A call whose client hangs up frees its place at once (its handler goes on), not its id.
    let mut dropped = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers: Vec<(&str, &str)> =
        [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
            .into_iter()
            .chain(session.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect();
    // (Its id is held from before `rmcp` routes the request until the handler is over, so the
    // checks below need the call to last, not to have started.)
    let bytes = agent_surface_testing::http::request_bytes("POST", "/mcp", &headers, legacy_write(3, 2_000).as_bytes());
    dropped.write_all(&bytes).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, raw) = post_owned(addr, &session, legacy_write(3, 0)).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains(r#""code":-32600"#) && raw.contains("already in progress"), "{raw}");
    let (status, raw) = tokio::time::timeout(Duration::from_secs(5), post_owned(addr, &session, legacy_write(4, 0)))
        .await
        .expect("answered");
    check_written(status, &raw);
    // Once the call whose client hung up is over, its id is free.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (status, raw) = loop {
        let (status, raw) = post_owned(addr, &session, legacy_write(3, 0)).await;
        if status != 400 || tokio::time::Instant::now() > deadline {
            break (status, raw);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    check_written(status, &raw);
    assert_eq!(runs.load(Ordering::SeqCst), 4, "all but the refused calls ran");
    shutdown.cancel();
}

/// Over streamable HTTP, an `Idempotency-Key` header is the call's invocation id, as on the HTTP
/// binding: the same key runs once (the repeat is answered with the first call's result, under
/// that id); another key runs again; a key that disagrees with `_meta`'s id, or is invalid, is
/// `-32602` and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_header_is_the_invocation_id() {
    let (registry, runs) = counted_slow_registry();
    let (addr, shutdown) = serve_for_alice(registry).await;
    let with_key = |key: &str| {
        vec![
            ("Authorization".to_string(), "Bearer t-alice".to_string()),
            ("Idempotency-Key".to_string(), key.to_string()),
        ]
    };
    let (status, first) = modern_write(addr, 1, 0, &with_key("order-7")).await;
    check_written(status, &first);
    assert!(first.contains(r#""agent-surface/invocationId":"order-7""#), "{first}");
    let (status, again) = modern_write(addr, 2, 0, &with_key("order-7")).await;
    check_written(status, &again);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the same key ran once");
    let (status, other) = modern_write(addr, 3, 0, &with_key("order-8")).await;
    check_written(status, &other);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "another key is another call");
    // Invalid, or two fields: a protocol error, and nothing runs.
    let twice = [with_key("a"), vec![("Idempotency-Key".to_string(), "b".to_string())]].concat();
    for bad in [with_key("caf\u{e9}"), twice] {
        let (status, raw) = modern_write(addr, 4, 0, &bad).await;
        assert!(raw.contains("-32602") && raw.contains("Idempotency-Key"), "{status}: {raw}");
    }
    // A key and a `_meta` id that differ: which one is meant is unknown, so nothing runs.
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "work-write",
        "arguments": {"ms": 0}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "ids", "version": "0"},
        "agent-surface/invocationId": "order-9"}}})
    .to_string();
    let mut headers = with_key("order-10");
    headers.extend(
        [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "work-write")]
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let (status, raw) = post_owned(addr, &headers, body).await;
    assert!(raw.contains("-32602") && raw.contains("differ"), "{status}: {raw}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    shutdown.cancel();
}

/// Serves `registry` over MCP's HTTP transport, where the bearer token `t-alice` signs in `alice`:
/// the address and the shutdown token.
async fn serve_for_alice(registry: agent_surface_registry::Registry) -> (std::net::SocketAddr, CancellationToken) {
    use agent_surface_policy::{BearerTokens, Identity};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let tokens = BearerTokens::new([("t-alice", Identity::new("alice"))]);
    let config = McpConfig { authenticator: Some(Arc::new(tokens)), ..McpConfig::default() };
    tokio::spawn(serve_http(registry, config, McpHttpConfig::default(), listener, shutdown.clone()));
    (addr, shutdown)
}

/// A JSON-RPC batch is refused whole (`400`, `-32600`) with no parser text, and a method name
/// with a bidi or control character is `-32601` without the name echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_and_an_unprintable_method_are_refused_plainly() {
    let (registry, runs) = counted_slow_registry();
    let (addr, shutdown) = serve_for_alice(registry).await;
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
    let (status, raw) = post(addr, &[("MCP-Protocol-Version", "2026-07-28")], batch).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains("-32600") && raw.contains("batches are not supported"), "{raw}");
    // No request id can be read from a batch: the answer has no `id` member (never `null`).
    assert!(!raw.contains("\"id\""), "{raw}");
    assert!(!raw.contains("line ") && !raw.contains("column"), "no parser text: {raw}");
    let bidi = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/\u{202e}llac"}).to_string();
    let (status, raw) = post(addr, &[("MCP-Protocol-Version", "2026-07-28")], &bidi).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains("-32601") && !raw.contains('\u{202e}') && !raw.contains("llac"), "{raw}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    shutdown.cancel();
}

/// A registry with `work.steps`: reports two progress steps, then answers.
fn stepping_registry() -> agent_surface_registry::Registry {
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("work", |t| {
            t.capability("steps", "Report two steps, then answer.")
                .effect(agent_surface_core::Effect::Read)
                .raw_handler(json!({"type": "object"}), None, |ctx: Ctx, _input: serde_json::Value| async move {
                    for step in 1..=2 {
                        ctx.progress(f64::from(step), Some(2.0), Some("step"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok::<_, agent_surface_core::AgentSurfaceError>(json!({"done": true}))
                });
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    registry
}

/// A modern `tools/call` of `work-steps`, with a progress token when `token` says so.
async fn modern_steps(addr: std::net::SocketAddr, token: bool) -> (u16, String) {
    let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "steps", "version": "0"}});
    if token {
        meta["progressToken"] = json!("p-1");
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "work-steps", "arguments": {}, "_meta": meta}})
    .to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "work-steps")];
    post(addr, &headers, &body).await
}

/// The `Content-Type` of a response [`post`] returned.
fn content_type(raw: &str) -> String {
    raw.lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| line.split_once(':').filter(|(name, _)| name.eq_ignore_ascii_case("content-type")))
        .map(|(_, value)| value.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// A modern request whose reply is one message is answered as plain JSON by default
/// (`McpHttpConfig::json_responses`): the body is the JSON-RPC response itself. A call that
/// reports progress is still answered as an event stream, the progress before the result; and
/// with the option off, every reply is an event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_single_reply_is_plain_json_and_progress_still_streams() {
    let (addr, shutdown, _server) = serve(stepping_registry(), McpHttpConfig::default()).await;
    let (status, raw) = modern_steps(addr, false).await;
    assert_eq!((status, content_type(&raw).as_str()), (200, "application/json"), "{raw}");
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"));
    assert_eq!((answer["id"].clone(), answer["result"]["isError"].clone()), (json!(9), json!(false)), "{raw}");
    assert_eq!(answer["result"]["structuredContent"], json!({"done": true}), "{raw}");

    let (status, raw) = modern_steps(addr, true).await;
    assert_eq!((status, content_type(&raw).as_str()), (200, "text/event-stream"), "{raw}");
    let events: Vec<serde_json::Value> = raw
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect();
    let progress: Vec<_> = events.iter().filter(|e| e["method"] == "notifications/progress").collect();
    let result = events.iter().position(|e| e["id"] == 9);
    assert_eq!(progress.len(), 2, "{raw}");
    assert!(result.is_some_and(|at| at == events.len() - 1), "the result comes last: {raw}");
    shutdown.cancel();

    let off = McpHttpConfig { json_responses: false, ..McpHttpConfig::default() };
    let (addr, shutdown, _server) = serve(stepping_registry(), off).await;
    let (status, raw) = modern_steps(addr, false).await;
    assert_eq!((status, content_type(&raw).as_str()), (200, "text/event-stream"), "{raw}");
    assert!(raw.contains(r#""done":true"#), "{raw}");
    shutdown.cancel();
}

/// In a legacy session, a call the client cancels (`notifications/cancelled`, on a `POST` of its
/// own) gets no answer (MCP forbids one), and its `POST`'s event stream ends at once rather than at
/// the session's idle timeout (`rmcp` closes the request's stream when it reads the cancellation):
/// the connection is released, and so is the id's place in the session (with room for one request
/// in progress, the next one is admitted and answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_legacy_call_ends_its_stream_and_frees_its_place() {
    let (registry, runs) = counted_slow_registry();
    let http = McpHttpConfig { max_requests_in_flight: 1, ..McpHttpConfig::default() };
    let (addr, shutdown, _) = serve(registry, http).await;
    let session = open_session(addr).await;
    let first = tokio::spawn({
        let session = session.clone();
        async move { post_owned(addr, &session, legacy_write(7, 30_000)).await }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while runs.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler is waiting");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "the user gave up"}})
    .to_string();
    let started = Instant::now();
    let (status, raw) = post_owned(addr, &session, cancel).await;
    assert_eq!(status, 202, "{raw}");
    let (status, raw) = tokio::time::timeout(Duration::from_secs(3), first)
        .await
        .expect("the cancelled call's stream ended, not at the session's idle timeout")
        .unwrap();
    assert_eq!(status, 200, "{raw}");
    assert!(!raw.contains(r#""result""#) && !raw.contains(r#""error""#), "no answer to a cancelled request: {raw}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // Its place is free: the session's one request in progress may be another one.
    let (status, raw) = tokio::time::timeout(Duration::from_secs(3), post_owned(addr, &session, legacy_write(8, 0)))
        .await
        .expect("the next request answered");
    check_written(status, &raw);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    shutdown.cancel();
}

/// A legacy session's malformed answer to the server's `elicitation/create` fails that request at
/// once, as over stdio: the call that asked is answered now (its `CONFIRMATION_REQUIRED`,
/// relayed), not after the elicitation timeout; the `POST` of the answer is refused (`400`, no
/// id). Both kinds: one the screen refuses (a repeated member), one `rmcp` cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_answer_to_an_elicitation_fails_it_at_once_over_http() {
    let f = fixture();
    let config = McpConfig {
        confirmations: Some(Arc::new(crate::support::Resolver(f.gate.clone()))),
        elicitation_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server =
        tokio::spawn(serve_http(f.registry.clone(), config, McpHttpConfig::default(), listener, shutdown.clone()));
    for (call, answer) in [
        (2, r#"{"jsonrpc":"2.0","id":ID,"result":{"action":"accept"},"result":{"action":"accept"}}"#),
        (3, r#"{"jsonrpc":"1.0","id":ID,"result":{"action":"accept"}}"#),
    ] {
        // A session of its own each (one that can elicit): the first's pending confirmation
        // stays with it.
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "e", "version": "0"}}});
        let (status, raw) = post(addr, &[], &init.to_string()).await;
        assert_eq!(status, 200, "{raw}");
        let session = raw
            .lines()
            .find_map(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_string()))
            .expect("a session id");
        let headers = vec![
            ("Mcp-Session-Id".to_string(), session),
            ("MCP-Protocol-Version".to_string(), "2025-11-25".to_string()),
        ];
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        assert_eq!(post_owned(addr, &headers, initialized).await.0, 202);
        let head: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        let body = json!({"jsonrpc": "2.0", "id": call, "method": "tools/call",
            "params": {"name": "store-delete", "arguments": {}}})
        .to_string();
        let mut posted = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{head}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        posted.write_all(request.as_bytes()).await.unwrap();
        let mut seen = String::new();
        let asked = |seen: &str| {
            seen.lines().filter_map(|l| l.strip_prefix("data:")).find_map(|d| {
                let v: serde_json::Value = serde_json::from_str(d.trim()).ok()?;
                (v["method"] == "elicitation/create").then(|| v["id"].clone())
            })
        };
        read_until(&mut posted, &mut seen, |s| asked(s).is_some()).await;
        let id = asked(&seen).unwrap_or_else(|| panic!("an elicitation on the call's stream: {seen}"));
        let started = Instant::now();
        let (status, raw) = post_owned(addr, &headers, answer.replace("ID", &id.to_string())).await;
        assert_eq!(status, 400, "{raw}");
        assert!(raw.contains(r#""code":-32600"#) && !raw.contains(r#""id":"#), "refused under no id: {raw}");
        let answered = format!(r#""id":{call}"#);
        read_until(&mut posted, &mut seen, |s| s.contains(&answered)).await;
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(seen.contains(&answered) && seen.contains("CONFIRMATION_REQUIRED"), "the call's answer: {seen}");
    }
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 0);
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), server).await.expect("served").unwrap().unwrap();
}

/// An anonymous caller of the modern era over HTTP has a consumer key of its own request, so a
/// two-phase confirmation could never be honoured (its repeat would be another caller's, and each
/// repeat would ask anew): the call is answered `NOT_AUTHENTICATED`, `notProcessed`, where it was
/// told to repeat the call once approved. A legacy session keeps its key, and is still told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_modern_caller_is_not_told_to_repeat_for_an_approval() {
    let f = fixture();
    let (addr, shutdown, _server) = serve(f.registry.clone(), McpHttpConfig::default()).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "store-delete",
        "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "anon", "version": "0"}}}})
    .to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "store-delete")];
    let (status, raw) = post(addr, &headers, &body).await;
    assert_eq!(status, 200, "{raw}");
    let payload = tool_error(&raw);
    assert_eq!(payload["code"], "NOT_AUTHENTICATED", "{raw}");
    assert_eq!(payload["notProcessed"], true, "{raw}");

    // The legacy session's key is the session's: its repeat can present the approval.
    let session = open_session(addr).await;
    let legacy = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "store-delete", "arguments": {}}})
    .to_string();
    let (status, raw) = post_owned(addr, &session, legacy).await;
    assert_eq!(status, 200, "{raw}");
    assert_eq!(tool_error(&raw)["code"], "CONFIRMATION_REQUIRED", "{raw}");
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 0);
    shutdown.cancel();
}

/// The error payload of the tool result in an answer `raw` (plain JSON, or one SSE event).
#[track_caller]
fn tool_error(raw: &str) -> serde_json::Value {
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim))
        .find(|data| !data.is_empty())
        .unwrap_or(body)
        .trim();
    let message: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {raw}"));
    assert_eq!(message["result"]["isError"], true, "{raw}");
    let text = message["result"]["content"][0]["text"].as_str().expect("a text content");
    serde_json::from_str(text).unwrap()
}
