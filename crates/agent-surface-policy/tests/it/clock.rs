//! `ManualClock` and `SystemClock`: deadlines, wake-ups, deregistration, threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::{Clock, ManualClock, SystemClock, clock::Sleep};
use futures_util::FutureExt;

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountingWaker {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Polls `sleep` once with `waker`; true when it completed.
fn poll_with(sleep: &mut Sleep, waker: &Arc<CountingWaker>) -> bool {
    let waker = Waker::from(Arc::clone(waker));
    sleep.as_mut().poll(&mut Context::from_waker(&waker)).is_ready()
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[test]
fn advancing_wakes_exactly_the_due_sleepers() {
    let clock = ManualClock::new(Timestamp::from_unix_millis(1_000));
    let wakers: Vec<Arc<CountingWaker>> = (0..3).map(|_| Arc::default()).collect();
    let mut sleeps: Vec<Sleep> = [10, 20, 30].into_iter().map(|d| clock.sleep(ms(d))).collect();
    for (sleep, waker) in sleeps.iter_mut().zip(&wakers) {
        assert!(!poll_with(sleep, waker));
    }
    assert_eq!(clock.pending_sleeps(), 3);

    clock.advance(ms(19));
    assert_eq!(wakers.iter().map(|w| w.count()).collect::<Vec<_>>(), [1, 0, 0]);
    assert_eq!(clock.pending_sleeps(), 2);

    clock.advance(ms(1));
    assert_eq!(clock.now(), Timestamp::from_unix_millis(1_020));
    assert_eq!(wakers.iter().map(|w| w.count()).collect::<Vec<_>>(), [1, 1, 0]);
    assert_eq!(clock.pending_sleeps(), 1);

    assert!(poll_with(&mut sleeps[0], &wakers[0]));
    assert!(poll_with(&mut sleeps[1], &wakers[1]));
    assert!(!poll_with(&mut sleeps[2], &wakers[2]));

    clock.set(Timestamp::from_unix_millis(5_000));
    assert_eq!(wakers[2].count(), 1);
    assert!(poll_with(&mut sleeps[2], &wakers[2]));
    assert_eq!(clock.pending_sleeps(), 0);
}

#[test]
fn zero_and_sub_millisecond_sleeps() {
    let clock = ManualClock::default();
    assert!(clock.sleep(Duration::ZERO).now_or_never().is_some());
    assert_eq!(clock.pending_sleeps(), 0);

    // A non-zero sleep never completes before time moves, even below the millisecond.
    let mut short = clock.sleep(Duration::from_micros(10));
    assert!((&mut short).now_or_never().is_none());
    clock.advance(Duration::from_micros(999));
    assert!((&mut short).now_or_never().is_none());
    clock.advance(ms(1));
    assert!(short.now_or_never().is_some());
}

#[test]
fn a_sleep_never_polled_still_fires() {
    let clock = ManualClock::default();
    let sleep = clock.sleep(ms(5));
    clock.advance(ms(5));
    assert!(sleep.now_or_never().is_some());
}

#[test]
fn dropped_sleepers_deregister() {
    let clock = ManualClock::default();
    let waker = Arc::new(CountingWaker::default());
    let mut sleeps: Vec<Sleep> = (1..=100).map(|d| clock.sleep(ms(d))).collect();
    for sleep in sleeps.iter_mut().step_by(2) {
        assert!(!poll_with(sleep, &waker));
    }
    assert_eq!(clock.pending_sleeps(), 100);
    sleeps.truncate(50);
    assert_eq!(clock.pending_sleeps(), 50);

    // A woken sleep that is dropped before it is polled leaves nothing behind either.
    clock.advance(ms(10));
    assert_eq!(clock.pending_sleeps(), 40);
    drop(sleeps);
    assert_eq!(clock.pending_sleeps(), 0);
    assert_eq!(waker.count(), 5);
}

#[test]
fn setting_the_clock_back() {
    let clock = ManualClock::new(Timestamp::from_unix_millis(10_000));
    let fired = clock.sleep(ms(100));
    let pending = clock.sleep(ms(500));
    clock.advance(ms(200));
    clock.set(Timestamp::from_unix_millis(0));
    // Woken stays woken; not yet due stays pending, and its deadline does not move.
    assert!(fired.now_or_never().is_some());
    let mut pending = pending;
    assert!((&mut pending).now_or_never().is_none());
    clock.set(Timestamp::from_unix_millis(10_499));
    assert!((&mut pending).now_or_never().is_none());
    clock.set(Timestamp::from_unix_millis(10_500));
    assert!(pending.now_or_never().is_some());
}

#[test]
fn clones_share_time_and_sleepers() {
    let clock = ManualClock::default();
    let other = clock.clone();
    let sleep = other.sleep(ms(1));
    assert_eq!(clock.pending_sleeps(), 1);
    clock.advance(ms(1));
    assert_eq!(other.now(), clock.now());
    assert!(sleep.now_or_never().is_some());
    assert!(format!("{clock:?}").contains("pending_sleeps: 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sleepers_across_threads() {
    let clock = ManualClock::default();
    let woken = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..1_000u64)
        .map(|i| {
            let clock = clock.clone();
            let woken = Arc::clone(&woken);
            tokio::spawn(async move {
                clock.sleep(Duration::from_secs(i % 10 + 1)).await;
                woken.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    eventually(|| clock.pending_sleeps() == 1_000).await;

    clock.advance(Duration::from_secs(5));
    eventually(|| woken.load(Ordering::SeqCst) == 500).await;
    assert_eq!(clock.pending_sleeps(), 500);
    // Nothing else wakes without time moving.
    tokio::time::sleep(ms(20)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 500);

    clock.advance(Duration::from_secs(5));
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("sleeper woke").expect("task ran");
    }
    assert_eq!(woken.load(Ordering::SeqCst), 1_000);
    assert_eq!(clock.pending_sleeps(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_moved_between_threads() {
    let clock = ManualClock::default();
    let sleep = clock.sleep(Duration::from_secs(1));
    let task = tokio::spawn(sleep);
    // Let a worker poll it first, so the wake-up goes to a registered waker.
    tokio::time::sleep(ms(10)).await;
    assert!(!task.is_finished());
    let advancer = {
        let clock = clock.clone();
        std::thread::spawn(move || clock.advance(Duration::from_secs(1)))
    };
    advancer.join().expect("advancer thread");
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("woken").expect("task ran");
}

#[tokio::test]
async fn system_clock_sleeps_for_real() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let before = clock.now();
    assert!(before.unix_millis().abs_diff(Timestamp::now().unix_millis()) < 60_000);
    let started = std::time::Instant::now();
    clock.sleep(ms(20)).await;
    assert!(started.elapsed() >= ms(20));
    assert!(clock.now() >= before);
}

#[test]
fn system_clock_sleep_needs_no_runtime_until_polled() {
    let sleep = SystemClock.sleep(ms(1));
    drop(sleep);
}

#[test]
fn an_arc_of_a_clock_is_a_clock() {
    fn now_of(clock: &impl Clock) -> Timestamp {
        clock.now()
    }
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(42)));
    assert_eq!(now_of(&clock), Timestamp::from_unix_millis(42));
    assert!(matches!(clock.sleep(Duration::ZERO).poll_unpin(&mut Context::from_waker(Waker::noop())), Poll::Ready(())));
}

/// Waits (in real time, up to ten seconds) until `condition` holds.
async fn eventually(mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "condition not reached in time");
        tokio::time::sleep(ms(1)).await;
    }
}
