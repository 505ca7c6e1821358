//! The scenario matrix: the recovery driver's specification. Every code × condition is set up
//! against a real registry on a manual test clock, and the driver must end with the expected
//! terminal outcome after the expected number of calls (the minimum wherever the spec decides
//! it). Across the table: every outcome right, every call count the minimum, no non-idempotent
//! handler applied twice, no call sent after a denial, and no unknown outcome reconciled (the
//! record would only replay it).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::{Origin, TARGET_ARGUMENT};
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, ErrorPayload, InvokeResult, Retry, SafeText};
use agent_surface_policy::{
    AuditConfig, AuthorityDecision, CallInfo, ConfirmationConfig, ConfirmationEngine, Consumer, FnPolicy, Identity,
    MemoryRateLimiter, Policies, QueueConfig, Quota, RateLimitConfig,
};
use agent_surface_registry::host_errors::UpstreamStatus;
use agent_surface_registry::{
    Answers, Binding, Ctx, InvokeOptions, InvokeRequest, Mount, Question, Registry, RegistryConfig, Snapshot, Target,
    Verification as PostCondition,
};
use agent_surface_testing::{FlakyAuditSink, TestClock};
use agent_surface_toolset::{
    Approval, ConfirmationPrompt, Invoker, Recovery, RecoveryConfig, RecoveryDriver, RecoveryHost, RegistryInvoker,
    RelayToModel, Stop, Verification,
};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use ErrorCode::*;

/// One condition under which a code arises; [`arrange`] sets it up.
#[derive(Clone, Copy, Debug)]
enum Condition {
    UnknownName,
    HiddenCapability,
    HiddenInstance,
    MountedAfterFirstCall,
    DisabledByRegistry,
    DisabledForConsumer,
    EnabledAfterFirstCall,
    SeveralInstancesNoTarget,
    NamedInstanceUnmounted,
    OnlyInstanceUnmounted,
    ReadUnmountedMidFlight,
    RegistrationReplaced,
    RemountedNamedByRegistration,
    SurfaceReloaded,
    SurfaceVersionOutdated,
    /// A read planned on a definition that changed since (an old tool version).
    ToolVersionChanged,
    IdReused,
    IdAndRetryIdReused,
    SchemaViolation,
    LockedField,
    Unauthenticated,
    DeniedByPolicy,
    RefusedByServer,
    AuthorCheck,
    BindingFails,
    ClientInputRequired,
    TwoPhaseRelay,
    ApprovedByHost,
    DeniedByHost,
    ApprovedLate,
    DeniedEvidence,
    ExpiredEvidence,
    ConsumedEvidence,
    MismatchedEvidence,
    LimitLifts,
    DelayBeyondBound,
    LimitPersists,
    IdempotentOnce,
    IdempotentAlways,
    RegistryDisposed,
    WriteCancelledBeforeStart,
    ReadCancelledMidFlight,
    HandlerError,
    TransientOnWrite,
    WriteTimedOutUnverified,
    WriteTimedOutVerifiedNotApplied,
    WriteCommittedThenTimedOut,
    WriteUnmountedMidFlight,
    WriteCancelledMidFlight,
    OutputInvalid,
    QueueDrains,
    AuditRecovers,
    /// A person approved; strict audit could not record the start of the retry with the id, then
    /// recovers: the approval was given back, and the driver's delayed retry runs on it.
    ApprovedThenAuditRecovers,
    OutputTooLarge,
    PostConditionFails,
    UpstreamRefusesCredentials,
    TargetArgumentDisagrees,
    NamedThroughTargetArgument,
    ApprovedThenRepeated,
    DeniedThenRepeated,
    /// The named instance is gone, named through the target argument rather than the target: a
    /// re-listing shows it gone, so the error goes back to the model (issue 28).
    NamedThroughArgumentUnmounted,
    /// The surface moves again between the driver's re-listing and its retry: the second
    /// `STALE_CAPABILITY` came under newer tokens, which is progress (issue 28).
    SurfaceMovesTwice,
    /// The bound state is there by the time of the retry: `binding-failed` is retried once after
    /// the re-listing, whether or not the listing changed (issue 28).
    BindingFailsOnce,
    /// The id was used by another request, and so was the id derived from it by an intent that
    /// differs from this one only in its target: the derivation covers the target (issue 28).
    IdReusedByAnotherTarget,
    /// A read that is not declared idempotent (`notes.scan`) runs out of time once: repeated at
    /// once under a fresh id, the host not asked (issue 28, the one rule for interrupted calls).
    ScanTimesOutOnce,
    /// The same read runs out of time every time: the second `TIMEOUT` ends the loop, and the host
    /// was never asked.
    ScanTimesOutAlways,
    /// The same read loses its instance while it runs, and the instance comes back: re-listed and
    /// repeated, the host not asked.
    ScanUnmountedMidFlight,
    /// The same read is cancelled while it runs: repeated, the host not asked.
    ScanCancelledMidFlight,
    /// A write (not idempotent) whose ask step panics once, before the handler: the runtime
    /// says `notProcessed`, so the driver repeats it once (issue 27) and it runs once.
    AskStepFailsOnce,
    /// The same ask step panics every time: one repeat, then the second failure ends the loop.
    AskStepFailsAlways,
}

use Condition::*;

/// A row: the first failure's code, the condition, and what the driver must end with.
struct Scenario {
    code: ErrorCode,
    condition: Condition,
    stop: Stop,
    /// The final result's code (`None`: success).
    last: Option<ErrorCode>,
    /// Requests sent: the minimum the spec allows for this outcome.
    calls: usize,
}

const fn row(code: ErrorCode, condition: Condition, stop: Stop, last: Option<ErrorCode>, calls: usize) -> Scenario {
    Scenario { code, condition, stop, last, calls }
}

const OK: Option<ErrorCode> = None;
use Stop::{
    BudgetExhausted, DelayTooLong, Denied, NotConverging, ReturnedToCaller as Returned, Succeeded, Unverified,
    VerifiedApplied,
};

