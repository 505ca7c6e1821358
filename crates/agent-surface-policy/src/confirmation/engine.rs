//! The engine: [`ConfirmationEngine`], its state, its gate (phase 7: what is gated, the request,
//! the wait, the evidence consumed and given back) and the audit events it writes.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin};
use agent_surface_core::{SafeText, Timestamp};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Notify;

use super::approver::Approver;
use super::config::{ConfirmationConfig, ConfirmationMode, TargetBinding};
use super::policy::Gate;
use super::record::{ConfirmationBinding, ConfirmationRecord, RelayKey};
use super::store::{Consumed, Inserted, Rejection};
use crate::audit::{AuditEvent, AuditKind, record_within};
use crate::clock::Clock;
use crate::guard::{caught, guarded};
use crate::hooks::{AtOnce, CallInfo, ConfirmationDecision, ConfirmationGate, ConsumedEvidence, Found, Scope};
use crate::idempotency::Fingerprint;
use crate::store::StoreError;

/// How long a caller is asked to wait after the confirmation store failed.
pub const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The confirmation engine: the [`ConfirmationGate`] of phase 7 and the host's approval API.
///
/// # What is gated
///
/// A call is gated when its capability declares a gate (the registry says so in
/// [`CallInfo::declared_gate`]) or when one of the engine's [`ConfirmationPolicy`](super::ConfirmationPolicy)s says so for
/// this call (for example "refunds over 500"). A policy that fails, panics or overruns its budget
/// gates the call (fail closed). An ungated call proceeds, whatever evidence it carries.
///
/// # Evidence
///
/// A gated call without evidence creates a pending [`ConfirmationRecord`] bound to the consumer,
/// the capability, the resolved target and SHA-256 of the canonical validated input
/// ([`ConfirmationBinding`]). Then, by [`ConfirmationMode`]:
///
/// - **two-phase**: the call ends with `CONFIRMATION_REQUIRED {confirmationId, summary,
///   expiresAt, effect, origin}`; the host approves or denies through
///   [`ConfirmationEngine::approve`] / [`ConfirmationEngine::deny`], and the agent retries with
///   the `confirmationId`;
/// - **wait**: the host's [`Approver`] reviews the request while the call waits, bounded by a
///   timeout; there is no `CONFIRMATION_REQUIRED` round trip.
///
/// A retry with evidence consumes it atomically ([`ConfirmationStore::consume`](super::ConfirmationStore::consume)): at most one
/// call runs per approval, also under concurrent retries. The requester can never approve its own
/// request. Rejected evidence is `CONFIRMATION_INVALID {reason}`: `expired` (including unknown or
/// withdrawn ids; retry `with-confirmation`), `denied`, `consumed` or `mismatch` (retry `no`).
/// Nothing in this crate retries a call.
///
/// Share it behind an `Arc`: one clone goes into the registry's configuration, the host keeps
/// another to approve and deny.
///
/// ```
/// use std::sync::Arc;
/// use agent_surface_core::{Effect, SafeText};
/// use agent_surface_policy::{
///     ApprovalError, CallInfo, Clock, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate,
///     Consumer, Identity, ManualClock,
/// };
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let clock = Arc::new(ManualClock::default());
/// let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ..Default::default() }));
///
/// let requester = Consumer::authenticated("session-1", Identity::new("agent-user"));
/// let input = json!({"order_id": "A-1"});
/// let summary = SafeText::from("Cancel order A-1.");
/// let call = CallInfo::new(&requester, "orders.cancel", "orders", Effect::Destructive, false)
///     .with_instance("main")
///     .with_registration("r-1")
///     .with_input(&input)
///     .with_declared_gate(Some(&summary));
///
/// let ConfirmationDecision::Required { confirmation_id, .. } = engine.check(call, None, clock.now()).await else {
///     panic!()
/// };
/// assert_eq!(engine.approve(&confirmation_id, &Identity::new("agent-user")).await, Err(ApprovalError::SelfApproval));
/// engine.approve(&confirmation_id, &Identity::new("manager-1")).await.unwrap();
///
/// let retry = engine.check(call, Some(&confirmation_id), clock.now()).await;
/// assert_eq!(retry, ConfirmationDecision::Proceed);
/// assert!(matches!(engine.check(call, Some(&confirmation_id), clock.now()).await, ConfirmationDecision::Invalid(_)));
/// # });
/// ```
pub struct ConfirmationEngine {
    pub(super) config: ConfirmationConfig,
    /// Wait-mode calls in progress, woken when the host decides their confirmation.
    pub(super) waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// The confirmations already warned about, and those already recorded as expired.
    pub(super) marks: Mutex<ExpiryMarks>,
    /// `confirmation.expired` events the sweep claimed but could not write yet.
    pub(super) unwritten: Mutex<Backlog>,
}

