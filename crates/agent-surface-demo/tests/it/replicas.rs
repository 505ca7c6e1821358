//! Two demo servers sharing one Redis (`serve --http --redis URL --state-key K`): one shop, one
//! execution per idempotency key, one refund per order (its natural key) from plain calls that
//! carry no key, approvals used once, one rate budget, and a replica killed mid-call never leads
//! to a second execution.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::served::{self, Server};

const STATE_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The replicas' time budget per Redis operation (`--redis-timeout-ms`): far above what a busy
/// machine takes, so that no verdict here depends on its load. A call whose operation ran out of
/// its budget would answer a transient error (a thousand queued requests outlasted the default
/// two seconds) and might even have taken effect unseen. A stopped Redis refuses at once, so the
/// outage test loses no time to it.
const REDIS_TIMEOUT_MS: &str = "30000";

/// Two replicas on the test Redis, under a prefix of this test's own, with `extra` options.
fn replicas(test: &str, extra: &[&str]) -> Option<(Server, Server)> {
    replicas_at(test, extra).map(|(a, b, _, _)| (a, b))
}

/// As [`replicas`], with the Redis URL and the prefix.
fn replicas_at(test: &str, extra: &[&str]) -> Option<(Server, Server, String, String)> {
    let url = agent_surface_testing::services::redis_url()?;
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("demo-it:{}:{nonce}:{test}:", std::process::id());
    let mut args = vec!["--redis", url.as_str(), "--redis-prefix", prefix.as_str(), "--state-key", STATE_KEY];
    args.extend_from_slice(&["--redis-timeout-ms", REDIS_TIMEOUT_MS]);
    args.extend_from_slice(extra);
    let (a, b) = (served::start(&args), served::start(&args));
    Some((a, b, url, prefix))
}

/// A modern (2026-07-28) `tools/call` of `orders-cancel` for `order` to `addr`, with `extra`
/// params merged.
fn cancel(addr: &str, order: &str, extra: &Value) -> Value {
    let mut params = json!({
        "name": "orders-cancel",
        "arguments": {"orderId": order},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "replicas-test", "version": "1"}
        }
    });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "orders-cancel")];
    let response = served::post(addr, "/mcp", "127.0.0.1", &headers, &body);
    assert_eq!(response.status, 200, "{}", response.body);
    let messages = response.messages();
    messages.into_iter().find(|m| m.get("id").is_some()).expect("an answer")
}

fn payload(answer: &Value) -> Value {
    let text = answer["result"]["content"][0]["text"].as_str().expect("a text block");
    serde_json::from_str(text).expect("JSON")
}

/// `POST /api/invoke` of `capability` with `input` (and an `Idempotency-Key`) to `addr`: the
/// status and the body's bytes.
fn invoke(addr: &str, capability: &str, input: &Value, key: Option<&str>) -> (u16, String) {
    let body = json!({"capability": capability, "input": input}).to_string();
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let r = post_answered(addr, "/api/invoke", &headers, &body);
    (r.status, r.body)
}

/// `POST path` with `body` to `addr`. A connection the kernel dropped under a burst (no answer at
/// all) is retried, as a client would, for up to a minute: with the same key (an
/// `Idempotency-Key`, or the capability's natural key), a retry joins or replays, never runs again.
fn post_answered(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> served::Response {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = served::post(addr, path, "127.0.0.1", headers, body);
        if r.status != 0 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {body}"))
}

#[test]
fn an_approval_asked_on_one_replica_is_answered_on_the_other_and_used_once() {
    let Some((a, b)) = replicas("approval", &[]) else { return };
    let asked = cancel(&a.addr, "A-1001", &json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});

    // The other replica opens the state and finds the confirmation in the shared store.
    let done = cancel(&b.addr, "A-1001", &accept);
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(payload(&done)["orderId"], "A-1001");

    // Replayed on the first replica: used already.
    let replay = cancel(&a.addr, "A-1001", &accept);
    assert_eq!(replay["result"]["isError"], true, "{replay}");
    assert_eq!(payload(&replay)["code"], "CONFIRMATION_INVALID");
    assert_eq!(payload(&replay)["details"]["reason"], "consumed");

    // One shop: the order is cancelled on both replicas.
    let (status, body) = invoke(&a.addr, "orders.get", &json!({"orderId": "A-1001"}), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["output"]["status"], "cancelled");
}