/// The table. A refresh that finds nothing to call, a `with-changes` or a `no` costs one call; a
/// category whose action can help (refresh and retarget, wait, approve, a fresh id, a verified
/// repeat) costs one more; the same failure after that action ends the loop (`NotConverging`),
/// except after a wait, which is repeated until the attempt budget or the delays' bound.
#[rustfmt::skip]
const SCENARIOS: &[Scenario] = &[
    row(CapabilityNotFound, UnknownName, Returned, Some(CapabilityNotFound), 1),
    row(CapabilityNotFound, HiddenCapability, Returned, Some(CapabilityNotFound), 1),
    row(CapabilityNotFound, HiddenInstance, Returned, Some(CapabilityNotFound), 1),
    row(CapabilityNotFound, MountedAfterFirstCall, Succeeded, OK, 2),
    row(CapabilityNotAvailable, DisabledByRegistry, Returned, Some(CapabilityNotAvailable), 1),
    row(CapabilityNotAvailable, DisabledForConsumer, Returned, Some(CapabilityNotAvailable), 1),
    row(CapabilityNotAvailable, EnabledAfterFirstCall, Succeeded, OK, 2),
    row(AmbiguousInstance, SeveralInstancesNoTarget, Returned, Some(AmbiguousInstance), 1),
    row(ComponentUnmounted, NamedInstanceUnmounted, Returned, Some(ComponentUnmounted), 1),
    row(ComponentUnmounted, OnlyInstanceUnmounted, Returned, Some(ComponentUnmounted), 1),
    row(ComponentUnmounted, ReadUnmountedMidFlight, Returned, Some(ComponentUnmounted), 1),
    row(StaleCapability, RegistrationReplaced, Succeeded, OK, 2),
    row(StaleCapability, RemountedNamedByRegistration, Succeeded, OK, 2),
    row(StaleCapability, SurfaceReloaded, Succeeded, OK, 2),
    row(StaleCapability, SurfaceVersionOutdated, Succeeded, OK, 2),
    row(StaleCapability, ToolVersionChanged, Returned, Some(StaleCapability), 1),
    row(InvocationConflict, IdReused, Succeeded, OK, 2),
    row(InvocationConflict, IdAndRetryIdReused, Succeeded, OK, 2),
    row(InvalidInput, SchemaViolation, Returned, Some(InvalidInput), 1),
    row(InvalidInput, LockedField, Returned, Some(InvalidInput), 1),
    row(NotAuthenticated, Unauthenticated, Returned, Some(NotAuthenticated), 1),
    row(NotAuthorized, DeniedByPolicy, Returned, Some(NotAuthorized), 1),
    row(NotAuthorized, RefusedByServer, Returned, Some(NotAuthorized), 1),
    row(PreconditionFailed, AuthorCheck, Returned, Some(PreconditionFailed), 1),
    row(PreconditionFailed, BindingFails, NotConverging, Some(PreconditionFailed), 2),
    row(PreconditionFailed, ClientInputRequired, Returned, Some(PreconditionFailed), 1),
    row(ConfirmationRequired, TwoPhaseRelay, Returned, Some(ConfirmationRequired), 1),
    row(ConfirmationRequired, ApprovedByHost, Succeeded, OK, 2),
    row(ConfirmationRequired, DeniedByHost, Denied, Some(ConfirmationInvalid), 1),
    row(ConfirmationRequired, ApprovedLate, Succeeded, OK, 3),
    row(ConfirmationInvalid, DeniedEvidence, Returned, Some(ConfirmationInvalid), 1),
    row(ConfirmationInvalid, ExpiredEvidence, Succeeded, OK, 3),
    row(ConfirmationInvalid, ConsumedEvidence, Returned, Some(ConfirmationInvalid), 1),
    row(ConfirmationInvalid, MismatchedEvidence, Returned, Some(ConfirmationInvalid), 1),
    row(RateLimited, LimitLifts, Succeeded, OK, 2),
    row(RateLimited, DelayBeyondBound, DelayTooLong, Some(RateLimited), 1),
    row(RateLimited, LimitPersists, BudgetExhausted, Some(RateLimited), 4),
    row(Timeout, IdempotentOnce, Succeeded, OK, 2),
    row(Timeout, IdempotentAlways, NotConverging, Some(Timeout), 2),
    row(Cancelled, RegistryDisposed, NotConverging, Some(Cancelled), 2),
    row(Cancelled, WriteCancelledBeforeStart, Succeeded, OK, 2),
    row(Cancelled, ReadCancelledMidFlight, Succeeded, OK, 2),
    row(ExecutionFailed, HandlerError, Returned, Some(ExecutionFailed), 1),
    row(ExecutionFailed, TransientOnWrite, Succeeded, OK, 2),
    row(ExecutionFailed, WriteTimedOutUnverified, Unverified, Some(ExecutionFailed), 1),
    row(ExecutionFailed, WriteTimedOutVerifiedNotApplied, Succeeded, OK, 2),
    row(ExecutionFailed, WriteCommittedThenTimedOut, VerifiedApplied, Some(ExecutionFailed), 1),
    row(ExecutionFailed, WriteUnmountedMidFlight, Unverified, Some(ExecutionFailed), 1),
    row(ExecutionFailed, WriteCancelledMidFlight, Unverified, Some(ExecutionFailed), 1),
    row(ExecutionFailed, OutputInvalid, Returned, Some(ExecutionFailed), 1),
    row(RateLimited, QueueDrains, Succeeded, OK, 2),
    row(ExecutionFailed, AuditRecovers, Succeeded, OK, 2),
    row(ConfirmationRequired, ApprovedThenAuditRecovers, Succeeded, OK, 3),
    row(ExecutionFailed, OutputTooLarge, Returned, Some(ExecutionFailed), 1),
    row(ExecutionFailed, PostConditionFails, Returned, Some(ExecutionFailed), 1),
    row(ExecutionFailed, UpstreamRefusesCredentials, Returned, Some(ExecutionFailed), 1),
    row(InvalidInput, TargetArgumentDisagrees, Returned, Some(InvalidInput), 1),
    // Two intents: the driver hands the error to the model, whose next tool call repairs it.
    row(AmbiguousInstance, NamedThroughTargetArgument, Succeeded, OK, 2),
    row(ConfirmationRequired, ApprovedThenRepeated, Succeeded, OK, 2),
    row(ConfirmationRequired, DeniedThenRepeated, Returned, Some(ConfirmationInvalid), 2),
    // Issue 28: the defects a scenario matrix kept outside the project found.
    row(ComponentUnmounted, NamedThroughArgumentUnmounted, Returned, Some(ComponentUnmounted), 1),
    row(StaleCapability, SurfaceMovesTwice, Succeeded, OK, 3),
    row(PreconditionFailed, BindingFailsOnce, Succeeded, OK, 2),
    row(InvocationConflict, IdReusedByAnotherTarget, Succeeded, OK, 2),
    // Issue 28: one rule for interrupted calls. A read that is not declared idempotent, interrupted
    // after its handler started, repeats as its code's category says; the host is never asked
    // (the default host would answer "unknown" and end the loop `Unverified`).
    row(Timeout, ScanTimesOutOnce, Succeeded, OK, 2),
    row(Timeout, ScanTimesOutAlways, NotConverging, Some(Timeout), 2),
    row(ComponentUnmounted, ScanUnmountedMidFlight, Succeeded, OK, 2),
    row(Cancelled, ScanCancelledMidFlight, Succeeded, OK, 2),
    // Issue 27: "not processed", stated by the runtime. A not-processed EXECUTION_FAILED (`no`) of
    // a non-idempotent call is repeated once; a processed one never is (`HandlerError` above).
    row(ExecutionFailed, AskStepFailsOnce, Succeeded, OK, 2),
    row(ExecutionFailed, AskStepFailsAlways, NotConverging, Some(ExecutionFailed), 2),
];

