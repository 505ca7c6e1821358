//! `serve` as an operator runs it: the operator log on stderr (`RUST_LOG`, JSON lines) and the
//! drain on SIGTERM / Ctrl-C, against the real process.
//!
//! No verdict here hangs on the machine's speed: a signal is sent once the call it must find in
//! flight is seen in flight (the `agent_surface_calls_in_flight` gauge; over stdio, the answer to
//! a request sent after it), and "it did not wait for the drain deadline" is told apart from "it
//! exited promptly" by a deadline of ten minutes against a wait of at most [`EXIT_WITHIN`]. The
//! server's stderr is printed when a test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::served::{self, Response};

/// How long a server may take to exit once it has nothing left to wait for: generous, as a loaded
/// machine can take seconds to end a process. A server that waited out a drain deadline of ten
/// minutes (`LONG_DRAIN`) would take far longer.
const EXIT_WITHIN: Duration = Duration::from_secs(120);

/// A drain deadline no test waits out.
const LONG_DRAIN: &str = "600000";

/// A running `serve --http 127.0.0.1:0` whose stderr is collected; killed on drop, and its stderr
/// printed if the test is failing.
struct Operated {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Starts the server with `args` and `env` (`RUST_LOG` and the format are unset unless given).
fn start(args: &[&str], env: &[(&str, &str)]) -> Operated {
    let mut command = crate::demo();
    command.args(["serve", "--http", "127.0.0.1:0"]).args(crate::served::in_memory_unless_chosen(args)).args(args);
    command.env_remove("RUST_LOG").env_remove("AGENT_SURFACE_LOG_FORMAT").envs(env.iter().copied());
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let (lines, pipe) = (stderr.clone(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line);
        }
    });
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr =
        line.trim().strip_prefix("listening on http://").and_then(|a| a.strip_suffix("/mcp")).unwrap_or_default();
    // Dropped while the test fails: the server's stderr is printed.
    let server = Operated { child, addr: addr.to_string(), stderr, reader: Some(reader) };
    assert!(!server.addr.is_empty(), "the server did not start (it printed {line:?})");
    server
}

