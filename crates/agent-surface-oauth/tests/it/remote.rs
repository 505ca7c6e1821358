//! A JWKS fetched from a loopback server through the fetch hook: cached, refreshed, refetched
//! for an unknown `kid` at most once per interval, one fetch for many waiting requests, `503`
//! while no keys were ever had.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_oauth::{FetchError, Jwks, RemoteJwks, ResourceServer, ResourceServerConfig};
use agent_surface_policy::Authenticator;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::fixture::{Signer, claims, jwks_json, mint};

/// A loopback server answering `GET /jwks` with its current document, counting requests.
struct JwksServer {
    addr: SocketAddr,
    document: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl JwksServer {
    async fn start(document: String) -> JwksServer {
        let document = Arc::new(Mutex::new(document));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (doc, count) = (document.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                count.fetch_add(1, Ordering::SeqCst);
                let body = doc.lock().unwrap().clone();
                async move { body }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        JwksServer { addr, document, fetches, shutdown }
    }

    fn url(&self) -> String {
        format!("http://{}/jwks", self.addr)
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// The fetch hook of these tests: a plain HTTP/1.1 `GET` over a loopback socket.
fn loopback_get(url: &str) -> BoxFuture<'static, Result<Vec<u8>, FetchError>> {
    let url = url.to_string();
    Box::pin(async move {
        let rest = url.strip_prefix("http://").ok_or("not http")?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let text = String::from_utf8(response)?;
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("status line {:?}", head.lines().next()).into());
        }
        Ok(body.as_bytes().to_vec())
    })
}

fn server(remote: RemoteJwks) -> ResourceServer {
    ResourceServer::new(ResourceServerConfig { jwks: Jwks::remote(remote), ..crate::fixture::config() }).unwrap()
}

fn headers(token: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
    headers
}

/// The JWKS with only the keys whose `kid` is in `kids`.
fn only(kids: &[&str]) -> String {
    let mut jwks: Value = serde_json::from_str(&jwks_json()).unwrap();
    jwks["keys"].as_array_mut().unwrap().retain(|k| kids.contains(&k["kid"].as_str().unwrap()));
    jwks.to_string()
}

#[tokio::test]
async fn fetched_once_then_cached_refetched_for_a_new_kid_at_most_once_per_interval_and_refreshed() {
    let jwks = JwksServer::start(only(&["rsa-1"])).await;
    let oauth = server(RemoteJwks {
        refresh: Duration::from_millis(1500),
        min_refetch_interval: Duration::from_millis(300),
        ..RemoteJwks::new(jwks.url(), Arc::new(loopback_get))
    });
    let rsa = mint(Signer::Rsa, &claims());
    let ec = mint(Signer::Ec, &claims());

    // First use fetches; the next uses are served from the cache.
    for _ in 0..3 {
        assert!(oauth.try_authenticate(&headers(&rsa)).await.unwrap().is_some());
    }
    assert_eq!(jwks.fetches(), 1);

    // A kid the document lacks, within the interval: no fetch, refused.
    assert_eq!(oauth.try_authenticate(&headers(&ec)).await.unwrap_err().status(), 401);
    assert_eq!(jwks.fetches(), 1);

    // The authorization server rotates in a key; past the interval, the new kid is fetched once.
    *jwks.document.lock().unwrap() = only(&["rsa-1", "ec-1"]);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(oauth.try_authenticate(&headers(&ec)).await.unwrap().is_some());
    assert_eq!(jwks.fetches(), 2);

    // Forged kids right after cost nothing.
    let forged = jsonwebtoken::encode(
        &jsonwebtoken::Header {
            kid: Some("forged".into()),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256)
        },
        &claims(),
        &jsonwebtoken::EncodingKey::from_rsa_pem(&crate::fixture::key_file("rsa.pem")).unwrap(),
    )
    .unwrap();
    for _ in 0..5 {
        assert_eq!(oauth.try_authenticate(&headers(&forged)).await.unwrap_err().status(), 401);
    }
    assert_eq!(jwks.fetches(), 2);

    // Past the refresh interval the document is fetched again, once.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for _ in 0..3 {
        assert!(oauth.try_authenticate(&headers(&rsa)).await.unwrap().is_some());
    }
    assert_eq!(jwks.fetches(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiting_requests_share_one_fetch() {
    let jwks = JwksServer::start(jwks_json()).await;
    let oauth = Arc::new(server(RemoteJwks::new(jwks.url(), Arc::new(loopback_get))));
    let token = mint(Signer::Ed, &claims());
    let calls = (0..16).map(|_| {
        let (oauth, token) = (oauth.clone(), token.clone());
        tokio::spawn(async move { oauth.try_authenticate(&headers(&token)).await.unwrap().is_some() })
    });
    for call in calls.collect::<Vec<_>>() {
        assert!(call.await.unwrap());
    }
    assert_eq!(jwks.fetches(), 1);
}

#[tokio::test]
async fn no_keys_ever_fetched_is_503_and_a_failed_refresh_keeps_the_keys() {
    // Nothing listens there.
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let oauth = server(RemoteJwks::new(format!("http://{closed}/jwks"), Arc::new(loopback_get)));
    let token = mint(Signer::Rsa, &claims());
    let refused = oauth.try_authenticate(&headers(&token)).await.unwrap_err();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.challenge(), None);

    // Keys once fetched survive a server that goes away.
    let jwks = JwksServer::start(jwks_json()).await;
    let oauth = server(RemoteJwks {
        refresh: Duration::from_millis(100),
        min_refetch_interval: Duration::from_millis(100),
        ..RemoteJwks::new(jwks.url(), Arc::new(loopback_get))
    });
    assert!(oauth.try_authenticate(&headers(&token)).await.unwrap().is_some());
    *jwks.document.lock().unwrap() = "not json".into();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(oauth.try_authenticate(&headers(&token)).await.unwrap().is_some());
    assert_eq!(jwks.fetches(), 2);
    // A document that parses but holds no usable key (none at all, or encryption keys only) is a
    // failed fetch too: it never replaces the keys held.
    for document in [r#"{"keys":[]}"#, r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#] {
        *jwks.document.lock().unwrap() = document.into();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(oauth.try_authenticate(&headers(&token)).await.unwrap().is_some(), "{document}");
    }
    assert_eq!(jwks.fetches(), 4);
}
