//! The invocation pipeline with arbitrary input.

use agent_surface_policy::Consumer;
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest};
use serde_json::{Value, json};

use crate::check;
use crate::fixture::{self, CAPABILITIES, ECHO};

/// The longest capability name the driver tries (the data as a name, when it is a short string).
const MAX_NAME_CHARS: usize = 256;

/// Invokes every capability of the fixture with `data` as the input: `data` parsed as JSON, or
/// as a JSON string (lossily decoded) when it is not JSON. Each capability is called without an
/// invocation id, then twice with one fresh id. When `data` is a short JSON string, it is also
/// tried as a capability name.
///
/// Panics (a finding) unless: every result round-trips through `serde_json`, error payloads
/// included and unchanged, with normalized messages; no error payload contains
/// [`crate::SECRET_MARKER`] unless a key of the input does, and a message then only inside a
/// plain JSON Pointer (results of non-echoing capabilities likewise contain no marker); a call
/// with an id answers with that id; and a replay is the first call's result (or, for a success
/// too large to keep, an error).
///
/// ```
/// agent_surface_fuzz::invoke_input(br#"{"root": {"label": "a", "children": [{"label": "b"}]}}"#);
/// agent_surface_fuzz::invoke_input(b"not json at all");
/// ```
pub fn invoke_input(data: &[u8]) {
    let input: Value =
        serde_json::from_slice(data).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(data).into_owned()));
    let keys_carry_marker = check::marker_in_keys(&input);
    fixture::with(|f| {
        f.runtime.block_on(async {
            for capability in CAPABILITIES {
                let request = || InvokeRequest::new(capability, input.clone());
                let echoes = capability == ECHO;

                let plain = f.registry.invoke_detailed(request(), options()).await;
                check_invocation(&plain, None, echoes, keys_carry_marker);

                let id = f.next_invocation_id();
                let first = f.registry.invoke_detailed(request().with_invocation_id(id.clone()), options()).await;
                check_invocation(&first, Some(&id), echoes, keys_carry_marker);
                let again = f.registry.invoke_detailed(request().with_invocation_id(id.clone()), options()).await;
                check_invocation(&again, Some(&id), echoes, keys_carry_marker);
                if again.replayed {
                    match (&first.result, &again.result) {
                        // A result too large to keep is replayed as withheld, an error.
                        (a, b) if a.is_ok() && !b.is_ok() => {}
                        // Each call has its own correlation id; the rest is the record's.
                        (a, b) => assert_eq!(
                            a.without_correlation_id(),
                            b.without_correlation_id(),
                            "a replay differs from the first result of {capability}"
                        ),
                    }
                }
            }
            if let Some(name) = input.as_str().filter(|name| name.chars().count() <= MAX_NAME_CHARS) {
                let called = f.registry.invoke_detailed(InvokeRequest::new(name, json!({})), options()).await;
                check_invocation(&called, None, false, false);
            }
        });
    });
}

fn options() -> InvokeOptions {
    InvokeOptions::new(Consumer::anonymous("fuzz"))
}

#[track_caller]
fn check_invocation(invocation: &Invocation, id: Option<&str>, echoes: bool, keys_carry_marker: bool) {
    let result = &invocation.result;
    check::result_round_trips(result);
    assert_eq!(result.invocation_id(), id, "a result answers with another invocation id: {result:?}");
    if let Some(payload) = result.error_payload() {
        check::no_marker_leak(payload, keys_carry_marker);
        // The reference the model reads is the registry's own id, whatever the input or the id.
        let id = invocation.correlation_id.to_string();
        assert_eq!(payload.correlation_id(), Some(id.as_str()), "{payload:?}");
        assert!(id.starts_with("c-"), "{id}");
    } else if !echoes && !keys_carry_marker {
        let text = result.to_json().to_string();
        assert!(
            !text.contains(crate::SECRET_MARKER),
            "an input value reached the output of a capability that does not echo: {text}"
        );
    }
}
