//! Phase 7 — confirmation.
//!
//! Input: the consumer, the capability and its target, the validated input and the evidence the
//! call carries. Decision: the confirmation gate's (never gated when none is configured, unless
//! the capability declares a gate). Codes: `CONFIRMATION_REQUIRED`, `CONFIRMATION_INVALID
//! {reason}`, and `EXECUTION_FAILED` when the gate cannot decide: its store failed (`transport`,
//! transient), the declared summary panicked (it runs only for a call without evidence, or for
//! every call of a conditional gate), the gate
//! panicked, or a gated capability has no gate to ask (`handler-error`); `CANCELLED` when the
//! caller cancels, or the registry is disposed, while the call waits for the gate (the pipeline's
//! `unless_cancelled`). In every such case the handler does not run.

use std::any::Any;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::{AgentSurfaceError, ErrorCode, Phase, SafeText};
use agent_surface_policy::{
    AtOnce, ConfirmationDecision, ConfirmationGate, Found,
    hooks::{CallDetails, ConsumedEvidence},
    idempotency::Fingerprint,
};
use serde_json::Value;

use super::{Call, Stop};
use crate::define::{CapabilityDef, ErasedConfirm};
use agent_surface_policy::guard::{catch, catch_future};

/// The gate cannot decide (a panic, or no gate to ask): a fault, so the call's operator event is
/// an `ERROR` carrying the note.
fn cannot_decide(note: impl Into<String>) -> Stop {
    let error = AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError);
    Stop::noted(error, Phase::Confirmation, note).fault()
}

/// A capability that declares a confirmation gate, on a registry without a confirmation engine:
/// there is nobody to ask, so the call does not run.
pub(crate) fn no_gate(def: &CapabilityDef) -> Stop {
    cannot_decide(format!("{} declares a confirmation gate, but the registry has no confirmation engine", def.name))
}

/// Whether this call is gated by the capability's own declaration, and with which summary.
#[derive(Clone, Debug)]
pub(crate) enum Declared {
    /// The capability declares no gate, or its rule ([`confirm_if`](crate::CapabilityBuilder::confirm_if))
    /// does not gate this input.
    No,
    /// The call is gated; the summary for a new request (`None` for a call that carries
    /// evidence, which holds the summary it was issued with).
    Gate(Option<SafeText>),
}

impl Declared {
    /// The same, for the call presenting evidence (a gated call then needs no summary).
    fn presenting(&self) -> Declared {
        match self {
            Declared::No => Declared::No,
            Declared::Gate(_) => Declared::Gate(None),
        }
    }
}

/// Whether the declared gate holds for this call, with its summary for a new request. The
/// summary is application code, run on the input the input phase already decoded, only for a
/// call without evidence — or, for a conditional gate, for every call, to know whether it holds;
/// it is computed before the gate is awaited because the decoded input is not `Sync`.
pub(crate) fn declared(call: &Call<'_>, decoded: &(dyn Any + Send)) -> Result<Declared, Stop> {
    let Some(confirm) = &call.def.confirm else { return Ok(Declared::No) };
    let presented = call.evidence().is_some();
    if presented && !confirm.conditional {
        return Ok(Declared::Gate(None));
    }
    match summarize(&call.def, confirm, decoded)? {
        None => Ok(Declared::No),
        Some(_) if presented => Ok(Declared::Gate(None)),
        Some(summary) => Ok(Declared::Gate(Some(summary))),
    }
}

/// The declared gate's summary for this input (`None`: this input is not gated).
fn summarize(
    def: &CapabilityDef,
    confirm: &ErasedConfirm,
    decoded: &(dyn Any + Send),
) -> Result<Option<SafeText>, Stop> {
    match catch(|| (confirm.summary)(decoded)) {
        Ok(Some(Some(summary))) if summary.is_empty() => {
            Ok(Some(SafeText::trusted(format!("Call {} with the given input.", def.name))))
        }
        Ok(Some(summary)) => Ok(summary),
        Ok(None) => Err(cannot_decide("the summary function expects another input type")),
        Err(text) => Err(cannot_decide(format!("the confirmation summary panicked: {text}"))),
    }
}

/// The input as an approver may see it: its JSON with the values of the sensitive top-level
/// fields replaced by `"[redacted]"` (the record cuts it to its size bound).
fn preview(input: &Value, sensitive: &[String]) -> String {
    match input {
        Value::Object(fields) if sensitive.iter().any(|s| fields.contains_key(s)) => {
            let mut shown = fields.clone();
            for name in sensitive {
                if let Some(value) = shown.get_mut(name) {
                    *value = Value::from("[redacted]");
                }
            }
            Value::Object(shown).to_string()
        }
        _ => input.to_string(),
    }
}

