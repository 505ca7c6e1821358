//! Where confirmation records live: the [`ConfirmationStore`] trait and
//! [`MemoryConfirmationStore`], its bounded in-process implementation.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use futures_util::future::BoxFuture;

use crate::consumer::Identity;
use crate::idempotency::{Fingerprint, StoreError};
use crate::principal::same_principal;

/// The most approvals a [`Quorum`] may ask for (a larger number is read as this one, and refused
/// when the registry checks the quorum).
pub const MAX_QUORUM: u32 = 16;

/// The most approvers a [`Quorum`] may name ([`Quorum::approvers`]).
pub const MAX_NAMED_APPROVERS: usize = 256;

/// How many approvals a confirmation needs, and from whom.
///
/// A confirmation is approved when `approvals` distinct approvers approved it — distinct as a
/// person reads their names ([`crate::principal::same_principal`]), none of them the requester.
/// Each approval fills one of the quorum's `approvals` *slots*:
///
/// - **`roles`**: an approval counts only from an identity that holds at least one of them.
///   "2 of role `manager`" is `Quorum::of(2).with_role("manager")`, "2 approvers, each a
///   `manager` or a `security` officer" is `Quorum::of(2).with_role("manager").with_role("security")`.
/// - **`approvers`** ("N of M"): an approval counts only from one of these M named subjects,
///   compared exactly (an authenticated subject is an identity, not a name to read: a
///   look-alike of a named approver is not one). "2 of alice, bob and carol" is
///   `Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol")`.
/// - **`slots`**: a role per approver slot. "One `manager` and one `security` officer" is
///   `Quorum::default().with_slot("manager").with_slot("security")`; each approval fills one
///   slot whose role its approver holds, an approver holding both roles fills only one, and the
///   assignment is a matching over all the approvals (an approver who could fill either slot
///   never blocks a later one who can fill only one). Slots beyond the named ones (with
///   `approvals` larger than `slots`) take an approver of any role: `Quorum::of(3).with_slot("security")`
///   is three approvers, one of them a `security` officer.
///
/// The three combine: every approver must pass `roles` and `approvers`, and fill a slot. An
/// approval that cannot count is refused ([`ApprovalError::NotEligible`](crate::ApprovalError::NotEligible)
/// when the approver could fill no slot at all, [`ApprovalError::SlotsTaken`](crate::ApprovalError::SlotsTaken)
/// when the slots they could fill are taken). A denial needs no role and is final whoever gives
/// it. An in-person approval (`in-person:{channel}`, no roles) counts at most once per
/// confirmation — it is always the requester — and only towards a slot that asks for no role.
///
/// The default is the single approval of anyone but the requester. A quorum that cannot be met
/// ([`Quorum::problem`]) is an `INVALID_DEFINITION` when the registry checks its wiring.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Quorum {
    /// How many distinct approvers must approve (1 to [`MAX_QUORUM`]; at least as many as
    /// `slots`; 0 is read as 1).
    #[serde(default = "one")]
    pub approvals: u32,
    /// The roles every approver needs, any one of them; empty: any approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The subjects whose approvals count (the "M" of "N of M"), compared exactly; empty: anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The role of each of the first slots, one approver per slot; the remaining `approvals −
    /// slots` slots take any approver. Empty: every slot takes any approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
}

fn one() -> u32 {
    1
}

impl Default for Quorum {
    fn default() -> Quorum {
        Quorum { approvals: 1, roles: Vec::new(), approvers: Vec::new(), slots: Vec::new() }
    }
}

impl Quorum {
    /// `approvals` distinct approvers, any role.
    pub fn of(approvals: u32) -> Quorum {
        Quorum { approvals, ..Quorum::default() }
    }

    /// The same quorum, counting approvals from identities with `role` too (an approver needs
    /// one of the listed roles).
    pub fn with_role(mut self, role: impl Into<String>) -> Quorum {
        self.roles.push(role.into());
        self
    }

    /// The same quorum, counting approvals from the subject `approver` too (only the named
    /// approvers count once one is named).
    pub fn with_approver(mut self, approver: impl Into<String>) -> Quorum {
        self.approvers.push(approver.into());
        self
    }

    /// The same quorum with one more slot, for an approver holding `role`; `approvals` grows
    /// with the slots (`Quorum::default().with_slot("manager").with_slot("security")` needs two
    /// approvals).
    pub fn with_slot(mut self, role: impl Into<String>) -> Quorum {
        self.slots.push(role.into());
        self.approvals = self.approvals.max(u32::try_from(self.slots.len()).unwrap_or(u32::MAX));
        self
    }

    /// How many approvals are needed (the number of slots), within 1 and [`MAX_QUORUM`].
    pub fn required(&self) -> u32 {
        let slots = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.approvals.max(slots).clamp(1, MAX_QUORUM)
    }

    /// The role slot `slot` asks for; `None` for a slot that takes any approver.
    pub fn slot_role(&self, slot: usize) -> Option<&str> {
        self.slots.get(slot).map(String::as_str)
    }

    /// Whether an approval by `approver` may count at all: it holds one of the roles (or none is
    /// asked), it is one of the named approvers (or none is named), and it could fill a slot.
    pub fn admits(&self, approver: &Identity) -> bool {
        !self.slots_for(approver).is_empty()
    }

    /// The slots `approver` could fill: none when it lacks the quorum's `roles` or is not one
    /// of its named `approvers` (compared exactly); otherwise every slot whose role it holds
    /// and every slot that asks for none.
    pub fn slots_for(&self, approver: &Identity) -> SlotSet {
        let roles = self.roles.is_empty() || self.roles.iter().any(|r| approver.has_role(r));
        let named = self.approvers.is_empty() || self.approvers.contains(&approver.subject);
        if !roles || !named {
            return SlotSet::EMPTY;
        }
        let mut set = SlotSet::EMPTY;
        for slot in 0..self.required() as usize {
            if self.slot_role(slot).is_none_or(|role| approver.has_role(role)) {
                set = set.with(slot);
            }
        }
        set
    }

    /// The slots this quorum has, all of them.
    pub fn all_slots(&self) -> SlotSet {
        SlotSet::first(self.required() as usize)
    }

    /// Why this quorum can never be met or is malformed, for the registry's definition check;
    /// `None` when it is sound: 1 to [`MAX_QUORUM`] approvals, no more slots than approvals, no
    /// empty role or approver name, no approver named twice (as a person reads the names), at
    /// most [`MAX_NAMED_APPROVERS`], and at least as many distinct named approvers as approvals.
    pub fn problem(&self) -> Option<String> {
        if self.approvals == 0 {
            return Some("asks for 0 approvals (at least 1)".to_string());
        }
        if self.approvals > MAX_QUORUM {
            return Some(format!("asks for {} approvals (at most {MAX_QUORUM})", self.approvals));
        }
        if self.slots.len() > self.approvals as usize {
            return Some(format!(
                "names {} role slots for {} approval{} (one approver per slot)",
                self.slots.len(),
                self.approvals,
                if self.approvals == 1 { "" } else { "s" }
            ));
        }
        if self.roles.iter().chain(&self.slots).any(|r| r.trim().is_empty()) {
            return Some("names an empty role".to_string());
        }
        if self.approvers.iter().any(|a| a.trim().is_empty()) {
            return Some("names an empty approver".to_string());
        }
        if self.approvers.len() > MAX_NAMED_APPROVERS {
            return Some(format!("names {} approvers (at most {MAX_NAMED_APPROVERS})", self.approvers.len()));
        }
        let mut seen: Vec<String> = Vec::with_capacity(self.approvers.len());
        for approver in &self.approvers {
            let read = crate::principal::skeleton(approver);
            if seen.contains(&read) {
                return Some(format!(
                    "names approver `{approver}` twice (as a person reads the names; distinct approvers must \
                     have distinct names)"
                ));
            }
            seen.push(read);
        }
        if !self.approvers.is_empty() && self.approvers.len() < self.approvals as usize {
            return Some(format!(
                "asks for {} approvals of {} named approver{}",
                self.approvals,
                self.approvers.len(),
                if self.approvers.len() == 1 { "" } else { "s" }
            ));
        }
        None
    }

