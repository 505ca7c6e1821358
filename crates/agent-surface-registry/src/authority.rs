//! The authority decision, asked the same way by discovery (`snapshot.rs`) and the pipeline's
//! phase 4 (`pipeline/authority.rs`): below both, so that neither reaches into the other.

use agent_surface_policy::authority::denial_of_failure;
use agent_surface_policy::guard::{self, guarded};
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Clock, hooks::NotedDecision};

/// Asks the policy within `budget` on `clock` (`RegistryConfig::authority_budget`, or what is
/// left of a whole snapshot's), failing closed: an error, a panic or an overrun is a denial. A
/// policy that decides at once is not awaited.
pub(crate) async fn decide(
    clock: &dyn Clock,
    policy: &dyn AuthorityPolicy,
    call: CallInfo<'_>,
    budget: std::time::Duration,
) -> AuthorityDecision {
    match decide_noted_at_once(policy, &call) {
        Some(decided) => decided.decision,
        None => decide_noted(clock, policy, call, budget).await.decision,
    }
}

/// [`decide`], with the policy that decided and what it wanted, for the pipeline's operator
/// event (a failed policy is named, and wanted nothing).
pub(crate) async fn decide_noted(
    clock: &dyn Clock,
    policy: &dyn AuthorityPolicy,
    call: CallInfo<'_>,
    budget: std::time::Duration,
) -> NotedDecision {
    match guarded(clock, budget, || policy.decide_noted(call)).await {
        Ok(decided) => decided,
        Err(failure) => denial_of_failure(policy, &call, &failure),
    }
}

/// [`decide_noted`] when the policy decides at once ([`AuthorityPolicy::decide_noted_at_once`],
/// a panic caught); `None` when it cannot.
pub(crate) fn decide_noted_at_once(policy: &dyn AuthorityPolicy, call: &CallInfo<'_>) -> Option<NotedDecision> {
    Some(match guard::at_once(|| policy.decide_noted_at_once(call))? {
        Ok(decided) => decided,
        Err(failure) => denial_of_failure(policy, call, &failure),
    })
}
