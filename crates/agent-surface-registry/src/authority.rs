//! The authority decision, asked the same way by discovery (`snapshot.rs`) and the pipeline's
//! phase 4 (`pipeline/authority.rs`): below both, so that neither reaches into the other.

use agent_surface_core::details::Origin;
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Clock, guarded};

/// Asks the policy within `budget` on `clock` (`RegistryConfig::authority_budget`, or what is
/// left of a whole snapshot's), failing closed: an error, a panic or an overrun is a denial.
pub(crate) async fn decide(
    clock: &dyn Clock,
    policy: &dyn AuthorityPolicy,
    call: CallInfo<'_>,
    budget: std::time::Duration,
) -> AuthorityDecision {
    match guarded(clock, budget, || policy.decide(call)).await {
        Ok(decision) => decision,
        // A panic is broken user code: an `ERROR`; an error or an overrun a `WARN`.
        Err(failure @ agent_surface_policy::Failure::Panic(_)) => {
            tracing::error!(
                target: "agent_surface::policy",
                policy = policy.name(),
                capability = call.capability,
                cause = %failure,
                "authority policy panicked; denying"
            );
            AuthorityDecision::Deny { origin: Origin::Client }
        }
        Err(failure) => {
            tracing::warn!(
                target: "agent_surface::policy",
                policy = policy.name(),
                capability = call.capability,
                cause = %failure,
                "authority policy failed; denying"
            );
            AuthorityDecision::Deny { origin: Origin::Client }
        }
    }
}
