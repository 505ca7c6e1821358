//! Phase 2 — resolution of the capability and its target registration.
//!
//! Input: the request and the live state. Decision: the capability definition and the one live
//! registration the call runs against. Codes: `CAPABILITY_NOT_FOUND` (unknown, or no live instance
//! and no tombstone), `COMPONENT_UNMOUNTED {phase: resolve}` (tombstone hit), `STALE_CAPABILITY`
//! (replaced registration, other surface, outdated version on a destructive/external call, a tool
//! version that is not the live one on any call),
//! `AMBIGUOUS_INSTANCE` (several live instances and none named).
//!
//! Several live instances and none named are held back as [`Resolution::Ambiguous`]: phase 4
//! asks the authority policy about each of them, so that the answer lists only the instances this
//! consumer may see (and a call that leaves one visible runs against it).

use std::sync::Arc;

use agent_surface_core::details::{InstanceRef, StaleReason, UnmountPhase};
use agent_surface_core::{AgentSurfaceError, Phase, Timestamp};

use super::{Arrival, Stop};
use crate::define::CapabilityDef;
use crate::live::{Registration, State, Tombstone};
use crate::request::InvokeRequest;

pub(crate) struct Resolved {
    pub(crate) def: Arc<CapabilityDef>,
    pub(crate) registration: Arc<Registration>,
}

/// The outcome of phases 2 and 3, held back until phase 4 has decided.
pub(crate) enum Resolution {
    /// The capability and the registration the call runs against.
    Resolved(Resolved),
    /// The call did not resolve: the definition its name denotes, if any (phase 4 asks the
    /// policy about it without looking the name up again), the instance resolution found before
    /// it stopped, if any — live, or a tombstone's (phase 4 asks about that instance, as
    /// discovery does: a stop must not show an instance the policy hides) —, and why.
    Unresolved(Option<Arc<CapabilityDef>>, Option<Seen>, Stop),
    /// Several live instances and none named: `AMBIGUOUS_INSTANCE`, unless the authority policy
    /// hides all of them but one from this consumer.
    Ambiguous(Ambiguous),
}

/// The instance a call that did not resolve met: its live registration, or the tombstone of one.
pub(crate) struct Seen {
    pub(crate) instance_id: Arc<str>,
    pub(crate) registration_id: Arc<str>,
}

impl Seen {
    fn live(registration: &Registration) -> Option<Seen> {
        Some(Seen {
            instance_id: registration.instance_id.clone(),
            registration_id: registration.registration_id.clone(),
        })
    }

    fn tomb(t: &Tombstone) -> Option<Seen> {
        Some(Seen { instance_id: t.instance_id.clone(), registration_id: t.registration_id.clone() })
    }
}

/// Several live instances can handle a call that names none.
pub(crate) struct Ambiguous {
    pub(crate) def: Arc<CapabilityDef>,
    /// The live registrations, in instance-id order.
    pub(crate) candidates: Vec<Arc<Registration>>,
    /// What a call resolved to one of them would meet next (a stale surface version, a disabled
    /// capability), the same for each.
    pub(crate) then: Option<Stop>,
}

impl Ambiguous {
    /// `AMBIGUOUS_INSTANCE` listing `candidates`.
    pub(crate) fn stop<'a>(candidates: impl IntoIterator<Item = &'a Arc<Registration>>) -> Stop {
        let instances = candidates
            .into_iter()
            .map(|r| InstanceRef {
                instance_id: r.instance_id.to_string(),
                registration_id: r.registration_id.to_string(),
                description: r.description.clone(),
                context: r.context.clone(),
            })
            .collect();
        stop(AgentSurfaceError::ambiguous_instance(instances), "no target named")
    }
}

