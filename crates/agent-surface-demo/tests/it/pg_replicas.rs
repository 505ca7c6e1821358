//! Two demo servers sharing one PostgreSQL database (`serve --http --postgres URL --state-key
//! K`): one execution per idempotency key across both, one approval used once however many
//! retries race it through both, a replica killed mid-write never leads to
//! a second execution, calls fail closed while the database is down, and nothing acknowledged is
//! lost when it comes back.
//!
//! The database is a throwaway cluster (`agent_surface_testing::postgres`): one per test binary,
//! each test in schemas of its own, and one of its own for the outage test. Under `CI=true` a
//! missing PostgreSQL fails these tests.

use std::process::Command;
use std::time::{Duration, Instant};

use agent_surface_testing::postgres::{PgCluster, bin_dir, postgres_url};
use serde_json::{Value, json};

use crate::served::{self, Server};

const STATE_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The replicas' time budget per store operation, far above what a busy machine takes, so that
/// no verdict here depends on its load (the outage test sets its own).
const TIMEOUT_MS: &str = "30000";

/// A schema no other test uses.
fn schema(test: &str) -> String {
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("demo_{}_{}_{test}", std::process::id(), nonce % 1_000_000_000)
}

/// Two replicas on `url`, in `schema`, with `extra` options.
fn replicas_on(url: &str, schema: &str, timeout_ms: &str, extra: &[&str]) -> (Server, Server) {
    let mut args = vec!["--postgres", url, "--postgres-schema", schema, "--state-key", STATE_KEY];
    args.extend_from_slice(&["--postgres-timeout-ms", timeout_ms]);
    args.extend_from_slice(extra);
    // One after the other: the first creates the schemas.
    let a = served::start(&args);
    (a, served::start(&args))
}

/// `POST /api/invoke` of `capability` with `input` (and an `Idempotency-Key`): the status and
/// the body. A connection the kernel dropped under a burst (no answer) is retried with the same
/// key for up to a minute, as a client would: it joins or replays, never runs again.
fn invoke(addr: &str, capability: &str, input: &Value, key: Option<&str>) -> (u16, String) {
    let body = json!({"capability": capability, "input": input}).to_string();
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = served::post(addr, "/api/invoke", "127.0.0.1", &headers, &body);
        if r.status != 0 || Instant::now() > deadline {
            return (r.status, r.body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {body}"))
}

/// What `psql` answers to `sql` on the database at `url` (`postgres://postgres@127.0.0.1:PORT/…`).
fn psql(url: &str, sql: &str) -> String {
    let bin = bin_dir().expect("PostgreSQL is installed");
    let out = Command::new(bin.join("psql")).args(["-X", "-tA", "-d", url, "-c", sql]).output().expect("psql runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// How many tickets the shop in `schema` opened (its ledger: the effects an outsider counts).
fn tickets(url: &str, schema: &str) -> usize {
    psql(url, &format!("SELECT count(*) FROM \"{schema}_shop\".ledger WHERE ledger = 'tickets'")).parse().unwrap_or(0)
}

/// 1,000 concurrent requests with one `Idempotency-Key` over the HTTP binding, split across both
/// replicas, while the first is still running: one ticket is opened (the shop's ledger holds one
/// entry), and every caller gets the same bytes.
#[test]
fn a_thousand_requests_with_one_key_across_two_postgres_replicas_open_one_ticket() {
    let Some(url) = postgres_url() else { return };
    let schema = schema("tickets");
    let extra = ["--ticket-delay-ms", "300", "--max-connections-per-ip", "1000"];
    let (a, b) = replicas_on(&url, &schema, TIMEOUT_MS, &extra);
    let input = json!({"subject": "Printer jam"});
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..1_000)
            .map(|i| {
                let addr = if i % 2 == 0 { &a.addr } else { &b.addr };
                let input = &input;
                s.spawn(move || invoke(addr, "tickets.open", input, Some("ticket-1")))
            })
            .collect();
        calls.into_iter().map(|c| c.join().expect("a call")).collect()
    });
    let (status, first) = &answers[0];
    assert_eq!(*status, 200, "{first}");
    assert!(json_of(first)["output"]["ticketId"].is_string(), "{first}");
    let differing: Vec<&(u16, String)> = answers.iter().filter(|answer| *answer != &answers[0]).collect();
    assert!(
        differing.is_empty(),
        "every caller gets the same bytes; {} differ, e.g. {:?}",
        differing.len(),
        differing[0]
    );
    assert_eq!(tickets(&url, &schema), 1, "one execution");
    let (_, other) = invoke(&b.addr, "tickets.open", &input, Some("ticket-2"));
    assert_ne!(json_of(&other)["output"]["ticketId"], json_of(first)["output"]["ticketId"]);
    assert_eq!(tickets(&url, &schema), 2);
}

/// A replica killed (SIGKILL) while it runs a write: a retry on the other replica is answered
/// `EXECUTION_FAILED {reason: outcome-unknown}` once the lease lapsed — the ticket may exist —
/// and never opens a second one, however often it is retried.
#[test]
fn a_postgres_replica_killed_mid_write_leaves_an_unknown_outcome_not_a_second_execution() {
    let Some(url) = postgres_url() else { return };
    let schema = schema("killed");
    let (mut a, b) = replicas_on(&url, &schema, TIMEOUT_MS, &["--ticket-delay-ms", "5000", "--lease-ms", "600"]);
    let input = json!({"subject": "Refund never arrived"});
    let in_flight = {
        let (addr, input) = (a.addr.clone(), input.clone());
        std::thread::spawn(move || invoke(&addr, "tickets.open", &input, Some("doomed")))
    };
    // Once the first replica marked the call's record started (its handler runs), kill it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = format!("SELECT started FROM \"{schema}\".idem WHERE invocation = 'doomed' AND state = 'run'");
    while psql(&url, &started) != "t" {
        assert!(Instant::now() < deadline, "the first replica never started the call");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();
    let _ = in_flight.join();
    for attempt in 0..3 {
        let (status, body) = invoke(&b.addr, "tickets.open", &input, Some("doomed"));
        let p = json_of(&body);
        assert_eq!((status, p["code"].as_str()), (500, Some("EXECUTION_FAILED")), "attempt {attempt}: {body}");
        assert_eq!(p["details"]["reason"], "outcome-unknown", "attempt {attempt}: {body}");
        assert!(p.get("output").is_none());
    }
    assert!(tickets(&url, &schema) <= 1, "never a second execution");
    let (status, body) = invoke(&b.addr, "tickets.open", &input, Some("fresh"));
    assert_eq!(status, 200, "{body}");
}

/// A modern `tools/call` of `orders-cancel` for `order` to `addr`, with `extra` params merged.
fn cancel(addr: &str, order: &str, extra: &Value) -> Value {
    let mut params = json!({
        "name": "orders-cancel",
        "arguments": {"orderId": order},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "pg-replicas-test", "version": "1"}
        }
    });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "orders-cancel")];
    let response = served::post(addr, "/mcp", "127.0.0.1", &headers, &body);
    assert_eq!(response.status, 200, "{}", response.body);
    response.messages().into_iter().find(|m| m.get("id").is_some()).expect("an answer")
}