    /// Which slot each decision fills (`None`: a denial, or an approval no slot is left for),
    /// in the order of `decisions`: a maximum matching of the approvals to the slots they could
    /// fill ([`ApproverDecision::slots`]), earlier approvals first.
    pub fn assignment(&self, decisions: &[ApproverDecision]) -> Vec<Option<usize>> {
        let all = self.all_slots();
        let sets: Vec<SlotSet> = decisions
            .iter()
            .map(|d| if d.verdict == ApprovalVerdict::Deny { SlotSet::EMPTY } else { d.slots.intersect(all) })
            .collect();
        assign(&sets, self.required() as usize)
    }

    /// Whether one more approval, by an approver who could fill `slots`, can be given a slot
    /// next to the approvals in `decisions` (each keeping one).
    pub fn has_room(&self, decisions: &[ApproverDecision], slots: SlotSet) -> bool {
        let all = self.all_slots();
        let mut sets: Vec<SlotSet> =
            decisions.iter().filter(|d| d.verdict != ApprovalVerdict::Deny).map(|d| d.slots.intersect(all)).collect();
        sets.push(slots.intersect(all));
        assign(&sets, self.required() as usize).iter().all(Option::is_some)
    }
}

/// A set of a [`Quorum`]'s slots (bit `i`: slot `i`; at most 32, a quorum has at most
/// [`MAX_QUORUM`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotSet(u32);

impl SlotSet {
    /// No slot.
    pub const EMPTY: SlotSet = SlotSet(0);
    /// Every slot (an approver whose slots nobody worked out: the quorum's roles were checked
    /// otherwise, or it has no role slots).
    pub const ANY: SlotSet = SlotSet(u32::MAX);

    /// The set with these bits.
    pub const fn from_bits(bits: u32) -> SlotSet {
        SlotSet(bits)
    }

    /// Its bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The first `n` slots.
    pub fn first(n: usize) -> SlotSet {
        if n >= 32 { SlotSet::ANY } else { SlotSet((1u32 << n) - 1) }
    }

    /// The same set with `slot` (a slot of 32 or more is left out).
    pub fn with(self, slot: usize) -> SlotSet {
        if slot >= 32 { self } else { SlotSet(self.0 | (1 << slot)) }
    }

    /// Whether it holds `slot`.
    pub fn contains(self, slot: usize) -> bool {
        slot < 32 && self.0 & (1 << slot) != 0
    }

    /// The slots in both.
    pub fn intersect(self, other: SlotSet) -> SlotSet {
        SlotSet(self.0 & other.0)
    }

    /// Whether it holds no slot.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A maximum matching of approvals (the slots each could fill) to `slots` slots, one approval
/// per slot, found by augmenting paths in the order of the approvals (Kuhn's algorithm: at most
/// [`MAX_QUORUM`] of each side, so at most a few hundred steps). Which slot each approval got.
fn assign(approvals: &[SlotSet], slots: usize) -> Vec<Option<usize>> {
    let slots = slots.min(32);
    let mut owner: Vec<Option<usize>> = vec![None; slots];
    for approval in 0..approvals.len() {
        let mut seen = vec![false; slots];
        augment(approval, approvals, &mut owner, &mut seen);
    }
    let mut filled = vec![None; approvals.len()];
    for (slot, approval) in owner.iter().enumerate() {
        if let Some(a) = approval {
            filled[*a] = Some(slot);
        }
    }
    filled
}

/// Finds a slot for `approval`, moving earlier approvals to other slots they could fill.
fn augment(approval: usize, approvals: &[SlotSet], owner: &mut [Option<usize>], seen: &mut [bool]) -> bool {
    for slot in 0..owner.len() {
        if !approvals[approval].contains(slot) || seen[slot] {
            continue;
        }
        seen[slot] = true;
        if owner[slot].is_none_or(|other| augment(other, approvals, owner, seen)) {
            owner[slot] = Some(approval);
            return true;
        }
    }
    false
}

/// One approver's decision on a confirmation, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproverDecision {
    /// The approver's subject (`in-person:{channel}` for an in-person approval).
    pub approver: String,
    /// What they decided.
    pub verdict: ApprovalVerdict,
    /// When.
    pub at: Timestamp,
    /// The quorum's slots this approver could fill when they decided (from their roles; every
    /// slot for a quorum without role slots); the slot their approval fills is
    /// [`Quorum::assignment`]'s.
    pub slots: SlotSet,
}

impl ApproverDecision {
    /// `approver` decided `verdict` at `at`, able to fill any slot.
    pub fn new(approver: impl Into<String>, verdict: ApprovalVerdict, at: Timestamp) -> ApproverDecision {
        ApproverDecision { approver: approver.into(), verdict, at, slots: SlotSet::ANY }
    }

    /// The same decision, by an approver who could fill `slots`.
    pub fn with_slots(mut self, slots: SlotSet) -> ApproverDecision {
        self.slots = slots;
        self
    }
}

/// What a confirmation is for: the caller, the capability, the target and the input.
///
/// Evidence is accepted only for a call whose binding equals the one recorded when the
/// confirmation was requested, field by field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConfirmationBinding {
    /// The requesting caller's principal ([`Consumer::principal`](crate::Consumer::principal)):
    /// for a signed-in caller the person, whatever session or transport asks (an approval asked
    /// over HTTP holds for the same user's repeat over MCP); for an anonymous caller its consumer
    /// key.
    pub consumer_key: String,
    /// The capability name.
    pub capability: String,
    /// The registration the call resolved to.
    pub registration_id: String,
    /// The instance the call resolved to.
    pub instance_id: String,
    /// SHA-256 of the canonical JSON of the validated, bound input ([`Fingerprint::of`]).
    pub input_hash: Fingerprint,
}

impl ConfirmationBinding {
    /// Which fields differ between `self` and `other`.
    pub fn mismatch(&self, other: &ConfirmationBinding) -> Mismatch {
        Mismatch {
            consumer: self.consumer_key != other.consumer_key,
            capability: self.capability != other.capability,
            target: self.registration_id != other.registration_id || self.instance_id != other.instance_id,
            input: self.input_hash != other.input_hash,
        }
    }
}

/// The fields of a [`ConfirmationBinding`] that did not match (the operator channel's
/// `mismatchDiff`; never shown to the agent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mismatch {
    /// Another consumer presented the evidence.
    pub consumer: bool,
    /// The evidence was presented for another capability.
    pub capability: bool,
    /// The call resolved to another registration or instance.
    pub target: bool,
    /// The validated input differs.
    pub input: bool,
}

impl Mismatch {
    /// Whether every field matched.
    pub fn is_empty(&self) -> bool {
        *self == Mismatch::default()
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = [
            ("consumer", self.consumer),
            ("capability", self.capability),
            ("target", self.target),
            ("input", self.input),
        ];
        let names: Vec<&str> = fields.iter().filter(|(_, differs)| *differs).map(|(name, _)| *name).collect();
        f.write_str(&names.join(", "))
    }
}

/// Where a confirmation is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfirmationState {
    /// Waiting for a decision.
    Pending,
    /// Approved by `by`; not used yet.
    Approved {
        /// The approver's subject (with a quorum, the approvers' subjects in the order they
        /// approved, separated by `, `).
        by: String,
    },
    /// Denied by `by`. Final.
    Denied {
        /// The approver's subject.
        by: String,
    },
    /// Approved by `approved_by` and used by one call. Final.
    Consumed {
        /// The approver's subject (or subjects, as in `Approved`).
        approved_by: String,
    },
    /// Withdrawn before a decision (a wait-mode call gave up). Final; presented as expired.
    Withdrawn,
}

impl ConfirmationState {
    /// A short name for logs (`pending`, `approved`, …).
    pub fn as_str(&self) -> &'static str {
        match self {
            ConfirmationState::Pending => "pending",
            ConfirmationState::Approved { .. } => "approved",
            ConfirmationState::Denied { .. } => "denied",
            ConfirmationState::Consumed { .. } => "consumed",
            ConfirmationState::Withdrawn => "withdrawn",
        }
    }
}

