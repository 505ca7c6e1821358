//! `tools/list`: MCP tool definitions from a consumer's snapshot.
//!
//! Each visible capability becomes one tool named by its tool name (`type-capability`). Hidden
//! capabilities are absent from the snapshot and so from the list. The input schema is the one
//! the agent must satisfy (bound fields excluded); the output schema is listed when the
//! capability declares one. The annotations follow from the declared effect and idempotence:
//!
//! | effect | `readOnlyHint` | `destructiveHint` | `openWorldHint` |
//! |---|---|---|---|
//! | `read` | `true` | `false` | `false` |
//! | `write` | `false` | `false` | `false` |
//! | `destructive` | `false` | `true` | `false` |
//! | `external` | `false` | `false` | `true` |
//!
//! `idempotentHint` is the capability's idempotence (always `true` for `read`). A capability that
//! is disabled right now stays listed, so the model learns the enabling step: its description
//! ends with `(Unavailable right now: REASON)` and its `_meta` carries
//! `agent-surface/unavailableReason`; a call gets `CAPABILITY_NOT_AVAILABLE` with the same reason.

use std::sync::Arc;

use agent_surface_core::Effect;
use agent_surface_registry::{CapabilityDescriptor, Snapshot, schema};
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::Value;

use crate::meta;

/// The MCP tool annotations for a capability's effect and idempotence.
///
/// ```
/// use agent_surface_core::Effect;
/// let a = agent_surface_mcp::tools::annotations(Effect::Destructive, false);
/// assert_eq!(a.destructive_hint, Some(true));
/// assert_eq!(a.read_only_hint, Some(false));
/// assert_eq!(a.idempotent_hint, Some(false));
/// assert_eq!(a.open_world_hint, Some(false));
/// ```
pub fn annotations(effect: Effect, idempotent: bool) -> ToolAnnotations {
    let read = effect == Effect::Read;
    ToolAnnotations::new()
        .read_only(read)
        .destructive(effect == Effect::Destructive)
        .idempotent(idempotent || read)
        .open_world(effect == Effect::External)
}

fn object(value: &Value) -> JsonObject {
    match value {
        Value::Object(map) => map.clone(),
        // Input schemas are objects at the root (the registry requires it); anything else is
        // listed as "any object".
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".to_string(), Value::String("object".to_string()));
            map
        }
    }
}

/// The MCP tool for one capability.
pub fn tool(c: &CapabilityDescriptor) -> Tool {
    let description = match &c.unavailable_reason {
        Some(reason) => format!("{} (Unavailable right now: {reason})", c.description),
        None => c.description.clone(),
    };
    let mut tool = Tool::new(c.tool_name.clone(), description, Arc::new(object(&c.input_schema)))
        .with_annotations(annotations(c.effect, c.idempotent));
    // MCP output schemas describe `structuredContent`, which is always an object: a capability
    // whose output is not an object (an array, a string, a union) is listed without one, and its
    // results carry the JSON in the text block only (see `codec::encode`).
    if let Some(output) = c.output_schema.as_ref().filter(|s| schema::is_object_schema(s)).and_then(Value::as_object) {
        tool = tool.with_raw_output_schema(Arc::new(output.clone()));
    }
    let mut m = MetaObject::new();
    m.insert(meta::CAPABILITY.to_string(), Value::String(c.name.clone()));
    m.insert(meta::EFFECT.to_string(), Value::String(c.effect.as_str().to_string()));
    m.insert(meta::IDEMPOTENT.to_string(), Value::Bool(c.idempotent));
    if let Some(version) = &c.tool_version {
        m.insert(meta::TOOL_VERSION.to_string(), Value::String(version.clone()));
    }
    if c.long_running {
        m.insert(meta::LONG_RUNNING.to_string(), Value::Bool(true));
    }
    if let Some(reason) = &c.unavailable_reason {
        m.insert(meta::UNAVAILABLE_REASON.to_string(), Value::String(reason.clone()));
    }
    if c.instances.len() > 1 {
        m.insert(meta::INSTANCES.to_string(), serde_json::to_value(&c.instances).unwrap_or(Value::Null));
    }
    tool.with_meta(m)
}

/// The MCP tools for a snapshot, in the snapshot's order (sorted by capability name).
pub fn tools(snapshot: &Snapshot) -> Vec<Tool> {
    snapshot.capabilities.iter().map(tool).collect()
}
