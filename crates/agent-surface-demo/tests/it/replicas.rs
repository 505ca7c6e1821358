//! Two demo servers sharing one Redis (`serve --http --redis URL --state-key K`): an approval asked
//! on one replica is answered on the other and used once across both.

use serde_json::{Value, json};

use crate::served;

const STATE_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// A modern (2026-07-28) `tools/call` of `orders-cancel` to `addr`, with `extra` params merged.
fn cancel(addr: &str, extra: Value) -> Value {
    let mut params = json!({
        "name": "orders-cancel",
        "arguments": {"orderId": "A-1001"},
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

#[test]
fn an_approval_asked_on_one_replica_is_answered_on_the_other_and_used_once() {
    let Some(url) = agent_surface_testing::services::redis_url() else { return };
    let args = ["--redis", url.as_str(), "--state-key", STATE_KEY];
    let (a, b) = (served::start(&args), served::start(&args));

    let asked = cancel(&a.addr, json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});

    // The other replica opens the state and finds the confirmation in the shared store.
    let done = cancel(&b.addr, accept.clone());
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(payload(&done)["orderId"], "A-1001");

    // Replayed on the first replica (whose own shop still has the order): used already.
    let replay = cancel(&a.addr, accept);
    assert_eq!(replay["result"]["isError"], true, "{replay}");
    assert_eq!(payload(&replay)["code"], "CONFIRMATION_INVALID");
    assert_eq!(payload(&replay)["details"]["reason"], "consumed");
}
