//! The recovery loop against a scripted fake invoker: each retry category, the bounds, and a
//! property test over every code and every reachable sequence of results.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin, RateLimitReason, StaleReason, UnmountPhase};
use agent_surface_core::matrix::MATRIX;
use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
use agent_surface_core::{
    AgentSurfaceError, Effect, ErrorCode, ErrorPayload, InvokeResult, Retry, SafeText, Timestamp,
};
use agent_surface_registry::{InvokeRequest, Snapshot, Target};
use agent_surface_testing::TestClock;
use agent_surface_toolset::recovery::{StepDecision, may_have_executed};
use agent_surface_toolset::{
    Approval, ConfirmationPrompt, Invoker, RecoveryConfig, RecoveryDriver, RecoveryHost, RelayToModel, Stop,
    Verification,
};
use futures_util::future::BoxFuture;
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{descriptor, snapshot};

/// One scripted answer: the result, and whether the handler's effect took place.
#[derive(Clone, Debug)]
struct Step {
    result: InvokeResult,
    applied: bool,
}

fn ok_step() -> Step {
    Step { result: InvokeResult::ok(json!({"done": true}), None), applied: true }
}

fn err(e: AgentSurfaceError) -> Step {
    Step { result: InvokeResult::error(e.into_payload(), None), applied: false }
}

#[derive(Default)]
struct Ground {
    /// Requests received, in order.
    requests: Vec<InvokeRequest>,
    /// How many times the effect took place.
    applied: usize,
    /// How many snapshots were taken.
    snapshots: usize,
}

/// Answers with its script, then with success; lists a fixed snapshot.
struct Fake {
    script: Mutex<VecDeque<Step>>,
    snapshot: Snapshot,
    ground: Arc<Mutex<Ground>>,
}

impl Fake {
    fn new(script: Vec<Step>, idempotent: bool) -> Fake {
        let mut d = descriptor("cart.add", "Add.", json!({"type": "object"}));
        d["idempotent"] = json!(idempotent);
        d["instances"] = json!([{"instanceId": "main", "registrationId": "r-2"}]);
        Fake { script: Mutex::new(script.into()), snapshot: snapshot(json!([d])), ground: Arc::default() }
    }

    fn requests(&self) -> Vec<InvokeRequest> {
        self.ground.lock().unwrap().requests.clone()
    }
}

impl Invoker for Fake {
    fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult> {
        let step = self.script.lock().unwrap().pop_front().unwrap_or_else(ok_step);
        let mut ground = self.ground.lock().unwrap();
        ground.requests.push(request.clone());
        if step.applied {
            ground.applied += 1;
        }
        let result = step.result.with_invocation_id(request.invocation_id);
        Box::pin(std::future::ready(result))
    }

    fn snapshot(&self) -> BoxFuture<'_, Snapshot> {
        self.ground.lock().unwrap().snapshots += 1;
        Box::pin(std::future::ready(self.snapshot.clone()))
    }
}

/// Answers approvals from a script (then `Unavailable`) and verifies truthfully from the fake's
/// ground truth, or never.
struct Host {
    approvals: Mutex<VecDeque<Approval>>,
    prompts: Mutex<Vec<ConfirmationPrompt>>,
    truth: Option<Arc<Mutex<Ground>>>,
}

impl Host {
    fn new(approvals: Vec<Approval>, truth: Option<Arc<Mutex<Ground>>>) -> Arc<Host> {
        Arc::new(Host { approvals: Mutex::new(approvals.into()), prompts: Mutex::default(), truth })
    }
}

impl RecoveryHost for Host {
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        self.prompts.lock().unwrap().push(prompt.clone());
        let a = self.approvals.lock().unwrap().pop_front().unwrap_or(Approval::Unavailable);
        Box::pin(std::future::ready(a))
    }

    fn verify<'a>(&'a self, _: &'a InvokeRequest, _: &'a ErrorPayload) -> BoxFuture<'a, Verification> {
        let v = match &self.truth {
            Some(ground) if ground.lock().unwrap().applied == 0 => Verification::NotApplied,
            Some(_) => Verification::Applied,
            None => Verification::Unknown,
        };
        Box::pin(std::future::ready(v))
    }
}

fn driver(clock: &TestClock, host: Arc<dyn RecoveryHost>) -> RecoveryDriver {
    RecoveryDriver::new(RecoveryConfig::default(), clock.shared(), host)
}

fn request() -> InvokeRequest {
    InvokeRequest::new("cart.add", json!({"sku": "tea"})).with_invocation_id("p:call-1").with_surface("s-old", 3)
}

fn run(fake: &Fake, driver: &RecoveryDriver) -> agent_surface_toolset::Recovery {
    futures_executor(driver.run(fake, request(), &CancellationToken::new()))
}

