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
