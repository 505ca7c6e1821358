//! Assertions over [`InvokeResult`]s: `expect_ok`, `expect_error`, retry and details matchers.
//!
//! Every assertion is `#[track_caller]` and, when it fails, prints the whole result as pretty JSON,
//! so a failing test shows what the agent would have seen.

use agent_surface_core::{ErrorCode, ErrorPayload, InvokeResult, Retry};
use agent_surface_registry::schema::push_pointer_segment;
use serde_json::Value;

/// The result as pretty JSON, for failure messages.
pub fn pretty(result: &InvokeResult) -> String {
    serde_json::to_string_pretty(result).unwrap_or_else(|_| format!("{result:?}"))
}

fn pretty_payload(payload: &ErrorPayload) -> String {
    serde_json::to_string_pretty(payload).unwrap_or_else(|_| format!("{payload:?}"))
}

/// Asserts that `result` is a success and returns its output.
///
/// ```
/// use agent_surface_core::InvokeResult;
/// use agent_surface_testing::expect_ok;
/// use serde_json::json;
///
/// let result = InvokeResult::ok(json!({"total": 3}), None);
/// assert_eq!(expect_ok(&result)["total"], 3);
/// ```
///
/// # Panics
///
/// When `result` is an error; the message shows the whole result.
#[track_caller]
pub fn expect_ok(result: &InvokeResult) -> &Value {
    match result.output() {
        Some(output) => output,
        None => panic!("expected an ok result, got:\n{}", pretty(result)),
    }
}

/// Asserts that `result` is an error with `code` and returns its payload.
///
/// The payload is also checked against the matrix: it must survive a JSON round trip (its
/// `retry` is the derived one and its details have the code's shape).
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Retry};
/// use agent_surface_testing::expect_error;
///
/// let result = InvokeResult::error(AgentSurfaceError::capability_not_found().into_payload(), None);
/// let payload = expect_error(&result, ErrorCode::CapabilityNotFound);
/// assert_eq!(payload.retry(), Retry::AfterRefresh);
/// ```
///
/// # Panics
///
/// When `result` is a success, has another code, or its payload does not parse back.
#[track_caller]
pub fn expect_error(result: &InvokeResult, code: ErrorCode) -> &ErrorPayload {
    let Some(payload) = result.error_payload() else {
        panic!("expected an error {code}, got:\n{}", pretty(result));
    };
    if payload.code() != code {
        panic!("expected an error {code}, got {}:\n{}", payload.code(), pretty(result));
    }
    match serde_json::from_value::<ErrorPayload>(payload.to_json()) {
        Ok(back) if &back == payload => {}
        Ok(_) => panic!("the payload changes in a JSON round trip:\n{}", pretty(result)),
        Err(e) => panic!("the payload does not parse back ({e}):\n{}", pretty(result)),
    }
    payload
}

/// Asserts the payload's retry category.
///
/// # Panics
///
/// When the category differs; the message shows the whole payload.
#[track_caller]
pub fn expect_retry(payload: &ErrorPayload, retry: Retry) {
    if payload.retry() != retry {
        panic!("expected retry `{retry}`, got `{}`:\n{}", payload.retry(), pretty_payload(payload));
    }
}

/// Asserts that the payload's details contain `expected` (a subset match, see [`json_subset`]).
///
/// ```
/// use std::time::Duration;
/// use agent_surface_core::{AgentSurfaceError, details::RateLimitReason};
/// use agent_surface_testing::expect_details;
/// use serde_json::json;
///
/// let payload = AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1500)).into_payload();
/// expect_details(&payload, json!({"retryAfterMs": 1500}));
/// ```
///
/// # Panics
///
/// When the payload has no details or they do not contain `expected`.
#[track_caller]
pub fn expect_details(payload: &ErrorPayload, expected: Value) {
    let actual = payload.details().map(|d| Value::Object(d.clone())).unwrap_or(Value::Null);
    if let Err(mismatch) = json_subset(&actual, &expected) {
        panic!(
            "details do not match: {mismatch}\nexpected (subset): {expected:#}\npayload:\n{}",
            pretty_payload(payload)
        );
    }
}

/// Asserts that the payload carries no `details` member at all.
///
/// # Panics
///
/// When it does.
#[track_caller]
pub fn expect_no_details(payload: &ErrorPayload) {
    if payload.details().is_some() {
        panic!("expected no details:\n{}", pretty_payload(payload));
    }
}

/// Checks that `actual` contains `expected`: objects match when every member of `expected` is
/// present in `actual` and matches (extra members of `actual` are fine); arrays match element by
/// element and must have the same length; anything else must be equal.
///
/// On a mismatch, the error names the JSON Pointer of the first difference.
///
/// ```
/// use agent_surface_testing::json_subset;
/// use serde_json::json;
///
/// let actual = json!({"issues": [{"path": "/quantity", "message": "must be at least 1"}], "extra": true});
/// assert!(json_subset(&actual, &json!({"issues": [{"path": "/quantity"}]})).is_ok());
/// assert_eq!(
///     json_subset(&actual, &json!({"issues": [{"path": "/sku"}]})).unwrap_err(),
///     "at /issues/0/path: expected \"/sku\", found \"/quantity\""
/// );
/// ```
pub fn json_subset(actual: &Value, expected: &Value) -> Result<(), String> {
    subset_at(actual, expected, &mut String::new())
}

fn subset_at(actual: &Value, expected: &Value, path: &mut String) -> Result<(), String> {
    let shown = |p: &str| if p.is_empty() { "the root".to_string() } else { p.to_string() };
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            for (key, want) in e {
                let len = path.len();
                push_pointer_segment(path, key);
                match a.get(key) {
                    Some(got) => subset_at(got, want, path)?,
                    None => return Err(format!("at {path}: missing, expected {want}")),
                }
                path.truncate(len);
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(e)) => {
            if a.len() != e.len() {
                return Err(format!("at {}: expected {} elements, found {}", shown(path), e.len(), a.len()));
            }
            for (i, (got, want)) in a.iter().zip(e).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                subset_at(got, want, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        (got, want) if got == want => Ok(()),
        (got, want) => Err(format!("at {}: expected {want}, found {got}", shown(path))),
    }
}