/// The claimed but unwritten expiry events, oldest first, with the writes each failed.
pub(super) type Backlog = VecDeque<(AuditEvent, u32)>;

/// How many confirmation ids an engine remembers having warned about or recorded as expired
/// (the oldest are forgotten first).
const MAX_EXPIRY_MARKS: usize = 4096;

/// Two bounded sets of confirmation ids: warned about, recorded as expired.
#[derive(Default)]
pub(super) struct ExpiryMarks {
    pub(super) warned: MarkSet,
    pub(super) expired: MarkSet,
}

/// A set of ids that forgets its oldest beyond [`MAX_EXPIRY_MARKS`].
#[derive(Default)]
pub(super) struct MarkSet {
    ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl MarkSet {
    /// Marks `id`; false when it was marked already.
    pub(super) fn mark(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= MAX_EXPIRY_MARKS
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_string());
        self.order.push_back(id.to_string());
        true
    }
}

impl ConfirmationEngine {
    /// An engine with this configuration. [`TargetBinding::Auto`] is settled here, from the
    /// store's [`reach`](super::ConfirmationStore::reach).
    pub fn new(mut config: ConfirmationConfig) -> ConfirmationEngine {
        if config.target_binding == TargetBinding::Auto {
            // A store whose records outlive this process holds evidence for calls whose
            // registration ids this process never saw (another replica's, or an earlier run's).
            config.target_binding = if config.store.reach().outlives_the_process() {
                TargetBinding::Instance
            } else {
                TargetBinding::Registration
            };
        }
        ConfirmationEngine {
            config,
            waiters: Mutex::new(HashMap::new()),
            marks: Mutex::new(ExpiryMarks::default()),
            unwritten: Mutex::new(Backlog::default()),
        }
    }