/// 100 concurrent retries presenting one accepted approval, split across both replicas: the
/// order is cancelled once; no other retry executes.
/// The replicas serve one approval inbox: a confirmation asked through one is listed and approved
/// in the other's inbox, and the decision is in both inboxes' recent decisions (one audit stream).
#[test]
fn the_inbox_of_either_replica_decides_the_shared_confirmations() {
    let tokens = ["--token", "t-alice=alice", "--token", "t-maria=maria:approver"];
    let Some((a, b)) = replicas("inbox", &tokens) else { return };
    let body = json!({"capability": "orders.cancel", "input": {"orderId": "A-1003"}}).to_string();
    let alice = [("Authorization", "Bearer t-alice")];
    let asked = served::post(&a.addr, "/api/invoke", "127.0.0.1", &alice, &body);
    assert_eq!(asked.status, 428, "{}", asked.body);
    let id = json_of(&asked.body)["details"]["confirmationId"].as_str().unwrap().to_string();
    let maria = [("Authorization", "Bearer t-maria")];
    let list = served::get(&b.addr, "/inbox/", &maria);
    assert!(list.body.contains(&format!("href=\"/inbox/c/{id}\"")), "{}", list.body);
    let page = served::get(&b.addr, &format!("/inbox/c/{id}"), &maria).body;
    let form = page.split("<form id=\"decide\"").nth(1).expect("the decision form");
    let csrf = form.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap();
    let form = [maria[0], ("Content-Type", "application/x-www-form-urlencoded")];
    let decided = served::request(
        &b.addr,
        "POST",
        &format!("/inbox/c/{id}"),
        &form,
        format!("verdict=approve&note=ok&csrf={csrf}").as_bytes(),
    );
    assert_eq!(decided.status, 303, "{}", decided.body);
    let done = served::post(&a.addr, "/api/invoke", "127.0.0.1", &alice, &body);
    assert_eq!(json_of(&done.body)["output"]["orderId"], "A-1003", "{}", done.body);
    for server in [&a, &b] {
        let list = served::get(&server.addr, "/inbox/", &maria).body;
        assert!(list.contains("id=\"empty\""), "{list}");
        let recent = list.split("<table id=\"recent\">").nth(1).expect("the recent decisions");
        assert!(
            recent.contains("<td>maria</td><td><span class=\"badge approved\">approved</span></td><td>orders.cancel</td><td>alice</td><td>ok</td>"),
            "{recent}"
        );
    }
}

