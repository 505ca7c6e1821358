//! Phase 6 with the real limiter (`MemoryRateLimiter`): per-consumer and per-capability GCRA
//! buckets, the bounded action queue, honest `retryAfterMs`, and nothing stored as terminal.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, ErrorCode, Phase, Retry};
use agent_surface_policy::{ManualClock, MemoryRateLimiter, QueueConfig, Quota, RateLimitConfig};
use agent_surface_registry::{Ctx, Invocation, Registry, RegistryConfig};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::*;

fn per_second(n: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(n).unwrap())
}

fn limited(clock: &Arc<ManualClock>, config: RateLimitConfig) -> (Registry, agent_surface_registry::Mount) {
    let limiter = MemoryRateLimiter::new(RateLimitConfig { clock: clock.clone(), ..config });
    echo_registry(RegistryConfig { rate_limiter: Some(Arc::new(limiter)), ..config_with(clock) })
}

fn echo(text: &str) -> agent_surface_registry::InvokeRequest {
    call("demo.echo", json!({"text": text}))
}

#[track_caller]
fn assert_limited(inv: &Invocation, reason: &str, retry_after_ms: u64) {
    let p = assert_produced(inv, ErrorCode::RateLimited, Phase::Rate);
    assert_eq!(p.retry(), Retry::AfterDelay);
    assert_eq!(p.details().unwrap(), json!({"reason": reason, "retryAfterMs": retry_after_ms}).as_object().unwrap());
    assert!(p.message().contains(&format!("{retry_after_ms} ms")), "{}", p.message());
}

#[tokio::test]
async fn per_consumer_rate_with_an_honest_retry_after() {
    let clock = clock();
    let (r, _m) = limited(&clock, RateLimitConfig { per_consumer: Some(per_second(4)), ..Default::default() });
    for _ in 0..4 {
        assert!(r.invoke(echo("a"), consumer("c")).await.is_ok());
    }
    // The bucket refills one call every 250 ms.
    assert_limited(&r.invoke_detailed(echo("a"), consumer("c")).await, "rate", 250);
    clock.advance(Duration::from_millis(100));
    assert_limited(&r.invoke_detailed(echo("a"), consumer("c")).await, "rate", 150);
    // Another consumer has its own budget.
    assert!(r.invoke(echo("a"), consumer("other")).await.is_ok());
    clock.advance(Duration::from_millis(149));
    assert_limited(&r.invoke_detailed(echo("a"), consumer("c")).await, "rate", 1);
    // After exactly the advertised delay, the retry passes.
    clock.advance(Duration::from_millis(1));
    assert!(r.invoke(echo("a"), consumer("c")).await.is_ok());
    assert_limited(&r.invoke_detailed(echo("a"), consumer("c")).await, "rate", 250);
}

#[tokio::test]
async fn per_capability_budget_is_shared_and_a_refusal_costs_nothing() {
    let clock = clock();
    let (r, _m) = limited(
        &clock,
        RateLimitConfig {
            per_consumer: Some(per_second(2)),
            per_capability: Some(per_second(3)),
            ..Default::default()
        },
    );
    assert!(r.invoke(echo("a"), consumer("a")).await.is_ok());
    assert!(r.invoke(echo("a"), consumer("b")).await.is_ok());
    assert!(r.invoke(echo("a"), consumer("c")).await.is_ok());
    // The capability's budget is spent (3 per second: one call every 333.33 ms).
    assert_limited(&r.invoke_detailed(echo("a"), consumer("d")).await, "rate", 334);
    assert_limited(&r.invoke_detailed(echo("a"), consumer("d")).await, "rate", 334);
    clock.advance(Duration::from_millis(334));
    // Consumer d was refused twice but lost nothing: its own bucket is full.
    assert!(r.invoke(echo("a"), consumer("d")).await.is_ok());
    // The capability's bucket is empty again: 1 s of budget was taken in 334 ms.
    assert_limited(&r.invoke_detailed(echo("a"), consumer("a")).await, "rate", 333);
    clock.advance(Duration::from_millis(334));
    assert!(r.invoke(echo("a"), consumer("a")).await.is_ok());
    assert_limited(&r.invoke_detailed(echo("a"), consumer("a")).await, "rate", 332);
}

