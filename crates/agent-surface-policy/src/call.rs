//! What a hook knows about a call: [`CallInfo`], the details a confirmation gate may ask for
//! ([`CallDetails`]), the evidence it consumed ([`ConsumedEvidence`]) and the gate a capability
//! declares ([`DeclaredGate`]). The hooks (`crate::hooks`) decide on them; the audit trail
//! describes calls by them. Re-exported from `crate::hooks`, where they were first defined.

use agent_surface_core::{Effect, SafeText};
use serde_json::Value;

use crate::Consumer;

/// What a hook knows about the call (or, during discovery, the capability) it decides on.
///
/// During the authority phase a `CallInfo` may describe a name that does not exist: the pipeline
/// asks the authority policies about unknown names too, so that a hidden capability and a name
/// that never existed cost the same work (see `spec/authority-and-confirmation.md`). For such a
/// call `capability` is the name the caller sent, `type_id` the part before its first `.`, and
/// the effect `write`; the decision is computed and then ignored. A policy must therefore treat
/// `capability` as caller-chosen text.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallInfo<'a> {
    /// The caller.
    pub consumer: &'a Consumer,
    /// The capability name (`type.capability`).
    pub capability: &'a str,
    /// The capability type.
    pub type_id: &'a str,
    /// The declared effect.
    pub effect: Effect,
    /// Whether the capability is declared idempotent.
    pub idempotent: bool,
    /// The resolved target instance (absent in discovery's capability-wide question, present in
    /// its question per live instance; absent when the call did not resolve).
    pub instance_id: Option<&'a str>,
    /// The resolved target registration (as [`CallInfo::instance_id`]).
    pub registration_id: Option<&'a str>,
    /// The validated, bound input (absent during discovery and in the authority phase, which
    /// runs before input validation).
    pub input: Option<&'a Value>,
    /// The confirmation gate the capability declares (`.confirm(…)` on its definition). Present
    /// only in the confirmation phase, and only for capabilities that declare a gate.
    pub declared_gate: Option<DeclaredGate<'a>>,
    /// The caller's invocation id, when it sent one (present in the confirmation phase).
    pub invocation_id: Option<&'a str>,
    /// The call's correlation id (present in the confirmation phase), for the audit trail.
    pub correlation_id: Option<&'a str>,
    /// The input as an approver may see it: JSON text with the values of sensitive fields
    /// redacted (present in the confirmation phase for a call without evidence).
    pub input_preview: Option<&'a str>,
    /// What the caller can tell a gate about this call on demand (present in the confirmation
    /// phase when the gate [consults it](crate::ConfirmationGate::consults_call_details)): what costs
    /// work to compute and is needed only for a call the gate gates.
    pub details: Option<&'a dyn CallDetails>,
}

/// What the registry can tell a confirmation gate about a call on demand, for a call the gate
/// gates and that carries no evidence: computed only when asked, so that the calls a gate lets
/// through cost none of it.
pub trait CallDetails: std::fmt::Debug + Send + Sync {
    /// The input as an approver may see it, as [`CallInfo::input_preview`]; `None` when the
    /// caller does not say.
    fn input_preview(&self) -> Option<String>;

    /// The gate consumed `evidence` for this call (the gate tells the caller, which keeps it
    /// until the handler starts: should the call stop before — its strict audit could not record
    /// the start —, it hands the evidence back to [`crate::ConfirmationGate::reinstate`]). The default
    /// forgets it.
    fn consumed(&self, evidence: ConsumedEvidence) {
        let _ = evidence;
    }
}

/// Evidence a confirmation gate consumed for one call: the confirmation's id and the consumption
/// token only that call holds (see [`crate::ConfirmationStore::reinstate`]). Its `Debug` never
/// shows the token.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumedEvidence {
    /// The confirmation id.
    pub confirmation_id: String,
    /// The consumption token.
    pub token: String,
}

impl ConsumedEvidence {
    /// The evidence `confirmation_id`, consumed under `token`.
    pub fn new(confirmation_id: impl Into<String>, token: impl Into<String>) -> ConsumedEvidence {
        ConsumedEvidence { confirmation_id: confirmation_id.into(), token: token.into() }
    }
}

impl std::fmt::Debug for ConsumedEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumedEvidence").field("confirmation_id", &self.confirmation_id).finish_non_exhaustive()
    }
}

impl<'a> CallInfo<'a> {
    /// Describes a call or a capability.
    pub fn new(
        consumer: &'a Consumer,
        capability: &'a str,
        type_id: &'a str,
        effect: Effect,
        idempotent: bool,
    ) -> Self {
        CallInfo {
            consumer,
            capability,
            type_id,
            effect,
            idempotent,
            instance_id: None,
            registration_id: None,
            input: None,
            declared_gate: None,
            invocation_id: None,
            correlation_id: None,
            input_preview: None,
            details: None,
        }
    }

    /// The same, with what the caller can tell on demand (see [`CallDetails`]).
    pub fn with_details(mut self, details: &'a dyn CallDetails) -> Self {
        self.details = Some(details);
        self
    }

    /// The same, with the input as an approver may see it (see [`CallInfo::input_preview`]).
    pub fn with_input_preview(mut self, preview: &'a str) -> Self {
        self.input_preview = Some(preview);
        self
    }

    /// The same, with the call's invocation id (if the caller sent one) and correlation id.
    pub fn with_ids(mut self, invocation_id: Option<&'a str>, correlation_id: &'a str) -> Self {
        self.invocation_id = invocation_id;
        self.correlation_id = Some(correlation_id);
        self
    }

    /// The same, with a target instance.
    pub fn with_instance(mut self, instance_id: &'a str) -> Self {
        self.instance_id = Some(instance_id);
        self
    }

    /// The same, with a target registration.
    pub fn with_registration(mut self, registration_id: &'a str) -> Self {
        self.registration_id = Some(registration_id);
        self
    }

    /// The same, with the input.
    pub fn with_input(mut self, input: &'a Value) -> Self {
        self.input = Some(input);
        self
    }

    /// The same, for a capability that declares a confirmation gate; `summary` is the gate's
    /// summary rendered from this call's input (see [`DeclaredGate::summary`]).
    pub fn with_declared_gate(mut self, summary: Option<&'a SafeText>) -> Self {
        self.declared_gate = Some(DeclaredGate { summary });
        self
    }
}

/// A confirmation gate the capability declares, as the confirmation phase sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct DeclaredGate<'a> {
    /// The summary rendered from this call's input, for a new confirmation request.
    ///
    /// The pipeline renders it (it runs the application's summary function) only for a call
    /// without evidence: a call that carries evidence needs none, since the confirmation it
    /// presents holds the summary it was issued with.
    pub summary: Option<&'a SafeText>,
}
