//! `agent-surface-demo serve --http` as a child process, and a plain HTTP/1.1 client for it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A running `serve --http 127.0.0.1:0`; killed on drop.
pub(crate) struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
}

impl Server {
    /// The server process's id.
    #[allow(dead_code, reason = "used by the soak test binary, which shares this module")]
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL: no cleanup, no goodbye), as a crashed replica.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the demo's HTTP server with `args` added (e.g. `--token`), and waits for its address.
pub(crate) fn start(args: &[&str]) -> Server {
    let mut child = crate::demo()
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://").unwrap().strip_suffix("/mcp").unwrap().to_string();
    Server { child, addr }
}

/// An HTTP response, read to the end.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of a JSON or SSE body.
    pub(crate) fn messages(&self) -> Vec<Value> {
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

/// `POST path` with JSON `body` to `addr`, `Host: host` and extra `headers`; one request per
/// connection.
pub(crate) fn post(addr: &str, path: &str, host: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
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

/// `GET path` from `addr` with extra `headers`; one request per connection.
pub(crate) fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, "GET", path, headers, b"")
}

/// `method path` to `addr` (also the `Host`) with extra `headers` and `body` (a `Content-Length`
/// when there is one); one request per connection, the write side left open until the response
/// is read; a `chunked` body is decoded.
pub(crate) fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    // Read until the response is complete (a server may keep the connection open regardless).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !complete(&raw) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut rest = raw.get(split + 4..).unwrap_or_default();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let chunked =
        headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = String::from_utf8_lossy(&rest[..end]);
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
            rest = &rest[end + 2..];
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[..size.min(rest.len())]);
            rest = rest.get(size + 2..).unwrap_or_default();
        }
    } else {
        body.extend_from_slice(rest);
    }
    Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Whether `raw` holds a whole response: its head, and as much body as `Content-Length` says or
/// the last chunk of a `chunked` body. (A body delimited by the connection's end is never complete.)
fn complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let header = |name: &str| head.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    if let Some(length) = header("content-length:").and_then(|v| v.parse::<usize>().ok()) {
        return body.len() >= length;
    }
    header("transfer-encoding:") == Some("chunked")
        && (body.starts_with(b"0\r\n\r\n") || body.ends_with(b"\r\n0\r\n\r\n"))
}

/// An initialized MCP session on `/mcp`: its `Mcp-Session-Id`.
pub(crate) fn mcp_session(server: &Server) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "0"}}});
    let r = post(&server.addr, "/mcp", &server.addr, &[], &init.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.header("mcp-session-id").expect("a session id").to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let r = post(&server.addr, "/mcp", &server.addr, &headers, &initialized.to_string());
    assert!(r.status == 202 || r.status == 200, "{}", r.status);
    session
}