// ---- The world: a registry with every condition's capability ------------------------------

const TTL: Duration = Duration::from_secs(300);

/// What the handlers share with the test: how often each ran and applied its effect, the mounts
/// (a handler may unmount its own instance), and the first attempt's cancellation token.
#[derive(Default)]
struct Shared {
    runs: Mutex<HashMap<&'static str, usize>>,
    applied: Mutex<HashMap<&'static str, usize>>,
    mounts: Mutex<HashMap<String, Mount>>,
    first_token: CancellationToken,
    /// Whether `notes.sign`'s bound state is there yet.
    bound: std::sync::atomic::AtomicBool,
    /// How many more times `notes.stamp`'s ask step panics.
    ask_panics: AtomicUsize,
}

impl Shared {
    fn run(&self, capability: &'static str) -> usize {
        let mut runs = self.runs.lock().unwrap();
        let n = runs.entry(capability).or_default();
        *n += 1;
        *n
    }

    fn apply(&self, capability: &'static str) {
        *self.applied.lock().unwrap().entry(capability).or_default() += 1;
    }

    fn applied(&self, capability: &str) -> usize {
        self.applied.lock().unwrap().get(capability).copied().unwrap_or(0)
    }
}

struct World {
    registry: Registry,
    clock: TestClock,
    engine: Arc<ConfirmationEngine>,
    shared: Arc<Shared>,
    consumer: Consumer,
    limiter: Arc<MemoryRateLimiter>,
    audit: Arc<FlakyAuditSink>,
}

/// A handler that behaves as its input's `mode` says (see the match).
fn behave(
    shared: &Arc<Shared>,
    capability: &'static str,
) -> impl Fn(Ctx, Value) -> BoxFuture<'static, Result<Value, AgentSurfaceError>> + Send + Sync + 'static {
    let shared = shared.clone();
    move |_ctx: Ctx, input: Value| {
        let shared = shared.clone();
        Box::pin(async move {
            let run = shared.run(capability);
            let mode = input["mode"].as_str().unwrap_or("ok").to_string();
            let hang = || std::future::pending::<Result<Value, AgentSurfaceError>>();
            match mode.as_str() {
                "hang" => hang().await,
                "hang-once" if run == 1 => hang().await,
                "commit-hang" => {
                    shared.apply(capability);
                    hang().await
                }
                "transient-once" if run == 1 => Err(AgentSurfaceError::transient(Duration::from_millis(500))),
                "fail" => Err(AgentSurfaceError::internal(std::io::Error::other("the disk is full"))),
                "unauthorized" => Err(AgentSurfaceError::not_authorized(Origin::Server)),
                "precondition" => Err(AgentSurfaceError::precondition_failed("The note is locked.")),
                "rate" => Err(AgentSurfaceError::rate_limited(
                    agent_surface_core::details::RateLimitReason::Rate,
                    Duration::from_secs(1),
                )),
                "cancel-me" if !shared.first_token.is_cancelled() => {
                    shared.first_token.cancel();
                    hang().await
                }
                "unmount-me" => {
                    drop(shared.mounts.lock().unwrap().remove("notes"));
                    hang().await
                }
                "unmount-once" if run == 1 => {
                    drop(shared.mounts.lock().unwrap().remove("notes"));
                    hang().await
                }
                "bad-output" => Ok(json!({"count": "many"})),
                "big-output" => Ok(json!({"text": "x".repeat(4096)})),
                // Claims success without doing it: the post-condition check finds out.
                "claims-undone" => Ok(json!({"done": false})),
                "upstream-401" => Err(AgentSurfaceError::internal(UpstreamStatus::new(401))),
                _ => {
                    shared.apply(capability);
                    Ok(json!({"done": true}))
                }
            }
        })
    }
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"mode": {"type": "string"}, "text": {"type": "string"}}})
}

