//! Leases on idempotency records, as a shared store hands them out: a record taken over from a
//! leader whose lease lapsed, renewal while a call runs, and a lease lost before settlement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Timestamp};
use agent_surface_policy::{
    AllowAll, IdempotencyStore, MemoryIdempotencyStore, StoreError,
    idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement},
};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use agent_surface_testing::Slow;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::support::{assert_produced, call, capture_operator_log, consumer};

/// A memory store dressed as a shared one: its leases ask to be renewed every `renew_every`, the
/// next admission can be made a takeover, and its leases can be lost.
#[derive(Debug, Default)]
pub(crate) struct LeasingStore {
    inner: MemoryIdempotencyStore,
    renew_every: Option<Duration>,
    /// The next admission that would lead takes the record over instead.
    take_over: AtomicBool,
    /// The next admission joins a leader that is lost: it follows, and learns an unknown outcome
    /// (as a shared store's follower whose leader's lease lapsed), whatever the inner store holds.
    lost_leader: AtomicBool,
    /// Admissions asked for.
    admissions: AtomicUsize,
    /// The admission of this number (counted from 1; 0: none) fails, as a store that is down.
    pub(crate) fail_admission: AtomicUsize,
    /// The next settlement goes unanswered (the store did not answer in time, and it did not land),
    /// and every one after it finds the lease lost: another caller took the record over meanwhile.
    settle_unanswered: AtomicBool,
    /// Every renewal and settlement from now on finds the lease lost.
    lost: AtomicBool,
    renewals: AtomicUsize,
    /// Settlements asked for (lost or not).
    settlements: AtomicUsize,
    /// The next mark finds the lease lapsed (another caller may claim the record afresh).
    start_lost: AtomicBool,
    /// The next mark goes unanswered (the store failed).
    start_unanswered: AtomicBool,
    /// Marks asked for, and the handler's runs counted when each was asked (a mark must come
    /// before the handler).
    starts: std::sync::Mutex<Vec<usize>>,
    /// The runs counter of the registry under test, for `starts`.
    runs: std::sync::OnceLock<Arc<AtomicUsize>>,
    /// Whether `admit_started` marks the claims it makes (as the Redis store does).
    marks_at_admission: bool,
    /// Admissions asked to mark their claim (`admit_started`).
    admitted_started: AtomicUsize,
}

impl IdempotencyStore for LeasingStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        Box::pin(async move {
            let n = self.admissions.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.fail_admission.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("the store is down".into()));
            }
            if self.lost_leader.swap(false, Ordering::SeqCst) {
                let unknown = AgentSurfaceError::outcome_unknown().into_payload();
                let result = agent_surface_core::InvokeResult::error(unknown, Some(key.invocation_id.clone()));
                return Ok(Admission::Follower(Box::pin(async move { result })));
            }
            Ok(match self.inner.admit(key, fingerprint, attempt, now).await? {
                Admission::Leader(lease) => {
                    let lease = Lease { renew_every: self.renew_every, ..lease };
                    if self.take_over.swap(false, Ordering::SeqCst) {
                        Admission::TakeOver(lease)
                    } else {
                        Admission::Leader(lease)
                    }
                }
                other => other,
            })
        })
    }

    fn admit_started<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(Admission, bool), StoreError>> {
        self.admitted_started.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok((self.admit(key, fingerprint, attempt, now).await?, self.marks_at_admission)) })
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.cancel(key, attempt, now)
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.settlements.fetch_add(1, Ordering::SeqCst);
            if self.settle_unanswered.swap(false, Ordering::SeqCst) {
                self.lost.store(true, Ordering::SeqCst);
                return Err(StoreError::Unavailable("no answer".into()));
            }
            if self.lost.load(Ordering::SeqCst) {
                return Err(StoreError::LeaseLost);
            }
            self.inner.settle(key, fingerprint, Lease::until_settled(lease.token), settlement, now).await
        })
    }

    fn start<'a>(
        &'a self,
        _key: &'a IdempotencyKey,
        _lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let runs = self.runs.get().map_or(0, |r| r.load(Ordering::SeqCst));
        self.starts.lock().expect("not poisoned").push(runs);
        let answer = if self.start_lost.swap(false, Ordering::SeqCst) {
            Err(StoreError::LeaseLost)
        } else if self.start_unanswered.swap(false, Ordering::SeqCst) {
            Err(StoreError::Unavailable("no answer".into()))
        } else {
            Ok(())
        };
        Box::pin(std::future::ready(answer))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a IdempotencyKey,
        _lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        let lost = self.lost.load(Ordering::SeqCst);
        Box::pin(async move { if lost { Err(StoreError::LeaseLost) } else { Ok(()) } })
    }
}

