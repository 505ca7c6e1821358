//! Serving an agent-surface HTTP router with limits a hostile client cannot get around, and a
//! graceful drain.
//!
//! # Overview
//!
//! `axum::serve` keeps every connection a client opens for as long as the client likes: a client
//! that sends its request headers one byte at a time (slowloris), or opens connections and sends
//! nothing, holds a descriptor each, and about a thousand of them lock every other client out.
//! [`serve`] runs the same router with [`Limits`]:
//!
//! - **a header timeout** ([`Limits::header_timeout`], 10 s): a connection must deliver a
//!   request's complete head within it, measured from when the server starts waiting for one — so
//!   the same timeout also closes a kept-alive connection that stays idle;
//! - **a connection cap** ([`Limits::max_connections`], 1,024): at the cap the server stops
//!   accepting (new clients wait in the listen backlog) until a connection ends;
//! - **a cap per peer address** ([`Limits::max_connections_per_ip`], 128): a connection over it
//!   is closed as soon as it is accepted, so one address cannot take every slot;
//! - **a bounded drain** ([`Limits::drain_timeout`], 10 s, and [`Limits::cancel_grace`], 1 s).
//!
//! # Shutdown
//!
//! When the `shutdown` token is cancelled, the server drains:
//!
//! 1. **it stops accepting**: the listener is closed, so new connections are refused, and each
//!    connection closes after its response in progress;
//! 2. **it waits for the requests in flight**, up to [`Limits::drain_timeout`]. A request counts
//!    until its response is ready or, for a streamed response (an MCP answer as server-sent
//!    events), until its body has been sent; a response marked [`OpenStream`] (an MCP session's
//!    idle event stream) does not count;
//! 3. if the deadline passes with requests left, **it cancels them** with [`Drain::cancel`]
//!    ([`serve_with`]; for the adapters, disposing their registry) and gives their answers
//!    [`Limits::cancel_grace`] to go out;
//! 4. **it ends the streams** ([`Drain::streams`]), gives the connections left another
//!    [`Limits::cancel_grace`] to close, drops what is still open, and returns.
//!
//! So a shutdown takes at most `drain_timeout` + 2 × `cancel_grace`, and as little as the calls in
//! flight need. Signals are the caller's: cancel the token on SIGTERM or Ctrl-C (`tokio::signal`; the
//! demo's `shutdown.rs` shows one way). The events go to the operator channel (`tracing`, target
//! `agent_surface::server`): `INFO` when the drain starts, `WARN` `drain over` when the deadline
//! passes.
//!
//! Request bodies are bounded by the adapters themselves (size and read time); see the HTTP
//! binding's `HttpConfig` and the MCP transport's `McpHttpConfig`.
//!
//! # Examples
//!
//! ```no_run
//! use agent_surface_server::{Limits, serve};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run() -> std::io::Result<()> {
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let limits = Limits { max_connections_per_ip: 32, ..Limits::default() };
//! serve(listener, router, limits, CancellationToken::new()).await
//! # }
//! ```
//!
//! With a cancel step and a streams token ([`serve_with`]), for a router that runs calls of a
//! registry and carries long-lived streams:
//!
//! ```no_run
//! use agent_surface_server::{Drain, Limits, serve_with};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(cancel_calls: impl Fn() + Send + Sync + 'static) -> std::io::Result<()> {
//! let drain = Drain::cancelling(cancel_calls); // e.g. `move || registry.dispose()`
//! // A router whose event streams end with `drain.streams` (the MCP transport's `router`).
//! let streams = drain.streams.clone();
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! # drop(streams);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let shutdown = CancellationToken::new(); // cancelled on SIGTERM
//! serve_with(listener, router, Limits::default(), shutdown, drain).await
//! # }
//! ```

mod drain;
mod host;

pub use host::{HostCheck, check_host};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::drain::InFlight;
pub use crate::drain::{CancelStep, Drain, OpenStream};

/// What one server allows its clients. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most connections open at once; at the cap the server stops accepting until one ends.
    pub max_connections: usize,
    /// The most connections open at once from one peer address (an IPv6 peer: from its /64,
    /// which one client usually holds whole); a connection over it is closed when accepted.
    /// Clients behind one proxy or NAT share an address: raise it for them. At least 1.
    pub max_connections_per_ip: usize,
    /// How long a connection may take to deliver a request's complete head (request line and
    /// headers), counted from when the server starts waiting for it: it bounds slow clients and
    /// idle kept-alive connections alike.
    pub header_timeout: Duration,
    /// How long a shutdown waits for the requests in flight before it cancels them
    /// ([`Drain::cancel`]).
    pub drain_timeout: Duration,
    /// After the drain timeout, how long the cancelled requests get to send their answers; then,
    /// once the streams are ended, how long the connections left get to close before they are
    /// dropped.
    pub cancel_grace: Duration,
}

