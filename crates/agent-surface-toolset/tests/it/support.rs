//! Shared fixtures.

use agent_surface_registry::Snapshot;
use serde_json::{Value, json};

/// A snapshot from its JSON form (`Snapshot` is `#[non_exhaustive]`; discovery's wire form is
/// how a test builds one without a registry).
pub(crate) fn snapshot(capabilities: Value) -> Snapshot {
    serde_json::from_value(json!({"surfaceId": "s-0123456789abcdef", "version": 7, "capabilities": capabilities}))
        .expect("a valid snapshot")
}

/// A capability descriptor's JSON with the given name, schema, effect and idempotency.
pub(crate) fn descriptor(name: &str, description: &str, input_schema: Value) -> Value {
    json!({
        "name": name,
        "toolName": name.replace('.', "-"),
        "description": description,
        "inputSchema": input_schema,
        "effect": "write",
        "idempotent": false,
        "plane": "procedure",
        "enabled": true,
        "instances": [{"instanceId": "main", "registrationId": "r-1"}]
    })
}