/// The world of one condition: every condition shares it, but for the registry settings that only
/// its own condition exercises (an action queue of one slot, strict audit to a sink that fails,
/// a small output cap).
fn world(condition: Condition) -> World {
    let clock = TestClock::new();
    let policy = FnPolicy::new("scenarios", |call: &CallInfo<'_>| {
        Ok(match (call.capability, call.instance_id) {
            ("vault.purge", _) | ("desk.open", Some("secret")) => AuthorityDecision::Hide,
            ("shop.sale", _) => AuthorityDecision::Disable { reason: SafeText::from("The sale opens on Monday.") },
            ("refund.issue", _) => AuthorityDecision::Unauthenticated,
            ("admin.audit", _) => AuthorityDecision::Deny { origin: Origin::Client },
            _ => AuthorityDecision::Allow,
        })
    });
    let quota = |seconds| Some(Quota::new(NonZeroU32::MIN, Duration::from_secs(seconds)));
    // One slot, nobody may wait for it, and a call is assumed to hold it for 3 s.
    let queue = matches!(condition, QueueDrains).then(|| QueueConfig {
        max_concurrent: std::num::NonZeroUsize::MIN,
        max_waiting: 0,
        initial_hold_estimate: Duration::from_secs(3),
        ..Default::default()
    });
    let limiter = Arc::new(MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.shared(),
        capability_quotas: [("quote.ping".to_string(), quota(1)), ("quote.bulk".to_string(), quota(3600))].into(),
        queue,
        ..Default::default()
    }));
    let audit = Arc::new(FlakyAuditSink::default());
    let engine =
        Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.shared(), ttl: TTL, ..Default::default() }));
    let defaults = RegistryConfig::default();
    let registry = Registry::new(RegistryConfig {
        clock: clock.shared(),
        authority: Some(Arc::new(Policies::default_allow().global(policy))),
        rate_limiter: Some(limiter.clone()),
        confirmation: Some(engine.clone()),
        audit: match condition {
            AuditRecovers => Some(AuditConfig::new(audit.clone())),
            ApprovedThenAuditRecovers => Some(AuditConfig { strict: true, ..AuditConfig::new(audit.clone()) }),
            _ => None,
        },
        max_output_bytes: if matches!(condition, OutputTooLarge) { 1024 } else { defaults.max_output_bytes },
        ..defaults
    });
    let shared = Arc::new(Shared::default());
    let budget = Duration::from_secs(2);
    let s = &shared;
    registry
        .define("notes", |t| {
            t.capability("read", "Read notes.").effect(Effect::Read).idempotent().time_budget(budget).raw_handler(
                schema(),
                None,
                behave(s, "notes.read"),
            );
            t.capability("scan", "Scan notes (not idempotent).").effect(Effect::Read).time_budget(budget).raw_handler(
                schema(),
                None,
                behave(s, "notes.scan"),
            );
            t.capability("write", "Write a note.").effect(Effect::Write).time_budget(budget).raw_handler(
                schema(),
                None,
                behave(s, "notes.write"),
            );
            t.capability("erase", "Erase every note.").effect(Effect::Destructive).raw_handler(
                schema(),
                None,
                behave(s, "notes.erase"),
            );
            t.capability("delete", "Delete a note.")
                .effect(Effect::Destructive)
                .confirm(|_: &Value| "Delete a note.")
                .raw_handler(schema(), None, behave(s, "notes.delete"));
            let owned =
                json!({"type": "object", "properties": {"owner": {"type": "string"}, "text": {"type": "string"}}});
            t.capability("fill", "Fill a form for the owner.")
                .effect(Effect::Write)
                .bind("owner", Binding::from_consumer(|_| None))
                .raw_handler(owned.clone(), None, behave(s, "notes.fill"));
            let shared = s.clone();
            t.capability("sign", "Sign a note as the owner (once the owner is known).")
                .effect(Effect::Write)
                .bind(
                    "owner",
                    Binding::from_consumer(move |_| shared.bound.load(Ordering::SeqCst).then(|| json!("alice"))),
                )
                .raw_handler(owned.clone(), None, behave(s, "notes.sign"));
            t.capability("tag", "Tag a note as the owner.")
                .effect(Effect::Write)
                .bind("owner", Binding::from_consumer(|c| c.identity().map(|i| json!(i.subject))))
                .raw_handler(owned, None, behave(s, "notes.tag"));
            t.capability("greet", "Greet the user by name.")
                .effect(Effect::Write)
                .ask(|_: &Ctx, _: &Value, _: &Answers| {
                    let form = json!({"type": "object", "properties": {"name": {"type": "string"}}});
                    Ok(vec![Question::form("name", "What is your name?", form)])
                })
                .raw_handler(schema(), None, behave(s, "notes.greet"));
            let panics = s.clone();
            t.capability("stamp", "Stamp a note (its ask step may fail).")
                .effect(Effect::Write)
                .ask(move |_: &Ctx, _: &Value, _: &Answers| {
                    let left = panics.ask_panics.load(Ordering::SeqCst);
                    if left > 0 {
                        panics.ask_panics.store(left - 1, Ordering::SeqCst);
                        panic!("the ask step's lookup failed");
                    }
                    Ok(Vec::new())
                })
                .raw_handler(schema(), None, behave(s, "notes.stamp"));
            t.capability("log", "Append to the log (strict audit).").effect(Effect::Write).strict_audit().raw_handler(
                schema(),
                None,
                behave(s, "notes.log"),
            );
            t.capability("pay", "Pay a bill (checked afterwards).")
                .effect(Effect::Write)
                .verify(|_: Ctx, _: Value, out: Value| async move {
                    Ok::<_, AgentSurfaceError>(PostCondition::from(out["done"] == json!(true)))
                })
                .raw_handler(schema(), None, behave(s, "notes.pay"));
            let counted =
                json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
            t.capability("report", "Count the notes.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                Some(counted),
                behave(s, "notes.report"),
            );
        })
        .unwrap();
    let read = |type_id: &str, id: &str, description: &str| {
        let (type_id, capability) = (type_id.to_string(), id.to_string());
        let s = shared.clone();
        let name: &'static str = Box::leak(format!("{type_id}.{capability}").into_boxed_str());
        registry
            .define(&type_id, move |t| {
                t.capability(&capability, description).effect(Effect::Read).idempotent().raw_handler(
                    schema(),
                    None,
                    behave(&s, name),
                );
            })
            .unwrap();
    };
    read("fleet", "ping", "Ping a device.");
    read("desk", "open", "Open a desk.");
    read("vault", "purge", "Purge the vault.");
    read("refund", "issue", "Issue a refund.");
    read("admin", "audit", "Read the audit log.");
    read("late", "show", "Show what arrived late.");
    read("kiosk", "show", "Show the kiosk.");
    read("board", "show", "Show a board.");
    registry
        .define("shop", |t| {
            t.capability("sale", "Buy on sale.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                behave(s, "shop.sale"),
            );
            t.capability("browse", "Browse the shop.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                behave(s, "shop.browse"),
            );
        })
        .unwrap();
    registry
        .define("quote", |t| {
            t.capability("ping", "Ask for a quote.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                behave(s, "quote.ping"),
            );
            t.capability("bulk", "Ask for a bulk quote.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                behave(s, "quote.bulk"),
            );
        })
        .unwrap();
    let consumer = Consumer::authenticated("c-1", Identity::new("alice"));
    let world = World { registry, clock, engine, shared, consumer, limiter, audit };
    for (type_id, instance) in [
        ("notes", "main"),
        ("fleet", "a"),
        ("fleet", "b"),
        ("desk", "main"),
        ("desk", "secret"),
        ("vault", "main"),
        ("refund", "main"),
        ("admin", "main"),
        ("quote", "main"),
        ("kiosk", "main"),
        ("board", "main"),
        ("board", "side"),
        ("shop", "main"),
    ] {
        world.mount(type_id, instance);
    }
    world
}

impl World {
    fn key(type_id: &str, instance: &str) -> String {
        if instance == "main" { type_id.to_string() } else { format!("{type_id}/{instance}") }
    }

    /// Mounts an instance and returns its registration id.
    fn mount(&self, type_id: &str, instance: &str) -> String {
        let mount = self.registry.mount(type_id, instance).unwrap();
        let id = mount.registration_id().unwrap().to_string();
        self.shared.mounts.lock().unwrap().insert(World::key(type_id, instance), mount);
        id
    }

    fn unmount(&self, type_id: &str, instance: &str) {
        drop(self.shared.mounts.lock().unwrap().remove(&World::key(type_id, instance)));
    }

    fn options(&self) -> InvokeOptions {
        InvokeOptions::new(self.consumer.clone())
    }

    /// A call made before the scenario (its setup), straight to the registry.
    async fn before(&self, request: InvokeRequest) -> InvokeResult {
        self.registry.invoke(request, self.options()).await
    }

    /// Asks for a confirmation of `notes.delete` with `input` and returns its id.
    async fn pending_confirmation(&self, input: Value) -> String {
        let r = self.before(InvokeRequest::new("notes.delete", input)).await;
        let p = r.error_payload().expect("a confirmation is required");
        p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string()
    }

    async fn approve(&self, id: &str) {
        self.engine.approve(id, &Identity::new("manager")).await.unwrap();
    }
}

// ---- The host, the invoker and the runner ---------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum HostKind {
    /// The default: approvals and verification go to the model.
    Relay,
    /// A person approves in time (through the engine, as a second channel).
    Approve,
    /// A person denies.
    Deny,
    /// The first approval comes after the confirmation expired; later ones in time.
    ApproveLate,
    /// Verification tells the truth (from the handlers' record of applied effects).
    Truthful,
}

