//! Phase 5 — input: shape limits, bound fields, schema validation, bindings, decoding and the
//! author's precondition.
//!
//! Input: the agent's input, the consumer and the target. Decision: the validated, bound input in
//! the handler's type. Codes: `INVALID_INPUT {issues, lockedFields?, reason?}` (`reason:
//! target-mismatch` for a reserved target argument that disagrees with the target, `reason:
//! undecodable` for an input the schema allows and the handler's type does not),
//! `PRECONDITION_FAILED {reason: binding-failed}` (a binding that failed to evaluate, or a bound
//! value that does not decode), and the author's `PRECONDITION_FAILED`; `EXECUTION_FAILED
//! {reason: handler-error}` for a precondition that panicked, `{reason: transport, transient}` for
//! one that did not answer within the call's time budget; `CANCELLED` for a call cancelled (or a
//! registry disposed) while a precondition was awaited.

use agent_surface_core::details::{ExecutionFailedReason, InputIssue};
use agent_surface_core::{AgentSurfaceError, Phase};
use std::future::Future;
use std::time::Duration;

use agent_surface_policy::guard::{catch, catch_started, within};
use serde_json::Value;

use super::{Call, Stop};
use crate::handler::{AsyncPreconditionFn, Decoded, PreconditionFn};
use crate::schema::escape_pointer_segment;
use crate::validate::{InputLimits, check_shape};
use agent_surface_core::details::TARGET_ARGUMENT;

pub(crate) struct Prepared {
    /// The validated input with bound fields filled in.
    pub(crate) value: Value,
    /// The same, decoded into the handler's input type.
    pub(crate) decoded: Decoded,
}

fn invalid(issues: Vec<InputIssue>, locked: Option<Vec<String>>, note: impl Into<String>) -> Stop {
    Stop::noted(AgentSurfaceError::invalid_input(issues, locked), Phase::Input, note)
}

