//! Phase 1b — the natural idempotency key: admission under a key computed from the input, reported as
//! `admission` (it runs once phase 5 has validated, bound and decoded the input).
//!
//! Input: a call that authority admitted, with its validated, bound and decoded input, of a
//! capability that declares a key (`CapabilityBuilder::idempotency_key`). Decision: run the call
//! as the leader of its key's record, or answer it from the record — the stored result of the
//! call that ran, or the result of the identical call in flight, joined. Codes:
//! `INVOCATION_CONFLICT` (the key's record holds another input), `EXECUTION_FAILED {reason:
//! store-unavailable}` (the store failed; nothing ran, and the id's record is released), `EXECUTION_FAILED {reason: outcome-unknown}` (the
//! record was taken over from a leader that lost its lease, for a capability whose repetition is
//! not harmless; a follower that stopped waiting), `EXECUTION_FAILED {reason: handler-error}`
//! (the key function panicked), and whatever the record holds.
//!
//! The key spans callers: it is admitted here, after authority, so that a caller the authority
//! policy refuses gets its refusal and never another caller's result; and before the
//! precondition, the questions, the rate limit and the confirmation, so that a repeat of an
//! operation that ran is answered with its result instead of meeting them again. The record lives
//! in the registry's idempotency store, under `natural:{capability}` (or
//! `natural:{capability}:{principal}`) and the key; its fingerprint is the capability, the
//! instance and the validated input (RFC 8785), without the caller, the registration (which
//! differs between replicas) or the evidence.

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::digest::PartsDigest;
use agent_surface_core::json::write_canonical;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Phase, Retry};
use agent_surface_policy::{
    guard::catch,
    idempotency::{Fingerprint, IdempotencyKey},
};
use serde_json::Value;

use super::idempotency::{self, Record, Settled};
use super::{Answered, Call, Outcome, Stop, execute, finish, input};
use crate::define::{ErasedKey, KeyScope};

/// The call admitted under its natural key: run (as the key's leader), or answered from its
/// record. The call's hold is the invocation id's, when the call also carries one: both records
/// then share what they learn of the handler.
pub(crate) async fn keyed(call: Call<'_>, key: ErasedKey, prepared: input::Prepared) -> Outcome {
    let natural = match catch(|| (key.key)(prepared.decoded.input())) {
        Ok(Some(natural)) => natural,
        Ok(None) => return Err(cannot_key("the idempotency key function expects another input type")),
        Err(text) => return Err(cannot_key(format!("the idempotency key function panicked: {text}"))),
    };
    let scope = match key.scope {
        KeyScope::Principal => format!("natural:{}:{}", call.def.name, call.options.consumer.principal()),
        _ => format!("natural:{}", call.def.name),
    };
    let store_key = IdempotencyKey { consumer_key: scope, invocation_id: idempotency::store_id(&natural) };
    let fp = fingerprint(&call, &prepared.value);
    let mut rejoined = 0;
    let admitted = loop {
        let now = call.inner.config.clock.now();
        let key = store_key.clone();
        let admitted =
            idempotency::admit_record(call.inner, call.options, key, fp, now, call.hold.as_ref(), false).await;
        // The key is the capability's, not the caller's id: a conflict says so (and is not retried).
        let admitted = admitted.map_err(|mut stop| {
            if stop.error.code() == agent_surface_core::ErrorCode::InvocationConflict {
                stop.error = AgentSurfaceError::natural_key_conflict();
            }
            stop
        })?;
        // The call this one joined stopped before its handler ran, or its handler refused its
        // caller: that refusal was its caller's (their precondition, quota, approval or
        // permission), and the key is free again. This call meets its own phases, under the key
        // anew.
        match admitted {
            Record::Joined(result) if callers_own(&result) => {
                rejoined += 1;
                if rejoined >= MAX_REJOINS {
                    return Err(Stop::noted(
                        AgentSurfaceError::transient(REJOINED_RETRY_AFTER),
                        Phase::Admission,
                        "every call this one joined under its natural key was refused its own caller",
                    ));
                }
            }
            admitted => break admitted,
        }
    };
    match admitted {
        Record::Replay(result) => answered(&call, result, Answered::Replayed),
        Record::Joined(result) => answered(&call, result, Answered::Joined),
        Record::Leader(guard) => lead(call, guard.releasing_unstarted(), prepared).await,
        Record::TakenOver(guard) if execute::outcome_is_harmless(&call.def) => {
            lead(call, guard.releasing_unstarted(), prepared).await
        }
        Record::TakenOver(guard) => {
            // An earlier leader of this key may have taken effect: never a second execution.
            let unknown = AgentSurfaceError::outcome_unknown();
            guard.settle(&InvokeResult::error(unknown.payload().clone(), None), true).await;
            Err(Stop::noted(
                unknown,
                Phase::Admission,
                "the previous leader of this natural key lost its lease without a result",
            ))
        }
    }
}

/// Runs the rest of the call as the key's leader, renewing the lease while it runs, and settles
/// the record with its outcome.
async fn lead(mut call: Call<'_>, guard: idempotency::LeaderGuard, prepared: input::Prepared) -> Outcome {
    call.hold = Some(guard.hold());
    let renewal = guard.renewal().map(Box::pin);
    let rest = finish(super::after_key(call, prepared));
    let outcome = match renewal {
        None => rest.await,
        Some(renewal) => {
            tokio::select! {
                outcome = rest => outcome,
                never = renewal => match never {},
            }
        }
    };
    // Read before settling, which takes the guard: nothing sets it once the rest ended.
    let started = guard.handler_started();
    let (result, terminal) = result_of(&outcome);
    let settled = guard.settle(&result, terminal).await;
    // The lease was lost after the handler started: the record is another caller's.
    if settled == Settled::LeaseLost && started && !super::is_outcome_unknown(&result) {
        return Err(Stop::noted(
            execute::unknown_outcome(true),
            Phase::Execute,
            "the lease on this call's natural key was lost while it ran; another caller holds the record",
        ));
    }
    outcome
}

