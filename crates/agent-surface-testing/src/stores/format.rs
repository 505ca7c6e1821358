//! The record shapes of format 1 that the stores keeping records as JSON write (the shapes of
//! `agent_surface_policy::stored`: the PostgreSQL and SQLite stores), as pinned strings, with the
//! records they stand for.
//!
//! A backend's format test writes these records and compares what it stored with the strings,
//! then stores the strings as an earlier build wrote them and reads the records back: a change of
//! a stored shape fails every such backend's test, and must come with a new format version that
//! still reads these. The instants are [`at`]: the store kit's origin, 2026-11-29T13:00:00Z, plus
//! milliseconds.

use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, Timestamp};
use agent_surface_policy::confirmation::ConfirmationBinding;
use agent_surface_policy::idempotency::Fingerprint;
use agent_surface_policy::task::{TaskRecord, TaskStatus};
use agent_surface_policy::{ConfirmationRecord, Quorum};
use serde_json::json;

/// The instant `ms` milliseconds after the pins' origin (the instant the store kit's suites start
/// at).
pub fn at(ms: u64) -> Timestamp {
    super::at(ms)
}

/// The confirmation [`confirmation`] as format 1 keeps it, after the approval of `bob` (at
/// 1 s, in the first two slots).
pub const CONFIRMATION: &str = concat!(
    r#"{"id":"c-1","consumer_key":"c-1","capability":"orders.cancel","registration_id":"r-1","instance_id":"main","#,
    r#""input_hash":"a9d3d2b2ef5aee5b2a7ae5b0d4e4a5f5f9b73d1a3d2f5b4c9a5e2f0b8f4c1e27","requester":"alice","#,
    r#""summary":"Cancel order A-1.","effect":"destructive","origin":"client","created_at":1795957200000,"#,
    r#""expires_at":1795957260000,"state":"pending","input_preview":"{\"orderId\":\"A-1\"}","#,
    r#""quorum":{"approvals":2,"slots":["manager"]},"decisions":[{"a":"bob","v":"approve","t":1795957201000,"m":3}],"#,
    r#""invocation_id":"inv-1","correlation_id":"corr-1","consumer":"session-1"}"#
);

/// The task [`task`] as format 1 keeps it.
pub const TASK: &str = concat!(
    r#"{"id":"t-1","owner":"alice","status":"completed","status_message":"done","created_at":1795957200000,"#,
    r#""updated_at":1795957202000,"expires_at":1795957262000,"running_until":1795960800000,"#,
    r#""payload":{"content":[]},"cancel_requested":true}"#
);

/// The stored result `{"refund": 7}` of an idempotency record, as format 1 keeps it.
pub const RESULT: &str = r#"{"status":"ok","output":{"refund":7}}"#;

/// An `execution.started` audit event (a write of `orders.cancel` by `c-1`, at 4 s), as format 1
/// keeps it.
pub const EVENT: &str = r#"{"at":"2026-11-29T13:00:04.000Z","event":"execution.started","effect":"write","capability":"orders.cancel","consumer":"c-1"}"#;

/// The input hash of [`confirmation`], and the fingerprint of the pinned idempotency record.
pub fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes(
        agent_surface_core::hex::decode::<32>("a9d3d2b2ef5aee5b2a7ae5b0d4e4a5f5f9b73d1a3d2f5b4c9a5e2f0b8f4c1e27")
            .unwrap(),
    )
}

/// The pending confirmation `c-1` whose shape [`CONFIRMATION`] pins: a quorum of two with a
/// `manager` slot, an input preview, call ids and a consumer.
pub fn confirmation() -> ConfirmationRecord {
    let binding = ConfirmationBinding {
        consumer_key: "c-1".into(),
        capability: "orders.cancel".into(),
        registration_id: "r-1".into(),
        instance_id: "main".into(),
        input_hash: fingerprint(),
    };
    ConfirmationRecord::pending(
        "c-1".into(),
        binding,
        Some("alice".into()),
        "Cancel order A-1.".into(),
        Effect::Destructive,
        Origin::Client,
        at(0),
        at(60_000),
    )
    .with_input_preview(Some(r#"{"orderId":"A-1"}"#))
    .with_quorum(Quorum::of(2).with_slot("manager"))
    .with_call_ids(Some("inv-1"), Some("corr-1"))
    .with_consumer("session-1")
}

/// The task `t-1` whose shape [`TASK`] pins: completed, its cancellation requested.
pub fn task() -> TaskRecord {
    let mut task =
        TaskRecord::working("t-1", Some("alice".into()), at(0), Duration::from_secs(60), Duration::from_secs(3600));
    task.status = TaskStatus::Completed;
    task.status_message = Some("done".into());
    task.updated_at = at(2_000);
    task.expires_at = at(62_000);
    task.payload = Some(json!({"content": []}));
    task.cancel_requested = true;
    task
}

/// A running task as this build writes it: format 1 with the lease of the process running it
/// (`lease_until`, #26), a field that rows written before leases lack (read as no lease).
pub const TASK_LEASED: &str = concat!(
    r#"{"id":"t-2","status":"working","created_at":1795957200000,"updated_at":1795957200000,"#,
    r#""expires_at":1795957260000,"running_until":1795960800000,"cancel_requested":false,"#,
    r#""lease_until":1795957230000}"#
);