impl Operated {
    /// Sends SIGTERM (or `-INT`), as `kill` does.
    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill").args([signal, &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit (at most `limit`): its status and how long it took.
    fn exit_within(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, start.elapsed());
            }
            assert!(start.elapsed() < limit, "still running after {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server and returns everything it wrote on stderr.
    fn stop(mut self) -> Vec<String> {
        self.signal("-TERM");
        let (status, _) = self.exit_within(EXIT_WITHIN);
        assert!(status.success(), "{status}");
        self.reader.take().unwrap().join().unwrap();
        self.stderr.lock().unwrap().clone()
    }

    /// How many calls the server has in flight (the `agent_surface_calls_in_flight` gauge,
    /// every transport).
    fn in_flight(&self) -> f64 {
        let metrics = served::get(&self.addr, "/api/metrics", &[]).body;
        metrics
            .lines()
            .filter(|l| l.starts_with("agent_surface_calls_in_flight"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits until a call is in flight (one another thread started).
    fn await_a_call_in_flight(&self) {
        let deadline = Instant::now() + EXIT_WITHIN;
        while self.in_flight() < 1.0 {
            assert!(Instant::now() < deadline, "no call in flight within {EXIT_WITHIN:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `POST /api/invoke` of `capability` with `input` (and an `Idempotency-Key`, if given).
    fn invoke(&self, capability: &str, input: Value, key: Option<&str>) -> Response {
        let body = json!({"capability": capability, "input": input}).to_string();
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        served::post(&self.addr, "/api/invoke", "127.0.0.1", &headers, &body)
    }
}

impl Drop for Operated {
    #[expect(clippy::print_stderr, reason = "a failing test shows the server's log with its own output")]
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // The reader has the whole of a dead process's stderr once the pipe closes.
            if let Some(reader) = self.reader.take() {
                let _ = reader.join();
            }
            let log = self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).join("\n");
            eprintln!("--- the demo server's stderr ---\n{log}\n---");
        }
    }
}

/// The correlation id the HTTP binding answered with.
fn correlation_id(r: &Response) -> String {
    r.header("agent-surface-correlation-id").expect("a correlation id").to_string()
}

#[test]
fn rust_log_makes_each_calls_debug_event_appear() {
    let server = start(&[], &[("RUST_LOG", "agent_surface=debug")]);
    let r = server.invoke("orders.get", json!({"orderId": "A-1001"}), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let id = correlation_id(&r);
    let log = server.stop();
    let line = log.iter().find(|l| l.contains(&id)).unwrap_or_else(|| panic!("no line with {id}: {log:#?}"));
    assert!(line.contains("DEBUG") && line.contains("agent_surface::invoke"), "{line}");
}

/// Under the default filter, a failed call's JSON line has its code and, from the call's span,
/// its correlation id (the span is INFO, and kept whatever the filter).
#[test]
fn json_lines_carry_the_code_and_the_correlation_id() {
    let server = start(&[], &[("AGENT_SURFACE_LOG_FORMAT", "json")]);
    let r = server.invoke("reports.export", json!({}), None);
    assert_eq!(r.status, 500, "{}", r.body);
    let id = correlation_id(&r);
    let log = server.stop();
    let lines: Vec<Value> =
        log.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    let event = lines
        .iter()
        .find(|l| l["target"] == "agent_surface::invoke" && l["span"]["correlation_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no event for {id}: {log:#?}"));
    assert_eq!(event["level"], "ERROR", "a panic is the service's fault: {event}");
    assert_eq!(event["fields"]["code"], "EXECUTION_FAILED");
    assert_eq!(event["fields"]["phase"], "execute");
    assert_eq!(event["span"]["capability"], "reports.export");
    assert!(
        lines
            .iter()
            .any(|l| l["target"] == "agent_surface::panic"
                && l["fields"]["message"].as_str().unwrap().starts_with("panic")),
        "{log:#?}"
    );
}

#[test]
fn by_default_only_warnings_and_errors_are_logged() {
    let server = start(&[], &[]);
    let refused = server.invoke("refunds.issue", json!({"orderId": "A-1001", "amountCents": 500}), None);
    assert_eq!(refused.status, 401, "an INFO event");
    let panicked = server.invoke("reports.export", json!({}), None);
    assert_eq!(panicked.status, 500, "an ERROR event");
    let log = server.stop();
    assert!(log.iter().all(|l| !l.contains(" INFO ") && !l.contains(" DEBUG ")), "{log:#?}");
    assert!(log.iter().any(|l| l.contains(" ERROR ") && l.contains(&correlation_id(&panicked))), "{log:#?}");
}

#[test]
fn an_invalid_rust_log_is_one_warning_and_the_default_filter() {
    let server = start(&[], &[("RUST_LOG", "agent_surface=loud")]);
    let r = server.invoke("refunds.issue", json!({"orderId": "A-1001", "amountCents": 500}), None);
    assert_eq!(r.status, 401, "still serving");
    let log = server.stop();
    let warnings: Vec<_> = log.iter().filter(|l| l.contains("RUST_LOG")).collect();
    assert_eq!(warnings.len(), 1, "{log:#?}");
    assert!(warnings[0].contains(" WARN ") && warnings[0].contains("`warn`"), "{}", warnings[0]);
    assert!(log.iter().all(|l| !l.contains(" INFO ")), "{log:#?}");
}

/// A signal sent as soon as the server says it is listening drains it (exit 0): its handlers are
/// installed before it prints that line, so the signal never finds the process without them (SIGTERM's
/// default action would end it unclean). Five times, as the window this closes was narrow.
#[test]
fn a_signal_as_soon_as_the_server_listens_drains_it() {
    for _ in 0..5 {
        let mut server = start(&[], &[]);
        server.signal("-TERM");
        let (status, _) = server.exit_within(EXIT_WITHIN);
        assert_eq!(status.code(), Some(0), "{status}");
    }
}

/// Whether a request sent now finds the server gone: the connection is refused, or closed with
/// no answer.
fn refused(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else { return true };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = stream.write_all(b"GET /api/capabilities HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.is_empty()
}

/// A slow write started before SIGTERM completes with its result; a request after it is refused
/// while that call is still in flight; the process exits 0 once the call is answered, not at the
/// drain deadline (ten minutes).
#[test]
fn sigterm_lets_the_call_in_flight_finish_and_refuses_new_ones() {
    let args = ["--ticket-delay-ms", "5000", "--drain-ms", LONG_DRAIN];
    let mut server = start(&args, &[("RUST_LOG", "agent_surface=debug")]);
    let addr = server.addr.clone();
    let call = std::thread::spawn(move || {
        let body = json!({"capability": "tickets.open", "input": {"subject": "Printer jam"}}).to_string();
        served::post(&addr, "/api/invoke", "127.0.0.1", &[("Idempotency-Key", "slow-1")], &body)
    });
    server.await_a_call_in_flight();
    server.signal("-TERM");
    let deadline = Instant::now() + EXIT_WITHIN;
    while !refused(&server.addr) {
        assert!(Instant::now() < deadline, "requests are still taken {EXIT_WITHIN:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Refused by the draining server, not by a process that is gone.
    assert!(!call.is_finished() || server.child.try_wait().unwrap().is_none(), "refused while the call ran");
    let answer = call.join().unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let v: Value = serde_json::from_str(&answer.body).unwrap();
    assert!(v["output"]["ticketId"].is_string(), "{v}");
    let (status, _) = server.exit_within(EXIT_WITHIN);
    assert_eq!(status.code(), Some(0));
}

/// A call that outlives `--drain-ms` is cancelled when the deadline passes: a write whose handler
/// had started answers `EXECUTION_FAILED {reason: outcome-unknown}`, and the process exits 0
/// after the deadline, without waiting for the handler (ten minutes).
#[test]
fn a_call_that_outlives_the_drain_deadline_ends_outcome_unknown() {
    let mut server = start(&["--ticket-delay-ms", "600000", "--drain-ms", "2000"], &[]);
    let addr = server.addr.clone();
    let call = std::thread::spawn(move || {
        let body = json!({"capability": "tickets.open", "input": {"subject": "Printer jam"}}).to_string();
        served::post(&addr, "/api/invoke", "127.0.0.1", &[("Idempotency-Key", "slow-2")], &body)
    });
    // In flight, and within the two seconds of the deadline in its handler.
    server.await_a_call_in_flight();
    let signalled = Instant::now();
    server.signal("-TERM");
    let (status, _) = server.exit_within(EXIT_WITHIN);
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(took >= Duration::from_secs(2), "not before the deadline: {took:?}");
    let answer = call.join().unwrap();
    let v: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {:?}", answer.body));
    assert_eq!(v["code"], "EXECUTION_FAILED", "{v}");
    assert_eq!(v["details"]["reason"], "outcome-unknown", "{v}");
    server.reader.take().unwrap().join().unwrap();
    let log = server.stderr.lock().unwrap().clone();
    assert!(log.iter().any(|l| l.contains("drain over")), "the operator sees the cut: {log:#?}");
}

/// Over MCP HTTP, a legacy session's open event stream does not hold the drain: the call in
/// flight gets its result, then the process exits.
#[test]
fn an_mcp_call_in_flight_gets_its_result_and_an_idle_session_stream_does_not_hold_the_drain() {
    let mut server = start(&["--ticket-delay-ms", "1500", "--drain-ms", LONG_DRAIN], &[]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "0"}}});
    let r = served::post(&server.addr, "/mcp", &server.addr, &[], &init.to_string());
    let session = r.header("mcp-session-id").expect("a session id").to_string();
    // The session's standalone event stream, held open and never read.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
        server.addr
    );
    stream.write_all(get.as_bytes()).unwrap();
    let addr = server.addr.clone();
    let call = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "tickets-open", "arguments": {"subject": "Printer jam"}}});
        let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
        served::post(&addr, "/mcp", &addr, &headers, &body.to_string())
    });
    server.await_a_call_in_flight();
    server.signal("-INT");
    let answer = call.join().unwrap();
    let result = answer.messages().into_iter().find(|m| m["id"] == 2).unwrap_or_else(|| panic!("{}", answer.body));
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert!(result["result"]["structuredContent"]["ticketId"].is_string(), "{result}");
    // Not held until the drain deadline (ten minutes) by the open stream.
    let (status, _) = server.exit_within(EXIT_WITHIN);
    assert_eq!(status.code(), Some(0));
    drop(stream);
}

