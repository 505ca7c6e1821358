//! Phase 8 — execution under the time budget and the caller's cancellation.
//!
//! Input: the decoded input and the context. Decision: the handler's output, or why there is none.
//! Codes: `CANCELLED` before the handler starts (caller cancelled, registry disposed while an
//! earlier phase awaited a store: `notProcessed`, whatever the capability), `COMPONENT_UNMOUNTED
//! {phase: resolve}` and `CAPABILITY_NOT_AVAILABLE {reason}` before the handler starts (the
//! registration went, or the capability was disabled, while the call waited: `notProcessed`),
//! `TIMEOUT {timeoutMs, idempotent}`, `CANCELLED` (caller cancelled, registry disposed),
//! `COMPONENT_UNMOUNTED {phase: mid-flight}` — these three only for a capability that is idempotent
//! or read-only; for any other, an interruption is `EXECUTION_FAILED {reason: outcome-unknown}` —,
//! `EXECUTION_FAILED {reason: outcome-unknown}` (the leader's lease on the call's record was lost
//! mid-flight), `EXECUTION_FAILED {reason: handler-error}` (handler error or panic), and the codes
//! a handler may return itself (`handlerMayReturn` in the matrix). A handler that returns any other
//! code gets `EXECUTION_FAILED {reason: handler-error}` instead.

use std::sync::Arc;

use agent_surface_core::details::{ExecutionFailedReason, UnmountPhase};
use agent_surface_core::{AgentSurfaceError, Effect, Phase, matrix};
use agent_surface_policy::guard::{catch, catch_started};
use futures_util::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Call, Stop, Stopped};
use crate::define::CapabilityDef;
use crate::handler::{Decoded, Failure};
use crate::live::Registration;
use crate::registry::Inner;
use crate::request::InvokeOptions;

fn handler_failed(note: impl Into<String>) -> Stop {
    Stop::noted(AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError), Phase::Execute, note)
}

/// How the handler's first poll left it.
pub(crate) enum Run<W> {
    /// It completed: its outcome.
    Done(Result<Value, Stop>),
    /// It is pending: the rest of the call under the time budget and the watchers, boxed so
    /// that its state (timer, watchers) does not enlarge the future of every call, most of
    /// which never get here.
    Waiting(std::pin::Pin<Box<W>>),
}

/// Starts the handler and polls it once. `lost` fires when the leader of the call's record lost
/// its lease: the handler is then stopped, as for the caller's cancellation.
pub(crate) fn run<'a>(
    call: &Call<'a>,
    decoded: Decoded,
    lost: Option<&CancellationToken>,
) -> Run<impl Future<Output = Result<Value, Stop>> + Send + use<'a>> {
    let Call { inner, options, ref def, tracked, .. } = *call;
    // The handler's future is built in the box that holds its decoded input. Building it runs
    // the handler's synchronous prelude, which may panic too: the guard covers both.
    let mut slot = decoded;
    let started = catch(|| slot.as_mut().start(call.ctx.clone(), &*def.handler.handler));
    let mut fut = catch_started(started.map(|()| slot));
    // Fast path: a handler that completes on its first poll needs no timer and no watchers.
    // (Polling with a no-op waker is sound: a pending future re-registers its waker when it is
    // polled again below.)
    if let Some(r) = (&mut fut).now_or_never() {
        // The handler's cancellation fires when the call ends, whichever way: here, at once.
        call.ctx.end();
        return Run::Done(settle(r, def, tracked));
    }
    // On the slow path, a guard fires it when the rest of the call ends or is dropped.
    let end = call.ctx.end_on_drop();
    let budget = call.time_budget();
    // The rest of the call holds the call, so this future holds what it reads itself.
    let (def, reg, lost) = (Arc::clone(def), Arc::clone(&call.reg), lost.cloned());
    Run::Waiting(Box::pin(async move {
        let _end = end;
        wait(inner, &def, &reg, options, budget, tracked, lost, fut).await
    }))
}

