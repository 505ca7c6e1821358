//! Raw frames against the stdio framing: every unusable frame but a notification or a response
//! gets a JSON-RPC error, and the server keeps serving.

use agent_surface_mcp::{McpConfig, McpServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::fixture;

struct Raw {
    runs: std::sync::Arc<crate::support::Runs>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    read: BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    server: tokio::task::JoinHandle<Result<(), agent_surface_mcp::ServeError>>,
}

impl Raw {
    async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
        self.write.flush().await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), self.read.read_line(&mut line)).await;
        read.expect("an answer within 5 s").unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
    }
}

async fn start(max: usize) -> Raw {
    let f = fixture();
    let runs = f.runs.clone();
    let (client, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    let server = McpServer::new(f.registry.clone(), McpConfig::default());
    // The fixture's mounts live in the registry's state only while `f` lives; keep it alive.
    let server = tokio::spawn(async move {
        let _f = f;
        agent_surface_mcp::serve_io(server, read, write, max).await
    });
    let (r, w) = tokio::io::split(client);
    let mut raw = Raw { runs, write: w, read: BufReader::new(r), server };
    raw.send(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}
"#,
    )
    .await;
    let init = raw.recv().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await;
    raw
}

#[track_caller]
fn check_error(answer: &Value, code: i64, id: Value) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert_eq!(answer["id"], id, "{answer}");
    // An id that could not be read is left out, not `null` (MCP's schema has no null id).
    if id.is_null() {
        assert!(answer.get("id").is_none(), "{answer}");
    }
}

#[tokio::test]
async fn every_unusable_frame_is_answered_and_the_server_keeps_running() {
    let mut raw = start(4096).await;

    raw.send(b"this is not json\n").await;
    check_error(&raw.recv().await, -32700, Value::Null);

    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\n").await;
    check_error(&raw.recv().await, -32700, Value::Null);

    raw.send(b"\xff\xfe\x00garbage\n").await;
    check_error(&raw.recv().await, -32700, Value::Null);

    raw.send(b"[1,2,3]\n").await;
    check_error(&raw.recv().await, -32600, Value::Null);

    raw.send(b"{\"id\":2,\"method\":\"ping\"}\n").await;
    check_error(&raw.recv().await, -32600, json!(2));

    raw.send(b"{\"jsonrpc\":\"1.0\",\"id\":3,\"method\":\"ping\"}\n").await;
    check_error(&raw.recv().await, -32600, json!(3));

    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":7}\n").await;
    check_error(&raw.recv().await, -32602, json!(4));

    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":\"five\",\"method\":\"no/such/method\",\"params\":{}}\n").await;
    check_error(&raw.recv().await, -32601, json!("five"));

    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":7}}\n").await;
    check_error(&raw.recv().await, -32602, json!(9));

    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"prompts/list\"}\n").await;
    check_error(&raw.recv().await, -32601, json!(10));

    // A malformed notification is never answered; the next request is. Nor is a malformed
    // response (to one of the server's requests: its id is the server's, and an error under it
    // would read as the answer to a client request of that id).
    raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":5}\n").await;
    raw.send(b"{\"id\":6,\"result\":{\"action\":\"accept\"}}\n").await;
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":6,\"error\":{\"code\":\"x\"}}\n").await;

    let big = format!("{{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\",\"pad\":\"{}\"}}\n", "x".repeat(10_000));
    raw.send(big.as_bytes()).await;
    let answer = raw.recv().await;
    check_error(&answer, -32600, Value::Null);
    assert_eq!(answer["error"]["data"]["maxMessageBytes"], 4096);

    // An oversized line arriving in pieces, without a newline for a while, is skipped too.
    raw.send(&vec![b'y'; 6000]).await;
    raw.send(&vec![b'z'; 6000]).await;
    raw.send(b"\n").await;
    check_error(&raw.recv().await, -32600, Value::Null);

    // A frame within the size limit but made of more JSON values than one per 16 bytes of it
    // (parsed, it would take many times its size) is refused unparsed.
    let many = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\",\"params\":{{\"pad\":[{}0]}}}}\n",
        "0,".repeat(300)
    );
    assert!(many.len() < 4096);
    raw.send(many.as_bytes()).await;
    let answer = raw.recv().await;
    check_error(&answer, -32600, Value::Null);
    assert_eq!(answer["error"]["data"]["maxMessageValues"], 256);

    // A member name repeated in one object is refused (serde_json would keep the last one; the
    // HTTP binding refuses it too), and a method name too long to be one is not echoed.
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"store-echo\",\"name\":\"store-delete\",\"arguments\":{}}}\n").await;
    check_error(&raw.recv().await, -32600, json!(12));
    // A response with a repeated member is refused without its id.
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{},\"result\":{}}\n").await;
    check_error(&raw.recv().await, -32600, Value::Null);
    let long = format!("{{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"{}\"}}\n", "m".repeat(3000));
    raw.send(long.as_bytes()).await;
    let answer = raw.recv().await;
    check_error(&answer, -32601, json!(13));
    assert!(answer.to_string().len() < 200, "the method name is not echoed: {answer}");

    // A second initialize (naming another version) is refused; the session keeps its era
    // (found by fuzzing: answered, it switched the session to the stateless era).
    raw.send(br#"{"jsonrpc":"2.0","id":14,"method":"initialize","params":{"protocolVersion":"3232-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"x","version":"1"}}}
"#).await;
    check_error(&raw.recv().await, -32600, json!(14));

    // Blank lines are ignored; the server still answers a ping and a tool call.
    raw.send(b"\n\r\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n").await;
    assert_eq!(raw.recv().await, json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"store-echo\",\"arguments\":{\"text\":\"still here\"}}}\n").await;
    let answer = raw.recv().await;
    assert_eq!(answer["id"], 8);
    assert_eq!(answer["result"]["structuredContent"], json!({"text": "still here"}));
    assert!(!raw.server.is_finished());

    // Closing the input ends the session cleanly.
    raw.write.shutdown().await.unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), raw.server).await.unwrap().unwrap();
    assert!(ended.is_ok(), "{ended:?}");
}