impl Default for Limits {
    /// 1,024 connections, 128 per peer address, 10 s for a request head, 10 s of drain, 1 s of
    /// grace.
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_connections_per_ip: 128,
            header_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            cancel_grace: Duration::from_secs(1),
        }
    }
}

/// How long the accept loop pauses after the listener failed (out of descriptors, say), so that
/// it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Connections open per peer address.
#[derive(Default)]
struct PerPeer(Mutex<HashMap<IpAddr, usize>>);

/// The address a peer is counted under: IPv4 (an IPv4-mapped IPv6 address as its IPv4 address),
/// or the /64 of an IPv6 address.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(std::net::Ipv6Addr::from(segments))
        }
        v4 => v4,
    }
}

impl PerPeer {
    /// Counts one more connection from `ip`, unless it already has `max`.
    fn take(&self, ip: IpAddr, max: usize) -> bool {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    /// Counts one connection from `ip` closed.
    fn give(&self, ip: IpAddr) {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` is cancelled, then drains (see
/// [the crate docs](crate#shutdown)) with no cancel step: the requests that outlive
/// [`Limits::drain_timeout`] are dropped with their connections. [`serve_with`] takes a cancel
/// step and a streams token.
///
/// HTTP/1.1 only (what the adapters' clients speak). Errors of single connections go to the
/// operator channel (`tracing`, target `agent_surface::server`) and never stop the server; an
/// `Err` is returned only if the listener cannot report its address.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, router, limits, shutdown, Drain::default()).await
}

/// Serves `router` on `listener` with `limits` until `shutdown` is cancelled, then drains (see
/// [the crate docs](crate#shutdown)): waits for the requests in flight, runs `drain.cancel` if
/// [`Limits::drain_timeout`] passes first, and cancels `drain.streams` when the drain is over.
///
/// HTTP/1.1 only. Errors as for [`serve`].
pub async fn serve_with(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: CancellationToken,
    drain: Drain,
) -> std::io::Result<()> {
    let _ = listener.local_addr()?;
    let in_flight = InFlight::default();
    let router = in_flight.layer(router);
    let slots = Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let per_ip = limits.max_connections_per_ip.max(1);
    let per_peer = Arc::new(PerPeer::default());
    let tracker = TaskTracker::new();
    // Cancelled when the drain runs out: what is still open is dropped.
    let dropped = CancellationToken::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(target: "agent_surface::server", error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let peer_ip = peer_key(peer.ip());
        if !per_peer.take(peer_ip, per_ip) {
            tracing::warn!(target: "agent_surface::server", peer = %peer.ip(), "connection over the per-address cap closed");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let (shutdown, dropped, per_peer) = (shutdown.clone(), dropped.clone(), per_peer.clone());
        tracker.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = shutdown.cancelled() => {
                    // Finish the response in progress, then close — unless the drain drops it.
                    connection.as_mut().graceful_shutdown();
                    tokio::select! {
                        ended = connection.as_mut() => Some(ended),
                        () = dropped.cancelled() => None,
                    }
                }
            };
            if let Some(Err(e)) = ended {
                tracing::debug!(target: "agent_surface::server", error = %e, "connection ended with an error");
            }
            per_peer.give(peer_ip);
            drop(slot);
        });
    }
    // Closing the listening socket refuses new connections at once, rather than leaving them in
    // the backlog until the drain is over.
    drop(listener);
    tracker.close();
    drain.run(&limits, &in_flight).await;
    // What is left: connections closing, streams that did not end with `drain.streams`, requests
    // that ignored the cancellation.
    if tokio::time::timeout(limits.cancel_grace, tracker.wait()).await.is_err() {
        tracing::warn!(target: "agent_surface::server", "connections still open after the drain; dropping them");
        dropped.cancel();
        tracker.wait().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_counted_by_ipv4_address_or_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(peer_key(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(peer_key(ip("::ffff:10.0.0.7")), ip("10.0.0.7"), "an IPv4-mapped address is its IPv4 address");
        assert_eq!(peer_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), ip("2001:db8:1:2::"));
        assert_eq!(peer_key(ip("2001:db8:1:2::1")), peer_key(ip("2001:db8:1:2::ffff")), "one /64, one peer");
        assert_ne!(peer_key(ip("2001:db8:1:2::1")), peer_key(ip("2001:db8:1:3::1")));
    }
}
