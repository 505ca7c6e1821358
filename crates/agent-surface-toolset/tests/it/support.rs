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

/// Asserts that every node of a Gemini parameters schema is typed (the testing kit's
/// `gemini_untyped`: a `type`, an `ARRAY` of `parameters` with its `items`, or an `anyOf` of typed
/// members): Gemini refuses the whole request when one node of one tool is not. `at` names the
/// schema in the failure message.
#[track_caller]
pub(crate) fn assert_typed_throughout(schema: &Value, at: &str) {
    if let Some(untyped) = agent_surface_testing::gemini_untyped(schema) {
        panic!("{at}: untyped for Gemini at {untyped}");
    }
}

/// Asserts [`assert_typed_throughout`] of every Gemini function declaration in a `tools` member,
/// whichever member carries its parameters, and that no declaration carries both.
#[track_caller]
pub(crate) fn assert_gemini_tools_typed(tools: &Value) {
    let declarations = tools.pointer("/0/functionDeclarations").and_then(Value::as_array).cloned().unwrap_or_default();
    for declaration in declarations {
        let name = declaration["name"].as_str().unwrap_or("?");
        let members: Vec<&str> =
            ["parameters", "parametersJsonSchema"].into_iter().filter(|m| declaration.get(*m).is_some()).collect();
        assert!(members.len() <= 1, "{name}: both `parameters` and `parametersJsonSchema`");
        for member in members {
            assert_typed_throughout(&declaration[member], &format!("{name}.{member}"));
        }
    }
}
