//! Phase 8a — the audit trail's `execution.started` event, before the handler of a capability
//! with an effect runs, and its `execution.finished` event once the call has an outcome.
//!
//! Input: the call and its validated input. Decision: whether the start was recorded. Codes:
//! `EXECUTION_FAILED {reason: audit-unavailable, transient: true}` under strict audit (the
//! registry's `AuditConfig::strict`, or the capability's `strict_audit`) when the event cannot be
//! written within the budget, or no audit trail is configured; the handler then does not run.
//! Without strict audit a failed write is an `ERROR` operator event and the call goes on. A
//! `read` capability is never audited. A call refused here gives back the confirmation evidence
//! phase 7 consumed for it (`confirmation::give_back`): its retry runs on the same approval.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, Phase};
use agent_surface_policy::{
    AuditConfig, AuditEvent, AuditKind, AuditOutcome, AuditSink, Clock, audit::record_within, idempotency::Fingerprint,
};
use serde_json::Value;

use super::{Call, Outcome, Stop};

/// What phase 8a does for a call, decided once from the registry's trail and the capability.
pub(crate) enum Trail<'a> {
    /// Not audited: a `read` capability, or no trail and no strict audit asked for.
    None,
    /// Strict audit asked for, but the registry has no trail: the call is refused.
    Missing,
    /// Recorded in this trail.
    To(&'a AuditConfig),
}

/// Where calls of this capability are audited (or refused for want of a trail).
pub(crate) fn trail<'a>(call: &Call<'a>) -> Trail<'a> {
    match (&call.inner.config.audit, call.def.effect) {
        (_, Effect::Read) => Trail::None,
        (Some(audit), _) => Trail::To(audit),
        (None, _) if call.def.strict_audit => Trail::Missing,
        (None, _) => Trail::None,
    }
}

/// The refusal of a call whose capability asks for strict audit on a registry without a trail.
pub(crate) fn missing(call: &Call<'_>) -> Stop {
    refused(format!("{} asks for strict audit, but the registry has no audit trail", call.def.name))
}

/// A recorded start, waiting for its outcome. Dropped without [`Started::finish`] (the caller
/// went away mid-call), it records the execution as abandoned.
pub(crate) struct Started {
    sink: Arc<dyn AuditSink>,
    clock: Arc<dyn Clock>,
    budget: std::time::Duration,
    /// The started event, whose fields the finished event repeats.
    event: Option<AuditEvent>,
}

/// Records `execution.started` for the call in `audit` (see [`trail`]); its confirmation id is
/// that of the evidence phase 7 consumed (`consumed`: presented or relayed), else the one the
/// call carried.
pub(crate) async fn start(
    call: &Call<'_>,
    audit: &AuditConfig,
    input: &Value,
    consumed: Option<&str>,
) -> Result<Started, Stop> {
    let confirmation_id = consumed.or(call.evidence());
    let (inner, def) = (call.inner, &*call.def);
    let strict = def.strict_audit || audit.strict;
    let info = call.info();
    let mut event = AuditEvent::of_call(
        inner.config.clock.now(),
        AuditKind::ExecutionStarted { effect: def.effect },
        &info.with_ids(call.request.invocation_id.as_deref(), call.correlation_text()),
    );
    event.input_digest = Some(Fingerprint::of(input).to_string());
    event.confirmation_id = confirmation_id.map(str::to_string);
    let written = record_within(audit.sink.as_ref(), inner.config.clock.as_ref(), audit.budget, &event).await;
    if let Err(e) = written {
        if strict {
            // The event may still land (a write past its budget): close it, best effort.
            let mut finished = event;
            finished.kind = AuditKind::ExecutionFinished {
                outcome: AuditOutcome::Error,
                code: Some(agent_surface_core::ErrorCode::ExecutionFailed),
            };
            finished.at = inner.config.clock.now();
            let _ = record_within(audit.sink.as_ref(), inner.config.clock.as_ref(), audit.budget, &finished).await;
            return Err(refused(format!("strict audit: the started event was not recorded: {e}")));
        }
        tracing::error!(
            target: "agent_surface::audit",
            capability = %def.name,
            error = %agent_surface_policy::redacted(&e),
            "audit event execution.started not recorded; the call runs (audit is not strict)"
        );
    }
    Ok(Started {
        sink: Arc::clone(&audit.sink),
        clock: Arc::clone(&inner.config.clock),
        budget: audit.budget,
        event: Some(event),
    })
}

impl Started {
    /// Records `execution.finished` with the call's outcome.
    pub(crate) async fn finish(mut self, outcome: &Outcome) {
        let Some(mut event) = self.event.take() else { return };
        event.kind = match outcome {
            Ok(_) => AuditKind::ExecutionFinished { outcome: AuditOutcome::Ok, code: None },
            Err(stop) => AuditKind::ExecutionFinished { outcome: AuditOutcome::Error, code: Some(stop.error.code()) },
        };
        event.at = self.clock.now();
        if let Err(e) = record_within(self.sink.as_ref(), self.clock.as_ref(), self.budget, &event).await {
            tracing::error!(
                target: "agent_surface::audit",
                capability = %event.capability,
                error = %agent_surface_policy::redacted(&e),
                "audit event execution.finished not recorded"
            );
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let Some(mut event) = self.event.take() else { return };
        event.kind = AuditKind::ExecutionFinished { outcome: AuditOutcome::Abandoned, code: None };
        event.at = self.clock.now();
        let (sink, clock, budget) = (Arc::clone(&self.sink), Arc::clone(&self.clock), self.budget);
        let write = async move {
            if let Err(e) = record_within(sink.as_ref(), clock.as_ref(), budget, &event).await {
                tracing::error!(target: "agent_surface::audit", error = %agent_surface_policy::redacted(&e), "audit event execution.finished not recorded");
            }
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(write);
        }
    }
}

/// `EXECUTION_FAILED {reason: audit-unavailable}`: a fault of the service (an `ERROR` event).
fn refused(note: String) -> Stop {
    let error = AgentSurfaceError::audit_unavailable(agent_surface_policy::audit::AUDIT_RETRY_AFTER);
    // Refused before the handler starts: the trail records the start first.
    Stop::noted(error, Phase::Execute, note).store_fault(super::Fault::AuditSink).marking(super::Marking::BeforeHandler)
}
