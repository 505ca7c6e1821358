//! The `_meta` keys through which an MCP client passes what `tools/call` has no field for.
//!
//! A `tools/call` request carries a tool name and arguments. The invocation's other members
//! (idempotency key, staleness tokens, confirmation evidence, target) travel in the request's
//! `_meta` object under the `agent-surface/` prefix:
//!
//! | key | type | becomes |
//! |---|---|---|
//! | [`INVOCATION_ID`] `agent-surface/invocationId` | string | `InvokeRequest::invocation_id` |
//! | [`SURFACE_ID`] `agent-surface/surfaceId` | string | `InvokeRequest::surface_id` |
//! | [`SURFACE_VERSION`] `agent-surface/surfaceVersion` | non-negative integer | `InvokeRequest::surface_version` |
//! | [`TOOL_VERSION`] `agent-surface/toolVersion` | non-empty string | `InvokeRequest::tool_version` |
//! | [`CONFIRMATION_ID`] `agent-surface/confirmationId` | string | `InvokeRequest::confirmation_id` |
//! | [`TARGET`] `agent-surface/target` | `{instanceId?, registrationId?}` | `InvokeRequest::target` |
//!
//! The caller's W3C trace context travels unprefixed, as SEP-414 and the OpenTelemetry MCP
//! conventions have it: [`TRACEPARENT`] `traceparent` and [`TRACESTATE`] `tracestate`, read by
//! [`trace_parent`] on every transport (on streamable HTTP too: the MCP request's context is
//! independent of the HTTP request's, so a `traceparent` HTTP header on `/mcp` is not read). An
//! invalid one is ignored, never a fault ([`agent_surface_registry::trace`]).
//!
//! The JSON-RPC request id and the progress token are never used as an invocation id: a call
//! without [`INVOCATION_ID`] is simply not deduplicated. An invocation id has 1 to 255 printable
//! ASCII characters, as on every transport (`agent_surface_registry::is_valid_invocation_id`). A present key with a value of the wrong
//! type is a protocol fault (JSON-RPC `-32602`), not a capability error: the request does not fit
//! the documented shape.
//!
//! On results, the adapter sets [`INVOCATION_ID`] in the result's `_meta` when the call carried
//! one; `tools/list` sets [`SURFACE_ID`] and [`SURFACE_VERSION`] in the list result's `_meta`, and
//! each tool's `_meta` carries [`CAPABILITY`], [`EFFECT`], [`IDEMPOTENT`], for a long-running
//! capability [`LONG_RUNNING`], for a disabled capability [`UNAVAILABLE_REASON`], and always
//! [`TOOL_VERSION`], the version a call echoes (both protocol eras).

use agent_surface_registry::{InvokeRequest, Target, TraceParent, trace};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The idempotency key of the call, scoped to the MCP session.
pub const INVOCATION_ID: &str = "agent-surface/invocationId";
/// The key of a result's correlation id (`_meta` of a `tools/call` result; see
/// [`crate::codec::encode_invocation`]): the id the agent can quote to find the call in the
/// operator log.
pub const CORRELATION_ID: &str = "agent-surface/correlationId";
/// The surface id the call was planned against (from the `tools/list` result's `_meta`).
pub const SURFACE_ID: &str = "agent-surface/surfaceId";
/// The surface version the call was planned against (from the `tools/list` result's `_meta`).
pub const SURFACE_VERSION: &str = "agent-surface/surfaceVersion";
/// On a tool of `tools/list`: the tool's version; on `tools/call`: the version the call was
/// planned against (a version that is not the live one is `STALE_CAPABILITY {reason:
/// tool-version-mismatch}`). Read from the one table of the version's wire names,
/// [`agent_surface_core::tool_version::wire`]: no field is standardized yet.
pub const TOOL_VERSION: &str = agent_surface_core::tool_version::wire::MCP_META;
/// Approved confirmation evidence (`details.confirmationId` of a `CONFIRMATION_REQUIRED`).
pub const CONFIRMATION_ID: &str = "agent-surface/confirmationId";
/// The target instance or registration: `{"instanceId": …, "registrationId": …}`.
pub const TARGET: &str = "agent-surface/target";
/// On a tool: the capability name (`type.capability`) behind the tool name.
pub const CAPABILITY: &str = "agent-surface/capability";
/// On a tool: the declared effect (`read`, `write`, `destructive`, `external`).
pub const EFFECT: &str = "agent-surface/effect";
/// On a tool: whether the capability is idempotent.
pub const IDEMPOTENT: &str = "agent-surface/idempotent";
/// On a tool: `true` when a call may run long (a task for clients that negotiate the tasks
/// extension; absent otherwise).
pub const LONG_RUNNING: &str = "agent-surface/longRunning";
/// On a tool: why the capability is disabled right now (absent when enabled).
pub const UNAVAILABLE_REASON: &str = "agent-surface/unavailableReason";
/// On a tool: the live instances (`[{instanceId, registrationId, description?}]`).
pub const INSTANCES: &str = "agent-surface/instances";