/// The `name=value` of the cookie `name` the response sets.
fn set_cookie(response: &served::Response, name: &str) -> Option<String> {
    response
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, v)| v.split(';').next())
        .find(|pair| pair.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

/// The first form's token on `page`.
fn csrf_of(page: &str) -> String {
    page.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap().to_string()
}

/// A browser needs no sticky routing: signed in through one replica (a cookie session), it is
/// signed in on the other, whose forms the first accepts; a sign-in form used on one is refused
/// when replayed to the other; signing out on one ends the session on both.
#[test]
fn a_browser_signed_in_on_one_replica_is_signed_in_on_the_other() {
    let tokens = ["--token", "t-maria=maria:approver"];
    let Some((a, b)) = replicas("inbox-session", &tokens) else { return };
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");
    let shown = served::get(&a.addr, "/inbox/sign-in", &[]);
    let pre = set_cookie(&shown, "inbox_signin").expect("the sign-in form's cookie");
    let sign_in = format!("token=t-maria&csrf={}", csrf_of(&shown.body));
    let signed = served::request(&b.addr, "POST", "/inbox/sign-in", &[("Cookie", &pre), form_type], sign_in.as_bytes());
    assert_eq!(signed.status, 303, "A's form signs in on B: {}", signed.body);
    let session = set_cookie(&signed, "inbox_session").expect("a session cookie");
    let replayed =
        served::request(&a.addr, "POST", "/inbox/sign-in", &[("Cookie", &pre), form_type], sign_in.as_bytes());
    assert_eq!(replayed.status, 403, "the form used on B is refused on A: {}", replayed.body);

    let list = served::get(&a.addr, "/inbox/", &[("Cookie", &session)]);
    assert_eq!(list.status, 200, "B's session is served by A: {}", list.body);
    assert!(list.body.contains("maria"), "{}", list.body);
    let out = format!("csrf={}", csrf_of(&list.body));
    let left = served::request(&b.addr, "POST", "/inbox/sign-out", &[("Cookie", &session), form_type], out.as_bytes());
    assert_eq!(left.status, 303, "A's sign-out form is accepted by B: {}", left.body);
    let after = served::get(&a.addr, "/inbox/", &[("Cookie", &session)]);
    assert_eq!(after.status, 303, "signed out on B, so on A too: {}", after.body);
    assert!(after.header("location").is_some_and(|l| l.contains("/inbox/sign-in")), "{:?}", after.headers);
}

#[test]
fn one_approval_raced_across_both_replicas_executes_once() {
    let Some((a, b)) = replicas("approval-race", &[]) else { return };
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
    // The others learn that the approval was used, or, once their replica has seen the order
    // cancelled, that it cannot be cancelled (the precondition runs before confirmation).
    for answer in answers.iter().filter(|a| a["result"]["isError"] == true) {
        let p = payload(answer);
        let told = (p["code"].as_str(), p["details"]["reason"].as_str());
        assert!(
            told == (Some("CONFIRMATION_INVALID"), Some("consumed"))
                || told == (Some("PRECONDITION_FAILED"), Some("order-not-cancellable")),
            "{answer}"
        );
    }
}

/// 1,000 concurrent requests with one `Idempotency-Key` over the HTTP binding, split across both
/// replicas, while the first is still running: one ticket is opened, and every caller gets the
/// same bytes.
#[test]
fn a_thousand_requests_with_one_key_across_two_replicas_open_one_ticket() {
    let extra = ["--ticket-delay-ms", "300", "--max-connections-per-ip", "1000"];
    let Some((a, b)) = replicas("tickets", &extra) else { return };
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
    // Another key is another execution, on either replica.
    let (_, other) = invoke(&b.addr, "tickets.open", &input, Some("ticket-2"));
    assert_ne!(json_of(&other)["output"]["ticketId"], json_of(first)["output"]["ticketId"]);
}

/// The shipping-quote budget (two at once, one more every 800 ms) is one budget for both
/// replicas, not one each.
#[test]
fn the_rate_budget_is_shared() {
    let Some((a, b)) = replicas("quota", &[]) else { return };
    let started = Instant::now();
    let statuses: Vec<u16> = (0..6)
        .map(|i| invoke(if i % 2 == 0 { &a.addr } else { &b.addr }, "shipping.quote", &json!({"zip": "12345"}), None).0)
        .collect();
    let elapsed = started.elapsed();
    let allowed = statuses.iter().filter(|s| **s == 200).count();
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
    // One budget allows its burst of two plus one per 800 ms that passed; separate budgets would
    // allow two per replica (and two refills).
    let refills = usize::try_from(elapsed.as_millis() / 800).unwrap_or(usize::MAX);
    assert!(allowed >= 2 && allowed <= 2 + refills, "{statuses:?} in {elapsed:?}");
    if refills == 0 {
        assert_eq!(allowed, 2, "{statuses:?} in {elapsed:?}");
    }
}

/// A replica killed (SIGKILL) while it runs a write: a retry on the other replica is answered
/// `EXECUTION_FAILED {reason: outcome-unknown}` — the ticket may exist — and never opens a second
/// one, however often it is retried.
#[test]
fn a_replica_killed_mid_call_leaves_an_unknown_outcome_not_a_second_execution() {
    let extra = ["--ticket-delay-ms", "5000", "--lease-ms", "600"];
    let Some((mut a, b, url, prefix)) = replicas_at("killed", &extra) else { return };
    let input = json!({"subject": "Refund never arrived"});
    let in_flight = {
        let (addr, input) = (a.addr.clone(), input.clone());
        std::thread::spawn(move || invoke(&addr, "tickets.open", &input, Some("doomed")))
    };
    // Once the first replica holds the call's record (it is then in its 5 s handler), kill it.
    let consumer = "http-anonymous:default";
    let record = format!("{prefix}idem:{}:{consumer}:doomed", consumer.len());
    let client = agent_surface_redis::redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut conn = client.get_connection().expect("Redis answers");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state: Option<String> =
            agent_surface_redis::redis::cmd("HGET").arg(&record).arg("s").query(&mut conn).expect("HGET");
        if state.as_deref() == Some("run") {
            break;
        }
        assert!(Instant::now() < deadline, "the first replica never admitted the call");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    a.kill();
    let _ = in_flight.join();
    for attempt in 0..3 {
        let (status, body) = invoke(&b.addr, "tickets.open", &input, Some("doomed"));
        let p = json_of(&body);
        assert_eq!((status, p["code"].as_str()), (500, Some("EXECUTION_FAILED")), "attempt {attempt}: {body}");
        assert_eq!(p["details"]["reason"], "outcome-unknown", "attempt {attempt}: {body}");
        assert!(p.get("output").is_none());
    }
    // The replica that is alive still serves new calls.
    let (status, body) = invoke(&b.addr, "tickets.open", &input, Some("fresh"));
    assert_eq!(status, 200, "{body}");
}

/// A task whose replica was killed ends through the other replica (#26): once its lease lapses,
/// `tasks/get` answers it completed with the unknown outcome, and `tasks/cancel` is acknowledged and
/// ends it the same way (never `cancelled`: its handler started). Before, it stayed `working` until
/// its time to live and then was an unknown id.
#[test]
fn a_task_whose_replica_was_killed_ends_with_an_unknown_outcome_on_the_other() {
    use crate::durable::{assert_ended_unknown, mcp, task_end};
    let Some((mut a, b)) = replicas("task", &["--conformance", "--task-lease-ms", "1000"]) else { return };
    let started: Vec<String> = (0..2)
        .map(|i| {
            let call = json!({"name": "slow_compute", "arguments": {"seconds": 100, "label": format!("{i}")}});
            let answer = mcp(&a.addr, "tools/call", "slow_compute", call);
            assert_eq!(answer["result"]["resultType"], "task", "{answer}");
            answer["result"]["taskId"].as_str().unwrap().to_string()
        })
        .collect();
    // Alive, the replica renews its tasks: through the other they stay working past their lease.
    std::thread::sleep(Duration::from_millis(2500));
    for task in &started {
        let got = mcp(&b.addr, "tasks/get", task, json!({"taskId": task}));
        assert_eq!(got["result"]["status"], "working", "{got}");
    }
    a.kill();
    assert_ended_unknown(&task_end(&b.addr, &started[0]));
    let cancelled = mcp(&b.addr, "tasks/cancel", &started[1], json!({"taskId": started[1]}));
    assert!(cancelled.get("error").is_none(), "acknowledged: {cancelled}");
    assert_ended_unknown(&mcp(&b.addr, "tasks/get", &started[1], json!({"taskId": started[1]})));
}

/// Two replicas on a Redis of this test's own, with its URL.
fn replicas_on(site: &agent_surface_testing::services::RedisSite, test: &str) -> (Server, Server) {
    let url = site.url();
    let prefix = format!("demo-it:{test}:");
    let args = ["--redis", url.as_str(), "--redis-prefix", prefix.as_str(), "--state-key", STATE_KEY];
    let args = [&args[..], &["--redis-timeout-ms", REDIS_TIMEOUT_MS]].concat();
    (served::start(&args), served::start(&args))
}

/// Waits until `replica` reads the shop from Redis again (`orders.get` answers 200): its
/// connection, shared by its stores, is back. Within a minute, far more than a restart takes.
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

/// Asserts that `answer` (an MCP `tools/call` answer) is the transient store failure: nothing ran.
fn assert_failed_closed(answer: &Value) {
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let p = payload(answer);
    assert_eq!(p["code"], "EXECUTION_FAILED", "{answer}");
    assert_eq!(p["retry"], "after-delay", "{answer}");
}

/// Redis stopped under two replicas: calls that need it fail closed on both (`EXECUTION_FAILED`,
/// `after-delay`; no order is cancelled, no ticket opened) and work again once it is back. Redis
/// restarted from its append-only file while an approval waits: the approval given through the
/// other replica is used once.
#[test]
fn a_redis_outage_fails_closed_and_a_pending_approval_survives_its_restart() {
    let Some(site) = agent_surface_testing::services::RedisSite::new("demo-outage") else { return };
    let mut redis = site.start();
    let (a, b) = replicas_on(&site, "outage");

    // An approval is asked on the first replica; then Redis goes away.
    let asked = cancel(&a.addr, "A-1003", &json!({}));
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});
    redis.stop();

    // Down: the accepted approval and a ticket with a key (its record is in Redis) fail closed on
    // both replicas.
    assert_failed_closed(&cancel(&b.addr, "A-1003", &accept));
    assert_failed_closed(&cancel(&a.addr, "A-1003", &accept));
    for addr in [&a.addr, &b.addr] {
        let (status, body) = invoke(addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1"));
        let p = json_of(&body);
        // The idempotency store could not admit the call: `reason: store-unavailable`, HTTP 503,
        // sent again under the same key.
        let told = (status, p["code"].as_str(), p["details"]["reason"].as_str(), p["retry"].as_str());
        assert_eq!(told, (503, Some("EXECUTION_FAILED"), Some("store-unavailable"), Some("after-delay")), "{body}");
        assert!(p["message"].as_str().is_some_and(|m| m.contains("same invocationId")), "{body}");
        assert!(p.get("output").is_none(), "{body}");
    }

    // Back, from its append-only file (`start` returns once Redis answers, its file read back),
    // and both replicas reconnected: the approval (asked before the outage) is used once, through
    // the other replica; replaying it on the first finds it consumed. (Retrying the approval until
    // a replica reconnects would not do: an answer's approval step may fail on the broken
    // connection while the call after it succeeds, and the call then asks for approval anew.)
    let _redis = site.start();
    await_reconnected(&a);
    await_reconnected(&b);
    let executed = cancel(&b.addr, "A-1003", &accept);
    assert_eq!(executed["result"]["isError"], false, "{executed}");
    assert_eq!(payload(&executed)["refundedCents"], 9900);
    let replayed = cancel(&a.addr, "A-1003", &accept);
    let told = payload(&replayed);
    assert!(
        (told["code"].as_str(), told["details"]["reason"].as_str()) == (Some("CONFIRMATION_INVALID"), Some("consumed"))
            || told["code"] == "PRECONDITION_FAILED",
        "{replayed}"
    );

    // The keyed ticket that failed closed was never opened: its key now opens one ticket, once.
    let first = invoke(&a.addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1"));
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(invoke(&b.addr, "tickets.open", &json!({"subject": "Outage"}), Some("outage-1")), first);
}

/// The tokens of the refund tests: a support agent, whom the authority policy admits to
/// `refunds.issue`, and an approver, whom it refuses.
const REFUND_TOKENS: [&str; 4] = ["--token", "t-sam=sam:support", "--token", "t-pat=pat:approver"];

/// How a call of `refunds.issue` reaches a replica: as standard clients send it, with neither an
/// invocation id in `_meta` nor an `Idempotency-Key` — only the natural key (the order) makes
/// repeats one operation.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// MCP 2025-11-25 over streamable HTTP, in a session the caller opened on that replica.
    McpSession,
    /// MCP 2026-07-28 over streamable HTTP, sessionless (`_meta` names the protocol and the
    /// client, nothing else).
    McpStateless,
    /// The HTTP binding's `POST /api/invoke`.
    Binding,
}