/// An authority policy that takes its time (and allows everything): a window between admission
/// and execution.
fn slow_authority(wait: Duration) -> Slow<AllowAll> {
    Slow::new(wait, AllowAll)
}

/// `shop.pay` (external, not idempotent) and `shop.quote` (read), each counting its executions
/// and taking `delay` to run.
fn registry(store: Arc<LeasingStore>, delay: Duration) -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let made = registry_with(RegistryConfig { idempotency: store.clone(), ..Default::default() }, delay);
    let _ = store.runs.set(made.2.clone());
    made
}

fn registry_with(
    config: RegistryConfig,
    delay: Duration,
) -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(config);
    let (pay, quote) = (runs.clone(), runs.clone());
    r.define("shop", move |t| {
        t.capability("pay", "Charge the card.").effect(Effect::External).handler(move |_c: Ctx, _i: Value| {
            let runs = pay.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                Ok::<_, AgentSurfaceError>(json!({"paid": true}))
            }
        });
        t.capability("quote", "Quote a price.").effect(Effect::Read).handler(move |_c: Ctx, _i: Value| {
            let runs = quote.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                Ok::<_, AgentSurfaceError>(json!({"price": 3}))
            }
        })
    })
    .expect("definition is valid");
    let m = r.mount("shop", "main").expect("mount");
    (r, m, runs)
}

/// A write whose record was taken over may already have taken effect: the new leader does not
/// run it again but records an unknown outcome, which retries then replay.
#[tokio::test]
async fn a_taken_over_write_is_an_unknown_outcome_and_does_not_run_again() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    store.take_over.store(true, Ordering::SeqCst);
    let inv =
        r.invoke_detailed(call("shop.pay", json!({"cents": 500})).with_invocation_id("pay-1"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the taken-over write must not run a second time");
    let again =
        r.invoke_detailed(call("shop.pay", json!({"cents": 500})).with_invocation_id("pay-1"), consumer("c")).await;
    assert!(again.replayed, "the unknown outcome is recorded for the reconcile call");
    assert_eq!(again.result.without_correlation_id(), inv.result.without_correlation_id());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A follower whose leader was lost (its lease lapsed with no result) admits once more and takes
/// the record over: a write records the unknown outcome it answers, so the record is settled (not
/// left in flight for nobody to settle) and a retry replays it, never running the write.
#[tokio::test]
async fn a_follower_whose_leader_was_lost_takes_the_record_over_and_settles_it() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    store.lost_leader.store(true, Ordering::SeqCst);
    store.take_over.store(true, Ordering::SeqCst);
    let pay = || call("shop.pay", json!({"cents": 500})).with_invocation_id("pay-7");
    let inv = r.invoke_detailed(pay(), consumer("c")).await;
    let p = inv.result.error_payload().expect("an error");
    assert_eq!((p.code(), p.detail("reason")), (ErrorCode::ExecutionFailed, Some(&json!("outcome-unknown"))));
    assert_eq!(store.admissions.load(Ordering::SeqCst), 2, "the follower admits once more");
    assert_eq!(store.settlements.load(Ordering::SeqCst), 1, "the record is settled");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the write does not run");
    let again = r.invoke_detailed(pay(), consumer("c")).await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.result.without_correlation_id(), inv.result.without_correlation_id());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A read whose leader was lost runs again once its follower took the record over: repeating it
/// is harmless, so the follower answers a result instead of an unknown outcome.
#[tokio::test]
async fn a_read_whose_leader_was_lost_runs_again() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    store.lost_leader.store(true, Ordering::SeqCst);
    let inv = r.invoke_detailed(call("shop.quote", json!({})).with_invocation_id("q-2"), consumer("c")).await;
    assert_eq!(inv.result.output(), Some(&json!({"price": 3})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A leader whose settlement went unanswered retries it; a retry refused means another caller
/// took the record over in the meantime (a store answers its own lease's repeat as settled), so
/// the caller gets the unknown outcome the record gives, never its own `ok`.
#[tokio::test]
async fn a_retried_settlement_refused_after_an_unanswered_one_answers_as_the_record_does() {
    let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_secs(60)), ..Default::default() });
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    store.settle_unanswered.store(true, Ordering::SeqCst);
    let inv = r.invoke_detailed(call("shop.pay", json!({})).with_invocation_id("pay-8"), consumer("c")).await;
    let p = inv.result.error_payload().expect("an unknown outcome, not the handler's ok");
    assert_eq!((p.code(), p.detail("reason")), (ErrorCode::ExecutionFailed, Some(&json!("outcome-unknown"))));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(store.settlements.load(Ordering::SeqCst) >= 2, "the settlement was retried");
}

