//! Clocks: the wall-clock time and the timers every policy reads, behind one trait so tests can
//! drive time by hand.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use agent_surface_core::Timestamp;

/// The future returned by [`Clock::sleep`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of wall-clock time and timers.
///
/// Everything in the pipeline that depends on time (expiries, rate windows, timeouts) reads it
/// from a `Clock`, so a test can swap [`SystemClock`] for a [`ManualClock`] and move time by hand.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock now.
    fn now(&self) -> Timestamp;

    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;

    /// Which time this clock tells, for the registry's wiring report
    /// (`Registry::wiring_warnings`): two clocks with the same source always read the same. `None`
    /// (the default) for a clock that does not say; the report then takes two such clocks for
    /// the same only when they are one object.
    fn source(&self) -> Option<ClockSource> {
        None
    }
}

/// Which time a [`Clock`] tells ([`Clock::source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClockSource {
    /// The system's wall clock ([`SystemClock`]).
    System,
    /// A [`ManualClock`] and its clones (by the address of the time they share).
    Manual(usize),
}

/// Whether `a` and `b` tell the same time: one object, or the same [`Clock::source`].
///
/// ```
/// use std::sync::Arc;
/// use agent_surface_core::Timestamp;
/// use agent_surface_policy::{Clock, ManualClock, SystemClock, clock::same_time};
/// let manual = ManualClock::new(Timestamp::from_unix_millis(0));
/// let (a, b): (Arc<dyn Clock>, Arc<dyn Clock>) = (Arc::new(manual.clone()), Arc::new(manual));
/// assert!(same_time(&a, &b), "clones share their time");
/// assert!(same_time(&(Arc::new(SystemClock) as Arc<dyn Clock>), &(Arc::new(SystemClock) as Arc<dyn Clock>)));
/// assert!(!same_time(&a, &(Arc::new(SystemClock) as Arc<dyn Clock>)));
/// ```
pub fn same_time(a: &Arc<dyn Clock>, b: &Arc<dyn Clock>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)) || a.source().is_some_and(|s| b.source() == Some(s))
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        (**self).sleep(duration)
    }

    fn source(&self) -> Option<ClockSource> {
        (**self).source()
    }
}

/// The system's clock: [`Timestamp::now`] and `tokio::time::sleep`.
///
/// The future returned by [`SystemClock::sleep`] must be polled inside a Tokio runtime with the
/// time driver enabled (creating it does not need one).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn source(&self) -> Option<ClockSource> {
        Some(ClockSource::System)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        // Created lazily, on first poll, so that only polling needs a runtime.
        Box::pin(async move { tokio::time::sleep(duration).await })
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time. [`ManualClock::advance`] and [`ManualClock::set`] wake every
/// sleeper whose deadline has come; the sleeps work from any executor, on any thread.
///
/// A sleep's deadline is fixed when [`Clock::sleep`] is called: `now + duration`, with a
/// sub-millisecond remainder rounded up to the next millisecond (timestamps have millisecond
/// precision, and a non-zero sleep must not complete before time moves). A zero or already-due
/// sleep completes on its first poll. A sleep that has been woken stays complete even if the
/// clock is then set back.
///
/// ```
/// use std::time::Duration;
/// use agent_surface_core::Timestamp;
/// use agent_surface_policy::{Clock, ManualClock};
/// use futures_util::FutureExt;
///
/// let clock = ManualClock::new(Timestamp::from_unix_millis(1_000));
/// let mut sleep = clock.sleep(Duration::from_secs(5));
/// assert_eq!(clock.pending_sleeps(), 1);
/// assert!((&mut sleep).now_or_never().is_none());
///
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), Timestamp::from_unix_millis(6_000));
/// assert_eq!(clock.pending_sleeps(), 0);
/// assert!(sleep.now_or_never().is_some());
/// ```
#[derive(Clone)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

/// The state every clone of a [`ManualClock`] and every one of its sleeps shares.
struct Shared {
    state: Mutex<State>,
}

