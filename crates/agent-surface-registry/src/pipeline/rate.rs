//! Phase 6 — rate limits and the action queue.
//!
//! Input: the consumer, the capability and the validated input. Decision: the rate limiter's
//! (never limited when none is configured). Code: `RATE_LIMITED {reason, retryAfterMs}`.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Phase};
use agent_surface_policy::{CallInfo, Consumer, RateDecision};
use serde_json::Value;

use super::Stop;
use crate::define::CapabilityDef;
use crate::live::Registration;
use crate::registry::Inner;

/// A held permit (a queue slot, say), released when the call ends.
pub(crate) type Permit = Option<Box<dyn Send>>;

pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    consumer: &Consumer,
    def: &CapabilityDef,
    reg: &Registration,
    input: &Value,
) -> Result<Permit, Stop> {
    let Some(limiter) = &inner.config.rate_limiter else { return Ok(None) };
    let call = CallInfo::new(consumer, &def.name, &def.type_id, def.effect, def.idempotent)
        .with_instance(&reg.instance_id)
        .with_registration(&reg.registration_id)
        .with_input(input);
    match limiter.acquire(call, inner.config.clock.now()).await {
        RateDecision::Allow(permit) => Ok(permit),
        RateDecision::Limited { reason, retry_after } => {
            Err(Stop::new(AgentSurfaceError::rate_limited(reason, retry_after), Phase::Rate))
        }
    }
}