/// A read (or an idempotent call) taken over simply runs again.
#[tokio::test]
async fn a_taken_over_read_runs_again() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    store.take_over.store(true, Ordering::SeqCst);
    let inv = r.invoke_detailed(call("shop.quote", json!({})).with_invocation_id("q-1"), consumer("c")).await;
    assert_eq!(inv.result.output(), Some(&json!({"price": 3})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A taken-over call that stops before the harmless check (here: its capability is gone) is an
/// unknown outcome too — whatever was stored is what retries get, and the earlier execution may
/// have happened — and the answer is the same whatever the capability, so it reveals nothing.
#[tokio::test]
async fn a_takeover_that_stops_early_is_an_unknown_outcome() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, _runs) = registry(store.clone(), Duration::ZERO);
    store.take_over.store(true, Ordering::SeqCst);
    let inv = r.invoke_detailed(call("shop.nothing", json!({})).with_invocation_id("n-1"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
}

/// A taken-over call dropped before it reached the harmless check records an unknown outcome,
/// never `CANCELLED` (which invites a fresh id, and so a second execution).
#[tokio::test]
async fn a_dropped_takeover_records_an_unknown_outcome() {
    let store = Arc::new(LeasingStore::default());
    let config = RegistryConfig {
        idempotency: store.clone(),
        authority: Some(Arc::new(slow_authority(Duration::from_secs(5)))),
        ..Default::default()
    };
    let (r, _m, runs) = registry_with(config, Duration::ZERO);
    store.take_over.store(true, Ordering::SeqCst);
    let pay = || call("shop.pay", json!({})).with_invocation_id("pay-5");
    let dropped = tokio::time::timeout(Duration::from_millis(50), r.invoke(pay(), consumer("c"))).await;
    assert!(dropped.is_err(), "the call is still deciding when it is dropped");
    // The guard settles in the background.
    for _ in 0..100 {
        if store.settlements.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retry = tokio::time::timeout(Duration::from_secs(1), r.invoke_detailed(pay(), consumer("c")))
        .await
        .expect("a replay answers at once");
    assert!(retry.replayed, "{retry:?}");
    assert_eq!(retry.result.error_payload().and_then(|p| p.detail("reason")), Some(&json!("outcome-unknown")));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A registry whose store renews every 5 ms and has lost the lease (every renewal says so), and
/// whose authority policy takes 60 ms: a call learns that its lease is lost before its handler.
fn losing_before_the_handler() -> (Arc<LeasingStore>, Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_millis(5)), ..Default::default() });
    let config = RegistryConfig {
        idempotency: store.clone(),
        authority: Some(Arc::new(slow_authority(Duration::from_millis(60)))),
        ..Default::default()
    };
    let (r, m, runs) = registry_with(config, Duration::ZERO);
    store.lost.store(true, Ordering::SeqCst);
    (store, r, m, runs)
}

/// A lease lost while the call was still deciding (another caller took the record over): the
/// handler never starts.
#[tokio::test]
async fn a_lease_lost_before_the_handler_starts_stops_the_call() {
    let (_store, r, _m, runs) = losing_before_the_handler();
    let inv = r.invoke_detailed(call("shop.pay", json!({})).with_invocation_id("pay-6"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler must not start once the lease is lost");
}

/// A lease lost and a caller gone, both before the handler starts: the record may already say
/// what another leader did, so the caller is answered as the record does (an unknown outcome), not
/// `CANCELLED` — which would invite a fresh id, and so a second execution.
#[tokio::test]
async fn a_lease_lost_is_answered_before_a_cancellation() {
    let (store, r, _m, runs) = losing_before_the_handler();
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = consumer("c").with_cancellation(cancel.clone());
    let invoked = r.invoke_detailed(call("shop.pay", json!({})).with_invocation_id("pay-7"), options);
    let cancelling = async {
        // Both are known before the authority policy answers: the renewals have found the lease
        // lost, and the caller has gone.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(store.renewals.load(Ordering::SeqCst) > 0, "a renewal has run");
        cancel.cancel();
    };
    let (inv, ()) = tokio::join!(invoked, cancelling);
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler must not start");
}

/// While a call runs, its lease is renewed every `renew_every`; renewal stops with the call.
#[tokio::test]
async fn a_running_call_renews_its_lease() {
    let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_millis(5)), ..Default::default() });
    let (r, _m, runs) = registry(store.clone(), Duration::from_millis(80));
    let inv = r.invoke(call("shop.pay", json!({})).with_invocation_id("pay-2"), consumer("c")).await;
    assert!(inv.is_ok());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let renewed = store.renewals.load(Ordering::SeqCst);
    assert!(renewed >= 2, "renewed {renewed} times in 80 ms at a 5 ms period");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(store.renewals.load(Ordering::SeqCst), renewed, "renewal ends with the call");
    // A store whose leases hold until settled is never asked.
    let store = Arc::new(LeasingStore::default());
    let (r, _m, _runs) = registry(store.clone(), Duration::from_millis(20));
    assert!(r.invoke(call("shop.pay", json!({})).with_invocation_id("pay-3"), consumer("c")).await.is_ok());
    assert_eq!(store.renewals.load(Ordering::SeqCst), 0);
}

