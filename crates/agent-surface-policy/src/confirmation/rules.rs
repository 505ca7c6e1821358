//! The single-use steps on one record, as every store that decides in Rust applies them: the memory
//! store, and the SQLite and PostgreSQL stores between reading a row and writing it back. The rules
//! are written once here so that the stores cannot come to disagree; the Redis store runs the same
//! rules in its scripts, and the store kit holds every store to them.

use agent_surface_core::Timestamp;

use super::quorum::{ApprovalVerdict, ApproverDecision, SlotSet};
use super::record::{ConfirmationBinding, ConfirmationRecord, ConfirmationState};
use super::store::{Decided, Rejection};

impl ConfirmationRecord {
    /// `approver`'s `verdict` on this record at `now`, as one who can fill `slots` of its quorum,
    /// by the rules of [`ConfirmationStore::decide_in_slots`](super::ConfirmationStore::decide_in_slots)
    /// (its checks, in its order; a denial of an approved record before its deadline revokes the
    /// approval). On [`Decided::Done`] the record changed and the store writes it back in the
    /// same step; on any other answer it is unchanged.
    ///
    /// The store has found the record live at `now`; [`Decided::Unknown`] is the store's to answer.
    pub fn decide(&mut self, verdict: ApprovalVerdict, approver: &str, slots: SlotSet, now: Timestamp) -> Decided {
        if verdict == ApprovalVerdict::Deny
            && matches!(self.state, ConfirmationState::Approved { .. })
            && now < self.expires_at
        {
            // A decline after the approval, before its use: the approval is revoked.
            let slots = slots.intersect(self.quorum.all_slots());
            self.decisions.push(ApproverDecision::new(approver, verdict, now).with_slots(slots));
            self.state = ConfirmationState::Denied { by: approver.to_string() };
            return Decided::Done;
        }
        if self.state != ConfirmationState::Pending {
            return Decided::NotPending(self.state.clone());
        }
        if self.decided_by(approver) || verdict == ApprovalVerdict::ApproveInPerson && self.approved_in_person() {
            return Decided::DecidedBefore;
        }
        if verdict == ApprovalVerdict::Approve && self.is_requester(approver) {
            return Decided::SelfApproval;
        }
        if now >= self.expires_at {
            return Decided::Expired;
        }
        let slots = slots.intersect(self.quorum.all_slots());
        if verdict != ApprovalVerdict::Deny && !self.quorum.has_room(&self.decisions, slots) {
            return Decided::SlotsTaken;
        }
        self.decisions.push(ApproverDecision::new(approver, verdict, now).with_slots(slots));
        if verdict == ApprovalVerdict::Deny {
            self.state = ConfirmationState::Denied { by: approver.to_string() };
        } else if self.approvals() >= self.quorum.required() {
            let by: Vec<&str> = self.decisions.iter().map(|d| d.approver.as_str()).collect();
            self.state = ConfirmationState::Approved { by: by.join(", ") };
        }
        Decided::Done
    }

    /// Uses this record's approval for the call bound to `expected`, at `now`, by the rules of
    /// [`ConfirmationStore::consume`](super::ConfirmationStore::consume) (its checks, in its
    /// order): `Ok` with who approved, and the record is consumed — the store writes it back in
    /// the same step, with a consumption token of its own — or the rejection, and the record is
    /// unchanged.
    ///
    /// The store has found the record live at `now`; [`Rejection::Unknown`] is the store's to
    /// answer.
    pub fn consume(&mut self, expected: &ConfirmationBinding, now: Timestamp) -> Result<String, Rejection> {
        let mismatch = self.binding.mismatch(expected);
        if !mismatch.is_empty() {
            return Err(Rejection::Mismatch(mismatch));
        }
        let approved_by = match &self.state {
            ConfirmationState::Consumed { .. } => return Err(Rejection::Consumed),
            ConfirmationState::Denied { .. } => return Err(Rejection::Denied),
            ConfirmationState::Withdrawn => return Err(Rejection::Expired),
            _ if now >= self.expires_at => return Err(Rejection::Expired),
            ConfirmationState::Pending => return Err(Rejection::Pending(Box::new(self.clone()))),
            ConfirmationState::Approved { by } => by.clone(),
        };
        self.state = ConfirmationState::Consumed { approved_by: approved_by.clone() };
        Ok(approved_by)
    }
}

impl Decided {
    /// Whether this answer to `verdict` ends the record's consumption's chance to be given back
    /// ([`ConfirmationStore::reinstate`](super::ConfirmationStore::reinstate)): a denial that met
    /// consumed evidence cannot undo the use, but the approval must not come back should the use
    /// not happen after all, so the store drops the consumption token in the same step (a denial
    /// racing a use lands exactly when the use does not).
    pub fn drops_consumption_token(&self, verdict: ApprovalVerdict) -> bool {
        verdict == ApprovalVerdict::Deny && matches!(self, Decided::NotPending(ConfirmationState::Consumed { .. }))
    }
}
