//! Phase 10 — the end of a call: the result, and the operator event.
//!
//! The event of a call that ends with an error is logged at the level the matrix gives its code
//! (`logLevel` in `spec/error-matrix.json`), or at `ERROR` when the service itself is at fault
//! ([`Stop::fault`]). It lies inside the invocation span, which carries the correlation id. Its
//! `note` and `cause` are application-caused text (a handler's error chain, a panic's message, a
//! store's error), logged through the process-wide redactor (`agent_surface_policy::redact`).
//!
//! (Storing the terminal result for the idempotency window is the leader guard's
//! `settle`, called by the pipeline right after this.)

use agent_surface_core::{InvokeResult, LogLevel};
use agent_surface_policy::redacted;
use serde_json::Value;

use super::{Stop, Stopped};
use crate::request::Invocation;

/// The call's result and its operator event. The event repeats the span's `correlation_id`, so
/// that a subscriber which filters the (`INFO`) span away still ties a `WARN` or `ERROR` to the
/// id the agent holds.
pub(crate) fn finish(
    outcome: Result<Value, Stop>,
    invocation_id: Option<String>,
    correlation_id: &crate::CorrelationId,
) -> Invocation {
    match outcome {
        Ok(output) => {
            tracing::debug!(target: "agent_surface::invoke", correlation_id = %correlation_id, "ok");
            Invocation {
                result: InvokeResult::ok(output, invocation_id),
                phase: None,
                replayed: false,
                joined: false,
                questions: None,
                correlation_id: crate::CorrelationId::pending(),
            }
        }
        Err(stop) => {
            let not_processed = stop.not_processed();
            let Stopped { error, phase, note, questions, fault, recorded, .. } = stop.into_inner();
            // What the agent is answered: a record's payload as it was kept, else the error's.
            let answered = recorded.as_deref().unwrap_or(error.payload());
            let code = answered.code();
            // A record's payload has no cause of its own here (its call logged it when it ran).
            let chain = if recorded.is_some() { Vec::new() } else { error.cause_chain() };
            let span = tracing::Span::current();
            span.record("code", code.as_str());
            span.record("phase", phase.as_str());
            span.record("retry", answered.retry().as_str());
            // The matrix's level for the code, or `ERROR` for a fault of the service itself.
            let level = if fault.is_some() { LogLevel::Error } else { answered.log_level() };
            macro_rules! event {
                ($level:expr) => {
                    tracing::event!(
                        target: "agent_surface::invoke",
                        $level,
                        correlation_id = %correlation_id,
                        code = code.as_str(),
                        phase = phase.as_str(),
                        // Absent rather than empty when there is none.
                        note = note.as_deref().map(|note| tracing::field::display(redacted(note))),
                        cause = (!chain.is_empty()).then(|| tracing::field::display(redacted(chain.join(": ")))),
                        "error"
                    )
                };
            }
            match level {
                LogLevel::Debug => event!(tracing::Level::DEBUG),
                LogLevel::Info => event!(tracing::Level::INFO),
                LogLevel::Warn => event!(tracing::Level::WARN),
                LogLevel::Error => event!(tracing::Level::ERROR),
            }
            // A record's payload is answered as it was kept; anything else as the error says.
            let mut payload = match recorded {
                Some(recorded) => *recorded,
                None => error.into_payload(),
            };
            payload.set_not_processed(not_processed);
            Invocation {
                result: InvokeResult::error(payload, invocation_id),
                phase: Some(phase),
                replayed: false,
                joined: false,
                questions,
                correlation_id: crate::CorrelationId::pending(),
            }
        }
    }
}
