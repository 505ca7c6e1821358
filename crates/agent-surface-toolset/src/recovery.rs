//! The recovery loop: a reference driver that acts on `retry` mechanically.
//!
//! [`RecoveryDriver::run`] sends one intent (an [`InvokeRequest`]) and, while the result is an
//! error whose retry category allows it, does what the category says and sends it again. It
//! dispatches on the client decision table ([`agent_surface_core::decision`], generated into
//! `docs/recovery.md`), the rows the MCP and Python client helpers act on too; in short:
//!
//! | `retry` | what the driver does |
//! |---|---|
//! | `after-refresh`, the tool's definition changed (`STALE_CAPABILITY {reason: tool-version-mismatch}`) | returns, marked [refreshed](Recovery::refreshed), without repeating the call: the model reads the new definition first (the same arguments may mean something else now) |
//! | `after-refresh` | re-snapshots, re-resolves the request against the new snapshot (capability still there and enabled, under the tool version the request names; a replaced registration retargeted to `liveRegistrationId` or the instance's live registration; surface tokens *updated*, never removed), retries under a fresh invocation id; returns, marked refreshed, when re-resolution finds nothing to call or the tool's version changed (its arguments were built for the old definition) |
//! | `after-delay` | waits `details.retryAfterMs` on the injected [`Clock`] (at most [`RecoveryConfig::max_delay`] at once and [`RecoveryConfig::max_total_delay`] in all; cancellable), retries (a fresh id for cacheable codes) |
//! | `with-confirmation` | hands the confirmation to [`RecoveryHost::confirm`]; approved: retries with the `confirmationId` (an approval that came after `expiresAt` starts a fresh cycle at once instead of presenting dead evidence); denied: never retries, answers `CONFIRMATION_INVALID {reason: denied}`; no host: returns (two-phase relay to the model). An `expired` confirmation restarts the cycle without the stale id |
//! | `with-changes` | returns to the caller (the model changes the input); except `INVOCATION_CONFLICT`, whose change is the id: retried under an id derived from the conflicting one and the request itself (see below), as the matrix's adapter duty says |
//! | `yes` | retries under a fresh invocation id (`CANCELLED`, `TIMEOUT`) |
//! | `no` | returns; a denial is never retried |
//!
//! **Convergence guard.** The same failure (code, `reason` or `phase`, capability, target and the
//! surface tokens sent) twice in a row, the second after the action its category prescribes, ends
//! the loop with
//! [`Stop::NotConverging`] and that error: doing the same thing a third time cannot help (a binding
//! that cannot be satisfied, a disposed registry). Every attempt also
//! counts against [`RecoveryConfig::max_attempts`]. A `STALE_CAPABILITY` met again under the newer
//! tokens of the re-listing is not the same failure: the surface moved again meanwhile, and the
//! next re-listing may be the last. An `after-delay` failure met again after its wait is waited
//! for again (a quota another caller drained first, a dependency still recovering): the waits end
//! at [`RecoveryConfig::max_delay`] or [`RecoveryConfig::max_total_delay`]
//! ([`Stop::DelayTooLong`]) or at the attempt budget ([`Stop::BudgetExhausted`]).
//!
//! **The target argument.** A target named through the reserved argument
//! ([`TARGET_ARGUMENT`](agent_surface_registry::TARGET_ARGUMENT)) is the call's target, as the
//! registry reads it ([`InvokeRequest::lift_target_argument`]): the driver lifts it before the
//! first attempt, so a re-listing that no longer shows the named instance hands the error to the
//! model ([`Stop::ReturnedToCaller`]) instead of repeating a call on an instance that is gone.
//!
//! **Interrupted calls.** One rule (`spec/error-model.md`, *Interrupted calls*): whether a call
//! interrupted after its handler started may be repeated depends only on whether a repeat could
//! double an effect, and the code already says so. `TIMEOUT`, `CANCELLED` and `COMPONENT_UNMOUNTED
//! {phase: mid-flight}` come only from a capability that is idempotent or whose effect is `read`
//! (or, for `CANCELLED`, from a call whose handler had not started): they are repeated as their
//! category says, without asking the host, whatever the capability declares. Only `EXECUTION_FAILED
//! {reason: outcome-unknown}` (retry `no`; a capability with an effect, interrupted) is repeated
//! only if [`RecoveryHost::verify`] reports that the effect did not happen; the default host
//! answers "unknown", and the loop ends [`Stop::Unverified`]. The driver never *reconciles* (calls
//! again under the same id and input, as the payload's repair plan says): it received the
//! recorded outcome itself, and the record would only replay it.
//!
//! **Invocation ids.** Retries use ids derived from the first (`{id}#r{attempt}`), so each attempt
//! is its own idempotency record and a repeat of the whole loop replays instead of re-running. After
//! `INVOCATION_CONFLICT` the id becomes `{id}#c{hash}`, where the hash (SHA-256, 64 bits in hex) is
//! over the request as admission fingerprints it (capability, target, canonical input,
//! confirmation): another request that conflicted on the same id gets another id, so it cannot
//! collide again, while a repeat of the same loop gets the same id and replays.
//!
//! # Repair plans
//!
//! An error may carry a repair plan (`payload.repair()`). By default the driver hands it to the
//! model untouched. A host that opts in through [`RecoveryHost::repair_step`] lets the driver
//! follow the plan's `call_tool` and `refresh_state` steps itself, in order and one at a time,
//! when the payload's retry category permits a retry: a `refresh_state` step re-lists the surface;
//! a `call_tool` step sends the request the host built for it (an attempt like any other, counted
//! against the budget) and stops following the plan when it fails. A `retry_same_operation` step
//! whose plan names no field to `update` retries under a fresh id; any other step (`change_input`,
//! `ask_user`, `reconcile`, `stop`), or a step the host declines, ends the following, and the
//! category decides as usual. The steps followed and the calls made are in [`Recovery`] (and in
//! the toolset's `ToolOutcome::repaired`): the answer keeps its plan as the server sent it, so
//! the host that followed steps tells the model which it took, lest the model take them again.
//!
//! Every attempt is a `tracing` event on target `agent_surface::recovery` (the operator channel).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::decision::{Action, IdRule, decide_payload};
pub use agent_surface_core::decision::{Approval, Stop, Verification};
use agent_surface_core::details::{ConfirmationRequiredDetails, StaleDetails};
use agent_surface_core::json::canonical_json;
use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, ErrorPayload, InvokeResult, Retry, Timestamp};
use agent_surface_policy::Clock;
use agent_surface_registry::{InvokeOptions, InvokeRequest, Registry, Snapshot, Target};
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Sends requests and lists the surface: the registry, or a scripted fake in tests.
pub trait Invoker: Send + Sync {
    /// Runs one request.
    fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult>;