/// Drives a future whose waits all complete at once (auto-advancing clock, ready fakes).
fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(f)
}

fn ids(fake: &Fake) -> Vec<String> {
    fake.requests().iter().map(|r| r.invocation_id.clone().unwrap_or_default()).collect()
}

#[test]
fn after_refresh_re_resolves_and_retries_under_a_fresh_id() {
    let clock = TestClock::auto_advancing();
    let fake = Fake::new(vec![err(AgentSurfaceError::capability_not_found())], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts, r.refreshed), (Stop::Succeeded, 2, true));
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1#r2"]);
    // The staleness tokens were refreshed, not stripped.
    let second = &fake.requests()[1];
    assert_eq!((second.surface_id.as_deref(), second.surface_version), (Some("s-0123456789abcdef"), Some(7)));

    // A replaced registration is retargeted to the live one.
    let stale = AgentSurfaceError::stale_capability(StaleReason::RegistrationReplaced, Some("r-2".into()));
    let fake = Fake::new(vec![err(stale)], false);
    let req = request().with_target(Target { instance_id: Some("main".into()), registration_id: Some("r-1".into()) });
    let r = futures_executor(driver(&clock, Arc::new(RelayToModel)).run(&fake, req, &CancellationToken::new()));
    assert_eq!(r.stop, Stop::Succeeded);
    assert_eq!(fake.requests()[1].target.as_ref().unwrap().registration_id.as_deref(), Some("r-2"));

    // An instance that is gone: nothing to call, back to the caller.
    let fake = Fake::new(vec![err(AgentSurfaceError::component_unmounted(UnmountPhase::Resolve))], false);
    let req = request().with_target(Target::instance("other"));
    let r = futures_executor(driver(&clock, Arc::new(RelayToModel)).run(&fake, req, &CancellationToken::new()));
    assert_eq!((r.stop, r.attempts, r.refreshed), (Stop::ReturnedToCaller, 1, true));
    assert_eq!(r.result.code(), Some(ErrorCode::ComponentUnmounted));
}

/// A refresh row whose re-listing shows another version of the tool: the arguments were built for
/// the definition the call named, so they are not sent again; the caller gets the error with the
/// list marked refreshed, as after `tool-version-mismatch`. An unchanged version is resent.
#[test]
fn a_relisting_that_changes_the_tool_version_does_not_resend_the_arguments() {
    let clock = TestClock::auto_advancing();
    let d = driver(&clock, Arc::new(RelayToModel));
    let versioned = |script: Vec<Step>| {
        let mut fake = Fake::new(script, false);
        let mut cart = descriptor("cart.add", "Add.", json!({"type": "object"}));
        cart["toolVersion"] = json!("v-2");
        fake.snapshot = snapshot(json!([cart]));
        fake
    };
    let reloaded = || AgentSurfaceError::stale_capability(StaleReason::SurfaceReloaded, None);
    let unmounted = || AgentSurfaceError::component_unmounted(UnmountPhase::Resolve);
    for error in [reloaded(), unmounted()] {
        let code = error.payload().code();
        let fake = versioned(vec![err(error)]);
        let r = futures_executor(d.run(&fake, request().with_tool_version("v-1"), &CancellationToken::new()));
        assert_eq!((r.stop, r.attempts, r.refreshed), (Stop::ReturnedToCaller, 1, true), "{code}");
        assert_eq!((r.result.code(), fake.requests().len()), (Some(code), 1), "sent once");
    }
    for error in [reloaded(), unmounted()] {
        let fake = versioned(vec![err(error)]);
        let r = futures_executor(d.run(&fake, request().with_tool_version("v-2"), &CancellationToken::new()));
        assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
        assert_eq!(fake.requests()[1].tool_version.as_deref(), Some("v-2"));
    }
}

#[tokio::test]
async fn after_delay_waits_on_the_clock_and_reuses_the_id_of_a_non_cacheable_code() {
    let clock = TestClock::new();
    let limited = AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1500));
    let fake = Fake::new(vec![err(limited)], false);
    let d = driver(&clock, Arc::new(RelayToModel));
    let cancel = CancellationToken::new();
    let (r, ()) =
        tokio::join!(d.run(&fake, request(), &cancel), clock.advance_when_waiting(1, Duration::from_millis(1500)));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1"]);
    assert_eq!(clock.elapsed(), Duration::from_millis(1500));

    // A store that could not admit the call: the same id after the wait (an earlier attempt's
    // result, if any, is returned rather than run again).
    let fake = Fake::new(vec![err(AgentSurfaceError::store_unavailable(Duration::from_millis(300)))], false);
    let (r, ()) =
        tokio::join!(d.run(&fake, request(), &cancel), clock.advance_when_waiting(1, Duration::from_millis(300)));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1"]);

    // A transient EXECUTION_FAILED is cacheable: a fresh id after the wait (idempotent capability).
    let fake = Fake::new(vec![err(AgentSurfaceError::transient(Duration::from_millis(200)))], true);
    let (r, ()) =
        tokio::join!(d.run(&fake, request(), &cancel), clock.advance_when_waiting(1, Duration::from_millis(200)));
    assert_eq!(r.stop, Stop::Succeeded);
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1#r2"]);
}

