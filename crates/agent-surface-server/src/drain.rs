//! The drain of a shutdown: which requests it waits for ([`InFlight`], [`OpenStream`]), and what
//! it does to those that take too long ([`Drain`]).

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{Limits, TARGET};

/// A response extension marking a response as a long-lived event stream that carries no call's
/// answer — an MCP legacy session's standalone `GET` stream, a `subscriptions/listen` stream: the
/// drain does not wait for it, and it ends when [`Drain::streams`] is cancelled. The MCP
/// transport's router sets it; a router of your own sets it on such responses with
/// `response.extensions_mut().insert(OpenStream)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenStream;

/// The step [`Drain::cancel`] runs.
pub type CancelStep = Arc<dyn Fn() + Send + Sync>;

/// Work that outlives the request that started it and that a drain waits for as it waits for the
/// requests in flight ([`Drain::waiting_for`]): called once the requests are done, it gives a
/// future that completes when none of that work is left.
pub type Detached = Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// What a drain does besides waiting ([`crate::serve_with`]): how it cancels the requests that
/// outlive [`Limits::drain_timeout`], and the token that ends the long-lived streams.
/// Build it with [`Drain::cancelling`] or `Default`, then [`Drain::waiting_for`]: its fields may
/// grow.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Drain {
    /// Run once when [`Limits::drain_timeout`] passes with requests still in flight; it should
    /// make them answer soon. For a router over an agent-surface registry, `Registry::dispose`:
    /// a call still running ends `CANCELLED`, or `EXECUTION_FAILED {reason: outcome-unknown}` for
    /// a write whose handler had started, and that answer is sent within
    /// [`Limits::cancel_grace`]. Disposing is right when the registry ends with this server; a
    /// registry that another server (or anything else) goes on using needs a narrower step, or
    /// none. `None`: nothing is cancelled, and the requests left are dropped with their
    /// connections.
    pub cancel: Option<CancelStep>,
    /// Cancelled by the server when the drain is over (no request in flight, or the cancel step's
    /// grace has passed): give it to the routers whose long-lived streams must end then — the
    /// MCP transport's `router(…, streams)`, whose streams end the calls they carry when they
    /// end, so they must not end when the shutdown starts.
    pub streams: CancellationToken,
    /// Work the requests left behind, waited for with them ([`Drain::waiting_for`]): the calls
    /// answered as tasks, which run on after their request was answered. `None`: none.
    pub detached: Option<Detached>,
}

impl Drain {
    /// A drain whose cancel step is `cancel`, with a fresh [`Drain::streams`] token.
    pub fn cancelling(cancel: impl Fn() + Send + Sync + 'static) -> Drain {
        Drain { cancel: Some(Arc::new(cancel)), streams: CancellationToken::new(), detached: None }
    }

    /// The same drain, waiting also for the work `idle` tells of (see [`Detached`]): within
    /// [`Limits::drain_timeout`] as the requests are, then, after the cancel step, within
    /// [`Limits::cancel_grace`] — for the calls answered as tasks, `Tasks::idle` of the
    /// registry's task runtime, so that a task ends and its end is recorded before the server
    /// returns rather than being dropped with the process.
    ///
    /// ```
    /// use agent_surface_server::Drain;
    /// let drain = Drain::cancelling(|| {}).waiting_for(|| async {});
    /// assert!(drain.detached.is_some());
    /// ```
    pub fn waiting_for<F>(mut self, idle: impl Fn() -> F + Send + Sync + 'static) -> Drain
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.detached = Some(Arc::new(move || Box::pin(idle())));
        self
    }

    /// Completes when no request is in flight and none of the detached work is left.
    async fn idle(&self, in_flight: &InFlight) {
        in_flight.idle().await;
        if let Some(detached) = &self.detached {
            detached().await;
        }
    }

    /// Waits for the requests in flight up to `limits.drain_timeout`, then cancels the rest and
    /// gives them `limits.cancel_grace`; ends the streams.
    pub(crate) async fn run(&self, limits: &Limits, in_flight: &InFlight) {
        tracing::info!(target: TARGET, in_flight = in_flight.count(), drain_ms = millis(limits.drain_timeout),
            "draining: no new connections; waiting for the requests in flight");
        if tokio::time::timeout(limits.drain_timeout, self.idle(in_flight)).await.is_err() {
            match &self.cancel {
                Some(cancel) => {
                    tracing::warn!(target: TARGET, in_flight = in_flight.count(), "drain over: cancelling the calls left");
                    cancel();
                    if tokio::time::timeout(limits.cancel_grace, self.idle(in_flight)).await.is_err() {
                        tracing::warn!(target: TARGET, in_flight = in_flight.count(),
                            "requests still in flight after the cancellation; dropping them");
                    }
                }
                None => {
                    tracing::warn!(target: TARGET, in_flight = in_flight.count(), "drain over: dropping the requests left");
                }
            }
        }
        self.streams.cancel();
    }
}

