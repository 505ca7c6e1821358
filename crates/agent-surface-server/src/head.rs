//! The minimum rate of a request head: a connection that delivers its request head more slowly
//! than [`Limits::min_head_rate`](crate::Limits::min_head_rate) is closed, long before the header
//! timeout — the defence against a client that trickles a head to hold a connection (slowloris).
//!
//! [`Paced`] wraps a connection's socket and watches its reads while the connection waits for a
//! request head (its [`Conn`] is not busy with a request); the body of a request and the response
//! are not its business (the adapters bound a body's size and read time).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::conns::{Conn, Shed};

/// The rule: a head gets `grace` from when it began, plus one second for every `min` bytes of it
/// received. A head begins with its first byte, or, for the first request of a connection, when
/// the connection was accepted (so that a connection that sends nothing at all is closed too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadRate {
    /// Bytes per second; 0: no rule.
    pub(crate) min: u32,
    /// The time every head gets whatever its rate.
    pub(crate) grace: Duration,
}

impl HeadRate {
    /// When a head that began at `began` and has delivered `bytes` so far falls behind, unless more
    /// of it arrives first; `None`: never (no rule, or beyond the clock's range).
    pub(crate) fn deadline(self, began: Instant, bytes: u64) -> Option<Instant> {
        if self.min == 0 {
            return None;
        }
        began.checked_add(self.grace)?.checked_add(Duration::from_secs(bytes) / self.min)
    }
}

/// A connection's socket whose reads, while the connection waits for a request head, must keep
/// up with a [`HeadRate`]: a read that finds no new byte past the deadline fails (`TimedOut`),
/// which closes the connection.
pub(crate) struct Paced {
    inner: TcpStream,
    conn: Arc<Conn>,
    rate: HeadRate,
    /// The connection's phase the clock below belongs to ([`Conn::phase`]).
    phase: u64,
    /// When the head being waited for began; `None`: no byte of it yet.
    began: Option<Instant>,
    /// Bytes of that head received so far.
    bytes: u64,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Paced {
    /// `stream` for `conn` (whose first phase is waiting for a head), its first head's clock
    /// started at `admitted`.
    pub(crate) fn new(stream: TcpStream, conn: Arc<Conn>, rate: HeadRate, admitted: Instant) -> Paced {
        Paced { inner: stream, phase: 0, conn, rate, began: Some(admitted), bytes: 0, timer: None }
    }

    fn too_slow(&self) -> std::io::Error {
        self.conn.table().shed(Shed::SlowHead);
        std::io::Error::new(std::io::ErrorKind::TimedOut, "request head below the minimum rate")
    }
}

impl AsyncRead for Paced {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let phase = this.conn.phase();
        if this.rate.min == 0 || Conn::is_busy(phase) {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if phase != this.phase {
            // A new head after a response: its clock starts with its first byte.
            (this.phase, this.began, this.bytes) = (phase, None, 0);
        }
        let before = buf.filled().len();
        if let Poll::Ready(read) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            // A read that brings bytes never fails: they may have arrived in time, and a head
            // they complete is not held to the rule any longer. A read that finds none does.
            let received = buf.filled().len() - before;
            if received > 0 {
                this.began.get_or_insert_with(Instant::now);
                this.bytes = this.bytes.saturating_add(received as u64);
            }
            return Poll::Ready(read);
        }
        let Some(deadline) = this.began.and_then(|began| this.rate.deadline(began, this.bytes)) else {
            return Poll::Pending;
        };
        if Instant::now() >= deadline {
            return Poll::Ready(Err(this.too_slow()));
        }
        let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(this.too_slow()));
        }
        Poll::Pending
    }
}

impl AsyncWrite for Paced {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gets_the_grace_and_a_second_per_min_bytes() {
        let rate = HeadRate { min: 512, grace: Duration::from_secs(2) };
        let t = Instant::now();
        assert_eq!(rate.deadline(t, 0), Some(t + Duration::from_secs(2)), "nothing yet: the grace");
        assert_eq!(rate.deadline(t, 512), Some(t + Duration::from_secs(3)));
        assert_eq!(rate.deadline(t, 256), Some(t + Duration::from_millis(2500)));
        // A slowloris at a byte every 500 ms has 4 bytes at 2 s: due at 2 s + 7.8 ms.
        assert_eq!(rate.deadline(t, 4), Some(t + Duration::from_secs(2) + Duration::from_nanos(7_812_500)));
        assert_eq!(HeadRate { min: 0, ..rate }.deadline(t, 0), None, "0: no rule");
        assert_eq!(rate.deadline(t, u64::MAX).map(|d| d > t + Duration::from_secs(1_000_000)), Some(true));
    }
}
