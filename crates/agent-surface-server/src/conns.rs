//! The open connections, each waiting for a request head or busy with a request, and the shedding
//! that keeps the server serving at its connection cap: the connection that has been idle longest
//! between two requests (kept alive, waiting for its next one) is closed to admit a new one.
//!
//! A connection that has not yet sent its first request is never shed: that would only make a
//! reconnecting slow client come back at once, ahead of normal clients in the listen backlog (a
//! probe measured ten times fewer normal requests served with 2,000 slow clients against a cap of
//! 1,024). The minimum head rate and the header timeout close it; a kept-alive connection's
//! client reconnects when it next has a request, at no cost to anyone.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::TARGET;
use crate::drain::{Held, InFlight, kept};

/// The open connections of one server.
#[derive(Default)]
pub(crate) struct Conns {
    /// The connections idle between two requests, longest idle first, each with its eviction
    /// token.
    idle: Mutex<BTreeMap<(Instant, u64), CancellationToken>>,
    next_id: AtomicU64,
    /// Notified when a connection becomes idle (so one that can be shed).
    became_idle: Notify,
    log: ShedLog,
}

impl Conns {
    /// Registers a connection just admitted: waiting for its first head (not idle: never shed).
    pub(crate) fn open(self: &Arc<Self>) -> Arc<Conn> {
        Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            table: self.clone(),
            phase: AtomicU64::new(0),
            since: Mutex::new(None),
            evict: CancellationToken::new(),
        })
    }

    /// Closes the connection that has been idle longest between two requests; `false` if none is
    /// idle.
    pub(crate) fn evict_oldest(&self) -> bool {
        let oldest = lock(&self.idle).pop_first();
        match oldest {
            Some((_, evict)) => {
                evict.cancel();
                true
            }
            None => false,
        }
    }

    /// Resolves when a connection has become idle since the last call (or now).
    pub(crate) async fn became_idle(&self) {
        self.became_idle.notified().await;
    }

    /// Counts a connection shed, for the operator log.
    pub(crate) fn shed(&self, why: Shed) {
        self.log.count(why);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One open connection.
pub(crate) struct Conn {
    id: u64,
    table: Arc<Conns>,
    /// Even: waiting for a request head; odd: busy with a request. Incremented at each change, so
    /// that a new wait is told from the last one.
    phase: AtomicU64,
    /// While idle between two requests: since when (its key in [`Conns::idle`]).
    since: Mutex<Option<Instant>>,
    evict: CancellationToken,
}

impl Conn {
    /// The connection's phase: see [`Conn::is_busy`].
    pub(crate) fn phase(&self) -> u64 {
        self.phase.load(Ordering::Acquire)
    }

    /// Whether `phase` is busy with a request (else waiting for a head).
    pub(crate) fn is_busy(phase: u64) -> bool {
        phase % 2 == 1
    }

    /// Since when the connection has been idle between two requests (waiting for its next
    /// head); `None` while it is busy, or before its first request.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        *lock(&self.since)
    }

    pub(crate) fn table(&self) -> &Conns {
        &self.table
    }

    /// Cancelled when the server sheds this connection.
    pub(crate) fn evicted(&self) -> &CancellationToken {
        &self.evict
    }

    /// A request head arrived: busy until the returned guard is dropped (its response sent).
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        let since = lock(&self.since).take();
        if let Some(since) = since {
            lock(&self.table.idle).remove(&(since, self.id));
        }
        self.phase.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Its response sent: idle, waiting for its next request head, from now on.
    fn idle(&self) {
        let now = Instant::now();
        *lock(&self.since) = Some(now);
        lock(&self.table.idle).insert((now, self.id), self.evict.clone());
        self.phase.fetch_add(1, Ordering::AcqRel);
        self.table.became_idle.notify_one();
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(since) = lock(&self.since).take() {
            lock(&self.table.idle).remove(&(since, self.id));
        }
    }
}

/// A connection busy with a request until dropped.
pub(crate) struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle();
    }
}