/// Phase 7, presenting a confirmation relayed earlier.
///
/// A call that carries no evidence, whose consumer was told that this same call (capability,
/// target, input fingerprint) needs a confirmation, presents that confirmation's id: until
/// the person decides, the answer is the same `CONFIRMATION_REQUIRED` (no second record); once
/// approved, the call runs; once denied, it is `CONFIRMATION_INVALID {reason: denied}`; once
/// expired (or used), the gate is asked again without evidence, so the caller is told of a fresh
/// confirmation rather than of one it never sent.
///
/// A gate that [consults the call's details](agent_surface_policy::ConfirmationGate::consults_call_details)
/// (the `ConfirmationEngine`) remembers what it relayed itself, in its store — so replicas that
/// share the store share the memory — and asks for the input preview only when it records a
/// confirmation: the registry keeps nothing for it. For any other gate the registry keeps the
/// memory ([`crate::relayed`], per process) and computes the preview for every call it asks
/// about.
///
/// `gate` is the registry's (which the caller unwrapped; see [`no_gate`] for a declared gate
/// without one).
///
/// A call let through returns the evidence the gate consumed for it, when the gate said so
/// ([`CallDetails::consumed`]), as a [`GiveBack`] armed until the handler may start. A call that
/// stops here after the gate consumed its evidence (the gate overran its budget or panicked
/// after consuming) gives it back at once.
///
/// `found` is what [`at_once`] found (a gate asked there is not asked the same again).
pub(crate) async fn confirm(
    call: &Call<'_>,
    gate: &dyn ConfirmationGate,
    input: &Value,
    declared: Declared,
    found: Found,
) -> Result<Option<GiveBack>, Stop> {
    if gate.consults_call_details() {
        confirm_on_demand(call, gate, input, declared, found).await
    } else {
        confirm_eagerly(call, gate, input, declared).await.map(|()| None)
    }
}

/// What phase 7 decided without awaiting ([`at_once`]).
pub(crate) enum AtOnceOutcome {
    /// The gate let the call through (with the evidence it consumed, should a gate consume any
    /// there).
    Proceed(Option<GiveBack>),
    /// The gate must be asked through [`confirm`], with what it found so far.
    Ask(Found),
}

/// Phase 7 without awaiting, for a gate that [consults the call's
/// details](ConfirmationGate::consults_call_details): the gate's
/// [`check_at_once`](ConfirmationGate::check_at_once), given the same [`CallInfo`] as its `check`
/// would be (a panic caught, as there). A call it lets through goes on at once, with no boxed
/// future, no timer and no clock reading; any other is asked through [`confirm`]. A gate that
/// remembers nothing itself is always asked there: the registry's memory of relayed confirmations
/// is looked up before it ([`confirm_eagerly`]).
pub(crate) fn at_once(
    call: &Call<'_>,
    gate: &dyn ConfirmationGate,
    input: &Value,
    declared: &Declared,
) -> Result<AtOnceOutcome, Stop> {
    if !gate.consults_call_details() {
        return Ok(AtOnceOutcome::Ask(Found::default()));
    }
    let details = Details::of(call, input);
    let presented = call.evidence();
    let info = gate_info(call, input, declared, None, Some(&details));
    let answer = catch(|| gate.check_at_once(&info, presented));
    let consumed = details.consumed.into_inner();
    match answer {
        Ok(AtOnce::Proceed) => Ok(AtOnceOutcome::Proceed(consumed)),
        // A gate that consumed evidence and still asks to be awaited: given back (when dropped).
        Ok(AtOnce::Ask(found)) => Ok(AtOnceOutcome::Ask(found)),
        Ok(_) => Ok(AtOnceOutcome::Ask(Found::default())),
        Err(text) => Err(cannot_decide(format!("the confirmation gate panicked: {text}"))),
    }
}

/// The [`CallInfo`] a gate is given about `call` (whose validated input is `input`): its ids, the
/// declared gate, the input preview when there is one (`preview`), and the details on demand.
fn gate_info<'c>(
    call: &'c Call<'_>,
    input: &'c Value,
    declared: &'c Declared,
    preview: Option<&'c str>,
    details: Option<&'c Details<'_>>,
) -> agent_surface_policy::CallInfo<'c> {
    let correlation = call.correlation_text();
    let mut info = call.info().with_input(input).with_ids(call.request.invocation_id.as_deref(), correlation);
    if let Some(preview) = preview {
        info = info.with_input_preview(preview);
    }
    if let Some(details) = details {
        info = info.with_details(details);
    }
    if let Declared::Gate(summary) = declared {
        info = info.with_declared_gate(summary.as_ref());
    }
    info
}