struct Host {
    kind: HostKind,
    engine: Arc<ConfirmationEngine>,
    clock: TestClock,
    shared: Arc<Shared>,
    prompts: AtomicUsize,
    /// The payloads the driver asked to verify.
    verified: Mutex<Vec<ErrorPayload>>,
}

impl RecoveryHost for Host {
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            let first = self.prompts.fetch_add(1, Ordering::SeqCst) == 0;
            match self.kind {
                HostKind::Approve | HostKind::ApproveLate => {
                    if self.kind == HostKind::ApproveLate && first {
                        // The person answers after the confirmation expired: the engine refuses
                        // the late approval, but the person did say yes.
                        self.clock.advance(TTL + Duration::from_secs(1));
                        let late = self.engine.approve(&prompt.confirmation_id, &Identity::new("manager")).await;
                        assert!(late.is_err(), "an expired confirmation cannot be approved");
                    } else {
                        self.engine.approve(&prompt.confirmation_id, &Identity::new("manager")).await.unwrap();
                    }
                    Approval::Approved
                }
                HostKind::Deny => {
                    self.engine.deny(&prompt.confirmation_id, &Identity::new("manager")).await.unwrap();
                    Approval::Denied
                }
                HostKind::Relay | HostKind::Truthful => Approval::Unavailable,
            }
        })
    }

    fn verify<'a>(&'a self, request: &'a InvokeRequest, payload: &'a ErrorPayload) -> BoxFuture<'a, Verification> {
        self.verified.lock().unwrap().push(payload.clone());
        let v = match self.kind {
            HostKind::Truthful if self.shared.applied(&request.capability) == 0 => Verification::NotApplied,
            HostKind::Truthful => Verification::Applied,
            _ => Verification::Unknown,
        };
        Box::pin(std::future::ready(v))
    }
}

/// How the first attempt is cancelled, if at all (later attempts never are).
#[derive(Clone, Copy, PartialEq, Eq)]
enum FirstAttempt {
    Plain,
    /// Its token is cancelled before it is sent (nothing can have run).
    CancelledBefore,
    /// Its token is the one a `cancel-me` handler cancels while it runs.
    CancelledByHandler,
}

/// A change to the surface between two calls.
type Change = Box<dyn FnOnce(&World) + Send>;

/// The model's next tool call after the driver handed it an error (`None`: it has none).
type Model = for<'a> fn(&'a World, &'a Recovery) -> BoxFuture<'a, Option<InvokeRequest>>;

/// One scenario's request and circumstances.
struct Case {
    request: InvokeRequest,
    host: HostKind,
    first: FirstAttempt,
    /// Runs after the first call's result (the surface changes meanwhile).
    after_first: Option<Change>,
    /// Runs after the second call's result.
    after_second: Option<Change>,
    /// Runs just before the second call is sent (after the driver re-listed, say).
    before_second: Option<Change>,
    /// What the model does with an error the driver returned to it: a second intent.
    model: Option<Model>,
}

impl Case {
    fn new(request: InvokeRequest) -> Case {
        Case {
            request,
            host: HostKind::Relay,
            first: FirstAttempt::Plain,
            after_first: None,
            after_second: None,
            before_second: None,
            model: None,
        }
    }

    fn model(self, model: Model) -> Case {
        Case { model: Some(model), ..self }
    }

    fn host(self, host: HostKind) -> Case {
        Case { host, ..self }
    }

    fn first(self, first: FirstAttempt) -> Case {
        Case { first, ..self }
    }

    fn after_first(self, f: impl FnOnce(&World) + Send + 'static) -> Case {
        Case { after_first: Some(Box::new(f)), ..self }
    }

    fn after_second(self, f: impl FnOnce(&World) + Send + 'static) -> Case {
        Case { after_second: Some(Box::new(f)), ..self }
    }

    fn before_second(self, f: impl FnOnce(&World) + Send + 'static) -> Case {
        Case { before_second: Some(Box::new(f)), ..self }
    }
}

fn call(capability: &str, input: Value) -> InvokeRequest {
    InvokeRequest::new(capability, input).with_invocation_id("sc:1")
}

fn write(mode: &str) -> InvokeRequest {
    call("notes.write", json!({"mode": mode, "text": "hello"}))
}