/// The service of one connection: the router's, which marks the connection busy from the request
/// head until the response has been sent.
pub(crate) struct Tracked {
    inner: TowerToHyperService<axum::Router>,
    conn: Arc<Conn>,
    /// The server's requests in progress, which the drain waits for: each request is counted
    /// here, rather than by a middleware layer on the router (axum would box the router's every
    /// route once more and clone those boxes per request).
    in_flight: InFlight,
}

impl Tracked {
    pub(crate) fn new(router: axum::Router, conn: Arc<Conn>, in_flight: InFlight) -> Tracked {
        Tracked { inner: TowerToHyperService::new(router), conn, in_flight }
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let busy = self.conn.busy();
        let held = self.in_flight.hold();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            let held = kept(held, &response);
            Ok(response.map(|body| TrackedBody { body, _busy: busy, _held: held }))
        })
    }
}

/// A response body that keeps its connection busy, and a streamed answer's request counted in
/// flight ([`kept`]), until it is sent (dropped); its size, if known, is kept.
pub(crate) struct TrackedBody {
    body: axum::body::Body,
    _busy: Busy,
    _held: Option<Held>,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Why a connection was closed to keep the server serving.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shed {
    /// Its address already had [`Limits::max_connections_per_ip`](crate::Limits) connections.
    OverAddressCap,
    /// At the connection cap, it had been idle longest between two requests.
    AtCap,
    /// Its request head fell below [`Limits::min_head_rate`](crate::Limits).
    SlowHead,
}

/// How often, at most, the shedding is reported.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The counts of connections shed, reported at `WARN` at most every [`REPORT_EVERY`]: a flood of
/// slow clients must not become a flood of log lines.
#[derive(Default)]
struct ShedLog {
    counts: [AtomicU64; 3],
    next_report: Mutex<Option<Instant>>,
}

impl ShedLog {
    fn count(&self, why: Shed) {
        self.counts[why as usize].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut next = lock(&self.next_report);
        if next.is_some_and(|next| now < next) {
            return;
        }
        *next = Some(now + REPORT_EVERY);
        drop(next);
        let [over_address_cap, shed_at_cap, slow_heads] = [Shed::OverAddressCap, Shed::AtCap, Shed::SlowHead]
            .map(|why| self.counts[why as usize].swap(0, Ordering::Relaxed));
        tracing::warn!(target: TARGET, over_address_cap, shed_at_cap, slow_heads, "connections closed to keep serving");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_idle_longest_is_shed_and_never_a_busy_or_new_one() {
        let conns = Arc::new(Conns::default());
        let (first, second, third) = (conns.open(), conns.open(), conns.open());
        assert!(!conns.evict_oldest(), "a connection yet to send its first request is never shed");
        // Each serves a request, in this order; then the first gets another.
        drop(first.busy());
        drop(second.busy());
        drop(third.busy());
        let busy = first.busy();
        assert!(Conn::is_busy(first.phase()));
        assert!(conns.evict_oldest());
        assert!(second.evicted().is_cancelled() && !first.evicted().is_cancelled());
        // Its response sent, the first is idle again, now the most recently: the third goes next.
        std::thread::sleep(Duration::from_millis(2));
        drop(busy);
        assert!(!Conn::is_busy(first.phase()));
        assert!(conns.evict_oldest());
        assert!(third.evicted().is_cancelled());
        assert!(conns.evict_oldest() && first.evicted().is_cancelled());
        assert!(!conns.evict_oldest(), "none left");
        // A closed connection leaves the table.
        let fourth = conns.open();
        drop(fourth.busy());
        drop(fourth);
        assert!(!conns.evict_oldest());
    }

    #[test]
    fn a_wait_after_a_request_is_a_new_phase() {
        let conns = Arc::new(Conns::default());
        let conn = conns.open();
        let first = conn.phase();
        assert!(!Conn::is_busy(first));
        drop(conn.busy());
        assert!(!Conn::is_busy(conn.phase()));
        assert_ne!(conn.phase(), first);
    }
}
