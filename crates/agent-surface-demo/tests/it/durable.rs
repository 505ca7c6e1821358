//! The demo's default store, on disk (`serve` without `--data`, `--memory` or `--redis`): killed
//! with `kill -9` while an approval is pending, a keyed write has completed and a long task is
//! running, and started again on the same folder, it has lost nothing it answered (#26).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::served::{self, Server};

const TOKENS: [&str; 4] = ["--token", "t-alice=alice", "--token", "t-maria=maria:approver"];

/// The server in `dir` with the default store, the tokens, the conformance fixtures (for a long
/// task) and a short task lease.
fn start(dir: &std::path::Path) -> Server {
    let mut args = TOKENS.to_vec();
    args.extend(["--conformance", "--task-lease-ms", "1000"]);
    served::start_in(dir, &args)
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A modern (2026-07-28) MCP request `method` with `params` (the `_meta` every request carries
/// added, the client declaring the tasks extension): the JSON-RPC answer.
pub(crate) fn mcp(addr: &str, method: &str, name: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "durable-test", "version": "1"}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method), ("Mcp-Name", name)];
    let response = served::post(addr, "/mcp", "127.0.0.1", &headers, &body);
    assert_eq!(response.status, 200, "{}", response.body);
    response.messages().into_iter().find(|m| m.get("id").is_some()).expect("an answer")
}

fn invoke(addr: &str, who: &str, capability: &str, input: &Value, key: Option<&str>) -> (u16, Value) {
    let body = json!({"capability": capability, "input": input}).to_string();
    let bearer = format!("Bearer {who}");
    let mut headers = vec![("Authorization", bearer.as_str())];
    headers.extend(key.map(|k| ("Idempotency-Key", k)));
    let r = served::post(addr, "/api/invoke", "127.0.0.1", &headers, &body);
    (r.status, json_of(&r.body))
}

/// Approves confirmation `id` in the inbox, as maria.
fn approve(addr: &str, id: &str) {
    let maria = [("Authorization", "Bearer t-maria")];
    let page = served::get(addr, &format!("/inbox/c/{id}"), &maria).body;
    let form = page.split("<form id=\"decide\"").nth(1).unwrap_or_else(|| panic!("no decision form: {page}"));
    let csrf = form.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap();
    let form = [maria[0], ("Content-Type", "application/x-www-form-urlencoded")];
    let body = format!("verdict=approve&note=ok&csrf={csrf}");
    let decided = served::request(addr, "POST", &format!("/inbox/c/{id}"), &form, body.as_bytes());
    assert_eq!(decided.status, 303, "{}", decided.body);
}

/// A fresh working directory under the system's temporary folder, removed at the end.
struct Folder(std::path::PathBuf);

impl Folder {
    fn new(test: &str) -> Folder {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("agent-surface-demo-{test}-{}-{nonce}", std::process::id()));
        std::fs::create_dir_all(&path).expect("a temporary folder");
        Folder(path)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_kill_9_loses_no_approval_result_or_task_of_the_default_store() {
    let dir = Folder::new("kill-9");
    let mut first = start(&dir.0);
    assert!(dir.0.join("agent-surface-data").join("agent-surface.db").exists(), "the default folder");

    // An approval pending.
    let order = json!({"orderId": "A-1003"});
    let (status, asked) = invoke(&first.addr, "t-alice", "orders.cancel", &order, None);
    assert_eq!(status, 428, "{asked}");
    let confirmation = asked["details"]["confirmationId"].as_str().unwrap().to_string();
    // A keyed write completed.
    let subject = json!({"subject": "Printer jam"});
    let (status, opened) = invoke(&first.addr, "t-alice", "tickets.open", &subject, Some("k-durable"));
    assert_eq!(status, 200, "{opened}");
    // A long task running.
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 100, "label": "x"}});
    let started = mcp(&first.addr, "tools/call", "slow_compute", call);
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    let task = started["result"]["taskId"].as_str().unwrap().to_string();

    first.kill();
    let second = start(&dir.0);

    // The approval is still pending, and used once when approved.
    let maria = [("Authorization", "Bearer t-maria")];
    let inbox = served::get(&second.addr, "/inbox/", &maria).body;
    assert!(inbox.contains(&format!("href=\"/inbox/c/{confirmation}\"")), "still pending: {inbox}");
    approve(&second.addr, &confirmation);
    let (status, done) = invoke(&second.addr, "t-alice", "orders.cancel", &order, None);
    assert_eq!((status, &done["output"]["orderId"]), (200, &json!("A-1003")), "{done}");
    let (status, again) = invoke(&second.addr, "t-alice", "orders.cancel", &order, None);
    assert!(status != 200 && again.get("output").is_none(), "used once: {status} {again}");
    let (_, got) = invoke(&second.addr, "t-alice", "orders.get", &order, None);
    assert_eq!(got["output"]["status"], "cancelled", "{got}");

    // The keyed retry replays the result the first process answered.
    let (status, replayed) = invoke(&second.addr, "t-alice", "tickets.open", &subject, Some("k-durable"));
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["output"], opened["output"], "the same ticket, not a second one");

    // The task ends: once its lease lapses, completed with the unknown outcome.
    assert_ended_unknown(&task_end(&second.addr, &task));
}

