//! Hostile bodies: each answered with the right status, nothing echoed, the server still serving.

use agent_surface_http::HttpConfig;
use agent_surface_testing::{Secrets, assert_text_has_no_leak};

use crate::client::ResponseExt;
use crate::client::{Response, post_json, send, start};

fn secrets() -> Secrets {
    Secrets::new()
        .sql("SELECT * FROM users")
        .url("postgres://db.internal:5432")
        .other("sk-live-123")
        .other("hunter2-marker")
}

#[track_caller]
fn no_leak(r: &Response) {
    assert_text_has_no_leak("http response", &format!("{:?}{}", r.headers, r.body), &secrets());
}

#[tokio::test]
async fn hostile_bodies_are_protocol_faults_without_echo() {
    let config = HttpConfig { max_body_bytes: 4096, ..HttpConfig::default() };
    let server = start(config).await;
    let a = server.addr;
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("not json", "SELECT * FROM users; hunter2-marker".into(), 400, "malformed-json"),
        ("truncated", r#"{"capability":"echo.say","input":{"text":"sk-live-123""#.into(), 400, "malformed-json"),
        ("deeply nested", format!("{}{}", "[".repeat(200), "]".repeat(200)), 400, "malformed-json"),
        (
            "deep in input",
            format!(r#"{{"capability":"echo.say","input":{}{}}}"#, "[".repeat(200), "]".repeat(200)),
            400,
            "malformed-json",
        ),
        ("wrong type", r#"{"capability":["sk-live-123"]}"#.into(), 400, "invalid-request"),
        (
            "unknown member",
            r#"{"capability":"echo.say","SELECT * FROM users":"postgres://db.internal:5432"}"#.into(),
            400,
            "invalid-request",
        ),
        ("missing capability", r#"{"input":{"hunter2-marker":1}}"#.into(), 400, "invalid-request"),
        ("not an object", r#"["hunter2-marker"]"#.into(), 400, "invalid-request"),
        (
            "huge",
            format!(r#"{{"capability":"echo.say","input":{{"text":"{}"}}}}"#, "hunter2-marker".repeat(2000)),
            413,
            "body-too-large",
        ),
    ];
    for (name, body, status, kind) in cases {
        let r = post_json(a, "/invoke", &[], &body).await;
        assert_eq!(r.status, status, "{name}: {r:?}");
        r.assert_fault(status, kind);
        no_leak(&r);
    }
    // Not UTF-8.
    let r = send(a, "POST", "/invoke", &[("Content-Type", "application/json")], &[0xff, 0xfe, b'{']).await;
    r.assert_fault(400, "malformed-json");
    // Wrong and missing content type.
    let body = br#"{"capability":"echo.say","input":{"text":"a"}}"#;
    send(a, "POST", "/invoke", &[("Content-Type", "text/plain")], body)
        .await
        .assert_fault(415, "unsupported-media-type");
    send(a, "POST", "/invoke", &[], body).await.assert_fault(415, "unsupported-media-type");
    // A declared length over the cap, body never sent.
    send(a, "POST", "/invoke", &[("Content-Type", "application/json"), ("Content-Length", "100000000")], b"")
        .await
        .assert_fault(413, "body-too-large");
    // A chunked body (no declared length) over the cap, and a broken chunked body.
    let chunk = "x".repeat(8000);
    let chunked = format!("{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len());
    let headers = [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")];
    send(a, "POST", "/invoke", &headers, chunked.as_bytes()).await.assert_fault(413, "body-too-large");
    send(a, "POST", "/invoke", &headers, b"zz\r\nnot hex\r\n").await.assert_fault(400, "malformed-json");
    // Still serving, and `application/json; charset=utf-8` is JSON.
    let r = send(a, "POST", "/invoke", &[("Content-Type", "application/json; charset=utf-8")], body).await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn an_internal_cause_never_reaches_the_body() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"fail.with","input":{"kind":"secret"}}"#).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["code"], "EXECUTION_FAILED");
    no_leak(&r);
}

#[tokio::test]
async fn a_hostile_input_value_stays_out_of_the_problem() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(
        server.addr,
        "/invoke",
        &[],
        r#"{"capability":"echo.say","input":{"text":"a","SELECT * FROM users":"hunter2-marker"}}"#,
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["code"], "INVALID_INPUT");
    assert_text_has_no_leak("http response", &r.body, &Secrets::new().other("hunter2-marker"));
}

/// Slowloris: `serve` applies its limits — a request head trickled a byte at a time, and an idle
/// connection, are closed after the header timeout, while other clients are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = agent_surface_server::Limits {
        // Long enough for a loaded test machine to read a prompt client's head, short next to the
        // trickle below (about 1.8 s).
        header_timeout: std::time::Duration::from_secs(1),
        ..agent_surface_server::Limits::default()
    };
    let server = start(HttpConfig { limits, ..HttpConfig::default() }).await;
    let closed = |mut s: tokio::net::TcpStream| async move {
        let mut buf = [0u8; 64];
        matches!(tokio::time::timeout(std::time::Duration::from_secs(3), s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
    };
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    for b in b"POST /invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: aaaaaaaaaaaaaaaa" {
        if slow.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    assert!(closed(slow).await, "the slow client was closed");
    let idle = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    assert!(closed(idle).await, "the idle client was closed");
    let r = send(server.addr, "GET", "/capabilities", &[], b"").await;
    assert_eq!(r.status, 200);
}

/// A body within the size limit but made of many tiny JSON values (parsed, many times its size) is
/// the `413` fault, refused before it is parsed.
#[tokio::test]
async fn a_body_of_many_tiny_values_is_too_large() {
    let server = start(HttpConfig::default()).await;
    let body = format!(r#"{{"capability":"echo.say","input":{{"pad":[{}0]}}}}"#, "0,".repeat(70_000));
    assert!(body.len() < 1024 * 1024);
    let r = post_json(server.addr, "/invoke", &[], &body).await;
    r.assert_fault(413, "body-too-large");
}

/// The `traceparent` and `tracestate` headers are the caller's trace (the invocation span records
/// its ids); hostile ones are ignored — the call is answered as without them, nothing echoed.
#[test]
fn trace_context_headers_are_read_and_hostile_ones_ignored() {
    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let long = format!("00-{}", "a".repeat(8000));
    // (name, headers, whether the call continues the caller's trace)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, bool);
    let cases: Vec<Case<'_>> = vec![
        ("valid", vec![("traceparent", VALID), ("tracestate", "rojo=1"), ("tracestate", "congo=2")], true),
        ("bad tracestate kept the parent", vec![("traceparent", VALID), ("tracestate", "hunter2-marker")], true),
        ("uppercase", vec![("traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01")], false),
        ("repeated", vec![("traceparent", VALID), ("traceparent", VALID)], false),
        ("too long", vec![("traceparent", &long)], false),
        ("not hex", vec![("traceparent", "00-sk-live-123sk-live-123sk-live-123sk-00f067aa0ba902b7-01")], false),
        ("short", vec![("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736")], false),
    ];
    let (responses, log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let server = start(HttpConfig::default()).await;
            let mut responses = Vec::new();
            for (_, headers, _) in &cases {
                let mut headers = headers.clone();
                headers.push(("Authorization", "Bearer t-sam"));
                let body = r#"{"capability":"echo.say","input":{"text":"hi"}}"#;
                responses.push(post_json(server.addr, "/invoke", &headers, body).await);
            }
            drop(server);
            responses
        })
    });
    for ((name, _, traced), r) in cases.iter().zip(&responses) {
        assert_eq!(r.status, 200, "{name}: {r:?}");
        no_leak(r);
        let id = r.header("agent-surface-correlation-id").expect("a correlation id");
        let span = log.lines().find(|l| l.contains(&format!("correlation_id={id}"))).expect("the call's line");
        assert_eq!(
            span.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736 parent_id=00f067aa0ba902b7"),
            *traced,
            "{name}: {span}"
        );
    }
    let ignored = log.lines().filter(|l| l.contains("agent_surface::trace")).count();
    assert_eq!(ignored, 6, "one DEBUG event per ignored value:\n{log}");
    assert_text_has_no_leak("operator log", &log, &secrets());
}