/// `shop.pay` (external) and `shop.quote` (read), each taking `delay`: a run counts in `runs`,
/// one that finished in `finished`, and one whose context's cancellation fired in `cancelled`
/// (seen by a task the handler spawned, as work it handed off would see it).
fn watching_registry(store: Arc<LeasingStore>, delay: Duration) -> (Registry, agent_surface_registry::Mount, Watch) {
    let watch = Watch::default();
    let r = Registry::new(RegistryConfig { idempotency: store, ..Default::default() });
    let (pay, quote) = (watch.clone(), watch.clone());
    let handler = move |w: Watch, output: Value| {
        move |ctx: Ctx, _i: Value| {
            let (w, output) = (w.clone(), output.clone());
            async move {
                w.runs.fetch_add(1, Ordering::SeqCst);
                let token = ctx.cancellation().clone();
                let cancelled = w.cancelled.clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    cancelled.fetch_add(1, Ordering::SeqCst);
                });
                tokio::time::sleep(delay).await;
                w.finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, AgentSurfaceError>(output)
            }
        }
    };
    r.define("shop", move |t| {
        t.capability("pay", "Charge the card.").effect(Effect::External).handler(handler(pay, json!({"paid": true})));
        t.capability("quote", "Quote a price.").effect(Effect::Read).handler(handler(quote, json!({"price": 3})))
    })
    .expect("definition is valid");
    let m = r.mount("shop", "main").expect("mount");
    (r, m, watch)
}

