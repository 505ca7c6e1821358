//! A bounded soak in CI size: the demo server under mixed load on both HTTP endpoints (MCP and
//! the HTTP binding) with 64 calls in flight, while slow clients trickle request heads and
//! oversized clients send bodies over the limit. Every answer must carry the expected code, none
//! may be lost, and the server's resident memory, sampled throughout, stays under its ceiling.
//!
//! A test binary of its own, so that it never shares the machine with the other end-to-end tests
//! (cargo runs test binaries one after another). Run with `cargo test -p agent-surface-demo
//! --test soak -- --nocapture` to see the figures.

#![allow(clippy::print_stderr, reason = "the soak reports its figures")]

#[path = "../it/served.rs"]
#[allow(dead_code, reason = "the soak uses a part of the shared client")]
mod served;

/// The demo binary under test.
fn demo() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent-surface-demo"))
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long the load runs.
const LOAD: Duration = Duration::from_secs(20);
/// Calls in flight at once.
const IN_FLIGHT: usize = 64;
/// The ceiling of the server's resident memory under this load (a debug build), in KiB.
const RSS_CEILING_KIB: u64 = 400 * 1024;

/// One call: where it goes, what it sends, which code it must get (`None`: success).
struct Case {
    api: bool,
    capability: &'static str,
    input: Value,
    expect: &'static [Option<&'static str>],
}

fn cases() -> Vec<Case> {
    let c = |api, capability, input, expect| Case { api, capability, input, expect };
    vec![
        c(true, "orders.get", json!({"orderId": "A-1001"}), &[None]),
        c(false, "orders.get", json!({"orderId": "A-1001"}), &[None]),
        c(true, "orders.get", json!({"orderId": "nope"}), &[Some("INVALID_INPUT")]),
        c(false, "orders.get", json!({"orderId": "nope"}), &[Some("INVALID_INPUT")]),
        c(true, "orders.get", json!({"orderId": "Z-9999"}), &[Some("PRECONDITION_FAILED")]),
        c(false, "refunds.issue", json!({"orderId": "A-1001", "amountCents": 5}), &[Some("NOT_AUTHENTICATED")]),
        c(true, "loyalty.redeem", json!({}), &[Some("CAPABILITY_NOT_AVAILABLE")]),
        c(false, "admin.purge_cache", json!({}), &[Some("CAPABILITY_NOT_FOUND")]),
        c(true, "nothing.here", json!({}), &[Some("CAPABILITY_NOT_FOUND")]),
        c(true, "shipping.quote", json!({"zip": "12345"}), &[None, Some("RATE_LIMITED")]),
        c(false, "tickets.open", json!({"subject": "soak"}), &[None]),
        c(true, "reports.export", json!({}), &[Some("EXECUTION_FAILED")]),
    ]
}

/// One HTTP/1.1 exchange on a fresh connection: the status and the body.
async fn exchange(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    s.write_all(body.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw)).await.ok()?.ok()?;
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The code of an answer (`None` for a success), or `Err` when it cannot be read.
fn code_of(api: bool, body: &str) -> Result<Option<String>, String> {
    if api {
        let v: Value = serde_json::from_str(body).map_err(|_| format!("not JSON: {body}"))?;
        return Ok(v["code"].as_str().map(str::to_string));
    }
    // MCP: one JSON message or SSE events; the answer is the one with the id.
    let messages: Vec<Value> = match serde_json::from_str::<Value>(body) {
        Ok(v) => vec![v],
        Err(_) => body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect(),
    };
    let answer = messages.into_iter().find(|m| m.get("id").is_some()).ok_or_else(|| format!("no answer: {body}"))?;
    let result = &answer["result"];
    if result["isError"] == false {
        return Ok(None);
    }
    let text = result["content"][0]["text"].as_str().ok_or_else(|| format!("no payload: {answer}"))?;
    let payload: Value = serde_json::from_str(text).map_err(|_| format!("payload not JSON: {text}"))?;
    Ok(payload["code"].as_str().map(str::to_string))
}