/// Sets a condition up and builds the scenario's request.
async fn arrange(world: &World, condition: Condition) -> Case {
    let r = &world.registry;
    match condition {
        UnknownName => Case::new(call("notes.nothing", json!({}))),
        HiddenCapability => Case::new(call("vault.purge", json!({}))),
        HiddenInstance => Case::new(call("desk.open", json!({})).with_target(Target::instance("secret"))),
        MountedAfterFirstCall => Case::new(call("late.show", json!({}))).after_first(|w| {
            w.mount("late", "main");
        }),
        DisabledByRegistry => {
            assert!(r.disable("shop.browse", "The shop is closed for stocktaking."));
            Case::new(call("shop.browse", json!({})))
        }
        DisabledForConsumer => Case::new(call("shop.sale", json!({}))),
        EnabledAfterFirstCall => {
            assert!(r.disable("shop.browse", "The shop opens in a moment."));
            Case::new(call("shop.browse", json!({}))).after_first(|w| assert!(w.registry.enable("shop.browse")))
        }
        SeveralInstancesNoTarget => Case::new(call("fleet.ping", json!({}))),
        NamedInstanceUnmounted => {
            world.unmount("board", "side");
            Case::new(call("board.show", json!({})).with_target(Target::instance("side")))
        }
        OnlyInstanceUnmounted => {
            world.unmount("kiosk", "main");
            Case::new(call("kiosk.show", json!({})))
        }
        ReadUnmountedMidFlight => Case::new(call("notes.read", json!({"mode": "unmount-me"}))),
        RegistrationReplaced | RemountedNamedByRegistration => {
            let old = world.shared.mounts.lock().unwrap()["kiosk"].registration_id().unwrap().to_string();
            world.unmount("kiosk", "main");
            world.mount("kiosk", "main");
            let target = match condition {
                RegistrationReplaced => Target { instance_id: Some("main".into()), registration_id: Some(old) },
                _ => Target::registration(old),
            };
            Case::new(call("kiosk.show", json!({})).with_target(target))
        }
        SurfaceReloaded => Case::new(call("notes.erase", json!({})).with_surface("s-0000000000000000", r.version())),
        SurfaceVersionOutdated => {
            let planned = r.version();
            assert!(r.disable("notes.erase", "Maintenance."));
            assert!(r.enable("notes.erase"));
            Case::new(call("notes.erase", json!({})).with_surface(r.surface_id(), planned))
        }
        ToolVersionChanged => Case::new(call("notes.read", json!({})).with_tool_version("00000000000000000000")),
        IdReused => {
            world.before(call("notes.read", json!({}))).await;
            Case::new(write("ok"))
        }
        IdAndRetryIdReused => {
            // The id and the id the driver used to derive for a retry (`#r2`) both hold other
            // requests.
            world.before(call("notes.read", json!({}))).await;
            world.before(call("notes.read", json!({"text": "other"})).with_invocation_id("sc:1#r2")).await;
            Case::new(write("ok"))
        }
        SchemaViolation => Case::new(call("notes.write", json!({"mode": 5}))),
        LockedField => Case::new(call("notes.tag", json!({"owner": "mallory", "text": "mine"}))),
        Unauthenticated => Case::new(call("refund.issue", json!({}))),
        DeniedByPolicy => Case::new(call("admin.audit", json!({}))),
        RefusedByServer => Case::new(write("unauthorized")),
        AuthorCheck => Case::new(write("precondition")),
        BindingFails => Case::new(call("notes.fill", json!({"text": "x"}))),
        ClientInputRequired => Case::new(call("notes.greet", json!({}))),
        TwoPhaseRelay => Case::new(call("notes.delete", json!({"text": "n-1"}))),
        ApprovedByHost => Case::new(call("notes.delete", json!({"text": "n-1"}))).host(HostKind::Approve),
        DeniedByHost => Case::new(call("notes.delete", json!({"text": "n-1"}))).host(HostKind::Deny),
        ApprovedLate => Case::new(call("notes.delete", json!({"text": "n-1"}))).host(HostKind::ApproveLate),
        DeniedEvidence => {
            let id = world.pending_confirmation(json!({"text": "n-1"})).await;
            world.engine.deny(&id, &Identity::new("manager")).await.unwrap();
            Case::new(call("notes.delete", json!({"text": "n-1"})).with_confirmation(id))
        }
        ExpiredEvidence => {
            let id = world.pending_confirmation(json!({"text": "n-1"})).await;
            world.approve(&id).await;
            world.clock.advance(TTL + Duration::from_secs(1));
            Case::new(call("notes.delete", json!({"text": "n-1"})).with_confirmation(id)).host(HostKind::Approve)
        }
        ConsumedEvidence => {
            let id = world.pending_confirmation(json!({"text": "n-1"})).await;
            world.approve(&id).await;
            let used = InvokeRequest::new("notes.delete", json!({"text": "n-1"})).with_confirmation(id.clone());
            assert!(world.before(used).await.is_ok());
            Case::new(call("notes.delete", json!({"text": "n-1"})).with_confirmation(id))
        }
        MismatchedEvidence => {
            let id = world.pending_confirmation(json!({"text": "n-1"})).await;
            world.approve(&id).await;
            Case::new(call("notes.delete", json!({"text": "n-2"})).with_confirmation(id))
        }
        LimitLifts => {
            assert!(world.before(InvokeRequest::new("quote.ping", json!({}))).await.is_ok());
            Case::new(call("quote.ping", json!({})))
        }
        DelayBeyondBound => {
            assert!(world.before(InvokeRequest::new("quote.bulk", json!({}))).await.is_ok());
            Case::new(call("quote.bulk", json!({})))
        }
        LimitPersists => Case::new(write("rate")),
        IdempotentOnce => Case::new(call("notes.read", json!({"mode": "hang-once"}))),
        IdempotentAlways => Case::new(call("notes.read", json!({"mode": "hang"}))),
        RegistryDisposed => {
            r.dispose();
            Case::new(write("ok"))
        }
        WriteCancelledBeforeStart => Case::new(write("ok")).first(FirstAttempt::CancelledBefore),
        ReadCancelledMidFlight => {
            Case::new(call("notes.read", json!({"mode": "cancel-me"}))).first(FirstAttempt::CancelledByHandler)
        }
        HandlerError => Case::new(write("fail")),
        AskStepFailsOnce => {
            world.shared.ask_panics.store(1, Ordering::SeqCst);
            Case::new(call("notes.stamp", json!({"mode": "ok"})))
        }
        AskStepFailsAlways => {
            world.shared.ask_panics.store(usize::MAX, Ordering::SeqCst);
            Case::new(call("notes.stamp", json!({"mode": "ok"})))
        }
        TransientOnWrite => Case::new(write("transient-once")),
        WriteTimedOutUnverified => Case::new(write("hang")),
        WriteTimedOutVerifiedNotApplied => Case::new(write("hang-once")).host(HostKind::Truthful),
        WriteCommittedThenTimedOut => Case::new(write("commit-hang")).host(HostKind::Truthful),
        WriteUnmountedMidFlight => Case::new(write("unmount-me")),
        WriteCancelledMidFlight => Case::new(write("cancel-me")).first(FirstAttempt::CancelledByHandler),
        OutputInvalid => Case::new(call("notes.report", json!({"mode": "bad-output"}))),
        QueueDrains => {
            // Another call holds the only slot until its time budget ends (2 s); the scenario's
            // call is told to come back after the estimated hold (3 s).
            let (registry, options) = (r.clone(), world.options());
            tokio::spawn(async move {
                registry.invoke(InvokeRequest::new("notes.read", json!({"mode": "hang"})), options).await
            });
            while world.limiter.in_flight() == 0 {
                tokio::task::yield_now().await;
            }
            Case::new(call("notes.read", json!({})))
        }
        AuditRecovers => {
            world.audit.set_failing(true);
            Case::new(call("notes.log", json!({"text": "hello"}))).after_first(|w| w.audit.set_failing(false))
        }
        ApprovedThenAuditRecovers => Case::new(call("notes.delete", json!({"text": "n-1"})))
            .host(HostKind::Approve)
            .after_first(|w| w.audit.set_failing(true))
            .after_second(|w| w.audit.set_failing(false)),
        OutputTooLarge => Case::new(call("notes.read", json!({"mode": "big-output"}))),
        PostConditionFails => Case::new(call("notes.pay", json!({"mode": "claims-undone"}))),
        UpstreamRefusesCredentials => Case::new(write("upstream-401")),
        TargetArgumentDisagrees => {
            Case::new(call("fleet.ping", json!({TARGET_ARGUMENT: "b"})).with_target(Target::instance("a")))
        }
        NamedThroughTargetArgument => Case::new(call("fleet.ping", json!({}))).model(|world, recovery| {
            Box::pin(async move {
                // The model picks one of details.instances and sends it through the argument
                // the tool's schema offers (an enum of the instance ids).
                let p = recovery.result.error_payload()?;
                let first = p.detail("instances")?.as_array()?.first()?;
                let id = first.get("instanceId").unwrap_or(first).as_str()?.to_string();
                let snapshot = world.registry.snapshot(&world.consumer).await;
                let schema = &snapshot.capability(&recovery.request.capability)?.input_schema;
                let offered = schema["properties"][TARGET_ARGUMENT]["enum"].as_array()?;
                offered.iter().any(|v| v == &json!(id)).then(|| {
                    let mut input = recovery.request.input.clone();
                    input[TARGET_ARGUMENT] = json!(id);
                    InvokeRequest::new(recovery.request.capability.clone(), input).with_invocation_id("sc:2")
                })
            })
        }),
        ApprovedThenRepeated | DeniedThenRepeated => {
            let case = Case::new(call("notes.delete", json!({"text": "n-1"})));
            let approve: Model = |world, recovery| {
                Box::pin(async move {
                    // The model relays the confirmation to the user, a person approves through a
                    // second channel, and the model repeats the same call: it cannot send the id.
                    let id = recovery.result.error_payload()?.detail("confirmationId")?.as_str()?.to_string();
                    world.approve(&id).await;
                    Some(recovery.request.clone().with_invocation_id("sc:2"))
                })
            };
            let deny: Model = |world, recovery| {
                Box::pin(async move {
                    let id = recovery.result.error_payload()?.detail("confirmationId")?.as_str()?.to_string();
                    world.engine.deny(&id, &Identity::new("manager")).await.ok()?;
                    Some(recovery.request.clone().with_invocation_id("sc:2"))
                })
            };
            case.model(if matches!(condition, ApprovedThenRepeated) { approve } else { deny })
        }
        NamedThroughArgumentUnmounted => {
            world.unmount("board", "side");
            Case::new(call("board.show", json!({TARGET_ARGUMENT: "side"})))
        }
        SurfaceMovesTwice => {
            let planned = r.version();
            let bump = |w: &World| {
                assert!(w.registry.disable("notes.erase", "Maintenance."));
                assert!(w.registry.enable("notes.erase"));
            };
            bump(world);
            Case::new(call("notes.erase", json!({})).with_surface(r.surface_id(), planned)).before_second(bump)
        }
        BindingFailsOnce => Case::new(call("notes.sign", json!({"text": "x"})))
            .after_first(|w| w.shared.bound.store(true, Ordering::SeqCst)),
        ScanTimesOutOnce => Case::new(call("notes.scan", json!({"mode": "hang-once"}))),
        ScanTimesOutAlways => Case::new(call("notes.scan", json!({"mode": "hang"}))),
        ScanUnmountedMidFlight => Case::new(call("notes.scan", json!({"mode": "unmount-once"}))).after_first(|w| {
            w.mount("notes", "main");
        }),
        ScanCancelledMidFlight => {
            Case::new(call("notes.scan", json!({"mode": "cancel-me"}))).first(FirstAttempt::CancelledByHandler)
        }
        IdReusedByAnotherTarget => {
            // Another request took the id; an intent for instance `a` conflicted on it too and
            // ran under the id it derived. This intent differs from that one only in its target.
            world.before(call("notes.read", json!({}))).await;
            let driver = RecoveryDriver::new(RecoveryConfig::default(), world.clock.shared(), Arc::new(RelayToModel));
            let invoker = RegistryInvoker::new(r.clone(), world.options());
            let other = call("fleet.ping", json!({})).with_target(Target::instance("a"));
            let ran = driver.run(&invoker, other, &CancellationToken::new()).await;
            assert_eq!((ran.stop, ran.attempts), (Succeeded, 2), "{:?}", ran.result);
            Case::new(call("fleet.ping", json!({})).with_target(Target::instance("b")))
        }
    }
}

