//! Graceful shutdown of `serve`: on SIGTERM or Ctrl-C (SIGINT) the server stops taking requests,
//! lets the calls in flight finish within the drain deadline (`--drain-ms`, [`DEFAULT_DRAIN`]),
//! then disposes the registry — a call still running ends `CANCELLED`, or `EXECUTION_FAILED
//! {reason: outcome-unknown}` for a write whose handler had started — and `serve` returns, so
//! that the process exits 0. A second signal during the drain ends it at once.
//!
//! | step | HTTP (`serve --http`) | stdio (`serve --stdio`) |
//! |---|---|---|
//! | stop taking requests | the listener stops accepting; each connection closes after its response in progress | standard input reads as closed; `rmcp` stops reading requests |
//! | wait | until no request is in progress (an MCP session's idle `GET` stream does not count), or the deadline | until every call is answered, or the deadline (`rmcp` itself waits at most 5 s) |
//! | cancel the rest | `Registry::dispose`; the answers it produces are sent for up to [`CANCEL_GRACE`], then the connections left are dropped | `Registry::dispose`; the answers are written for up to [`CANCEL_GRACE`] |
//!
//! Calls answered as MCP tasks run on after their request was answered: they are not waited for,
//! and the disposal cancels them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_surface_registry::Registry;
use axum::body::HttpBody as _;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How long in-flight calls may take to finish after a signal, unless `--drain-ms` says otherwise.
pub(crate) const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// How long the answers of the calls the disposal ended may take to reach their clients.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// The operator log's target for shutdown events.
const TARGET: &str = "agent_surface::demo";

/// Waits for SIGTERM or SIGINT (Ctrl-C) and names it. If the handlers cannot be installed, it
/// logs why and waits for what it could install (possibly forever).
pub(crate) async fn signalled() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => Some(term),
            Err(e) => {
                tracing::warn!(target: TARGET, error = %e, "cannot handle SIGTERM; only Ctrl-C drains");
                None
            }
        };
        let term = async {
            match &mut term {
                Some(term) => term.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term => "SIGTERM",
            interrupted = tokio::signal::ctrl_c() => interrupted_or_pending(interrupted).await,
        }
    }
    #[cfg(not(unix))]
    {
        interrupted_or_pending(tokio::signal::ctrl_c().await).await
    }
}

/// `SIGINT`, or pending forever when its handler could not be installed.
async fn interrupted_or_pending(interrupted: std::io::Result<()>) -> &'static str {
    if let Err(e) = interrupted {
        tracing::warn!(target: TARGET, error = %e, "cannot handle Ctrl-C");
        std::future::pending::<()>().await;
    }
    "SIGINT"
}

/// The HTTP requests in progress, each held until its answer is ready, or, for a streamed answer,
/// until its body has been sent (or dropped).
#[derive(Clone, Debug, Default)]
pub(crate) struct InFlight(Arc<watch::Sender<usize>>);

/// One request counted in [`InFlight`] until dropped.
struct Held(Arc<watch::Sender<usize>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl InFlight {
    fn hold(&self) -> Held {
        self.0.send_modify(|n| *n += 1);
        Held(self.0.clone())
    }

    /// How many requests are in progress.
    pub(crate) fn count(&self) -> usize {
        *self.0.borrow()
    }

    /// Waits until no request is in progress.
    async fn idle(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Counts the requests `router` serves, except `GET stream_path` (an MCP session's standalone
    /// event stream, which stays open while the session lives and carries no call's answer).
    pub(crate) fn layer(&self, router: axum::Router, stream_path: String) -> axum::Router {
        let in_flight = self.clone();
        router.layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let (in_flight, stream_path) = (in_flight.clone(), stream_path.clone());
            async move {
                if request.method() == axum::http::Method::GET && request.uri().path() == stream_path {
                    return next.run(request).await;
                }
                let held = in_flight.hold();
                let response = next.run(request).await;
                // A body of known size is ready, and the server finishes sending it; a streamed
                // one (an MCP answer as server-sent events) holds the count until its end. It is
                // not wrapped otherwise, since the wrapper would hide its size (and make the
                // response chunked).
                if response.body().size_hint().exact().is_some() {
                    return response;
                }
                response.map(|body| {
                    axum::body::Body::new(body.map_frame(move |frame| {
                        let _held = &held;
                        frame
                    }))
                })
            }
        }))
    }
}

/// What an HTTP server's drain acts on.
#[derive(Debug)]
pub(crate) struct HttpDrain {
    /// The registry the servers call; disposed when the deadline passes.
    pub(crate) registry: Registry,
    /// Cancelled on the signal: the listener stops accepting (`agent_surface_server::serve`).
    pub(crate) accepting: CancellationToken,
    /// Cancelled when the drain is over: ends the MCP transport's event streams.
    pub(crate) streams: CancellationToken,
    /// The requests in progress.
    pub(crate) in_flight: InFlight,
    /// How long the calls in flight may take.
    pub(crate) deadline: Duration,
}

