//! Phase 8b — verification: the capability's post-condition check (reported as phase
//! `execute`).
//!
//! Input: the handler's output, the bound input and the context. Decision: whether the handler's
//! intended result is there. Codes: `EXECUTION_FAILED {reason: verification-failed}` (the check
//! says it is not), `EXECUTION_FAILED {reason: outcome-unknown}` with a read-the-state repair (the
//! check cannot tell, returns an error, panics, runs past the time budget, or the registry is
//! disposed while it runs). Both have retry `no`.

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, Phase};
use serde_json::Value;

use super::{Call, Stop};
use crate::handler::{ErasedVerify, Verification};
use agent_surface_policy::guard::catch_future;

/// Runs the capability's post-condition `verify` (its own, which the caller unwrapped) on the
/// handler's `output`.
pub(crate) async fn check(call: &Call<'_>, verify: &ErasedVerify, input: &Value, output: Value) -> Result<Value, Stop> {
    let Call { inner, options, ref def, tracked, .. } = *call;
    let ctx = &call.ctx;
    let unknown = |note: String| Stop::noted(super::execute::unknown_outcome(tracked), Phase::Execute, note);
    // The handler consumed its decoded input; the check gets a fresh one from the bound JSON.
    let decoded = match (def.handler.decode_input)(input) {
        Ok(d) => d,
        Err(e) => return Err(unknown(format!("input could not be decoded for verification: {e}"))),
    };
    // The handler's token fired when execution ended; the check gets a token of its own, which
    // fires when the check ends.
    let ctx = ctx.renewed();
    let _end = ctx.end_on_drop();
    let call = &verify.call;
    let fut = catch_future(|| call(ctx, decoded, output.clone()));
    let budget = super::time_budget(inner, def, options);
    let sleep = inner.config.clock.sleep(budget);
    let verdict = tokio::select! {
        biased;
        r = fut => r,
        _ = inner.disposed.cancelled() => return Err(unknown("registry disposed during verification".to_string())),
        _ = sleep => return Err(unknown(format!("verification ran past {budget:?}"))),
    };
    match verdict {
        Ok(Ok(Verification::Verified)) => Ok(output),
        Ok(Ok(Verification::NotVerified)) => Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::VerificationFailed),
            Phase::Execute,
            "post-condition not met",
        )),
        Ok(Ok(Verification::Unknown)) => Err(unknown("verification could not decide".to_string())),
        Ok(Err(e)) => Err(unknown(format!("verification failed: {}", e.cause_chain().join(": ")))),
        Err(text) => Err(unknown(format!("verification panicked: {text}")).fault()),
    }
}