/// One confirmation: what it binds, who asked, what the approver is shown, and its state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfirmationRecord {
    /// The confirmation id (the agent's `confirmationId`).
    pub id: String,
    /// What the evidence is valid for.
    pub binding: ConfirmationBinding,
    /// The requesting identity's subject, when the requester was signed in.
    pub requester: Option<String>,
    /// What will happen, for the approver (the `summary` of `CONFIRMATION_REQUIRED`).
    pub summary: String,
    /// The gated capability's declared effect.
    pub effect: Effect,
    /// Who requires the confirmation.
    pub origin: Origin,
    /// When it was requested.
    pub created_at: Timestamp,
    /// The deadline for both the decision and the use of the evidence.
    pub expires_at: Timestamp,
    /// Where it is in its life.
    pub state: ConfirmationState,
    /// The input as the approver may see it: JSON text with the values of sensitive fields
    /// redacted, cut to [`MAX_INPUT_PREVIEW_BYTES`] (set by the registry; `None` when the gate
    /// was asked without one).
    pub input_preview: Option<String>,
    /// How many approvals it needs, and from whom.
    pub quorum: Quorum,
    /// The decisions so far, in the order they were given (one per approver).
    pub decisions: Vec<ApproverDecision>,
    /// The invocation id of the call that requested it, when that call sent one (written on the
    /// audit events of the confirmation that no call causes: its decisions, an expiry found
    /// through a decision or a sweep).
    pub invocation_id: Option<String>,
    /// The correlation id of the call that requested it (as [`invocation_id`](Self::invocation_id)).
    pub correlation_id: Option<String>,
    /// The consumer key of the call that requested it (as [`invocation_id`](Self::invocation_id));
    /// the binding holds the caller's principal, which several sessions of one user share.
    pub consumer: Option<String>,
}

/// The longest [`ConfirmationRecord::input_preview`], in bytes.
pub const MAX_INPUT_PREVIEW_BYTES: usize = 4096;

/// The longest [`ConfirmationRecord::invocation_id`] and [`ConfirmationRecord::correlation_id`]
/// kept, in bytes (a longer one is cut).
pub const MAX_CALL_ID_BYTES: usize = 256;

/// Where a repeated call finds the confirmation relayed for it: a SHA-256 of the call's
/// [`ConfirmationBinding`] (consumer key, capability, registration, instance, input hash), so
/// that a store holds no consumer key or input under it, only a digest.
///
/// A model cannot send back the `confirmationId` of a `CONFIRMATION_REQUIRED` it was told about;
/// the confirmation engine remembers, under this key, the id it relayed for the call, and
/// presents it when the same consumer repeats the same call without evidence
/// ([`ConfirmationStore::remember_relayed`]). Two calls with equal bindings have equal keys, on
/// every replica.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelayKey([u8; 32]);

impl RelayKey {
    /// The key of the call with `binding`.
    ///
    /// ```
    /// use agent_surface_policy::{ConfirmationBinding, Fingerprint, RelayKey};
    /// use serde_json::json;
    ///
    /// let binding = |consumer: &str| ConfirmationBinding {
    ///     consumer_key: consumer.into(),
    ///     capability: "orders.cancel".into(),
    ///     registration_id: String::new(),
    ///     instance_id: "main".into(),
    ///     input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    /// };
    /// assert_eq!(RelayKey::of(&binding("c-1")), RelayKey::of(&binding("c-1")));
    /// assert_ne!(RelayKey::of(&binding("c-1")), RelayKey::of(&binding("c-2")));
    /// assert!(!RelayKey::of(&binding("c-1")).to_string().contains("c-1"), "a digest, 64 hex digits");
    /// ```
    pub fn of(binding: &ConfirmationBinding) -> RelayKey {
        let digest = agent_surface_core::digest::PartsDigest::new()
            .labelled(b"agent-surface/relay-key/1", binding.consumer_key.as_bytes())
            .part(binding.capability.as_bytes())
            .part(binding.registration_id.as_bytes())
            .part(binding.instance_id.as_bytes())
            .part(binding.input_hash.as_bytes())
            .finish();
        RelayKey(digest)
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The digest as 64 lowercase hex digits.
impl fmt::Display for RelayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", agent_surface_core::hex::Hex(&self.0))
    }
}

impl fmt::Debug for RelayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelayKey({self})")
    }
}

impl ConfirmationRecord {
    /// A pending record.
    #[allow(clippy::too_many_arguments, reason = "a plain constructor of a record with that many fields")]
    pub fn pending(
        id: String,
        binding: ConfirmationBinding,
        requester: Option<String>,
        summary: String,
        effect: Effect,
        origin: Origin,
        created_at: Timestamp,
        expires_at: Timestamp,
    ) -> ConfirmationRecord {
        ConfirmationRecord {
            id,
            binding,
            requester,
            summary,
            effect,
            origin,
            created_at,
            expires_at,
            state: ConfirmationState::Pending,
            input_preview: None,
            quorum: Quorum::default(),
            decisions: Vec::new(),
            invocation_id: None,
            correlation_id: None,
            consumer: None,
        }
    }

    /// The same record, requested by the call with these ids (see
    /// [`invocation_id`](Self::invocation_id)); each is cut to [`MAX_CALL_ID_BYTES`] on a
    /// character boundary.
    pub fn with_call_ids(mut self, invocation_id: Option<&str>, correlation_id: Option<&str>) -> ConfirmationRecord {
        let cut = |id: &str| cut_at(id, MAX_CALL_ID_BYTES).to_string();
        self.invocation_id = invocation_id.map(cut);
        self.correlation_id = correlation_id.map(cut);
        self
    }

    /// The same record, requested by the consumer (session) `key` (see
    /// [`consumer`](Self::consumer)), cut to [`MAX_CALL_ID_BYTES`] on a character boundary.
    pub fn with_consumer(mut self, key: &str) -> ConfirmationRecord {
        self.consumer = Some(cut_at(key, MAX_CALL_ID_BYTES).to_string());
        self
    }

    /// The same record needing `quorum`.
    pub fn with_quorum(mut self, quorum: Quorum) -> ConfirmationRecord {
        self.quorum = quorum;
        self
    }

    /// How many approvals it has so far.
    pub fn approvals(&self) -> u32 {
        let n = self.decisions.iter().filter(|d| d.verdict != ApprovalVerdict::Deny).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether `subject` decided it already (compared as a person reads names).
    pub fn decided_by(&self, subject: &str) -> bool {
        self.decisions.iter().any(|d| same_principal(&d.approver, subject))
    }

    /// Whether it holds an in-person approval already (on any channel: the requester approved
    /// it, and an in-person approval counts at most once).
    pub fn approved_in_person(&self) -> bool {
        self.decisions.iter().any(|d| d.verdict == ApprovalVerdict::ApproveInPerson)
    }

    /// Which slot of its quorum each decision fills, in the order of the decisions
    /// ([`Quorum::assignment`]).
    pub fn slot_assignment(&self) -> Vec<Option<usize>> {
        self.quorum.assignment(&self.decisions)
    }

    /// The same record with an input preview (cut to [`MAX_INPUT_PREVIEW_BYTES`] on a character
    /// boundary, ending with `…` when cut).
    pub fn with_input_preview(mut self, preview: Option<&str>) -> ConfirmationRecord {
        self.input_preview = preview.map(|p| {
            if p.len() <= MAX_INPUT_PREVIEW_BYTES {
                return p.to_string();
            }
            format!("{}…", cut_at(p, MAX_INPUT_PREVIEW_BYTES - '…'.len_utf8()))
        });
        self
    }

    /// Whether `subject` is the requester: the requesting identity's subject or, as a
    /// conservative extra, the requesting consumer key ([`consumer`](Self::consumer), else the
    /// binding's) — compared as a person reads them
    /// ([`crate::principal::same_principal`]), so a look-alike of the requester's name is the
    /// requester.
    pub fn is_requester(&self, subject: &str) -> bool {
        self.requester.as_deref().is_some_and(|r| same_principal(r, subject))
            || same_principal(self.consumer.as_deref().unwrap_or(&self.binding.consumer_key), subject)
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut_at(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An approval or a denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// Approve: the evidence becomes usable once. Refused when the approver is the requester.
    Approve,
    /// Approve in person: the requesting user approved through a channel the agent cannot
    /// drive — an MCP elicitation answered at the client, a prompt in the host's own interface.
    /// The requester rule does not apply: the person asked *is* the requester, and the trust
    /// comes from the channel, which only host code reaches.
    ApproveInPerson,
    /// Deny: final; the evidence is rejected with `CONFIRMATION_INVALID {reason: denied}`.
    Deny,
}

/// What [`ConfirmationStore::decide`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decided {
    /// The record was pending and the decision is recorded: a denial ends it, and an approval
    /// that completes the quorum approves it (until then it stays pending).
    Done,
    /// The approver decided this record before; one decision per approver (nothing changed).
    DecidedBefore,
    /// No record with this id (never issued, evicted, or past its retention).
    Unknown,
    /// The record expired before the decision.
    Expired,
    /// The approver is the requester; nothing changed.
    SelfApproval,
    /// The record was already decided; its current state.
    NotPending(ConfirmationState),
    /// Every slot of the quorum this approver could fill is taken by other approvers (however
    /// the approvals so far are assigned); nothing changed
    /// ([`ConfirmationStore::decide_in_slots`]).
    SlotsTaken,
}

/// What [`ConfirmationStore::consume`] hands the one call it admits.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Consumed {
    /// The approver's subject (for the operator channel and audit).
    pub approved_by: String,
    /// The consumption token: a fresh random value the store recorded with this consumption,
    /// known only to the call that consumed. Presented to [`ConfirmationStore::reinstate`], it
    /// gives the approval back when that call's handler never started. `None`: the store cannot
    /// reinstate.
    pub token: Option<String>,
}

impl Consumed {
    /// Evidence approved by `approved_by` (no consumption token).
    pub fn new(approved_by: impl Into<String>) -> Consumed {
        Consumed { approved_by: approved_by.into(), token: None }
    }