/// The registry as the driver sees it, recording every request and result.
struct Probe<'w> {
    world: &'w World,
    first: FirstAttempt,
    after_first: Mutex<Option<Change>>,
    after_second: Mutex<Option<Change>>,
    before_second: Mutex<Option<Change>>,
    log: Mutex<Vec<(InvokeRequest, InvokeResult)>>,
}

impl Invoker for Probe<'_> {
    fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult> {
        Box::pin(async move {
            let sent_before = self.log.lock().unwrap().len();
            let first = sent_before == 0;
            if sent_before == 1
                && let Some(change) = self.before_second.lock().unwrap().take()
            {
                change(self.world);
            }
            let mut options = self.world.options();
            if first {
                match self.first {
                    FirstAttempt::Plain => {}
                    FirstAttempt::CancelledBefore => {
                        let token = CancellationToken::new();
                        token.cancel();
                        options = options.with_cancellation(token);
                    }
                    FirstAttempt::CancelledByHandler => {
                        options = options.with_cancellation(self.world.shared.first_token.clone());
                    }
                }
            }
            let result = self.world.registry.invoke(request.clone(), options).await;
            let sent = {
                let mut log = self.log.lock().unwrap();
                log.push((request, result.clone()));
                log.len()
            };
            if first && let Some(change) = self.after_first.lock().unwrap().take() {
                change(self.world);
            }
            if sent == 2
                && let Some(change) = self.after_second.lock().unwrap().take()
            {
                change(self.world);
            }
            result
        })
    }

    fn snapshot(&self) -> BoxFuture<'_, Snapshot> {
        Box::pin(self.world.registry.snapshot(&self.world.consumer))
    }
}

/// What one scenario did.
struct Observed {
    recovery: Recovery,
    log: Vec<(InvokeRequest, InvokeResult)>,
    /// Times a non-idempotent handler's effect was applied, per capability, during the scenario.
    applied: HashMap<&'static str, usize>,
    /// The payloads the host was asked to verify.
    verified: Vec<ErrorPayload>,
}

async fn observe(condition: Condition) -> Observed {
    let world = world(condition);
    let case = arrange(&world, condition).await;
    let baseline = world.shared.applied.lock().unwrap().clone();
    let host = Arc::new(Host {
        kind: case.host,
        engine: world.engine.clone(),
        clock: world.clock.clone(),
        shared: world.shared.clone(),
        prompts: AtomicUsize::new(0),
        verified: Mutex::default(),
    });
    let driver = RecoveryDriver::new(RecoveryConfig::default(), world.clock.shared(), host.clone());
    let probe = Probe {
        world: &world,
        first: case.first,
        after_first: Mutex::new(case.after_first),
        after_second: Mutex::new(case.after_second),
        before_second: Mutex::new(case.before_second),
        log: Mutex::default(),
    };
    let cancel = CancellationToken::new();
    let run = |request| {
        let (driver, probe, world, cancel) = (&driver, &probe, &world, &cancel);
        async move {
            let run = driver.run(probe, request, cancel);
            // Time passes only while something waits on the clock (a time budget, a retry delay).
            let keeper = async {
                loop {
                    tokio::task::yield_now().await;
                    if world.clock.pending_sleeps() > 0 {
                        world.clock.advance(Duration::from_millis(250));
                    }
                }
            };
            tokio::select! {
                biased;
                r = run => r,
                () = keeper => unreachable!(),
            }
        }
    };
    let mut recovery = run(case.request).await;
    if let Some(model) = case.model
        && recovery.stop == Stop::ReturnedToCaller
        && let Some(next) = model(&world, &recovery).await
    {
        let first = recovery.attempts;
        recovery = run(next).await;
        recovery.attempts += first;
    }
    let mut applied = world.shared.applied.lock().unwrap().clone();
    for (capability, before) in baseline {
        *applied.entry(capability).or_default() -= before;
    }
    let verified = host.verified.lock().unwrap().clone();
    Observed { recovery, log: probe.log.into_inner().unwrap(), applied, verified }
}

