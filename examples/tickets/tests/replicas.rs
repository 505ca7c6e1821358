//! The guide's part 2, run as deployed: two replicas of the `tickets` binary
//! (`--http 127.0.0.1:0 --redis URL …`) on one Redis, behind a load balancer that is not there —
//! each request goes to the replica the test picks, with the public host `tickets.test` — and
//! people signed in with OAuth access tokens that the test's issuer signs (`tests/keys`).
//!
//! Needs Redis: `agent_surface_testing::services::redis_url` starts a private `redis-server` (or
//! takes `AGENT_SURFACE_REDIS_URL`); without one a test returns at once, except under `CI=true`,
//! where it fails. The guide quotes this file between its `// guide:` markers.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_surface::core::{ErrorCode, InvokeResult};
use agent_surface_testing::http::{Response, request_blocking};
use agent_surface_testing::{expect_details, expect_error, expect_ok};
use serde_json::{Value, json};

/// Where people and agents reach the service (the load balancer), and the audience of its tokens.
const PUBLIC_URL: &str = "http://tickets.test";
/// The authorization server whose tokens the replicas accept.
const ISSUER: &str = "https://id.tickets.test";
/// The most lines of a replica's operator log kept, for a failing test to print.
const KEPT_LINES: usize = 500;

/// A running replica (killed on drop); its operator log (stderr) is kept and printed when the
/// test that holds it fails.
struct Replica {
    child: Child,
    /// `127.0.0.1:PORT`, from the line the replica prints.
    addr: String,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl Drop for Replica {
    #[expect(clippy::print_stderr, reason = "a failing test shows the replica's log with its own output")]
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- the operator log of the replica at {} ---\n{}---", self.addr, self.log().join("\n"));
        }
    }
}

impl Replica {
    /// The operator log so far, one entry a line.
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }
}