    /// The caller's current snapshot of the surface.
    fn snapshot(&self) -> BoxFuture<'_, Snapshot>;
}

/// An [`Invoker`] over a [`Registry`], calling as one consumer.
#[derive(Clone, Debug)]
pub struct RegistryInvoker {
    registry: Registry,
    options: InvokeOptions,
}

impl RegistryInvoker {
    /// Calls `registry` with `options` (consumer, cancellation, time budget).
    pub fn new(registry: Registry, options: InvokeOptions) -> RegistryInvoker {
        RegistryInvoker { registry, options }
    }
}

impl Invoker for RegistryInvoker {
    fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult> {
        Box::pin(self.registry.invoke(request, self.options.clone()))
    }

    fn snapshot(&self) -> BoxFuture<'_, Snapshot> {
        Box::pin(self.registry.snapshot(&self.options.consumer))
    }
}

/// A confirmation the host is asked to approve.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ConfirmationPrompt {
    /// The capability to run.
    pub capability: String,
    /// The input it would run with.
    pub input: Value,
    /// The id to retry with once approved.
    pub confirmation_id: String,
    /// What will happen, in the author's words.
    pub summary: String,
    /// When the pending confirmation expires (RFC 3339).
    pub expires_at: String,
    /// The capability's declared effect.
    pub effect: Effect,
    /// The page where a person approves it (`details.approvalUrl`), when the service serves one.
    pub approval_url: Option<String>,
}