#[tokio::test]
async fn waits_are_bounded_and_cancellable() {
    let clock = TestClock::new();
    let d = driver(&clock, Arc::new(RelayToModel));
    let long = AgentSurfaceError::rate_limited(RateLimitReason::QueueFull, Duration::from_secs(31));
    let fake = Fake::new(vec![err(long)], false);
    let r = d.run(&fake, request(), &CancellationToken::new()).await;
    assert_eq!((r.stop, r.attempts), (Stop::DelayTooLong, 1));
    assert_eq!(r.result.code(), Some(ErrorCode::RateLimited));

    let fake =
        Fake::new(vec![err(AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_secs(5)))], false);
    let cancel = CancellationToken::new();
    let cancel_when_waiting = async {
        while clock.pending_sleeps() == 0 {
            tokio::task::yield_now().await;
        }
        cancel.cancel();
    };
    let (r, ()) = tokio::join!(d.run(&fake, request(), &cancel), cancel_when_waiting);
    assert_eq!((r.stop, r.attempts), (Stop::Cancelled, 1));
    assert_eq!(r.result.code(), Some(ErrorCode::Cancelled));
    assert_eq!(clock.pending_sleeps(), 0, "the wait was dropped");
}

/// A call cancelled while it ran (`Toolset::cancel`): the loop ends, and the outcome names the
/// request it sent and answers under that request's id, not the retry it would have sent next.
#[tokio::test]
async fn a_call_cancelled_while_it_ran_reports_the_request_it_sent() {
    struct CancelsWhileRunning(CancellationToken, Mutex<Vec<InvokeRequest>>, Snapshot);
    impl Invoker for CancelsWhileRunning {
        fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult> {
            self.0.cancel();
            let id = request.invocation_id.clone();
            self.1.lock().unwrap().push(request);
            Box::pin(std::future::ready(InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), id)))
        }

        fn snapshot(&self) -> BoxFuture<'_, Snapshot> {
            Box::pin(std::future::ready(self.2.clone()))
        }
    }
    let clock = TestClock::new();
    let d = driver(&clock, Arc::new(RelayToModel));
    let cancel = CancellationToken::new();
    let invoker = CancelsWhileRunning(cancel.clone(), Mutex::default(), Fake::new(vec![], true).snapshot);
    let r = d.run(&invoker, request(), &cancel).await;
    assert_eq!((r.stop, r.attempts), (Stop::Cancelled, 1));
    assert_eq!(invoker.1.lock().unwrap().len(), 1, "one request sent");
    assert_eq!(r.request.invocation_id.as_deref(), Some("p:call-1"), "the request sent");
    assert_eq!(r.result.invocation_id(), Some("p:call-1"));
}

fn confirmation_required(id: &str) -> AgentSurfaceError {
    AgentSurfaceError::confirmation_required(
        id,
        SafeText::from("Add tea to the cart."),
        Timestamp::from_unix_millis(1_795_935_900_000),
        Effect::Write,
        Origin::Client,
    )
}

