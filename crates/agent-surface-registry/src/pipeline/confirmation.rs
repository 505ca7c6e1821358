//! Phase 7 — confirmation.
//!
//! Input: the consumer, the capability, the validated input and the evidence the call carries.
//! Decision: the confirmation gate's (never gated when none is configured). Codes:
//! `CONFIRMATION_REQUIRED`, `CONFIRMATION_INVALID {reason}`.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Phase};
use agent_surface_policy::{CallInfo, ConfirmationDecision, Consumer};
use serde_json::Value;

use super::Stop;
use crate::define::CapabilityDef;
use crate::live::Registration;
use crate::registry::Inner;

pub(crate) async fn check(
    inner: &Arc<Inner>,
    consumer: &Consumer,
    def: &CapabilityDef,
    reg: &Registration,
    input: &Value,
    confirmation_id: Option<&str>,
) -> Result<(), Stop> {
    let Some(gate) = &inner.config.confirmation else { return Ok(()) };
    let call = CallInfo::new(consumer, &def.name, &def.type_id, def.effect, def.idempotent)
        .with_instance(&reg.instance_id)
        .with_input(input);
    match gate.check(call, confirmation_id, inner.config.clock.now()).await {
        ConfirmationDecision::Proceed => Ok(()),
        ConfirmationDecision::Required { confirmation_id, summary, expires_at, origin } => Err(Stop::new(
            AgentSurfaceError::confirmation_required(confirmation_id, summary, expires_at, def.effect, origin),
            Phase::Confirmation,
        )),
        ConfirmationDecision::Invalid(reason) => {
            Err(Stop::new(AgentSurfaceError::confirmation_invalid(reason), Phase::Confirmation))
        }
    }
}
