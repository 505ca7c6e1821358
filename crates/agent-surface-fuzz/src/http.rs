//! One request through the HTTP binding's router, without a socket.

use std::sync::Arc;

use agent_surface_core::InvokeResult;
use agent_surface_http::wire::{self, ERROR_TYPE_PREFIX, PROBLEM_JSON, PROTOCOL_TYPE_PREFIX, ProtocolFault};
use agent_surface_http::{BearerTokens, HttpConfig};
use agent_surface_policy::Identity;
use axum::body::Body;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use serde_json::Value;
use tower::ServiceExt;

use crate::check;
use crate::fixture;

/// The body cap of the fuzzed router: small, so that `413` is reachable.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// Where the routes are mounted.
const PREFIX: &str = "/api";

/// The header that names the caller's session; the driver sets it to a fresh value on each run
/// (unless the input sends it), so that idempotency records never carry over between inputs.
const SESSION_HEADER: &str = "fuzz-session";

thread_local! {
    /// The router over this thread's fixture registry, built once per thread (here, not in the
    /// fixture, which knows no transport).
    static ROUTER: axum::Router = fixture::with(|f| router(f.registry.clone()));
}

/// The fixture's router: prefix `/api`, a 16 KiB body cap, a bearer token `fuzz-token`, and the
/// session in [`SESSION_HEADER`].
fn router(registry: agent_surface_registry::Registry) -> axum::Router {
    let config = HttpConfig {
        max_body_bytes: MAX_BODY_BYTES,
        authenticator: Some(Arc::new(BearerTokens::new([("fuzz-token", Identity::new("fuzz-user"))]))),
        consumer_header: HeaderName::from_static(SESSION_HEADER),
        ..HttpConfig::with_prefix(PREFIX)
    };
    agent_surface_http::router(registry, config)
}

/// Reads `data` as a request in the shape of an HTTP/1.1 message without its framing and sends
/// it through [`agent_surface_http::router`] (prefix `/api`, a 16 KiB body cap, a bearer token
/// `fuzz-token`, the session header `fuzz-session`) over the fixture's registry:
///
/// ```text
/// POST /api/invoke            ← method and target (default: POST /api/invoke)
/// host: localhost             ← header fields up to the first blank line; unusable ones are skipped
/// content-type: application/json
///
/// {"capability": "fuzz.echo", "input": {"text": "hi"}}     ← the body: everything after
/// ```
///
/// Panics (a finding) unless the answer is one of the documented ones: `200` with JSON (the
/// snapshot, or an ok result that decodes); a protocol fault whose status and body are exactly
/// the fault's; or a capability error whose status is the matrix's for its payload, whose body
/// is what the binding encodes for the decoded result (payload round-tripping, nothing of the
/// input's values in it), with `Retry-After` for `after-delay` and `WWW-Authenticate` on `401`.
///
/// ```
/// agent_surface_fuzz::http_request(b"POST /api/invoke\nhost: localhost\ncontent-type: application/json\n\n{\"capability\":\"fuzz.echo\",\"input\":{}}");
/// agent_surface_fuzz::http_request(b"GET /api/capabilities\nhost: 127.0.0.1:8080\n\n");
/// ```
pub fn http_request(data: &[u8]) {
    let (mut request, keys_carry_marker) = request(data);
    let head = request.method() == Method::HEAD;
    let invoke = request.uri().path().ends_with("/invoke");
    fixture::with(|f| {
        if !request.headers().contains_key(SESSION_HEADER) {
            let session = HeaderValue::from(f.next());
            request.headers_mut().insert(HeaderName::from_static(SESSION_HEADER), session);
        }
        f.runtime.block_on(async {
            let response = ROUTER.with(Clone::clone).oneshot(request).await.unwrap_or_else(|e| match e {});
            let (parts, body) = response.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_else(|e| panic!("the response body could not be read: {e}"));
            let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            if head && body.is_empty() {
                let documented =
                    parts.status == StatusCode::OK || ProtocolFault::ALL.iter().any(|f| f.status() == parts.status);
                assert!(documented, "an empty answer to HEAD with {}", parts.status);
                return;
            }
            let text = std::str::from_utf8(&body).unwrap_or_else(|e| panic!("a response body that is not UTF-8 ({e})"));
            let json: Value =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("a response body that is not JSON ({e}): {text}"));
            if content_type == PROBLEM_JSON {
                problem(parts.status, &parts.headers, text, &json, keys_carry_marker);
            } else {
                assert_eq!(content_type, wire::JSON, "an answer with another media type: {text}");
                assert_eq!(parts.status, StatusCode::OK, "a JSON answer that is not 200: {text}");
                if invoke {
                    let result = wire::decode(200, text)
                        .unwrap_or_else(|e| panic!("a success that does not decode ({e}): {text}"));
                    assert!(result.is_ok(), "a 200 that is not a success: {text}");
                    check::result_round_trips(&result);
                } else {
                    assert!(json.is_object(), "a snapshot that is not an object: {text}");
                }
            }
        });
    });
}