/// A caller of both replicas: its bearer token (none: anonymous), and the MCP session it opened
/// on each.
struct Caller {
    token: Option<&'static str>,
    sessions: [String; 2],
}

impl Caller {
    fn new(replicas: [&Server; 2], token: Option<&'static str>) -> Caller {
        Caller { token, sessions: replicas.map(|r| session(&r.addr, token)) }
    }

    /// `refunds.issue` of `input` on replica `at` of `replicas` via `via`: the output as
    /// `{"output": …}` or the error payload, and the answer's raw body.
    fn refund(&self, replicas: [&Server; 2], at: usize, via: Via, input: &Value) -> (Value, String) {
        let addr = replicas[at].addr.as_str();
        let auth = self.token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        // Distinct request ids, as a client's: a session refuses an id that is in progress.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mcp = |params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let body = match via {
            Via::Binding => json!({"capability": "refunds.issue", "input": input}),
            Via::McpSession => {
                headers
                    .extend([("Mcp-Session-Id", self.sessions[at].as_str()), ("MCP-Protocol-Version", "2025-11-25")]);
                mcp(json!({"name": "refunds-issue", "arguments": input}))
            }
            Via::McpStateless => {
                headers.extend([
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "refunds-issue"),
                ]);
                mcp(json!({"name": "refunds-issue", "arguments": input, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "replicas-test", "version": "1"}
                }}))
            }
        };
        let path = if matches!(via, Via::Binding) { "/api/invoke" } else { "/mcp" };
        let r = post_answered(addr, path, &headers, &body.to_string());
        if matches!(via, Via::Binding) {
            let answer = json_of(&r.body);
            let told = if r.status == 200 { json!({"output": answer["output"]}) } else { answer };
            return (told, r.body);
        }
        assert_eq!(r.status, 200, "{via:?} on replica {at}: {}", r.body);
        let answer = r.messages().into_iter().find(|m| m["id"] == id);
        let result = &answer.unwrap_or_else(|| panic!("{via:?} on replica {at}: no answer in {}", r.body))["result"];
        let told = if result["isError"] == false {
            json!({"output": result["structuredContent"]})
        } else {
            payload(&json!({"result": result}))
        };
        (told, r.body)
    }
}

