//! The store kit: one conformance suite per store trait, which every implementation — the memory
//! stores of `agent-surface-policy`, the Redis stores, a store of your own — must pass.
//!
//! Each check drives the store through the atomic semantics its trait documents (with `now`
//! passed in, as the engines do), including concurrent callers racing for a single-use step, and
//! panics with a message naming the broken rule. Records are created under ids that start with
//! `prefix`, so a suite can run against a shared backend next to other data: make the prefix
//! unique per run when the backend keeps data between runs.
//!
//! ```
//! use agent_surface_policy::{MemoryConfirmationStore, MemoryIdempotencyStore, MemoryTaskStore};
//! use agent_surface_testing::stores;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! stores::check_idempotency_store(&MemoryIdempotencyStore::default(), "doc-").await;
//! stores::check_confirmation_store(&MemoryConfirmationStore::default(), "doc-").await;
//! stores::check_task_store(&MemoryTaskStore::default(), "doc-").await;
//! stores::check_audit_sink(&agent_surface_policy::MemoryAuditSink::default(), "doc-").await;
//! stores::check_inbox_store(&agent_surface_policy::inbox::MemoryInboxStore::default(), "doc-").await;
//! # });
//! ```

mod audit;
mod backend;
mod confirmation;
pub mod format;
mod idempotency;
mod inbox;
mod rate;
mod task;

pub use audit::check_audit_sink;
pub use backend::{Backend, Leases, suites};
pub use confirmation::{
    InStep, check_confirmation_quorum, check_confirmation_slots, check_confirmation_store,
    check_racing_repeats_open_one_confirmation, check_replicas_record_one_expiry, check_replicas_share_one_approval,
    check_replicas_share_relayed_confirmations, check_replicas_sweep_one_expiry, check_revocation,
};
pub use idempotency::{
    check_idempotency_cancel, check_idempotency_holds_until_settled, check_idempotency_leases, check_idempotency_store,
};
pub use inbox::{check_inbox_replicas, check_inbox_store};
pub use rate::{check_consumer_quotas, check_rate_limiter, consumer_quotas};
pub use task::{check_task_leases, check_task_store};

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::ConfirmationRecord;
use agent_surface_policy::confirmation::ConfirmationBinding;
use agent_surface_policy::idempotency::Fingerprint;
use serde_json::json;

/// The instant the suites start at (any fixed instant works: stores take `now` as given).
const T0: u64 = 1_795_957_200_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(T0 + ms)
}

fn binding(consumer: &str) -> ConfirmationBinding {
    ConfirmationBinding {
        consumer_key: consumer.to_string(),
        capability: "orders.cancel".to_string(),
        registration_id: "r-1".to_string(),
        instance_id: "main".to_string(),
        input_hash: Fingerprint::of(&json!({"orderId": "A-1"})),
    }
}

/// A pending record `id` of consumer `c-1` (requester subject `alice`), expiring at 60 s,
/// requested by the call with invocation id `inv-1` and correlation id `corr-1`.
fn pending(id: &str) -> ConfirmationRecord {
    ConfirmationRecord::pending(
        id.to_string(),
        binding("c-1"),
        Some("alice".to_string()),
        "Cancel order A-1.".to_string(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
    .with_call_ids(Some("inv-1"), Some("corr-1"))
}

#[track_caller]
fn expect<T: std::fmt::Debug, E: std::fmt::Debug>(rule: &str, got: Result<T, E>) -> T {
    match got {
        Ok(v) => v,
        Err(e) => panic!("store kit: {rule}: the store failed: {e:?}"),
    }
}