/// Shape limits, bound fields, schema validation, bindings and decoding (the precondition is
/// [`precondition`]). `target_argument_left` says whether the reserved target argument is still
/// in `input` after it was lifted.
pub(crate) fn prepare(call: &Call<'_>, input: Value, target_argument_left: bool) -> Result<Prepared, Stop> {
    let Call { inner, def, reg, ctx, .. } = call;
    let limits = InputLimits { max_depth: inner.config.max_input_depth, max_bytes: inner.config.max_input_bytes };
    check_shape(&input, limits).map_err(|issue| invalid(vec![issue], None, "input over the shape limits"))?;

    // The reserved target argument is lifted into the target before admission
    // (`InvokeRequest::lift_target_argument`); what is left of it could not be.
    if target_argument_left && let Some(value) = input.get(TARGET_ARGUMENT) {
        if value.is_string() {
            return Err(Stop::noted(
                AgentSurfaceError::target_mismatch(TARGET_ARGUMENT),
                Phase::Input,
                "the target argument and the target disagree",
            ));
        }
        let issue = InputIssue {
            path: format!("/{TARGET_ARGUMENT}"),
            message: "must be a string: one of the instance ids this tool lists".into(),
        };
        return Err(invalid(vec![issue], None, "the target argument is not a string"));
    }

    // Bound fields are the runtime's to fill; an agent that sends one is told so.
    if !def.bindings.is_empty()
        && let Some(obj) = input.as_object()
    {
        let locked: Vec<String> =
            def.bindings.iter().map(|(f, _)| f).filter(|f| obj.contains_key(f.as_str())).cloned().collect();
        if !locked.is_empty() {
            let issues = locked
                .iter()
                .map(|f| InputIssue {
                    path: format!("/{}", escape_pointer_segment(f)),
                    message: "is filled by the runtime; remove it".into(),
                })
                .collect();
            return Err(invalid(issues, Some(locked), "bound fields supplied"));
        }
    }

    if !def.validator.is_valid(&input) {
        return Err(invalid(def.validator.issues(&input), None, "schema validation failed"));
    }

    let mut value = input;
    if !def.bindings.is_empty() {
        let Value::Object(obj) = &mut value else {
            // Unreachable after validation (input schemas are objects), but never an empty list.
            let issue = InputIssue { path: String::new(), message: "must be a JSON object".into() };
            return Err(invalid(vec![issue], None, "input with bindings is not an object"));
        };
        for (field, binding) in &def.bindings {
            let state = reg.state.as_deref();
            let consumer = ctx.consumer();
            match catch(|| binding.eval(consumer, state)) {
                Ok(Some(v)) => {
                    obj.insert(field.clone(), v);
                }
                Ok(None) => {
                    return Err(Stop::noted(
                        AgentSurfaceError::binding_failed(),
                        Phase::Input,
                        format!("binding of `{field}` produced no value"),
                    ));
                }
                Err(text) => {
                    return Err(Stop::noted(
                        AgentSurfaceError::binding_failed(),
                        Phase::Input,
                        format!("binding of `{field}` panicked: {text}"),
                    )
                    .fault());
                }
            }
        }
    }

    if let Some(v) = &def.bound_validator
        && !v.is_valid(&value)
    {
        let paths: Vec<String> =
            v.iter_errors(&value).take(3).map(|e| e.instance_path().as_str().to_string()).collect();
        return Err(Stop::noted(
            AgentSurfaceError::binding_failed(),
            Phase::Input,
            format!("bound values break the input schema at {}", paths.join(", ")),
        ));
    }

    let decoded = match (def.handler.decode)(&value) {
        Ok(d) => d,
        Err(e) => {
            // serde's message may quote the value, so it goes to the operator channel only; the
            // agent learns where, and what kind of value is refused.
            let issue = undecodable_issue(&value, &e.pointer);
            // The decoder's message may quote the value: a sensitive field's is never logged.
            let mut note = if def.validator.is_sensitive(&issue.path) {
                format!("decoding failed at `{}` (a sensitive field: the decoder's message is withheld)", issue.path)
            } else {
                format!("decoding failed at `{}`: {}", e.pointer, e.error)
            };
            // A bound field's value is the runtime's, not the agent's, to fix.
            if e.member.as_ref().is_some_and(|m| def.bindings.iter().any(|(bound, _)| bound == m)) {
                return Err(Stop::noted(AgentSurfaceError::binding_failed(), Phase::Input, note));
            }
            if e.pointer.is_empty() && !def.bindings.is_empty() {
                // A type that buffers its input (`#[serde(flatten)]`, an untagged enum) loses the
                // decoder's path: the operator learns that a bound field is not ruled out.
                note.push_str(" (no member named: a bound value may be the cause)");
            }
            let (path, message) = def.validator.shown(issue.path, issue.message);
            let issue = InputIssue { path, message };
            return Err(Stop::noted(AgentSurfaceError::undecodable_input(vec![issue]), Phase::Input, note));
        }
    };

    Ok(Prepared { value, decoded })
}

/// The issue of a value at `pointer` in `input` that passes the schema but does not decode: the
/// pointer of the innermost value of `input` on the decoder's path (the decoder may name a member
/// the input does not have, inside a value it buffered), and what is wrong with it in words that
/// quote nothing of it.
fn undecodable_issue(input: &Value, pointer: &str) -> InputIssue {
    let mut at = pointer;
    let value = loop {
        if let Some(v) = input.pointer(at) {
            break v;
        }
        at = at.rfind('/').map_or("", |i| &at[..i]);
    };
    let message = match value {
        Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            "must be an integer written without a fraction or an exponent (5, not 5.0 or 5e0)"
        }
        Value::Number(_) => "is a number outside what this field can hold",
        _ if at.is_empty() => "is not an input the capability can take as a whole, although the schema allows it",
        _ => "is not a value this field can take, although the schema allows it",
    };
    InputIssue { path: at.to_owned(), message: message.into() }
}