async fn call(addr: &str, case: &Case, n: u64) -> Result<(), String> {
    let (api_path, body, headers): (&str, String, Vec<(&str, String)>) = if case.api {
        let body = json!({"capability": case.capability, "input": case.input}).to_string();
        ("/api/invoke", body, vec![("Idempotency-Key", format!("soak-{n}"))])
    } else {
        let tool = case.capability.replace('.', "-");
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
        "name": tool, "arguments": case.input,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
            "agent-surface/invocationId": format!("soak-{n}")
        }}})
        .to_string();
        let headers = vec![
            ("MCP-Protocol-Version", "2026-07-28".to_string()),
            ("Mcp-Method", "tools/call".to_string()),
            ("Mcp-Name", tool),
        ];
        ("/mcp", body, headers)
    };
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_status, answer) = exchange(addr, api_path, &headers, &body).await.ok_or("lost answer")?;
    let code = code_of(case.api, &answer)?;
    if case.expect.iter().any(|e| e.map(str::to_string) == code) {
        Ok(())
    } else {
        Err(format!(
            "{} ({}) got {code:?}, expected one of {:?}",
            case.capability,
            if case.api { "api" } else { "mcp" },
            case.expect
        ))
    }
}

/// The server's resident memory in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}

/// A connection from `from` (another loopback address than the legitimate clients').
async fn connect_from(from: &str, addr: &str) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(format!("{from}:0").parse().ok()?).ok()?;
    socket.connect(addr.parse().ok()?).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_load_under_attack_keeps_every_answer_right() {
    let server = served::start(&[]);
    let addr = server.addr.clone();
    let pid = server.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, wrong, lost) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let wrong_examples = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let max_rss = Arc::new(AtomicU64::new(0));
    let cases = Arc::new(cases());
    let next = Arc::new(AtomicU64::new(0));

    let mut tasks = Vec::new();
    // The legitimate load.
    for _ in 0..IN_FLIGHT {
        let (addr, stop, cases, next) = (addr.clone(), stop.clone(), cases.clone(), next.clone());
        let (ok, wrong, lost, examples) = (ok.clone(), wrong.clone(), lost.clone(), wrong_examples.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let case = &cases[usize::try_from(n).unwrap_or(0) % cases.len()];
                match call(&addr, case, n).await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) if e == "lost answer" => lost.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        let mut examples = examples.lock().unwrap();
                        if examples.len() < 5 {
                            examples.push(e);
                        }
                        wrong.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    // Slow clients: request heads trickled a byte every 200 ms, from 127.0.0.2.
    for _ in 0..150 {
        let (addr, stop) = (addr.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Some(mut s) = connect_from("127.0.0.2", &addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                for b in
                    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                {
                    if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }));
    }
    // Oversized clients: bodies over every limit, from 127.0.0.3.
    for path in ["/mcp", "/api/invoke"] {
        let (addr, stop) = (addr.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let big = vec![b'x'; 5 << 20];
            while !stop.load(Ordering::Relaxed) {
                let Some(mut s) = connect_from("127.0.0.3", &addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let head = format!(
                    "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    big.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&big).await;
                let mut sink = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
            }
        }));
    }
    // Memory, sampled.
    {
        let (stop, max_rss) = (stop.clone(), max_rss.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    max_rss.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(LOAD).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(40), t).await;
    }
    let took = started.elapsed();
    let (ok, wrong, lost) = (ok.load(Ordering::Relaxed), wrong.load(Ordering::Relaxed), lost.load(Ordering::Relaxed));
    let max_rss = max_rss.load(Ordering::Relaxed);
    eprintln!(
        "soak: {ok} answers right, {wrong} wrong, {lost} lost in {took:?} ({:.0}/s, {IN_FLIGHT} in flight); max RSS {} MiB",
        ok as f64 / took.as_secs_f64(),
        max_rss / 1024
    );
    assert_eq!(wrong, 0, "wrong codes, e.g. {:?}", wrong_examples.lock().unwrap());
    assert_eq!(lost, 0, "lost answers");
    assert!(ok > 1_000, "the load ran: {ok} answers");
    assert!(max_rss > 0 && max_rss < RSS_CEILING_KIB, "max RSS {max_rss} KiB, ceiling {RSS_CEILING_KIB} KiB");
}
