//! Phase 4 — authority.
//!
//! Input: the consumer, the request, and the outcome of phases 2 and 3, held back. Decision: the
//! authority policy's (allow when none is configured). Codes: `NOT_AUTHENTICATED`,
//! `NOT_AUTHORIZED {origin}`, `CAPABILITY_NOT_FOUND` (hidden: indistinguishable from a name that
//! never existed), `CAPABILITY_NOT_AVAILABLE {reason}` (disabled for this consumer). A policy
//! that fails, panics or runs over its budget denies; the failure goes to the operator channel
//! only.
//!
//! The policy is asked before the outcome of resolution and availability is reported, and it is
//! asked for every call, including one that names no capability at all. So a hidden capability
//! and a name that never existed take the same path — one policy evaluation, then the same
//! `CAPABILITY_NOT_FOUND` payload — and a hidden capability cannot show through a resolve- or
//! availability-phase error (a tombstone, a stale token, a disabled state). For a name that does
//! not exist the decision is computed and ignored.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, Phase};
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, hooks::NotedDecision};

use super::resolve::{Ambiguous, Resolution, Resolved};
use super::{Arrival, Stop};
use crate::registry::Inner;

/// Decides on the call, then reports either the policy's refusal or the held-back outcome of
/// phases 2 and 3.
///
/// Every path does the same work before the decision: one policy evaluation on a `CallInfo`
/// built from what resolution found (the definition, when the name denotes one; the name alone
/// otherwise), with no second look at the live state.
///
/// The policy is the registry's, handed over already unwrapped (the pipeline skips this phase
/// when none is configured).
pub(crate) async fn check(
    arrival: &Arrival<'_>,
    policy: &dyn AuthorityPolicy,
    resolution: Resolution,
) -> Result<Resolved, Stop> {
    let inner = arrival.inner;
    let resolution = match resolution {
        // Boxed: its state (a decision per instance) would otherwise enlarge every call's.
        Resolution::Ambiguous(ambiguous) => {
            return Box::pin(check_ambiguous(inner, policy, &arrival.options.consumer, ambiguous)).await;
        }
        other => other,
    };
    let (call, known) = asked(arrival, &resolution);
    let noted =
        crate::authority::decide_noted(inner.config.clock.as_ref(), policy, call, inner.config.authority_budget).await;
    concluded(noted, resolution, known)
}

/// [`check`] when the policy decides at once ([`AuthorityPolicy::decide_noted_at_once`]): `Ok`
/// with what `check` would answer, or the resolution given back when the policy needs an await
/// — and when resolution was ambiguous, which `check` asks about per instance.
pub(crate) fn at_once(
    arrival: &Arrival<'_>,
    policy: &dyn AuthorityPolicy,
    resolution: Resolution,
) -> Result<Result<Resolved, Stop>, Resolution> {
    if matches!(resolution, Resolution::Ambiguous(_)) {
        return Err(resolution);
    }
    let (call, known) = asked(arrival, &resolution);
    match crate::authority::decide_noted_at_once(policy, &call) {
        Some(noted) => Ok(concluded(noted, resolution, known)),
        None => Err(resolution),
    }
}

/// What the policy is asked about the call, and whether the capability is known: a
/// `CallInfo` built from what resolution found (the definition, when the name denotes one; the
/// name alone otherwise).
fn asked<'c>(arrival: &'c Arrival<'_>, resolution: &'c Resolution) -> (CallInfo<'c>, bool) {
    let consumer = &arrival.options.consumer;
    match resolution {
        Resolution::Resolved(Resolved { def, registration: reg }) => {
            (def.call_info(consumer).with_instance(&reg.instance_id).with_registration(&reg.registration_id), true)
        }
        // The capability exists without resolving (a stale token, a disabled capability, a
        // tombstone): asked about the instance resolution met, live or unmounted, as discovery
        // asks, so that the answer shows nothing of an instance the policy hides; about the
        // capability as a whole when it met none.
        Resolution::Unresolved(Some(def), Some(seen), _) => {
            (def.call_info(consumer).with_instance(&seen.instance_id).with_registration(&seen.registration_id), true)
        }
        Resolution::Unresolved(Some(def), None, _) => (def.call_info(consumer), true),
        // A name that does not exist is asked about too, as a call of unknown effect, and the
        // decision is ignored.
        Resolution::Unresolved(None, _, _) | Resolution::Ambiguous(_) => {
            let name = arrival.request.capability.as_str();
            let type_id = name.split_once('.').map_or("", |(t, _)| t);
            (CallInfo::new(consumer, name, type_id, Effect::Write, false), false)
        }
    }
}