#[test]
fn confirmation_is_asked_once_and_a_denial_is_never_retried() {
    let clock = TestClock::auto_advancing();
    // Approved: retried with the id, under the same invocation id (not cacheable).
    let fake = Fake::new(vec![err(confirmation_required("c-1"))], false);
    let host = Host::new(vec![Approval::Approved], None);
    let r = run(&fake, &driver(&clock, host.clone()));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
    assert_eq!(fake.requests()[1].confirmation_id.as_deref(), Some("c-1"));
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1"]);
    let prompts = host.prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1);
    assert_eq!((prompts[0].capability.as_str(), prompts[0].summary.as_str()), ("cart.add", "Add tea to the cart."));

    // Denied: no retry; the caller is told the user denied it.
    let fake = Fake::new(vec![err(confirmation_required("c-1"))], false);
    let r = run(&fake, &driver(&clock, Host::new(vec![Approval::Denied], None)));
    assert_eq!((r.stop, r.attempts), (Stop::Denied, 1));
    assert_eq!(r.result.error_payload().unwrap().detail("reason"), Some(&json!("denied")));
    assert_eq!(r.result.error_payload().unwrap().retry(), Retry::No);
    assert!(
        r.result.error_payload().unwrap().not_processed(),
        "nothing it asked for was done, as every client helper says"
    );

    // No one to ask: two-phase, the model gets CONFIRMATION_REQUIRED.
    let fake = Fake::new(vec![err(confirmation_required("c-1"))], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.result.code()), (Stop::ReturnedToCaller, Some(ErrorCode::ConfirmationRequired)));

    // The same confirmation again after approval: not asked twice; the loop does not converge.
    let fake = Fake::new(vec![err(confirmation_required("c-1")), err(confirmation_required("c-1"))], false);
    let host = Host::new(vec![Approval::Approved, Approval::Approved], None);
    let r = run(&fake, &driver(&clock, host.clone()));
    assert_eq!((r.stop, r.attempts), (Stop::NotConverging, 2));
    assert_eq!(host.prompts.lock().unwrap().len(), 1);

    // A denial by the engine is never retried; an expiry restarts the cycle without the old id.
    let fake = Fake::new(vec![err(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Denied))], false);
    let r = run(&fake, &driver(&clock, Host::new(vec![Approval::Approved], None)));
    assert_eq!((r.stop, r.attempts), (Stop::ReturnedToCaller, 1));
    let fake = Fake::new(
        vec![
            err(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Expired)),
            err(confirmation_required("c-2")),
        ],
        false,
    );
    let req = request().with_confirmation("c-old");
    let r = futures_executor(driver(&clock, Host::new(vec![Approval::Approved], None)).run(
        &fake,
        req,
        &CancellationToken::new(),
    ));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 3));
    let confirmations: Vec<_> = fake.requests().iter().map(|r| r.confirmation_id.clone()).collect();
    assert_eq!(confirmations, [Some("c-old".into()), None, Some("c-2".into())]);
}

/// The one rule for interrupted calls (`spec/error-model.md`): `TIMEOUT`, `CANCELLED` and a
/// mid-flight unmount come only from a read or an idempotent call (or, for `CANCELLED`, before the
/// handler started), so each repeats as its category says under a fresh id, and the host is never
/// asked, whatever the capability declares. Here the host would say "applied" if asked.
#[test]
fn interrupted_reads_and_idempotent_calls_repeat_as_their_code_says() {
    let clock = TestClock::auto_advancing();
    let interrupted = [
        || AgentSurfaceError::timeout(Duration::from_secs(2), false),
        || AgentSurfaceError::timeout(Duration::from_secs(2), true),
        AgentSurfaceError::cancelled,
        || AgentSurfaceError::component_unmounted(UnmountPhase::MidFlight),
    ];
    for e in interrupted {
        for idempotent in [false, true] {
            let what = format!("{} {:?}, idempotent {idempotent}", e().payload().code(), e().payload().details());
            let fake = Fake::new(vec![Step { applied: true, ..err(e()) }], idempotent);
            let host = Host::new(vec![], Some(fake.ground.clone()));
            let r = run(&fake, &driver(&clock, host));
            assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2), "{what}");
            assert_eq!(ids(&fake), ["p:call-1", "p:call-1#r2"], "{what}");
        }
    }
}

/// `EXECUTION_FAILED {reason: outcome-unknown}` (retry `no`) is what the registry answers for an
/// interrupted write: the host's verification decides, and the driver never reconciles.
#[test]
fn an_unknown_outcome_is_verified_not_reconciled() {
    let clock = TestClock::auto_advancing();
    let unknown = || Step {
        result: InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None),
        applied: false,
    };

    // No verification: one call, and no reconcile call (the record would replay this result).
    let fake = Fake::new(vec![unknown()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::Unverified, 1));
    let p = r.result.error_payload().unwrap();
    assert_eq!(
        (p.code(), p.retry(), p.detail("reason")),
        (ErrorCode::ExecutionFailed, Retry::No, Some(&json!("outcome-unknown")))
    );
    assert_eq!(r.result.invocation_id(), Some("p:call-1"));

    // Verified as not applied: repeated once under a fresh id.
    let fake = Fake::new(vec![unknown()], false);
    let r = run(&fake, &driver(&clock, Host::new(vec![], Some(fake.ground.clone()))));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
    assert_eq!(ids(&fake), ["p:call-1", "p:call-1#r2"]);

    // Verified as applied: not repeated.
    let fake = Fake::new(vec![Step { applied: true, ..unknown() }], false);
    let r = run(&fake, &driver(&clock, Host::new(vec![], Some(fake.ground.clone()))));
    assert_eq!((r.stop, r.attempts), (Stop::VerifiedApplied, 1));
}

