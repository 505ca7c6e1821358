//! Phase 5b — questions: the capability's ask step, over the decoded input and the client's
//! answers ([`crate::questions`]).
//!
//! Input: the decoded input, the context and the answers the call carries. Decision: go on, or
//! stop with the open questions. Codes: `PRECONDITION_FAILED {reason: client-input-required}`
//! (questions open; the stop lists them), the author's `PRECONDITION_FAILED` (an [`Unmet`] from
//! the ask step), `EXECUTION_FAILED {reason: handler-error}` (the ask step panicked).

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, Phase};

use super::{Call, Stop};
use crate::handler::ErasedAsk;
use crate::handler::{Decoded, Unmet};

/// Runs the capability's ask step `ask` (its own, which the caller unwrapped) on the decoded
/// input, with the answers the call carries.
pub(crate) fn check(call: &Call<'_>, ask: &ErasedAsk, decoded: &Decoded) -> Result<(), Stop> {
    let ctx = &call.ctx;
    let answers = ctx.answers();
    match agent_surface_policy::guard::catch(|| (ask.ask)(ctx, decoded.input(), answers)) {
        Ok(Some(Ok(questions))) if questions.is_empty() => Ok(()),
        Ok(Some(Ok(questions))) => {
            let mut stop = Stop::noted(AgentSurfaceError::client_input_required(), Phase::Input, "questions open");
            stop.questions = Some(questions);
            Err(stop)
        }
        Ok(Some(Err(unmet))) => Err(Stop::noted(Unmet::into_error(unmet), Phase::Input, "ask step unmet")),
        // The input is of the declared type once the definition is checked.
        Ok(None) => Ok(()),
        Err(_) => Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError),
            Phase::Input,
            "ask step panicked",
        )
        .fault()),
    }
}
