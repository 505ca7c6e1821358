//! Confirmation (phase 7): [`ConfirmationEngine`], the gate that asks a person before a call
//! runs, and the single-use evidence it issues.

mod approver;
mod config;
mod decisions;
mod engine;
mod expiry;
mod memory;
mod policy;
mod quorum;
mod record;
mod rules;
mod store;
mod sweeper;

pub use approver::{Approver, FnApprover, Review};
pub use config::{
    ConfirmationConfig, ConfirmationMode, DEFAULT_CONFIRMATION_TTL, DEFAULT_EXPIRY_WARNING, DEFAULT_STORE_BUDGET,
    DEFAULT_SWEEP_INTERVAL, TargetBinding,
};
pub use decisions::ApprovalError;
pub use engine::{ConfirmationEngine, STORE_RETRY_AFTER};
pub use memory::{MemoryConfirmationStore, MemoryConfirmationStoreConfig};
pub use policy::{ConfirmationPolicy, FnConfirmationPolicy, Gate};
pub use quorum::{ApprovalVerdict, ApproverDecision, MAX_NAMED_APPROVERS, MAX_QUORUM, Quorum, SlotSet};
pub use record::{
    ConfirmationBinding, ConfirmationRecord, ConfirmationState, MAX_CALL_ID_BYTES, MAX_INPUT_PREVIEW_BYTES, Mismatch,
    RelayKey,
};
pub use store::{ConfirmationStore, Consumed, Decided, Inserted, Rejection};
pub use sweeper::{EXPIRY_CLAIM_LEASE, EXPIRY_WRITE_ATTEMPTS, MAX_UNWRITTEN_EXPIRIES, SWEEP_LIMIT, SweepStats};