/// The caller's W3C `traceparent` (unprefixed: SEP-414).
pub const TRACEPARENT: &str = "traceparent";
/// The caller's W3C `tracestate`, read only with a valid [`TRACEPARENT`] (unprefixed: SEP-414).
pub const TRACESTATE: &str = "tracestate";

/// A `_meta` member that does not have its documented type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaError {
    /// The offending key.
    pub key: &'static str,
    /// What was expected.
    pub expected: &'static str,
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "_meta[\"{}\"] must be {}", self.key, self.expected)
    }
}

impl std::error::Error for MetaError {}

fn string(meta: &Map<String, Value>, key: &'static str) -> Result<Option<String>, MetaError> {
    match meta.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(MetaError { key, expected: "a non-empty string" }),
    }
}

/// Fills the members of `request` that the client passed in `_meta`.
///
/// ```
/// use agent_surface_mcp::meta;
/// use agent_surface_registry::InvokeRequest;
/// use serde_json::json;
///
/// let m = json!({
///     "agent-surface/invocationId": "inv-7",
///     "agent-surface/surfaceVersion": 12,
///     "agent-surface/target": {"instanceId": "cart-1"},
///     "progressToken": 3
/// });
/// let mut request = InvokeRequest::new("cart.view", json!({}));
/// meta::apply(m.as_object().unwrap(), &mut request).unwrap();
/// assert_eq!(request.invocation_id.as_deref(), Some("inv-7"));
/// assert_eq!(request.surface_version, Some(12));
/// assert_eq!(request.target.unwrap().instance_id.as_deref(), Some("cart-1"));
///
/// let bad = json!({"agent-surface/surfaceVersion": "12"});
/// let err = meta::apply(bad.as_object().unwrap(), &mut InvokeRequest::new("a.b", json!({}))).unwrap_err();
/// assert_eq!(err.key, meta::SURFACE_VERSION);
/// ```
pub fn apply(meta: &Map<String, Value>, request: &mut InvokeRequest) -> Result<(), MetaError> {
    request.invocation_id = match meta.get(INVOCATION_ID) {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if agent_surface_registry::is_valid_invocation_id(id) => Some(id.clone()),
        Some(_) => {
            return Err(MetaError { key: INVOCATION_ID, expected: "a string of 1 to 255 printable ASCII characters" });
        }
    };
    request.surface_id = string(meta, SURFACE_ID)?;
    request.confirmation_id = string(meta, CONFIRMATION_ID)?;
    request.tool_version = string(meta, TOOL_VERSION)?;
    request.surface_version = match meta.get(SURFACE_VERSION) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or(MetaError { key: SURFACE_VERSION, expected: "a non-negative integer" })?),
    };
    request.target = match meta.get(TARGET) {
        None | Some(Value::Null) => None,
        Some(v) => Some(Target::deserialize(v).map_err(|_| MetaError {
            key: TARGET,
            expected: "an object with optional string members instanceId and registrationId",
        })?),
    };
    Ok(())
}

/// The caller's trace context from `_meta` ([`TRACEPARENT`], [`TRACESTATE`]): `None` when there is
/// none, or when it is invalid or not a string (then ignored with a `DEBUG` event, never a
/// protocol fault; see [`agent_surface_registry::trace`]).
///
/// ```
/// use agent_surface_mcp::meta;
/// use serde_json::json;
///
/// let m = json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "rojo=1"});
/// let parent = meta::trace_parent(m.as_object().unwrap()).unwrap();
/// assert_eq!(parent.trace_id_hex().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert_eq!(parent.tracestate(), Some("rojo=1"));
/// assert!(meta::trace_parent(json!({"traceparent": 7}).as_object().unwrap()).is_none());
/// assert!(meta::trace_parent(json!({"traceparent": "00-bad"}).as_object().unwrap()).is_none());
/// ```
pub fn trace_parent(meta: &Map<String, Value>) -> Option<TraceParent> {
    let text = |key: &'static str| match meta.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => {
            trace::ignored(key, "not a string");
            Err(())
        }
    };
    let parent = text(TRACEPARENT).ok()??;
    TraceParent::extract(Some(parent), text(TRACESTATE).unwrap_or(None))
}