/// The `details.reason` (or `phase`) the first failure must carry, for conditions that share their
/// code with others: the row exercises the condition it names.
fn first_reason(condition: Condition) -> Option<&'static str> {
    Some(match condition {
        QueueDrains => "queue-full",
        AuditRecovers => "audit-unavailable",
        OutputTooLarge => "output-too-large",
        PostConditionFails => "verification-failed",
        UpstreamRefusesCredentials => "transport",
        TargetArgumentDisagrees => "target-mismatch",
        SurfaceMovesTwice => "surface-version-mismatch",
        ToolVersionChanged => "tool-version-mismatch",
        BindingFailsOnce => "binding-failed",
        NamedThroughArgumentUnmounted => "resolve",
        ScanUnmountedMidFlight => "mid-flight",
        _ => return None,
    })
}

/// `EXECUTION_FAILED {reason: outcome-unknown}`: the one result a client verifies before a repeat.
fn unknown_outcome(p: &ErrorPayload) -> bool {
    p.code() == ExecutionFailed && p.detail("reason") == Some(&json!("outcome-unknown"))
}

/// A refusal the user or a policy decided: never followed by another call.
fn denial(p: &ErrorPayload) -> bool {
    matches!(p.code(), NotAuthenticated | NotAuthorized)
        || (p.code() == ConfirmationInvalid && p.detail("reason") == Some(&json!("denied")))
}

#[tokio::test]
async fn the_scenario_matrix() {
    let mut right_outcome = 0;
    let mut minimum_calls = 0;
    let mut double_executions = 0;
    let mut retried_denials = 0;
    let mut failures = Vec::new();
    for s in SCENARIOS {
        let o = observe(s.condition).await;
        let r = &o.recovery;
        let name = format!("{} × {:?}", s.code, s.condition);
        let first = o.log.first().and_then(|(_, res)| res.code());
        if first != Some(s.code) {
            failures.push(format!("{name}: the first call ended {first:?}, not {}", s.code));
        }
        if let Some(reason) = first_reason(s.condition) {
            let p = o.log.first().and_then(|(_, res)| res.error_payload());
            let told = p.and_then(|p| p.detail("reason").or_else(|| p.detail("phase"))).and_then(Value::as_str);
            if told != Some(reason) {
                failures.push(format!("{name}: the first failure's reason was {told:?}, not {reason}"));
            }
        }
        // The runtime's statement decides these rows: not processed before the handler, never
        // after it.
        let stated = o.log.first().and_then(|(_, res)| res.error_payload()).map(ErrorPayload::not_processed);
        let expected = match s.condition {
            AskStepFailsOnce | AskStepFailsAlways => Some(true),
            HandlerError => Some(false),
            _ => stated,
        };
        if stated != expected {
            failures.push(format!("{name}: the first failure said notProcessed {stated:?}, not {expected:?}"));
        }
        if (r.stop, r.result.code()) == (s.stop, s.last) {
            right_outcome += 1;
        } else {
            failures.push(format!(
                "{name}: ended {:?} with {:?}, expected {:?} with {:?}",
                r.stop,
                r.result.code(),
                s.stop,
                s.last
            ));
        }
        if o.log.len() == s.calls && r.attempts as usize == s.calls {
            minimum_calls += 1;
        } else {
            failures.push(format!("{name}: {} calls, expected {}", o.log.len(), s.calls));
        }
        // Non-idempotent capabilities: at most one effect per intent.
        let doubled: Vec<_> =
            o.applied.iter().filter(|(c, n)| !c.starts_with("notes.read") && **n > 1).map(|(c, _)| *c).collect();
        if !doubled.is_empty() {
            double_executions += 1;
            failures.push(format!("{name}: applied twice: {doubled:?}"));
        }
        // Nothing is sent after a denial, and a host's denial ends the intent at once.
        let after_denial = o.log.iter().rev().skip(1).any(|(_, res)| res.error_payload().is_some_and(denial));
        if after_denial || (r.stop == Denied && o.log.len() != 1) {
            retried_denials += 1;
            failures.push(format!("{name}: retried a denial"));
        }
        // Nothing that says `no` is repeated, except an unknown outcome the host verified and a
        // failure the runtime stated was not processed (repeated once: the handler never ran).
        for (_, res) in o.log.iter().rev().skip(1) {
            if let Some(p) = res.error_payload()
                && p.retry() == Retry::No
                && !unknown_outcome(p)
                && !p.not_processed()
            {
                failures.push(format!("{name}: repeated after {} (retry no)", p.code()));
            }
        }
        // The one rule for interrupted calls: the host is asked to verify an unknown outcome and
        // nothing else (an interrupted read or idempotent call repeats as its code says).
        for p in o.verified.iter().filter(|p| !unknown_outcome(p)) {
            failures.push(format!("{name}: asked the host to verify {} {:?}", p.code(), p.details()));
        }
        // An unknown outcome is never reconciled by the driver (the same id would replay it): a
        // call after it is a verified repeat under a fresh id.
        for pair in o.log.windows(2) {
            let ((sent, res), (next, _)) = (&pair[0], &pair[1]);
            if res.error_payload().is_some_and(|p| p.detail("reason") == Some(&json!("outcome-unknown")))
                && next.invocation_id == sent.invocation_id
            {
                failures.push(format!("{name}: reconciled an unknown outcome"));
            }
        }
    }
    let n = SCENARIOS.len();
    let summary = format!(
        "{n} scenarios: right outcome {right_outcome}/{n}, minimum calls {minimum_calls}/{n}, \
         double executions {double_executions}, retried denials {retried_denials}"
    );
    #[allow(clippy::print_stdout, reason = "the matrix's figures, for `--nocapture` readers and reports")]
    {
        println!("{summary}");
    }
    assert_eq!(
        (right_outcome, minimum_calls, double_executions, retried_denials),
        (n, n, 0, 0),
        "{summary}\n{}",
        failures.join("\n")
    );
    assert!(failures.is_empty(), "{summary}\n{}", failures.join("\n"));
    assert!(n >= 42, "the matrix covers at least the 42 measured cases");
}

/// Every code appears in the table.
#[test]
fn every_code_has_a_scenario() {
    for code in ErrorCode::ALL {
        assert!(SCENARIOS.iter().any(|s| s.code == code), "no scenario for {code}");
    }
}
