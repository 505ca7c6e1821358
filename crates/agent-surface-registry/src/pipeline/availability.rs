//! Phase 3 — availability.
//!
//! Input: the resolved capability. Decision: whether it is enabled. Code:
//! `CAPABILITY_NOT_AVAILABLE {reason}` with the same reason discovery shows.

use agent_surface_core::{AgentSurfaceError, Phase};

use super::Stop;
use crate::define::CapabilityDef;
use crate::live::State;

/// Phase 3: whether the capability is enabled right now (read under phase 2's lock).
pub(crate) fn check(state: &State, def: &CapabilityDef) -> Result<(), Stop> {
    match state.disabled.get(&def.name) {
        None => Ok(()),
        Some(reason) => Err(Stop::noted(
            AgentSurfaceError::capability_not_available(reason.clone()),
            Phase::Availability,
            "disabled at run time",
        )),
    }
}