    /// The same, with the consumption token the store recorded.
    pub fn with_token(mut self, token: impl Into<String>) -> Consumed {
        self.token = Some(token.into());
        self
    }
}

/// Shows whether there is a token, never the token.
impl fmt::Debug for Consumed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumed")
            .field("approved_by", &self.approved_by)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// Why [`ConfirmationStore::consume`] refused the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No record with this id (never issued, evicted, or past its retention).
    Unknown,
    /// The evidence belongs to another call; which fields differ.
    Mismatch(Mismatch),
    /// Not decided yet; the record, to repeat the request.
    Pending(Box<ConfirmationRecord>),
    /// Denied.
    Denied,
    /// Already used.
    Consumed,
    /// Expired or withdrawn.
    Expired,
}

/// What [`ConfirmationStore::insert_relayed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The record was added, and the relay key now holds its id.
    New,
    /// The relay key holds a confirmation of the same call that is still open — pending, or
    /// approved and unused, before its deadline: nothing was added or changed; that record, to
    /// answer the call with.
    Held(Box<ConfirmationRecord>),
}

/// Where confirmations live.
///
/// A record is created *pending*, decided once (*approved* or *denied*), and an approved record
/// is *consumed* by exactly one call. Every state change is one atomic operation of the store,
/// so a shared store (the planned Redis backend) can keep the guarantees across replicas:
///
/// | operation | atomic effect |
/// |---|---|
/// | [`insert`](ConfirmationStore::insert) | adds a pending record under a fresh id (set-if-absent) |
/// | [`decide`](ConfirmationStore::decide) | records one approver's decision on a pending record (a denial of an approved, unused record before its deadline revokes it: approved → denied) — refused when expired, when the approver decided it before (or, for an `ApproveInPerson`, when the record holds one already), or (for an `Approve`, not an `ApproveInPerson`) when the approver is the requester; a denial makes it denied, the approval that completes its [`Quorum`] makes it approved |
/// | [`decide_in_slots`](ConfirmationStore::decide_in_slots) | as `decide`, by an approver who can fill only some of the quorum's role slots: refused unless every approval so far and this one can each be given a distinct slot (a bipartite matching) |
/// | [`consume`](ConfirmationStore::consume) | approved → consumed, if the presented binding matches and the record has not expired |
/// | [`withdraw`](ConfirmationStore::withdraw) | pending → withdrawn (a wait-mode call gave up) |
/// | [`reinstate`](ConfirmationStore::reinstate) | consumed → approved, for the call that consumed it (its binding and consumption token), before the deadline |
/// | [`claim_expiry`](ConfirmationStore::claim_expiry) | claims the recording of an expiry until a deadline, unless a claim holds or it is recorded |
/// | [`expiry_recorded`](ConfirmationStore::expiry_recorded) | marks an expiry's event as written, for good |
/// | [`insert_relayed`](ConfirmationStore::insert_relayed) | claims a [`RelayKey`] for a new pending record and adds the record, in one step — unless the key holds a record of the same call that is still open (pending, or approved and unused, before its deadline): then nothing changes and that record is the answer. A key whose record was settled (denied, withdrawn, consumed, expired, gone) is free. Identical calls racing without evidence open one confirmation between them |
/// | [`remember_relayed`](ConfirmationStore::remember_relayed) | a [`RelayKey`] → the id of a held record, for as long as the record is held, replacing what the key held (for evidence given back by [`reinstate`](ConfirmationStore::reinstate)) |
/// | [`relayed`](ConfirmationStore::relayed) | reads what a key holds |
/// | [`forget_relayed`](ConfirmationStore::forget_relayed) | removes a key, only while it still holds the given id |
///
/// With Redis each row is one Lua script over one hash (`HGET` the state and binding, compare,
/// `HSET` the new state), which runs atomically; the record's TTL is `expires_at + retention`.
///
/// Every operation is required (only [`usage`](ConfirmationStore::usage), a gauge, has a
/// default): a default that did nothing would weaken a guarantee without anyone noticing.
///
/// `now` is passed in rather than read, so a store never disagrees with the engine about time.
/// A record is kept at least until `expires_at`; a store may keep it longer (its retention) so
/// that a late retry learns `consumed` or `denied` rather than `expired`.
pub trait ConfirmationStore: Send + Sync + fmt::Debug + 'static {
    /// Who shares the records: [`Reach::Shared`](crate::Reach::Shared) for a store that replicas share (evidence
    /// approved through one is presented on another), [`Reach::Durable`](crate::Reach::Durable)
    /// for one that this process keeps across its restarts, [`Reach::Process`](crate::Reach::Process) for one that lives in
    /// this process. The engine's default [`TargetBinding`](crate::TargetBinding) follows from
    /// it, and the registry reports wiring that shares confirmations but not idempotency.
    fn reach(&self) -> crate::Reach;

    /// What the store holds, for the operator's gauges; `None` (the default): it does not say.
    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        let _ = now;
        None
    }

    /// Adds a pending record. Ids are fresh; an id that exists already is an error.
    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Atomically opens the confirmation `record` for the call whose [`RelayKey`] is `key`,
    /// unless one is open for that call already.
    ///
    /// When `key` holds the id of a record that the store holds, whose state is pending or
    /// approved (unused), whose deadline has not passed (`now < expires_at`) and whose binding
    /// equals `record`'s, nothing changes and the answer is that record ([`Inserted::Held`]).
    /// Otherwise `record` is added as by [`insert`](Self::insert) (an id that exists already is
    /// an error, and nothing changes) and, in the same step, `key` is made to hold its id — for
    /// as long as the store holds the record, as [`remember_relayed`](Self::remember_relayed)
    /// keeps a key — replacing the settled or vanished id it held ([`Inserted::New`]).
    ///
    /// This is what lets identical calls without evidence that race — a client's concurrent
    /// retries of one call without an invocation id, on one replica or several — open one
    /// confirmation between them: the first to claim the key adds the record, every other is
    /// answered with it, so an approver's inbox holds one request. The claim and the record come
    /// into being in one step, so no caller can leave a claim without a record (a caller that
    /// stops before the step claimed nothing; after it, the record exists and lapses as any
    /// other); and a key whose record was denied, withdrawn, consumed, expired or dropped is free
    /// for the next request of the call.
    ///
    /// Required of every store: doing it as an [`insert`](Self::insert) followed by a
    /// [`remember_relayed`](Self::remember_relayed) lets racing retries each open a confirmation.
    /// The store kit of `agent-surface-testing` checks it, racing callers included.
    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>>;

    /// The record with `id`, if the store still holds it.
    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>>;

    /// Atomically records `approver`'s decision on a pending, unexpired record. An approval by
    /// the requester (see [`ConfirmationRecord::is_requester`]) is refused; a denial by the
    /// requester is accepted.
    ///
    /// A denial of an *approved* record that nobody used yet, before its deadline, revokes the
    /// approval: whoever declines (the requester at the client, an approver taking their
    /// approval back), the record becomes [`ConfirmationState::Denied`] by them, the denial is
    /// appended to its decisions after the approvals, and the answer is [`Decided::Done`]; the
    /// evidence is then refused as denied. It is the same atomic step as a consumption's, so a
    /// decline racing a use lands exactly when the use does not. A used, denied or withdrawn
    /// record, or an approved one past its deadline, answers [`Decided::NotPending`] and keeps
    /// its state. A denial is final ([`ConfirmationState::Denied`]); an approval is
    /// appended to [`ConfirmationRecord::decisions`], and the one that brings them to
    /// [`Quorum::required`] makes the record [`ConfirmationState::Approved`] (by the approvers,
    /// in order, separated by `, `). The approver may fill any of the quorum's slots: the
    /// quorum's roles and named approvers are the engine's to check (the record's quorum never
    /// changes); the store counts. With role slots the engine calls
    /// [`decide_in_slots`](Self::decide_in_slots) instead.
    ///
    /// Checks, in order: the record exists; it is pending; the approver has not decided it
    /// before ([`Decided::DecidedBefore`], names compared as a person reads them; an
    /// `ApproveInPerson` when the record holds one already is also `DecidedBefore`, whatever
    /// the channel: it is the requester each time); the approver is not the requester
    /// (approvals only); it has not expired.
    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>>;

    /// As [`decide`](Self::decide), by an approver who can fill only `slots` of the record's
    /// [`Quorum`] (as the engine found from their roles; recorded as
    /// [`ApproverDecision::slots`]). After the checks of `decide`, an approval is recorded only
    /// if the approvals so far and this one can each be given a distinct slot they could fill
    /// (a bipartite matching, [`Quorum::has_room`]), else [`Decided::SlotsTaken`]; the record is
    /// approved when every slot is filled. In the same atomic step as the rest: two approvers
    /// racing for the last slot they both could fill get one `Done` and one `SlotsTaken`.
    ///
    /// Required of every store (the store kit of `agent-surface-testing` checks it). A store
    /// that cannot match slots answers `SlotSet::ANY` as `decide` does and refuses any other set
    /// with `StoreError::Unavailable`, so that it never counts an approval towards a role slot
    /// the approver may not fill.
    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>>;

    /// Atomically consumes approved evidence for the call with binding `expected`: the first
    /// caller gets [`Consumed`], every later or concurrent one a [`Rejection`].
    ///
    /// Checks, in order: the record exists; the binding matches (before anything else, so
    /// that another call's evidence reveals nothing about its state); the state is not final
    /// (`consumed`, `denied`, `withdrawn`); it has not expired; it is approved.
    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>>;

    /// Atomically withdraws a pending record; returns the state after the call (`None` for an
    /// unknown id). A record decided meanwhile keeps its decision.
    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>>;

    /// Up to `limit` records that are pending and not expired at `now`, those that expire first
    /// first (an approval inbox's list). A snapshot: a record may be decided right after.
    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>>;

    /// Atomically claims the recording of `id`'s expiry until `until`: `true` when nobody holds
    /// it — never claimed, or claimed under a claim that lapsed (`until <= now` of that claim)
    /// before the claimer marked the event written ([`expiry_recorded`](Self::expiry_recorded)) —,
    /// `false` while another claim holds or once the event is recorded. So engines sharing the
    /// store (replicas) write one `confirmation.expired` audit event between them however many of
    /// them see the deadline pass, and at least one: an engine that stops between its claim and
    /// its write (killed, its sweep dropped) leaves a claim that lapses, and the expiry is listed
    /// ([`list_expired`](Self::list_expired)) and claimed again by another engine. A record the
    /// store no longer holds answers `true` (there is nothing to claim against). Required of
    /// every store, and atomic; the store kit of `agent-surface-testing` checks it with racing
    /// engines, and a claim that lapses.
    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Atomically marks `id`'s expiry event as written, for good: no claim is granted after it,
    /// and the record is not listed by [`list_expired`](Self::list_expired) again. The engine
    /// calls it once the audit sink took the event its claim was for. Nothing happens for a
    /// record the store does not hold.
    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Atomically gives back evidence a call consumed when that call's handler never started
    /// (the registry's strict audit could not record its start): consumed → approved, by the
    /// same approvers, so that the call's retry can use it. `true` when reinstated.
    ///
    /// Only the consumer can reinstate, and only its own consumption: the record must exist, its
    /// binding match `expected` (as for [`consume`](ConfirmationStore::consume)), its state be
    /// `consumed` with the consumption token `token` (the [`Consumed::token`] that consumption
    /// handed out), and its deadline not have passed. Reinstating clears the token, so evidence is
    /// reinstated at most once per consumption: a second reinstatement, or one after another call
    /// consumed the evidence again (with a token of its own), answers `false` and changes nothing.
    ///
    /// Required of every store. One whose [`consume`](ConfirmationStore::consume) hands out no
    /// token answers `false` (the evidence stays consumed; the caller needs a fresh approval);
    /// the store kit of `agent-surface-testing` checks a store that hands out tokens.
    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Up to `limit` records whose deadline passed (`expires_at <= now`) while they were pending,
    /// approved and unused, or withdrawn, whose expiry is not recorded
    /// ([`expiry_recorded`](ConfirmationStore::expiry_recorded)) and not under a claim that holds
    /// at `now` ([`claim_expiry`](ConfirmationStore::claim_expiry)), those that expired first first —
    /// for the engine's sweep, which records their `confirmation.expired` event even when nobody
    /// meets them again. Records the store no longer holds (past its retention) are not listed. A
    /// snapshot: a listed record may be claimed right after.
    ///
    /// Required of every store: a store that listed none would leave the expiry of a request
    /// nobody meets again unrecorded in the audit trail. The store kit checks it.
    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>>;

    /// Atomically remembers that the confirmation `id` was relayed for the call whose key is
    /// `key` (replacing the id the key held, open or not: the engine calls it for evidence it
    /// gave back with [`reinstate`](Self::reinstate), which is approved and beats a pending
    /// request; a new request claims its key with [`insert_relayed`](Self::insert_relayed)), for
    /// as long as the store holds the record `id` —
    /// at most its `expires_at` plus the store's retention, and never past the record's eviction.
    /// Nothing is remembered for an id the store does not hold. The memory is what lets a repeat
    /// of the call on any engine sharing the store (replicas) present the confirmation a person
    /// approved; it never grants anything by itself, since the engine consumes the id as any
    /// presented evidence (binding and single use checked).
    ///
    /// Required of every store: a store that remembered nothing would make each repeat ask for a
    /// fresh confirmation, which is safe but leaves an approval given in an inbox unused by a
    /// caller that cannot send ids (a model), silently. The store kit of `agent-surface-testing`
    /// checks it.
    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The id remembered under `key` ([`remember_relayed`](Self::remember_relayed),
    /// [`insert_relayed`](Self::insert_relayed)), if its record is still held.
    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// Atomically forgets `key`, only while it still holds `id` (a confirmation relayed for the
    /// call meanwhile, e.g. by another replica, stays).
    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: ConfirmationStore + ?Sized> ConfirmationStore for std::sync::Arc<S> {
    fn reach(&self) -> crate::Reach {
        (**self).reach()
    }

    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        (**self).usage(now)
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).insert(record, now)
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        (**self).insert_relayed(record, key, now)
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        (**self).get(id, now)
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        (**self).decide(id, verdict, approver, now)
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        (**self).decide_in_slots(id, verdict, approver, slots, now)
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        (**self).consume(id, expected, now)
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        (**self).withdraw(id, now)
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        (**self).list_pending(now, limit)
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).claim_expiry(id, until, now)
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).expiry_recorded(id, now)
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).reinstate(id, expected, token, now)
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        (**self).list_expired(now, limit)
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).remember_relayed(key, id, now)
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        (**self).relayed(key, now)
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).forget_relayed(key, id, now)
    }
}