/// `tasks/get` of `task` through `addr` until it is not `working` (20 s at most): the answer.
pub(crate) fn task_end(addr: &str, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = mcp(addr, "tasks/get", task, json!({"taskId": task}));
        if got["result"]["status"] != "working" {
            return got;
        }
        assert!(Instant::now() < deadline, "the task of the killed process never ended: {got}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `tasks/get` answer: completed with `EXECUTION_FAILED {reason: outcome-unknown}`.
#[track_caller]
pub(crate) fn assert_ended_unknown(ended: &Value) {
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    let result = &ended["result"]["result"];
    assert_eq!(result["isError"], true, "{ended}");
    let payload = json_of(result["content"][0]["text"].as_str().expect("a text block"));
    assert_eq!(
        (payload["code"].as_str(), payload["details"]["reason"].as_str()),
        (Some("EXECUTION_FAILED"), Some("outcome-unknown")),
        "{payload}"
    );
}

/// `orders.cancel` of `order` over modern MCP (no sign-in, a client that can be asked), with
/// `extra` params (an answer and the state it answers): the JSON-RPC answer.
fn cancel_order(addr: &str, order: &str, extra: &Value) -> Value {
    let mut params = json!({
        "name": "orders-cancel",
        "arguments": {"orderId": order},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "durable-test", "version": "1"}
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

/// An MCP approval round begun before a restart is answered after it: the default store keeps the
/// confirmation, and the key that sealed the round's state is kept beside it
/// (`agent-surface-data/state.key`, 64 hex digits, readable by its owner only), not drawn afresh.
#[test]
fn an_mcp_approval_round_begun_before_a_restart_is_answered_after_it() {
    let dir = Folder::new("state-key");
    let mut first = served::start_in(&dir.0, &[]);
    let key_file = dir.0.join("agent-surface-data").join("state.key");
    let key = std::fs::read_to_string(&key_file).expect("the key is written at start");
    assert_eq!(key.trim().len(), 64, "{key}");
    assert!(key.trim().bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is its owner's alone");
    }
    let asked = cancel_order(&first.addr, "A-1001", &json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    first.kill();

    let second = served::start_in(&dir.0, &[]);
    assert_eq!(std::fs::read_to_string(&key_file).expect("kept"), key, "the key is read back, not drawn again");
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});
    let done = cancel_order(&second.addr, "A-1001", &accept);
    assert_eq!(done["result"]["isError"], false, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().expect("a text block");
    assert_eq!(json_of(text)["orderId"], "A-1001", "{done}");
}

/// Replicas on a shared store must seal approval rounds with one key: without `--state-key` the
/// demo refuses to start on `--redis` or `--postgres`, before it connects, and says why.
#[test]
fn a_shared_store_without_a_state_key_is_refused_at_start() {
    for store in [["--redis", "redis://127.0.0.1:1/"], ["--postgres", "postgres://nobody@127.0.0.1:1/none"]] {
        let out = crate::demo().args(["serve", "--http", "127.0.0.1:0"]).args(store).output().expect("the demo runs");
        assert!(!out.status.success(), "{store:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--state-key"), "{store:?}: {stderr}");
    }
}