impl HttpDrain {
    /// Waits for a signal, then drains (see the module's table).
    pub(crate) async fn run(self) {
        let signal = signalled().await;
        tracing::info!(target: TARGET, signal, drain_ms = millis(self.deadline), in_flight = self.in_flight.count(),
            "shutting down: no new requests; waiting for the calls in flight");
        self.accepting.cancel();
        let drained = tokio::select! {
            () = self.in_flight.idle() => true,
            () = tokio::time::sleep(self.deadline) => false,
            again = signalled() => {
                tracing::warn!(target: TARGET, signal = again, "second signal: ending the drain now");
                false
            }
        };
        if !drained {
            tracing::warn!(target: TARGET, in_flight = self.in_flight.count(), "drain over: cancelling the calls left");
            self.registry.dispose();
            let _ = tokio::time::timeout(CANCEL_GRACE, self.in_flight.idle()).await;
        }
        self.streams.cancel();
    }
}

/// Serves until `serving` ends by itself (the client closed the stream), or a signal arrives: then
/// `stop` is cancelled (see [`UntilStopped`]), `serving` gets `deadline` to answer the calls in
/// flight, the registry is disposed, and `serving` gets [`CANCEL_GRACE`] to write the answers.
/// After a signal, an error of `serving` is logged, not returned.
pub(crate) async fn serve_stdio<E: std::fmt::Display>(
    serving: impl Future<Output = Result<(), E>>,
    registry: &Registry,
    stop: CancellationToken,
    deadline: Duration,
) -> Result<(), E> {
    let mut serving = std::pin::pin!(serving);
    let signal = tokio::select! {
        served = &mut serving => return served,
        signal = signalled() => signal,
    };
    tracing::info!(target: TARGET, signal, drain_ms = millis(deadline), "shutting down: no new requests; waiting for the calls in flight");
    stop.cancel();
    let served = tokio::select! {
        served = &mut serving => Some(served),
        () = tokio::time::sleep(deadline) => None,
        again = signalled() => {
            tracing::warn!(target: TARGET, signal = again, "second signal: ending the drain now");
            None
        }
    };
    let served = match served {
        Some(served) => Some(served),
        None => {
            tracing::warn!(target: TARGET, "drain over: cancelling the calls left");
            registry.dispose();
            tokio::time::timeout(CANCEL_GRACE, &mut serving).await.ok()
        }
    };
    if let Some(Err(e)) = served {
        tracing::debug!(target: TARGET, error = %e, "the MCP session ended with an error during shutdown");
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A reader that ends (reads as end of file) once `stop` is cancelled: how the stdio transport is
/// told to take no more requests.
pub(crate) struct UntilStopped<R> {
    read: R,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    stopped: bool,
}

impl<R> UntilStopped<R> {
    pub(crate) fn new(read: R, stop: CancellationToken) -> Self {
        UntilStopped { read, stop: Box::pin(stop.cancelled_owned()), stopped: false }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for UntilStopped<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.stopped || this.stop.as_mut().poll(cx).is_ready() {
            this.stopped = true;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.read).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_stopped_reader_reads_as_closed_even_while_a_read_waits() {
        let (mut client, server) = tokio::io::duplex(64);
        let stop = CancellationToken::new();
        let mut read = UntilStopped::new(server, stop.clone());
        tokio::io::AsyncWriteExt::write_all(&mut client, b"one\n").await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(read.read(&mut buf).await.unwrap(), 4);
        let waiting = tokio::spawn(async move {
            let n = read.read(&mut buf).await.unwrap();
            (n, read)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        stop.cancel();
        let (n, mut read) = waiting.await.unwrap();
        assert_eq!(n, 0, "the waiting read ends");
        tokio::io::AsyncWriteExt::write_all(&mut client, b"two\n").await.unwrap();
        assert_eq!(read.read(&mut [0u8; 16]).await.unwrap(), 0, "and nothing more is read");
    }

    #[tokio::test]
    async fn a_request_is_in_flight_until_its_streamed_body_is_sent() {
        use tower::ServiceExt;
        let in_flight = InFlight::default();
        let streamed = || axum::body::Body::from_stream(futures_util::stream::iter([Ok::<_, std::io::Error>("done")]));
        let router = axum::Router::new()
            .route("/call", axum::routing::post(move || async move { streamed() }))
            .route("/sized", axum::routing::post(|| async { "done" }))
            .route("/mcp", axum::routing::get(|| async { "stream" }));
        let router = in_flight.layer(router, "/mcp".to_string());
        let request = |method: &str, path: &str| {
            axum::http::Request::builder().method(method).uri(path).body(axum::body::Body::empty()).unwrap()
        };
        let response = router.clone().oneshot(request("POST", "/call")).await.unwrap();
        assert_eq!(in_flight.count(), 1, "the body is not sent yet");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"done");
        assert_eq!(in_flight.count(), 0);
        let sized = router.clone().oneshot(request("POST", "/sized")).await.unwrap();
        assert_eq!(in_flight.count(), 0, "a body of known size is not held");
        assert_eq!(sized.into_body().size_hint().exact(), Some(4), "and keeps its size");
        let stream = router.oneshot(request("GET", "/mcp")).await.unwrap();
        assert_eq!(in_flight.count(), 0, "an MCP event stream is not a call");
        drop(stream);
    }
}