/// The configuration of a [`MemoryConfirmationStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfirmationStoreConfig {
    /// The most records held at once. When full, the oldest record that is not approved is
    /// dropped (among the oldest 64; if all of those are approved, the oldest), so a flood of
    /// new requests drops other requests before it drops evidence a person approved. A dropped
    /// record's evidence is unknown and rejected, so eviction can only refuse a call, never let
    /// one run twice.
    pub capacity: usize,
    /// The most records one consumer key holds at once; at it, the consumer's own oldest record
    /// is dropped, never another consumer's.
    pub per_consumer: usize,
    /// How long a record is kept after it expires, so that a late retry is told `consumed` or
    /// `denied` rather than `expired`.
    pub retention: Duration,
}

impl Default for MemoryConfirmationStoreConfig {
    /// 10 000 records, 1 000 per consumer key, kept one hour past their expiry.
    fn default() -> MemoryConfirmationStoreConfig {
        MemoryConfirmationStoreConfig { capacity: 10_000, per_consumer: 1_000, retention: Duration::from_secs(3600) }
    }
}

/// A [`ConfirmationStore`] in this process's memory: bounded, expiring, every operation one
/// short critical section. Records do not survive a restart; evidence issued before a restart is
/// then unknown and rejected (as expired), which never lets a call run without a fresh approval.
pub struct MemoryConfirmationStore {
    config: MemoryConfirmationStoreConfig,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, ConfirmationRecord>,
    /// Ids in insertion order with the instant each record is gone (`expires_at + retention`),
    /// for sweeping and eviction. Ids of records already dropped are skipped.
    order: VecDeque<(Timestamp, String)>,
    /// Per consumer key, the ids of its records in insertion order.
    by_consumer: HashMap<String, VecDeque<String>>,
    /// Ids of held records whose expiry was claimed ([`ConfirmationStore::claim_expiry`]).
    /// `Some(until)`: claimed until then; `None`: the event is recorded
    /// ([`ConfirmationStore::expiry_recorded`]).
    expiry_claimed: HashMap<String, Option<Timestamp>>,
    /// The consumption token of each consumed record that may still be reinstated
    /// ([`ConfirmationStore::reinstate`]).
    tokens: HashMap<String, String>,
    /// The relayed confirmations ([`ConfirmationStore::insert_relayed`],
    /// [`ConfirmationStore::remember_relayed`]): key → id of a held
    /// record, and back (one key per record), so that dropping a record drops its key: the
    /// memory never outgrows the records.
    relays: HashMap<RelayKey, String>,
    relay_of: HashMap<String, RelayKey>,
}