/// The command of one replica on `redis` under `prefix`, its operator log in JSON lines.
fn replica_command(redis: &str, prefix: &str) -> Command {
    let jwks = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keys/jwks.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickets"));
    command
        .args(["--http", "127.0.0.1:0", "--redis", redis, "--redis-prefix", prefix, "--public-url", PUBLIC_URL])
        .args(["--oauth-jwks", jwks, "--oauth-issuer", ISSUER])
        .env("AGENT_SURFACE_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Keeps the last [`KEPT_LINES`] lines of `stderr`, read on a thread of its own.
fn keep(stderr: std::process::ChildStderr) -> Arc<Mutex<VecDeque<String>>> {
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

/// Starts a replica and waits for the address it prints.
fn start(redis: &str, prefix: &str) -> Replica {
    start_with(redis, prefix, &[])
}

/// [`start`], with `extra` arguments.
fn start_with(redis: &str, prefix: &str, extra: &[&str]) -> Replica {
    let mut child = replica_command(redis, prefix).args(extra).spawn().expect("spawns");
    let log = keep(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
    match line.trim().strip_prefix("listening on http://") {
        Some(addr) => Replica { child, addr: addr.to_string(), log },
        None => {
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(200)); // the reader has the rest of the log
            let log: Vec<String> = log.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
            panic!("the replica did not start (it printed {line:?}); its log:\n{}", log.join("\n"))
        }
    }
}

/// The Redis to test against and a key prefix of this test's own (so that runs and tests never
/// share a quota or a natural key); `None` outside CI when there is no Redis.
fn redis(test: &str) -> Option<(String, String)> {
    let url = agent_surface_testing::services::redis_url()?;
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    Some((url, format!("tickets-it:{}:{nonce}:{test}:", std::process::id())))
}

/// Two replicas on one Redis, under a prefix of `test`'s own.
fn replicas(test: &str) -> Option<(Replica, Replica)> {
    let (url, prefix) = redis(test)?;
    Some((start(&url, &prefix), start(&url, &prefix)))
}

/// An access token the test's issuer signs for `subject` with `roles`; each one differs (its
/// `jti`), as the tokens of two sessions of one person do.
fn token(subject: &str, roles: &[&str]) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    static ISSUED: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    let claims = json!({"iss": ISSUER, "aud": PUBLIC_URL, "sub": subject, "roles": roles,
        "iat": now, "exp": now + 600, "jti": ISSUED.fetch_add(1, Ordering::Relaxed).to_string()});
    let key = EncodingKey::from_ed_pem(include_bytes!("keys/issuer.pem")).expect("an Ed25519 key");
    let header = Header { kid: Some("issuer-1".into()), ..Header::new(Algorithm::EdDSA) };
    jsonwebtoken::encode(&header, &claims, &key).expect("signs")
}

/// `method path` to `replica` through the "load balancer" (`Host: tickets.test`) with `token`.
fn send(replica: &Replica, method: &str, path: &str, token: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let bearer = format!("Bearer {token}");
    let mut all = vec![("Host", "tickets.test"), ("Authorization", bearer.as_str())];
    all.extend_from_slice(headers);
    let mut response = request_blocking(&replica.addr, method, path, &all, body.as_bytes());
    // A connection the kernel dropped under a burst (no answer at all) is sent again, as a
    // client would: the calls here are keyed (a natural key, or the approval), so a repeat
    // joins or replays.
    for _ in 0..3 {
        if response.status != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        response = request_blocking(&replica.addr, method, path, &all, body.as_bytes());
    }
    response
}

/// Which way a call goes in.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// The HTTP binding, `POST /api/invoke`.
    Api,
    /// MCP, a `tools/call` in the stateless era (no session) from a client that cannot ask its
    /// user.
    Mcp,
}

/// A call of `capability` with `input` on `replica` by the holder of `token`, answered as the
/// registry's result.
fn call(replica: &Replica, via: Via, token: &str, capability: &str, input: Value) -> InvokeResult {
    match via {
        Via::Api => {
            let body = json!({"capability": capability, "input": input}).to_string();
            let r = send(replica, "POST", "/api/invoke", token, &[("Content-Type", "application/json")], &body);
            agent_surface::http::wire::decode(r.status, &r.body).unwrap_or_else(|e| panic!("{e}: {r:?}"))
        }
        Via::Mcp => {
            let answer = tools_call(replica, token, capability, input, json!({}));
            let result = serde_json::from_value(answer["result"].clone()).expect("a CallToolResult");
            agent_surface::mcp::codec::decode(&result).expect("an invoke result")
        }
    }
}

/// An MCP `tools/call` of `capability`'s tool on `replica`, with `extra` merged into the params
/// (its `capabilities`: the client's, default none): the JSON-RPC answer.
fn tools_call(replica: &Replica, token: &str, capability: &str, input: Value, extra: Value) -> Value {
    let tool = capability.replace('.', "-");
    let capabilities = extra.get("capabilities").cloned().unwrap_or(json!({}));
    let mut params = json!({"name": tool, "arguments": input, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "replicas-test", "version": "0"}}});
    for (k, v) in extra.as_object().into_iter().flatten().filter(|(k, _)| *k != "capabilities") {
        params[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool.as_str()),
    ];
    let r = send(replica, "POST", "/mcp", token, &headers, &body);
    r.messages().into_iter().find(|m| m.get("result").is_some()).unwrap_or_else(|| panic!("an answer: {r:?}"))
}

/// The tickets on `replica`'s desk (the database each replica stands for).
fn tickets(replica: &Replica, token: &str) -> Vec<Value> {
    let listed = call(replica, Via::Api, token, "tickets.list", json!({}));
    expect_ok(&listed)["tickets"].as_array().expect("a list").clone()
}

/// Approves confirmation page `path` in `replica`'s inbox as the holder of `token`, as the
/// inbox's form does.
fn approve_in_inbox(replica: &Replica, path: &str, token: &str) {
    let page = send(replica, "GET", path, token, &[], "");
    assert_eq!(page.status, 200, "{page:?}");
    let form = page.body.split("<form id=\"decide\"").nth(1).expect("the decision form");
    let csrf = form.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).expect("a CSRF token");
    let body = format!("verdict=approve&note=looks+right&csrf={csrf}");
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let decided = send(replica, "POST", path, token, &form, &body);
    assert_eq!(decided.status, 303, "{decided:?}");
}