    /// Gives back `evidence`, which this engine consumed for `call` (see
    /// [`ConfirmationGate::reinstate`]): atomically in the store, only for the call's binding and
    /// with the consumption token of that consumption, before the deadline
    /// ([`ConfirmationStore::reinstate`](super::ConfirmationStore::reinstate)). Logged and written to the audit trail as
    /// `confirmation.reinstated`; `true` when the approval is usable again. A store that fails
    /// or refuses leaves the evidence consumed (the retry then needs a fresh approval).
    pub async fn reinstate(&self, call: CallInfo<'_>, evidence: &ConsumedEvidence, now: Timestamp) -> bool {
        let id = evidence.confirmation_id.as_str();
        let binding = self.binding_of(&call);
        match self.bounded(self.config.store.reinstate(id, &binding, &evidence.token, now)).await {
            Ok(true) => {
                tracing::info!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    "confirmation reinstated: the call that consumed it did not run, or asked to be made again"
                );
                self.audit(|| call_event(now, AuditKind::ConfirmationReinstated, &call, &binding, id)).await;
                // The same call repeated without evidence (a model; a call in wait mode, whose
                // caller never saw the id) presents it again, on any replica sharing the store.
                if self.relays() {
                    self.remember_relayed(&RelayKey::of(&binding), id, now).await;
                }
                true
            }
            Ok(false) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    "confirmation not reinstated (expired, or not this call's consumption)"
                );
                false
            }
            Err(e) => {
                tracing::error!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    error = %crate::redacted(&e),
                    "confirmation store failed; the confirmation stays consumed"
                );
                false
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ConfirmationConfig {
        &self.config
    }

    /// A store operation within [`ConfirmationConfig::store_budget`]; past it, the store counts
    /// as failed. An answer ready at once arms no timer.
    pub(super) async fn bounded<T>(&self, op: BoxFuture<'_, Result<T, StoreError>>) -> Result<T, StoreError> {
        within_budget(self.config.clock.as_ref(), self.config.store_budget, op).await
    }

    /// [`ConfirmationStore::consume`](super::ConfirmationStore::consume) under the store budget,
    /// finished even when the call that awaits it goes away meanwhile (cancelled or dropped): a
    /// consumption that call never learnt of is given back
    /// ([`reinstate`](super::ConfirmationStore::reinstate)), since its handler cannot start and
    /// nobody holds the evidence to give it back later — whether the answer comes after the call
    /// went away (the task gives it back) or arrives and is dropped unread ([`Unread`] does). A
    /// store that answers on the first poll (the memory store) is awaited here; another finishes
    /// in a task of its own, where a runtime is (without one it is awaited here, and a call
    /// dropped meanwhile drops it, as any store operation). A store that panics in that task is a
    /// store failure, as one that panics here is the gate's.
    async fn consume(
        &self,
        id: &str,
        binding: &ConfirmationBinding,
        now: Timestamp,
    ) -> Result<Result<Consumed, Rejection>, StoreError> {
        let back = Reinstatement {
            store: Arc::clone(&self.config.store),
            clock: Arc::clone(&self.config.clock),
            budget: self.config.store_budget,
            id: id.to_string(),
            binding: binding.clone(),
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        let task = back.clone();
        let mut consuming = Box::pin(async move {
            let consumed = crate::guard::catch_future(|| {
                within_budget(task.clock.as_ref(), task.budget, task.store.consume(&task.id, &task.binding, now))
            })
            .await
            .unwrap_or_else(|text| {
                Err(StoreError::Unavailable(format!("the confirmation store panicked: {}", crate::redacted(&text))))
            });
            if let Err(Ok(Ok(Consumed { token: Some(token), .. }))) = answer.send(consumed) {
                task.reinstate(token).await;
            }
        });
        let mut unread = Unread { answer: answered, back: Some(back) };
        if (&mut consuming).now_or_never().is_none() {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn(tracing::Instrument::in_current_span(consuming))),
                // No runtime to finish it: awaited here, as any other store operation.
                Err(_) => consuming.await,
            }
        }
        (&mut unread.answer)
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("the confirmation store's answer was lost".into())))
    }

    /// Writes `event` to the audit sink, if there is one; a failure is logged, never returned.
    async fn audit(&self, event: impl FnOnce() -> AuditEvent) {
        if self.config.audit.is_none() {
            return;
        }
        self.write_audit(&event()).await;
    }

    /// Writes `event` to the audit sink within the store budget; true when it was written (or
    /// there is no sink), a failure logged at `ERROR`.
    pub(super) async fn write_audit(&self, event: &AuditEvent) -> bool {
        let Some(sink) = &self.config.audit else { return true };
        match record_within(sink.as_ref(), self.config.clock.as_ref(), self.config.store_budget, event).await {
            Ok(()) => {
                // An expiry's event is written: its claim is settled for good.
                if matches!(event.kind, AuditKind::ConfirmationExpired)
                    && let Some(id) = &event.confirmation_id
                {
                    self.expiry_recorded(id).await;
                }
                true
            }
            Err(e) => {
                tracing::error!(
                    target: "agent_surface::audit",
                    event = event.name(),
                    confirmation_id = event.confirmation_id.as_deref().unwrap_or(""),
                    error = %crate::redacted(&e),
                    "audit event not recorded"
                );
                false
            }
        }
    }

    /// A confirmation event about the record `id`, described from the store (an event with only
    /// the id when the store no longer holds it or fails).
    pub(super) async fn audit_record(&self, id: &str, now: Timestamp, kind: AuditKind) {
        if self.config.audit.is_none() {
            return;
        }
        let record = self.bounded(self.config.store.get(id, now)).await.ok().flatten();
        self.audit(|| {
            let mut event = match &record {
                Some(r) => record_event(now, kind, r),
                None => AuditEvent::new(now, kind, "", ""),
            };
            event.confirmation_id = Some(id.to_string());
            event
        })
        .await;
    }

    /// Records what consuming the evidence `id` did: `consumed`, or `expired` when the
    /// confirmation was past its deadline (or withdrawn by a wait that timed out).
    async fn audit_consume(
        &self,
        call: &CallInfo<'_>,
        binding: &ConfirmationBinding,
        id: &str,
        now: Timestamp,
        outcome: &Result<Result<Consumed, Rejection>, StoreError>,
    ) {
        let kind = match outcome {
            Ok(Ok(consumed)) => AuditKind::ConfirmationConsumed { approved_by: consumed.approved_by.clone() },
            Ok(Err(Rejection::Expired)) if self.first_expiry(id, now).await => AuditKind::ConfirmationExpired,
            Ok(Err(Rejection::Pending(record))) => {
                self.observe(record, now);
                return;
            }
            _ => return,
        };
        self.audit(|| call_event(now, kind, call, binding, id)).await;
    }

    /// `None` when the call is not gated; otherwise its summary, when there is one (a declared
    /// gate's summary is rendered only for a call without evidence). The policies [`Self::at_once`]
    /// `found` answered are not asked again: the first `found.open` let the call through, and
    /// `found.gated` is the summary of the one that gated it.
    async fn gate(&self, call: &CallInfo<'_>, found: Found) -> Option<Option<SafeText>> {
        if let Some(declared) = call.declared_gate {
            return Some(declared.summary.cloned());
        }
        if let Some(summary) = found.gated {
            return Some(Some(summary));
        }
        for policy in self.config.policies.iter().skip(found.open) {
            match guarded(self.config.clock.as_ref(), self.config.policy_budget, || policy.decide(*call)).await {
                Ok(Gate::Open) => continue,
                Ok(Gate::Confirm { summary }) => return Some(Some(summary)),
                Err(failure) => return Some(Some(policy_failed(policy.as_ref(), call, &failure))),
            }
        }
        None
    }

    /// What the policies answer about `call` without awaiting ([`ConfirmationGate::check_at_once`]):
    /// each is asked in turn through [`ConfirmationPolicy::decide_at_once`](super::ConfirmationPolicy::decide_at_once),
    /// a panic caught. The call proceeds when none is declared and every policy lets it through at
    /// once; the first that gates it (or fails: fail closed) or that can answer only by awaiting
    /// leaves the rest to [`Self::gate`], which asks none of them twice.
    fn at_once(&self, call: &CallInfo<'_>) -> AtOnce {
        let mut found = Found::default();
        if call.declared_gate.is_some() {
            return AtOnce::Ask(found);
        }
        for policy in &self.config.policies {
            let failure = match crate::guard::at_once(|| policy.decide_at_once(call)) {
                None => return AtOnce::Ask(found),
                Some(Ok(Gate::Open)) => {
                    found.open += 1;
                    continue;
                }
                Some(Ok(Gate::Confirm { summary })) => {
                    found.gated = Some(summary);
                    return AtOnce::Ask(found);
                }
                Some(Err(failure)) => failure,
            };
            found.gated = Some(policy_failed(policy.as_ref(), call, &failure));
            return AtOnce::Ask(found);
        }
        AtOnce::Proceed
    }

    /// What evidence for `call` is bound to.
    fn binding_of(&self, call: &CallInfo<'_>) -> ConfirmationBinding {
        static NO_INPUT: Value = Value::Null;
        ConfirmationBinding {
            consumer_key: call.consumer.principal().to_string(),
            capability: call.capability.to_string(),
            registration_id: match self.config.target_binding {
                TargetBinding::Registration => call.registration_id.unwrap_or_default().to_string(),
                _ => String::new(),
            },
            instance_id: call.instance_id.unwrap_or_default().to_string(),
            input_hash: Fingerprint::of(call.input.unwrap_or(&NO_INPUT)),
        }
    }

    async fn check_now(
        &self,
        call: CallInfo<'_>,
        evidence: Option<&str>,
        now: Timestamp,
        found: Found,
    ) -> ConfirmationDecision {
        let Some(summary) = self.gate(&call, found).await else { return ConfirmationDecision::Proceed };
        let binding = self.binding_of(&call);
        // A call without evidence presents the confirmation relayed to its caller for this same
        // call, if the store remembers one (asked only here: for a call this engine gates).
        let relay = (evidence.is_none() && self.relays()).then(|| RelayKey::of(&binding));
        let relayed = match &relay {
            Some(key) => match self.bounded(self.config.store.relayed(key, now)).await {
                Ok(id) => id,
                Err(e) => return unavailable(&e),
            },
            None => None,
        };
        match evidence.or(relayed.as_deref()) {
            Some(id) => {
                let consumed = self.consume(id, &binding, now).await;
                tell_consumed(&call, id, &consumed);
                self.audit_consume(&call, &binding, id, now, &consumed).await;
                match consumed {
                    Ok(Ok(consumed)) => {
                        tracing::info!(
                            target: "agent_surface::confirmation",
                            confirmation_id = id,
                            approved_by = %consumed.approved_by,
                            "confirmation consumed"
                        );
                        if let Some(key) = &relay {
                            self.forget_relayed(key, id, now).await;
                        }
                        ConfirmationDecision::Proceed
                    }
                    // The relayed confirmation expired, is gone or was used (by a repeat on
                    // another replica, say): the caller never sent it, so it is asked afresh
                    // rather than told about an id it does not know.
                    Ok(Err(Rejection::Unknown | Rejection::Expired | Rejection::Consumed)) if relayed.is_some() => {
                        let summary = summary.unwrap_or_else(|| generic_summary(&call));
                        self.request(call, binding, summary, now, relay).await
                    }
                    Ok(Err(rejection)) => {
                        // A final answer settles what was relayed for the call (a denial is told
                        // once; the next repeat asks anew), also for an id the caller presented.
                        let settles = match &rejection {
                            Rejection::Pending(_) => false,
                            Rejection::Denied => relayed.is_some() || self.relays(),
                            _ => relayed.is_some(),
                        };
                        if settles {
                            let key = relay.unwrap_or_else(|| RelayKey::of(&binding));
                            self.forget_relayed(&key, id, now).await;
                        }
                        rejected(id, rejection)
                    }
                    Err(e) => unavailable(&e),
                }
            }
            None => {
                let summary = summary.unwrap_or_else(|| generic_summary(&call));
                self.request(call, binding, summary, now, relay).await
            }
        }
    }

    /// Whether this engine presents relayed confirmations on repeat
    /// ([`ConfirmationConfig::present_on_repeat`]). It relays the confirmations it answers with
    /// `CONFIRMATION_REQUIRED` (two-phase mode) and those it reinstates (either mode).
    fn relays(&self) -> bool {
        self.config.present_on_repeat
    }

    /// Forgets the confirmation `id` relayed for the call `key`; a failure is logged (the next
    /// repeat then meets the settled id and is asked anew, or told of the denial again).
    async fn forget_relayed(&self, key: &RelayKey, id: &str, now: Timestamp) {
        if let Err(e) = self.bounded(self.config.store.forget_relayed(key, id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot forget a relayed confirmation"
            );
        }
    }

    /// Remembers that the confirmation `id` was relayed for the call `key`; a failure is logged
    /// (a repeat of the call then asks for a fresh confirmation).
    async fn remember_relayed(&self, key: &RelayKey, id: &str, now: Timestamp) {
        if let Err(e) = self.bounded(self.config.store.remember_relayed(key, id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot remember a relayed confirmation; a repeat of the call will ask anew"
            );
        }
    }

    /// Records a pending confirmation for a call without evidence, then asks for the approval as
    /// the mode says.
    ///
    /// In two-phase mode with `relay` (the call's key, when the engine presents on repeat) the
    /// record is added only if no confirmation of the same call is open
    /// ([`ConfirmationStore::insert_relayed`], one atomic step): identical calls racing —
    /// retries sent before the first answer came back, on any replica — are all answered with
    /// the one confirmation the first of them opened (its id, summary and deadline), and only
    /// that one is logged and written to the trail as requested.
    async fn request(
        &self,
        call: CallInfo<'_>,
        binding: ConfirmationBinding,
        summary: SafeText,
        now: Timestamp,
        relay: Option<RelayKey>,
    ) -> ConfirmationDecision {
        // The preview the caller computes on demand, when it did not give one.
        let preview = match call.input_preview {
            Some(_) => None,
            None => call.details.and_then(|d| d.input_preview()),
        };
        let record = ConfirmationRecord::pending(
            // `c-` and 128 bits nobody can guess; guessing would not help anyway: the evidence is
            // bound to the requesting consumer and call.
            agent_surface_core::id::random_id("c-"),
            binding,
            call.consumer.identity().map(|i| i.subject.clone()),
            summary.as_str().to_string(),
            call.effect,
            Origin::Client,
            now,
            now.saturating_add(self.config.ttl),
        )
        .with_input_preview(preview.as_deref().or(call.input_preview))
        .with_quorum(self.quorum_for(call.capability, call.type_id))
        .with_call_ids(call.invocation_id, call.correlation_id)
        .with_consumer(call.consumer.key());
        let inserted = match (&relay, &self.config.mode) {
            (Some(key), ConfirmationMode::TwoPhase) => {
                self.bounded(self.config.store.insert_relayed(record.clone(), key, now)).await
            }
            _ => self.bounded(self.config.store.insert(record.clone(), now)).await.map(|()| Inserted::New),
        };
        match inserted {
            Ok(Inserted::New) => {}
            Ok(Inserted::Held(open)) => {
                tracing::debug!(
                    target: "agent_surface::confirmation",
                    confirmation_id = %open.id,
                    capability = call.capability,
                    "the same call is waiting for this confirmation already; presenting it"
                );
                self.observe(&open, now);
                return ConfirmationDecision::Required {
                    confirmation_id: open.id,
                    summary: SafeText::trusted(open.summary),
                    expires_at: open.expires_at,
                    origin: open.origin,
                };
            }
            Err(e) => return unavailable(&e),
        }
        tracing::info!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            capability = call.capability,
            consumer = call.consumer.key(),
            input_hash = %record.binding.input_hash,
            expires_at = %record.expires_at,
            "confirmation requested"
        );
        let kind = AuditKind::ConfirmationRequested { effect: record.effect, expires_at: record.expires_at };
        self.audit(|| call_event(now, kind, &call, &record.binding, &record.id)).await;
        match &self.config.mode {
            ConfirmationMode::TwoPhase => ConfirmationDecision::Required {
                confirmation_id: record.id,
                summary,
                expires_at: record.expires_at,
                origin: record.origin,
            },
            ConfirmationMode::Wait { approver, timeout } => {
                let timeout = (*timeout).min(record.expires_at.saturating_duration_since(now));
                self.wait(&call, &record, approver.as_ref(), timeout).await
            }
        }
    }

    /// Wait mode: the approver reviews while the call waits; a decision through the host API
    /// counts too.
    async fn wait(
        &self,
        call: &CallInfo<'_>,
        record: &ConfirmationRecord,
        approver: &dyn Approver,
        timeout: Duration,
    ) -> ConfirmationDecision {
        let id = record.id.as_str();
        let notify = Arc::new(Notify::new());
        self.waiters().insert(id.to_string(), Arc::clone(&notify));
        let mut waiting = Waiting { engine: self, id, settled: false };
        let review = caught(|| approver.review(record)).fuse();
        let deadline = self.config.clock.sleep(timeout).fuse();
        futures_util::pin_mut!(review, deadline);
        loop {
            tokio::select! {
                biased;
                answer = &mut review => self.apply_review(id, answer).await,
                () = notify.notified() => {}
                () = &mut deadline => {
                    let now = self.config.clock.now();
                    if let Err(e) = self.bounded(self.config.store.withdraw(id, now)).await {
                        return unavailable(&e);
                    }
                    waiting.settled = true;
                    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation wait timed out");
                    // A decision that landed just before the withdrawal still counts.
                    let consumed = self.consume(id, &record.binding, now).await;
                    tell_consumed(call, id, &consumed);
                    self.audit_consume(call, &record.binding, id, now, &consumed).await;
                    return match consumed {
                        Ok(Ok(_)) => ConfirmationDecision::Proceed,
                        Ok(Err(rejection)) => rejected(id, rejection),
                        Err(e) => unavailable(&e),
                    };
                }
            }
            let now = self.config.clock.now();
            let consumed = self.consume(id, &record.binding, now).await;
            tell_consumed(call, id, &consumed);
            self.audit_consume(call, &record.binding, id, now, &consumed).await;
            match consumed {
                Ok(Ok(_)) => {
                    waiting.settled = true;
                    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation consumed");
                    return ConfirmationDecision::Proceed;
                }
                Ok(Err(Rejection::Pending(_))) => continue,
                Ok(Err(rejection)) => {
                    waiting.settled = true;
                    return rejected(id, rejection);
                }
                Err(e) => return unavailable(&e),
            }
        }
    }
}

