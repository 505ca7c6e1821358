//! The stored shapes of a confirmation and of a task, as the durable stores write them: one JSON
//! object per record, shared by every backend that keeps records as JSON (`agent-surface-sqlite`,
//! `agent-surface-postgres`), so that the shape a record is written in is defined once.
//!
//! These are the shapes of **format 1**: a later build must read what an earlier one wrote, so a
//! field is only ever added (with a default for records that lack it), never renamed or removed.
//! Each backend keeps the format version beside the JSON (a `v` column) and refuses to misread a
//! record of a later format.

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    ConfirmationRecord, Quorum,
    confirmation::{ApprovalVerdict, ApproverDecision, ConfirmationBinding, ConfirmationState, SlotSet},
    idempotency::Fingerprint,
    task::{TaskRecord, TaskStatus},
};

/// A confirmation as a durable store keeps it (see the module docs).
#[derive(Serialize, Deserialize)]
pub struct StoredConfirmation {
    id: String,
    consumer_key: String,
    capability: String,
    registration_id: String,
    instance_id: String,
    /// The input hash, 64 hex digits.
    input_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requester: Option<String>,
    summary: String,
    effect: Effect,
    origin: Origin,
    created_at: u64,
    expires_at: u64,
    /// `pending`, `approved`, `denied`, `consumed` or `withdrawn`.
    state: String,
    /// Who approved (approved, consumed) or denied.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_preview: Option<String>,
    #[serde(default)]
    quorum: Quorum,
    #[serde(default)]
    decisions: Vec<StoredDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer: Option<String>,
}

/// One decision: approver, verdict (`approve`, `in-person`, `deny`), Unix milliseconds, the
/// slots the approver could fill (bits).
#[derive(Serialize, Deserialize)]
struct StoredDecision {
    a: String,
    v: String,
    t: u64,
    m: u32,
}

/// The name a state is stored under, and who decided it (empty when nobody did).
pub fn state_name(state: &ConfirmationState) -> (&'static str, String) {
    match state {
        ConfirmationState::Pending => ("pending", String::new()),
        ConfirmationState::Approved { by } => ("approved", by.clone()),
        ConfirmationState::Denied { by } => ("denied", by.clone()),
        ConfirmationState::Consumed { approved_by } => ("consumed", approved_by.clone()),
        ConfirmationState::Withdrawn => ("withdrawn", String::new()),
    }
}

fn verdict_name(verdict: ApprovalVerdict) -> &'static str {
    match verdict {
        ApprovalVerdict::Approve => "approve",
        ApprovalVerdict::ApproveInPerson => "in-person",
        ApprovalVerdict::Deny => "deny",
    }
}

impl StoredConfirmation {
    /// The stored shape of `record`.
    pub fn of(record: &ConfirmationRecord) -> StoredConfirmation {
        let (state, by) = state_name(&record.state);
        StoredConfirmation {
            id: record.id.clone(),
            consumer_key: record.binding.consumer_key.clone(),
            capability: record.binding.capability.clone(),
            registration_id: record.binding.registration_id.clone(),
            instance_id: record.binding.instance_id.clone(),
            input_hash: record.binding.input_hash.to_string(),
            requester: record.requester.clone(),
            summary: record.summary.clone(),
            effect: record.effect,
            origin: record.origin,
            created_at: record.created_at.unix_millis(),
            expires_at: record.expires_at.unix_millis(),
            state: state.to_string(),
            by,
            input_preview: record.input_preview.clone(),
            quorum: record.quorum.clone(),
            decisions: record
                .decisions
                .iter()
                .map(|d| StoredDecision {
                    a: d.approver.clone(),
                    v: verdict_name(d.verdict).to_string(),
                    t: d.at.unix_millis(),
                    m: d.slots.bits(),
                })
                .collect(),
            invocation_id: record.invocation_id.clone(),
            correlation_id: record.correlation_id.clone(),
            consumer: record.consumer.clone(),
        }
    }