#[tokio::test]
async fn rate_limited_is_never_stored_as_terminal() {
    let clock = clock();
    let (r, _m) = limited(&clock, RateLimitConfig { per_consumer: Some(per_second(1)), ..Default::default() });
    assert!(r.invoke(echo("a"), consumer("c")).await.is_ok());
    let req = echo("a").with_invocation_id("inv-1");
    let first = r.invoke_detailed(req.clone(), consumer("c")).await;
    assert_limited(&first, "rate", 1000);
    let second = r.invoke_detailed(req.clone(), consumer("c")).await;
    assert!(!second.replayed, "not replayed");
    assert_limited(&second, "rate", 1000);
    clock.advance(Duration::from_secs(1));
    assert!(r.invoke(req, consumer("c")).await.is_ok(), "the same invocation id passes after the delay");
}

/// `gate.run` waits for a permit of the shared semaphore before it answers.
fn gated(clock: &Arc<ManualClock>, queue: QueueConfig) -> (Registry, agent_surface_registry::Mount, Arc<Semaphore>) {
    let limiter =
        MemoryRateLimiter::new(RateLimitConfig { clock: clock.clone(), queue: Some(queue), ..Default::default() });
    let r = Registry::new(RegistryConfig { rate_limiter: Some(Arc::new(limiter)), ..config_with(clock) });
    let gate = Arc::new(Semaphore::new(0));
    r.provide(gate.clone());
    r.define("gate", |t| {
        t.capability("run", "Wait for the gate.").time_budget(Duration::from_secs(600)).handler(
            |ctx: Ctx, _i: Value| async move {
                ctx.state::<Arc<Semaphore>>().acquire().await.map_err(AgentSurfaceError::internal)?.forget();
                Ok::<_, AgentSurfaceError>(json!({"done": true}))
            },
        )
    })
    .unwrap();
    let m = r.mount("gate", "main").unwrap();
    (r, m, gate)
}

fn spawn_run(r: &Registry) -> tokio::task::JoinHandle<Invocation> {
    let r = r.clone();
    tokio::spawn(async move { r.invoke_detailed(call("gate.run", json!({})), consumer("c")).await })
}

#[tokio::test]
async fn a_full_queue_is_rate_limited_with_an_estimate() {
    let clock = clock();
    let queue = QueueConfig {
        max_concurrent: NonZeroUsize::new(1).unwrap(),
        max_waiting: 1,
        max_wait: Duration::from_secs(60),
        initial_hold_estimate: Duration::from_millis(800),
    };
    let (r, _m, gate) = gated(&clock, queue);
    let running = spawn_run(&r);
    settle().await;
    let waiting = spawn_run(&r);
    settle().await;
    // One runs, one waits, the third finds the waiting room full: two calls ahead of it, one
    // slot, 800 ms per call.
    let inv = r.invoke_detailed(call("gate.run", json!({})), consumer("c")).await;
    assert_limited(&inv, "queue-full", 1600);
    assert!(!running.is_finished() && !waiting.is_finished());

    clock.advance(Duration::from_millis(400));
    gate.add_permits(1);
    assert!(running.await.unwrap().result.is_ok());
    gate.add_permits(1);
    assert!(waiting.await.unwrap().result.is_ok(), "the waiting call got the slot");
    // The estimate now follows the observed hold time: the first call held its slot 400 ms, so
    // the average moved from 800 ms towards it; the second held it 0 ms.
    let held = [400u64, 0];
    let estimate = held.iter().fold(800_000_000u64, |avg, ms| avg - avg / 8 + ms * 1_000_000 / 8);
    let running = spawn_run(&r);
    settle().await;
    let _waiting = spawn_run(&r);
    settle().await;
    let inv = r.invoke_detailed(call("gate.run", json!({})), consumer("c")).await;
    assert_limited(&inv, "queue-full", (estimate * 2).div_ceil(1_000_000));
    gate.add_permits(2);
    assert!(running.await.unwrap().result.is_ok());
}