/// A problem answer: a protocol fault exactly as declared, or a capability error exactly as the
/// binding encodes its decoded result.
#[track_caller]
fn problem(status: StatusCode, headers: &http::HeaderMap, text: &str, json: &Value, keys_carry_marker: bool) {
    let kind = json["type"].as_str().unwrap_or_else(|| panic!("a problem without a type: {text}"));
    if let Some(kind) = kind.strip_prefix(PROTOCOL_TYPE_PREFIX) {
        let fault = ProtocolFault::ALL
            .into_iter()
            .find(|f| f.kind() == kind)
            .unwrap_or_else(|| panic!("an undeclared protocol fault: {text}"));
        assert_eq!(status, fault.status(), "a protocol fault with another status: {text}");
        assert_eq!(text, fault.body(), "a protocol fault with another body");
        if fault == ProtocolFault::MethodNotAllowed {
            assert!(headers.contains_key(header::ALLOW), "a 405 without Allow");
        }
        return;
    }
    assert!(kind.starts_with(ERROR_TYPE_PREFIX), "a problem of an unknown type: {text}");
    let result = wire::decode(status.as_u16(), text)
        .unwrap_or_else(|e| panic!("a capability error that does not decode ({e}): {text}"));
    check::result_round_trips(&result);
    let encoded = wire::encode(&result);
    assert_eq!(status, encoded.status, "a capability error with another status than the matrix's: {text}");
    assert_eq!(text, encoded.body, "a capability error's body is not what the binding encodes");
    let retry_after = headers.get(header::RETRY_AFTER).map(|v| v.to_str().unwrap_or_default().to_owned());
    assert_eq!(retry_after, encoded.retry_after.map(|s| s.to_string()), "Retry-After disagrees with the payload");
    if status == StatusCode::UNAUTHORIZED {
        assert!(headers.contains_key(header::WWW_AUTHENTICATE), "a 401 without a challenge");
    }
    if let InvokeResult::Error { error, .. } = &result {
        check::no_marker_leak(error, keys_carry_marker);
    }
}

/// The request `data` describes (see [`http_request`]), and whether a key of its body (when that
/// is JSON) carries [`crate::SECRET_MARKER`].
fn request(data: &[u8]) -> (Request<Body>, bool) {
    let (head, body) = split_head(data);
    let mut lines = head.split(|&b| b == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let mut method = Method::POST;
    let mut uri = Uri::from_static("/api/invoke");
    if let Some(first) = lines.next() {
        let mut words = first.splitn(2, |&b| b == b' ');
        let (m, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
        if let (Ok(m), Ok(target)) = (Method::from_bytes(m), Uri::try_from(target)) {
            method = m;
            uri = target;
        }
    }
    let mut request = Request::builder().method(method).uri(uri);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let name = HeaderName::from_bytes(line[..colon].trim_ascii());
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (name, value) {
            request = request.header(name, value);
        }
    }
    let keys_carry_marker = serde_json::from_slice::<Value>(body).is_ok_and(|v| check::marker_in_keys(&v));
    let request =
        request.body(Body::from(body.to_vec())).unwrap_or_else(|e| panic!("the request could not be built: {e}"));
    (request, keys_carry_marker)
}

/// The head (up to the first blank line) and the body; all head when there is no blank line.
fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    for (i, window) in data.windows(2).enumerate() {
        if window == b"\n\n" {
            return (&data[..i], &data[i + 2..]);
        }
        if window == b"\n\r" && data.get(i + 2) == Some(&b'\n') {
            return (&data[..i], &data[i + 3..]);
        }
    }
    (data, &[])
}
