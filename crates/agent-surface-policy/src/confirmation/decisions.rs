//! The host's side: reading confirmations, approving and denying them ([`ApprovalError`] when a
//! decision is not recorded), and waking the calls that wait for a decision.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError};

use agent_surface_core::Timestamp;
use tokio::sync::Notify;

use super::approver::Review;
use super::engine::ConfirmationEngine;
use super::quorum::{ApprovalVerdict, Quorum, SlotSet};
use super::record::{ConfirmationRecord, ConfirmationState};
use super::store::Decided;
use crate::audit::{AuditKind, AuditVerdict, bounded_note};
use crate::clock::Clock;
use crate::consumer::Identity;
use crate::store::StoreError;

/// What a path segment percent-encodes: every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~`.
const PATH_SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Why the host's approval or denial was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No confirmation with this id (never issued, evicted, or long gone).
    #[error("no confirmation with this id")]
    Unknown,
    /// The confirmation expired before the decision.
    #[error("the confirmation expired")]
    Expired,
    /// The approver is the requester.
    #[error("the requester cannot approve its own request")]
    SelfApproval,
    /// The approver's identity has an empty subject.
    #[error("an approver needs a non-empty subject")]
    NoApprover,
    /// The confirmation was already decided (or withdrawn); a decision is final.
    #[error("the confirmation is already {}", .0.as_str())]
    AlreadyDecided(ConfirmationState),
    /// This approver already decided the confirmation (it waits for other approvers); one
    /// decision per approver.
    #[error("this approver already decided the confirmation")]
    DecidedBefore,
    /// The confirmation's [`Quorum`] never counts this approver: they hold none of its roles,
    /// are not one of its named approvers, or hold the role of none of its slots.
    #[error("the quorum does not count this approver (not a named approver, or none of the roles it asks for)")]
    NotEligible,
    /// Every slot of the confirmation's [`Quorum`] this approver could fill is taken by other
    /// approvers (e.g. the `manager` slot of "one manager and one security officer" is filled, and
    /// this approver is a manager only); the confirmation waits for an approver for the open slots.
    #[error("the quorum's slots this approver could fill are taken; it waits for approvers of the other roles")]
    SlotsTaken,
    /// An answer given in person by someone whose call the confirmation does not hold
    /// ([`ConfirmationEngine::approve_in_person_for`], [`ConfirmationEngine::deny_as_requester`]):
    /// it was issued to another caller.
    #[error("the confirmation holds another caller's call")]
    NotRequester,
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl ConfirmationEngine {
    /// The confirmation with `id`, e.g. to show its summary to the approver.
    pub async fn get(&self, id: &str) -> Result<Option<ConfirmationRecord>, StoreError> {
        let now = self.config.clock.now();
        let record = self.bounded(self.config.store.get(id, now)).await?;
        if let Some(r) = &record {
            self.observe(r, now);
        }
        Ok(record)
    }

    /// Up to `limit` pending, unexpired confirmations `approver` may decide — every one they did
    /// not request themselves ([`ConfirmationRecord::is_requester`]), have not decided yet, and
    /// whose [`Quorum`] counts their approval —, those that expire first first. The host decides
    /// beforehand whether `approver` may approve at all.
    pub async fn pending_for(&self, approver: &Identity, limit: usize) -> Result<Vec<ConfirmationRecord>, StoreError> {
        // Records the approver may not decide are skipped, so ask for more than the limit.
        let asked = limit.saturating_mul(2).max(limit.saturating_add(16));
        let now = self.config.clock.now();
        let listed = self.bounded(self.config.store.list_pending(now, asked)).await?;
        for record in &listed {
            self.observe(record, now);
        }
        Ok(listed.into_iter().filter(|r| may_decide(r, approver)).take(limit).collect())
    }

    /// The approval page of the confirmation `id`, when
    /// [`ConfirmationConfig::approval_base_url`](super::ConfirmationConfig::approval_base_url) is set: the base without its trailing `/`s, a
    /// `/`, and `id` with every byte but `A-Z a-z 0-9 - . _ ~` percent-encoded.
    ///
    /// ```
    /// use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
    ///
    /// let engine = ConfirmationEngine::new(ConfirmationConfig {
    ///     approval_base_url: Some("https://shop.example/inbox/c/".into()),
    ///     ..Default::default()
    /// });
    /// assert_eq!(engine.approval_url("c-1f").as_deref(), Some("https://shop.example/inbox/c/c-1f"));
    /// assert_eq!(engine.approval_url("a/b?c").as_deref(), Some("https://shop.example/inbox/c/a%2Fb%3Fc"));
    /// assert_eq!(engine.approval_url("é 1%").as_deref(), Some("https://shop.example/inbox/c/%C3%A9%201%25"));
    /// assert_eq!(engine.approval_url("../x").as_deref(), Some("https://shop.example/inbox/c/..%2Fx"));
    /// ```
    pub fn approval_url(&self, id: &str) -> Option<String> {
        let base = self.config.approval_base_url.as_deref()?.trim_end_matches('/');
        Some(format!("{base}/{}", percent_encoding::utf8_percent_encode(id, PATH_SEGMENT)))
    }

    /// The quorum a call of `capability` (of type `type_id`) needs.
    pub fn quorum_for(&self, capability: &str, type_id: &str) -> Quorum {
        self.config
            .quorums
            .iter()
            .find(|(scope, _)| scope.covers(capability, type_id))
            .map(|(_, q)| q.clone())
            .unwrap_or_default()
    }

    /// Approves the pending confirmation `id` on behalf of `approver`.
    ///
    /// The host authenticates the approver and checks that they may approve; the engine refuses
    /// an approval by the requester ([`ApprovalError::SelfApproval`]), an expired or unknown
    /// confirmation, one that was already decided, a second decision by the same approver
    /// ([`ApprovalError::DecidedBefore`]), an approver the confirmation's [`Quorum`] does not
    /// count — none of its roles, not one of its named approvers (compared exactly), the role of
    /// none of its slots — ([`ApprovalError::NotEligible`]), and one whose slots are all taken
    /// ([`ApprovalError::SlotsTaken`]). With a quorum of more than one, the confirmation stays
    /// pending until every slot is filled by a distinct approver.
    pub async fn approve(&self, id: &str, approver: &Identity) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Approve, approver, None, None).await
    }

    /// As [`approve`](Self::approve), with the approver's note for the audit trail (trimmed, at
    /// most [`MAX_NOTE_CHARS`](crate::audit::MAX_NOTE_CHARS) characters).
    pub async fn approve_with_note(
        &self,
        id: &str,
        approver: &Identity,
        note: Option<&str>,
    ) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Approve, approver, note, None).await
    }

    /// Approves the pending confirmation `id` in person: the requesting user answered a prompt
    /// that the host put in front of them through `channel` (e.g. `"mcp-elicitation"`), which the
    /// agent cannot drive. Unlike [`approve`](Self::approve), the approver may be the requester —
    /// that is the point — so only host code that really asked the person may call this; never
    /// expose it to the agent. Recorded as approved by `in-person:{channel}`: one approval
    /// towards a [`Quorum`] — at most one per confirmation, whatever the channels (it is the
    /// requester each time; a second is [`ApprovalError::DecidedBefore`]) — and none when the
    /// quorum asks every approver for a role or names its approvers (the channel has no role and
    /// is no named approver, unless the quorum names `in-person:{channel}` itself); it may fill
    /// a slot that asks for no role.
    pub async fn approve_in_person(&self, id: &str, channel: &str) -> Result<(), ApprovalError> {
        self.decide_in_person(id, channel, None).await
    }

    /// As [`approve_in_person`](Self::approve_in_person), for a confirmation of `requester`'s own
    /// call only: refused with [`ApprovalError::NotRequester`] when it was issued to another
    /// caller (its binding names another principal). What a host calls with the answer of the
    /// person behind a call it knows only from what the client sent (an MCP approval round's
    /// sealed state, say): whoever could forge that state still approves nobody else's action.
    pub async fn approve_in_person_for(
        &self,
        id: &str,
        channel: &str,
        requester: &crate::Consumer,
    ) -> Result<(), ApprovalError> {
        self.decide_in_person(id, channel, Some(requester)).await
    }

    /// An approval in person through `channel` (an empty one is [`ApprovalError::NoApprover`]),
    /// for `requester`'s own confirmation only when given.
    async fn decide_in_person(
        &self,
        id: &str,
        channel: &str,
        requester: Option<&crate::Consumer>,
    ) -> Result<(), ApprovalError> {
        if channel.trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        self.decide(id, ApprovalVerdict::ApproveInPerson, &in_person(channel), None, requester).await
    }

    /// Whether [`approve_in_person`](Self::approve_in_person) of `id` through `channel` would be
    /// recorded now, so that a host asks the person only when their answer can count. Read-only:
    /// it runs the same eligibility check against the record's [`Quorum`] and the same rules of
    /// [`ConfirmationStore::decide_in_slots`](super::ConfirmationStore::decide_in_slots) as the
    /// approval would, on a copy of the record, and changes nothing. `false` for an empty
    /// channel, an unknown or expired confirmation, one that is no longer pending or holds an
    /// in-person approval already, and a quorum that does not count `in-person:{channel}`
    /// (it asks every approver for a role, or names its approvers but not this one); `Err` when
    /// the store fails. A decision made by someone else in between can still refuse the approval.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_surface_core::{Effect, SafeText};
    /// use agent_surface_policy::{
    ///     CallInfo, Clock, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate, Consumer,
    ///     Identity, ManualClock, Quorum, Scope,
    /// };
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let clock = Arc::new(ManualClock::default());
    /// let engine = ConfirmationEngine::new(ConfirmationConfig {
    ///     clock: clock.clone(),
    ///     quorums: vec![(Scope::capability("payments.send"), Quorum::of(1).with_role("finance"))],
    ///     ..Default::default()
    /// });
    /// let requester = Consumer::authenticated("session-1", Identity::new("agent-user"));
    /// let summary = SafeText::from("Send 10 EUR.");
    /// let pending = |capability: &'static str| {
    ///     let call = CallInfo::new(&requester, capability, "payments", Effect::Destructive, false)
    ///         .with_declared_gate(Some(&summary));
    ///     let engine = &engine;
    ///     let clock = &clock;
    ///     async move {
    ///         let ConfirmationDecision::Required { confirmation_id, .. } = engine.check(call, None, clock.now()).await
    ///         else {
    ///             panic!()
    ///         };
    ///         confirmation_id
    ///     }
    /// };
    /// // A finance officer must approve: the requester's word in person cannot count.
    /// let role = pending("payments.send").await;
    /// assert_eq!(engine.counts_in_person(&role, "mcp-elicitation").await, Ok(false));
    /// // Anyone but the requester may: in person, the requester's approval counts, once.
    /// let anyone = pending("payments.refund").await;
    /// assert_eq!(engine.counts_in_person(&anyone, "mcp-elicitation").await, Ok(true));
    /// engine.approve_in_person(&anyone, "mcp-elicitation").await.unwrap();
    /// assert_eq!(engine.counts_in_person(&anyone, "mcp-elicitation").await, Ok(false));
    /// assert_eq!(engine.counts_in_person("no-such-id", "mcp-elicitation").await, Ok(false));
    /// # });
    /// ```
    pub async fn counts_in_person(&self, id: &str, channel: &str) -> Result<bool, StoreError> {
        if channel.trim().is_empty() {
            return Ok(false);
        }
        let approver = in_person(channel);
        let now = self.config.clock.now();
        let Some(mut record) = self.get(id).await? else { return Ok(false) };
        let Some(slots) = eligible_slots(&record.quorum, &approver) else { return Ok(false) };
        // The approval's own rules, run on this copy of the record: nothing is written back.
        let decided = record.decide(ApprovalVerdict::ApproveInPerson, &approver.subject, slots, now);
        Ok(decided == Decided::Done)
    }

    /// Denies the pending confirmation `id` on behalf of `approver` (the requester may deny its
    /// own request). Final: the evidence is then rejected with `CONFIRMATION_INVALID {reason:
    /// denied}`. An approved confirmation that no call used yet is revoked the same way (see
    /// [`ConfirmationStore::decide`](super::ConfirmationStore::decide)), so a person who declines is never overruled by an approval
    /// given elsewhere a moment before.
    pub async fn deny(&self, id: &str, approver: &Identity) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Deny, approver, None, None).await
    }

    /// Denies the pending confirmation `id` as its requester, `requester` (recorded as denied by
    /// its identity's subject, or its consumer key when anonymous), for a confirmation of their
    /// own call only: refused with [`ApprovalError::NotRequester`] otherwise, as
    /// [`approve_in_person_for`](Self::approve_in_person_for).
    pub async fn deny_as_requester(&self, id: &str, requester: &crate::Consumer) -> Result<(), ApprovalError> {
        let person = requester.identity().cloned().unwrap_or_else(|| Identity::new(requester.key()));
        self.decide(id, ApprovalVerdict::Deny, &person, None, Some(requester)).await
    }

    /// As [`deny`](Self::deny), with the approver's note for the audit trail.
    pub async fn deny_with_note(&self, id: &str, approver: &Identity, note: Option<&str>) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Deny, approver, note, None).await
    }

    async fn decide(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &Identity,
        note: Option<&str>,
        requester: Option<&crate::Consumer>,
    ) -> Result<(), ApprovalError> {
        if approver.subject.trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        let now = self.config.clock.now();
        let slots = match (verdict, requester) {
            (ApprovalVerdict::Deny, None) => SlotSet::ANY,
            _ => self.slots_of(id, verdict, approver, requester, now).await?,
        };
        let decided = self
            .bounded(self.config.store.decide_in_slots(id, verdict, &approver.subject, slots, now))
            .await
            .map_err(ApprovalError::Store)?;
        match decided {
            Decided::Done => {
                tracing::info!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    verdict = ?verdict,
                    approver = %approver.subject,
                    "confirmation decided"
                );
                let verdict = match verdict {
                    ApprovalVerdict::Approve => AuditVerdict::Approve,
                    ApprovalVerdict::ApproveInPerson => AuditVerdict::ApproveInPerson,
                    ApprovalVerdict::Deny => AuditVerdict::Deny,
                };
                let approver = approver.subject.clone();
                let kind = AuditKind::ConfirmationDecided { verdict, approver, note: bounded_note(note) };
                self.audit_record(id, now, kind).await;
                self.wake(id);
                Ok(())
            }
            Decided::Unknown => Err(ApprovalError::Unknown),
            Decided::Expired => {
                if self.first_expiry(id, now).await {
                    self.audit_record(id, now, AuditKind::ConfirmationExpired).await;
                }
                Err(ApprovalError::Expired)
            }
            Decided::SelfApproval => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    approver = %approver.subject,
                    "self-approval refused"
                );
                Err(ApprovalError::SelfApproval)
            }
            Decided::NotPending(state) => Err(ApprovalError::AlreadyDecided(state)),
            Decided::DecidedBefore => Err(ApprovalError::DecidedBefore),
            Decided::SlotsTaken => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    approver = %approver.subject,
                    "approval refused: the quorum slots this approver could fill are taken"
                );
                Err(ApprovalError::SlotsTaken)
            }
        }
    }

    /// The slots of `id`'s quorum an approval by `approver` may fill: [`SlotSet::ANY`] for a
    /// quorum without role slots (the store counts) or a record the store does not hold (it
    /// answers that); refused as [`ApprovalError::NotEligible`] when the quorum never counts
    /// them. A record's quorum never changes and an approver's roles are theirs, so reading the
    /// record first races with nothing: which of these slots are still open is the store's to
    /// decide, atomically ([`ConfirmationStore::decide_in_slots`]).
    /// The slots of confirmation `id` an approval by `approver` may fill ([`SlotSet::ANY`] for a
    /// denial); refused when the quorum never counts `approver`, or when `requester` is given and
    /// the confirmation holds another caller's call. An unknown id is left to the store to answer.
    async fn slots_of(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &Identity,
        requester: Option<&crate::Consumer>,
        now: Timestamp,
    ) -> Result<SlotSet, ApprovalError> {
        let record = self.bounded(self.config.store.get(id, now)).await.map_err(ApprovalError::Store)?;
        let Some(record) = record else { return Ok(SlotSet::ANY) };
        self.observe(&record, now);
        if let Some(requester) = requester
            && record.binding.consumer_key != requester.principal()
        {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                "answer in person refused: the confirmation holds another caller's call"
            );
            return Err(ApprovalError::NotRequester);
        }
        if verdict == ApprovalVerdict::Deny {
            return Ok(SlotSet::ANY);
        }
        let Some(slots) = eligible_slots(&record.quorum, approver) else {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                approver = %approver.subject,
                "approval refused: the quorum does not count this approver"
            );
            return Err(ApprovalError::NotEligible);
        };
        Ok(slots)
    }

    pub(super) fn waiters(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, id: &str) {
        if let Some(notify) = self.waiters().get(id) {
            // Stores a permit when the waiter is not polling right now, so no wake-up is lost.
            notify.notify_one();
        }
    }

    pub(super) async fn apply_review(&self, id: &str, answer: Result<Review, crate::guard::Failure>) {
        let outcome = match answer {
            Ok(Review::Approve { approver }) => self.approve(id, &approver).await,
            Ok(Review::ApproveInPerson { channel }) => self.approve_in_person(id, &channel).await,
            Ok(Review::Deny { approver }) => self.deny(id, &approver).await,
            Ok(Review::Defer) => Ok(()),
            Err(failure) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    cause = %crate::redacted(&failure),
                    "approver failed; waiting for a decision until the timeout"
                );
                Ok(())
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "approver's decision not recorded; waiting until the timeout"
            );
        }
    }
}

/// The identity an in-person approval through `channel` is recorded as.
fn in_person(channel: &str) -> Identity {
    Identity::new(format!("in-person:{}", channel.trim()))
}

/// The slots of `quorum` an approval by `approver` may fill, as the store is told them:
/// [`SlotSet::ANY`] for a quorum without role slots (the store counts); `None` when the quorum
/// never counts `approver`. Shared by the approval and its read-only check
/// ([`ConfirmationEngine::counts_in_person`]), so that the two cannot disagree.
fn eligible_slots(quorum: &Quorum, approver: &Identity) -> Option<SlotSet> {
    let slots = quorum.slots_for(approver);
    if slots.is_empty() {
        return None;
    }
    Some(if quorum.slots.is_empty() { SlotSet::ANY } else { slots })
}

/// Whether `approver` may decide `record`: not its requester, not decided by them yet, counted
/// by its quorum, and with a slot left for them.
fn may_decide(record: &ConfirmationRecord, approver: &Identity) -> bool {
    !record.is_requester(&approver.subject)
        && !record.decided_by(&approver.subject)
        && record.quorum.has_room(&record.decisions, record.quorum.slots_for(approver))
}