impl Resolution {
    /// The same outcome after phase 3: a resolved capability (or the one several instances
    /// share, unless it already met a stop) that `check` finds unavailable does not resolve.
    pub(crate) fn and_available(self, check: impl Fn(&CapabilityDef) -> Result<(), Stop>) -> Resolution {
        match self {
            Resolution::Resolved(resolved) => match check(&resolved.def) {
                Ok(()) => Resolution::Resolved(resolved),
                Err(stop) => Resolution::Unresolved(Some(resolved.def), Seen::live(&resolved.registration), stop),
            },
            Resolution::Ambiguous(mut ambiguous) => {
                if ambiguous.then.is_none() {
                    ambiguous.then = check(&ambiguous.def).err();
                }
                Resolution::Ambiguous(ambiguous)
            }
            unresolved => unresolved,
        }
    }

    /// The outcome as reported when nothing else decides.
    pub(crate) fn into_result(self) -> Result<Resolved, Stop> {
        match self {
            Resolution::Resolved(resolved) => Ok(resolved),
            Resolution::Unresolved(_, _, stop) => Err(stop),
            Resolution::Ambiguous(ambiguous) => Err(Ambiguous::stop(&ambiguous.candidates)),
        }
    }
}

/// The live registration a call runs against, or the several it could.
enum Picked {
    One(Arc<Registration>),
    Several(Vec<Arc<Registration>>),
}

fn stop(error: AgentSurfaceError, note: impl Into<String>) -> Stop {
    Stop::noted(error, Phase::Resolve, note)
}

fn not_found(note: &str) -> Stop {
    stop(AgentSurfaceError::capability_not_found(), note)
}

/// `CAPABILITY_NOT_FOUND` for a name no capability has. A name in the tool-name form
/// (`refunds-issue`, as MCP and the toolset spell it) gets a did-you-mean in the operator note
/// only: the payload stays the same detail-free one, and the hint is read from the name alone —
/// never from what is registered — so it shows nothing of a hidden capability, not even by time.
fn unknown_name(name: &str) -> Stop {
    match crate::id::capability_from_tool_name(name) {
        Some(capability) => stop(
            AgentSurfaceError::capability_not_found(),
            format!("no such capability; `{name}` is a tool name: did you mean the capability name `{capability}`?"),
        ),
        None => not_found("no such capability"),
    }
}

fn tombstone_stop(state: &State, t: &Tombstone) -> Stop {
    let note = format!("tombstone of {} (created {}, expires {})", t.registration_id, t.created_at, t.expires_at);
    if let Some(live) = &t.replaced_by
        && state.registrations.contains_key(live)
    {
        return stop(
            AgentSurfaceError::stale_capability(StaleReason::RegistrationReplaced, Some(live.to_string())),
            note,
        );
    }
    // A replacement that is gone too, or an instance mounted again after an unmount: point at
    // the instance's current registration, if any. A call that names the old registration gets
    // the same answer whether or not it names the instance too (a live instance with another
    // registration is `registration-replaced` below).
    if let Some(current) = state.types.get(&t.type_id).and_then(|ty| ty.instances.get(&t.instance_id)) {
        return stop(
            AgentSurfaceError::stale_capability(
                StaleReason::RegistrationReplaced,
                Some(current.registration_id.to_string()),
            ),
            note,
        );
    }
    stop(AgentSurfaceError::component_unmounted(UnmountPhase::Resolve), note)
}

/// Phase 2: the capability the call names and the registration it runs against, read from the
/// live state (held by the caller under one lock with phase 3).
pub(crate) fn resolve(arrival: &Arrival<'_>, state: &State) -> Resolution {
    let (request, surface_id) = (arrival.request, &*arrival.inner.surface_id);
    // The clock is read only when a tombstone is looked up (the arrival's reading, if taken).
    let now = || arrival.now();
    let Some(def) = state.capabilities.get(request.capability.as_str()) else {
        return Resolution::Unresolved(None, None, unknown_name(request.capability.as_str()));
    };
    match registration(state, surface_id, def, request, now) {
        Ok((Picked::One(registration), None)) => Resolution::Resolved(Resolved { def: def.clone(), registration }),
        Ok((Picked::One(registration), Some(stop))) => {
            Resolution::Unresolved(Some(def.clone()), Seen::live(&registration), stop)
        }
        Err((stop, seen)) => Resolution::Unresolved(Some(def.clone()), seen, stop),
        Ok((Picked::Several(candidates), then)) => {
            Resolution::Ambiguous(Ambiguous { def: def.clone(), candidates, then })
        }
    }
}