/// Evidence the gate consumed for a call whose handler has not started yet. Spent once the
/// handler may start ([`GiveBack::spend`], which gives it back only on an answer that asks for the
/// same call again); otherwise it gives the evidence back
/// ([`ConfirmationGate::reinstate`]) — at once when the call stops before its handler
/// ([`GiveBack::now`]: strict audit refused it), or from a task of its own when it is dropped
/// (the caller went away first) — so that the call's retry runs on the same approval. A gate
/// that reinstates it remembers it as relayed for the call (the `ConfirmationEngine` does, in its
/// store): the same call repeated without evidence — as a model repeats it, or a call in wait
/// mode, whose caller never saw an id — presents it again. A gate that fails, panics, refuses or overruns its
/// budget leaves the evidence consumed: the retry then asks for a fresh approval.
///
/// It owns what the give-back needs (the call's input among it), so that it can outlive the call.
pub(crate) struct GiveBack(Option<Box<Owed>>);

/// What a [`GiveBack`] needs: the call, owned.
struct Owed {
    gate: std::sync::Arc<dyn ConfirmationGate>,
    inner: std::sync::Arc<crate::registry::Inner>,
    consumer: agent_surface_policy::Consumer,
    def: std::sync::Arc<crate::define::CapabilityDef>,
    reg: std::sync::Arc<crate::live::Registration>,
    input: Value,
    invocation_id: Option<String>,
    correlation: String,
    evidence: ConsumedEvidence,
}

impl GiveBack {
    /// The evidence `evidence` consumed for `call` (whose validated input is `input`), armed; a
    /// registry without a gate has nothing to give back to.
    fn new(call: &Call<'_>, input: &Value, evidence: ConsumedEvidence) -> GiveBack {
        let Some(gate) = &call.inner.config.confirmation else { return GiveBack(None) };
        GiveBack(Some(Box::new(Owed {
            gate: std::sync::Arc::clone(gate),
            inner: std::sync::Arc::clone(call.inner),
            consumer: call.options.consumer.clone(),
            def: std::sync::Arc::clone(&call.def),
            reg: std::sync::Arc::clone(&call.reg),
            input: input.clone(),
            invocation_id: call.request.invocation_id.as_deref().map(str::to_string),
            correlation: call.correlation_text().to_string(),
            evidence,
        })))
    }

    /// The id of the confirmation consumed.
    pub(crate) fn confirmation_id(&self) -> Option<&str> {
        self.0.as_ref().map(|owed| owed.evidence.confirmation_id.as_str())
    }

    /// The handler may start: the evidence is spent, unless the handler's answer asks for the
    /// same call again ([`Spent`]).
    pub(crate) fn spend(mut self) -> Spent {
        Spent(self.0.take())
    }

    /// The call stopped before its handler: gives the evidence back now.
    pub(crate) async fn now(mut self) {
        if let Some(owed) = self.0.take() {
            owed.give_back().await;
        }
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        let Some(owed) = self.0.take() else { return };
        let give_back = owed.give_back();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(give_back);
            }
            Err(_) => {
                let _ = futures_util::FutureExt::now_or_never(give_back);
            }
        }
    }
}

/// Evidence whose call's handler started. Its answer decides: one that asks the agent to wait, or
/// not, and make the same call again (retry `yes` or `after-delay`) gives it back, so that the repeat
/// runs on the same approval instead of asking the person a second time. Such an answer never
/// follows an effect a repeat could double: a write interrupted, meeting a host error, or passing
/// on another service's retryable answer is its unknown outcome (retry `no`), so it is the
/// handler's own word that nothing took effect (`AgentSurfaceError::transient`, `rate_limited`),
/// or the answer of a capability whose repetition is harmless. Any other answer, and a call dropped
/// while its handler runs, leave it spent (dropping this gives nothing back). (`after-refresh`, a
/// registration unmounted mid-flight, is not given back: evidence is bound to the registration,
/// which the repeat does not reach.)
pub(crate) struct Spent(Option<Box<Owed>>);