/// How many of the oldest records a global eviction looks through for one that is not approved.
const EVICTION_SCAN: usize = 64;

impl Inner {
    /// Drops the record `id` (if held) and its consumer's entry for it.
    fn drop_record(&mut self, id: &str, why: &'static str) {
        let Some(record) = self.records.remove(id) else { return };
        self.expiry_claimed.remove(id);
        self.tokens.remove(id);
        self.unrelay(id);
        let consumer = &record.binding.consumer_key;
        if let Some(ids) = self.by_consumer.get_mut(consumer) {
            if let Some(at) = ids.iter().position(|i| i == id) {
                ids.remove(at);
            }
            if ids.is_empty() {
                self.by_consumer.remove(consumer);
            }
        }
        tracing::debug!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            state = record.state.as_str(),
            why,
            "confirmation dropped"
        );
    }

    /// Makes `key` hold the held record `id` (dropping the key `id` had, and the tie of the
    /// record `key` held).
    fn relay(&mut self, key: &RelayKey, id: &str) {
        self.unrelay(id);
        if let Some(previous) = self.relays.insert(*key, id.to_string()) {
            self.relay_of.remove(&previous);
        }
        self.relay_of.insert(id.to_string(), *key);
    }

    /// Forgets the relay key of the record `id`, if it has one.
    fn unrelay(&mut self, id: &str) {
        if let Some(key) = self.relay_of.remove(id)
            && self.relays.get(&key).is_some_and(|held| held == id)
        {
            self.relays.remove(&key);
        }
    }

    /// Drops the oldest record that is not approved among the oldest [`EVICTION_SCAN`], or the
    /// oldest record; false when there was none to drop.
    fn evict_one(&mut self) -> bool {
        let mut oldest_live = None;
        let mut seen = 0;
        for (at, (_, id)) in self.order.iter().enumerate() {
            let Some(record) = self.records.get(id) else { continue };
            if oldest_live.is_none() {
                oldest_live = Some(at);
            }
            if !matches!(record.state, ConfirmationState::Approved { .. }) {
                self.evict_at(at);
                return true;
            }
            seen += 1;
            if seen >= EVICTION_SCAN {
                break;
            }
        }
        match oldest_live {
            Some(at) => {
                self.evict_at(at);
                true
            }
            None => false,
        }
    }

    fn evict_at(&mut self, at: usize) {
        if let Some((_, id)) = self.order.remove(at) {
            self.drop_record(&id, "store full");
        }
    }
}

impl MemoryConfirmationStore {
    /// An empty store.
    pub fn new(config: MemoryConfirmationStoreConfig) -> MemoryConfirmationStore {
        MemoryConfirmationStore { config, inner: Mutex::new(Inner::default()) }
    }