/// What [`watching_registry`]'s handlers did.
#[derive(Clone, Debug, Default)]
struct Watch {
    runs: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
}

/// Waits (up to a second) until `counter` reaches `n`.
async fn reaches(counter: &AtomicUsize, n: usize) -> bool {
    for _ in 0..200 {
        if counter.load(Ordering::SeqCst) >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// A leader whose renewal learns that it lost its lease (it ran past it and another replica took
/// the record over) stops: its handler's context is cancelled, and its caller gets what the record
/// says — an unknown outcome —, never its own `ok`. The store records nothing of it, and the
/// operator is told. (Until issue 28 the caller got its own `ok`, which the record contradicted.)
#[test]
fn a_lost_lease_stops_the_handler_and_answers_as_the_record_does() {
    let (watch, log) = capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_millis(5)), ..Default::default() });
            // The handler outlasts the first renewal (due after 5 ms) by far, so that a stalled
            // thread cannot see both timers fire at once and finish the call before it renews.
            let (r, _m, watch) = watching_registry(store.clone(), Duration::from_millis(400));
            store.lost.store(true, Ordering::SeqCst);
            for (capability, id) in [("shop.pay", "pay-4"), ("shop.quote", "quote-4")] {
                let inv = r.invoke_detailed(call(capability, json!({})).with_invocation_id(id), consumer("c")).await;
                let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
                assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")), "{capability}: {inv:?}");
            }
            assert_eq!(store.settlements.load(Ordering::SeqCst), 2, "one settlement each, refused, not retried");
            assert_eq!(store.renewals.load(Ordering::SeqCst), 2, "renewal stops once the lease is lost");
            assert!(reaches(&watch.cancelled, 2).await, "the handlers' contexts were cancelled: {watch:?}");
            watch
        })
    });
    assert_eq!(watch.runs.load(Ordering::SeqCst), 2);
    assert_eq!(watch.finished.load(Ordering::SeqCst), 0, "the handlers were stopped");
    assert!(log.contains("lost the lease"), "{log}");
    assert!(log.contains("was not recorded"), "{log}");
}

/// A leader that learns only at settlement that it lost its lease (it finished before a renewal
/// could tell it) answers its caller as the record does too: an unknown outcome, not its `ok`.
#[tokio::test]
async fn a_lease_lost_at_settlement_is_an_unknown_outcome_for_the_caller() {
    let store = Arc::new(LeasingStore::default());
    let (r, _m, watch) = watching_registry(store.clone(), Duration::from_millis(1));
    store.lost.store(true, Ordering::SeqCst);
    for (capability, id) in [("shop.pay", "pay-7"), ("shop.quote", "quote-7")] {
        let inv = r.invoke_detailed(call(capability, json!({})).with_invocation_id(id), consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(p.detail("reason"), Some(&json!("outcome-unknown")), "{capability}: {inv:?}");
    }
    assert_eq!(watch.finished.load(Ordering::SeqCst), 2, "both handlers finished before the loss was learnt");
    assert_eq!(store.settlements.load(Ordering::SeqCst), 2);
    // A call whose handler never started keeps its own answer: nothing ran under the lost lease.
    let inv = r.invoke_detailed(call("shop.nothing", json!({})).with_invocation_id("n-7"), consumer("c")).await;
    assert_eq!(inv.result.code(), Some(ErrorCode::CapabilityNotFound), "{inv:?}");
}

/// A shared store's record is marked started once, before the handler runs: a lapse before the
/// mark is then known to have run nothing.
#[tokio::test]
async fn a_leader_marks_its_record_started_before_its_handler_runs() {
    let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_secs(60)), ..Default::default() });
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    let inv =
        r.invoke_detailed(call("shop.pay", json!({"cents": 500})).with_invocation_id("pay-m"), consumer("c")).await;
    assert!(inv.result.error_payload().is_none(), "{inv:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(*store.starts.lock().expect("not poisoned"), vec![0], "one mark, before the handler ran");
    // A leader on a store whose leases hold until settled marks nothing.
    let plain = Arc::new(LeasingStore::default());
    let (r, _m, _runs) = registry(plain.clone(), Duration::ZERO);
    let _ = r.invoke_detailed(call("shop.pay", json!({"cents": 5})).with_invocation_id("pay-n"), consumer("c")).await;
    assert!(plain.starts.lock().expect("not poisoned").is_empty());
}

