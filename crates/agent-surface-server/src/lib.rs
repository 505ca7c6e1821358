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
//! - **a minimum head rate** ([`Limits::min_head_rate`], 512 bytes a second after
//!   [`Limits::head_rate_grace`], 2 s): a client that trickles its request head, or opens a
//!   connection and sends nothing, is closed after about 2 s instead of 10;
//! - **a connection cap** ([`Limits::max_connections`], 1,024): at the cap, a new connection is
//!   admitted by closing the one idle longest between two requests (kept alive, waiting for its
//!   next); when none is idle, accepting pauses (new clients wait in the listen backlog) until a
//!   connection ends — slow clients within about 2 s, by the head rate — or becomes idle;
//! - **a cap per peer address** ([`Limits::max_connections_per_ip`], 128): a connection over it
//!   is closed as soon as it is accepted, so one address cannot take every slot;
//! - **descriptors to match** ([`Limits::raise_descriptor_limit`],
//!   [`Limits::descriptor_reserve`], 128): at start the process's soft descriptor limit is raised
//!   to its hard limit, and the cap lowered if needed so that 128 descriptors stay free under it —
//!   a process out of descriptors accepts nobody, so the cap must bind first;
//! - **a bounded drain** ([`Limits::drain_timeout`], 10 s, and [`Limits::cancel_grace`], 1 s).
//!
//! The operator channel (`tracing`, target `agent_surface::server`) gets, at start, `INFO`
//! `serving` with the cap in force and the descriptor limit (`descriptor_limit`,
//! `descriptor_limit_at_start`, `descriptor_hard_limit`), and `WARN` if the cap had to be
//! lowered; while connections are being closed to keep serving, `WARN` `connections closed to keep
//! serving` at most every 10 s with the counts since the last one (`over_address_cap`,
//! `shed_at_cap`, `slow_heads`).
//!
//! These limits keep one process serving; they cannot tell a slow client from a slow network.
//! Behind a reverse proxy, let the proxy take the slow clients: it should read each request head
//! whole before it opens or uses a connection to this server, with its own head timeout, and cap
//! connections per client (the repository's `docs/operations.md` has the details).
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

mod conns;
mod descriptors;
mod drain;
mod head;
mod host;

pub use host::{HostCheck, check_host};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::conns::{Conns, Shed, Tracked};
use crate::drain::InFlight;
pub use crate::drain::{CancelStep, Detached, Drain, OpenStream};
use crate::head::{HeadRate, Paced};

/// The operator log's target for the server's events.
pub(crate) const TARGET: &str = "agent_surface::server";

/// What one server allows its clients. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most connections open at once (at least 1). At the cap, a new connection is admitted
    /// by closing the connection that has been idle longest between two requests (kept alive,
    /// waiting for its next one); a connection with a request in progress, or yet to send its
    /// first, is never closed for it. When none is idle, accepting pauses until a connection ends
    /// or becomes idle. The server lowers the cap to fit the descriptor limit (see
    /// [`Limits::descriptor_reserve`]).
    pub max_connections: usize,
    /// The most connections open at once from one peer address (an IPv6 peer: from its /64,
    /// which one client usually holds whole); a connection over it is closed when accepted.
    /// Clients behind one proxy or NAT share an address: raise it for them. At least 1.
    pub max_connections_per_ip: usize,
    /// How long a connection may take to deliver a request's complete head (request line and
    /// headers), counted from when the server starts waiting for it: it bounds slow clients and
    /// idle kept-alive connections alike.
    pub header_timeout: Duration,
    /// The slowest a request head may arrive, in bytes per second; 0 turns the rule off. A head
    /// gets [`Limits::head_rate_grace`] from its first byte — the first head of a connection,
    /// from when the connection was accepted — plus one second for every `min_head_rate` bytes of
    /// it received; a connection that falls behind is closed. A head sent in one go never comes
    /// near it; a client trickling a head, or opening a connection and sending nothing, is closed
    /// after about the grace, long before [`Limits::header_timeout`]. A kept-alive connection may
    /// stay idle between requests for up to the header timeout.
    pub min_head_rate: u32,
    /// The time every request head gets whatever its rate (see [`Limits::min_head_rate`]).
    pub head_rate_grace: Duration,
    /// Whether the server raises the process's soft descriptor limit (`RLIMIT_NOFILE`) to its hard
    /// limit when it starts, as Go's runtime does for every program: the soft limit is often 1,024
    /// while the hard limit allows far more, and each connection holds a descriptor. It is a
    /// process-wide change that child processes inherit. No effect where there is no such limit.
    pub raise_descriptor_limit: bool,
    /// The descriptors kept for everything but this server's connections (the listener, store
    /// connections, files, the runtime's own): the connection cap is lowered to the soft
    /// descriptor limit minus this, so that the cap binds before the process runs out of
    /// descriptors — out of descriptors, it could accept nobody. Several servers in one process
    /// each count the whole limit: give them caps that fit together.
    pub descriptor_reserve: usize,
    /// How long a shutdown waits for the requests in flight before it cancels them
    /// ([`Drain::cancel`]).
    pub drain_timeout: Duration,
    /// After the drain timeout, how long the cancelled requests get to send their answers; then,
    /// once the streams are ended, how long the connections left get to close before they are
    /// dropped.
    pub cancel_grace: Duration,
}