/// `serve --stdio`: after SIGTERM the call in flight is answered, then the process exits 0.
#[test]
fn stdio_answers_the_call_in_flight_then_exits() {
    let mut child = crate::demo()
        .args(["serve", "--stdio", "--memory", "--ticket-delay-ms", "1000", "--drain-ms", LONG_DRAIN])
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stderr = crate::served::keep_stderr(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut recv = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    writeln!(stdin, "{init}").unwrap();
    assert!(recv().contains("agent-surface-demo"));
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"tickets-open","arguments":{{"subject":"Printer jam"}}}}}}"#).unwrap();
    // The answer to a ping sent after the call: the server has read the call, which is in flight.
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":3,"method":"ping"}}"#).unwrap();
    let pong: Value = serde_json::from_str(&recv()).unwrap();
    assert_eq!(pong["id"], 3, "the ping is answered before the call: {pong}");
    let status = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let answer: Value = serde_json::from_str(&recv()).unwrap();
    assert_eq!(answer["id"], 2);
    assert!(answer["result"]["structuredContent"]["ticketId"].is_string(), "{answer}");
    // Standard input is still open: the signal alone ends the server, and not at the drain
    // deadline (ten minutes).
    let deadline = Instant::now() + EXIT_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running {EXIT_WITHIN:?} after the call was answered");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    drop(stdin);
}