impl fmt::Debug for ConfirmationEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmationEngine").field("config", &self.config).finish_non_exhaustive()
    }
}

impl ConfirmationGate for ConfirmationEngine {
    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        self.config.store.usage(now)
    }

    /// Its store's reach.
    fn reach(&self) -> Option<crate::Reach> {
        Some(self.config.store.reach())
    }

    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        Some(self.config.clock.clone())
    }

    fn audit_sink(&self) -> Option<Arc<dyn crate::AuditSink>> {
        self.config.audit.clone()
    }

    /// What its confirmation policies are scoped to.
    fn scopes(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self.config.policies.iter().flat_map(|p| p.scopes()).collect();
        scopes.extend(self.config.quorums.iter().map(|(scope, _)| scope.clone()));
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Its quorums that can never be met or are malformed ([`Quorum::problem`](super::Quorum::problem)).
    fn rule_problems(&self) -> Vec<(Scope, String)> {
        self.config
            .quorums
            .iter()
            .filter_map(|(scope, quorum)| quorum.problem().map(|p| (scope.clone(), format!("its quorum {p}"))))
            .collect()
    }

    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        Box::pin(self.check_now(call, confirmation_id, now, Found::default()))
    }

    /// [`AtOnce::Proceed`] when the capability declares no gate and every confirmation policy
    /// lets the call through without awaiting (as [`FnConfirmationPolicy`](super::FnConfirmationPolicy)
    /// does); its store is not touched, whatever evidence the call carries (an ungated call's
    /// evidence is ignored).
    fn check_at_once(&self, call: &CallInfo<'_>, confirmation_id: Option<&str>) -> AtOnce {
        let _ = confirmation_id;
        self.at_once(call)
    }

    fn check_after<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
        found: Found,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        Box::pin(self.check_now(call, confirmation_id, now, found))
    }

    /// It asks [`CallInfo::details`] for the confirmation relayed for a call it gates without
    /// evidence (and for the input preview), so that a call it lets through costs neither.
    fn approval_url(&self, confirmation_id: &str) -> Option<String> {
        ConfirmationEngine::approval_url(self, confirmation_id)
    }

    fn consults_call_details(&self) -> bool {
        true
    }

    /// See [`ConfirmationEngine::reinstate`].
    fn reinstate<'a>(
        &'a self,
        call: CallInfo<'a>,
        evidence: &'a ConsumedEvidence,
        now: Timestamp,
    ) -> BoxFuture<'a, bool> {
        Box::pin(ConfirmationEngine::reinstate(self, call, evidence, now))
    }

    /// The expiry sweep, every [`ConfirmationConfig::sweep_interval`] ([`ConfirmationEngine::run_sweeps`]).
    fn run_periodic<'a>(&'a self, stop: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let stats = self.run_sweeps(stop).await;
            tracing::debug!(target: "agent_surface::confirmation", rounds = stats.rounds, warned = stats.warned, "expiry sweeps stopped");
        })
    }
}