/// A call waiting in the queue when its registration is unmounted stops waiting at once: it is
/// answered `COMPONENT_UNMOUNTED {phase: resolve}`, `notProcessed` (what phase 8's gate would say
/// once it had its slot), and its place in the queue is given up.
#[tokio::test]
async fn a_call_waiting_in_the_queue_ends_when_its_registration_goes() {
    let clock = clock();
    let queue = QueueConfig {
        max_concurrent: NonZeroUsize::new(1).unwrap(),
        max_waiting: 1,
        max_wait: Duration::from_secs(60),
        initial_hold_estimate: Duration::from_millis(800),
    };
    let (r, m, gate) = gated(&clock, queue);
    // The slot is held by a call on another instance, which the unmount leaves running.
    let _other = r.mount("gate", "other").unwrap();
    let on = |instance: &'static str| {
        let r = r.clone();
        let request = call("gate.run", json!({})).with_target(agent_surface_registry::Target::instance(instance));
        tokio::spawn(async move { r.invoke_detailed(request, consumer("c")).await })
    };
    let running = on("other");
    settle().await;
    let waiting = on("main");
    settle().await;
    assert!(!waiting.is_finished());
    m.unmount();
    let inv = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered without waiting for the slot")
        .unwrap();
    let p = assert_produced_before_handler(&inv, ErrorCode::ComponentUnmounted, Phase::Execute);
    assert_eq!((p.retry(), p.detail("phase")), (Retry::AfterRefresh, Some(&json!("resolve"))));
    assert!(!running.is_finished(), "the slot is still held");
    // Its place in the queue was given up: the next call waits there (one place), not refused.
    let next = on("other");
    settle().await;
    assert!(!next.is_finished(), "queued, not refused queue-full");
    gate.add_permits(2);
    assert!(running.await.unwrap().result.is_ok());
    assert!(next.await.unwrap().result.is_ok());
}

/// `gate.run` (see [`gated`]) behind a limiter of two calls a second per consumer and a queue of
/// one slot whose calls wait at most `max_wait`; `started` counts the handlers that ran.
struct Counted {
    registry: Registry,
    limiter: Arc<MemoryRateLimiter>,
    gate: Arc<Semaphore>,
    started: Arc<AtomicUsize>,
    _mount: agent_surface_registry::Mount,
}

fn counted(clock: &Arc<ManualClock>, max_wait: Duration) -> Counted {
    let limiter = Arc::new(MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.clone(),
        per_consumer: Some(per_second(2)),
        queue: Some(QueueConfig {
            max_concurrent: NonZeroUsize::new(1).unwrap(),
            max_waiting: 4,
            max_wait,
            initial_hold_estimate: Duration::from_millis(100),
        }),
        ..Default::default()
    }));
    let r = Registry::new(RegistryConfig { rate_limiter: Some(limiter.clone()), ..config_with(clock) });
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    r.provide(gate.clone());
    let count = started.clone();
    r.define("gate", |t| {
        t.capability("run", "Wait for the gate.").time_budget(Duration::from_secs(600)).handler(
            move |ctx: Ctx, _i: Value| {
                count.fetch_add(1, Ordering::SeqCst);
                async move {
                    ctx.state::<Arc<Semaphore>>().acquire().await.map_err(AgentSurfaceError::internal)?.forget();
                    Ok::<_, AgentSurfaceError>(json!({}))
                }
            },
        )
    })
    .unwrap();
    let _mount = r.mount("gate", "main").unwrap();
    Counted { registry: r, limiter, gate, started, _mount }
}