/// A call whose repetition is harmless (read-only or idempotent) asks its admission to mark the
/// claim started, and a store that does so spares the separate mark (one round trip fewer on a
/// shared store); a write is still marked just before its handler, and a store that cannot mark
/// at admission marks the harmless call then too.
#[tokio::test]
async fn a_harmless_call_is_marked_started_by_its_admission_where_the_store_can() {
    let leasing = |marks_at_admission: bool| {
        Arc::new(LeasingStore { renew_every: Some(Duration::from_secs(60)), marks_at_admission, ..Default::default() })
    };
    let store = leasing(true);
    let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
    let quote = r.invoke_detailed(call("shop.quote", json!({})).with_invocation_id("q-1"), consumer("c")).await;
    assert!(quote.result.is_ok(), "{quote:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(store.admitted_started.load(Ordering::SeqCst), 1, "the read asks its admission to mark it");
    assert!(store.starts.lock().expect("not poisoned").is_empty(), "marked by its admission, not marked again");
    let pay = r.invoke_detailed(call("shop.pay", json!({"cents": 5})).with_invocation_id("p-1"), consumer("c")).await;
    assert!(pay.result.is_ok(), "{pay:?}");
    assert_eq!(store.admitted_started.load(Ordering::SeqCst), 1, "a write's admission marks nothing");
    assert_eq!(*store.starts.lock().expect("not poisoned"), vec![1], "the write is marked before its handler");
    assert_eq!(store.admissions.load(Ordering::SeqCst), 2);

    // A store that cannot mark at admission: the read is marked before its handler.
    let store = leasing(false);
    let (r, _m, _runs) = registry(store.clone(), Duration::ZERO);
    let quote = r.invoke_detailed(call("shop.quote", json!({})).with_invocation_id("q-2"), consumer("c")).await;
    assert!(quote.result.is_ok(), "{quote:?}");
    assert_eq!(store.admitted_started.load(Ordering::SeqCst), 1);
    assert_eq!(*store.starts.lock().expect("not poisoned"), vec![0], "marked before its handler ran");
}

/// A leader whose lease lapsed before its handler started (it stalled between admission and
/// execution, and the store refuses the mark) runs nothing and says so — `EXECUTION_FAILED
/// {reason: transport}`, retry after a delay, never an unknown outcome — and releases its record,
/// so that the retry the error asks for runs the call once.
#[tokio::test]
async fn a_lease_that_lapsed_before_the_handler_started_runs_nothing_and_says_so() {
    for (why, lose) in [("lapsed", true), ("unanswered", false)] {
        let store = Arc::new(LeasingStore { renew_every: Some(Duration::from_secs(60)), ..Default::default() });
        let (r, _m, runs) = registry(store.clone(), Duration::ZERO);
        if lose {
            store.start_lost.store(true, Ordering::SeqCst);
        } else {
            store.start_unanswered.store(true, Ordering::SeqCst);
        }
        let pay = || call("shop.pay", json!({"cents": 500})).with_invocation_id("pay-s");
        let inv = r.invoke_detailed(pay(), consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
        assert_eq!(p.detail("reason"), Some(&json!("transport")), "{why}: {p:?}");
        assert_eq!(p.retry(), agent_surface_core::Retry::AfterDelay, "{why}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{why}: the handler must not start");
        let again = r.invoke_detailed(pay(), consumer("c")).await;
        assert!(!again.replayed, "{why}: the record was released, not stored: {again:?}");
        assert!(again.result.error_payload().is_none(), "{why}: {again:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{why}: the retry runs the call once");
    }
}
