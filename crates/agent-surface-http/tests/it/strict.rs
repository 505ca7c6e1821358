//! The request rules at the edges: `Idempotency-Key` grammar, invocation ids, duplicate members,
//! the body timeout, the host check on every route, content coding and charset, the `401`
//! challenge and prefix normalization.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_http::{Authenticator, BoxFuture, HttpConfig};
use agent_surface_policy::Identity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::ResponseExt;
use crate::client::{parse_response, post_json, send, send_as, send_raw, start, start_as_configured};

const BODY: &str = r#"{"capability":"echo.say","input":{"text":"a"}}"#;

#[tokio::test]
async fn idempotency_key_is_a_token_or_an_sf_string() {
    let server = start(HttpConfig::default()).await;
    let a = server.addr;
    // An sf-string with an escaped quote decodes to `a"b`, which equals the body's id.
    let with_id = r#"{"capability":"echo.say","input":{"text":"a"},"invocationId":"a\"b"}"#;
    let r = post_json(a, "/invoke", &[("Idempotency-Key", r#""a\"b""#)], with_id).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["invocationId"], "a\"b");
    // Escaped backslash, an inner space, and the bare token form.
    for (key, id) in [(r#""x\\y""#, "x\\y"), (r#""p q""#, "p q"), ("k.1~!", "k.1~!")] {
        let r = post_json(a, "/invoke", &[("Idempotency-Key", key)], BODY).await;
        assert_eq!(r.status, 200, "{key}: {r:?}");
        assert_eq!(r.json()["invocationId"], id, "{key}");
    }
    let longest = "k".repeat(255);
    let r = post_json(a, "/invoke", &[("Idempotency-Key", &longest)], BODY).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = post_json(a, "/invoke", &[("Idempotency-Key", &format!("\"{}\"", "q".repeat(255)))], BODY).await;
    assert_eq!(r.status, 200, "{r:?}");
    let too_long = "k".repeat(256);
    let too_long_quoted = format!("\"{}\"", "q".repeat(256));
    let bad = [
        "\"",
        "\"abc",
        r#""a\b""#,
        r#""a\""#,
        r#""a"b"#,
        r#""a" x"#,
        r#"a"b"#,
        r#""""#,
        "a b",
        too_long.as_str(),
        too_long_quoted.as_str(),
    ];
    for key in bad {
        post_json(a, "/invoke", &[("Idempotency-Key", key)], BODY).await.assert_fault(400, "invalid-header");
    }
    // Two fields, even equal ones.
    post_json(a, "/invoke", &[("Idempotency-Key", "k-9"), ("Idempotency-Key", "k-9")], BODY)
        .await
        .assert_fault(400, "invalid-header");
}

#[tokio::test]
async fn a_body_invocation_id_is_printable_ascii() {
    let server = start(HttpConfig::default()).await;
    let body = |id: &str| format!(r#"{{"capability":"echo.say","input":{{"text":"a"}},"invocationId":{id}}}"#);
    let too_long = format!("\"{}\"", "i".repeat(256));
    for id in [r#""""#, r#""a\u0001b""#, r#""a\tb""#, r#""\u00e9""#, r#""a\u007fb""#, too_long.as_str()] {
        post_json(server.addr, "/invoke", &[], &body(id)).await.assert_fault(400, "invalid-request");
    }
    for id in [r#""a b""#, r#""a\"b""#, &format!("\"{}\"", "i".repeat(255))] {
        let r = post_json(server.addr, "/invoke", &[], &body(id)).await;
        assert_eq!(r.status, 200, "{id}: {r:?}");
    }
}

#[tokio::test]
async fn a_member_named_twice_is_an_invalid_request() {
    let server = start(HttpConfig::default()).await;
    for body in [
        r#"{"capability":"a","capability":"b"}"#,
        r#"{"capability":"echo.say","input":{"text":"a","text":"b"}}"#,
        r#"{"capability":"echo.say","input":{"text":"a","deep":[{"k":1,"k":2}]}}"#,
    ] {
        post_json(server.addr, "/invoke", &[], body).await.assert_fault(400, "invalid-request");
    }
    // The same name in different objects is fine (and reaches the pipeline).
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"echo.say","input":{"text":"capability"}}"#).await;
    assert_eq!(r.status, 200, "{r:?}");
    // A syntax error anywhere is still malformed JSON.
    post_json(server.addr, "/invoke", &[], r#"{"capability":"a","capability":"b""#)
        .await
        .assert_fault(400, "malformed-json");
}

#[tokio::test]
async fn a_body_that_stalls_is_a_request_timeout() {
    let config = HttpConfig { body_timeout: Duration::from_millis(200), ..HttpConfig::default() };
    let server = start(config).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.unwrap();
    // The connection stays open, the other 99 bytes never come.
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("the server answers within the timeout")
        .unwrap();
    parse_response(&raw).assert_fault(408, "request-timeout");
}

#[tokio::test]
async fn the_host_check_covers_every_route() {
    let server = start(HttpConfig::with_prefix("/api")).await;
    let a = server.addr;
    for (method, path) in
        [("GET", "/nowhere"), ("GET", "/api/invoke"), ("PUT", "/api/capabilities"), ("POST", "/api/invoke")]
    {
        send_as(a, "evil.example", method, path).await.assert_fault(403, "host-not-allowed");
    }
    // Absolute form: the target's authority is the host, not the `Host` header.
    let raw = "GET http://evil.example/api/capabilities HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    send_raw(a, raw.as_bytes()).await.assert_fault(403, "host-not-allowed");
    let raw = "GET http://localhost:9/api/capabilities HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
    let r = send_raw(a, raw.as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    // Two `Host` fields: refused, whether or not they agree.
    for second in ["127.0.0.1", "evil.example"] {
        let raw =
            format!("GET /api/capabilities HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: {second}\r\nConnection: close\r\n\r\n");
        send_raw(a, raw.as_bytes()).await.assert_fault(400, "invalid-header");
    }
}

#[tokio::test]
async fn content_coding_and_charset_are_checked() {
    let server = start(HttpConfig::default()).await;
    let a = server.addr;
    let json = ("Content-Type", "application/json");
    for coding in ["gzip", "identity, gzip", "br"] {
        let r = send(a, "POST", "/invoke", &[json, ("Content-Encoding", coding)], BODY.as_bytes()).await;
        r.assert_fault(415, "unsupported-media-type");
        assert_eq!(r.header("accept-encoding"), Some("identity"), "{coding}");
    }
    let r = send(a, "POST", "/invoke", &[json, ("Content-Encoding", "Identity")], BODY.as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    // Two `Content-Type` fields.
    let r = send(a, "POST", "/invoke", &[json, json], BODY.as_bytes()).await;
    r.assert_fault(415, "unsupported-media-type");
    assert_eq!(r.header("accept-encoding"), None);
    for bad in [
        "application/json; charset=latin1",
        "application/json;charset=\"iso-8859-1\"",
        "application/json; charset=\"utf-8",
    ] {
        send(a, "POST", "/invoke", &[("Content-Type", bad)], BODY.as_bytes())
            .await
            .assert_fault(415, "unsupported-media-type");
    }
    for good in ["application/json; charset=UTF-8", "application/json;charset=\"utf-8\"", "Application/JSON; q=1"] {
        let r = send(a, "POST", "/invoke", &[("Content-Type", good)], BODY.as_bytes()).await;
        assert_eq!(r.status, 200, "{good}: {r:?}");
    }
}

struct Challenging(&'static str);

impl Authenticator for Challenging {
    fn authenticate<'a>(&'a self, _headers: &'a http::HeaderMap) -> BoxFuture<'a, Option<Identity>> {
        Box::pin(std::future::ready(None))
    }

    fn challenge(&self) -> &str {
        self.0
    }
}

#[tokio::test]
async fn a_401_always_carries_a_challenge() {
    let auth = r#"{"capability":"fail.with","input":{"kind":"auth"}}"#;
    let cases: [(Option<Arc<dyn Authenticator>>, &str); 3] = [
        (None, "Bearer"),
        (Some(Arc::new(Challenging("bad\r\nvalue"))), "Bearer"),
        (Some(Arc::new(Challenging("Basic realm=\"x\""))), "Basic realm=\"x\""),
    ];
    for (authenticator, want) in cases {
        let server = start_as_configured(HttpConfig { authenticator, ..HttpConfig::default() }).await;
        let r = post_json(server.addr, "/invoke", &[], auth).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.header("www-authenticate"), Some(want));
    }
}

#[tokio::test]
async fn a_prefix_is_normalized() {
    for prefix in ["api", "/api/", "api//"] {
        let server = start(HttpConfig::with_prefix(prefix)).await;
        let r = send(server.addr, "GET", "/api/capabilities", &[], b"").await;
        assert_eq!(r.status, 200, "{prefix}: {r:?}");
    }
    let server = start(HttpConfig::with_prefix("/")).await;
    let r = send(server.addr, "GET", "/capabilities", &[], b"").await;
    assert_eq!(r.status, 200, "{r:?}");
}