impl Spent {
    /// Whether `outcome`, the handler's, gives the evidence back.
    pub(crate) fn gives_back(&self, outcome: &Result<Value, Stop>) -> bool {
        self.0.is_some() && matches!(outcome, Err(stop) if stop.error.payload().retry().permits_unchanged_retry())
    }

    /// Gives the evidence back (after [`Spent::gives_back`]), in a task of its own where there is
    /// a runtime: a call dropped meanwhile does not cut the reinstatement off between the store's
    /// step and the engine's (its trail event, its memory of the relayed confirmation).
    pub(crate) async fn give_back(self) {
        let Some(owed) = self.0 else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let _ = handle.spawn(owed.give_back()).await;
            }
            Err(_) => owed.give_back().await,
        }
    }
}

impl Owed {
    async fn give_back(self) {
        let Owed { gate, inner, consumer, def, reg, input, invocation_id, correlation, evidence } = self;
        let info = def
            .call_info(&consumer)
            .with_instance(&reg.instance_id)
            .with_registration(&reg.registration_id)
            .with_input(&input)
            .with_ids(invocation_id.as_deref(), &correlation);
        let now = inner.config.clock.now();
        let budget = inner.config.confirmation_budget;
        let asked = catch_future(|| gate.reinstate(info, &evidence, now));
        let _reinstated = agent_surface_policy::guard::within(inner.config.clock.as_ref(), budget, asked).await;
    }
}

/// What the registry tells a gate about a call on demand: the input preview; it notes the
/// evidence the gate consumed.
struct Details<'c> {
    call: &'c Call<'c>,
    capability: &'c str,
    input: &'c Value,
    sensitive: &'c [String],
    /// The evidence the gate consumed for the call, once it has: armed from the moment the gate
    /// says so, so that a call dropped while the gate still works gives it back too.
    consumed: std::sync::OnceLock<GiveBack>,
}

impl<'c> Details<'c> {
    /// The details of `call`, whose validated input is `input`; nothing consumed yet.
    fn of(call: &'c Call<'c>, input: &'c Value) -> Details<'c> {
        Details {
            call,
            capability: &call.def.name,
            input,
            sensitive: &call.def.input.sensitive,
            consumed: std::sync::OnceLock::new(),
        }
    }
}

/// Names the call only: the input may hold sensitive fields.
impl std::fmt::Debug for Details<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Details").field("capability", &self.capability).finish_non_exhaustive()
    }
}

impl CallDetails for Details<'_> {
    fn input_preview(&self) -> Option<String> {
        Some(preview(self.input, self.sensitive))
    }

    fn consumed(&self, evidence: ConsumedEvidence) {
        // One consumption per call; a second report (a gate's mistake) keeps the first.
        if let Err(second) = self.consumed.set(GiveBack::new(self.call, self.input, evidence)) {
            drop(second.spend());
        }
    }
}

/// [`confirm`] with a gate that remembers relayed confirmations itself and asks for the input
/// preview on demand.
async fn confirm_on_demand(
    call: &Call<'_>,
    gate: &dyn ConfirmationGate,
    input: &Value,
    declared: Declared,
    found: Found,
) -> Result<Option<GiveBack>, Stop> {
    let details = Details::of(call, input);
    let presented = call.evidence();
    let outcome = check(call, gate, input, declared, presented, Some(&details), found).await;
    let consumed = details.consumed.into_inner();
    match outcome {
        Ok(()) => Ok(consumed),
        Err(stop) => {
            if let Some(consumed) = consumed {
                consumed.now().await;
            }
            Err(stop)
        }
    }
}

/// [`confirm`] with a gate that reads everything from the `CallInfo` and remembers nothing: the
/// registry's memory of relayed confirmations ([`crate::relayed`]) is looked up here and a
/// remembered id presented as the call's evidence. Any answer of the gate but a
/// `CONFIRMATION_REQUIRED` or a failure to decide settles the remembered id, also when the caller
/// presented an id itself (so a consumed id is never presented again); a call that stops before
/// this phase leaves the memory as it was.
async fn confirm_eagerly(
    call: &Call<'_>,
    gate: &dyn ConfirmationGate,
    input: &Value,
    declared: Declared,
) -> Result<(), Stop> {
    let relayed = &call.inner.relayed;
    let presented = call.evidence();
    // The key (the input's fingerprint) is computed only when a confirmation is remembered or
    // comes back: most calls need neither.
    let key = || {
        let input_hash = Fingerprint::of(input);
        relayed.key(call.options.consumer.principal(), &call.def.name, &call.reg.registration_id, &input_hash)
    };
    let remembered_key = (!relayed.is_empty()).then(key);
    let remembered = match (presented, remembered_key) {
        (None, Some(k)) => relayed.get(k),
        _ => None,
    };
    let mut outcome = match remembered.as_deref() {
        Some(id) => check(call, gate, input, declared.presenting(), Some(id), None, Found::default()).await,
        None => check(call, gate, input, declared.clone(), presented, None, Found::default()).await,
    };
    if remembered.is_some() && is_expired(&outcome) {
        outcome = check(call, gate, input, declared, None, None, Found::default()).await;
    }
    match Relay::after(&outcome) {
        Relay::Remember(id) => relayed.remember(remembered_key.unwrap_or_else(key), id),
        Relay::Keep => {}
        Relay::Forget => {
            if let Some(k) = remembered_key {
                relayed.forget(k);
            }
        }
    }
    outcome
}

