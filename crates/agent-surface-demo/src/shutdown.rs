//! Graceful shutdown of `serve`: on SIGTERM or Ctrl-C (SIGINT) the server stops taking requests,
//! lets the calls in flight finish within the drain deadline (`--drain-ms`, [`DEFAULT_DRAIN`]),
//! then disposes the registry — a call still running ends `CANCELLED`, or `EXECUTION_FAILED
//! {reason: outcome-unknown}` for a write whose handler had started — and `serve` returns, so
//! that the process exits 0. A second signal during the drain disposes the registry at once.
//!
//! Over HTTP the drain is the library's (`agent_surface_server::serve_with`, with
//! `Registry::dispose` as its cancel step): this module only turns the signals into its shutdown
//! token. Over stdio it is here:
//!
//! | step | HTTP (`serve --http`) | stdio (`serve --stdio`) |
//! |---|---|---|
//! | stop taking requests | the listener stops accepting; each connection closes after its response in progress | standard input reads as closed; `rmcp` stops reading requests |
//! | wait | until no request is in progress (an MCP session's idle `GET` stream does not count), or the deadline | until every call is answered, or the deadline (`rmcp` itself waits at most 5 s) |
//! | cancel the rest | `Registry::dispose`; the answers it produces are sent for up to `Limits::cancel_grace` (1 s), then the streams end and the connections left are dropped | `Registry::dispose`; the answers are written for up to [`CANCEL_GRACE`] |
//!
//! Calls answered as MCP tasks run on after their request was answered: over HTTP the drain
//! waits for them as for the requests (`Drain::waiting_for`); over stdio they are not waited
//! for, and the disposal cancels them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_surface_registry::Registry;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How long in-flight calls may take to finish after a signal, unless `--drain-ms` says otherwise.
pub(crate) const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// Over stdio, how long the answers of the calls the disposal ended may take to be written (the
/// HTTP server's is `Limits::cancel_grace`, of the same default).
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// The operator log's target for shutdown events.
const TARGET: &str = "agent_surface::demo";

/// SIGTERM and SIGINT (Ctrl-C), listened for from the moment [`Signals::install`] returns: one
/// that arrives later is never missed, nor does it end the process by its default action. `serve`
/// installs them before it says it is listening, so that a supervisor (or a test) that signals it
/// as soon as it has read the listening line gets a drain, not a killed process.
pub(crate) struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers (in a Tokio runtime). One that cannot be installed is logged, and
    /// that signal is not waited for.
    pub(crate) fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let install = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(e) => {
                    tracing::warn!(target: TARGET, error = %e, signal = name, "cannot handle this signal; it will not drain");
                    None
                }
            };
            Signals {
                term: install(SignalKind::terminate(), "SIGTERM"),
                int: install(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Waits for the next signal and names it (possibly forever, when none could be installed).
    pub(crate) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                if let Some(signal) = signal
                    && signal.recv().await.is_some()
                {
                    return;
                }
                std::future::pending().await
            }
            let Signals { term, int } = self;
            tokio::select! {
                () = recv(term) => "SIGTERM",
                () = recv(int) => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!(target: TARGET, error = %e, "cannot handle Ctrl-C");
                std::future::pending::<()>().await;
            }
            "SIGINT"
        }
    }
}

/// Cancels `shutdown` on the first signal (the server's drain starts: `agent_surface_server`
/// waits for the calls in flight, then disposes the registry); on a second one, disposes the
/// registry at once, which ends the calls left and so the drain.
pub(crate) async fn on_signals(
    mut signals: Signals,
    shutdown: CancellationToken,
    registry: Registry,
    deadline: Duration,
) {
    let signal = signals.next().await;
    tracing::info!(target: TARGET, signal, drain_ms = millis(deadline), "shutting down: no new requests; waiting for the calls in flight");
    shutdown.cancel();
    let again = signals.next().await;
    tracing::warn!(target: TARGET, signal = again, "second signal: ending the drain now");
    registry.dispose();
}

/// Serves until `serving` ends by itself (the client closed the stream), or a signal arrives: then
/// `stop` is cancelled (see [`UntilStopped`]), `serving` gets `deadline` to answer the calls in
/// flight, the registry is disposed, and `serving` gets [`CANCEL_GRACE`] to write the answers.
/// After a signal, an error of `serving` is logged, not returned.
pub(crate) async fn serve_stdio<E: std::fmt::Display>(
    serving: impl Future<Output = Result<(), E>>,
    mut signals: Signals,
    registry: &Registry,
    stop: CancellationToken,
    deadline: Duration,
) -> Result<(), E> {
    let mut serving = std::pin::pin!(serving);
    let signal = tokio::select! {
        served = &mut serving => return served,
        signal = signals.next() => signal,
    };
    tracing::info!(target: TARGET, signal, drain_ms = millis(deadline), "shutting down: no new requests; waiting for the calls in flight");
    stop.cancel();
    let served = tokio::select! {
        served = &mut serving => Some(served),
        () = tokio::time::sleep(deadline) => None,
        again = signals.next() => {
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
}
