//! [`TestClock`]: a clock the runtime accepts and a test moves by hand, so expiries, rate windows
//! and delays are testable without sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_surface_core::Timestamp;
pub use agent_surface_policy::ManualClock;
use agent_surface_policy::{Clock, clock::Sleep};

/// 2026-11-29T07:00:00Z, the instant every [`TestClock::new`] starts at.
pub const TEST_EPOCH: Timestamp = Timestamp::from_unix_millis(1_795_935_600_000);

/// How a [`TestClock`] treats sleeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SleepMode {
    /// A sleep completes only when the test advances the clock past its deadline
    /// ([`ManualClock`] semantics).
    #[default]
    Manual,
    /// A sleep moves the clock forward by its duration and completes at once: for tests (and
    /// property tests) that want every wait to pass instantly while still reading the time.
    AutoAdvance,
}

/// A [`ManualClock`] with test helpers. Clones share the same time.
///
/// Put it into a registry with [`TestClock::shared`]:
///
/// ```
/// use std::time::Duration;
/// use agent_surface_registry::RegistryConfig;
/// use agent_surface_testing::TestClock;
///
/// let clock = TestClock::new();
/// let config = RegistryConfig { clock: clock.shared(), ..Default::default() };
/// clock.advance(Duration::from_secs(90));
/// assert_eq!(clock.elapsed(), Duration::from_secs(90));
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
pub struct TestClock {
    manual: ManualClock,
    mode: SleepMode,
    start: Timestamp,
}

impl TestClock {
    /// A clock at [`TEST_EPOCH`] whose sleeps wait for [`TestClock::advance`].
    pub fn new() -> TestClock {
        TestClock::at(TEST_EPOCH, SleepMode::Manual)
    }

    /// A clock at [`TEST_EPOCH`] whose sleeps advance it and complete at once.
    pub fn auto_advancing() -> TestClock {
        TestClock::at(TEST_EPOCH, SleepMode::AutoAdvance)
    }

    /// A clock at `start` with the given sleep mode.
    pub fn at(start: Timestamp, mode: SleepMode) -> TestClock {
        TestClock { manual: ManualClock::new(start), mode, start }
    }

    /// The clock as the `Arc<dyn Clock>` that `RegistryConfig` and the adapters take.
    pub fn shared(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }

    /// The underlying [`ManualClock`].
    pub fn manual(&self) -> &ManualClock {
        &self.manual
    }

    /// Moves time forward and wakes every sleeper that is due.
    pub fn advance(&self, by: Duration) {
        self.manual.advance(by);
    }

    /// Moves time forward by whole milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.manual.advance(Duration::from_millis(ms));
    }

    /// How much time passed since the clock was created (zero if it was set back before it).
    pub fn elapsed(&self) -> Duration {
        let now = self.manual.now().unix_millis();
        Duration::from_millis(now.saturating_sub(self.start.unix_millis()))
    }

    /// How many sleeps are waiting for the clock to move.
    pub fn pending_sleeps(&self) -> usize {
        self.manual.pending_sleeps()
    }

    /// Waits (by yielding to the executor, never by sleeping) until at least `sleepers` sleeps are
    /// pending, then advances the clock by `by`. Use it next to a future that is about to wait on
    /// this clock, e.g. inside `tokio::join!`.
    ///
    /// # Panics
    ///
    /// When the sleepers do not show up within 100 000 yields (the code under test never waits).
    pub async fn advance_when_waiting(&self, sleepers: usize, by: Duration) {
        for _ in 0..100_000 {
            if self.pending_sleeps() >= sleepers {
                self.advance(by);
                return;
            }
            YieldNow(false).await;
        }
        panic!("expected {sleepers} pending sleep(s) on the test clock, found {}", self.pending_sleeps());
    }
}

impl Default for TestClock {
    fn default() -> TestClock {
        TestClock::new()
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        self.manual.now()
    }

    fn source(&self) -> Option<agent_surface_policy::clock::ClockSource> {
        self.manual.source()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        match self.mode {
            SleepMode::Manual => self.manual.sleep(duration),
            SleepMode::AutoAdvance => {
                self.manual.advance(duration);
                Box::pin(std::future::ready(()))
            }
        }
    }
}

/// Yields to the executor once.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