/// Tells the call (through [`CallInfo::details`]) which evidence was consumed for it, with the
/// store's consumption token, so that it can be given back should its handler never start — at
/// once, before anything else is awaited, so that a call dropped meanwhile can give it back too.
fn tell_consumed(call: &CallInfo<'_>, id: &str, consumed: &Result<Result<Consumed, Rejection>, StoreError>) {
    if let (Some(details), Ok(Ok(Consumed { token: Some(token), .. }))) = (call.details, consumed) {
        details.consumed(ConsumedEvidence::new(id, token.clone()));
    }
}

/// What giving back a consumption nobody learnt of needs (see `ConfirmationEngine::consume`).
#[derive(Clone)]
struct Reinstatement {
    store: Arc<dyn super::ConfirmationStore>,
    clock: Arc<dyn Clock>,
    budget: Duration,
    id: String,
    binding: ConfirmationBinding,
}

impl Reinstatement {
    /// Gives the consumption `token` back, and says so on the operator channel.
    async fn reinstate(self, token: String) {
        let now = self.clock.now();
        let reinstate = self.store.reinstate(&self.id, &self.binding, &token, now);
        match within_budget(self.clock.as_ref(), self.budget, reinstate).await {
            Ok(true) => tracing::info!(
                target: "agent_surface::confirmation",
                confirmation_id = %self.id,
                "the call that consumed this confirmation went away before it learnt so; the approval is given back"
            ),
            Ok(false) => tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = %self.id,
                "the call that consumed this confirmation went away before it learnt so, and the approval could not be given back (expired); it takes a fresh one"
            ),
            Err(e) => tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = %self.id,
                error = %crate::redacted(&e),
                "the call that consumed this confirmation went away before it learnt so, and the store did not take the approval back; it takes a fresh one"
            ),
        }
    }
}

