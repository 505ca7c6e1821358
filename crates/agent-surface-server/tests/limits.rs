//! The limits against real sockets: slow and idle clients are closed after the header timeout,
//! one address cannot take every slot, and a shutdown drains.

#![allow(missing_docs, reason = "integration tests")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agent_surface_server::{Drain, Limits, OpenStream, serve, serve_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

async fn start(limits: Limits) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" })).route(
        "/slow",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            "slow ok"
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, router, limits, shutdown.clone()));
    (addr, shutdown, server)
}

/// A connection from `from` (a loopback address) to `addr`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// `GET path` on a fresh connection from `from`; the response text.
async fn get(from: &str, addr: SocketAddr, path: &str) -> String {
    let mut s = connect_from(from, addr).await;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
    out
}

/// Whether the server closed `s` (a read returns end of file or an error) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(within, s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_closed_after_the_header_timeout() {
    let limits = Limits { header_timeout: Duration::from_millis(300), ..Limits::default() };
    let (addr, shutdown, _server) = start(limits).await;
    // Slowloris: a request head trickled a byte at a time never completes.
    let mut slow = connect_from("127.0.0.1", addr).await;
    let trickle = async {
        for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    };
    let started = Instant::now();
    trickle.await;
    assert!(closed_within(&mut slow, Duration::from_secs(3)).await, "the slow client was closed");
    assert!(started.elapsed() < Duration::from_secs(3));
    // An idle connection, and a kept-alive one after its response, are closed too.
    let mut idle = connect_from("127.0.0.1", addr).await;
    assert!(closed_within(&mut idle, Duration::from_secs(3)).await, "the idle client was closed");
    let mut kept = connect_from("127.0.0.1", addr).await;
    kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(closed_within(&mut kept, Duration::from_secs(3)).await, "the kept-alive client was closed when idle");
    // Meanwhile others are served.
    assert!(get("127.0.0.1", addr, "/").await.contains("200 OK"));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_slot() {
    let limits = Limits {
        max_connections: 16,
        max_connections_per_ip: 8,
        header_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let (addr, shutdown, _server) = start(limits).await;
    // An attacker on 127.0.0.2 opens 40 connections and sends nothing.
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(connect_from("127.0.0.2", addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut open = 0;
    for s in &mut held {
        if !closed_within(s, Duration::from_millis(50)).await {
            open += 1;
        }
    }
    assert_eq!(open, 8, "the attacker keeps exactly its per-address share");
    // Another client is still served at once.
    let started = Instant::now();
    assert!(get("127.0.0.3", addr, "/").await.contains("200 OK"));
    assert!(started.elapsed() < Duration::from_secs(2));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_finishes_the_requests_in_progress() {
    let (addr, shutdown, server) = start(Limits::default()).await;
    let in_progress = tokio::spawn(async move { get("127.0.0.1", addr, "/slow").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown.cancel();
    let answer = in_progress.await.unwrap();
    assert!(answer.contains("slow ok"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("drained").unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "no longer accepting");
}

/// A response that never ends does not hold a shutdown past the drain timeout: its connection is
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_drops_what_the_drain_did_not_finish() {
    let limits = Limits { drain_timeout: Duration::from_millis(200), ..Limits::default() };
    let (addr, shutdown, server) = start(limits).await;
    let mut stuck = connect_from("127.0.0.1", addr).await;
    stuck.write_all(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(closed_within(&mut stuck, Duration::from_secs(2)).await, "the stuck connection was dropped");
}

/// A router whose `/wait` answers `cancelled` once `cancel` fires, streamed (as an MCP answer is),
/// and whose `/events` is an [`OpenStream`] that ends with `streams`.
fn draining_router(cancel: CancellationToken, streams: CancellationToken) -> axum::Router {
    use futures_util::StreamExt as _;
    let wait = move || {
        let cancel = cancel.clone();
        async move {
            let answer = futures_util::stream::once(async move {
                cancel.cancelled().await;
                Ok::<_, std::io::Error>("cancelled")
            });
            axum::body::Body::from_stream(answer)
        }
    };
    let events = move || {
        let streams = streams.clone();
        async move {
            let ticks = futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(": keep-alive\n\n"))
                .then(|tick| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    tick
                })
                .take_until(streams.cancelled_owned());
            let mut response = axum::response::Response::new(axum::body::Body::from_stream(ticks));
            response.extensions_mut().insert(OpenStream);
            response
        }
    };
    axum::Router::new().route("/wait", axum::routing::get(wait)).route("/events", axum::routing::get(events))
}

/// A request that outlives the drain timeout is cancelled by the drain's cancel step, its answer
/// is sent, and `serve_with` returns within about the timeout plus the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_drain_timeout_is_cancelled_and_answered() {
    let cancel = CancellationToken::new();
    let drain = Drain::cancelling({
        let cancel = cancel.clone();
        move || cancel.cancel()
    });
    let router = draining_router(cancel, drain.streams.clone());
    let limits = Limits { drain_timeout: Duration::from_millis(300), ..Limits::default() };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_with(listener, router, limits, shutdown.clone(), drain));
    let waiting = tokio::spawn(async move { get("127.0.0.1", addr, "/wait").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "it waited for the deadline: {took:?}");
    assert!(took < Duration::from_millis(1300), "the answer went out at once: {took:?}");
    let answer = waiting.await.unwrap();
    assert!(answer.contains("200 OK") && answer.contains("cancelled"), "{answer}");
}

/// A response marked `OpenStream` does not hold the drain: a shutdown with only such a stream
/// open returns at once, the stream ended by the drain's streams token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_does_not_hold_the_drain() {
    let drain = Drain::default();
    let router = draining_router(CancellationToken::new(), drain.streams.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_with(listener, router, Limits::default(), shutdown.clone(), drain));
    let mut stream = connect_from("127.0.0.1", addr).await;
    stream.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).await.unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).contains("200 OK"));
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_millis(800), "{:?}", started.elapsed());
    assert!(closed_within(&mut stream, Duration::from_secs(1)).await, "the stream ended");
}
