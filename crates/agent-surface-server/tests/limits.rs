//! The limits against real sockets: slow and idle clients are closed after the header timeout, or
//! before it when they fall below the minimum head rate; one address cannot take every slot; at the
//! connection cap the connection idle longest makes room; the cap fits the descriptor limit; and a
//! shutdown drains.

#![allow(missing_docs, reason = "integration tests")]

use std::net::SocketAddr;
use std::sync::Arc;
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

/// One response read from `s`: up to its body `ok` or `released` (the routes' answers), or
/// whatever arrived within 5 s.
async fn answer_of(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    let read = async {
        while !(out.ends_with(b"\r\n\r\nok") || out.ends_with(b"released")) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&out).into_owned()
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

/// Slowloris below the minimum head rate: a head trickled a byte every 100 ms, and a new connection
/// that sends nothing, are closed after about the grace (500 ms), long before the header timeout
/// (30 s); a head that arrives in quick pieces, and a kept-alive connection idle for longer than
/// the grace, are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_below_the_minimum_rate_is_closed_long_before_the_header_timeout() {
    let limits = Limits {
        header_timeout: Duration::from_secs(30),
        min_head_rate: 512,
        head_rate_grace: Duration::from_millis(500),
        ..Limits::default()
    };
    let (addr, shutdown, _server) = start(limits).await;
    let mut slow = connect_from("127.0.0.1", addr).await;
    let mut silent = connect_from("127.0.0.1", addr).await;
    let started = Instant::now();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut closed = false;
    for _ in 0..100 {
        if slow.write_all(b"a").await.is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut slow, Duration::from_millis(100)).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "the trickling client was closed");
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await, "the silent connection was closed");
    assert!(started.elapsed() < Duration::from_secs(15), "long before the header timeout: {:?}", started.elapsed());
    // A head in pieces, each soon after the last, is served.
    let mut pieces = connect_from("127.0.0.1", addr).await;
    for piece in [&b"GET / HT"[..], b"TP/1.1\r\nHo", b"st: x\r\n\r\n"] {
        pieces.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answer_of(&mut pieces).await.contains("200 OK"));
    // Kept alive past the grace, its next head's clock starts with that head.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    pieces.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(answer_of(&mut pieces).await.contains("200 OK"), "the kept-alive connection was served");
    shutdown.cancel();
}

