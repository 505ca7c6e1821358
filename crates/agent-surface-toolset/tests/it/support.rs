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

/// Asserts that every node of a Gemini parameters schema — the root, `properties`, `items`,
/// `additionalProperties` and `anyOf` members — has a `type`, or an `anyOf` of members that have
/// one: Gemini refuses the whole request when one node of one tool has neither. `at` names the
/// node in the failure message.
#[track_caller]
pub(crate) fn assert_typed_throughout(schema: &Value, at: &str) {
    let Some(node) = schema.as_object() else { panic!("{at}: {schema} is not a schema object") };
    let members = node.get("anyOf").and_then(Value::as_array);
    assert!(
        node.contains_key("type") || members.is_some_and(|m| !m.is_empty()),
        "{at}: no `type` (nor `anyOf`) in {schema}"
    );
    for (i, member) in members.into_iter().flatten().enumerate() {
        assert_typed_throughout(member, &format!("{at}/anyOf/{i}"));
    }
    for (name, property) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
        assert_typed_throughout(property, &format!("{at}/properties/{name}"));
    }
    if let Some(items) = node.get("items") {
        assert_typed_throughout(items, &format!("{at}/items"));
    }
    if let Some(value @ Value::Object(_)) = node.get("additionalProperties") {
        assert_typed_throughout(value, &format!("{at}/additionalProperties"));
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