    /// How many records it holds (including expired ones within their retention).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// How many relayed confirmations it remembers ([`ConfirmationStore::insert_relayed`],
    /// [`ConfirmationStore::remember_relayed`]): at
    /// most one per held record, since dropping a record drops its relay.
    pub fn relays(&self) -> usize {
        self.lock().relays.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each critical section leaves `Inner` consistent; a poisoned lock guards valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gone_at(&self, record: &ConfirmationRecord) -> Timestamp {
        record.expires_at.saturating_add(self.config.retention)
    }

    fn gone(&self, record: &ConfirmationRecord, now: Timestamp) -> bool {
        self.gone_at(record) <= now
    }

    /// Drops records past their retention from the front of the insertion order. (A record that
    /// expires earlier than one inserted before it waits behind it; lookups treat it as gone
    /// already, and the capacity bounds the wait.)
    fn sweep(&self, inner: &mut Inner, now: Timestamp) {
        while let Some((gone_at, _)) = inner.order.front() {
            if *gone_at > now {
                break;
            }
            if let Some((_, id)) = inner.order.pop_front() {
                inner.drop_record(&id, "retention over");
            }
        }
    }

    /// The live record with `id` (a record past its retention counts as absent).
    fn live<'i>(&self, inner: &'i mut Inner, id: &str, now: Timestamp) -> Option<&'i mut ConfirmationRecord> {
        self.sweep(inner, now);
        inner.records.get_mut(id).filter(|r| !self.gone(r, now))
    }

    fn insert_now(&self, record: ConfirmationRecord, now: Timestamp) -> Result<(), StoreError> {
        let mut inner = self.lock();
        self.insert_locked(&mut inner, record, now)
    }

    /// [`ConfirmationStore::insert_relayed`], in one critical section.
    fn insert_relayed_now(
        &self,
        record: ConfirmationRecord,
        key: &RelayKey,
        now: Timestamp,
    ) -> Result<Inserted, StoreError> {
        let mut inner = self.lock();
        self.sweep(&mut inner, now);
        if let Some(held) = inner.relays.get(key).cloned()
            && let Some(open) = self.live(&mut inner, &held, now)
            && matches!(open.state, ConfirmationState::Pending | ConfirmationState::Approved { .. })
            && now < open.expires_at
            && open.binding == record.binding
        {
            return Ok(Inserted::Held(Box::new(open.clone())));
        }
        let id = record.id.clone();
        self.insert_locked(&mut inner, record, now)?;
        inner.relay(key, &id);
        Ok(Inserted::New)
    }

    fn insert_locked(&self, inner: &mut Inner, record: ConfirmationRecord, now: Timestamp) -> Result<(), StoreError> {
        self.sweep(inner, now);
        if inner.records.contains_key(&record.id) {
            return Err(StoreError::Unavailable(format!("confirmation id {} already exists", record.id)));
        }
        if self.config.capacity == 0 || self.config.per_consumer == 0 {
            return Err(StoreError::Full { capacity: 0 });
        }
        // The consumer's own quota first: it makes room from its own records only.
        let consumer = record.binding.consumer_key.clone();
        while inner.by_consumer.get(&consumer).is_some_and(|ids| ids.len() >= self.config.per_consumer) {
            let Some(oldest) = inner.by_consumer.get(&consumer).and_then(|ids| ids.front().cloned()) else { break };
            inner.drop_record(&oldest, "consumer quota");
        }
        while inner.records.len() >= self.config.capacity {
            if !inner.evict_one() {
                break;
            }
        }
        // Keep the insertion order free of entries whose records are gone.
        if inner.order.len() > 2 * inner.records.len() + 64 {
            let Inner { records, order, .. } = inner;
            order.retain(|(_, id)| records.contains_key(id));
        }
        inner.order.push_back((self.gone_at(&record), record.id.clone()));
        inner.by_consumer.entry(consumer).or_default().push_back(record.id.clone());
        inner.records.insert(record.id.clone(), record);
        Ok(())
    }

    fn decide_now(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &str,
        slots: SlotSet,
        now: Timestamp,
    ) -> Decided {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return Decided::Unknown };
        if verdict == ApprovalVerdict::Deny
            && matches!(record.state, ConfirmationState::Approved { .. })
            && now < record.expires_at
        {
            // A decline after the approval, before its use: the approval is revoked.
            record.decisions.push(
                ApproverDecision::new(approver, verdict, now).with_slots(slots.intersect(record.quorum.all_slots())),
            );
            record.state = ConfirmationState::Denied { by: approver.to_string() };
            return Decided::Done;
        }
        if record.state != ConfirmationState::Pending {
            return Decided::NotPending(record.state.clone());
        }
        if record.decided_by(approver) || verdict == ApprovalVerdict::ApproveInPerson && record.approved_in_person() {
            return Decided::DecidedBefore;
        }
        if verdict == ApprovalVerdict::Approve && record.is_requester(approver) {
            return Decided::SelfApproval;
        }
        if now >= record.expires_at {
            return Decided::Expired;
        }
        let slots = slots.intersect(record.quorum.all_slots());
        if verdict != ApprovalVerdict::Deny && !record.quorum.has_room(&record.decisions, slots) {
            return Decided::SlotsTaken;
        }
        record.decisions.push(ApproverDecision::new(approver, verdict, now).with_slots(slots));
        if verdict == ApprovalVerdict::Deny {
            record.state = ConfirmationState::Denied { by: approver.to_string() };
        } else if record.approvals() >= record.quorum.required() {
            let by: Vec<&str> = record.decisions.iter().map(|d| d.approver.as_str()).collect();
            record.state = ConfirmationState::Approved { by: by.join(", ") };
        }
        Decided::Done
    }

    fn consume_now(&self, id: &str, expected: &ConfirmationBinding, now: Timestamp) -> Result<Consumed, Rejection> {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return Err(Rejection::Unknown) };
        let mismatch = record.binding.mismatch(expected);
        if !mismatch.is_empty() {
            return Err(Rejection::Mismatch(mismatch));
        }
        let approved_by = match &record.state {
            ConfirmationState::Consumed { .. } => return Err(Rejection::Consumed),
            ConfirmationState::Denied { .. } => return Err(Rejection::Denied),
            ConfirmationState::Withdrawn => return Err(Rejection::Expired),
            _ if now >= record.expires_at => return Err(Rejection::Expired),
            ConfirmationState::Pending => return Err(Rejection::Pending(Box::new(record.clone()))),
            ConfirmationState::Approved { by } => by.clone(),
        };
        record.state = ConfirmationState::Consumed { approved_by: approved_by.clone() };
        let token = agent_surface_core::id::random_id("k-");
        inner.tokens.insert(id.to_string(), token.clone());
        Ok(Consumed { approved_by, token: Some(token) })
    }

    fn reinstate_now(&self, id: &str, expected: &ConfirmationBinding, token: &str, now: Timestamp) -> bool {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return false };
        if !record.binding.mismatch(expected).is_empty() || now >= record.expires_at {
            return false;
        }
        let ConfirmationState::Consumed { approved_by } = &record.state else { return false };
        let by = approved_by.clone();
        if inner.tokens.get(id).map(String::as_bytes) != Some(token.as_bytes()) {
            return false;
        }
        inner.tokens.remove(id);
        if let Some(record) = inner.records.get_mut(id) {
            record.state = ConfirmationState::Approved { by };
        }
        true
    }

    fn list_expired_now(&self, now: Timestamp, limit: usize) -> Vec<ConfirmationRecord> {
        let mut inner = self.lock();
        self.sweep(&mut inner, now);
        let mut expired: Vec<ConfirmationRecord> = inner
            .records
            .values()
            .filter(|r| {
                r.expires_at <= now
                    && !self.gone(r, now)
                    && matches!(
                        r.state,
                        ConfirmationState::Pending | ConfirmationState::Approved { .. } | ConfirmationState::Withdrawn
                    )
                    && match inner.expiry_claimed.get(&r.id) {
                        None => true,
                        Some(None) => false,
                        Some(Some(until)) => *until <= now,
                    }
            })
            .cloned()
            .collect();
        drop(inner);
        expired.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        expired.truncate(limit);
        expired
    }

    fn withdraw_now(&self, id: &str, now: Timestamp) -> Option<ConfirmationState> {
        let mut inner = self.lock();
        let record = self.live(&mut inner, id, now)?;
        if record.state == ConfirmationState::Pending {
            record.state = ConfirmationState::Withdrawn;
        }
        Some(record.state.clone())
    }

    fn remember_relayed_now(&self, key: &RelayKey, id: &str, now: Timestamp) {
        let mut inner = self.lock();
        if self.live(&mut inner, id, now).is_none() {
            return;
        }
        inner.relay(key, id);
    }

    fn relayed_now(&self, key: &RelayKey, now: Timestamp) -> Option<String> {
        let mut inner = self.lock();
        if inner.relays.is_empty() {
            return None;
        }
        let id = inner.relays.get(key)?.clone();
        self.live(&mut inner, &id, now).map(|_| id)
    }

    fn forget_relayed_now(&self, key: &RelayKey, id: &str) {
        let mut inner = self.lock();
        if inner.relays.get(key).is_some_and(|held| held == id) {
            inner.relays.remove(key);
            inner.relay_of.remove(id);
        }
    }
}

impl Default for MemoryConfirmationStore {
    fn default() -> MemoryConfirmationStore {
        MemoryConfirmationStore::new(MemoryConfirmationStoreConfig::default())
    }
}

impl fmt::Debug for MemoryConfirmationStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryConfirmationStore").field("config", &self.config).field("len", &self.len()).finish()
    }
}

