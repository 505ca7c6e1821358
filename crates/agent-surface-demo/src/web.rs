//! The scripted session's fourth part talks to the demo's own HTTP server through hyper's HTTP/1.1
//! client connection (`hyper::client::conn::http1` over a `TcpStream`): one request per
//! connection (`Connection: close`), the whole response body collected (at most
//! [`MAX_RESPONSE_BYTES`]).

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, HOST};
use hyper_util::rt::TokioIo;

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
    let mut builder = hyper::Request::builder().method(method).uri(path).header(HOST, addr).header(CONNECTION, "close");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(Bytes::copy_from_slice(body))).map_err(|e| format!("{method} {path}: {e}"))?;
    let exchange = async {
        let stream =
            tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        // The connection is driven beside the exchange; it ends with it (`Connection: close`).
        let driver = tokio::spawn(connection);
        let answered = async {
            let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES).collect().await.map_err(|e| e.to_string())?;
            let headers = parts
                .headers
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            let body = String::from_utf8_lossy(&body.to_bytes()).into_owned();
            Ok::<_, String>(Response { status: parts.status.as_u16(), headers, body })
        }
        .await;
        driver.abort();
        answered
    };
    tokio::time::timeout(RESPONSE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{method} {path}: no response within {} s", RESPONSE_TIMEOUT.as_secs()))?
}

/// `application/x-www-form-urlencoded` for `fields`.
pub(crate) fn form(fields: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish()
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

    #[tokio::test]
    async fn a_request_is_sent_with_its_host_and_a_chunked_body_is_read() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\nnote=ok") {
                let mut byte = [0u8; 1];
                assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "the request ended early: {head:?}");
                head.push(byte[0]);
            }
            stream
                .write_all(b"HTTP/1.1 303 See Other\r\nTransfer-Encoding: chunked\r\nLocation: /x\r\nX-A: b\r\n\r\n5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(head).unwrap().to_ascii_lowercase()
        });
        let r = request(&addr, "POST", "/inbox/c/1", &[("Cookie", "inbox_session=t")], b"note=ok").await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (303, "hello, world"));
        assert_eq!((r.header("Location"), r.header("x-a")), (Some("/x"), Some("b")));
        let sent = server.await.unwrap();
        assert!(sent.starts_with("post /inbox/c/1 http/1.1\r\n"), "{sent}");
        for line in [format!("host: {addr}"), "cookie: inbox_session=t".to_string(), "content-length: 7".to_string()] {
            assert!(sent.contains(&format!("{line}\r\n")), "{line} in {sent}");
        }
        let refused = request("127.0.0.1:1", "GET", "/", &[], b"").await;
        assert!(refused.unwrap_err().starts_with("cannot connect to 127.0.0.1:1"));
    }

    #[test]
    fn forms_are_encoded_and_tokens_found() {
        assert_eq!(form(&[("note", "ok by me & you"), ("csrf", "a.b")]), "note=ok+by+me+%26+you&csrf=a.b");
        assert_eq!(form(&[("a=b", "1+1=2%"), ("é", "")]), "a%3Db=1%2B1%3D2%25&%C3%A9=");
        assert_eq!(form(&[]), "");
        let page = r#"<input type="hidden" name="csrf" value="n.1.m"><input name="x" value="y">"#;
        assert_eq!(input_value(page, "csrf").as_deref(), Some("n.1.m"));
        assert_eq!(input_value(page, "nope"), None);
    }
}
