//! Parsing the wire shapes: `ErrorPayload` and `InvokeResult`.

use agent_surface_core::{ErrorPayload, InvokeResult};
use serde_json::Value;

use crate::check;

/// Parses `data` as an [`ErrorPayload`] and as an [`InvokeResult`], from the bytes and from a
/// parsed JSON value.
///
/// Panics (a finding) unless whatever parses re-serializes and parses back equal (the payload's
/// wire text byte for byte) with a message in the library's normalized form.
///
/// ```
/// agent_surface_fuzz::payload_parse(br#"{"status":"error","error":{"code":"NOT_AUTHENTICATED","message":"Sign in.","retry":"no"}}"#);
/// agent_surface_fuzz::payload_parse(b"[]");
/// ```
pub fn payload_parse(data: &[u8]) {
    if let Ok(payload) = serde_json::from_slice::<ErrorPayload>(data) {
        check::payload_round_trips(&payload);
    }
    if let Ok(result) = serde_json::from_slice::<InvokeResult>(data) {
        check::result_round_trips(&result);
    }
    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    if let Ok(payload) = serde_json::from_value::<ErrorPayload>(value.clone()) {
        check::payload_round_trips(&payload);
    }
    if let Ok(result) = serde_json::from_value::<InvokeResult>(value) {
        check::result_round_trips(&result);
    }
}