/// Requests reusing the id of a request still in progress are refused (`-32600`, with that id)
/// rather than run, whatever their method; the first request keeps its id — it can still be
/// cancelled — and once it is over the id may be used again.
#[tokio::test]
async fn a_duplicate_id_of_a_call_in_progress_is_refused() {
    use std::sync::atomic::Ordering;
    let mut raw = start(1 << 16).await;
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{\"name\":\"store-slow\",\"arguments\":{}}}\n").await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for method in ["tools/call", "tools/call", "ping", "tools/list"] {
        let params = if method == "tools/call" { r#","params":{"name":"store-count","arguments":{}}"# } else { "" };
        raw.send(format!("{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"{method}\"{params}}}\n").as_bytes()).await;
        check_error(&raw.recv().await, -32600, json!(42));
    }
    assert_eq!(raw.runs.0.load(Ordering::SeqCst), 0, "no duplicate ran");
    // The first call can still be cancelled: its handler sees it.
    raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":42}}\n").await;
    for _ in 0..100 {
        if raw.runs.0.load(Ordering::SeqCst) >= 100 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(raw.runs.0.load(Ordering::SeqCst), 100, "the first call was cancelled");
    // Its id is free again once its handler is over (refused until then); its own answer is
    // never sent.
    let mut answer = Value::Null;
    for _ in 0..100 {
        raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{\"name\":\"store-count\",\"arguments\":{}}}\n").await;
        answer = raw.recv().await;
        if answer["error"]["code"] != -32600 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(answer["id"], 42, "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["runs"], 101, "{answer}");
}

/// A handler that takes the time its call asks for (`{"ms": N}`), whether cancelled or not, and
/// answers with the tool's name.
struct Sluggish;

impl rmcp::ServerHandler for Sluggish {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let ms = request.arguments.as_ref().and_then(|a| a.get("ms")).and_then(Value::as_u64).unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        let text = rmcp::model::ContentBlock::text(request.name.to_string());
        Ok(rmcp::model::CallToolResult::success(vec![text]).into())
    }
}

/// A cancelled request keeps its id until its handler has really finished: `rmcp` routes answers
/// by id, so a request reusing it earlier would be given the cancelled one's answer (and lose its
/// own). The reuse is refused (`-32600`) like any id in progress, the cancelled request's answer
/// is not sent, and once its handler is over the id serves again.
#[tokio::test]
async fn a_cancelled_request_keeps_its_id_until_its_handler_is_over() {
    let (client, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(agent_surface_mcp::serve_io(Sluggish, read, write, 1 << 16));
    let (r, w) = tokio::io::split(client);
    let mut raw =
        Raw { runs: Default::default(), write: w, read: BufReader::new(r), server: tokio::spawn(async { Ok(()) }) };
    raw.send(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}
"#,
    )
    .await;
    raw.recv().await;
    raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await;
    let call = |name: &str, ms: u64| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{{\"name\":\"{name}\",\"arguments\":{{\"ms\":{ms}}}}}}}\n"
        )
    };
    raw.send(call("first", 300).as_bytes()).await;
    raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}\n").await;
    raw.send(call("second", 600).as_bytes()).await;
    let answer = raw.recv().await;
    check_error(&answer, -32600, json!(5));
    // The first handler ends (its answer is not sent); then the id serves again (refused until
    // then, however long a loaded machine takes to end it).
    let mut answer = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        raw.send(call("third", 0).as_bytes()).await;
        answer = raw.recv().await;
        if answer["error"]["code"] != -32600 {
            break;
        }
    }
    assert_eq!(answer["id"], 5, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "third", "{answer}");
}