#[test]
fn conflicts_get_an_id_of_their_own_and_budgets_hold() {
    let clock = TestClock::auto_advancing();
    let conflict = || err(AgentSurfaceError::invocation_conflict());
    let fake = Fake::new(vec![conflict()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 2));
    let retried = ids(&fake)[1].clone();
    assert!(retried.starts_with("p:call-1#c") && retried.len() == "p:call-1#c".len() + 16, "{retried}");
    // The same request again gets the same id (a repeat of the loop replays); another request
    // that conflicts on the same id gets another one, so the two cannot collide.
    let fake = Fake::new(vec![conflict()], false);
    run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!(ids(&fake)[1], retried);
    let fake = Fake::new(vec![conflict()], false);
    let other = InvokeRequest::new("cart.add", json!({"sku": "coffee"})).with_invocation_id("p:call-1");
    futures_executor(driver(&clock, Arc::new(RelayToModel)).run(&fake, other, &CancellationToken::new()));
    assert_ne!(ids(&fake)[1], retried);
    // A conflict under the new id too: the loop does not converge.
    let fake = Fake::new(vec![conflict(), conflict()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::NotConverging, 2));

    // The same failure after the prescribed action ends the loop; different ones spend the budget.
    let timed_out = || err(AgentSurfaceError::timeout(Duration::from_secs(2), true));
    let fake = Fake::new(vec![timed_out(), timed_out(), timed_out()], true);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::NotConverging, 2));
    // A limit met again after its wait is waited for again (another caller may have drained the
    // quota first): the waits end at the attempt budget, or at the bound on the delays in all.
    let limited = || err(AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(10)));
    let fake = Fake::new(vec![limited(), limited(), limited()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::Succeeded, 4));
    let fake = Fake::new(vec![limited(), limited(), limited(), limited(), limited()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts, r.result.code()), (Stop::BudgetExhausted, 4, Some(ErrorCode::RateLimited)));
    let slow = || err(AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_secs(25)));
    let (fake, before) = (Fake::new(vec![slow(), slow(), slow()], false), clock.elapsed());
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::DelayTooLong, 3));
    assert_eq!(clock.elapsed() - before, Duration::from_secs(50));
    let not_found = || err(AgentSurfaceError::capability_not_found());
    let fake = Fake::new(vec![limited(), not_found(), limited(), not_found(), limited()], false);
    let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((r.stop, r.attempts), (Stop::BudgetExhausted, 4));
    assert_eq!(fake.requests().len(), 4);

    // `with-changes` and `no` go straight back.
    for e in [
        AgentSurfaceError::precondition_failed("No."),
        AgentSurfaceError::not_authorized(Origin::Client),
        AgentSurfaceError::not_authenticated(),
    ] {
        let fake = Fake::new(vec![err(e)], false);
        let r = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
        assert_eq!((r.stop, r.attempts), (Stop::ReturnedToCaller, 1));
    }
}

#[test]
fn every_attempt_is_an_operator_event() {
    let clock = TestClock::auto_advancing();
    let fake =
        Fake::new(vec![err(AgentSurfaceError::capability_not_found()), err(AgentSurfaceError::cancelled())], true);
    let (_, log) = agent_surface_testing::capture_operator_log(|| run(&fake, &driver(&clock, Arc::new(RelayToModel))));
    let events: Vec<&str> = log.lines().filter(|l| l.contains("recovery attempt")).collect();
    assert_eq!(events.len(), 3, "{log}");
    assert!(
        events[0].contains("code=\"CAPABILITY_NOT_FOUND\"") || events[0].contains("code=CAPABILITY_NOT_FOUND"),
        "{log}"
    );
    assert!(events[2].contains("stop:succeeded"), "{log}");
}

// ---- Property: termination and at most one execution per intent -----------------------------

/// Every result the matrix can produce for a capability (all examples of every code) and a
/// success. Only reachable ones: a `TIMEOUT` states the capability's own idempotency.
fn pool(idempotent: bool) -> Vec<InvokeResult> {
    let mut out: Vec<InvokeResult> = MATRIX
        .iter()
        .flat_map(|row| agent_surface_core::examples::of(row.code))
        .filter(|p| p.code() != ErrorCode::Timeout || p.detail("idempotent") == Some(&json!(idempotent)))
        .map(|p| InvokeResult::error(p, None))
        .collect();
    out.push(InvokeResult::ok(json!({"done": true}), None));
    out
}

fn step(result: InvokeResult, applied: bool) -> Step {
    let applied = match result.error_payload() {
        None => true,
        Some(p) => applied && may_have_executed(p),
    };
    Step { result, applied }
}

#[derive(Debug, Clone, Copy)]
enum Verifier {
    Never,
    Truthful,
}