    /// The record back, or `None` when a field does not read (an input hash that is not 64 hex
    /// digits, an unknown state or verdict).
    pub fn into_record(self) -> Option<ConfirmationRecord> {
        let input_hash = agent_surface_core::hex::decode::<32>(&self.input_hash)?;
        let binding = ConfirmationBinding {
            consumer_key: self.consumer_key,
            capability: self.capability,
            registration_id: self.registration_id,
            instance_id: self.instance_id,
            input_hash: Fingerprint::from_bytes(input_hash),
        };
        let mut record = ConfirmationRecord::pending(
            self.id,
            binding,
            self.requester,
            self.summary,
            self.effect,
            self.origin,
            Timestamp::from_unix_millis(self.created_at),
            Timestamp::from_unix_millis(self.expires_at),
        )
        .with_input_preview(self.input_preview.as_deref())
        .with_quorum(self.quorum)
        .with_call_ids(self.invocation_id.as_deref(), self.correlation_id.as_deref());
        record.consumer = self.consumer;
        let by = self.by;
        record.state = match self.state.as_str() {
            "pending" => ConfirmationState::Pending,
            "approved" => ConfirmationState::Approved { by },
            "denied" => ConfirmationState::Denied { by },
            "consumed" => ConfirmationState::Consumed { approved_by: by },
            "withdrawn" => ConfirmationState::Withdrawn,
            _ => return None,
        };
        record.decisions = self
            .decisions
            .into_iter()
            .map(|d| {
                let verdict = match d.v.as_str() {
                    "approve" => ApprovalVerdict::Approve,
                    "in-person" => ApprovalVerdict::ApproveInPerson,
                    "deny" => ApprovalVerdict::Deny,
                    _ => return None,
                };
                Some(
                    ApproverDecision::new(d.a, verdict, Timestamp::from_unix_millis(d.t))
                        .with_slots(SlotSet::from_bits(d.m)),
                )
            })
            .collect::<Option<Vec<_>>>()?;
        Some(record)
    }
}

/// A task as a durable store keeps it (see the module docs).
#[derive(Serialize, Deserialize)]
pub struct StoredTask {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    /// As MCP spells it (`working`, `completed`, …).
    status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_message: Option<String>,
    created_at: u64,
    updated_at: u64,
    expires_at: u64,
    running_until: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
    #[serde(default)]
    cancel_requested: bool,
    /// The running process's lease (Unix ms); absent in records written before leases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until: Option<u64>,
}

/// The status stored under `name` (as MCP spells it), if any.
pub fn task_status_of(name: &str) -> Option<TaskStatus> {
    Some(match name {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "failed" => TaskStatus::Failed,
        "cancelled" => TaskStatus::Cancelled,
        _ => return None,
    })
}

impl StoredTask {
    /// The stored shape of `record`.
    pub fn of(record: &TaskRecord) -> StoredTask {
        StoredTask {
            id: record.id.clone(),
            owner: record.owner.clone(),
            status: record.status.as_str().to_string(),
            status_message: record.status_message.clone(),
            created_at: record.created_at.unix_millis(),
            updated_at: record.updated_at.unix_millis(),
            expires_at: record.expires_at.unix_millis(),
            running_until: record.running_until.unix_millis(),
            payload: record.payload.clone(),
            cancel_requested: record.cancel_requested,
            lease_until: record.lease_until.map(Timestamp::unix_millis),
        }
    }

    /// The record back, or `None` for an unknown status.
    pub fn into_record(self) -> Option<TaskRecord> {
        let at = Timestamp::from_unix_millis;
        let mut record = TaskRecord::working(
            self.id,
            self.owner,
            at(self.created_at),
            std::time::Duration::ZERO,
            std::time::Duration::ZERO,
        );
        record.status = task_status_of(&self.status)?;
        record.status_message = self.status_message;
        record.updated_at = at(self.updated_at);
        record.expires_at = at(self.expires_at);
        record.running_until = at(self.running_until);
        record.payload = self.payload;
        record.cancel_requested = self.cancel_requested;
        record.lease_until = self.lease_until.map(at);
        Some(record)
    }
}

/// When a durable store may delete `record`: its time to live once final, its deadline while
/// running.
pub fn task_keep_until(record: &TaskRecord) -> Timestamp {
    if record.status.is_terminal() { record.expires_at } else { record.running_until }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_status_round_trips_through_its_stored_name() {
        for status in [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            assert_eq!(task_status_of(status.as_str()), Some(status));
        }
        assert_eq!(task_status_of("nope"), None);
    }
}