impl ConfirmationStore for MemoryConfirmationStore {
    fn reach(&self) -> crate::Reach {
        crate::Reach::Process
    }

    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        let inner = self.lock();
        let pending =
            inner.records.values().filter(|r| r.state == ConfirmationState::Pending && r.expires_at > now).count();
        Some(crate::StoreUsage::entries(inner.records.len()).with_pending(pending))
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.insert_now(record, now) })
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        Box::pin(std::future::ready(self.insert_relayed_now(record, key, now)))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            Ok(self.live(&mut inner, id, now).map(|r| r.clone()))
        })
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async move { Ok(self.decide_now(id, verdict, approver, SlotSet::ANY, now)) })
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async move { Ok(self.decide_now(id, verdict, approver, slots, now)) })
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        Box::pin(async move { Ok(self.consume_now(id, expected, now)) })
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        Box::pin(async move { Ok(self.withdraw_now(id, now)) })
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        let mut pending: Vec<ConfirmationRecord> = {
            let mut inner = self.lock();
            self.sweep(&mut inner, now);
            inner
                .records
                .values()
                .filter(|r| r.state == ConfirmationState::Pending && now < r.expires_at)
                .cloned()
                .collect()
        };
        pending.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        pending.truncate(limit);
        Box::pin(std::future::ready(Ok(pending)))
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let first = {
            let mut inner = self.lock();
            let held = self.live(&mut inner, id, now).is_some();
            let free = match inner.expiry_claimed.get(id) {
                None => true,
                Some(None) => false,
                Some(Some(claimed)) => *claimed <= now,
            };
            if held && free {
                inner.expiry_claimed.insert(id.to_string(), Some(until));
            }
            !held || free
        };
        Box::pin(std::future::ready(Ok(first)))
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut inner = self.lock();
        if self.live(&mut inner, id, now).is_some() {
            inner.expiry_claimed.insert(id.to_string(), None);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(self.reinstate_now(id, expected, token, now))))
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.list_expired_now(now, limit))))
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remember_relayed_now(key, id, now);
        Box::pin(std::future::ready(Ok(())))
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.relayed_now(key, now))))
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = now;
        self.forget_relayed_now(key, id);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(slots: &[usize]) -> SlotSet {
        slots.iter().fold(SlotSet::EMPTY, |s, &i| s.with(i))
    }

    fn approval(who: &str, slots: SlotSet) -> ApproverDecision {
        ApproverDecision::new(who, ApprovalVerdict::Approve, Timestamp::from_unix_millis(0)).with_slots(slots)
    }

    /// Every assignment of `approvals` to distinct slots, by brute force: the size of the largest.
    fn largest_matching(approvals: &[SlotSet], slots: usize) -> usize {
        fn go(i: usize, approvals: &[SlotSet], used: u32, slots: usize) -> usize {
            if i == approvals.len() {
                return 0;
            }
            let mut best = go(i + 1, approvals, used, slots);
            for s in 0..slots {
                if approvals[i].contains(s) && used & (1 << s) == 0 {
                    best = best.max(1 + go(i + 1, approvals, used | (1 << s), slots));
                }
            }
            best
        }
        go(0, approvals, 0, slots)
    }

    #[test]
    fn the_matching_moves_an_earlier_approver_to_make_room() {
        // Slots: 0 manager, 1 security. The first approver holds both roles, the second only
        // manager: the first moves to security, the second takes manager.
        let both = set(&[0, 1]);
        let manager = set(&[0]);
        assert_eq!(assign(&[both, manager], 2), vec![Some(1), Some(0)]);
        // A second manager-only approver has no slot left: the largest matching leaves it out.
        assert_eq!(assign(&[both, manager, manager], 2), vec![Some(1), Some(0), None]);
        // An approver who fills nothing gets nothing.
        assert_eq!(assign(&[SlotSet::EMPTY, both], 2), vec![None, Some(0)]);
    }

    #[test]
    fn the_matching_is_maximum_on_every_small_case() {
        // Every list of up to 4 approvals over 3 slots, each approval any subset of the slots.
        for len in 0..=4usize {
            for code in 0..8u32.pow(len as u32) {
                let approvals: Vec<SlotSet> = (0..len).map(|i| SlotSet::from_bits((code >> (3 * i)) & 0b111)).collect();
                let got = assign(&approvals, 3);
                let filled: Vec<usize> = got.iter().flatten().copied().collect();
                let mut distinct = filled.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), filled.len(), "one approval per slot: {approvals:?} -> {got:?}");
                for (a, slot) in approvals.iter().zip(&got) {
                    assert!(slot.is_none_or(|s| a.contains(s)), "a slot the approver can fill: {approvals:?}");
                }
                assert_eq!(filled.len(), largest_matching(&approvals, 3), "maximum: {approvals:?} -> {got:?}");
            }
        }
    }

    #[test]
    fn room_for_one_more_approval_is_a_matching_of_all() {
        let q = Quorum::default().with_slot("manager").with_slot("security");
        assert_eq!(q.required(), 2);
        let both = approval("dana", set(&[0, 1]));
        assert!(q.has_room(std::slice::from_ref(&both), set(&[0])), "dana moves to security");
        assert!(q.has_room(std::slice::from_ref(&both), set(&[1])), "dana stays on manager");
        let taken = [both, approval("bob", set(&[0]))];
        assert!(!q.has_room(&taken, set(&[0, 1])), "both slots are filled");
        let manager = [approval("bob", set(&[0]))];
        assert!(!q.has_room(&manager, set(&[0])), "a second manager-only approver cannot count");
        assert!(q.has_room(&manager, set(&[1])));
        assert_eq!(q.assignment(&taken), vec![Some(1), Some(0)]);
        // A denial takes no slot.
        let denied = ApproverDecision::new("eve", ApprovalVerdict::Deny, Timestamp::from_unix_millis(0));
        assert_eq!(q.assignment(std::slice::from_ref(&denied)), vec![None]);
        assert!(q.has_room(&[denied], set(&[0])));
    }

    #[test]
    fn slots_follow_roles_names_and_free_slots() {
        let q = Quorum::of(3).with_slot("security");
        assert_eq!((q.required(), q.slots.len()), (3, 1));
        let sec = Identity::new("sam").with_role("security");
        assert_eq!(q.slots_for(&sec), set(&[0, 1, 2]));
        assert_eq!(q.slots_for(&Identity::new("ann")), set(&[1, 2]), "free slots take anyone");

        let named = Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol");
        assert_eq!(named.slots_for(&Identity::new("bob")), set(&[0, 1]));
        assert!(named.slots_for(&Identity::new("dave")).is_empty(), "an outsider");
        assert!(named.slots_for(&Identity::new("Bob")).is_empty(), "exact subjects only");
        assert!(named.slots_for(&Identity::new("b\u{043e}b")).is_empty(), "a look-alike is not a member");

        let roles = Quorum::of(2).with_role("manager").with_slot("security");
        assert!(roles.slots_for(&Identity::new("sam").with_role("security")).is_empty(), "not a manager");
        let both = Identity::new("dana").with_role("manager").with_role("security");
        assert_eq!(roles.slots_for(&both), set(&[0, 1]));
        assert_eq!(roles.slots_for(&Identity::new("max").with_role("manager")), set(&[1]));
    }

    #[test]
    fn unsatisfiable_quorums_have_a_problem() {
        assert_eq!(Quorum::default().problem(), None);
        assert_eq!(Quorum::of(2).with_approver("a").with_approver("b").problem(), None);
        assert_eq!(Quorum::default().with_slot("manager").with_slot("security").problem(), None);
        let problem = |q: Quorum| q.problem().unwrap_or_default();
        assert!(problem(Quorum::of(0)).contains("0 approvals"));
        assert!(problem(Quorum::of(17)).contains("at most 16"));
        assert!(problem(Quorum::of(3).with_approver("a").with_approver("b")).contains("3 approvals of 2 named"));
        assert!(problem(Quorum::of(2).with_approver("bob").with_approver("Bob")).contains("twice"));
        assert!(problem(Quorum::of(1).with_role(" ")).contains("empty role"));
        assert!(problem(Quorum::default().with_slot("")).contains("empty role"));
        assert!(problem(Quorum::of(1).with_approver("")).contains("empty approver"));
        let q = Quorum { approvals: 1, slots: vec!["manager".into(), "security".into()], ..Quorum::default() };
        assert!(problem(q).contains("2 role slots for 1 approval"));
        let many = (0..=MAX_NAMED_APPROVERS).fold(Quorum::of(1), |q, i| q.with_approver(format!("a{i}")));
        assert!(problem(many).contains("at most 256"));
    }

    #[test]
    fn a_stored_quorum_without_the_new_fields_still_reads() {
        let old: Quorum = serde_json::from_str(r#"{"approvals":2,"roles":["manager"]}"#).unwrap();
        assert_eq!(old, Quorum::of(2).with_role("manager"));
        let q = Quorum::of(2).with_approver("a").with_approver("b").with_slot("manager");
        let text = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<Quorum>(&text).unwrap(), q);
        assert_eq!(serde_json::to_string(&Quorum::of(2)).unwrap(), r#"{"approvals":2}"#, "unused fields are left out");
    }
}