/// What the host decides for one `call_tool` or `refresh_state` step of a repair plan.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
#[expect(
    clippy::large_enum_variant,
    reason = "one decision per repair step, moved once; boxing the request would change a public variant for no measurable gain"
)]
pub enum StepDecision {
    /// Leave the step (and the rest of the plan) to the model. The default.
    HandToModel,
    /// Re-list the surface (a `refresh_state` step).
    Refresh,
    /// Send this request (a `call_tool` step; the host builds the tool's input).
    Call(InvokeRequest),
}

/// One repair step the driver followed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FollowedStep {
    /// The step of the plan.
    pub step: RepairStep,
    /// The request sent and its result, for a `call_tool` step.
    pub call: Option<(InvokeRequest, InvokeResult)>,
}

/// The host side of the loop: approvals, verification and repair steps.
///
/// Both methods have defaults that hand the decision back to the model: no in-process approval
/// (two-phase confirmation), and no repeat of a call whose outcome is unknown.
pub trait RecoveryHost: Send + Sync + 'static {
    /// Asks the user to approve a confirmation. Default: [`Approval::Unavailable`].
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        let _ = prompt;
        Box::pin(std::future::ready(Approval::Unavailable))
    }

    /// Checks whether a call that may have taken effect (`payload` says how it ended: `EXECUTION_FAILED
    /// {reason: outcome-unknown}`) did. Default: [`Verification::Unknown`].
    fn verify<'a>(&'a self, request: &'a InvokeRequest, payload: &'a ErrorPayload) -> BoxFuture<'a, Verification> {
        let _ = (request, payload);
        Box::pin(std::future::ready(Verification::Unknown))
    }

    /// Decides whether the driver follows a `call_tool` or `refresh_state` step of the repair
    /// plan of the error that ended `request`. Default: [`StepDecision::HandToModel`].
    fn repair_step<'a>(&'a self, request: &'a InvokeRequest, step: &'a RepairStep) -> BoxFuture<'a, StepDecision> {
        let _ = (request, step);
        Box::pin(std::future::ready(StepDecision::HandToModel))
    }
}

/// The default host: approvals go to the model, uncertain outcomes are never repeated.
#[derive(Clone, Copy, Debug, Default)]
pub struct RelayToModel;

impl RecoveryHost for RelayToModel {}

/// Bounds of the loop. Build it with struct update syntax over `Default`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// The most requests one intent may send, the first included (default 4).
    pub max_attempts: u32,
    /// The longest single wait honored; a longer `retryAfterMs` returns to the caller
    /// (default 30 s).
    pub max_delay: Duration,
    /// The most waiting in all, for one intent (default 60 s).
    pub max_total_delay: Duration,
    /// The wait when an `after-delay` error carries no `retryAfterMs` (default 1 s).
    pub default_delay: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> RecoveryConfig {
        let bounds = agent_surface_core::decision::BOUNDS;
        RecoveryConfig {
            max_attempts: bounds.max_attempts,
            max_delay: bounds.max_delay,
            max_total_delay: bounds.max_total_delay,
            default_delay: bounds.default_delay,
        }
    }
}

/// What [`RecoveryDriver::run`] ended with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery {
    /// The result to hand to the caller.
    pub result: InvokeResult,
    /// How many requests were sent.
    pub attempts: u32,
    /// Why the driver stopped.
    pub stop: Stop,
    /// Whether the surface was re-listed along the way (the caller's tool list may be stale).
    pub refreshed: bool,
    /// The last request sent (or the first, if none was).
    pub request: InvokeRequest,
    /// The repair-plan steps the driver followed itself, in order (empty by default: plans go
    /// to the model).
    pub repaired: Vec<FollowedStep>,
}

