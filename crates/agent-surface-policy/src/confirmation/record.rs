//! What a confirmation store holds: the [`ConfirmationRecord`], the [`ConfirmationBinding`] it is
//! bound to, its [`ConfirmationState`] and the [`RelayKey`] of a call.

use std::fmt;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};

use super::quorum::{ApprovalVerdict, ApproverDecision, Quorum};
use crate::idempotency::Fingerprint;
use crate::principal::same_principal;

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
/// ([`ConfirmationStore::remember_relayed`](super::ConfirmationStore::remember_relayed)). Two calls with equal bindings have equal keys, on
/// every replica.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelayKey([u8; 32]);

impl RelayKey {
    /// The key of the call with `binding`.
    ///
    /// ```
    /// use agent_surface_policy::{confirmation::{ConfirmationBinding, RelayKey}, idempotency::Fingerprint};
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
