//! The invocation pipeline: the phases of `invoke`, in order. The first failure ends the call.
//!
//! Each phase is one module with the same shape: a function of what the call's phases share and
//! of what the earlier phases established, returning what the later ones need, or a [`Stop`]
//! carrying the agent-safe error and the phase that produced it. Phases 1–4 share one
//! [`Arrival`], built when the call arrives; phases 5–10 share one [`Call`], built once when
//! authority has admitted the call ([`call`]); a stop is a [`Stop`] ([`stop`]). The leader's
//! [`hold::Hold`] and the metrics' clock readings are part of that context, so each
//! function of the chain takes the call and what the phases before it established. A hook is
//! checked once, here, and handed to its phase already unwrapped. Read [`invoke`] and [`run`], then
//! [`phases`] and the functions each hands on to ([`admitted`], then `(call, prepared)`:
//! [`after_key`], [`confirmed`], [`marked`], [`audited`], [`execute`], [`verified`]) top to bottom
//! to follow one call: phases 2–9 run at once as far as they can, and a hook that waits, or a
//! handler that does not complete on its first poll, takes the rest of the call into a box
//! ([`Step`]).

pub(crate) mod audit;
pub(crate) mod authority;
pub(crate) mod availability;
mod call;
pub(crate) mod confirmation;
pub(crate) mod execute;
mod hold;
pub(crate) mod idempotency;
pub(crate) mod input;
pub(crate) mod natural;
pub(crate) mod output;
pub(crate) mod questions;
pub(crate) mod rate;
pub(crate) mod record;
pub(crate) mod resolve;
mod stop;
pub(crate) mod verify;

use agent_surface_core::{AgentSurfaceError, Phase};
use futures_util::future::{BoxFuture, Either};
use serde_json::Value;
use tracing::Instrument;

pub(crate) use self::call::{Answered, Arrival, Call, time_budget};
pub(crate) use self::stop::{Fault, Marking, Stop, Stopped};
use crate::correlation::CorrelationId;
use crate::ctx::{Ctx, CtxParts};
use crate::handler::{ErasedPrecondition, PreconditionCheck};
use crate::registry::{Inner, Registry};
use crate::request::{Invocation, InvokeOptions, InvokeRequest};
use crate::telemetry;

/// The end of phases 2–9: the output, or where and why the call stopped.
pub(crate) type Outcome = Result<Value, Stop>;

