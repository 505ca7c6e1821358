//! The limits on a request head: it must arrive within
//! [`Limits::header_timeout`](crate::Limits::header_timeout) of when the server starts waiting
//! for it, and no more slowly than [`Limits::min_head_rate`](crate::Limits::min_head_rate) — the
//! defences against a client that trickles a head to hold a connection (slowloris), or that
//! holds one open and idle.
//!
//! [`Paced`] wraps a connection's socket and watches its reads while the connection waits for a
//! request head (its [`Conn`] is not busy with a request); the body of a request and the response
//! are not its business (the adapters bound a body's size and read time).
//!
//! **One timer per connection.** The header timeout is kept here rather than by hyper's
//! `header_read_timeout`, which makes a new timer for every request head. A new timer whose
//! deadline is earlier than any the runtime's time driver is waiting for wakes the thread parked
//! in that driver (a write to its event descriptor, then that thread's wake-up), so on a
//! kept-alive connection served one request at a time every call paid a cross-thread wake-up
//! for a timer that never fires (`spec/invocation.md` §11.2). [`Paced`] keeps one timer for the
//! connection's life and moves it to each new head's deadline: a deadline later than the one
//! pending is a change of the timer's expiry in place, which wakes nobody.

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
/// up with a [`HeadRate`] and complete the head within the header timeout: a read that finds no
/// new byte past either deadline fails (`TimedOut`), which closes the connection.
pub(crate) struct Paced {
    inner: TcpStream,
    conn: Arc<Conn>,
    rate: HeadRate,
    /// How long a head may take, from when the server starts waiting for it.
    header_timeout: Duration,
    /// The connection's phase the clocks below belong to ([`Conn::phase`]).
    phase: u64,
    /// When the server started waiting for the head (the connection's admission, or the end of
    /// the previous response).
    waiting_since: Instant,
    /// When the head being waited for began; `None`: no byte of it yet.
    began: Option<Instant>,
    /// Bytes of that head received so far.
    bytes: u64,
    /// The connection's one timer, at the earlier of the two deadlines (see the module docs).
    timer: Option<Pin<Box<Sleep>>>,
}

impl Paced {
    /// `stream` for `conn` (whose first phase is waiting for a head), its first head's clocks
    /// started at `admitted`.
    pub(crate) fn new(
        stream: TcpStream,
        conn: Arc<Conn>,
        rate: HeadRate,
        header_timeout: Duration,
        admitted: Instant,
    ) -> Paced {
        Paced {
            inner: stream,
            phase: 0,
            conn,
            rate,
            header_timeout,
            waiting_since: admitted,
            began: Some(admitted),
            bytes: 0,
            timer: None,
        }
    }

    /// The error that closes the connection when `deadline` has passed: the rate rule's (counted as
    /// a slow head) or the header timeout's.
    fn expired(&self, deadline: Instant, rate: Option<Instant>) -> std::io::Error {
        if rate == Some(deadline) {
            self.conn.table().shed(Shed::SlowHead);
            return std::io::Error::new(std::io::ErrorKind::TimedOut, "request head below the minimum rate");
        }
        std::io::Error::new(std::io::ErrorKind::TimedOut, "no complete request head within the header timeout")
    }
}

impl Paced {
    /// Starts the clocks of a new wait for a head (`phase`, not busy) if it is one: the header
    /// timeout counts from the end of the previous response, the rate rule from the head's first
    /// byte.
    fn sync_phase(&mut self, phase: u64) {
        if phase != self.phase {
            self.waiting_since = self.conn.idle_since().unwrap_or_else(Instant::now);
            (self.phase, self.began, self.bytes) = (phase, None, 0);
        }
    }

    /// While the connection waits for a head: the timer armed at the earlier of the two
    /// deadlines, to wake the connection's task then; `Ready` with the error that closes the
    /// connection once one has passed.
    fn watch(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let rate = self.began.and_then(|began| self.rate.deadline(began, self.bytes));
        let header = self.waiting_since.checked_add(self.header_timeout);
        let Some(deadline) = rate.into_iter().chain(header).min() else {
            return Poll::Pending;
        };
        if Instant::now() >= deadline {
            return Poll::Ready(self.expired(deadline, rate));
        }
        // Moved to a later deadline, a pending timer only has its expiry changed in place; a new
        // one (or an earlier deadline) is registered with the runtime's time driver.
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(self.expired(deadline, rate));
        }
        Poll::Pending
    }
}

impl AsyncRead for Paced {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let phase = this.conn.phase();
        if Conn::is_busy(phase) {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        this.sync_phase(phase);
        let before = buf.filled().len();
        if let Poll::Ready(read) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            // A read that brings bytes never fails: they may have arrived in time, and a head
            // they complete is not held to the rules any longer. A read that finds none does.
            let received = buf.filled().len() - before;
            if received > 0 {
                this.began.get_or_insert_with(Instant::now);
                this.bytes = this.bytes.saturating_add(received as u64);
            }
            return Poll::Ready(read);
        }
        this.watch(cx).map(Err)
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

    /// Also arms the header timeout of the wait that follows a response: hyper flushes a
    /// response's last bytes after the response is done (the connection idle), and need not read
    /// again until the client sends something, so the timer must be armed here for an idle
    /// kept-alive connection to be closed; when it fires, the connection's task reads and fails.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        let phase = this.conn.phase();
        if !Conn::is_busy(phase) {
            this.sync_phase(phase);
            if this.watch(cx).is_ready() {
                // Past a deadline already: the read that closes the connection is due now.
                cx.waker().wake_by_ref();
            }
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header timeout of each new wait (after a response) moves the connection's one timer to
    /// the later deadline, in place; no new timer is made per request (see the module docs).
    #[tokio::test]
    async fn each_wait_for_a_head_moves_the_connection_s_one_timer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let conn = Arc::new(crate::conns::Conns::default()).open();
        let rate = HeadRate { min: 0, grace: Duration::from_secs(2) };
        let admitted = Instant::now();
        let mut paced = Paced::new(socket, conn.clone(), rate, Duration::from_secs(10), admitted);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut wait = |paced: &mut Paced| {
            let mut buf = ReadBuf::new(&mut byte);
            assert!(Pin::new(&mut *paced).poll_read(&mut cx, &mut buf).is_pending(), "nothing to read yet");
            let timer = paced.timer.as_ref().expect("a wait for a head arms the timer");
            (std::ptr::from_ref::<Sleep>(timer), timer.deadline())
        };
        let (first, deadline) = wait(&mut paced);
        assert_eq!(deadline, admitted + Duration::from_secs(10));
        for _ in 0..3 {
            // A request, then its response: a new wait, from the end of the response.
            drop(conn.busy());
            let idle = conn.idle_since().expect("idle");
            let (timer, deadline) = wait(&mut paced);
            assert_eq!(timer, first, "the same timer");
            assert_eq!(deadline, idle + Duration::from_secs(10));
        }
    }

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