/// The reference recovery loop. See the [module documentation](self).
#[derive(Clone)]
pub struct RecoveryDriver {
    config: RecoveryConfig,
    clock: Arc<dyn Clock>,
    host: Arc<dyn RecoveryHost>,
}

impl fmt::Debug for RecoveryDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoveryDriver")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Whether a result with this payload may have run the handler with an effect that a repeat
/// could double: a non-transient `EXECUTION_FAILED` (an `outcome-unknown` above all).
///
/// `TIMEOUT`, `CANCELLED` and `COMPONENT_UNMOUNTED {phase: mid-flight}` are not such results: the
/// pipeline produces them only for a capability that is idempotent or whose effect is `read` (or,
/// for `CANCELLED`, before the handler starts), and a capability with an effect interrupted after
/// its handler started gets `EXECUTION_FAILED {reason: outcome-unknown}` instead
/// (`spec/error-model.md`, *Interrupted calls*). Nor is a transient `EXECUTION_FAILED`: it comes
/// from a store that failed before the call ran, or from a handler that reports a downstream
/// failure worth retrying after the delay — unless it is an unknown outcome as well (which no
/// conforming server sends), which may have taken effect.
pub fn may_have_executed(payload: &ErrorPayload) -> bool {
    payload.code() == ErrorCode::ExecutionFailed
        && (payload.detail("transient").and_then(Value::as_bool) != Some(true)
            || payload.detail("reason").and_then(Value::as_str) == Some("outcome-unknown"))
}

/// One failure as the convergence guard compares them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    code: ErrorCode,
    /// `details.reason`, or `details.phase` for `COMPONENT_UNMOUNTED`.
    reason: Option<String>,
    capability: String,
    target: Option<Target>,
    /// The surface tokens the request carried: the same failure under newer tokens (the surface
    /// moved again after the re-listing) is progress, not a repeat.
    surface: (Option<String>, Option<u64>),
}

impl Failure {
    fn of(request: &InvokeRequest, payload: &ErrorPayload) -> Failure {
        let reason = payload.detail("reason").or_else(|| payload.detail("phase")).and_then(Value::as_str);
        Failure {
            code: payload.code(),
            reason: reason.map(str::to_string),
            capability: request.capability.clone(),
            target: request.target.clone(),
            surface: (request.surface_id.clone(), request.surface_version),
        }
    }
}

enum Followed {
    /// Go on with the retry category.
    Continue,
    /// The plan says to retry the same operation now.
    Retry,
    /// Stop following and return.
    Stop(Stop),
}

enum Next {
    Stop(Stop),
    Retry { fresh_id: bool },
}

/// The loop's state for one intent.
struct Intent {
    base_id: Option<String>,
    /// The request the next attempt sends.
    request: InvokeRequest,
    /// The last request sent, once one was: what the outcome reports.
    sent: Option<InvokeRequest>,
    attempts: u32,
    waited: Duration,
    refreshed: bool,
    snapshot: Option<Snapshot>,
    prompted: Vec<String>,
    /// The failure the last attempt of the operation ended with (the convergence guard).
    last_failure: Option<Failure>,
    /// Whether a `retry-once` row (a not-processed failure) was already followed.
    retried_once: bool,
    repaired: Vec<FollowedStep>,
}

impl RecoveryDriver {
    /// A driver with these bounds, waiting on `clock` and asking `host`.
    pub fn new(config: RecoveryConfig, clock: Arc<dyn Clock>, host: Arc<dyn RecoveryHost>) -> RecoveryDriver {
        RecoveryDriver { config, clock, host }
    }

    /// The bounds.
    pub fn config(&self) -> &RecoveryConfig {
        &self.config
    }