/// One call, as one future the caller holds: the request and options are moved into it once and
/// never again, and it is not boxed (a caller that awaits it, as the adapters do once per request,
/// holds its state in its own future; `spec/invocation.md` §11 gives the sizes). The span is
/// entered around each poll of the call ([`run`]); `answer` makes the caller's output from the
/// [`Invocation`] (its result alone, or all of it), so that [`Registry::invoke`] adds no layer of
/// its own. The state of phases 2–9 stays on the stack unless one of them waits.
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` moves its arguments into its state a second time on the first poll (~60 instructions per call)"
)]
pub(crate) fn invoke<T: Send + 'static>(
    registry: &Registry,
    mut request: InvokeRequest,
    options: InvokeOptions,
    answer: fn(Invocation) -> T,
) -> impl Future<Output = T> + Send + '_ {
    async move {
        // Always made here, never the caller's invocation id: the id is written into error
        // payloads, where the model reads it, and nothing an agent sent may be echoed there.
        let correlation_id = CorrelationId::generate();
        let span = tracing::info_span!(
            target: "agent_surface::invoke",
            "invoke",
            correlation_id = %correlation_id,
            capability = %Shown(&request.capability),
            consumer = %options.consumer.key(),
            // Recorded below when the caller sent one: absent, not empty, otherwise.
            invocation_id = tracing::field::Empty,
            code = tracing::field::Empty,
            phase = tracing::field::Empty,
            retry = tracing::field::Empty,
            fingerprint = tracing::field::Empty,
            replayed = tracing::field::Empty,
            // The caller's trace context ([`crate::trace`]).
            trace_id = tracing::field::Empty,
            parent_id = tracing::field::Empty,
            // Recorded only with the `otel` feature: the OpenTelemetry semantic conventions.
            "otel.name" = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "gen_ai.operation.name" = tracing::field::Empty,
            "gen_ai.tool.name" = tracing::field::Empty,
            "gen_ai.tool.call.id" = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        if let Some(id) = &request.invocation_id {
            span.record("invocation_id", id.as_str());
        }
        // With `otel`, the span's name carries the capability (an OpenTelemetry span's name is fixed
        // when it starts), only when the registry defines it: agents' names stay out of span names.
        let tool = (cfg!(feature = "otel")
            && registry.inner.read().capabilities.contains_key(request.capability.as_str()))
        .then_some(request.capability.as_str());
        crate::trace::start(&span, options.trace_parent.as_ref(), &correlation_id, tool);
        let mut invocation = run(registry, &mut request, &options, &correlation_id).instrument(span).await;
        invocation.correlation_id = correlation_id;
        invocation.stamp();
        answer(invocation)
    }
}

/// Phases 1–10 of one call, metered when metrics are on, and its trace's end.
async fn run(
    registry: &Registry,
    request: &mut InvokeRequest,
    options: &InvokeOptions,
    correlation: &CorrelationId,
) -> Invocation {
    let inner = &registry.inner;
    // Metered only while a recorder is installed; the clock readings (32 bytes) in the call's state.
    let meter = if inner.config.metrics { telemetry::Meter::start(&inner.metrics, options.transport) } else { None };
    let mut timing = meter.as_ref().map(|_| telemetry::Timing::start());
    // A target named through the reserved argument is the call's target from here on, so that
    // both ways of naming it fingerprint alike.
    let target_argument_left = request.lift_target();
    // The input is taken out of the request: admission borrows it, phase 5 owns it, and the
    // caller's future holds no second copy.
    let input = std::mem::take(&mut request.input);
    let request = &*request;
    let answered = std::sync::OnceLock::new();
    // Phases 1–10, in one block rather than a future of their own (one layer fewer to build
    // and move): each way out breaks with the call's invocation.
    let invocation = 'call: {
        let mut arrival = Arrival {
            inner,
            request,
            options,
            correlation,
            now: std::sync::OnceLock::new(),
            tracked: request.invocation_id.is_some(),
            target_argument_left,
            answered: &answered,
            hold: None,
            timing: &mut timing,
            disables: 0,
        };
        // Phase 1: admission and idempotency.
        let leader = match idempotency::admit(&arrival, &input).await {
            Ok(idempotency::Admitted::Untracked) => None,
            Ok(idempotency::Admitted::Leader(guard)) => Some(guard),
            Ok(idempotency::Admitted::Answered(invocation)) => {
                let span = tracing::Span::current();
                span.record("replayed", true);
                if let Some(code) = invocation.result.code() {
                    span.record("code", code.as_str());
                }
                break 'call *invocation;
            }
            Err(stop) => {
                count_store_error(inner, &stop);
                break 'call record::finish(Err(stop), request.invocation_id.clone(), correlation);
            }
        };
        if let (Some(timing), Some(_)) = (arrival.timing.as_mut(), &leader) {
            timing.admitted();
        }
        // Phases 2–9. The leader learns whether the handler of a capability whose interruption is
        // not harmless has started, so that dropping the call records an unknown outcome rather than
        // `CANCELLED`, and the phases learn whether the record was taken over or its lease lost.
        arrival.hold = leader.as_ref().map(|guard| guard.hold());
        // Boxed: only a shared store's leases need renewing, and the renewal's state would otherwise
        // enlarge every call's.
        let renewal = leader.as_ref().and_then(|guard| guard.renewal()).map(Box::pin);
        let outcome = match renewal {
            None => finish(phases(arrival, input)).await,
            // A store whose leases lapse: the lease is renewed while the call runs.
            Some(renewal) => {
                let phases = async { finish(phases(arrival, input)).await };
                Box::pin(async {
                    tokio::select! {
                        outcome = phases => outcome,
                        never = renewal => match never {},
                    }
                })
                .await
            }
        };
        if let Err(stop) = &outcome {
            count_store_error(inner, stop);
        }
        let mut invocation = record::finish(outcome, request.invocation_id.clone(), correlation);
        if let Some(how) = answered.get() {
            invocation.phase = None;
            invocation.replayed = *how == Answered::Replayed;
            invocation.joined = *how == Answered::Joined;
        }
        // Phase 10: settle the record (boxed, like admission: only tracked calls get here). A stop
        // for questions is not terminal: the same id comes back with the answers.
        if let Some(guard) = leader {
            // Read before settling, which takes the guard: nothing sets it once the phases ended.
            let started = guard.handler_started();
            let settled = Box::pin(guard.settle(&invocation.result, invocation.questions.is_none())).await;
            // The lease was lost after the handler started: the record is another caller's and says
            // something else (an unknown outcome for a write it took over), so this caller is told
            // that, never a result nobody can replay.
            if settled == idempotency::Settled::LeaseLost && started && !is_outcome_unknown(&invocation.result) {
                let stop = Stop::noted(
                    execute::unknown_outcome(true),
                    Phase::Execute,
                    "the lease on this call's record was lost while it ran; another caller holds the record",
                );
                break 'call record::finish(Err(stop), request.invocation_id.clone(), correlation);
            }
        }
        invocation
    };
    if let (Some(meter), Some(timing)) = (&meter, &timing) {
        let capability = metric_label(inner, &request.capability, &invocation);
        meter.record(capability, &invocation.result, timing);
    }
    crate::trace::finish(&invocation.result);
    invocation
}

/// Counts the failure of a store the call met, when metrics are on.
fn count_store_error(inner: &Inner, stop: &Stop) {
    if let (true, Some(store)) = (inner.config.metrics, stop.fault.and_then(Fault::store)) {
        telemetry::store_error(store);
    }
}

/// The `capability` label of a call: its name when the registry defines it, else
/// [`telemetry::UNKNOWN_CAPABILITY`] (names chosen by an agent never become label values).
fn metric_label<'a>(inner: &Inner, name: &'a str, invocation: &Invocation) -> &'a str {
    let resolved = match (invocation.result.code(), invocation.phase) {
        (Some(agent_surface_core::ErrorCode::CapabilityNotFound), _) => false,
        // A success, or a stop after phase 2 resolved the name.
        (_, Some(phase)) if phase != Phase::Admission => true,
        (None, None) if !invocation.replayed && !invocation.joined => true,
        // Answered or stopped at admission, before resolution: ask.
        _ => inner.read().capabilities.contains_key(name),
    };
    if resolved { name } else { telemetry::UNKNOWN_CAPABILITY }
}

/// Whether `result` is `EXECUTION_FAILED {reason: outcome-unknown}`.
pub(crate) fn is_outcome_unknown(result: &agent_surface_core::InvokeResult) -> bool {
    result.error_payload().is_some_and(|p| is_execution_failed(p, "outcome-unknown"))
}

/// Whether `payload` is `EXECUTION_FAILED` with `reason`.
pub(crate) fn is_execution_failed(payload: &agent_surface_core::ErrorPayload, reason: &str) -> bool {
    payload.code() == agent_surface_core::ErrorCode::ExecutionFailed
        && payload.detail("reason").and_then(serde_json::Value::as_str) == Some(reason)
}

/// `EXECUTION_FAILED {reason: outcome-unknown}` for a call whose record another leader may have
/// executed (see [`hold::Hold`]).
fn taken_over_stop(note: impl Into<String>) -> Stop {
    Stop::noted(AgentSurfaceError::outcome_unknown(), Phase::Admission, note)
}

// The functions of phases 5–9 below are inlined into one another (`#[inline(always)]`): left to
// the compiler, each was a call that moved the call's state and what it established into the
// next, ~90 instructions per call in all (`spec/invocation.md` §11).