#[track_caller]
fn check_intent(script: Vec<Step>, idempotent: bool, approvals: Vec<Approval>, verifier: Verifier, max_attempts: u32) {
    let fake = Fake::new(script.clone(), idempotent);
    let truth = matches!(verifier, Verifier::Truthful).then(|| fake.ground.clone());
    let host = Host::new(approvals, truth);
    let config = RecoveryConfig { max_attempts, ..RecoveryConfig::default() };
    let driver = RecoveryDriver::new(config, TestClock::auto_advancing().shared(), host);
    let r = futures_executor(driver.run(&fake, request(), &CancellationToken::new()));
    let ground = fake.ground.lock().unwrap();

    // Terminates within the budget, and reports what it sent.
    assert!(r.attempts >= 1 && r.attempts <= max_attempts, "{} attempts, budget {max_attempts}", r.attempts);
    assert_eq!(ground.requests.len() as u32, r.attempts);

    // Never runs a non-idempotent handler twice for one intent.
    if !idempotent {
        assert!(ground.applied <= 1, "applied {} times: {script:?}", ground.applied);
    }

    // Nothing is sent after a result whose category forbids it (a denial above all), unless a
    // verification proved that an unknown outcome had no effect.
    for (i, s) in script.iter().enumerate().take(ground.requests.len().saturating_sub(1)) {
        let Some(p) = s.result.error_payload() else { panic!("sent again after a success") };
        let denied = p.code() == ErrorCode::ConfirmationInvalid && p.retry() == Retry::No;
        assert!(!denied, "retried after a denial at step {i}");
        let uncertain = p.detail("reason") == Some(&json!("outcome-unknown"));
        let verified = uncertain && matches!(verifier, Verifier::Truthful);
        assert!(p.retry().permits_retry() || verified, "retried a `no` ({}) at step {i}", p.code());
        assert!(
            p.retry() != Retry::WithChanges || p.code() == ErrorCode::InvocationConflict,
            "retried {} at {i}",
            p.code()
        );
    }
    // A host denial ends the intent at once.
    if r.stop == Stop::Denied {
        assert_eq!(r.result.error_payload().unwrap().detail("reason"), Some(&json!("denied")));
    }
}

#[test]
fn every_code_repeated_terminates_within_the_budget() {
    for idempotent in [false, true] {
        for result in pool(idempotent) {
            for verifier in [Verifier::Never, Verifier::Truthful] {
                for applied in [false, true] {
                    let script = vec![step(result.clone(), applied); 8];
                    check_intent(script, idempotent, vec![Approval::Approved; 8], verifier, 4);
                }
            }
        }
    }
}

fn approval() -> impl Strategy<Value = Approval> {
    prop_oneof![Just(Approval::Approved), Just(Approval::Denied), Just(Approval::Unavailable)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_terminates_and_runs_at_most_once(
        picks in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..10),
        idempotent in any::<bool>(),
        approvals in prop::collection::vec(approval(), 0..4),
        truthful in any::<bool>(),
        max_attempts in 1u32..7,
    ) {
        let pool = pool(idempotent);
        let script: Vec<Step> = picks.into_iter().map(|(i, applied)| step(i.get(&pool).clone(), applied)).collect();
        let verifier = if truthful { Verifier::Truthful } else { Verifier::Never };
        check_intent(script, idempotent, approvals, verifier, max_attempts);
    }
}

// ---- Repair plans ---------------------------------------------------------------------------

/// A host that follows `call_tool` steps (listing the cart) and `refresh_state` steps.
struct Follower;

impl RecoveryHost for Follower {
    fn repair_step<'a>(&'a self, _: &'a InvokeRequest, step: &'a RepairStep) -> BoxFuture<'a, StepDecision> {
        let d = match step.action() {
            RepairAction::CallTool => StepDecision::Call(InvokeRequest::new("cart.list", json!({}))),
            RepairAction::RefreshState => StepDecision::Refresh,
            _ => StepDecision::HandToModel,
        };
        Box::pin(std::future::ready(d))
    }
}

fn stale_cart() -> Step {
    let plan = Repair::plan([
        RepairStep::new(RepairAction::RefreshState, "Refresh the tool list."),
        RepairStep::new(RepairAction::CallTool, "List the cart.").tool("cart-list"),
        RepairStep::new(RepairAction::RetrySameOperation, "Retry the same call."),
    ]);
    err(AgentSurfaceError::precondition_failed("The cart changed.").with_repair(plan).unwrap())
}

#[test]
fn plans_go_to_the_model_by_default() {
    let clock = TestClock::auto_advancing();
    let fake = Fake::new(vec![stale_cart()], false);
    let out = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!(out.stop, Stop::ReturnedToCaller);
    assert_eq!(out.attempts, 1);
    assert!(out.repaired.is_empty());
    assert!(out.result.error_payload().unwrap().repair().is_some(), "the plan reaches the model intact");
}

