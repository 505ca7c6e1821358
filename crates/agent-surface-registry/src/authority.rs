//! The authority decision, asked the same way by discovery (`snapshot.rs`) and the pipeline's
//! phase 4 (`pipeline/authority.rs`): below both, so that neither reaches into the other.

use agent_surface_core::details::Origin;
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Clock, guard::guarded, hooks::NotedDecision};

/// Asks the policy within `budget` on `clock` (`RegistryConfig::authority_budget`, or what is
/// left of a whole snapshot's), failing closed: an error, a panic or an overrun is a denial.
pub(crate) async fn decide(
    clock: &dyn Clock,
    policy: &dyn AuthorityPolicy,
    call: CallInfo<'_>,
    budget: std::time::Duration,
) -> AuthorityDecision {
    decide_noted(clock, policy, call, budget).await.decision
}

/// [`decide`], with the policy that decided and what it wanted, for the pipeline's operator
/// event (a failed policy is named, and wanted nothing).
pub(crate) async fn decide_noted(
    clock: &dyn Clock,
    policy: &dyn AuthorityPolicy,
    call: CallInfo<'_>,
    budget: std::time::Duration,
) -> NotedDecision {
    let failed = |by| NotedDecision::new(AuthorityDecision::Deny { origin: Origin::Client }, by, None);
    match guarded(clock, budget, || policy.decide_noted(call)).await {
        Ok(decided) => decided,
        // A panic is broken user code: an `ERROR`; an error or an overrun a `WARN`.
        Err(failure @ agent_surface_policy::guard::Failure::Panic(_)) => {
            tracing::error!(
                target: "agent_surface::policy",
                policy = policy.name(),
                capability = call.capability,
                cause = %agent_surface_policy::redacted(&failure),
                "authority policy panicked; denying"
            );
            failed(policy.name())
        }
        Err(failure) => {
            tracing::warn!(
                target: "agent_surface::policy",
                policy = policy.name(),
                capability = call.capability,
                cause = %agent_surface_policy::redacted(&failure),
                "authority policy failed; denying"
            );
            failed(policy.name())
        }
    }
}
