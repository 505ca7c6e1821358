//! The store kit's check of an [`AuditSink`]: what is recorded is read back unchanged, latest
//! last.

use agent_surface_core::Effect;
use agent_surface_policy::idempotency::Fingerprint;
use agent_surface_policy::{AuditEvent, AuditKind, AuditOutcome, AuditSink, AuditVerdict};
use serde_json::json;

use super::at;

/// An audit sink's contract: `record` keeps what it was given, and `recent` returns the latest
/// events, oldest first, in the order they were recorded, each unchanged (the suite records
/// events whose capability starts with `prefix` and looks only at those). A sink that cannot read
/// back (the trait's default `recent`) fails this suite: the store kit holds every backend the
/// inbox may read to the same rules.
pub async fn check_audit_sink(sink: &dyn AuditSink, prefix: &str) {
    let capability = format!("{prefix}orders.cancel");
    let mut written = Vec::new();
    for (i, kind) in [
        AuditKind::ConfirmationRequested { effect: Effect::Destructive, expires_at: at(60_000) },
        AuditKind::ConfirmationDecided {
            verdict: AuditVerdict::Approve,
            approver: "manager".to_string(),
            note: Some("ok, \"quoted\"\nsecond line".to_string()),
        },
        AuditKind::ConfirmationConsumed { approved_by: "manager".to_string() },
        AuditKind::ExecutionStarted { effect: Effect::Destructive },
        AuditKind::ExecutionFinished { outcome: AuditOutcome::Ok, code: None },
        AuditKind::ConfirmationExpired,
        AuditKind::ExecutionFinished {
            outcome: AuditOutcome::Error,
            code: Some(agent_surface_core::ErrorCode::ExecutionFailed),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut event = AuditEvent::new(at(i as u64), kind, capability.as_str(), "c-1");
        event.principal = Some("alice".to_string());
        event.input_digest = Some(Fingerprint::of(&json!({"orderId": "A-1"})).to_string());
        event.invocation_id = Some(format!("{prefix}inv-{i}"));
        event.correlation_id = Some(format!("{prefix}inv-{i}"));
        event.confirmation_id = Some(format!("{prefix}c-1"));
        sink.record(&event).await.unwrap_or_else(|e| panic!("record {}: {e}", event.name()));
        written.push(event);
    }
    let ours = |events: Vec<AuditEvent>| -> Vec<AuditEvent> {
        events.into_iter().filter(|e| e.capability == capability).collect()
    };
    let all = ours(sink.recent(10_000).await.expect("recent"));
    assert_eq!(all, written, "recent returns every event recorded, oldest first, unchanged");
    let last = sink.recent(3).await.expect("recent(3)");
    assert_eq!(last.len(), 3, "recent(3) returns three events");
    assert_eq!(ours(last), written[written.len() - 3..].to_vec(), "recent(n) returns the latest n, oldest first");
    assert!(sink.recent(0).await.expect("recent(0)").is_empty(), "recent(0) returns nothing");
}
