//! Phase 9 — output validation and the size cap.
//!
//! Input: the handler's output. Decision: whether the agent may have it. Codes:
//! `EXECUTION_FAILED {reason: output-invalid | output-too-large}`; the output is withheld.

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, Phase};
use serde_json::Value;

use super::{Call, Stop};

/// Whether `value` serializes to more than `limit` bytes (counted without serializing, stopping
/// at the limit).
pub(crate) fn exceeds(value: &Value, limit: usize) -> bool {
    crate::measure::measure(value, usize::MAX, limit).is_err()
}

pub(crate) fn check(call: &Call<'_>, output: Value) -> Result<Value, Stop> {
    let (inner, def) = (call.inner, &*call.def);
    if let Some(v) = &def.output_validator
        && !v.is_valid(&output)
    {
        let first: Vec<String> = v
            .iter_errors(&output)
            .take(3)
            .map(|e| format!("{}: {}", e.instance_path().as_str(), e.schema_path().as_str()))
            .collect();
        return Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputInvalid),
            Phase::Output,
            format!("output violates its schema: {}", first.join("; ")),
        ));
    }
    if exceeds(&output, inner.config.max_output_bytes) {
        return Err(Stop::noted(
            AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge),
            Phase::Output,
            format!("output over {} bytes", inner.config.max_output_bytes),
        ));
    }
    Ok(output)
}