    /// Runs `request` to a result the caller has to act on. Never panics; terminates after at
    /// most [`RecoveryConfig::max_attempts`] requests (at least one is always sent).
    ///
    /// `cancel` is checked before each attempt and ends any wait or host callback at once; a
    /// request already in flight is the invoker's to cancel (the [`crate::Toolset`] passes the
    /// same token to the registry).
    pub async fn run(&self, invoker: &dyn Invoker, mut request: InvokeRequest, cancel: &CancellationToken) -> Recovery {
        // A target named through the reserved argument is the call's target, as the registry
        // reads it: the convergence guard, the re-listing and the conflict id see it.
        request.lift_target_argument();
        let mut intent = Intent {
            base_id: request.invocation_id.clone(),
            request,
            sent: None,
            attempts: 0,
            waited: Duration::ZERO,
            refreshed: false,
            snapshot: None,
            prompted: Vec::new(),
            last_failure: None,
            retried_once: false,
            repaired: Vec::new(),
        };
        loop {
            if cancel.is_cancelled() {
                let result = cancelled(intent.sent.as_ref().unwrap_or(&intent.request));
                return self.finish(intent, result, Stop::Cancelled);
            }
            intent.attempts += 1;
            intent.sent = Some(intent.request.clone());
            let result = invoker.invoke(intent.request.clone()).await;
            let Some(payload) = result.error_payload().cloned() else {
                self.event(&intent, &result, "stop:succeeded");
                return self.finish(intent, result, Stop::Succeeded);
            };
            let next = self.next(invoker, &mut intent, &payload, cancel).await;
            match next {
                Next::Stop(Stop::Denied) => {
                    self.event(&intent, &result, "stop:denied");
                    // The table's answer (`notProcessed`: nothing it asked for was done), as
                    // every client helper gives it.
                    let denied = InvokeResult::error(
                        agent_surface_core::decision::denied_answer(),
                        intent.request.invocation_id.clone(),
                    );
                    return self.finish(intent, denied, Stop::Denied);
                }
                Next::Stop(Stop::Cancelled) => {
                    self.event(&intent, &result, "stop:cancelled");
                    // Cancelled while deciding what to do next. A result that may have run the
                    // handler, or says not to retry, is the truth and is kept: a synthesized
                    // CANCELLED ("retry it, under a new invocationId") would invite a second run.
                    let result = if may_have_executed(&payload) || payload.retry() == Retry::No {
                        result
                    } else {
                        cancelled(intent.sent.as_ref().unwrap_or(&intent.request))
                    };
                    return self.finish(intent, result, Stop::Cancelled);
                }
                Next::Stop(stop) => {
                    self.event(&intent, &result, &format!("stop:{stop}"));
                    return self.finish(intent, result, stop);
                }
                Next::Retry { fresh_id } => {
                    self.event(&intent, &result, if fresh_id { "retry:fresh-id" } else { "retry:same-id" });
                    if fresh_id && let Some(base) = &intent.base_id {
                        intent.request.invocation_id = Some(format!("{base}#r{}", intent.attempts + 1));
                    }
                }
            }
        }
    }

    fn finish(&self, intent: Intent, result: InvokeResult, stop: Stop) -> Recovery {
        Recovery {
            result,
            attempts: intent.attempts,
            stop,
            refreshed: intent.refreshed,
            request: intent.sent.unwrap_or(intent.request),
            repaired: intent.repaired,
        }
    }

    fn event(&self, intent: &Intent, result: &InvokeResult, next: &str) {
        let payload = result.error_payload();
        tracing::info!(
            target: "agent_surface::recovery",
            attempt = intent.attempts,
            capability = %intent.request.capability,
            invocation_id = intent.request.invocation_id.as_deref().unwrap_or(""),
            code = payload.map_or("OK", |p| p.code().as_str()),
            retry = payload.map_or("", |p| p.retry().as_str()),
            next,
            "recovery attempt"
        );
    }

