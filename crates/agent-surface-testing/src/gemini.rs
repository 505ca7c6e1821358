//! Whether a schema sent to Gemini types every node: Gemini refuses the whole request (HTTP 400)
//! when one node of one function declaration has no type.

use agent_surface_registry::schema::visit_subschemas;
use serde_json::Value;

/// The first node of `schema` — a Gemini function declaration's `parameters` or
/// `parametersJsonSchema` — that Gemini would refuse for want of a type, as its JSON Pointer and
/// the node; `None` when every node is typed. A node is typed when it has a `type` (an `ARRAY` of
/// `parameters`, in Gemini's upper-case spelling, with its `items`) or an `anyOf` of members,
/// each of which is checked in turn; a boolean `additionalProperties` is an object's setting,
/// not a node.
///
/// ```
/// use agent_surface_testing::gemini_untyped;
/// use serde_json::json;
///
/// let typed = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
/// assert_eq!(gemini_untyped(&typed), None);
/// let loose = json!({"type": "object", "properties": {"any": {}}});
/// assert_eq!(gemini_untyped(&loose).as_deref(), Some("#/properties/any: {}"));
/// let listless = json!({"type": "OBJECT", "properties": {"xs": {"type": "ARRAY"}}});
/// assert!(gemini_untyped(&listless).is_some());
/// ```
pub fn gemini_untyped(schema: &Value) -> Option<String> {
    visit_subschemas(schema, |node, at| {
        let typed = node.get("type").is_some_and(|t| t != "ARRAY" || node.get("items").is_some())
            || node.get("anyOf").and_then(Value::as_array).is_some_and(|members| !members.is_empty());
        if typed || (node.is_boolean() && at.keyword == "additionalProperties") {
            Ok(())
        } else {
            Err(format!("#{}: {node}", at.pointer))
        }
    })
    .err()
}