/// How far phases 2–9 got without waiting: the output, or the rest of the call, boxed. A call
/// that no hook waits on and whose handler completes on its first poll runs them all at once, and
/// their state never enters the call's future (whose size is a large part of a call's cost); a
/// hook that waits, or a handler that does not complete, takes the rest of the call into its box.
/// Each function below runs one or more phases and hands what it established to the next, either
/// at once or, after a wait, from inside the box.
enum Step<'a> {
    /// Phases 2–9 completed: the output.
    Done(Value),
    /// The rest of the call, from a wait on.
    Later(BoxFuture<'a, Outcome>),
}

/// The rest of the call after a wait: `rest` boxed.
fn later<'a>(rest: impl Future<Output = Outcome> + Send + 'a) -> Result<Step<'a>, Stop> {
    Ok(Step::Later(Box::pin(rest)))
}

/// The outcome of what a step left to do (ready at once when it left nothing).
fn finish(step: Result<Step<'_>, Stop>) -> impl Future<Output = Outcome> + Send + '_ {
    match step {
        Ok(Step::Done(output)) => Either::Left(std::future::ready(Ok(output))),
        Ok(Step::Later(rest)) => Either::Right(rest),
        Err(stop) => Either::Left(std::future::ready(Err(stop))),
    }
}

/// Phases 2–4, on the input the caller sent: resolution, availability and authority.
fn phases(mut arrival: Arrival<'_>, input: Value) -> Result<Step<'_>, Stop> {
    let inner = arrival.inner;
    // Phases 2 and 3 read the live state under one lock. Their outcome is held back until
    // phase 4 has decided whether this consumer may learn that the capability exists.
    let resolution = {
        let state = inner.read();
        // Counted under the write lock: read under this one, it matches what phase 3 reads.
        arrival.disables = inner.disables.load(std::sync::atomic::Ordering::Acquire);
        resolve::resolve(&arrival, &state).and_available(|def| availability::check(&state, def))
    };
    // Phase 4; it reports the outcome of phases 2 and 3 unless the capability is hidden. Each
    // hook phase (4, 6, 7, 8a, 8b) runs only when there is a hook, which it gets unwrapped. A
    // policy that decides at once leaves the call unboxed.
    let Some(policy) = &inner.config.authority else { return admitted(arrival, resolution.into_result(), input) };
    match authority::at_once(&arrival, policy.as_ref(), resolution) {
        Ok(resolved) => admitted(arrival, resolved, input),
        Err(resolution) => later(async move {
            let resolved = authority::check(&arrival, policy.as_ref(), resolution).await;
            finish(admitted(arrival, resolved, input)).await
        }),
    }
}

/// Phases 5 and 6 of a call phase 4 let through: the call's context, its input, the questions
/// to the client, and the rate limit.
#[inline(always)]
fn admitted(arrival: Arrival<'_>, resolved: Result<resolve::Resolved, Stop>, input: Value) -> Result<Step<'_>, Stop> {
    let Arrival {
        inner,
        request,
        options,
        correlation,
        tracked,
        target_argument_left,
        answered,
        hold,
        timing,
        disables,
        ..
    } = arrival;
    // The record was taken over from a leader that lost its lease mid-call (its process died):
    // that execution may have taken effect, so only a call whose repetition is harmless runs
    // again. Any other is an unknown outcome — also when the call stops before this point, since
    // that answer would be stored and could invite a repetition; the same answer whatever the
    // capability, so that it reveals nothing before authority has run.
    let taken_over = hold.as_ref().is_some_and(|h| h.taken_over);
    let resolve::Resolved { def, registration: reg } = match resolved {
        Ok(resolved) if !taken_over || execute::outcome_is_harmless(&resolved.def) => resolved,
        Ok(_) => return Err(taken_over_stop("the previous leader of this call lost its lease without a result")),
        Err(stop) if taken_over => {
            return Err(taken_over_stop(format!(
                "the previous leader of this call lost its lease without a result; then: {}",
                stop.error.code()
            )));
        }
        Err(stop) => return Err(stop),
    };
    // Phase 5: the call's context, then its input.
    let ctx = Ctx::new(CtxParts {
        capability: def.name.clone(),
        consumer: options.consumer.clone(),
        invocation_id: request.invocation_id.clone(),
        reg: reg.clone(),
        shared: inner.shared(),
        progress: options.progress.clone().map(crate::ctx::ProgressState::new),
        answers: options.answers.clone(),
    });
    // A call under a natural key is recorded too: an unknown outcome is reconciled by repeating it.
    let tracked = tracked || def.natural_key.is_some();
    let call = Call {
        inner,
        options,
        request,
        def,
        reg,
        ctx,
        tracked,
        correlation,
        answered,
        correlation_text: std::sync::OnceLock::new(),
        hold,
        timing,
        disables,
    };
    let prepared = input::prepare(&call, input, target_argument_left)?;
    // Phase 1b: a capability with a natural idempotency key is admitted under it now, after
    // authority (the key spans callers) and before anything a repeat must not meet again.
    match &call.def.natural_key {
        Some(key) => {
            let key = key.clone();
            later(natural::keyed(call, key, prepared))
        }
        None => after_key(call, prepared),
    }
}

/// The rest of phase 5 and phase 6 of a call admitted (under its natural key, if it has one): the
/// author's precondition, questions to the client (5b), and the rate limit. A precondition that
/// awaits leaves the rest of the call to a future.
#[inline(always)]
fn after_key(call: Call<'_>, prepared: input::Prepared) -> Result<Step<'_>, Stop> {
    if let Some(ErasedPrecondition { check, .. }) = &call.def.precondition {
        match check {
            PreconditionCheck::Now(check) => input::precondition(&call, &prepared, check.as_ref())?,
            PreconditionCheck::Later(check) => {
                let check = check.clone();
                return later(async move {
                    input::precondition_later(&call, &prepared, check.as_ref()).await?;
                    finish(after_precondition(call, prepared)).await
                });
            }
        }
    }
    after_precondition(call, prepared)
}

/// What follows the precondition in phase 5 (5b, the questions), and phase 6.
#[inline(always)]
fn after_precondition(call: Call<'_>, prepared: input::Prepared) -> Result<Step<'_>, Stop> {
    let inner = call.inner;
    // Phase 5b: questions to the client, if the capability asks any.
    if let Some(ask) = &call.def.ask {
        questions::check(&call, ask, &prepared.decoded)?;
    }
    // Phase 6; the permit is held until the call ends. A limiter that decides at once leaves
    // the call unboxed unless it grants a permit to hold (a queue slot).
    let Some(limiter) = &inner.config.rate_limiter else { return confirmed(call, prepared) };
    match rate::at_once(&call, limiter.as_ref(), &prepared.value)? {
        Some(None) => confirmed(call, prepared),
        Some(permit @ Some(_)) => later(async move {
            let _permit = permit;
            finish(confirmed(call, prepared)).await
        }),
        None => later(async move {
            let acquired = rate::acquire(&call, limiter.as_ref(), &prepared.value);
            let _permit = unless_cancelled(&call, Phase::Rate, acquired).await?;
            finish(confirmed(call, prepared)).await
        }),
    }
}

/// Phase 7: the registry's gate; a capability that declares a gate needs one. A gate that lets
/// the call through without awaiting ([`confirmation::at_once`]) leaves the call unboxed.
#[inline(always)]
fn confirmed(call: Call<'_>, prepared: input::Prepared) -> Result<Step<'_>, Stop> {
    let declared = confirmation::declared(&call, prepared.decoded.input())?;
    match (&call.inner.config.confirmation, declared) {
        (Some(gate), declared) => match confirmation::at_once(&call, gate.as_ref(), &prepared.value, &declared)? {
            confirmation::AtOnceOutcome::Proceed(consumed) => marked(call, prepared, consumed),
            confirmation::AtOnceOutcome::Ask(found) => later(async move {
                let confirmed = confirmation::confirm(&call, gate.as_ref(), &prepared.value, declared, found);
                match unless_cancelled(&call, Phase::Confirmation, confirmed).await? {
                    None => finish(marked(call, prepared, None)).await,
                    Some(consumed) => finish(marked(call, prepared, Some(consumed))).await,
                }
            }),
        },
        (None, confirmation::Declared::Gate(_)) => Err(confirmation::no_gate(&call.def)),
        (None, confirmation::Declared::No) => marked(call, prepared, None),
    }
}

/// Awaits what phase 6 or 7 waits for (a queue slot, a person's approval) unless the caller
/// cancels or the registry is disposed first: then the call stops there with `CANCELLED`, before
/// its handler (`notProcessed`), and what it waited for is dropped — its place in the queue given
/// up, its unit of rate budget given back, evidence it consumed given back
/// ([`confirmation::GiveBack`]). A registration unmounted or replaced meanwhile ends the wait too,
/// with the answer phase 8's gate would give once the wait was over ([`registration_gone`]).
///
/// The cancellations are looked at first: a call cancelled before it gets here starts no wait (no
/// unit taken, no person asked), and one whose permit or approval arrives in the same poll as its
/// cancellation is cancelled all the same.
async fn unless_cancelled<T>(
    call: &Call<'_>,
    phase: Phase,
    work: impl Future<Output = Result<T, Stop>>,
) -> Result<T, Stop> {
    tokio::select! {
        biased;
        () = call.inner.disposed.cancelled() => {
            Err(Stop::noted(AgentSurfaceError::cancelled(), phase, "registry disposed while the call waited"))
        }
        () = call.options.cancelled() => {
            Err(Stop::noted(AgentSurfaceError::cancelled(), phase, "caller cancelled while the call waited"))
        }
        () = call.reg.unmounted.cancelled() => Err(gone_while_waiting(call)),
        done = work => done,
    }
}

/// The stop of a call whose registration went while it waited in phases 5–7: phase 8's gate's
/// answer ([`may_start`]: a lease lost meanwhile is answered first, then the registration gone).
fn gone_while_waiting(call: &Call<'_>) -> Stop {
    match may_start(call) {
        Err(stop) => stop,
        Ok(()) => registration_gone(call),
    }
}

/// Phase 8's gate for a registration unmounted or replaced while the call waited before its
/// handler: `COMPONENT_UNMOUNTED {phase: resolve}`, nothing run, the records released (the retry
/// resolves the live registration). Said by the gate, or as soon as the registration goes by a
/// wait of phases 5–7 ([`unless_cancelled`], the precondition that awaits): the gate would say the
/// same once the wait was over, and the call has nothing left to wait for.
fn registration_gone(call: &Call<'_>) -> Stop {
    let gone = AgentSurfaceError::component_unmounted(agent_surface_core::details::UnmountPhase::Resolve);
    not_startable(call, gone, "registration unmounted or replaced before the handler started")
}

/// Whether the call may still start its handler: not once the lease on its record was lost
/// (another caller holds the record now, and that answer comes first: a retry must not run beside
/// the new leader), nor once its caller has gone ([`still_wanted`]), nor once, while it waited (an
/// approval, a rate-limit permit, a precondition), its registration was unmounted or replaced
/// (`COMPONENT_UNMOUNTED {phase: resolve}`, as at resolution: the retry resolves the live one) or
/// its capability disabled (`CAPABILITY_NOT_AVAILABLE`, as at phase 3) — [`not_startable`].
fn may_start(call: &Call<'_>) -> Result<(), Stop> {
    if call.hold.as_ref().is_some_and(|hold| hold.lost.is_cancelled()) {
        return Err(taken_over_stop("the lease was lost before the handler started"));
    }
    still_wanted(call)?;
    if call.reg.unmounted.is_cancelled() {
        return Err(registration_gone(call));
    }
    // A capability disabled since phase 3 (one load when none was): the operator's switch holds
    // for a call that was waiting too.
    if call.inner.disables.load(std::sync::atomic::Ordering::Acquire) != call.disables
        && let Some(reason) = call.inner.read().disabled.get(&call.def.name).cloned()
    {
        let off = AgentSurfaceError::capability_not_available(reason);
        return Err(not_startable(call, off, "capability disabled before the handler started"));
    }
    Ok(())
}

/// The stop of a call whose target changed under it while it waited (its registration gone, its
/// capability disabled): nothing ran, and the answer is not one to keep — its records are
/// released, so the same id runs once the target is there again.
fn not_startable(call: &Call<'_>, error: AgentSurfaceError, note: &'static str) -> Stop {
    if let Some(hold) = &call.hold {
        hold.forgo();
    }
    Stop::noted(error, Phase::Execute, note).marking(Marking::BeforeHandler)
}

/// Whether the call may still start its handler: not once its caller has cancelled or the
/// registry has been disposed (during a wait before phase 8 that [`unless_cancelled`] does not
/// cover: the started mark, the audit trail's start). The handler has not started, so the answer
/// is `CANCELLED` and `notProcessed`, whatever the capability's effect.
fn still_wanted(call: &Call<'_>) -> Result<(), Stop> {
    let note = if call.inner.disposed.is_cancelled() {
        "registry disposed before the handler started"
    } else if call.options.is_cancelled() {
        "caller cancelled before the handler started"
    } else {
        return Ok(());
    };
    Err(Stop::noted(AgentSurfaceError::cancelled(), Phase::Execute, note).marking(Marking::BeforeHandler))
}

/// Before phase 8a: on a store whose leases lapse, the call's records are marked started
/// ([`hold::Hold::mark_started`], one round trip each), so that a lapse before this point
/// is known to have run nothing. A call that cannot be marked does not run: confirmation evidence
/// it `consumed` is given back, and nothing reaches the audit trail.
#[inline(always)]
fn marked(
    call: Call<'_>,
    prepared: input::Prepared,
    consumed: Option<confirmation::GiveBack>,
) -> Result<Step<'_>, Stop> {
    let then = |call, prepared, consumed: Option<confirmation::GiveBack>| match consumed {
        None => audited(call, prepared),
        Some(consumed) => audited_after_consuming(call, prepared, consumed),
    };
    match &call.hold {
        Some(hold) if hold.needs_marks() => later(async move {
            let marked = match &call.hold {
                Some(hold) => hold.mark_started().await,
                None => Ok(()),
            };
            if let Err(stop) = marked {
                if let Some(consumed) = consumed {
                    consumed.now().await;
                }
                return Err(stop);
            }
            finish(then(call, prepared, consumed)).await
        }),
        _ => then(call, prepared, consumed),
    }
}

/// Phase 8a: the audit trail's start, for a capability with an effect, then phases 8–9 and the
/// trail's finish.
#[inline(always)]
fn audited(call: Call<'_>, prepared: input::Prepared) -> Result<Step<'_>, Stop> {
    match audit::trail(&call) {
        audit::Trail::None => execute(call, prepared),
        audit::Trail::Missing => Err(audit::missing(&call)),
        audit::Trail::To(trail) => later(async move {
            let started = audit::start(&call, trail, &prepared.value, None).await?;
            let outcome = finish(execute(call, prepared)).await;
            started.finish(&outcome).await;
            outcome
        }),
    }
}

/// [`audited`] for a call whose confirmation evidence phase 7 `consumed`. A call refused here (or
/// dropped before its start is recorded) has not run: the evidence is given back
/// ([`confirmation::GiveBack`]), so that its retry does not need a fresh approval; once the handler
/// may start, it stays consumed. (Apart from `audited`, so that a call without evidence — most —
/// carries none of this.)
fn audited_after_consuming(
    call: Call<'_>,
    prepared: input::Prepared,
    consumed: confirmation::GiveBack,
) -> Result<Step<'_>, Stop> {
    match audit::trail(&call) {
        audit::Trail::None => match may_start(&call) {
            Ok(()) => execute_now(call, prepared, Some(consumed.spend())),
            Err(stop) => later(async move {
                consumed.now().await;
                Err(stop)
            }),
        },
        audit::Trail::Missing => later(async move {
            consumed.now().await;
            Err(audit::missing(&call))
        }),
        audit::Trail::To(trail) => later(async move {
            let started = match audit::start(&call, trail, &prepared.value, consumed.confirmation_id()).await {
                Ok(started) => started,
                Err(stop) => {
                    consumed.now().await;
                    return Err(stop);
                }
            };
            if let Err(stop) = may_start(&call) {
                consumed.now().await;
                let outcome = Err(stop);
                started.finish(&outcome).await;
                return outcome;
            }
            let outcome = finish(execute_now(call, prepared, Some(consumed.spend()))).await;
            started.finish(&outcome).await;
            outcome
        }),
    }
}

/// Phase 8: the handler, unless the call may no longer start ([`may_start`]).
#[inline(always)]
fn execute(call: Call<'_>, prepared: input::Prepared) -> Result<Step<'_>, Stop> {
    may_start(&call)?;
    execute_now(call, prepared, None)
}

/// Phase 8 for a call [`may_start`] has just let through: the handler starts. A call that
/// consumed evidence is checked once, before the evidence is spent ([`confirmation::Spent`]), and comes here
/// directly: a second check could stop it after the evidence can no longer be given back.
#[inline(always)]
fn execute_now(
    call: Call<'_>,
    prepared: input::Prepared,
    spent: Option<confirmation::Spent>,
) -> Result<Step<'_>, Stop> {
    use std::sync::atomic::Ordering;
    if let Some(hook) = &call.options.on_execute {
        hook();
    }
    if let Some(hold) = &call.hold {
        hold.started.store(true, Ordering::Release);
        if !execute::outcome_is_harmless(&call.def) {
            hold.may_have_run.store(true, Ordering::Release);
        }
    }
    if let Some(timing) = call.timing.as_mut() {
        timing.execute_started();
    }
    // A handler that completes on its first poll needs no timer and no watchers; one that does
    // not is awaited under them.
    match execute::run(&call, prepared.decoded, call.hold.as_ref().map(|h| &h.lost)) {
        execute::Run::Done(output) => match spent {
            Some(spent) if spent.gives_back(&output) => later(async move {
                spent.give_back().await;
                finish(verified(call, prepared.value, output)).await
            }),
            _ => verified(call, prepared.value, output),
        },
        execute::Run::Waiting(waiting) => later(async move {
            let output = waiting.await;
            if let Some(spent) = spent
                && spent.gives_back(&output)
            {
                spent.give_back().await;
            }
            finish(verified(call, prepared.value, output)).await
        }),
    }
}

/// Phases 8b and 9: the post-condition, if the capability declares one, and the output.
#[inline(always)]
fn verified(mut call: Call<'_>, input: Value, output: Outcome) -> Result<Step<'_>, Stop> {
    match (output, &call.def.verify) {
        (Ok(output), Some(check)) => {
            let check = check.clone();
            later(async move {
                let output = verify::check(&call, &check, &input, output).await;
                checked(&mut call, output)
            })
        }
        (output, _) => checked(&mut call, output).map(Step::Done),
    }
}

/// Phase 9: the output, once execution has ended.
#[inline(always)]
fn checked(call: &mut Call<'_>, output: Outcome) -> Outcome {
    if let Some(timing) = call.timing.as_mut() {
        timing.execute_ended();
    }
    output::check(call, output?)
}

/// A name an agent chose, as an operator-log field: at most [`Shown::MAX_CHARS`] characters, and
/// no control or whitespace character (each becomes `\u{FFFD}`), so that a name cannot forge a
/// log line or a field, nor make one line megabytes long.
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl Shown<'_> {
    /// The most characters shown; a longer name ends with `…`.
    pub(crate) const MAX_CHARS: usize = 128;
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for (i, c) in self.0.chars().enumerate() {
            if i == Self::MAX_CHARS {
                return f.write_char('…');
            }
            f.write_char(if c.is_control() || c.is_whitespace() { '\u{FFFD}' } else { c })?;
        }
        Ok(())
    }
}
