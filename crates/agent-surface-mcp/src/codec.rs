//! The wire shape of a call's outcome: [`InvokeResult`] ↔ MCP `CallToolResult`.
//!
//! | outcome | `isError` | `content` | `structuredContent` | `_meta` |
//! |---|---|---|---|---|
//! | ok | `false` | one text block: the output as JSON | the output, when it is a JSON object | `agent-surface/invocationId` when the call had one; `agent-surface/correlationId` ([`encode_invocation`]) |
//! | error | `true` | one text block: the payload `{code, message, retry, details?}` as JSON, its message worded for a model ([`Sends::Arguments`]) | **absent** | the same |
//!
//! An error result never carries `structuredContent`. The official TypeScript SDK client (and
//! the MCP Inspector built on it) validates `structuredContent` against the tool's
//! `outputSchema` even when `isError` is true and fails the whole call when it does not match,
//! so a payload there would never reach the model for a tool that declares an output schema.
//! Leaving it out for every error (not only for tools with an output schema) also covers a
//! client whose cached tool list is older than a schema change. The payload is the only text
//! block, compact JSON, so it parses back losslessly ([`decode`]); its `message` is already the
//! natural-language line for the model.
//!
//! A model sends only a tool's arguments: the invocation id, confirmation evidence and staleness
//! tokens travel in `_meta`, set by the client. So the message is worded for that binding
//! ([`ErrorPayload::worded_for`] with [`Sends::Arguments`]): where a template would ask for a
//! fresh `invocationId` or a wait in milliseconds, the model reads what it can do instead. Code,
//! retry, details and repair are the bytes every transport carries (`spec/error-model.md`,
//! "Messages are true to their transport").
//!
//! A success of a tool with an output schema carries the output as `structuredContent` (which
//! the pipeline validated against that schema) and, as the MCP specification recommends, the same
//! JSON serialized in a text block.

use agent_surface_core::message::Sends;
use agent_surface_core::{ErrorCode, ErrorPayload, InvokeResult, Timestamp, matrix};
use agent_surface_registry::Invocation;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::Value;

use crate::fault::ProtocolFault;
use crate::meta;

fn result_meta(invocation_id: Option<String>) -> Option<MetaObject> {
    invocation_id.map(|id| {
        let mut m = MetaObject::new();
        m.insert(meta::INVOCATION_ID.to_string(), Value::String(id));
        m
    })
}

/// Encodes an invocation's result as a `tools/call` result.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_mcp::codec;
/// use serde_json::json;
///
/// let err = InvokeResult::error(AgentSurfaceError::capability_not_found().into_payload(), Some("inv-1".into()));
/// let wire = serde_json::to_value(codec::encode(err.clone())).unwrap();
/// assert_eq!(wire["isError"], true);
/// assert!(wire.get("structuredContent").is_none());
/// let payload: serde_json::Value = serde_json::from_str(wire["content"][0]["text"].as_str().unwrap()).unwrap();
/// assert_eq!(payload["code"], "CAPABILITY_NOT_FOUND");
/// assert_eq!(payload["retry"], "after-refresh");
/// assert_eq!(wire["_meta"]["agent-surface/invocationId"], "inv-1");
///
/// let ok = InvokeResult::ok(json!({"total": 3}), None);
/// let wire = serde_json::to_value(codec::encode(ok)).unwrap();
/// assert_eq!(wire["structuredContent"], json!({"total": 3}));
/// assert_eq!(wire["content"][0]["text"], r#"{"total":3}"#);
/// ```
pub fn encode(result: InvokeResult) -> CallToolResult {
    match result {
        InvokeResult::Ok { output, invocation_id } => {
            let text = output.to_string();
            let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
            if output.is_object() {
                r.structured_content = Some(output);
            }
            r.with_meta(result_meta(invocation_id))
        }
        InvokeResult::Error { error, invocation_id } => {
            let text = error.worded_for(Sends::Arguments).to_wire_text();
            CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(result_meta(invocation_id))
        }
        // `InvokeResult` is non-exhaustive; a future variant is reported as an execution failure
        // rather than silently dropped.
        other => {
            let payload = agent_surface_core::AgentSurfaceError::execution_failed(
                agent_surface_core::details::ExecutionFailedReason::HandlerError,
            )
            .into_payload();
            encode(InvokeResult::error(payload, other.invocation_id().map(str::to_string)))
        }
    }
}

