//! What a call's phases share: the [`Arrival`] (phases 1–4), built when the call arrives, and the
//! [`Call`] (phases 5–10), built once authority has admitted it.

use std::sync::Arc;

use agent_surface_core::Timestamp;

use crate::correlation::CorrelationId;
use crate::ctx::Ctx;
use crate::define::CapabilityDef;
use crate::live::Registration;
use crate::registry::Inner;
use crate::request::{InvokeOptions, InvokeRequest};
use crate::telemetry::Timing;

use super::hold::Hold;

/// How a call was answered from a record instead of running (under its natural key: see
/// [`Arrival::answered`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// The stored result of the call that ran.
    Replayed,
    /// The result of the identical call in flight.
    Joined,
}

/// What phases 1–4 of one call share, built once when it arrives: the registry, the request (its
/// input taken: admission borrows it, phase 5 owns it), the caller's options, the correlation id,
/// one clock reading (taken when first needed), and whether the call is recorded. Each of these
/// phases is a function of `&Arrival` and its own input.
pub(crate) struct Arrival<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) request: &'a InvokeRequest,
    pub(crate) options: &'a InvokeOptions,
    pub(crate) correlation: &'a CorrelationId,
    /// The registry's clock when a phase first asked ([`Arrival::now`]).
    pub(super) now: std::sync::OnceLock<Timestamp>,
    /// Whether the call is recorded: only a call with an invocation id is.
    pub(crate) tracked: bool,
    /// Whether the reserved target argument is left in the input after it was lifted
    /// ([`InvokeRequest::lift_target_argument`]): phase 5 reports it.
    pub(crate) target_argument_left: bool,
    /// Set when the call is answered from its natural key's record instead of running (a
    /// success or an error alike): the invocation is then marked replayed or joined.
    pub(crate) answered: &'a std::sync::OnceLock<Answered>,
    /// What the leader of the call's record and its phases share ([`Hold`]), once admission
    /// made the call a leader; `None` for an untracked call.
    pub(crate) hold: Option<Arc<Hold>>,
    /// The call's clock readings for the metrics, when they are on.
    pub(crate) timing: &'a mut Option<Timing>,
    /// The registry's count of disables when phase 3 found the capability enabled
    /// (`Inner::disables`).
    pub(crate) disables: u64,
}

impl Arrival<'_> {
    /// The registry's clock at the call's arrival, read once, when a phase first asks (the
    /// admission of a recorded call, the tombstone lookups of resolution): most calls never do,
    /// and a clock reading is a noticeable part of a call's cost.
    pub(crate) fn now(&self) -> Timestamp {
        *self.now.get_or_init(|| self.inner.config.clock.now())
    }
}

/// What phases 5–10 of one call share, built once when phase 4 has admitted it: the
/// [`Arrival`]'s parts, the resolved definition and registration (owned, so that the call can
/// move into the box of a wait), and the handler's context. Every later phase is a function of
/// `&Call`, the hook it runs (unwrapped by this module, which alone decides whether a hook phase
/// runs) and its own input. The phases whose decision is about the moment (rate, confirmation,
/// the audit trail) read the clock when they decide, not at arrival.
pub(crate) struct Call<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) options: &'a InvokeOptions,
    /// The request as the caller sent it (its input taken: phase 5 owns it).
    pub(crate) request: &'a InvokeRequest,
    pub(crate) def: Arc<CapabilityDef>,
    pub(crate) reg: Arc<Registration>,
    pub(crate) ctx: Ctx,
    /// Whether an unknown outcome can be reconciled: only a recorded call (one with an id) can.
    pub(crate) tracked: bool,
    /// The call's correlation id.
    pub(crate) correlation: &'a CorrelationId,
    /// Where the call says it was answered from a record ([`Arrival::answered`]).
    pub(crate) answered: &'a std::sync::OnceLock<Answered>,
    /// Its text, written when first asked for (the confirmation phase, the audit trail).
    pub(crate) correlation_text: std::sync::OnceLock<crate::correlation::GeneratedText>,
    /// What the leader of the call's records and its phases share ([`Hold`]): the invocation
    /// id's, or the natural key's once the call leads that record; `None` for a call that leads
    /// no record.
    pub(crate) hold: Option<Arc<Hold>>,
    /// The call's clock readings for the metrics, when they are on.
    pub(crate) timing: &'a mut Option<Timing>,
    /// The registry's count of disables when phase 3 found the capability enabled.
    pub(crate) disables: u64,
}

impl Call<'_> {
    /// The confirmation evidence the call presents: the adapter's approval obtained for it
    /// ([`InvokeOptions::approval`]), else the request's `confirmationId`. Only the request's is
    /// part of the call's fingerprint.
    pub(crate) fn evidence(&self) -> Option<&str> {
        self.options.approval.as_deref().or(self.request.confirmation_id.as_deref())
    }

    /// The hooks' view of the call: the consumer, the capability, and the instance and
    /// registration it runs against.
    pub(crate) fn info(&self) -> agent_surface_policy::CallInfo<'_> {
        let def = &self.def;
        def.call_info(&self.options.consumer)
            .with_instance(&self.reg.instance_id)
            .with_registration(&self.reg.registration_id)
    }

    /// The correlation id as text, written once.
    pub(crate) fn correlation_text(&self) -> &str {
        match self.correlation.invocation_id() {
            // Not made by `invoke`, which always generates the id; kept for completeness.
            Some(id) => id,
            None => {
                self.correlation_text.get_or_init(|| self.correlation.generated_text().unwrap_or_default()).as_str()
            }
        }
    }

    /// The time budget of the handler and of its post-condition.
    pub(crate) fn time_budget(&self) -> std::time::Duration {
        time_budget(self.inner, &self.def, self.options)
    }
}

/// The time budget of the handler (and of its post-condition): the call's override, else the
/// capability's, else the registry's default.
pub(crate) fn time_budget(inner: &Inner, def: &CapabilityDef, options: &InvokeOptions) -> std::time::Duration {
    options.time_budget.or(def.time_budget).unwrap_or(inner.config.default_time_budget)
}
