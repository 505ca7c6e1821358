//! The assertions pass and fail as documented, and failures show the whole result.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Retry};
use agent_surface_testing::{expect_details, expect_error, expect_no_details, expect_ok, expect_retry, json_subset};
use serde_json::json;

/// The panic message of `f`, which must panic.
#[track_caller]
fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

fn rate_limited() -> InvokeResult {
    InvokeResult::error(
        AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1500)).into_payload(),
        Some("inv-1".into()),
    )
}

#[test]
fn expect_ok_and_expect_error() {
    let ok = InvokeResult::ok(json!({"n": 1}), None);
    assert_eq!(expect_ok(&ok), &json!({"n": 1}));
    let err = rate_limited();
    let p = expect_error(&err, ErrorCode::RateLimited);
    expect_retry(p, Retry::AfterDelay);
    expect_details(p, json!({"reason": "rate"}));
    expect_details(p, json!({"reason": "rate", "retryAfterMs": 1500}));
    let nf = InvokeResult::error(AgentSurfaceError::capability_not_found().into_payload(), None);
    expect_no_details(expect_error(&nf, ErrorCode::CapabilityNotFound));
}

#[test]
fn failures_print_the_whole_result() {
    let msg = panic_message(|| {
        expect_ok(&rate_limited());
    });
    assert!(msg.contains("\"retryAfterMs\": 1500") && msg.contains("\"invocationId\": \"inv-1\""), "{msg}");

    let msg = panic_message(|| {
        expect_error(&rate_limited(), ErrorCode::Timeout);
    });
    assert!(msg.starts_with("expected an error TIMEOUT, got RATE_LIMITED"), "{msg}");
    assert!(msg.contains("\"code\": \"RATE_LIMITED\""), "{msg}");

    let msg = panic_message(|| {
        expect_error(&InvokeResult::ok(json!(1), None), ErrorCode::Timeout);
    });
    assert!(msg.contains("\"status\": \"ok\""), "{msg}");

    let msg = panic_message(|| expect_retry(rate_limited().error_payload().unwrap(), Retry::Yes));
    assert!(msg.contains("expected retry `yes`, got `after-delay`"), "{msg}");

    let msg =
        panic_message(|| expect_details(rate_limited().error_payload().unwrap(), json!({"reason": "queue-full"})));
    assert!(msg.contains("at /reason: expected \"queue-full\", found \"rate\""), "{msg}");
}

#[track_caller]
fn check_subset(actual: serde_json::Value, expected: serde_json::Value, outcome: Result<(), &str>) {
    assert_eq!(json_subset(&actual, &expected), outcome.map_err(str::to_string));
}

#[test]
fn subset_matching() {
    check_subset(json!({"a": 1, "b": 2}), json!({"a": 1}), Ok(()));
    check_subset(json!({"a": {"b": [1, {"c": 2, "d": 3}]}}), json!({"a": {"b": [1, {"c": 2}]}}), Ok(()));
    check_subset(json!({"a": 1}), json!({"b": 1}), Err("at /b: missing, expected 1"));
    check_subset(json!([1, 2]), json!([1]), Err("at the root: expected 1 elements, found 2"));
    check_subset(json!({"a/b": {"c~": 1}}), json!({"a/b": {"c~": 2}}), Err("at /a~1b/c~0: expected 2, found 1"));
    check_subset(json!(1), json!(1.0), Err("at the root: expected 1.0, found 1"));
    check_subset(json!(null), json!({"a": 1}), Err("at the root: expected {\"a\":1}, found null"));
}