/// At the cap, a new client is admitted by closing the connection idle longest between two
/// requests; a connection with a request in progress, or yet to send its first, is never closed
/// for it, so when no connection is idle a new client waits for a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_connection_idle_longest_makes_room() {
    let release = CancellationToken::new();
    let waiting_requests = Arc::new(tokio::sync::watch::Sender::new(0usize));
    let router = {
        let (release, waiting_requests) = (release.clone(), waiting_requests.clone());
        axum::Router::new().route("/", axum::routing::get(|| async { "ok" })).route(
            "/wait",
            axum::routing::get(move || {
                let release = release.clone();
                waiting_requests.send_modify(|n| *n += 1);
                async move {
                    release.cancelled().await;
                    "released"
                }
            }),
        )
    };
    let requests_in_progress = |n: usize| {
        let mut seen = waiting_requests.subscribe();
        async move {
            tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|m| *m == n)).await.unwrap().unwrap();
        }
    };
    let limits = Limits {
        max_connections: 4,
        max_connections_per_ip: 100,
        header_timeout: Duration::from_secs(30),
        min_head_rate: 0,
        ..Limits::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let _server = tokio::spawn(serve(listener, router, limits, shutdown.clone()));
    // A connection busy with a request, one yet to send anything, and two kept alive after a
    // request each, the first idle longer.
    let mut busy = connect_from("127.0.0.1", addr).await;
    busy.write_all(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    requests_in_progress(1).await;
    let mut fresh = connect_from("127.0.0.2", addr).await;
    let mut idle_longer = kept_alive("127.0.0.3", addr).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut idle = kept_alive("127.0.0.4", addr).await;
    // At the cap: a new client is served at once (not after the 30 s header timeout)…
    let answer = tokio::time::timeout(Duration::from_secs(10), get("127.0.0.5", addr, "/")).await;
    assert!(answer.expect("served without waiting for a slot").contains("200 OK"));
    // …in the slot of the connection idle longest.
    assert!(closed_within(&mut idle_longer, Duration::from_secs(2)).await, "the connection idle longest was shed");
    assert!(!closed_within(&mut idle, Duration::from_millis(300)).await, "the other idle one was not");
    assert!(!closed_within(&mut fresh, Duration::from_millis(100)).await, "nor the one yet to send a request");
    // Two more requests that wait: the second, at the cap, sheds the last idle connection; then
    // none is idle, and a new client waits.
    let mut busy2 = connect_from("127.0.0.1", addr).await;
    busy2.write_all(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    requests_in_progress(2).await;
    let mut busy3 = connect_from("127.0.0.1", addr).await;
    busy3.write_all(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    requests_in_progress(3).await;
    assert!(closed_within(&mut idle, Duration::from_secs(2)).await, "the last idle connection was shed");
    let waiting = tokio::spawn(async move { get("127.0.0.6", addr, "/").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "no connection was shed while none was idle");
    assert!(!closed_within(&mut fresh, Duration::from_millis(100)).await, "the one yet to send a request stays");
    // The requests answered, their connections are idle: one makes room for the waiting client.
    release.cancel();
    for s in [&mut busy, &mut busy2, &mut busy3] {
        assert!(answer_of(s).await.contains("released"), "a busy connection kept its request");
    }
    assert!(waiting.await.unwrap().contains("200 OK"), "the waiting client was served once a connection was idle");
    shutdown.cancel();
}

/// A connection from `from` kept alive after one request answered.
async fn kept_alive(from: &str, addr: SocketAddr) -> TcpStream {
    let mut s = connect_from(from, addr).await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert!(answer_of(&mut s).await.contains("200 OK"));
    s
}

/// A client that waited for a slot longer than the head-rate grace, its head sent at once, is
/// served when a slot frees: the rule counts from when the server starts reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waited_for_a_slot_is_served() {
    let release = CancellationToken::new();
    let router = {
        let release = release.clone();
        axum::Router::new().route("/", axum::routing::get(|| async { "ok" })).route(
            "/wait",
            axum::routing::get(move || {
                let release = release.clone();
                async move {
                    release.cancelled().await;
                    "released"
                }
            }),
        )
    };
    let limits = Limits { max_connections: 1, head_rate_grace: Duration::from_millis(200), ..Limits::default() };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let _server = tokio::spawn(serve(listener, router, limits, shutdown.clone()));
    let waiting = get("127.0.0.1", addr, "/wait");
    let waiting = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = tokio::spawn(get("127.0.0.2", addr, "/"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!next.is_finished(), "it waits for the slot");
    release.cancel();
    assert!(waiting.await.unwrap().contains("released"));
    assert!(next.await.unwrap().contains("200 OK"), "served after waiting past the grace");
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

/// The variable that makes this test binary the child of `the_cap_fits_the_descriptor_limit`.
#[cfg(unix)]
const DESCRIPTOR_CHILD: &str = "AGENT_SURFACE_SERVER_DESCRIPTOR_CHILD";

/// In a child process (the limits are the process's): a soft descriptor limit below the hard one
/// is raised at start; with both at 160, the default cap of 1,024 becomes 32 (160 less the 128
/// reserved), so the 33rd kept-alive connection sheds the first; the start log says all of it.
#[cfg(unix)]
#[test]
fn the_cap_fits_the_descriptor_limit() {
    if std::env::var_os(DESCRIPTOR_CHILD).is_some() {
        return descriptor_child();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_cap_fits_the_descriptor_limit", "--nocapture", "--test-threads=1"])
        .env(DESCRIPTOR_CHILD, "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed:\n{stdout}\n{stderr}");
    let serving: Vec<&str> = stdout.lines().filter(|l| l.contains(" serving addr=")).collect();
    assert_eq!(serving.len(), 2, "{stdout}");
    assert!(serving[0].contains("descriptor_limit_at_start=256"), "{}", serving[0]);
    assert!(serving[1].contains("max_connections=32") && serving[1].contains("descriptor_limit=160"), "{}", serving[1]);
    assert!(stdout.contains("the connection cap is lowered to fit the descriptor limit"), "{stdout}");
}

#[cfg(unix)]
fn descriptor_child() {
    use rlimit::Resource;
    tracing_subscriber::fmt().with_writer(std::io::stdout).with_max_level(tracing::Level::INFO).init();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Raised: a soft limit of 256 under a higher hard limit becomes the hard limit.
    let (_, hard) = Resource::NOFILE.get().unwrap();
    Resource::NOFILE.set(256.min(hard), hard).unwrap();
    let (_, shutdown, _server) = runtime.block_on(async {
        let started = start(Limits::default()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        started
    });
    assert_eq!(Resource::NOFILE.get().unwrap(), (hard, hard), "the soft limit was raised to the hard one");
    shutdown.cancel();
    // Fitted: at 160 descriptors, 32 connections (kept alive after a request each), the one idle
    // longest shed first.
    Resource::NOFILE.set(160, 160).unwrap();
    runtime.block_on(async {
        let limits = Limits { min_head_rate: 0, header_timeout: Duration::from_secs(30), ..Limits::default() };
        let (addr, shutdown, _server) = start(limits).await;
        let mut held = Vec::new();
        for i in 0..40 {
            held.push(kept_alive(&format!("127.0.1.{}", i + 1), addr).await);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut open = Vec::new();
        for s in &mut held {
            open.push(!closed_within(s, Duration::from_millis(50)).await);
        }
        let expected: Vec<bool> = (0..40).map(|i| i >= 8).collect();
        assert_eq!(open, expected, "the first 8 were shed, 32 stay open");
        shutdown.cancel();
    });
}