/// The held-back outcome of phases 2 and 3, or the policy's refusal: a known capability the
/// policy hides is refused as one that does not exist.
fn concluded(noted: NotedDecision, resolution: Resolution, known: bool) -> Result<Resolved, Stop> {
    if noted.decision == AuthorityDecision::Hide && known {
        // A fixed note, built as the resolve phase builds its "no such capability": formatting
        // the policy's name here alone made a hidden name measurably slower to refuse than an
        // unknown one (`cargo bench -p agent-surface-http --bench not_found`). The policy engine
        // names the deciding policy in its own `DEBUG` event.
        return Err(Stop::noted(AgentSurfaceError::capability_not_found(), Phase::Authority, "hidden (hiddenMatch)"));
    }
    let resolved = resolution.into_result()?;
    admit(noted, resolved)
}

/// The call as the decision on it says. The operator note names the policy that decided and what
/// it wanted (`policy require-role denied: wants role "agent"`); the agent's payload never does.
fn admit(noted: NotedDecision, resolved: Resolved) -> Result<Resolved, Stop> {
    let NotedDecision { decision, by: policy, wants, .. } = noted;
    let wanted = wants.map(|w| format!(": wants {w}")).unwrap_or_default();
    let stop = |error, note: &str| Err(Stop::noted(error, Phase::Authority, format!("policy {policy} {note}{wanted}")));
    match decision {
        AuthorityDecision::Allow => Ok(resolved),
        AuthorityDecision::Deny { origin } => stop(AgentSurfaceError::not_authorized(origin), "denied"),
        AuthorityDecision::Unauthenticated => {
            stop(AgentSurfaceError::not_authenticated(), "refused an anonymous caller")
        }
        AuthorityDecision::Hide => {
            Err(Stop::noted(AgentSurfaceError::capability_not_found(), Phase::Authority, "hidden (hiddenMatch)"))
        }
        AuthorityDecision::Disable { reason } => {
            stop(AgentSurfaceError::capability_not_available(reason), "disabled it for this consumer (disabledBy)")
        }
    }
}

/// Several live instances and none named: the policy is asked about the capability as a whole
/// (as for any call that did not resolve: a hidden capability costs one evaluation, as an unknown
/// name does), then about each instance as a call to it would be, as discovery asks. The answer
/// lists only the instances this consumer may see: none visible is `CAPABILITY_NOT_FOUND` (the
/// capability is not in its snapshot either), one visible is the call's target (its own decision
/// applies), several are `AMBIGUOUS_INSTANCE` listing them.
async fn check_ambiguous(
    inner: &Inner,
    policy: &dyn AuthorityPolicy,
    consumer: &Consumer,
    ambiguous: Ambiguous,
) -> Result<Resolved, Stop> {
    let Ambiguous { def, candidates, then } = ambiguous;
    let clock = inner.config.clock.as_ref();
    let budget = inner.config.authority_budget;
    let whole = def.call_info(consumer);
    let hidden =
        || Err(Stop::noted(AgentSurfaceError::capability_not_found(), Phase::Authority, "hidden (hiddenMatch)"));
    if crate::authority::decide(clock, policy, whole, budget).await == AuthorityDecision::Hide {
        return hidden();
    }
    let decisions = futures_util::future::join_all(candidates.iter().map(|reg| {
        let call = whole.with_instance(&reg.instance_id).with_registration(&reg.registration_id);
        crate::authority::decide(clock, policy, call, budget)
    }))
    .await;
    let mut visible: Vec<(Arc<crate::live::Registration>, AuthorityDecision)> =
        candidates.into_iter().zip(decisions).filter(|(_, d)| *d != AuthorityDecision::Hide).collect();
    if visible.len() > 1 {
        return Err(Ambiguous::stop(visible.iter().map(|(reg, _)| reg)));
    }
    let Some((registration, decision)) = visible.pop() else { return hidden() };
    if let Some(stop) = then {
        return Err(stop);
    }
    let noted = match decision {
        AuthorityDecision::Allow => NotedDecision::allow(),
        decision => NotedDecision::new(decision, policy.name(), None),
    };
    admit(noted, Resolved { def, registration })
}
