//! Phase 10 — the end of a call: the result, and the operator event.
//!
//! (Storing the terminal result for the idempotency window is the admission guard's
//! `settle`, called by the pipeline right after this.)

use agent_surface_core::InvokeResult;
use serde_json::Value;

use super::Stop;
use crate::request::Invocation;

pub(crate) fn finish(outcome: Result<Value, Stop>, invocation_id: Option<String>) -> Invocation {
    let span = tracing::Span::current();
    match outcome {
        Ok(output) => {
            tracing::debug!(target: "agent_surface::invoke", "ok");
            Invocation {
                result: InvokeResult::ok(output, invocation_id),
                phase: None,
                replayed: false,
                joined: false,
                questions: None,
            }
        }
        Err(stop) => {
            let Stop { error, phase, note, questions } = stop;
            let code = error.code();
            let chain = error.cause_chain();
            span.record("code", code.as_str());
            span.record("phase", phase.as_str());
            span.record("retry", error.payload().retry().as_str());
            tracing::info!(
                target: "agent_surface::invoke",
                code = code.as_str(),
                phase = phase.as_str(),
                note = note.as_deref().unwrap_or(""),
                cause = %chain.join(": "),
                "error"
            );
            Invocation {
                result: InvokeResult::error(error.into_payload(), invocation_id),
                phase: Some(phase),
                replayed: false,
                joined: false,
                questions: questions.map(|q| *q),
            }
        }
    }
}