#[test]
fn a_host_that_allows_it_has_the_driver_follow_the_plan() {
    let clock = TestClock::auto_advancing();
    let fake = Fake::new(vec![stale_cart()], false);
    let out = run(&fake, &driver(&clock, Arc::new(Follower)));
    assert_eq!(out.stop, Stop::Succeeded, "{out:?}");
    let capabilities: Vec<String> = fake.requests().iter().map(|r| r.capability.clone()).collect();
    assert_eq!(capabilities, ["cart.add", "cart.list", "cart.add"]);
    assert_eq!(ids(&fake)[2], "p:call-1#r3");
    assert_eq!(out.attempts, 3);
    assert!(out.refreshed);
    assert_eq!(out.repaired.len(), 2);
    assert!(out.repaired[1].call.as_ref().unwrap().1.is_ok());
}

#[test]
fn a_failing_repair_call_stops_the_plan() {
    let clock = TestClock::auto_advancing();
    let fake = Fake::new(vec![stale_cart(), err(AgentSurfaceError::not_authenticated())], false);
    let out = run(&fake, &driver(&clock, Arc::new(Follower)));
    assert_eq!(out.stop, Stop::ReturnedToCaller);
    assert_eq!(out.result.error_payload().unwrap().code(), ErrorCode::PreconditionFailed);
    assert_eq!(out.attempts, 2);
}

/// Retry `no`: the operation is never repeated, but a host that allows it has the plan's
/// `call_tool` step run (here: request access), and the error goes back to the caller.
#[test]
fn a_no_retry_plan_step_is_followed_without_repeating_the_operation() {
    let clock = TestClock::auto_advancing();
    let fake = Fake::new(vec![denied_with_plan(), ok_step()], false);
    let out = run(&fake, &driver(&clock, Arc::new(Follower)));
    assert_eq!(out.stop, Stop::ReturnedToCaller, "{out:?}");
    assert_eq!(out.result.error_payload().unwrap().code(), ErrorCode::NotAuthorized);
    let capabilities: Vec<String> = fake.requests().iter().map(|r| r.capability.clone()).collect();
    assert_eq!(capabilities, ["cart.add", "cart.list"], "the operation is not repeated");
    assert_eq!(out.repaired.len(), 1);
    // By default the plan goes to the model and nothing else is sent.
    let fake = Fake::new(vec![denied_with_plan()], false);
    let out = run(&fake, &driver(&clock, Arc::new(RelayToModel)));
    assert_eq!((out.attempts, out.repaired.len()), (1, 0));
}

fn denied_with_plan() -> Step {
    let plan = Repair::single(RepairStep::new(RepairAction::CallTool, "Request access.").tool("access-request"));
    err(AgentSurfaceError::not_authorized(Origin::Server).with_repair(plan).unwrap())
}

/// A `with-changes` plan with nothing the host can follow goes to the model, even when the
/// intent already followed steps of an earlier error's plan.
#[test]
fn a_later_plan_is_judged_on_its_own_steps() {
    let clock = TestClock::auto_advancing();
    let bare = Repair::single(RepairStep::new(RepairAction::RetrySameOperation, "Retry the same call."));
    let again = err(AgentSurfaceError::precondition_failed("Still changing.").with_repair(bare).unwrap());
    let fake = Fake::new(vec![stale_cart(), ok_step(), again, ok_step()], false);
    let out = run(&fake, &driver(&clock, Arc::new(Follower)));
    let capabilities: Vec<String> = fake.requests().iter().map(|r| r.capability.clone()).collect();
    assert_eq!(capabilities, ["cart.add", "cart.list", "cart.add"], "{out:?}");
    assert_eq!(out.stop, Stop::ReturnedToCaller);
    assert_eq!(out.result.error_payload().unwrap().code(), ErrorCode::PreconditionFailed);
}

/// A host that is cancelled while it decides a repair step (its answer never comes).
struct CancelledWhileDeciding(CancellationToken);

impl RecoveryHost for CancelledWhileDeciding {
    fn repair_step<'a>(&'a self, _: &'a InvokeRequest, _: &'a RepairStep) -> BoxFuture<'a, StepDecision> {
        self.0.cancel();
        Box::pin(std::future::pending())
    }
}

