//! `agent-surface-demo serve --http`: raw HTTP/1.1 against the streamable HTTP transport.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let mut child = crate::demo()
        .args(["serve", "--http", "127.0.0.1:0", "--token", "t-sam=sam:support"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("listening on http://").unwrap().to_string();
    let addr = url.strip_suffix("/mcp").unwrap().to_string();
    Server { child, addr }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of a JSON or SSE body.
    fn messages(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str(&self.body) {
            return vec![v];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }
}

fn post(server: &Server, host: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let _ = stream.write_all(body.as_bytes());
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Response { status, headers, body: body.to_string() }
}

fn initialize(server: &Server) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "0"}}});
    let r = post(server, &server.addr, &[], &init.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.header("mcp-session-id").expect("a session id").to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = post(
        server,
        &server.addr,
        &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")],
        &initialized.to_string(),
    );
    assert!(r.status == 202 || r.status == 200, "{}", r.status);
    session
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
    let session = initialize(&server);
    let args = json!({"orderId": "A-1001", "amountCents": 500});
    let anonymous = call(&server, &session, None, "refunds-issue", args.clone());
    assert_eq!(payload(&anonymous)["code"], "NOT_AUTHENTICATED");
    let wrong = call(&server, &session, Some("t-nobody"), "refunds-issue", args.clone());
    assert_eq!(payload(&wrong)["code"], "NOT_AUTHENTICATED");
    let sam = call(&server, &session, Some("t-sam"), "refunds-issue", args);
    assert_eq!(sam["isError"], false, "{sam}");
    assert_eq!(sam["structuredContent"]["amountCents"], 500);
}
