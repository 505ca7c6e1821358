//! `agent-surface-demo serve --http` as a child process, and the testing kit's HTTP/1.1 client
//! for it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;

/// The most lines of the server's stderr kept, for a failing test to print.
const KEPT_LINES: usize = 200;

/// A running `serve --http 127.0.0.1:0`; killed on drop. Its stderr (the operator log) is kept,
/// its last lines, and printed when the test that holds it fails.
pub(crate) struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// Keeps the last [`KEPT_LINES`] lines `stderr` writes, read on a thread of its own.
fn keep_lines(stderr: std::process::ChildStderr) -> Arc<Mutex<VecDeque<String>>> {
    let kept = Arc::new(Mutex::new(VecDeque::new()));
    let lines = kept.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
            if lines.len() == KEPT_LINES {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    });
    kept
}

/// The stderr of a server this test runs on stdio, its last lines kept (read on a thread of its
/// own) and printed if the test that holds it fails.
#[allow(dead_code, reason = "the soak test binary, which shares this module, runs no stdio server")]
pub(crate) struct KeptStderr(Arc<Mutex<VecDeque<String>>>);

/// Keeps `child`'s stderr (spawned with `Stdio::piped()`), see [`KeptStderr`].
#[allow(dead_code, reason = "the soak test binary, which shares this module, runs no stdio server")]
pub(crate) fn keep_stderr(child: &mut Child) -> KeptStderr {
    KeptStderr(keep_lines(child.stderr.take().expect("the server's stderr is piped")))
}

impl Drop for KeptStderr {
    #[expect(clippy::print_stderr, reason = "a failing test shows the server's log with its own output")]
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the demo server's stderr, last lines ---\n{}---", kept_text(&self.0));
        }
    }
}

/// The kept lines, as one text.
fn kept_text(kept: &Mutex<VecDeque<String>>) -> String {
    kept.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|l| format!("{l}\n")).collect()
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
    #[expect(clippy::print_stderr, reason = "a failing test shows the server's log with its own output")]
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- the demo server's stderr, last lines ---\n{}---", kept_text(&self.stderr));
        }
    }
}

/// `--memory` when `args` choose no store: the tests start many servers at once, each a shop of
/// its own, where the default would have them all open `./agent-surface-data`.
pub(crate) fn in_memory_unless_chosen(args: &[&str]) -> Option<&'static str> {
    let chosen = args.iter().any(|a| matches!(*a, "--data" | "--memory" | "--redis" | "--postgres"));
    (!chosen).then_some("--memory")
}

/// Starts the demo's HTTP server with `args` added (e.g. `--token`), and waits for its address.
pub(crate) fn start(args: &[&str]) -> Server {
    start_with(crate::demo(), in_memory_unless_chosen(args), args)
}

/// Starts the demo's HTTP server in the working directory `dir` with exactly `args` (no store
/// chosen for it: without `--data`, `--memory` or `--redis` it keeps its state in
/// `dir/agent-surface-data`, the default), and waits for its address.
#[allow(dead_code, reason = "the soak test binary, which shares this module, starts none")]
pub(crate) fn start_in(dir: &std::path::Path, args: &[&str]) -> Server {
    let mut command = crate::demo();
    command.current_dir(dir);
    start_with(command, None, args)
}

/// `command` (the demo) as `serve --http 127.0.0.1:0` with `store` (if any) and `args`.
fn start_with(mut command: std::process::Command, store: Option<&str>, args: &[&str]) -> Server {
    let mut child = command
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(store)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = keep_lines(child.stderr.take().unwrap());
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let Some(addr) = line.trim().strip_prefix("listening on http://").and_then(|a| a.strip_suffix("/mcp")) else {
        let _ = child.kill();
        let _ = child.wait();
        // The reader thread has the whole of a dead process's stderr soon after it exits.
        std::thread::sleep(std::time::Duration::from_millis(200));
        panic!("the demo server did not start (it printed {line:?}); its stderr:\n{}", kept_text(&stderr));
    };
    Server { child, addr: addr.to_string(), stderr }
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