#[tokio::test]
async fn a_call_that_waits_too_long_gives_up_and_gets_its_budget_back() {
    let clock = clock();
    let Counted { registry: r, limiter, gate, started, _mount } = counted(&clock, Duration::from_millis(50));

    let running = spawn_run(&r);
    settle().await;
    let waiter = spawn_run(&r);
    while limiter.waiting() == 0 || clock.pending_sleeps() < 2 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_millis(50));
    let inv = waiter.await.unwrap();
    assert_eq!(inv.result.code(), Some(ErrorCode::RateLimited));
    assert_eq!(inv.result.error_payload().unwrap().detail("reason"), Some(&json!("queue-full")));
    assert_eq!(limiter.waiting(), 0);
    // The given-up call's rate unit was refunded: the consumer still has one call this second.
    gate.add_permits(1);
    assert!(running.await.unwrap().result.is_ok());
    gate.add_permits(1);
    assert!(r.invoke(call("gate.run", json!({})), consumer("c")).await.is_ok());
    assert_eq!(started.load(Ordering::SeqCst), 2, "the call that gave up never started");
    assert_eq!(limiter.in_flight(), 0);
}

/// A caller that cancels while its call waits in the queue: the call leaves the queue at once with
/// `CANCELLED` in phase 6, before its handler (`notProcessed`), its unit of rate budget is given
/// back, and its handler never runs — not even when a slot frees up later.
#[tokio::test]
async fn a_call_cancelled_in_the_queue_leaves_it_and_never_runs() {
    let clock = clock();
    // Two calls a second, and the clock stands still: the cancelled call's unit must come back
    // for the last call to pass.
    let Counted { registry: r, limiter, gate, started, _mount } = counted(&clock, Duration::from_secs(60));

    let running = spawn_run(&r);
    settle().await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let waiter = {
        let (r, options) = (r.clone(), consumer("c").with_cancellation(cancel.clone()));
        tokio::spawn(async move { r.invoke_detailed(call("gate.run", json!({})), options).await })
    };
    settle().await;
    assert_eq!(limiter.waiting(), 1, "the second call waits for the slot");
    cancel.cancel();
    let inv = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("ended by the cancellation").unwrap();
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Rate);
    assert!(p.not_processed());
    assert_eq!(limiter.waiting(), 0, "it left the queue");

    gate.add_permits(1);
    assert!(running.await.unwrap().result.is_ok());
    settle().await;
    assert_eq!(started.load(Ordering::SeqCst), 1, "the cancelled call's handler never ran");
    // The slot is free for the next caller, and so is the unit the cancelled call took.
    gate.add_permits(1);
    let next = spawn_run(&r).await.unwrap();
    assert!(next.result.is_ok(), "{:?}", next.result);
}

/// The registry disposed while a call waits in the queue: the call ends at once, `CANCELLED`,
/// nothing ran.
#[tokio::test]
async fn a_call_waiting_in_the_queue_ends_when_the_registry_is_disposed() {
    let clock = clock();
    let queue = QueueConfig {
        max_concurrent: NonZeroUsize::new(1).unwrap(),
        max_waiting: 4,
        max_wait: Duration::from_secs(60),
        initial_hold_estimate: Duration::from_millis(100),
    };
    let (r, _m, _gate) = gated(&clock, queue);
    let _running = spawn_run(&r);
    settle().await;
    let waiter = spawn_run(&r);
    settle().await;
    assert!(!waiter.is_finished());
    r.dispose();
    let inv = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("ended by the disposal").unwrap();
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Rate);
    assert!(p.not_processed());
}