/// What the gate's answer does to the registry's memory of relayed confirmations.
enum Relay<'a> {
    /// A confirmation is required: remember its id for this call.
    Remember(&'a str),
    /// The gate could not decide (an approval still stands), or named no id: leave it.
    Keep,
    /// Any other answer settles what was remembered for this call.
    Forget,
}

impl<'a> Relay<'a> {
    fn after(outcome: &'a Result<(), Stop>) -> Relay<'a> {
        match outcome {
            Err(stop) if stop.error.code() == ErrorCode::ConfirmationRequired => {
                match stop.error.payload().detail("confirmationId").and_then(Value::as_str) {
                    Some(id) => Relay::Remember(id),
                    None => Relay::Keep,
                }
            }
            Err(stop) if stop.phase == Phase::Confirmation && stop.error.code() == ErrorCode::ExecutionFailed => {
                Relay::Keep
            }
            _ => Relay::Forget,
        }
    }
}

/// Whether the gate refused the evidence as expired.
fn is_expired(outcome: &Result<(), Stop>) -> bool {
    matches!(outcome, Err(stop) if stop.error.code() == ErrorCode::ConfirmationInvalid
        && stop.error.payload().detail("reason").and_then(Value::as_str) == Some("expired"))
}

/// Asks `gate` once, continuing from what it `found` at once. The clock is read here, not at
/// arrival: the decision is about this moment.
async fn check(
    call: &Call<'_>,
    gate: &dyn ConfirmationGate,
    input: &Value,
    declared: Declared,
    confirmation_id: Option<&str>,
    details: Option<&Details<'_>>,
    found: Found,
) -> Result<(), Stop> {
    let (inner, def) = (call.inner, &*call.def);
    // What the approver is shown of the input, for a new request only: computed here unless the
    // gate asks for it when it records one.
    let preview = (confirmation_id.is_none() && details.is_none()).then(|| preview(input, &def.input.sensitive));
    let call = gate_info(call, input, &declared, preview.as_deref(), details);
    let now = inner.config.clock.now();
    let budget = inner.config.confirmation_budget;
    let checked = catch_future(|| gate.check_after(call, confirmation_id, now, found));
    let Some(decision) = agent_surface_policy::guard::within(inner.config.clock.as_ref(), budget, checked).await else {
        return Err(Stop::noted(
            AgentSurfaceError::transient(agent_surface_policy::confirmation::STORE_RETRY_AFTER),
            Phase::Confirmation,
            format!("the confirmation gate did not answer within {} ms", budget.as_millis()),
        ));
    };
    match decision {
        Ok(ConfirmationDecision::Proceed) => Ok(()),
        Ok(ConfirmationDecision::Required { confirmation_id, summary, expires_at, origin }) => {
            let url = gate.approval_url(&confirmation_id);
            Err(Stop::new(
                AgentSurfaceError::confirmation_required_at(
                    confirmation_id,
                    summary,
                    expires_at,
                    def.effect,
                    origin,
                    url,
                ),
                Phase::Confirmation,
            ))
        }
        Ok(ConfirmationDecision::Invalid(reason)) => {
            Err(Stop::new(AgentSurfaceError::confirmation_invalid(reason), Phase::Confirmation))
        }
        Ok(ConfirmationDecision::Unavailable { retry_after }) => Err(Stop::noted(
            AgentSurfaceError::transient(retry_after),
            Phase::Confirmation,
            "the confirmation store failed",
        )
        .store_fault(super::Fault::ConfirmationStore)),
        Err(text) => Err(cannot_decide(format!("the confirmation gate panicked: {text}"))),
    }
}