/// The answer of a consumption, awaited by the call. Dropped with the answer in it unread (the
/// call went away after the store answered, before it looked), it gives the consumption back;
/// closed first, so that an answer sent later fails to arrive and the task gives it back instead:
/// either way once.
struct Unread {
    answer: tokio::sync::oneshot::Receiver<Result<Result<Consumed, Rejection>, StoreError>>,
    back: Option<Reinstatement>,
}

impl Drop for Unread {
    fn drop(&mut self) {
        self.answer.close();
        if let Ok(Ok(Ok(Consumed { token: Some(token), .. }))) = self.answer.try_recv()
            && let Some(back) = self.back.take()
        {
            let give_back = tracing::Instrument::in_current_span(back.reinstate(token));
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn(give_back)),
                Err(_) => drop(give_back.now_or_never()),
            }
        }
    }
}

/// `op` under `budget` on `clock`; past it, [`StoreError::Unavailable`].
async fn within_budget<T>(
    clock: &dyn Clock,
    budget: Duration,
    op: BoxFuture<'_, Result<T, StoreError>>,
) -> Result<T, StoreError> {
    crate::guard::within(clock, budget, op).await.unwrap_or_else(|| {
        Err(StoreError::Unavailable(format!("the confirmation store did not answer within {} ms", budget.as_millis())))
    })
}