struct State {
    now: Timestamp,
    next_id: u64,
    /// Sleepers not yet due, by (deadline, id), with the waker of their last poll.
    waiting: BTreeMap<(Timestamp, u64), Option<Waker>>,
    /// Sleepers that came due and were woken but have not been polled since.
    fired: HashSet<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement, so a panic elsewhere cannot corrupt it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// 2026-01-01T00:00:00Z.
const DEFAULT_START: Timestamp = Timestamp::from_unix_millis(1_767_225_600_000);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            shared: Arc::new(Shared {
                state: Mutex::new(State { now: start, next_id: 0, waiting: BTreeMap::new(), fired: HashSet::new() }),
            }),
        }
    }

    /// Moves time forward by `by` (in whole milliseconds, saturating) and wakes every sleeper whose
    /// deadline is now due.
    pub fn advance(&self, by: Duration) {
        let state = self.shared.lock();
        let to = state.now.saturating_add(by);
        Self::move_to(state, to);
    }

    /// Jumps to `to`, forward or back, and wakes every sleeper whose deadline is now due.
    pub fn set(&self, to: Timestamp) {
        Self::move_to(self.shared.lock(), to);
    }

    /// How many sleeps are registered and not yet due (a dropped sleep deregisters itself).
    pub fn pending_sleeps(&self) -> usize {
        self.shared.lock().waiting.len()
    }

    fn move_to(mut state: MutexGuard<'_, State>, to: Timestamp) {
        state.now = to;
        let due = match to.unix_millis().checked_add(1) {
            Some(after) => {
                let not_due = state.waiting.split_off(&(Timestamp::from_unix_millis(after), 0));
                std::mem::replace(&mut state.waiting, not_due)
            }
            None => std::mem::take(&mut state.waiting),
        };
        let mut wakers = Vec::with_capacity(due.len());
        for ((_, id), waker) in due {
            state.fired.insert(id);
            wakers.extend(waker);
        }
        drop(state);
        // Wake outside the lock: a waker may poll (and so lock) right away.
        for waker in wakers {
            waker.wake();
        }
    }
}

impl Default for ManualClock {
    /// A clock standing at 2026-01-01T00:00:00Z.
    fn default() -> ManualClock {
        ManualClock::new(DEFAULT_START)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("ManualClock").field("now", &state.now).field("pending_sleeps", &state.waiting.len()).finish()
    }
}

impl Clock for ManualClock {
    fn source(&self) -> Option<ClockSource> {
        Some(ClockSource::Manual(Arc::as_ptr(&self.shared).addr()))
    }

    fn now(&self) -> Timestamp {
        self.shared.lock().now
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut state = self.shared.lock();
        let deadline = state.now.saturating_add(round_up_to_millis(duration));
        if deadline <= state.now {
            return Box::pin(std::future::ready(()));
        }
        let id = state.next_id;
        state.next_id += 1;
        state.waiting.insert((deadline, id), None);
        drop(state);
        Box::pin(ManualSleep { shared: Arc::clone(&self.shared), deadline, id, done: false })
    }
}

/// `duration` rounded up to whole milliseconds.
fn round_up_to_millis(duration: Duration) -> Duration {
    let millis = duration.as_millis() + u128::from(!duration.subsec_nanos().is_multiple_of(1_000_000));
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

/// A registered sleep on a [`ManualClock`].
struct ManualSleep {
    shared: Arc<Shared>,
    deadline: Timestamp,
    id: u64,
    done: bool,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.done {
            return Poll::Ready(());
        }
        let mut state = self.shared.lock();
        let key = (self.deadline, self.id);
        if state.fired.remove(&self.id) || state.now >= self.deadline {
            state.waiting.remove(&key);
            drop(state);
            self.done = true;
            return Poll::Ready(());
        }
        match state.waiting.get_mut(&key) {
            Some(Some(waker)) if waker.will_wake(cx.waker()) => {}
            Some(slot) => *slot = Some(cx.waker().clone()),
            None => {
                state.waiting.insert(key, Some(cx.waker().clone()));
            }
        }
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.shared.lock();
            state.waiting.remove(&(self.deadline, self.id));
            state.fired.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_sub_millisecond_sleeps_up() {
        assert_eq!(round_up_to_millis(Duration::ZERO), Duration::ZERO);
        assert_eq!(round_up_to_millis(Duration::from_micros(1)), Duration::from_millis(1));
        assert_eq!(round_up_to_millis(Duration::from_micros(1_500)), Duration::from_millis(2));
        assert_eq!(round_up_to_millis(Duration::from_millis(7)), Duration::from_millis(7));
        assert_eq!(round_up_to_millis(Duration::MAX), Duration::from_millis(u64::MAX));
    }

    #[test]
    fn default_starts_in_2026() {
        assert_eq!(ManualClock::default().now().to_rfc3339(), "2026-01-01T00:00:00.000Z");
    }
}