/// A malformed answer to the server's `elicitation/create` fails that request at once: the call
/// that asked is answered now (its `CONFIRMATION_REQUIRED`, relayed), not after waiting out the
/// elicitation timeout for an answer that came and could not be read; and the client is sent
/// nothing under the server's id. Both kinds: one the screen refuses (a repeated member) and one
/// that does not parse (another JSON-RPC version).
#[tokio::test]
async fn a_malformed_answer_to_an_elicitation_fails_it_at_once() {
    use agent_surface_mcp::codec;
    use std::sync::Arc;

    for (n, answer) in [
        r#"{"jsonrpc":"2.0","id":ID,"result":{"action":"accept"},"result":{"action":"accept"}}"#,
        r#"{"jsonrpc":"1.0","id":ID,"result":{"action":"accept"}}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let f = fixture();
        let config = McpConfig {
            confirmations: Some(Arc::new(crate::support::Resolver(f.gate.clone()))),
            elicitation_timeout: std::time::Duration::from_secs(60),
            ..Default::default()
        };
        let (client, server_io) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server_io);
        let server = McpServer::new(f.registry.clone(), config);
        let runs = f.runs.clone();
        let server = tokio::spawn(async move {
            let _f = f;
            agent_surface_mcp::serve_io(server, read, write, 1 << 16).await
        });
        let (r, w) = tokio::io::split(client);
        let mut raw = Raw { runs, write: w, read: BufReader::new(r), server };
        raw.send(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"0"}}}
"#).await;
        raw.recv().await;
        raw.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await;
        raw.send(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"store-delete","arguments":{}}}
"#,
        )
        .await;
        let asked = raw.recv().await;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        let answer = answer.replace("ID", &asked["id"].to_string());
        let started = std::time::Instant::now();
        raw.send(format!("{answer}\n").as_bytes()).await;
        let mut next = raw.recv().await;
        if n == 0 {
            // The screen's refusal, under no id.
            check_error(&next, -32600, Value::Null);
            next = raw.recv().await;
        }
        assert_eq!(next["id"], 1, "the call's answer, nothing under the server's id: {next}");
        let result: rmcp::model::CallToolResult = serde_json::from_value(next["result"].clone()).unwrap();
        let payload = codec::decode(&result).unwrap();
        assert_eq!(payload.code(), Some(agent_surface_core::ErrorCode::ConfirmationRequired), "{next}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!(raw.runs.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

/// A malformed response before the handshake names no request of the server's (it has asked
/// nothing yet): it is refused as any unusable frame, and the server goes on to its handshake
/// (`rmcp` would end the connection on anything but `initialize`).
#[tokio::test]
async fn a_malformed_response_before_the_handshake_does_not_end_the_connection() {
    for early in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"result\":{}}\n"[..],
        &b"{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}\n"[..],
    ] {
        let f = fixture();
        let (client, server_io) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server_io);
        let server = McpServer::new(f.registry.clone(), McpConfig::default());
        let runs = f.runs.clone();
        let server = tokio::spawn(async move {
            let _f = f;
            agent_surface_mcp::serve_io(server, read, write, 1 << 16).await
        });
        let (r, w) = tokio::io::split(client);
        let mut raw = Raw { runs, write: w, read: BufReader::new(r), server };
        raw.send(early).await;
        raw.send(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}
"#).await;
        let mut answer = raw.recv().await;
        if answer.get("error").is_some() {
            // The refusal of the early frame, under no id.
            check_error(&answer, -32600, Value::Null);
            answer = raw.recv().await;
        }
        assert_eq!(answer["result"]["protocolVersion"], "2025-11-25", "{answer}");
        assert!(!raw.server.is_finished());
    }
}