/// A confirmation event about a call (its consumer, principal, ids) and the confirmation `id`
/// bound by `binding`.
fn call_event(
    now: Timestamp,
    kind: AuditKind,
    call: &CallInfo<'_>,
    binding: &ConfirmationBinding,
    id: &str,
) -> AuditEvent {
    let mut event = AuditEvent::of_call(now, kind, call);
    event.input_digest = Some(binding.input_hash.to_string());
    event.confirmation_id = Some(id.to_string());
    event
}

/// A confirmation event no call causes (a decision, an expiry found through a decision or a
/// sweep), described from the stored record: the requesting consumer and principal, and the
/// invocation and correlation ids of the call that requested it.
pub(super) fn record_event(now: Timestamp, kind: AuditKind, record: &ConfirmationRecord) -> AuditEvent {
    let consumer = record.consumer.as_deref().unwrap_or(&record.binding.consumer_key);
    let mut event = AuditEvent::new(now, kind, &record.binding.capability, consumer);
    event.principal = record.requester.clone();
    event.input_digest = Some(record.binding.input_hash.to_string());
    event.invocation_id = record.invocation_id.clone();
    event.correlation_id = record.correlation_id.clone();
    event
}

/// Logs the failure of `policy` (an error, a panic, an overrun) and returns the summary of the
/// gate it puts on `call` (fail closed).
fn policy_failed(
    policy: &dyn super::ConfirmationPolicy,
    call: &CallInfo<'_>,
    failure: &crate::guard::Failure,
) -> SafeText {
    tracing::warn!(
        target: "agent_surface::confirmation",
        policy = policy.name(),
        capability = call.capability,
        cause = %crate::redacted(failure),
        "confirmation policy failed; gating the call"
    );
    generic_summary(call)
}