/// Encodes a call's result as [`encode`] does, and adds its correlation id to `_meta`
/// (`agent-surface/correlationId`): the id the agent can quote to find the call in the operator
/// log (the invocation id when the call had one).
///
/// ```
/// use agent_surface_core::InvokeResult;
/// use agent_surface_mcp::codec;
/// use agent_surface_registry::{CorrelationId, Invocation};
///
/// let id = CorrelationId::generate();
/// let invocation = Invocation::answered(InvokeResult::ok(serde_json::json!({}), None), id.clone());
/// let wire = serde_json::to_value(codec::encode_invocation(invocation)).unwrap();
/// assert_eq!(wire["_meta"]["agent-surface/correlationId"], id.to_string());
/// ```
pub fn encode_invocation(invocation: Invocation) -> CallToolResult {
    encode_invocation_with(invocation, false)
}

/// [`encode_invocation`], and with `tool_failure` an error result's `_meta` also carries the
/// proposed structured tool-failure object (SEP-3313, a draft) under our own key
/// (`agent-surface/toolFailure`; [`McpConfig::tool_failure`](crate::McpConfig::tool_failure)).
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_mcp::codec;
/// use agent_surface_registry::{CorrelationId, Invocation};
///
/// let error = AgentSurfaceError::not_authenticated().into_payload();
/// let invocation = Invocation::answered(InvokeResult::error(error, None), CorrelationId::generate());
/// let wire = serde_json::to_value(codec::encode_invocation_with(invocation, true)).unwrap();
/// let failure = &wire["_meta"]["agent-surface/toolFailure"];
/// assert_eq!((failure["class"].as_str(), failure["code"].as_str()), (Some("governance"), Some("auth_required")));
/// assert_eq!(failure["correlationId"], wire["_meta"]["agent-surface/correlationId"]);
/// assert!(wire["_meta"].get("io.modelcontextprotocol/toolFailure").is_none());
/// ```
pub fn encode_invocation_with(invocation: Invocation, tool_failure: bool) -> CallToolResult {
    let failure_at = tool_failure.then(Timestamp::now);
    encode_outcome(invocation.result, invocation.correlation_id.to_string(), failure_at)
}

/// [`encode`] with `correlation_id` in `_meta` (`agent-surface/correlationId`), and with
/// `failure_at` an error result's tool-failure object (`agent-surface/toolFailure`) as reported at
/// that instant: its `retryNotBefore` counts from it. The one encoding of a call's outcome, for an
/// answer given in the call and for a task's result read later ([`crate::tasks`]).
pub(crate) fn encode_outcome(
    result: InvokeResult,
    correlation_id: String,
    failure_at: Option<Timestamp>,
) -> CallToolResult {
    let failure = failure_at.and_then(|at| {
        result.error_payload().and_then(|p| agent_surface_core::wire::tool_failure(p, at.unix_millis()))
    });
    let mut result = encode(result);
    let meta = result.meta.get_or_insert_with(MetaObject::new);
    meta.insert(meta::CORRELATION_ID.to_string(), Value::String(correlation_id));
    if let Some(failure) = failure {
        meta.insert(agent_surface_core::wire::names::TOOL_FAILURE_KEY.to_string(), failure);
    }
    result
}

