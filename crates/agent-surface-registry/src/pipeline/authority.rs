//! Phase 4 — authority.
//!
//! Input: the consumer and the resolved capability. Decision: the authority policy's (allow when
//! none is configured). Codes: `NOT_AUTHENTICATED`, `NOT_AUTHORIZED {origin}`,
//! `CAPABILITY_NOT_FOUND` (hidden: indistinguishable from a name that never existed),
//! `CAPABILITY_NOT_AVAILABLE {reason}` (disabled for this consumer). A policy that fails, panics
//! or runs over its budget denies; the failure goes to the operator channel only.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{AgentSurfaceError, Phase};
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Consumer};
use futures_util::FutureExt;

use super::Stop;
use crate::define::CapabilityDef;
use crate::live::Registration;
use crate::registry::Inner;

/// The longest an authority policy may take before the call is denied.
pub(crate) const POLICY_BUDGET: Duration = Duration::from_secs(5);

/// Asks the policy, failing closed: an error, a panic or an overrun is a denial.
pub(crate) async fn decide(policy: &dyn AuthorityPolicy, call: CallInfo<'_>) -> AuthorityDecision {
    let fut = AssertUnwindSafe(policy.decide(call)).catch_unwind();
    match tokio::time::timeout(POLICY_BUDGET, fut).await {
        Ok(Ok(Ok(decision))) => decision,
        Ok(Ok(Err(e))) => {
            tracing::warn!(target: "agent_surface::policy", policy = policy.name(), error = %e, "policy failed; denying");
            AuthorityDecision::Deny { origin: Origin::Client }
        }
        Ok(Err(_panic)) => {
            tracing::error!(target: "agent_surface::policy", policy = policy.name(), "policy panicked; denying");
            AuthorityDecision::Deny { origin: Origin::Client }
        }
        Err(_elapsed) => {
            tracing::warn!(target: "agent_surface::policy", policy = policy.name(), "policy timed out; denying");
            AuthorityDecision::Deny { origin: Origin::Client }
        }
    }
}

pub(crate) async fn check(
    inner: &Arc<Inner>,
    consumer: &Consumer,
    def: &CapabilityDef,
    reg: &Registration,
) -> Result<(), Stop> {
    let Some(policy) = &inner.config.authority else { return Ok(()) };
    let call =
        CallInfo::new(consumer, &def.name, &def.type_id, def.effect, def.idempotent).with_instance(&reg.instance_id);
    let stop = |e| Err(Stop::noted(e, Phase::Authority, format!("policy {}", policy.name())));
    match decide(policy.as_ref(), call).await {
        AuthorityDecision::Allow => Ok(()),
        AuthorityDecision::Deny { origin } => stop(AgentSurfaceError::not_authorized(origin)),
        AuthorityDecision::Unauthenticated => stop(AgentSurfaceError::not_authenticated()),
        AuthorityDecision::Hide => stop(AgentSurfaceError::capability_not_found()),
        AuthorityDecision::Disable { reason } => stop(AgentSurfaceError::capability_not_available(reason)),
    }
}