    async fn next(
        &self,
        invoker: &dyn Invoker,
        intent: &mut Intent,
        payload: &ErrorPayload,
        cancel: &CancellationToken,
    ) -> Next {
        // The row of the client decision table (the same rows the MCP and Python helpers act on).
        let decision = decide_payload(payload);
        let action = decision.action;
        if action == Action::Stop {
            // The operation itself is never repeated; the plan's leading `call_tool` /
            // `refresh_state` steps (say, requesting access) are followed if the host agrees.
            if self.may_follow(payload)
                && let Some(repair) = payload.repair()
                && let Followed::Stop(stop) = self.follow(invoker, intent, repair, cancel).await
            {
                return Next::Stop(stop);
            }
            return Next::Stop(Stop::ReturnedToCaller);
        }
        if action == Action::RefreshThenAsk {
            // The tool's definition changed: the caller re-lists (`refreshed`; a toolset marks
            // its list stale) so that the model is shown the new one, and the model decides
            // whether, and how, to call again.
            intent.refreshed = true;
            return Next::Stop(Stop::ReturnedToCaller);
        }
        if action == Action::ChangeInput && !self.may_follow(payload) {
            return Next::Stop(Stop::ReturnedToCaller);
        }
        // The convergence guard: the last attempt already followed this failure's row and met
        // the same failure again. A wait is not held to it: a limit or a dependency met again
        // after its delay may lift after the next, and the loop's bounds end the waiting.
        let failure = Failure::of(&intent.request, payload);
        if action != Action::Wait && intent.last_failure.as_ref() == Some(&failure) {
            return Next::Stop(Stop::NotConverging);
        }
        intent.last_failure = Some(failure);
        if intent.attempts >= self.config.max_attempts {
            return Next::Stop(Stop::BudgetExhausted);
        }
        // An unknown outcome says `no` because nobody verified the state (`verify`): with the
        // host's verification it becomes an ordinary repeat. No other row asks the host: an
        // interruption of a read or idempotent call repeats as its category says.
        if action == Action::Verify {
            let verification = tokio::select! {
                v = self.host.verify(&intent.request, payload) => v,
                () = cancel.cancelled() => return Next::Stop(Stop::Cancelled),
            };
            match verification {
                Verification::NotApplied => {}
                Verification::Applied => return Next::Stop(Stop::VerifiedApplied),
                Verification::Unknown => return Next::Stop(Stop::Unverified),
            }
        }
        if let Some(repair) = payload.repair() {
            let may_retry = matches!(
                action,
                Action::Retry | Action::RetryOnce | Action::Verify | Action::NewId | Action::ChangeInput
            );
            match self.follow(invoker, intent, repair, cancel).await {
                Followed::Retry if may_retry => return Next::Retry { fresh_id: true },
                Followed::Stop(stop) => return Next::Stop(stop),
                Followed::Retry | Followed::Continue => {}
            }
        }
        let fresh_id = decision.invocation_id == IdRule::Fresh;
        match action {
            Action::Stop | Action::ChangeInput => Next::Stop(Stop::ReturnedToCaller),
            Action::NewId => {
                // INVOCATION_CONFLICT: the id belongs to another request. An id derived from this
                // request cannot collide with that one again, and later retries derive from it.
                if let Some(id) = &intent.request.invocation_id {
                    let id = conflict_id(id, &intent.request);
                    intent.base_id = Some(id.clone());
                    intent.request.invocation_id = Some(id);
                }
                Next::Retry { fresh_id: false }
            }
            Action::Retry | Action::Verify => Next::Retry { fresh_id },
            // Nothing ran: one repeat, and only one, whatever the next failure says.
            Action::RetryOnce if intent.retried_once => Next::Stop(Stop::NotConverging),
            Action::RetryOnce => {
                intent.retried_once = true;
                Next::Retry { fresh_id }
            }
            Action::Wait => {
                let millis = decision.wait_field.and_then(|f| payload.detail(f)).and_then(Value::as_u64);
                let delay = millis.map_or(self.config.default_delay, Duration::from_millis);
                if delay > self.config.max_delay || intent.waited + delay > self.config.max_total_delay {
                    return Next::Stop(Stop::DelayTooLong);
                }
                tokio::select! {
                    () = self.clock.sleep(delay) => {}
                    () = cancel.cancelled() => return Next::Stop(Stop::Cancelled),
                }
                intent.waited += delay;
                Next::Retry { fresh_id }
            }
            Action::Refresh => {
                let snapshot = invoker.snapshot().await;
                intent.refreshed = true;
                let next = re_resolve(&intent.request, payload, &snapshot);
                intent.snapshot = Some(snapshot);
                match next {
                    Some(request) => {
                        intent.request = request;
                        Next::Retry { fresh_id }
                    }
                    None => Next::Stop(Stop::ReturnedToCaller),
                }
            }
            Action::Reconfirm => {
                // CONFIRMATION_INVALID {reason: expired}: a fresh cycle, without the stale evidence.
                intent.request.confirmation_id = None;
                Next::Retry { fresh_id }
            }
            Action::Confirm => self.confirmation(intent, payload, fresh_id, cancel).await,
            // A row this version does not know: the model decides.
            _ => Next::Stop(Stop::ReturnedToCaller),
        }
    }

