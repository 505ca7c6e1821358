//! A small HTTP/1.1 client for the scripted session's fourth part, which talks to the demo's own
//! HTTP server: one request per connection (`Connection: close`), the response read to the end
//! (a `chunked` body decoded). The write side stays open until the response is read.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest the session waits for one response.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest response the session reads.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// An HTTP response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Response {
    /// The first value of header `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` to `addr` (`127.0.0.1:PORT`, also the `Host`) with `headers` and `body`.
pub(crate) async fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let exchange = async {
        let mut stream =
            tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
        stream.write_all(body).await.map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        (&mut stream).take(MAX_RESPONSE_BYTES as u64).read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        parse(&raw)
    };
    tokio::time::timeout(RESPONSE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{method} {path}: no response within {} s", RESPONSE_TIMEOUT.as_secs()))?
}

/// A whole response: status line, headers, body.
fn parse(raw: &[u8]) -> Result<Response, String> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("a response without a header end")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("a response without a status")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let mut decoded = Vec::new();
    if chunked {
        loop {
            let end = body.windows(2).position(|w| w == b"\r\n").ok_or("a chunk without a size line")?;
            let size = String::from_utf8_lossy(&body[..end]);
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| "a malformed chunk size")?;
            body = &body[end + 2..];
            if size == 0 {
                break;
            }
            let chunk = body.get(..size).ok_or("a truncated chunk")?;
            decoded.extend_from_slice(chunk);
            body = body.get(size + 2..).unwrap_or_default();
        }
    } else {
        decoded.extend_from_slice(body);
    }
    Ok(Response { status, headers, body: String::from_utf8_lossy(&decoded).into_owned() })
}

/// `application/x-www-form-urlencoded` for `fields`.
pub(crate) fn form(fields: &[(&str, &str)]) -> String {
    let encode = |s: &str| {
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(b)),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    };
    fields.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

/// The `value` of the first `<input … name="NAME" value="…">` on an HTML page (the inbox's form
/// tokens; its pages write `name` before `value`).
pub(crate) fn input_value(page: &str, name: &str) -> Option<String> {
    let at = page.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &page[at + name.len() + 15..];
    rest.split('"').next().map(|v| v.replace("&amp;", "&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_decoded() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n";
        let r = parse(raw).unwrap();
        assert_eq!((r.status, r.body.as_str(), r.header("x-a")), (200, "hello, world", Some("b")));
        let plain = parse(b"HTTP/1.1 303 See Other\r\nLocation: /x\r\n\r\n").unwrap();
        assert_eq!((plain.status, plain.header("Location")), (303, Some("/x")));
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn forms_are_encoded_and_tokens_found() {
        assert_eq!(form(&[("note", "ok by me & you"), ("csrf", "a.b")]), "note=ok+by+me+%26+you&csrf=a.b");
        let page = r#"<input type="hidden" name="csrf" value="n.1.m"><input name="x" value="y">"#;
        assert_eq!(input_value(page, "csrf").as_deref(), Some("n.1.m"));
        assert_eq!(input_value(page, "nope"), None);
    }
}