/// The slow path of [`run`]: the handler's outcome, or the first interruption.
#[expect(clippy::too_many_arguments, reason = "the parts of the call the boxed rest holds by itself")]
async fn wait(
    inner: &Arc<Inner>,
    def: &CapabilityDef,
    reg: &Registration,
    options: &InvokeOptions,
    budget: std::time::Duration,
    tracked: bool,
    lost: Option<CancellationToken>,
    fut: impl Future<Output = Result<Result<Value, Failure>, String>> + Unpin,
) -> Result<Value, Stop> {
    let caller = options.cancelled();
    let lost = async move {
        match lost {
            Some(lost) => lost.cancelled_owned().await,
            None => std::future::pending().await,
        }
    };
    let sleep = inner.config.clock.sleep(budget);
    // An interruption of a capability whose repetition could double an effect is reported as
    // an unknown outcome: the handler may have committed before it was stopped.
    let interrupted = |harmless: AgentSurfaceError, note: String| {
        let error = if outcome_is_harmless(def) { harmless } else { unknown_outcome(tracked) };
        Err(Stop::noted(error, Phase::Execute, note))
    };
    tokio::select! {
        biased;
        r = fut => settle(r, def, tracked),
        _ = inner.disposed.cancelled() => {
            interrupted(AgentSurfaceError::cancelled(), "registry disposed mid-flight".to_string())
        }
        _ = caller => interrupted(AgentSurfaceError::cancelled(), "caller cancelled".to_string()),
        _ = reg.unmounted.cancelled() => interrupted(
            AgentSurfaceError::component_unmounted(UnmountPhase::MidFlight),
            format!("registration {} unmounted mid-flight", reg.registration_id),
        ),
        _ = sleep => interrupted(AgentSurfaceError::timeout(budget, def.idempotent), format!("timed out after {budget:?}")),
        // Whatever the capability: the record is another caller's now, and says so.
        _ = lost => Err(Stop::noted(
            unknown_outcome(true),
            Phase::Execute,
            "the lease on this call's record was lost mid-flight; another caller holds the record".to_string(),
        )),
    }
}

/// `EXECUTION_FAILED {reason: outcome-unknown}`: with the read-the-state plan for a recorded call,
/// without it for a call that had no invocation id.
pub(crate) fn unknown_outcome(tracked: bool) -> AgentSurfaceError {
    if tracked { AgentSurfaceError::outcome_unknown() } else { AgentSurfaceError::outcome_unknown_untracked() }
}

/// Whether an interrupted call of `def` may be reported as `TIMEOUT` / `COMPONENT_UNMOUNTED` /
/// `CANCELLED`: repeating it cannot double an effect (idempotent) or it has none (`read`).
pub(crate) fn outcome_is_harmless(def: &CapabilityDef) -> bool {
    def.idempotent || def.effect == Effect::Read
}

/// Maps the handler's outcome (or its panic's text) to the pipeline's; a host error in a
/// handler error's cause chain becomes what it means (`crate::host_errors`).
fn settle(r: Result<Result<Value, Failure>, String>, def: &CapabilityDef, tracked: bool) -> Result<Value, Stop> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Failure::Error(e))) => {
            if matrix::spec(e.code()).handler_may_return {
                let e = crate::host_errors::map(e, outcome_is_harmless(def), || unknown_outcome(tracked));
                let chain = e.cause_chain();
                Err(Stop::from(Stopped {
                    error: e,
                    phase: Phase::Execute,
                    note: (!chain.is_empty()).then(|| chain.join(": ").into_boxed_str()),
                    questions: None,
                    fault: None,
                    marking: super::Marking::ByPhase,
                    recorded: None,
                }))
            } else {
                let code = e.code();
                let chain = e.cause_chain();
                Err(handler_failed(format!(
                    "handler returned {code}, which only the runtime may produce; cause: {}",
                    chain.join(": ")
                )))
            }
        }
        Ok(Err(Failure::Unserializable(e))) => Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputInvalid),
            Phase::Output,
            format!("output does not serialize: {e}"),
        )),
        Err(text) => Err(handler_failed(format!("handler panicked: {text}")).fault()),
    }
}