/// The JSON-RPC error that answers `result` instead of a tool result in the spec-strict mode
/// ([`UnknownTool::ProtocolError`](crate::UnknownTool::ProtocolError)): the matrix's
/// `mcp.strictProtocolError` for the result's code, if it has one (`CAPABILITY_NOT_FOUND`:
/// `-32602`, message `Unknown tool: NAME`, no data). Every other result stays a tool result.
pub(crate) fn strict_protocol_error(result: &InvokeResult, tool: &str) -> Option<ErrorData> {
    let error = result.error_payload()?;
    let rpc = matrix::spec(error.code()).mcp.strict_protocol_error?;
    let message = match error.code() {
        ErrorCode::CapabilityNotFound => format!("Unknown tool: {tool}"),
        _ => error.message().to_string(),
    };
    Some(ProtocolFault::StrictToolError { code: rpc, message }.error())
}

/// Why a `CallToolResult` is not an encoded [`InvokeResult`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// An error result whose first text block is not a valid payload (the message says why).
    BadPayload(String),
    /// A success with neither `structuredContent` nor a JSON text block.
    NoOutput,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::BadPayload(why) => write!(f, "error result does not carry a valid payload: {why}"),
            DecodeError::NoOutput => f.write_str("success result carries no JSON output"),
        }
    }
}

impl std::error::Error for DecodeError {}

fn first_text(result: &CallToolResult) -> Option<&str> {
    result.content.iter().find_map(|c| c.as_text()).map(|t| t.text.as_str())
}

/// Decodes a `tools/call` result produced by [`encode`] back into the [`InvokeResult`]; the
/// payload is parsed with the matrix checks of [`ErrorPayload`].
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_mcp::codec;
///
/// // A template with one wording, so the payload the codec words for MCP is the original.
/// let original = InvokeResult::error(AgentSurfaceError::not_authenticated().into_payload(), Some("inv-9".into()));
/// assert_eq!(codec::decode(&codec::encode(original.clone())).unwrap(), original);
/// ```
pub fn decode(result: &CallToolResult) -> Result<InvokeResult, DecodeError> {
    let invocation_id =
        result.meta.as_ref().and_then(|m| m.get(meta::INVOCATION_ID)).and_then(Value::as_str).map(str::to_string);
    if result.is_error == Some(true) {
        let text = first_text(result).ok_or_else(|| DecodeError::BadPayload("no text block".to_string()))?;
        let payload: ErrorPayload = serde_json::from_str(text).map_err(|e| DecodeError::BadPayload(e.to_string()))?;
        return Ok(InvokeResult::error(payload, invocation_id));
    }
    let output = match (&result.structured_content, first_text(result)) {
        (Some(v), _) => v.clone(),
        (None, Some(text)) => serde_json::from_str(text).map_err(|_| DecodeError::NoOutput)?,
        (None, None) => return Err(DecodeError::NoOutput),
    };
    Ok(InvokeResult::ok(output, invocation_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strict mode's channel is the matrix's: a code with a `strictProtocolError` becomes that
    /// JSON-RPC error, every other code stays in-band.
    #[test]
    fn the_strict_mode_answers_what_the_matrix_maps() {
        for row in &matrix::MATRIX {
            for payload in agent_surface_core::examples::of(row.code) {
                let result = InvokeResult::error(payload, None);
                let got = strict_protocol_error(&result, "store-nothing").map(|e| e.code.0);
                assert_eq!(got, row.mcp.strict_protocol_error, "{}", row.code);
            }
        }
        let not_found =
            InvokeResult::error(agent_surface_core::AgentSurfaceError::capability_not_found().into_payload(), None);
        let e = strict_protocol_error(&not_found, "store-nothing").unwrap();
        assert_eq!(
            (e.code, e.message.as_ref(), e.data),
            (rmcp::model::ErrorCode::INVALID_PARAMS, "Unknown tool: store-nothing", None)
        );
        assert!(strict_protocol_error(&InvokeResult::ok(serde_json::json!({}), None), "store-nothing").is_none());
    }
}