fn payload(answer: &Value) -> Value {
    let text = answer["result"]["content"][0]["text"].as_str().expect("a text block");
    serde_json::from_str(text).expect("JSON")
}

/// One approval, asked on one replica and accepted by 100 concurrent retries split across both:
/// exactly one executes (one refund); the others learn it was used, or that the order can no
/// longer be cancelled.
#[test]
fn one_approval_raced_across_two_postgres_replicas_executes_once() {
    let Some(url) = postgres_url() else { return };
    let schema = schema("approval_race");
    let (a, b) = replicas_on(&url, &schema, TIMEOUT_MS, &[]);
    let asked = cancel(&a.addr, "A-1003", &json!({}));
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});
    let answers: Vec<Value> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..100)
            .map(|i| {
                let addr = if i % 2 == 0 { &a.addr } else { &b.addr };
                let accept = &accept;
                s.spawn(move || cancel(addr, "A-1003", accept))
            })
            .collect();
        calls.into_iter().map(|c| c.join().expect("a call")).collect()
    });
    let executed: Vec<&Value> = answers.iter().filter(|a| a["result"]["isError"] == false).collect();
    assert_eq!(executed.len(), 1, "exactly one retry executes: {answers:?}");
    assert_eq!(payload(executed[0])["refundedCents"], 9900);
    for answer in answers.iter().filter(|a| a["result"]["isError"] == true) {
        let p = payload(answer);
        let told = (p["code"].as_str(), p["details"]["reason"].as_str());
        assert!(
            told == (Some("CONFIRMATION_INVALID"), Some("consumed"))
                || told == (Some("PRECONDITION_FAILED"), Some("order-not-cancellable")),
            "{answer}"
        );
    }
    let cancelled = psql(&url, &format!("SELECT json FROM \"{schema}_shop\".orders WHERE id = 'A-1003'"));
    assert!(cancelled.contains("\"cancelled\""), "{cancelled}");
}

/// Waits until `replica` reads the shop again (`orders.get` answers 200).
fn await_reconnected(replica: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = invoke(&replica.addr, "orders.get", &json!({"orderId": "A-1001"}), None);
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "the replica never reconnected: {status} {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The database stopped under two replicas: a keyed write fails closed on both (`EXECUTION_FAILED`,
/// `after-delay`, no output, no ticket), each within its budget (2 s per store operation, plus the
/// call's own work); restarted, everything acknowledged before is there — the ticket answered
/// before the outage replays with the same bytes through either replica — and the key that
/// failed closed opens its ticket once.
#[test]
fn a_postgres_outage_fails_closed_and_loses_nothing_acknowledged() {
    let Some(mut cluster) = PgCluster::start("demo-outage") else { return };
    let url = cluster.url();
    let schema = schema("outage");
    let (a, b) = replicas_on(&url, &schema, "2000", &[]);
    let input = json!({"subject": "Before the outage"});
    let before = invoke(&a.addr, "tickets.open", &input, Some("before-1"));
    assert_eq!(before.0, 200, "{}", before.1);

    cluster.stop();
    for addr in [&a.addr, &b.addr] {
        let asked = Instant::now();
        let (status, body) = invoke(addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1"));
        let took = asked.elapsed();
        let p = json_of(&body);
        let told = (p["code"].as_str(), p["retry"].as_str());
        assert_eq!(told, (Some("EXECUTION_FAILED"), Some("after-delay")), "{status} {body}");
        assert!(p.get("output").is_none(), "{body}");
        // Fails closed, not hanging: well within a few budgets of 2 s.
        assert!(took < Duration::from_secs(15), "answered after {took:?}");
    }

    cluster.restart();
    await_reconnected(&a);
    await_reconnected(&b);
    // Nothing acknowledged was lost: the ticket answered before the outage replays, on either.
    assert_eq!(invoke(&b.addr, "tickets.open", &input, Some("before-1")), before);
    assert_eq!(invoke(&a.addr, "tickets.open", &input, Some("before-1")), before);
    // The key that failed closed never opened a ticket: it opens one now, once.
    let first = invoke(&a.addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1"));
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(invoke(&b.addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1")), first);
    assert_eq!(tickets(&url, &schema), 2, "the ticket before the outage and the one after it");
}