/// The live registration of `def` the call runs against (or the several it could), and the
/// staleness stop it meets, if any (a tool version that is not the live one, an outdated surface
/// version on a destructive or external call); or the stop and the tombstone's instance it met.
fn registration(
    state: &State,
    surface_id: &str,
    def: &CapabilityDef,
    request: &InvokeRequest,
    now: impl Fn() -> Timestamp,
) -> Result<(Picked, Option<Stop>), (Stop, Option<Seen>)> {
    let Some(ty) = state.types.get(&def.type_id) else { return Err((not_found("type missing"), None)) };

    if let Some(presented) = &request.surface_id
        && presented.as_str() != surface_id
    {
        return Err((
            stop(
                AgentSurfaceError::stale_capability(StaleReason::SurfaceReloaded, None),
                format!("presented surface {presented}, current {surface_id}"),
            ),
            None,
        ));
    }

    let target = request.target.as_ref();
    let instance_id = target.and_then(|t| t.instance_id.as_deref());
    let registration_id = target.and_then(|t| t.registration_id.as_deref());
    let registration = match (instance_id, registration_id) {
        (Some(iid), rid) => match ty.instances.get(iid) {
            Some(live) => {
                if let Some(rid) = rid
                    && rid != &*live.registration_id
                {
                    // The live instance goes with the stop: phase 4 asks about it before the
                    // answer names its registration.
                    let replaced = stop(
                        AgentSurfaceError::stale_capability(
                            StaleReason::RegistrationReplaced,
                            Some(live.registration_id.to_string()),
                        ),
                        format!("presented registration {rid}"),
                    );
                    return Ok((Picked::One(live.clone()), Some(replaced)));
                }
                Picked::One(live.clone())
            }
            None => {
                let tomb = rid
                    .and_then(|rid| state.tombstones.by_registration(rid, now()))
                    .or_else(|| state.tombstones.by_instance(&def.type_id, iid, now()));
                return Err(match tomb {
                    Some(t) => (tombstone_stop(state, t), Seen::tomb(t)),
                    None => (not_found("no live instance with this id"), None),
                });
            }
        },
        (None, Some(rid)) => match state.registrations.get(rid) {
            Some(live) if live.type_id == def.type_id => Picked::One(live.clone()),
            Some(_) => return Err((not_found("registration of another type"), None)),
            None => {
                return Err(match state.tombstones.by_registration(rid, now()) {
                    Some(t) if t.type_id == def.type_id => (tombstone_stop(state, t), Seen::tomb(t)),
                    _ => (not_found("no such registration"), None),
                });
            }
        },
        (None, None) => {
            let mut live = ty.instances.values();
            match (live.next(), live.next()) {
                (Some(only), None) => Picked::One(only.clone()),
                (None, _) => {
                    return Err(match state.tombstones.by_type(&def.type_id, now()) {
                        Some(t) => (tombstone_stop(state, t), Seen::tomb(t)),
                        None => (not_found("no live instance"), None),
                    });
                }
                (Some(_), Some(_)) => Picked::Several(ty.instances.values().cloned().collect()),
            }
        }
    };

    // A named tool version that is not the live one: stale whatever the effect (unlike the
    // surface version, which binds destructive and external calls only), and first, since its
    // answer names the version to plan against.
    if let Some(presented) = &request.tool_version
        && presented.as_str() != &*def.tool_version
    {
        let note = format!("presented tool version {presented}, live {}", def.tool_version);
        return Ok((registration, Some(stop(AgentSurfaceError::stale_tool_version(&*def.tool_version), note))));
    }
    let stale = match request.surface_version {
        Some(presented)
            if def.effect.requires_fresh_surface() && (presented < ty.changed_at || presented > state.version) =>
        {
            Some(stop(
                AgentSurfaceError::stale_capability(StaleReason::SurfaceVersionMismatch, None),
                format!("presented version {presented}, type changed at {}, current {}", ty.changed_at, state.version),
            ))
        }
        _ => None,
    };
    Ok((registration, stale))
}