// guide:begin test-approval
/// An approval given in the inbox of one replica is used by the same call repeated on the other,
/// once: root's agent asks replica A to delete a ticket, maria approves it on the page the agent
/// was sent to, and the agent's plain repeat (no confirmation id: a model just calls again) lands
/// on replica B, over MCP this time, and runs. A further repeat asks again.
#[test]
fn an_approval_given_on_one_replica_is_used_once_by_the_repeat_on_the_other() {
    let Some((a, b)) = replicas("approval") else { return };
    let (root, maria) = (token("root", &["admin"]), token("maria", &["approver"]));
    // Each replica's desk is its own memory (a real service's is its database): the ticket is
    // opened on both, since the deletion is asked of A, which checks it exists, and runs on B.
    for replica in [&a, &b] {
        expect_ok(&call(replica, Via::Api, &root, "tickets.create", json!({"title": "Printer jam"})));
    }

    let asked = call(&a, Via::Api, &root, "tickets.delete", json!({"id": 1}));
    let required = expect_error(&asked, ErrorCode::ConfirmationRequired);
    let url = required.detail("approvalUrl").and_then(Value::as_str).expect("where to approve");
    let page = url.strip_prefix(PUBLIC_URL).expect("under the public URL");
    approve_in_inbox(&a, page, &maria);

    let deleted = call(&b, Via::Mcp, &root, "tickets.delete", json!({"id": 1}));
    assert_eq!(expect_ok(&deleted)["title"], "Printer jam");
    assert_eq!(tickets(&b, &root), Vec::<Value>::new());
    let again = call(&a, Via::Api, &root, "tickets.delete", json!({"id": 1}));
    let asked_again = expect_error(&again, ErrorCode::ConfirmationRequired);
    assert_ne!(asked_again.detail("confirmationId"), required.detail("confirmationId"), "a new request");

    // One audit trail: B's inbox shows the decision given on A.
    let inbox = send(&b, "GET", "/inbox/", &maria, &[], "").body;
    let recent = inbox.split("<table id=\"recent\">").nth(1).expect("the recent decisions");
    assert!(recent.contains("<td>maria</td>") && recent.contains("tickets.delete"), "{recent}");
}
// guide:end test-approval

/// An MCP client that can ask its user (elicitation) gets the approval round in place: begun on
/// replica A, sealed with the key the replicas share through Redis (no key given), and finished
/// on replica B.
#[test]
fn an_mcp_approval_round_begun_on_one_replica_is_finished_on_the_other() {
    let Some((a, b)) = replicas("round") else { return };
    let root = token("root", &["admin"]);
    for replica in [&a, &b] {
        expect_ok(&call(replica, Via::Api, &root, "tickets.create", json!({"title": "Printer jam"})));
    }
    let asks_user = json!({"capabilities": {"elicitation": {}}});
    let asked = tools_call(&a, &root, "tickets.delete", json!({"id": 1}), asks_user.clone());
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a sealed state");
    let mut accept = asks_user;
    accept["inputResponses"] = json!({"agent-surface/confirm": {"action": "accept"}});
    accept["requestState"] = json!(state);
    let done = tools_call(&b, &root, "tickets.delete", json!({"id": 1}), accept);
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"]["title"], "Printer jam", "{done}");
}

// guide:begin test-quota-replicas
/// "5 creates per minute per user" is per user: the issuer and subject of the OAuth access token,
/// whatever token of hers, replica or transport a call comes through. Bob's budget is his own.
#[test]
fn one_users_quota_holds_across_replicas_tokens_and_transports() {
    let Some((a, b)) = replicas("quota") else { return };
    let (alice_laptop, alice_phone, bob) = (token("alice", &[]), token("alice", &[]), token("bob", &[]));
    let create = |replica, via, token: &str, n: u32| {
        call(replica, via, token, "tickets.create", json!({"title": format!("Issue {n}")}))
    };
    let five = [(&a, Via::Api, &alice_laptop), (&b, Via::Mcp, &alice_phone), (&b, Via::Api, &alice_laptop)];
    let five = five.into_iter().chain([(&a, Via::Mcp, &alice_phone), (&b, Via::Api, &alice_phone)]);
    for (n, (replica, via, token)) in (1..).zip(five) {
        assert_eq!(expect_ok(&create(replica, via, token, n))["opened_by"], "alice");
    }
    for (replica, via, token) in [(&a, Via::Api, &alice_phone), (&b, Via::Mcp, &alice_laptop)] {
        let sixth = create(replica, via, token, 6);
        expect_details(expect_error(&sixth, ErrorCode::RateLimited), json!({"reason": "rate"}));
    }
    assert_eq!(expect_ok(&create(&a, Via::Mcp, &bob, 7))["opened_by"], "bob");
}
// guide:end test-quota-replicas