impl Default for Limits {
    /// 1,024 connections, 128 per peer address, 10 s for a request head and at least 512 bytes
    /// a second of it after a grace of 2 s, the descriptor limit raised with 128 descriptors kept
    /// in reserve, 10 s of drain, 1 s of grace.
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_connections_per_ip: 128,
            header_timeout: Duration::from_secs(10),
            min_head_rate: 512,
            head_rate_grace: Duration::from_secs(2),
            raise_descriptor_limit: true,
            descriptor_reserve: 128,
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
    let local = listener.local_addr()?;
    let cap = start_log(local, &limits);
    let in_flight = InFlight::default();
    let slots = Arc::new(Semaphore::new(cap));
    let per_ip = limits.max_connections_per_ip.max(1);
    let per_peer = Arc::new(PerPeer::default());
    let conns = Arc::new(Conns::default());
    let rate = HeadRate { min: limits.min_head_rate, grace: limits.head_rate_grace };
    let tracker = TaskTracker::new();
    // Cancelled when the drain runs out: what is still open is dropped.
    let dropped = CancellationToken::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: free one held by an idle client.
                    tracing::warn!(target: TARGET, error = %e, "accept failed");
                    conns.evict_oldest();
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let peer_ip = peer_key(peer.ip());
        if !per_peer.take(peer_ip, per_ip) {
            conns.shed(Shed::OverAddressCap);
            drop(stream);
            continue;
        }
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => match slot_at_cap(&slots, &conns, &shutdown).await {
                Some(slot) => slot,
                None => {
                    per_peer.give(peer_ip);
                    break;
                }
            },
        };
        // The first head's clock starts now, when the server starts reading it (not at accept: a
        // connection may have waited for its slot).
        let admitted = tokio::time::Instant::now();
        let _ = stream.set_nodelay(true);
        let conn = conns.open();
        let evicted = conn.evicted().clone();
        let service = Tracked::new(router.clone(), conn.clone(), in_flight.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            // The header timeout is `Paced`'s, on one timer per connection (see `head`).
            .header_read_timeout(None)
            .keep_alive(true)
            .serve_connection(TokioIo::new(Paced::new(stream, conn, rate, limits.header_timeout, admitted)), service);
        let (shutdown, dropped, per_peer) = (shutdown.clone(), dropped.clone(), per_peer.clone());
        tracker.spawn(async move {
            // The connection (and its socket) is dropped at the end of this block, before its
            // slot is given back: the sockets open never exceed the cap (and the one being admitted).
            let ended = {
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    ended = connection.as_mut() => Some(ended),
                    // Shed at the cap: closed (dropped) at once.
                    () = evicted.cancelled() => None,
                    () = shutdown.cancelled() => {
                        // Finish the response in progress, then close — unless the drain drops it.
                        connection.as_mut().graceful_shutdown();
                        tokio::select! {
                            ended = connection.as_mut() => Some(ended),
                            () = dropped.cancelled() => None,
                        }
                    }
                }
            };
            if let Some(Err(e)) = ended {
                tracing::debug!(target: TARGET, error = %e, "connection ended with an error");
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
        tracing::warn!(target: TARGET, "connections still open after the drain; dropping them");
        dropped.cancel();
        tracker.wait().await;
    }
    Ok(())
}

/// Raises the descriptor limit if asked to, derives the connection cap, and logs both (`INFO`;
/// `WARN` when the cap had to be lowered). Returns the cap.
fn start_log(local: std::net::SocketAddr, limits: &Limits) -> usize {
    let descriptors = descriptors::at_start(limits.raise_descriptor_limit);
    let soft = descriptors.map(|d| d.soft);
    let cap = descriptors::connection_cap(limits.max_connections, soft, limits.descriptor_reserve);
    let [descriptor_limit, descriptor_limit_at_start, descriptor_hard_limit] =
        descriptors.map_or([None; 3], |d| [Some(d.soft), Some(d.soft_at_start), Some(d.hard)]);
    tracing::info!(target: TARGET, addr = %local, max_connections = cap, max_connections_per_ip = limits.max_connections_per_ip,
        descriptor_limit, descriptor_limit_at_start, descriptor_hard_limit, descriptor_reserve = limits.descriptor_reserve,
        "serving");
    if cap < limits.max_connections {
        tracing::warn!(target: TARGET, configured = limits.max_connections, max_connections = cap, descriptor_limit,
            descriptor_hard_limit, descriptor_reserve = limits.descriptor_reserve,
            "the connection cap is lowered to fit the descriptor limit: raise the hard limit (LimitNOFILE= for a systemd service, ulimit -Hn, a container's nofile) or lower max_connections");
    }
    cap
}

/// A slot for a connection accepted at the cap: the connection idle longest between two requests
/// is shed to make room, or, when none is idle, the first slot freed — by a connection that ends,
/// or, once one becomes idle, by shedding it. `None`: the server is shutting down.
async fn slot_at_cap(
    slots: &Arc<Semaphore>,
    conns: &Conns,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    loop {
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        if conns.evict_oldest() {
            conns.shed(Shed::AtCap);
            return tokio::select! {
                slot = slots.clone().acquire_owned() => slot.ok(),
                () = shutdown.cancelled() => None,
            };
        }
        tokio::select! {
            slot = slots.clone().acquire_owned() => return slot.ok(),
            () = conns.became_idle() => {}
            () = shutdown.cancelled() => return None,
        }
    }
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