    /// Whether the payload carries a plan whose first step the host might follow.
    fn may_follow(&self, payload: &ErrorPayload) -> bool {
        payload
            .repair()
            .and_then(|r| r.steps().first())
            .is_some_and(|s| matches!(s.action(), RepairAction::CallTool | RepairAction::RefreshState))
    }

    /// Follows the plan's leading `call_tool` / `refresh_state` steps the host agrees to.
    async fn follow(
        &self,
        invoker: &dyn Invoker,
        intent: &mut Intent,
        repair: &Repair,
        cancel: &CancellationToken,
    ) -> Followed {
        // Steps followed for earlier errors of this intent do not count for this plan.
        let before = intent.repaired.len();
        for step in repair.steps() {
            match step.action() {
                RepairAction::CallTool | RepairAction::RefreshState => {}
                RepairAction::RetrySameOperation if repair.updated().is_empty() && intent.repaired.len() > before => {
                    return Followed::Retry;
                }
                _ => return Followed::Continue,
            }
            let decision = tokio::select! {
                d = self.host.repair_step(&intent.request, step) => d,
                () = cancel.cancelled() => return Followed::Stop(Stop::Cancelled),
            };
            match (step.action(), decision) {
                (RepairAction::RefreshState, StepDecision::Refresh) => {
                    intent.snapshot = Some(invoker.snapshot().await);
                    intent.refreshed = true;
                    intent.repaired.push(FollowedStep { step: step.clone(), call: None });
                }
                (RepairAction::CallTool, StepDecision::Call(request)) => {
                    if intent.attempts >= self.config.max_attempts {
                        return Followed::Stop(Stop::BudgetExhausted);
                    }
                    intent.attempts += 1;
                    let result = invoker.invoke(request.clone()).await;
                    let failed = result.error_payload().is_some();
                    intent.repaired.push(FollowedStep { step: step.clone(), call: Some((request, result)) });
                    if failed {
                        return Followed::Stop(Stop::ReturnedToCaller);
                    }
                }
                _ => return Followed::Continue,
            }
        }
        Followed::Continue
    }

    async fn confirmation(
        &self,
        intent: &mut Intent,
        payload: &ErrorPayload,
        fresh_id: bool,
        cancel: &CancellationToken,
    ) -> Next {
        let Some(details) = payload.details_as::<ConfirmationRequiredDetails>() else {
            return Next::Stop(Stop::ReturnedToCaller);
        };
        if intent.prompted.contains(&details.confirmation_id) {
            // Approved once already and asked again: let the caller see it.
            return Next::Stop(Stop::ReturnedToCaller);
        }
        intent.prompted.push(details.confirmation_id.clone());
        let prompt = ConfirmationPrompt {
            capability: intent.request.capability.clone(),
            input: intent.request.input.clone(),
            confirmation_id: details.confirmation_id.clone(),
            summary: details.summary,
            expires_at: details.expires_at,
            effect: details.effect,
            approval_url: details.approval_url,
        };
        let approval = tokio::select! {
            a = self.host.confirm(&prompt) => a,
            () = cancel.cancelled() => return Next::Stop(Stop::Cancelled),
        };
        match approval {
            Approval::Approved => {
                let late = Timestamp::parse_rfc3339(&prompt.expires_at).is_some_and(|at| self.clock.now() >= at);
                if late {
                    // The evidence expired while the host was deciding: presenting it could only
                    // be refused (`expired`). Start a fresh cycle now; its new confirmation is the
                    // expected answer, not a repeated failure.
                    intent.request.confirmation_id = None;
                    intent.last_failure = None;
                } else {
                    intent.request.confirmation_id = Some(details.confirmation_id);
                }
                Next::Retry { fresh_id }
            }
            Approval::Denied => Next::Stop(Stop::Denied),
            Approval::Unavailable => Next::Stop(Stop::ReturnedToCaller),
        }
    }
}