/// The author's precondition when it answers at once (`check`), on the decoded input (after the
/// natural key's admission: a repeat of an operation that ran is answered with its result, not
/// refused by a precondition its first run made false). One that awaits is [`precondition_later`].
#[inline(always)]
pub(crate) fn precondition(call: &Call<'_>, prepared: &Prepared, check: &PreconditionFn) -> Result<(), Stop> {
    match catch(|| check(&call.ctx, prepared.decoded.input())) {
        Ok(Some(answer)) => unmet(call, Ok(answer)),
        Err(text) => unmet(call, Err(text)),
        // Ruled out by the mount check, which knows what the check's extractors need.
        Ok(None) => Err(nothing_extracted()),
    }
}

/// A precondition's extractor found nothing: a fault (the mount check rules it out).
fn nothing_extracted() -> Stop {
    let error = AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError);
    Stop::noted(error, Phase::Input, "a precondition's extractor found nothing to extract").fault()
}

/// The author's asynchronous precondition: its future, under the call's time budget, with its
/// panics caught (while it is built and while it runs), ended by the caller's cancellation and the
/// registry's disposal as a running handler is (`CANCELLED`, nothing ran). The future is built
/// here, from the decoded input it borrows for that moment only: what is awaited holds no borrow
/// of `prepared`. The check gets a context of its own, as a post-condition check does: its
/// cancellation fires when the check ends, whichever way, not when the handler's does.
pub(crate) fn precondition_later<'c, 'a>(
    call: &'c Call<'a>,
    prepared: &Prepared,
    check: &AsyncPreconditionFn,
) -> impl Future<Output = Result<(), Stop>> + Send + use<'c, 'a> {
    let budget = call.time_budget();
    let ctx = call.ctx.renewed();
    let end = ctx.end_on_drop();
    let started = catch(|| check(&ctx, prepared.decoded.input()));
    async move {
        let _end = end;
        let started = match started {
            Ok(Some(future)) => Ok(future),
            Err(text) => Err(text),
            // Ruled out by the mount check, which knows what the check's extractors need.
            Ok(None) => return Err(nothing_extracted()),
        };
        let checked = within(call.inner.config.clock.as_ref(), budget, catch_started(started));
        let caller = call.options.cancelled();
        tokio::select! {
            biased;
            answer = checked => match answer {
                Some(answer) => unmet(call, answer),
                None => Err(Stop::noted(
                    AgentSurfaceError::transient(PRECONDITION_RETRY_AFTER),
                    Phase::Input,
                    format!("precondition did not answer within {} ms", budget.as_millis()),
                )
                .fault()),
            },
            () = call.inner.disposed.cancelled() => {
                Err(Stop::noted(AgentSurfaceError::cancelled(), Phase::Input, "registry disposed during the precondition"))
            }
            () = caller => Err(Stop::noted(AgentSurfaceError::cancelled(), Phase::Input, "caller cancelled during the precondition")),
            // What phase 8's gate would answer once the check was over.
            () = call.reg.unmounted.cancelled() => Err(super::gone_while_waiting(call)),
        }
    }
}

/// How long a caller is asked to wait after a precondition did not answer within its budget.
const PRECONDITION_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The stop for a precondition's `answer`: `Err(text)` when it panicked.
fn unmet(call: &Call<'_>, answer: Result<Result<(), AgentSurfaceError>, String>) -> Result<(), Stop> {
    match answer {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            let e = match &call.def.precondition_repair {
                Some(plan) if e.payload().repair().is_none() => {
                    // The static plan was checked against retry `with-changes` at registration.
                    e.with_repair(plan.clone()).unwrap_or_else(|_| AgentSurfaceError::precondition_failed(""))
                }
                _ => e,
            };
            Err(Stop::noted(e, Phase::Input, "precondition unmet"))
        }
        Err(text) => Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError),
            Phase::Input,
            format!("precondition panicked: {text}"),
        )
        .fault()),
    }
}