impl std::fmt::Debug for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain")
            .field("cancel", &self.cancel.is_some())
            .field("streams", &self.streams)
            .field("detached", &self.detached.is_some())
            .finish()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The HTTP requests in progress, each held until its answer is ready, or, for a streamed answer,
/// until its body has been sent (or dropped); an [`OpenStream`] is not held.
///
/// Counting is an atomic add and subtract on every request; only a drain waiting for the count
/// to reach zero is woken, so a request that ends while nobody drains notifies nobody.
#[derive(Clone, Debug, Default)]
pub(crate) struct InFlight(Arc<Counter>);

/// The count of [`InFlight`], and how a drain waits for it to reach zero.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    count: AtomicUsize,
    /// Set once a drain waits ([`InFlight::idle`]): from then on a request that brings the count
    /// to zero wakes it.
    draining: AtomicBool,
    idle: Notify,
}

/// One request counted in [`InFlight`] until dropped.
pub(crate) struct Held(Arc<Counter>);

impl Drop for Held {
    fn drop(&mut self) {
        // Sequentially consistent with `idle`'s store of `draining` and load of the count: of a
        // last request ending and a drain starting, at least one sees the other.
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.draining.load(Ordering::SeqCst) {
            self.0.idle.notify_waiters();
        }
    }
}

impl InFlight {
    /// Counts a request from now until the [`Held`] is dropped; see [`kept`].
    pub(crate) fn hold(&self) -> Held {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        Held(self.0.clone())
    }

    /// How many requests are in progress.
    pub(crate) fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Waits until no request is in progress.
    pub(crate) async fn idle(&self) {
        self.0.draining.store(true, Ordering::SeqCst);
        loop {
            // Registered before the count is read, so that a request ending in between wakes it.
            let notified = self.0.idle.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// What of a request's count its answer keeps ([`crate::conns::Tracked`] puts it in the answer's
/// body): a body of known size is ready, and the server finishes sending it (the connection's
/// graceful shutdown waits for it); an open stream is no call's answer; any other streamed body
/// (an MCP answer as server-sent events) holds the count until its end (the body is dropped).
pub(crate) fn kept<B: axum::body::HttpBody>(held: Held, response: &axum::http::Response<B>) -> Option<Held> {
    if response.body().size_hint().exact().is_some() || response.extensions().get::<OpenStream>().is_some() {
        return None;
    }
    Some(held)
}

#[cfg(test)]
mod tests {
    use axum::body::HttpBody as _;
    use http_body_util::BodyExt as _;

    use super::*;

    /// A streamed answer keeps its request counted until its body is dropped (sent); a body of
    /// known size, and an open stream, do not.
    #[tokio::test]
    async fn a_request_is_in_flight_until_its_streamed_body_is_sent() {
        let in_flight = InFlight::default();
        let streamed = || axum::body::Body::from_stream(futures_util::stream::iter([Ok::<_, std::io::Error>("done")]));
        let call = axum::response::Response::new(streamed());
        let held = kept(in_flight.hold(), &call);
        assert_eq!(in_flight.count(), 1, "the body is not sent yet");
        let body = call.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"done");
        assert_eq!(in_flight.count(), 1, "held until the body is dropped");
        drop(held);
        assert_eq!(in_flight.count(), 0);

        let sized = axum::response::Response::new(axum::body::Body::from("done"));
        let held = kept(in_flight.hold(), &sized);
        assert!(held.is_none());
        assert_eq!(in_flight.count(), 0, "a body of known size is not held");
        assert_eq!(sized.into_body().size_hint().exact(), Some(4), "and keeps its size");

        let mut open = axum::response::Response::new(streamed());
        open.extensions_mut().insert(OpenStream);
        assert!(kept(in_flight.hold(), &open).is_none());
        assert_eq!(in_flight.count(), 0, "an open stream is not a call");
    }

    /// A drain waits for the last request in flight, however the ends and the drain interleave:
    /// idle at once with none; woken by the last of several ending, not by the first.
    #[tokio::test]
    async fn a_drain_is_woken_by_the_last_request_ending() {
        let in_flight = InFlight::default();
        tokio::time::timeout(Duration::from_secs(1), in_flight.idle()).await.expect("nothing in flight");
        let (a, b) = (in_flight.hold(), in_flight.hold());
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move { in_flight.idle().await }
        });
        tokio::task::yield_now().await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one request is still in flight");
        drop(b);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("woken when the last one ended").unwrap();
        // Many requests ending on other threads while a drain starts: it always ends.
        for _ in 0..200 {
            let held: Vec<_> = (0..4).map(|_| in_flight.hold()).collect();
            let ends = std::thread::spawn(move || drop(held));
            tokio::time::timeout(Duration::from_secs(1), in_flight.idle()).await.expect("never missed");
            ends.join().unwrap();
        }
    }
}
