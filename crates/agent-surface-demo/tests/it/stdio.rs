//! Raw bytes to `agent-surface-demo serve --stdio`: the real process answers every unusable frame
//! with a JSON-RPC error and keeps serving.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use serde_json::{Value, json};

#[test]
fn malformed_unknown_and_oversized_frames_get_json_rpc_errors() {
    let mut child = crate::demo()
        .args(["serve", "--stdio", "--memory"])
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
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    writeln!(stdin, "{init}").unwrap();
    assert_eq!(recv()["result"]["serverInfo"]["name"], "agent-surface-demo");
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();

    stdin.write_all(b"{not json at all\n").unwrap();
    assert_eq!(recv()["error"]["code"], -32700);
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"does/not/exist"}}"#).unwrap();
    let answer = recv();
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(2), json!(-32601)));
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":7}}}}"#).unwrap();
    assert_eq!(recv()["error"]["code"], -32602);
    // Over the default limit of 4 MiB.
    let big = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 << 20));
    writeln!(stdin, "{big}").unwrap();
    let answer = recv();
    assert_eq!(answer["error"]["code"], -32600);
    assert_eq!(answer["id"], Value::Null);

    // Still serving.
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"orders-get","arguments":{{"orderId":"A-1001"}}}}}}"#).unwrap();
    let answer = recv();
    assert_eq!(answer["id"], 5);
    assert_eq!(answer["result"]["structuredContent"]["orderId"], "A-1001");

    drop(stdin);
    assert!(child.wait().unwrap().success(), "the server ends cleanly when its input closes");
}

/// The shop's own resource, prompt and completion, served beside its tools from the same process
/// (`library.rs`, through `McpServer::with_fallback`).
#[test]
fn the_shops_resource_prompt_and_completion_are_served_beside_its_tools() {
    let mut child = crate::demo()
        .args(["serve", "--stdio", "--memory"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stderr = crate::served::keep_stderr(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |id: u64, method: &str, params: Value| {
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(answer["id"], id, "{answer}");
        answer
    };
    let init =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}});
    let caps = ask(1, "initialize", init)["result"]["capabilities"].clone();
    for capability in ["tools", "resources", "prompts", "completions"] {
        assert!(caps.get(capability).is_some(), "{capability}: {caps}");
    }
    let resources = ask(2, "resources/list", json!({}));
    let uri = resources["result"]["resources"][0]["uri"].as_str().expect("a resource").to_string();
    assert_eq!(uri, "shop://policies/refunds");
    let read = ask(3, "resources/read", json!({"uri": uri}));
    assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("within 30 days"), "{read}");
    let prompt = ask(4, "prompts/get", json!({"name": "draft_refund_reply", "arguments": {"orderId": "A-1002"}}));
    let text = prompt["result"]["messages"][0]["content"]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("Look up order A-1002,"), "{prompt}");
    let completion = ask(
        5,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "draft_refund_reply"}, "argument": {"name": "orderId", "value": "a-100"}}),
    );
    assert_eq!(completion["result"]["completion"]["values"], json!(["A-1001", "A-1002", "A-1003"]), "{completion}");
    let missing = ask(6, "prompts/get", json!({"name": "draft_refund_reply"}));
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    let tools = ask(7, "tools/list", json!({}));
    assert!(tools["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "orders-get"), "{tools}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