/// Cancelled while following the plan of a `no` error: the loop stops and hands back that error,
/// not a synthesized `CANCELLED` whose "retry it, under a new invocationId" could run a committed
/// action again.
#[test]
fn a_cancellation_while_following_a_plan_keeps_the_real_result() {
    let clock = TestClock::auto_advancing();
    let cancel = CancellationToken::new();
    let fake = Fake::new(vec![denied_with_plan()], false);
    let d = driver(&clock, Arc::new(CancelledWhileDeciding(cancel.clone())));
    let out = futures_executor(d.run(&fake, request(), &cancel));
    assert_eq!(out.stop, Stop::Cancelled);
    assert_eq!(out.result.code(), Some(ErrorCode::NotAuthorized), "{out:?}");
    assert_eq!(out.attempts, 1);
}

/// A host that requests access for a repair plan's `call_tool` step.
struct RequestsAccess;

impl RecoveryHost for RequestsAccess {
    fn repair_step<'a>(&'a self, _: &'a InvokeRequest, step: &'a RepairStep) -> BoxFuture<'a, StepDecision> {
        let d = match step.action() {
            RepairAction::CallTool => StepDecision::Call(InvokeRequest::new("access.request", json!({}))),
            _ => StepDecision::HandToModel,
        };
        Box::pin(std::future::ready(d))
    }
}

/// Through the toolset: the steps the loop followed itself are in the outcome, with their calls'
/// results, for the host to tell the model; the answer keeps its plan as the server sent it; the
/// outcome's correlation id is the call's, not the repair call's.
#[tokio::test]
async fn a_followed_step_is_in_the_outcome_and_the_correlation_id_is_the_calls() {
    use agent_surface_policy::Consumer;
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    use agent_surface_toolset::{Provider, ToolCall, Toolset, ToolsetConfig};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let registry = Registry::new(RegistryConfig::default());
    let requested = Arc::new(AtomicUsize::new(0));
    let counter = requested.clone();
    registry
        .define("shop", |t| {
            t.capability("buy", "Buy.").effect(Effect::Write).raw_handler(
                json!({"type": "object"}),
                None,
                |_: Ctx, _| async {
                    let plan = Repair::single(
                        RepairStep::new(RepairAction::CallTool, "Request access.").tool("access-request"),
                    );
                    Err::<serde_json::Value, _>(
                        AgentSurfaceError::not_authorized(Origin::Server).with_repair(plan).unwrap(),
                    )
                },
            );
        })
        .unwrap();
    registry
        .define("access", move |t| {
            let counter = counter.clone();
            t.capability("request", "Request access.").effect(Effect::Write).raw_handler(
                json!({"type": "object"}),
                None,
                move |_: Ctx, _| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, AgentSurfaceError>(json!({"requested": true})) }
                },
            );
        })
        .unwrap();
    let _shop = registry.mount("shop", "main").unwrap();
    let _access = registry.mount("access", "main").unwrap();
    let config = ToolsetConfig { host: Arc::new(RequestsAccess), ..Default::default() };
    let toolset = Toolset::new(registry, Consumer::anonymous("c"), config);
    let call = ToolCall {
        provider: Provider::OpenAiChat,
        call_id: "call_1".into(),
        provider_id: true,
        tool_name: "shop-buy".into(),
        arguments: agent_surface_toolset::Arguments::Json(json!({})),
    };
    let outcome = toolset.call(&call).await;
    let payload = outcome.result.error_payload().expect("the refusal");
    assert_eq!(payload.code(), ErrorCode::NotAuthorized);
    assert_eq!(requested.load(Ordering::SeqCst), 1, "access was requested once, by the loop");
    assert_eq!(outcome.repaired.len(), 1);
    let (sent, answered) = outcome.repaired[0].call.as_ref().expect("the step's call");
    assert_eq!((sent.capability.as_str(), answered.output()), ("access.request", Some(&json!({"requested": true}))));
    assert!(payload.repair().is_some(), "the plan as the server sent it");
    assert_eq!(outcome.correlation_id.as_ref().map(ToString::to_string).as_deref(), payload.correlation_id());
}

/// A transient failure ran nothing, but an unknown outcome also marked transient (which no
/// conforming server sends) may have taken effect: the driver treats it as one that may have run.
#[test]
fn an_unknown_outcome_marked_transient_may_have_run() {
    let parse = |text: &str| -> agent_surface_core::ErrorPayload { serde_json::from_str(text).unwrap() };
    let transient = parse(
        r#"{"code":"EXECUTION_FAILED","message":"x","retry":"after-delay","details":{"reason":"transport","transient":true,"retryAfterMs":1000}}"#,
    );
    assert!(!may_have_executed(&transient));
    let unknown = parse(
        r#"{"code":"EXECUTION_FAILED","message":"x","retry":"after-delay","details":{"reason":"outcome-unknown","transient":true,"retryAfterMs":1000}}"#,
    );
    assert!(may_have_executed(&unknown));
}
