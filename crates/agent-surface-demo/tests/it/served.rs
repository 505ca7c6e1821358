//! `agent-surface-demo serve --http` as a child process, and the testing kit's HTTP/1.1 client
//! for it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use serde_json::json;

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

/// An HTTP response, read to the end (the testing kit's).
pub(crate) use agent_surface_testing::http::Response;

/// `POST path` with JSON `body` to `addr`, `Host: host` and extra `headers`; one request per
/// connection (the testing kit's client, which never half-closes its write side).
pub(crate) fn post(addr: &str, path: &str, host: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut all =
        vec![("Host", host), ("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    agent_surface_testing::http::request_blocking(addr, "POST", path, &all, body.as_bytes())
}

/// `GET path` from `addr` with extra `headers`; one request per connection.
pub(crate) fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, "GET", path, headers, b"")
}

/// `method path` to `addr` (also the `Host`) with extra `headers` and `body`; one request per
/// connection, the write side left open until the response is read (to its length, or its last
/// chunk, decoded: a server may keep the connection open regardless). The testing kit's client.
pub(crate) fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut all = vec![("Host", addr)];
    all.extend_from_slice(headers);
    agent_surface_testing::http::request_blocking(addr, method, path, &all, body)
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