/// A caller that cancels while phase 6 decides: phase 7 starts no wait — the gate is not asked, so
/// no person is asked to approve a call nobody wants — and the answer is `CANCELLED`, not
/// `CONFIRMATION_REQUIRED`.
#[tokio::test]
async fn a_call_cancelled_before_its_confirmation_asks_nobody() {
    use agent_surface_core::SafeText;
    use agent_surface_core::details::Origin;
    use agent_surface_policy::{ConfirmationDecision, RateDecision};
    use agent_surface_testing::{FnGate, FnLimiter};

    let cancel = tokio_util::sync::CancellationToken::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let (token, count) = (cancel.clone(), asked.clone());
    let r = Registry::new(RegistryConfig {
        // The caller goes away while the limiter decides.
        rate_limiter: Some(Arc::new(FnLimiter::new(move |_, _| {
            token.cancel();
            RateDecision::Allow(None)
        }))),
        confirmation: Some(Arc::new(FnGate::new(move |_call, _evidence, now| {
            count.fetch_add(1, Ordering::SeqCst);
            ConfirmationDecision::Required {
                confirmation_id: "conf-1".into(),
                summary: SafeText::from("Run it."),
                expires_at: now.saturating_add(Duration::from_secs(60)),
                origin: Origin::Client,
            }
        }))),
        ..Default::default()
    });
    r.define("demo", |t| {
        t.capability("run", "Run.").handler(|_: Ctx, i: Value| async move { Ok::<_, AgentSurfaceError>(i) })
    })
    .unwrap();
    let _m = r.mount("demo", "main").unwrap();
    let inv = r.invoke_detailed(call("demo.run", json!({})), consumer("c").with_cancellation(cancel)).await;
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Confirmation);
    assert!(p.not_processed());
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the gate was not asked");
}

/// A limiter whose decision at once is `decide`'s, counting how often each way was asked; its
/// `acquire` lets the call through.
struct DecidesAtOnce<F> {
    decide: F,
    at_once: AtomicUsize,
    acquired: AtomicUsize,
}

impl<F> agent_surface_policy::RateLimiter for DecidesAtOnce<F>
where
    F: Fn() -> Option<agent_surface_policy::RateDecision> + Send + Sync + 'static,
{
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn acquire<'a>(
        &'a self,
        _call: agent_surface_policy::CallInfo<'a>,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, agent_surface_policy::RateDecision> {
        self.acquired.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(agent_surface_policy::RateDecision::Allow(None)))
    }

    fn acquire_at_once(
        &self,
        _call: &agent_surface_policy::CallInfo<'_>,
        _now: agent_surface_core::Timestamp,
    ) -> Option<agent_surface_policy::RateDecision> {
        self.at_once.fetch_add(1, Ordering::SeqCst);
        (self.decide)()
    }
}

