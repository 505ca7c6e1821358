//! Parsing a payload enforces the matrix: a decoded payload is as trustworthy as a built one.

use agent_surface_core::{AgentSurfaceError, ErrorPayload, PayloadError};
use serde_json::{Value, json};

#[track_caller]
fn rejects(json: Value, why: &str) {
    let r = serde_json::from_value::<ErrorPayload>(json.clone());
    let err = r.expect_err(&format!("accepted {json}"));
    assert!(err.to_string().contains(why), "{err} does not mention {why:?}");
}

#[test]
fn rejects_payloads_that_contradict_the_matrix() {
    let m = "Do something.";
    rejects(json!({"code": "NOPE", "message": m, "retry": "no"}), "unknown variant");
    rejects(json!({"code": "CANCELLED", "message": m, "retry": "maybe"}), "unknown variant");
    rejects(json!({"code": "CANCELLED", "message": m, "retry": "no"}), "retry of CANCELLED must be yes");
    rejects(json!({"code": "CANCELLED", "message": "", "retry": "yes"}), "1..=300");
    rejects(json!({"code": "CANCELLED", "message": "x".repeat(301), "retry": "yes"}), "1..=300");
    rejects(json!({"code": "CANCELLED", "message": m, "retry": "yes", "details": {}}), "carries no details");
    rejects(json!({"code": "TIMEOUT", "message": m, "retry": "no"}), "details are required");
    rejects(
        json!({"code": "TIMEOUT", "message": m, "retry": "yes", "details": {"timeoutMs": 5, "idempotent": false}}),
        "must be no",
    );
    rejects(
        json!({"code": "TIMEOUT", "message": m, "retry": "no", "details": {"timeoutMs": "5", "idempotent": false}}),
        "details of TIMEOUT",
    );
    rejects(
        json!({"code": "NOT_AUTHORIZED", "message": m, "retry": "no", "details": {"origin": "client", "policy": "admins"}}),
        "unknown details key `policy`",
    );
    rejects(json!({"code": "CANCELLED", "message": m, "retry": "yes", "cause": "boom"}), "unknown field");
    rejects(
        json!({"code": "CONFIRMATION_INVALID", "message": m, "retry": "no", "details": {"reason": "expired"}}),
        "must be with-confirmation",
    );
}

#[test]
fn accepts_author_keys_on_precondition_failed() {
    let p: ErrorPayload = serde_json::from_value(json!({
        "code": "PRECONDITION_FAILED", "message": "Restock first.", "retry": "with-changes",
        "details": {"reason": "out-of-stock", "sku": "A-1"}
    }))
    .unwrap();
    assert_eq!(p.detail("sku"), Some(&json!("A-1")));
}

#[test]
fn error_type_is_exposed() {
    let e: Result<ErrorPayload, _> =
        serde_json::from_value(json!({"code": "CANCELLED", "message": "x", "retry": "no"}));
    assert!(e.is_err());
    let built = AgentSurfaceError::cancelled().into_payload();
    let _: Option<PayloadError> = None;
    assert_eq!(serde_json::from_value::<ErrorPayload>(built.to_json()).unwrap(), built);
}
