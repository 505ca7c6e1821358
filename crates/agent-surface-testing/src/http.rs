//! A small HTTP/1.1 client for tests of HTTP servers (the plain HTTP binding, the MCP
//! transport, a WebDriver server): one request per connection (`Connection: close`), written byte
//! for byte as the test gives it, the whole response read back (to its `Content-Length`, to the
//! last chunk of a `chunked` body, which is decoded, or to the connection's end).
//!
//! **It never half-closes its write side.** A server on hyper (which axum serves with) takes an
//! end of input while a request is in progress for a client that went away and drops the call, so
//! a client that shuts its write side after sending races the answer (an empty response, now and
//! then). These functions keep the write side open until the response has been read.
//!
//! ```
//! use agent_surface_testing::http;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let addr = listener.local_addr().unwrap();
//! tokio::spawn(async move {
//!     use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!     let (mut s, _) = listener.accept().await.unwrap();
//!     let mut buf = [0u8; 1024];
//!     let _ = s.read(&mut buf).await.unwrap();
//!     s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}").await.unwrap();
//! });
//! let response = http::post_json(addr, "/api/invoke", &[], r#"{"capability":"notes.list"}"#).await;
//! assert_eq!(response.status, 200);
//! assert_eq!(response.header("content-type"), Some("application/json"));
//! assert_eq!(response.json()["ok"], true);
//! # });
//! ```

use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a response may take before the test fails rather than hangs.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// A whole HTTP/1.1 response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code (0 when the server closed without a status line).
    pub status: u16,
    /// The header fields, in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body, as sent (no chunked decoding), lossily decoded as UTF-8.
    pub body: String,
}

impl Response {
    /// The first value of the header field `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics (naming the body) when it is not.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The JSON messages of a JSON body (one) or of a `text/event-stream` body (each `data:`
    /// line that parses).
    pub fn messages(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str(&self.body) {
            return vec![v];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }
}

/// Parses a whole HTTP/1.1 response; a `chunked` body is decoded. A response without a blank line
/// after its head is all head.
pub fn parse_response(raw: &[u8]) -> Response {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n");
    let head = String::from_utf8_lossy(&raw[..split.unwrap_or(raw.len())]).into_owned();
    let mut rest = split.and_then(|at| raw.get(at + 4..)).unwrap_or_default();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let chunked =
        headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = String::from_utf8_lossy(&rest[..end]);
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
            rest = &rest[end + 2..];
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[..size.min(rest.len())]);
            rest = rest.get(size + 2..).unwrap_or_default();
        }
    } else {
        body.extend_from_slice(rest);
    }
    Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Whether `raw` holds a whole response: its head, and as much body as `Content-Length` says or
/// the last chunk of a `chunked` body. (A body delimited by the connection's end is complete only
/// when the connection ends.)
fn complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let header = |name: &str| head.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    if let Some(length) = header("content-length:").and_then(|v| v.parse::<usize>().ok()) {
        return body.len() >= length;
    }
    header("transfer-encoding:") == Some("chunked")
        && (body.starts_with(b"0\r\n\r\n") || body.ends_with(b"\r\n0\r\n\r\n"))
}

/// The bytes of a request: `method path HTTP/1.1`, `Host: 127.0.0.1` unless `headers` name a
/// `Host`, `Connection: close`, a `Content-Length` of the body unless `headers` give one (or a
/// `Transfer-Encoding`), then `headers` as given, then the body.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !has("host") {
        head.push_str("Host: 127.0.0.1\r\n");
    }
    head.push_str("Connection: close\r\n");
    if !has("content-length") && !has("transfer-encoding") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Sends one request (see [`request_bytes`]) and reads the whole response.
pub async fn request(
    addr: impl tokio::net::ToSocketAddrs,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    send_raw(addr, &request_bytes(method, path, headers, body)).await
}

/// `POST path` with a JSON body (`Content-Type: application/json`, then `headers`).
pub async fn post_json(
    addr: impl tokio::net::ToSocketAddrs,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    request(addr, "POST", path, &all, body.as_bytes()).await
}

/// Writes `bytes` as they are (head and body) and reads the response: to its `Content-Length`,
/// to the last chunk of a `chunked` body, or else until the server closes (say `Connection:
/// close`). A failed write is ignored (a server may answer, `413` say, before reading
/// everything): the response is what the test looks at.
pub async fn send_raw(addr: impl tokio::net::ToSocketAddrs, bytes: &[u8]) -> Response {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("the server accepts a connection");
    let (mut read, mut write) = stream.split();
    let writer = async {
        let _ = write.write_all(bytes).await;
    };
    let mut raw = Vec::new();
    let reader = async {
        let mut buf = [0u8; 16 * 1024];
        while !complete(&raw) {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
    };
    // The write half is dropped only with the stream, after the response: no half-close.
    tokio::time::timeout(ANSWER_WITHIN, async { tokio::join!(writer, reader) }).await.expect("the server answers");
    parse_response(&raw)
}

/// [`request`] on a blocking socket, for synchronous tests.
pub fn request_blocking(
    addr: impl ToSocketAddrs,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    send_raw_blocking(addr, &request_bytes(method, path, headers, body))
}

/// As [`request_blocking`], waiting up to `within` for the answer instead of a minute: for a
/// request known to take long (a WebDriver server starting a browser on a busy machine). An
/// answer that does not come in time reads as what arrived (status 0 when nothing did).
pub fn request_blocking_within(
    addr: impl ToSocketAddrs,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    within: Duration,
) -> Response {
    send_blocking(addr, &request_bytes(method, path, headers, body), within)
}

/// [`send_raw`] on a blocking socket, for synchronous tests (the whole request is written before
/// the response is read).
pub fn send_raw_blocking(addr: impl ToSocketAddrs, bytes: &[u8]) -> Response {
    send_blocking(addr, bytes, ANSWER_WITHIN)
}

fn send_blocking(addr: impl ToSocketAddrs, bytes: &[u8], within: Duration) -> Response {
    let mut stream = std::net::TcpStream::connect(addr).expect("the server accepts a connection");
    stream.set_read_timeout(Some(within)).expect("a read timeout can be set");
    let _ = stream.write_all(bytes);
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !complete(&raw) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    parse_response(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_complete_at_their_length_or_last_chunk() {
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab"));
        assert!(complete(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd"));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert!(complete(chunked));
        assert!(!complete(&chunked[..chunked.len() - 5]));
        assert!(!complete(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"));
        let r = parse_response(chunked);
        assert_eq!((r.status, r.body.as_str()), (200, "abcde"));
        assert_eq!(parse_response(b"HTTP/1.1 404 Not Found\r\n").status, 404);
    }
}