/// The summary of a gate that has none of its own (a failed policy, a declared gate whose summary
/// was not rendered).
fn generic_summary(call: &CallInfo<'_>) -> SafeText {
    SafeText::trusted(format!("Call {} with the given input.", call.capability))
}

/// The decision for rejected evidence.
fn rejected(id: &str, rejection: Rejection) -> ConfirmationDecision {
    let reason = match rejection {
        Rejection::Pending(record) => {
            return ConfirmationDecision::Required {
                confirmation_id: record.id,
                summary: SafeText::trusted(record.summary),
                expires_at: record.expires_at,
                origin: record.origin,
            };
        }
        Rejection::Unknown | Rejection::Expired => ConfirmationInvalidReason::Expired,
        Rejection::Denied => ConfirmationInvalidReason::Denied,
        Rejection::Consumed => ConfirmationInvalidReason::Consumed,
        Rejection::Mismatch(mismatch) => {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                mismatch_diff = %mismatch,
                "confirmation presented for another call"
            );
            ConfirmationInvalidReason::Mismatch
        }
    };
    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, reason = ?reason, "confirmation rejected");
    ConfirmationDecision::Invalid(reason)
}

fn unavailable(e: &StoreError) -> ConfirmationDecision {
    tracing::error!(target: "agent_surface::confirmation", error = %crate::redacted(&e), "confirmation store failed; not running the call");
    ConfirmationDecision::Unavailable { retry_after: STORE_RETRY_AFTER }
}

/// A wait in progress. Dropped unsettled (the caller gave up, or the store failed), it withdraws
/// the pending confirmation so that a late approval cannot be used by anyone.
struct Waiting<'e> {
    engine: &'e ConfirmationEngine,
    id: &'e str,
    settled: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.engine.waiters().remove(self.id);
        if self.settled {
            return;
        }
        let store = Arc::clone(&self.engine.config.store);
        let id = self.id.to_string();
        let now = self.engine.config.clock.now();
        let withdraw = async move {
            if let Err(e) = store.withdraw(&id, now).await {
                tracing::warn!(target: "agent_surface::confirmation", confirmation_id = %id, error = %crate::redacted(&e), "could not withdraw");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(withdraw);
            }
            Err(_) => {
                withdraw.now_or_never();
            }
        }
    }
}