/// What the operator sees of one replica: a token the issuer did not sign is refused before any
/// call, pointed to the OAuth metadata, and the operator log (JSON lines) says why while the
/// answer does not; the metrics at `/api/metrics` are Prometheus text naming the capability and
/// the refusals of its quota; SIGTERM drains the replica, which then exits cleanly.
#[test]
fn the_operator_log_the_metrics_and_the_drain_of_a_replica() {
    let Some((url, prefix)) = redis("operator") else { return };
    let mut replica = start(&url, &prefix);
    // Alice's signature under claims that make her an admin.
    let (alice, admin) = (token("alice", &[]), token("alice", &["admin"]));
    let forged = format!("{}.{}", admin.rsplit_once('.').expect("a JWT").0, alice.rsplit_once('.').expect("a JWT").1);
    let refused = send(&replica, "POST", "/api/invoke", &forged, &[("Content-Type", "application/json")], "{}");
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(!refused.body.contains("signature"), "{}", refused.body);
    let metadata_url = "http://tickets.test/.well-known/oauth-protected-resource";
    let challenge = refused.header("www-authenticate").expect("a challenge");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");
    let path = metadata_url.strip_prefix(PUBLIC_URL).expect("under the public URL");
    let metadata = request_blocking(&replica.addr, "GET", path, &[("Host", "tickets.test")], b"").json();
    assert_eq!((&metadata["resource"], &metadata["authorization_servers"]), (&json!(PUBLIC_URL), &json!([ISSUER])));
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let lines: Vec<Value> = replica.log().iter().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
        if let Some(line) = lines.iter().find(|l| l["fields"]["reason"] == "bad signature") {
            break line.clone();
        }
        assert!(Instant::now() < deadline, "no refusal logged: {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(logged["target"], "agent_surface::auth", "{logged}");
    assert!(replica.log().iter().all(|l| !l.contains(&forged)), "the token itself is never logged");

    for n in 1..=6 {
        call(&replica, Via::Api, &alice, "tickets.create", json!({"title": format!("Issue {n}")}));
    }
    let scraped = request_blocking(&replica.addr, "GET", "/api/metrics", &[], b"");
    assert_eq!(scraped.status, 200, "{scraped:?}");
    assert!(scraped.header("content-type").is_some_and(|t| t.starts_with("text/plain")), "{scraped:?}");
    let lines: Vec<&str> = scraped.body.lines().collect();
    let created = lines.iter().filter(|l| l.starts_with("agent_surface_calls_total{"));
    assert!(created.into_iter().any(|l| l.contains("capability=\"tickets.create\",code=\"OK\"")), "{lines:?}");
    let limited = "agent_surface_rate_limited_total{capability=\"tickets.create\",reason=\"rate\"} 1";
    assert!(lines.contains(&limited), "{lines:?}");

    let pid = replica.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs").success());
    let status = exited(&mut replica.child).expect("the replica exits once drained");
    assert!(status.success(), "{status}");
}

/// A replica made with a wiring that puts a guarantee at risk says so in the operator log its
/// `Serve` installs, though it made the part before `Serve` started (the guide's order): here two
/// issuers, whose one key set signs for both.
#[test]
fn a_wiring_warning_said_before_serve_starts_reaches_the_operator_log() {
    let Some((url, prefix)) = redis("wiring") else { return };
    let replica = start_with(&url, &prefix, &["--oauth-issuer", "https://other-id.tickets.test"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let said = loop {
        let lines: Vec<Value> = replica.log().iter().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
        let wiring = lines.iter().filter(|l| l["target"] == "agent_surface::wiring");
        let said: Vec<Value> = wiring.filter(|l| l.to_string().contains("share one key set")).cloned().collect();
        if !said.is_empty() {
            break said;
        }
        assert!(Instant::now() < deadline, "no wiring warning logged: {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(said.len(), 1, "said once: {said:?}");
    assert_eq!(said[0]["level"], "WARN", "{said:?}");
}

/// A SIGTERM sent the moment a replica says it listens drains it too (its handlers are installed
/// before it says so): it exits cleanly, not killed by the signal. The signal comes from a shell
/// that reads the replica's line and sends it at once; ten times, as the window is narrow.
#[test]
fn a_signal_as_soon_as_a_replica_listens_drains_it() {
    let Some((url, prefix)) = redis("signal-at-once") else { return };
    for _ in 0..10 {
        let mut replica = replica_command(&url, &prefix).spawn().expect("spawns");
        let said = replica.stdout.take().expect("stdout");
        let signal = format!("read line && kill -TERM {}", replica.id());
        let sent = Command::new("sh").args(["-c", &signal]).stdin(said).status().expect("sh runs");
        let status = exited(&mut replica).expect("the replica exits once drained");
        assert!(sent.success() && status.success(), "{status}");
    }
}

/// How `child` exited, waiting up to a minute; `None` if it is still running then.
fn exited(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("waits") {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// guide:begin test-report-replicas
/// 40 concurrent sends of one report, by two users, spread over both replicas and both
/// transports: one ticket is opened (counted on both desks), and every caller is answered with
/// it. The same report id with another title is a conflict on either replica.
#[test]
fn concurrent_reports_across_replicas_open_one_ticket() {
    let Some((a, b)) = replicas("report") else { return };
    let (alice, bob) = (token("alice", &[]), token("bob", &[]));
    let report = json!({"report_id": "MON-4711", "title": "Disk full on db-2"});
    let answers: Vec<InvokeResult> = std::thread::scope(|s| {
        let sends: Vec<_> = (0..40)
            .map(|i| {
                let replica = if i % 2 == 0 { &a } else { &b };
                let via = if i % 4 < 2 { Via::Api } else { Via::Mcp };
                let token = if i % 3 == 0 { &bob } else { &alice };
                let report = report.clone();
                s.spawn(move || call(replica, via, token, "tickets.report", report))
            })
            .collect();
        sends.into_iter().map(|send| send.join().expect("a send")).collect()
    });
    let opened = expect_ok(&answers[0]);
    assert!(answers.iter().all(|answer| expect_ok(answer) == opened), "one ticket for all: {answers:?}");
    let on_desks: Vec<Value> = [&a, &b].into_iter().flat_map(|replica| tickets(replica, &alice)).collect();
    assert_eq!(on_desks, std::slice::from_ref(opened), "opened once, on one replica");

    let other = json!({"report_id": "MON-4711", "title": "Disk fine"});
    for replica in [&a, &b] {
        let conflict = call(replica, Via::Mcp, &bob, "tickets.report", other.clone());
        let conflict = expect_error(&conflict, ErrorCode::InvocationConflict);
        expect_details(conflict, json!({"reason": "natural-key-used-by-different-request"}));
    }
}
// guide:end test-report-replicas

/// The replicas' wiring is consistent: every store on Redis, one clock, one audit sink
/// (`Registry::wiring_warnings` is empty), and agents are sent to the inbox under the public URL.
#[tokio::test]
async fn the_production_wiring_has_nothing_to_report() {
    use agent_surface::redis::{RedisConfig, RedisStores};

    let Some((url, prefix)) = redis("wiring") else { return };
    let redis = RedisStores::connect(&url, RedisConfig::with_prefix(prefix)).await.expect("Redis answers");
    let service = agent_surface_example_tickets::production::service(&redis, PUBLIC_URL).expect("well-formed");
    assert_eq!(service.registry.wiring_warnings(), []);
    let page = service.confirmations.approval_url("c-1");
    assert_eq!(page.as_deref(), Some("http://tickets.test/inbox/c/c-1"));
}