/// An initialized MCP 2025-11-25 session on `addr`, opened with `token`: its `Mcp-Session-Id`.
fn session(addr: &str, token: Option<&str>) -> String {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replicas-test", "version": "1"}}});
    let r = post_answered(addr, "/mcp", &headers, &init.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.header("mcp-session-id").expect("a session id").to_string();
    headers.extend([("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")]);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let r = post_answered(addr, "/mcp", &headers, &initialized);
    assert!(r.status == 202 || r.status == 200, "{}", r.status);
    session
}

/// Every combination of replica and transport, for the checks that try each.
fn everywhere() -> impl Iterator<Item = (usize, Via)> {
    [0, 1].into_iter().flat_map(|at| [Via::McpSession, Via::McpStateless, Via::Binding].map(|via| (at, via)))
}

/// Call `i` of a burst: replica `i % 2`, the binding for half of each replica's calls, MCP with a
/// session and without one for a quarter each.
fn spread(i: usize) -> (usize, Via) {
    let via = match (i / 2) % 4 {
        0 | 2 => Via::Binding,
        1 => Via::McpSession,
        _ => Via::McpStateless,
    };
    (i % 2, via)
}

/// The refund id of an answer that must be a refund.
fn refund_id(told: &Value, raw: &str) -> String {
    told["output"]["refundId"].as_str().unwrap_or_else(|| panic!("a refund: {raw}")).to_string()
}

/// 200 concurrent `refunds.issue` calls for one order and amount, as standard clients send them
/// (no invocation id, no `Idempotency-Key`), released at once and split across both replicas
/// (100 each) and across transports (per replica: 50 over the HTTP binding, 25 over MCP in a
/// session, 25 over sessionless MCP): the order's natural key makes them one operation. Every
/// answer is the same refund (its id carries a per-execution suffix, so a second execution would
/// show).
#[test]
fn two_hundred_plain_refunds_of_one_order_across_two_replicas_execute_once() {
    let Some((a, b)) = replicas("refund-burst", &REFUND_TOKENS) else { return };
    let replicas = [&a, &b];
    let sam = Caller::new(replicas, Some("t-sam"));
    let input = json!({"orderId": "A-1001", "amountCents": 500});
    let calls = 200;
    let start = std::sync::Barrier::new(calls);
    let answers: Vec<((usize, Via), (Value, String))> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..calls)
            .map(|i| {
                let (sam, input, start) = (&sam, &input, &start);
                s.spawn(move || {
                    let (at, via) = spread(i);
                    start.wait();
                    ((at, via), sam.refund(replicas, at, via, input))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a call")).collect()
    });
    let first = refund_id(&answers[0].1.0, &answers[0].1.1);
    assert!(first.starts_with("R-1001-"), "{first}");
    let others: Vec<_> = answers.iter().filter(|(_, (told, _))| told["output"]["refundId"] != first.as_str()).collect();
    assert!(others.is_empty(), "one execution: {} of {calls} answers differ, e.g. {:?}", others.len(), others[0]);
    for ((at, via), (told, raw)) in &answers {
        assert_eq!(
            told["output"],
            json!({"refundId": first, "orderId": "A-1001", "amountCents": 500}),
            "{at} {via:?}: {raw}"
        );
    }
    // Asked again later, on either replica and transport: the refund on record.
    for (at, via) in everywhere() {
        let (told, raw) = sam.refund(replicas, at, via, &input);
        assert_eq!(refund_id(&told, &raw), first, "{at} {via:?}");
    }
}

/// A refund of an order refunded already, for another amount, is `INVOCATION_CONFLICT` on either
/// replica over any transport, and does not reveal the refund on record; the order's refund
/// stays the one it was.
#[test]
fn another_amount_for_a_refunded_order_is_a_conflict_on_either_replica() {
    let Some((a, b)) = replicas("refund-conflict", &REFUND_TOKENS) else { return };
    let replicas = [&a, &b];
    let sam = Caller::new(replicas, Some("t-sam"));
    let input = json!({"orderId": "A-1001", "amountCents": 500});
    let (told, raw) = sam.refund(replicas, 0, Via::McpSession, &input);
    let refunded = refund_id(&told, &raw);
    for (at, via) in everywhere() {
        let (told, raw) = sam.refund(replicas, at, via, &json!({"orderId": "A-1001", "amountCents": 700}));
        assert_eq!(told["code"], "INVOCATION_CONFLICT", "{at} {via:?}: {raw}");
        // Neither the refund nor the earlier input.
        assert!(!raw.contains(&refunded) && !raw.contains("amountCents"), "{at} {via:?}: {raw}");
    }
    let (told, raw) = sam.refund(replicas, 1, Via::Binding, &input);
    assert_eq!(refund_id(&told, &raw), refunded);
}

/// The order's key spans callers, but only callers the authority policy admits: an anonymous
/// caller (`NOT_AUTHENTICATED`) and a signed-in one without the support role (`NOT_AUTHORIZED`)
/// asking for the refund on record, with its very input, get their refusal on either replica over
/// any transport, never the refund; the record stands for the support agent.
#[test]
fn a_refused_caller_gets_its_refusal_never_the_refund_on_record() {
    let Some((a, b)) = replicas("refund-refused", &REFUND_TOKENS) else { return };
    let replicas = [&a, &b];
    let sam = Caller::new(replicas, Some("t-sam"));
    let input = json!({"orderId": "A-1001", "amountCents": 500});
    let (told, raw) = sam.refund(replicas, 1, Via::Binding, &input);
    let refunded = refund_id(&told, &raw);
    for (who, code) in [(None, "NOT_AUTHENTICATED"), (Some("t-pat"), "NOT_AUTHORIZED")] {
        let caller = Caller::new(replicas, who);
        for (at, via) in everywhere() {
            let (told, raw) = caller.refund(replicas, at, via, &input);
            assert_eq!(told["code"], code, "{who:?} on {at} {via:?}: {raw}");
            assert!(!raw.contains(&refunded) && !raw.contains("R-1001"), "{who:?} on {at} {via:?}: {raw}");
        }
    }
    let (told, raw) = sam.refund(replicas, 0, Via::McpStateless, &input);
    assert_eq!(refund_id(&told, &raw), refunded);
}
