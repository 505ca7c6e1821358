//! One JSON-RPC frame to the MCP server, over the stdio framing on an in-memory pipe.

use std::time::Duration;

use agent_surface_mcp::McpServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::fixture;

/// The largest frame the server accepts (larger ones are answered with `-32600`).
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// How long the server may take to answer; a healthy answer takes microseconds.
const PATIENCE: Duration = Duration::from_secs(10);

/// The id of the ping that follows the fuzzed frame.
const PING_ID: &str = "agent-surface-fuzz-ping";

const INITIALIZE: &[u8] = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent-surface-fuzz","version":"0"}}}
"#;

const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// Opens a legacy MCP session with the fixture's registry (`initialize`, then
/// `notifications/initialized`), sends `data` as one frame (its newlines turned into spaces, so
/// that it stays one line), then a ping, then closes the input.
///
/// Panics (a finding) unless every line the server writes is a JSON-RPC 2.0 message, the ping is
/// answered with an empty result, and the session ends cleanly once the input is closed — all
/// within 10 s.
///
/// ```
/// agent_surface_fuzz::mcp_frame(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
/// agent_surface_fuzz::mcp_frame(b"\xff not json");
/// ```
pub fn mcp_frame(data: &[u8]) {
    let mut frame: Vec<u8> = data.iter().map(|&b| if b == b'\n' { b' ' } else { b }).collect();
    frame.push(b'\n');
    fixture::with(|f| {
        f.runtime.block_on(async {
            let (client, server_io) = tokio::io::duplex(64 * 1024);
            let (read, write) = tokio::io::split(server_io);
            let server = McpServer::new(f.registry.clone(), f.mcp.clone());
            let session = tokio::spawn(agent_surface_mcp::serve_io(server, read, write, MAX_MESSAGE_BYTES));
            let (from_server, mut to_server) = tokio::io::split(client);
            let mut from_server = BufReader::new(from_server);

            send(&mut to_server, INITIALIZE).await;
            let init = receive(&mut from_server).await.unwrap_or_else(|| panic!("the server closed before initialize"));
            assert!(init["result"]["protocolVersion"].is_string(), "initialize failed: {init}");
            send(&mut to_server, INITIALIZED).await;

            send(&mut to_server, &frame).await;
            let ping = json!({"jsonrpc": "2.0", "id": PING_ID, "method": "ping"}).to_string() + "\n";
            send(&mut to_server, ping.as_bytes()).await;
            loop {
                let message = receive(&mut from_server)
                    .await
                    .unwrap_or_else(|| panic!("the server closed the session instead of answering the ping"));
                if message["id"] == PING_ID {
                    assert_eq!(message["result"], json!({}), "the server no longer answers ping: {message}");
                    break;
                }
            }

            to_server.shutdown().await.unwrap_or_else(|e| panic!("closing the input failed: {e}"));
            // Read to the end, so the server is never blocked on a full pipe while it winds down.
            while receive(&mut from_server).await.is_some() {}
            let ended = tokio::time::timeout(PATIENCE, session)
                .await
                .unwrap_or_else(|_| panic!("the session did not end within {PATIENCE:?} of the input closing"));
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("the session ended with an error: {e}"),
                Err(e) => panic!("the session task failed: {e}"),
            }
        });
    });
}

async fn send(to_server: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>, bytes: &[u8]) {
    let write = async {
        to_server.write_all(bytes).await?;
        to_server.flush().await
    };
    match tokio::time::timeout(PATIENCE, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("writing to the server failed: {e}"),
        Err(_) => panic!("the server stopped reading for {PATIENCE:?}"),
    }
}

/// The next message from the server (checked to be JSON-RPC 2.0), or `None` at the end.
async fn receive(from_server: &mut BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>) -> Option<Value> {
    let mut line = Vec::new();
    let read = tokio::time::timeout(PATIENCE, from_server.read_until(b'\n', &mut line))
        .await
        .unwrap_or_else(|_| panic!("the server did not answer within {PATIENCE:?}"))
        .unwrap_or_else(|e| panic!("reading from the server failed: {e}"));
    if read == 0 {
        return None;
    }
    let message: Value = serde_json::from_slice(&line).unwrap_or_else(|e| {
        panic!("the server wrote a line that is not JSON ({e}): {:?}", String::from_utf8_lossy(&line))
    });
    assert_eq!(message["jsonrpc"], "2.0", "the server wrote a message that is not JSON-RPC 2.0: {message}");
    let kinds = ["id", "method", "result", "error"].map(|k| message.get(k).is_some());
    assert!(
        kinds[1] || kinds[2] || kinds[3],
        "the server wrote a message that is neither a request, a notification nor an answer: {message}"
    );
    if let Some(error) = message.get("error") {
        assert!(
            error["code"].is_i64() && error["message"].is_string(),
            "a JSON-RPC error without code or message: {message}"
        );
    }
    if message["result"]["isError"] == true {
        tool_error_is_a_payload(&message);
    }
    Some(message)
}

/// A tool result with `isError: true` carries the payload as its only text block, which
/// round-trips, and no `structuredContent`.
#[track_caller]
fn tool_error_is_a_payload(message: &Value) {
    let result = &message["result"];
    assert!(result.get("structuredContent").is_none(), "a tool error with structuredContent: {message}");
    let blocks = result["content"].as_array().map(Vec::as_slice).unwrap_or_default();
    let [block] = blocks else { panic!("a tool error without exactly one content block: {message}") };
    let text = block["text"].as_str().unwrap_or_else(|| panic!("a tool error without a text block: {message}"));
    let payload: agent_surface_core::ErrorPayload =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("a tool error's text is not a payload ({e}): {message}"));
    assert_eq!(payload.to_wire_text(), text, "a tool error's text is not the payload's wire text: {message}");
    crate::check::payload_round_trips(&payload);
}