/// The id to retry under after `INVOCATION_CONFLICT` on `id`: `{id}#c{hash}`, the hash over the
/// parts of the request that admission fingerprints. Another request gets another id; the same
/// request (a repeat of the loop) the same one, so it replays.
fn conflict_id(id: &str, request: &InvokeRequest) -> String {
    let target = request.target.as_ref();
    let input = canonical_json(&request.input);
    let parts: [&[u8]; 5] = [
        request.capability.as_bytes(),
        target.and_then(|t| t.instance_id.as_deref()).unwrap_or("").as_bytes(),
        target.and_then(|t| t.registration_id.as_deref()).unwrap_or("").as_bytes(),
        input.as_bytes(),
        request.confirmation_id.as_deref().unwrap_or("").as_bytes(),
    ];
    let digest = agent_surface_core::digest::sha256_parts(parts);
    format!("{id}#c{}", agent_surface_core::hex::Hex(&digest[..8]))
}

fn cancelled(request: &InvokeRequest) -> InvokeResult {
    InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), request.invocation_id.clone())
}

/// The request re-resolved against a fresh snapshot, or `None` when it must not be sent again:
/// the capability is gone or disabled, the named instance is gone (named in the target or
/// through the reserved [`TARGET_ARGUMENT`](agent_surface_registry::TARGET_ARGUMENT), which the
/// re-resolved request carries in its target, as the registry would), or the request names a
/// tool version the snapshot no longer lists (its input was built for another definition and
/// may mean something else now: the model reads the new one first).
///
/// Surface tokens the request carried are replaced by the snapshot's, never removed; its tool
/// version is kept (it is the listed one); a registration id that is no longer live is replaced
/// by the error's `liveRegistrationId` or the named instance's live registration.
pub fn re_resolve(request: &InvokeRequest, payload: &ErrorPayload, snapshot: &Snapshot) -> Option<InvokeRequest> {
    let capability = snapshot.capability(&request.capability)?;
    if !capability.enabled {
        return None;
    }
    let mut next = request.clone();
    // An instance named through the reserved argument is named as much as in the target.
    next.lift_target_argument();
    if next.surface_id.is_some() {
        next.surface_id = Some(snapshot.surface_id.clone());
    }
    if next.surface_version.is_some() {
        next.surface_version = Some(snapshot.version);
    }
    if next.tool_version.is_some() && next.tool_version != capability.tool_version {
        return None;
    }
    if let Some(target) = next.target.take() {
        let live = |rid: &str| capability.instances.iter().any(|i| i.registration_id == rid);
        let replacement =
            payload.details_as::<StaleDetails>().and_then(|d| d.live_registration_id).filter(|rid| live(rid));
        let mut t = target.clone();
        match (&target.instance_id, &target.registration_id) {
            (_, Some(rid)) if live(rid) => {}
            (_, Some(_)) if replacement.is_some() => t.registration_id = replacement,
            (Some(iid), rid) => {
                let instance = capability.instances.iter().find(|i| &i.instance_id == iid)?;
                if rid.is_some() {
                    t.registration_id = Some(instance.registration_id.clone());
                }
            }
            (None, Some(_)) => return None,
            (None, None) => {}
        }
        next.target = Some(t);
    }
    Some(next)
}