/// Sets its flag when dropped: a permit whose release the handler can see.
struct Released(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Phase 6 asks the limiter's decision at once first and awaits `acquire` only when it has none:
/// a decision at once lets the call through or refuses it as `acquire`'s would, a permit it grants
/// is held until the handler is done, and a panic there is `RATE_LIMITED {reason: rate}` with
/// nothing of its text in the answer.
#[tokio::test]
async fn a_limiter_that_decides_at_once_is_not_awaited() {
    use agent_surface_policy::RateDecision;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    type Script = Mutex<Vec<Box<dyn FnOnce() -> Option<RateDecision> + Send>>>;
    let script: Arc<Script> = Arc::new(Mutex::new(Vec::new()));
    let next = script.clone();
    let limiter = Arc::new(DecidesAtOnce {
        decide: move || (next.lock().unwrap().remove(0))(),
        at_once: AtomicUsize::new(0),
        acquired: AtomicUsize::new(0),
    });
    let r = Registry::new(RegistryConfig { rate_limiter: Some(limiter.clone()), ..Default::default() });
    let released = Arc::new(AtomicBool::new(false));
    r.provide(released.clone());
    r.define("demo", |t| {
        t.capability("run", "Run.").handler(|ctx: Ctx, _: Value| async move {
            tokio::task::yield_now().await;
            let released = ctx.state::<Arc<AtomicBool>>().load(Ordering::SeqCst);
            Ok::<_, AgentSurfaceError>(json!({"releasedBeforeTheEnd": released}))
        })
    })
    .unwrap();
    let _m = r.mount("demo", "main").unwrap();
    let run = || r.invoke_detailed(call("demo.run", json!({})), consumer("c"));
    let counts = || (limiter.at_once.load(Ordering::SeqCst), limiter.acquired.load(Ordering::SeqCst));
    let push = |f: Box<dyn FnOnce() -> Option<RateDecision> + Send>| script.lock().unwrap().push(f);

    push(Box::new(|| Some(RateDecision::Allow(None))));
    assert!(run().await.result.is_ok());
    assert_eq!(counts(), (1, 0), "let through at once, never awaited");

    let held = released.clone();
    push(Box::new(move || Some(RateDecision::Allow(Some(Box::new(Released(held)))))));
    let inv = run().await;
    assert_eq!(inv.result.output(), Some(&json!({"releasedBeforeTheEnd": false})), "held while the handler runs");
    assert!(released.load(Ordering::SeqCst), "and released when the call ends");
    assert_eq!(counts(), (2, 0));

    push(Box::new(|| {
        Some(RateDecision::Limited {
            reason: agent_surface_core::details::RateLimitReason::Rate,
            retry_after: Duration::from_millis(250),
        })
    }));
    assert_limited(&run().await, "rate", 250);
    assert_eq!(counts(), (3, 0));

    push(Box::new(|| None));
    assert!(run().await.result.is_ok());
    assert_eq!(counts(), (4, 1), "no decision at once: awaited");

    push(Box::new(|| panic!("limiter bug: redis://10.0.0.9 unreachable")));
    let inv = run().await;
    assert_limited(&inv, "rate", 1000);
    let text = serde_json::to_string(&inv.result).unwrap();
    assert!(!text.contains("10.0.0.9") && !text.contains("limiter bug"), "{text}");
    assert_eq!(counts(), (5, 1));
}

/// A call whose caller cancels, or whose registry is disposed, before phase 6 takes nothing from
/// a limiter that decides at once: it is `CANCELLED` in phase 6, before its handler, and the
/// budget is untouched (a review found nothing held this).
#[tokio::test]
async fn a_call_cancelled_before_phase_6_takes_nothing_from_a_limiter_that_decides_at_once() {
    use std::sync::OnceLock;
    use tokio_util::sync::CancellationToken;

    let limiter =
        Arc::new(MemoryRateLimiter::new(RateLimitConfig { per_consumer: Some(per_second(1)), ..Default::default() }));
    let r = Registry::new(RegistryConfig { rate_limiter: Some(limiter.clone()), ..Default::default() });
    let cancel = CancellationToken::new();
    let disposer: Arc<OnceLock<Registry>> = Arc::new(OnceLock::new());
    let (token, to_dispose) = (cancel.clone(), disposer.clone());
    r.define("demo", |t| {
        t.capability("run", "Run.")
            .precondition(move |_: &Ctx, i: &Value| {
                match i["then"].as_str() {
                    Some("cancel") => token.cancel(),
                    Some("dispose") => to_dispose.get().expect("set before").dispose(),
                    _ => {}
                }
                Ok(())
            })
            .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) })
    })
    .unwrap();
    let _m = r.mount("demo", "main").unwrap();

    let inv =
        r.invoke_detailed(call("demo.run", json!({"then": "cancel"})), consumer("c").with_cancellation(cancel)).await;
    assert!(assert_produced(&inv, ErrorCode::Cancelled, Phase::Rate).not_processed());
    assert_eq!(limiter.bucket_count(), 0, "no unit taken");
    assert!(r.invoke(call("demo.run", json!({})), consumer("c")).await.is_ok(), "the budget of one is whole");
    assert_eq!(limiter.bucket_count(), 1);

    let _ = disposer.set(r.clone());
    let inv = r.invoke_detailed(call("demo.run", json!({"then": "dispose"})), consumer("d")).await;
    assert!(assert_produced(&inv, ErrorCode::Cancelled, Phase::Rate).not_processed());
    assert_eq!(limiter.bucket_count(), 1, "the call of `d` took no unit");
}