/// How many times a call joins a call in flight under its key that then stops before its handler,
/// before it gives up (the key is contended by calls that keep being refused).
const MAX_REJOINS: usize = 3;

/// How long a caller is asked to wait after [`MAX_REJOINS`].
const REJOINED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `result` answers its own caller alone, and its record was released: a refusal before
/// the handler ran (`notProcessed`), or the handler's refusal of its caller ([`refuses_caller`]).
fn callers_own(result: &InvokeResult) -> bool {
    result.error_payload().is_some_and(|p| p.not_processed() || refuses_caller(p.code()))
}

/// Whether a handler's answer of `code` refuses its caller rather than the operation
/// (`NOT_AUTHORIZED`, `NOT_AUTHENTICATED`: a handler that checks who may do it, an owner among
/// them): another caller whose input gives the same key may be let through, so the answer is
/// never another caller's, and the key is released.
fn refuses_caller(code: agent_surface_core::ErrorCode) -> bool {
    matches!(code, agent_surface_core::ErrorCode::NotAuthorized | agent_surface_core::ErrorCode::NotAuthenticated)
}

/// The call's result as its record keeps it (no invocation id), and whether it is terminal. A stop
/// for questions is not: the same call comes back with the answers. Nor is a stop before the
/// handler started (`notProcessed`: an unmet precondition, a check that did not answer, a refused
/// quota or approval): the operation the key names has not happened, so the key is released and
/// the next call with it is decided afresh — a record of it would answer every call with this
/// input for the whole window, after the state changed or the dependency recovered, which its
/// `with-changes` or `after-delay` retry says it will not. Nor is an answer that tells the agent
/// to make the same call again (retry `yes`, `after-delay` or `after-refresh`: a `TIMEOUT`, a
/// `CANCELLED`, a transient failure, a `COMPONENT_UNMOUNTED` mid-flight): no id the client sends
/// reaches past a key derived from the input, so kept,
/// it would answer that repeat with itself for the whole window, and its message would be false.
/// Nor is the handler's refusal of its caller ([`refuses_caller`]): kept under a key that spans
/// callers, it would refuse another caller the handler lets through. That relies on a handler
/// refusing its caller before it acts, as the error model has it (a refusal is not an outcome).
/// Such an answer never follows an effect that a repeat could double: an interrupted write, or one
/// whose handler's error carries a host error or passes on another service's retryable answer, is
/// answered with its unknown outcome (terminal, kept), so a retryable answer after a write's
/// handler started is the handler's own word that a repeat is safe (`AgentSurfaceError::transient`
/// or `rate_limited`, `UpstreamStatus::before_any_effect`).
fn result_of(outcome: &Outcome) -> (InvokeResult, bool) {
    match outcome {
        Ok(output) => (InvokeResult::ok(output.clone(), None), true),
        Err(stop) => {
            let payload = stop.marked_payload();
            let again = payload.retry().permits_unchanged_retry() || payload.retry() == Retry::AfterRefresh;
            let terminal =
                stop.questions.is_none() && !stop.not_processed() && !again && !refuses_caller(payload.code());
            (InvokeResult::error(payload, None), terminal)
        }
    }
}

/// The answer of a call from its key's record: its output, or its error (the invocation is
/// marked replayed or joined, with no phase of its own).
fn answered(call: &Call<'_>, result: InvokeResult, how: Answered) -> Outcome {
    let _ = call.answered.set(how);
    tracing::Span::current().record("replayed", true);
    if let Some(error) = result.error_payload() {
        let note = "answered from the natural key's record";
        // The record is this service's own: its words (an author's explanation among them) are
        // answered again as they were, not sanitized as a payload from elsewhere would be.
        let stop = Stop::noted(AgentSurfaceError::from(error.clone()), Phase::Admission, note);
        return Err(stop.marking(super::Marking::AsRecorded(error.not_processed())).recorded(error.clone()));
    }
    match result {
        InvokeResult::Ok { output, .. } => Ok(output),
        // An `InvokeResult` is a success or an error.
        other => Ok(other.output().cloned().unwrap_or_default()),
    }
}

/// The key function could not give a key: the call does not run.
fn cannot_key(note: impl Into<String>) -> Stop {
    Stop::noted(AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError), Phase::Admission, note)
        .fault()
}

/// The fingerprint of a call under its natural key: SHA-256 over the capability, the instance and
/// the validated, bound input (RFC 8785), each length-prefixed — the same for every caller, on
/// every replica.
fn fingerprint(call: &Call<'_>, input: &Value) -> Fingerprint {
    let mut canonical = Vec::with_capacity(128);
    write_canonical(input, &mut canonical);
    let digest = PartsDigest::new()
        .labelled(b"natural-key/capability", call.def.name.as_bytes())
        .labelled(b"instance", call.reg.instance_id.as_bytes())
        .labelled(b"input", &canonical)
        .finish();
    Fingerprint::from_bytes(digest)
}
