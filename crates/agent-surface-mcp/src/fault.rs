//! Every JSON-RPC error the adapter sends, in one table ([`ProtocolFault`]), as the HTTP binding
//! keeps its protocol faults in `agent_surface_http::wire::ProtocolFault`.
//!
//! A protocol fault is a request the adapter cannot take as it came (a frame that is not JSON-RPC,
//! params that do not fit, a request state that does not belong to the call, a method it does not
//! serve); what a tool call comes to is never one, it is a tool result with the error payload in
//! band ([`crate::codec`]). The one exception is the spec-strict mode's answer to an unknown tool
//! ([`ProtocolFault::StrictToolError`], the matrix's `mcp.strictProtocolError`).
//!
//! Each message is written once, here: a test pins the table, and another one fails when a
//! source file of the crate builds an `ErrorData` itself.

use rmcp::ErrorData;
use rmcp::model::{ClientCapabilities, ErrorCode};
use serde_json::json;

/// Why the adapter answers a message with a JSON-RPC error rather than a result; the error itself
/// is [`ProtocolFault::error`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ProtocolFault {
    /// More values than one per [`agent_surface_core::json::BYTES_PER_VALUE`] bytes of the size
    /// limit (the number is the most allowed). Found by the frame screen (`frame.rs`).
    TooManyValues(usize),
    /// An object repeats a member name (frame screen).
    DuplicateMember,
    /// The method name is longer than [`crate::frame::MAX_METHOD_BYTES`], or holds a character
    /// outside printable ASCII (a control, bidi or invisible character): no MCP method is named
    /// so, and such a name is never echoed (frame screen).
    MethodTooLong,
    /// The message is a JSON array: a JSON-RPC batch, which MCP no longer carries (removed in
    /// 2025-06-18); refused as a whole, before anything parses it (frame screen).
    Batch,
    /// Not JSON (syntax, encoding, nesting past the parser's limit).
    NotJson,
    /// A request reuses the id of a request still in progress (in its scope: the connection, the
    /// legacy session).
    IdInProgress,
    /// Its scope already has this many requests in progress (streamable HTTP,
    /// `McpHttpConfig::max_requests_in_flight`).
    #[cfg_attr(
        all(not(feature = "http"), not(test)),
        expect(dead_code, reason = "only the HTTP transport caps the ids in flight")
    )]
    TooManyInProgress(usize),
    /// A stdio line longer than the transport's limit (the number, in bytes).
    MessageTooLarge(usize),
    /// A stdio line that is JSON but not an object.
    NotAnObject,
    /// A stdio line that is a JSON object but no JSON-RPC 2.0 message.
    NotJsonRpc,
    /// A client's response to one of the server's requests that cannot be read: handed to `rmcp`
    /// under that request's id (never sent to the client), so that the request fails at once.
    UnreadableResponse,
    /// A request of a method the adapter serves whose params do not fit (the method's name).
    InvalidParams(String),
    /// A method the adapter does not answer (its name).
    UnknownMethod(String),
    /// A `tasks/*` request to a server that does not offer the tasks extension.
    TasksNotOffered,
    /// A second `initialize` in one session.
    AlreadyInitialized,
    /// An `_meta` member of `tools/call` that is not valid (the message says which, and why).
    InvalidMeta(String),
    /// An `Idempotency-Key` header that is not valid (the message says why).
    #[cfg_attr(not(feature = "http"), allow(dead_code, reason = "a header only the streamable HTTP transport reads"))]
    InvalidIdempotencyKey(String),
    /// The `Idempotency-Key` header and `_meta` `agent-surface/invocationId` differ.
    #[cfg_attr(not(feature = "http"), allow(dead_code, reason = "a header only the streamable HTTP transport reads"))]
    InvocationIdMismatch,
    /// The answer under `agent-surface/confirm` in `inputResponses` is not an elicitation result.
    ConfirmAnswerNotElicitation,
    /// A `requestState` that does not open for this call: tampered, sealed with another key, for
    /// another tool, other arguments or another consumer.
    StateRefused,
    /// The handler asked questions the client declared no capability to answer (`-32021`, with
    /// the capabilities it would need; boxed, as the largest variant by far).
    MissingCapability(Box<ClientCapabilities>),
    /// No task with this id is visible to the caller (its id, cut to 64 characters).
    UnknownTask(String),
    /// The task store failed (the cause goes to the operator channel only).
    TaskStoreFailed,
    /// The spec-strict mode's answer to a tool result of a code the matrix gives a JSON-RPC error
    /// (`mcp.strictProtocolError`): that error code, and the message.
    StrictToolError {
        /// The JSON-RPC error code the matrix gives.
        code: i32,
        /// The message: `Unknown tool: NAME`, or the payload's message.
        message: String,
    },
}

impl ProtocolFault {
    /// The JSON-RPC error that answers the message.
    pub(crate) fn error(&self) -> ErrorData {
        match self {
            ProtocolFault::TooManyValues(max) => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!("Invalid Request: the message holds more than {max} JSON values"),
                Some(json!({"maxMessageValues": max})),
            ),
            ProtocolFault::DuplicateMember => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: an object in the message repeats a member name",
                None,
            ),
            ProtocolFault::MethodTooLong => ErrorData::new(ErrorCode::METHOD_NOT_FOUND, "Method not found", None),
            ProtocolFault::Batch => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are not supported; send one message per request",
                None,
            ),
            ProtocolFault::NotJson => {
                ErrorData::new(ErrorCode::PARSE_ERROR, "Parse error: the message is not valid JSON", None)
            }
            ProtocolFault::IdInProgress => {
                ErrorData::new(ErrorCode::INVALID_REQUEST, "A request with this id is already in progress", None)
            }
            ProtocolFault::TooManyInProgress(max) => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!("Invalid Request: {max} requests are already in progress; send it again once one is answered"),
                Some(json!({"maxRequestsInFlight": max})),
            ),
            ProtocolFault::MessageTooLarge(max) => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!("Invalid Request: the message exceeds {max} bytes"),
                Some(json!({"maxMessageBytes": max})),
            ),
            ProtocolFault::NotAnObject => {
                ErrorData::new(ErrorCode::INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 object", None)
            }
            ProtocolFault::NotJsonRpc => {
                ErrorData::new(ErrorCode::INVALID_REQUEST, "Invalid Request: not a valid JSON-RPC 2.0 message", None)
            }
            ProtocolFault::UnreadableResponse => ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: the client's response could not be read",
                None,
            ),
            ProtocolFault::InvalidParams(method) => {
                ErrorData::new(ErrorCode::INVALID_PARAMS, format!("Invalid params for method `{method}`"), None)
            }
            ProtocolFault::UnknownMethod(method) => {
                ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("Method not found: {method}"), None)
            }
            ProtocolFault::TasksNotOffered => ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found: the tasks extension is not offered",
                None,
            ),
            ProtocolFault::AlreadyInitialized => {
                ErrorData::new(ErrorCode::INVALID_REQUEST, "Invalid Request: the session is already initialized", None)
            }
            ProtocolFault::InvalidMeta(message) | ProtocolFault::InvalidIdempotencyKey(message) => {
                ErrorData::new(ErrorCode::INVALID_PARAMS, message.clone(), None)
            }
            ProtocolFault::InvocationIdMismatch => ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                "The Idempotency-Key header and _meta agent-surface/invocationId differ. Send one of them, or the same value in both.",
                None,
            ),
            ProtocolFault::ConfirmAnswerNotElicitation => ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!("inputResponses[\"{}\"] must be an elicitation result", crate::mrtr::CONFIRM_KEY),
                None,
            ),
            ProtocolFault::StateRefused => {
                ErrorData::new(ErrorCode::INVALID_PARAMS, "Invalid requestState: it does not belong to this call", None)
            }
            ProtocolFault::MissingCapability(required) => {
                ErrorData::missing_required_client_capability(required.as_ref().clone())
            }
            ProtocolFault::UnknownTask(id) => {
                ErrorData::new(ErrorCode::INVALID_PARAMS, format!("Unknown task: {id}"), None)
            }
            ProtocolFault::TaskStoreFailed => {
                ErrorData::new(ErrorCode::INTERNAL_ERROR, "The task store is unavailable; try again later.", None)
            }
            ProtocolFault::StrictToolError { code, message } => ErrorData::new(ErrorCode(*code), message.clone(), None),
        }
    }
}

impl From<ProtocolFault> for ErrorData {
    fn from(fault: ProtocolFault) -> ErrorData {
        fault.error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One example of every fault, with the code, message and data it is answered with: the wire
    /// text is pinned here, so a change to it is a change to this table.
    fn table() -> Vec<(ProtocolFault, i32, &'static str, Option<serde_json::Value>)> {
        vec![
            (
                ProtocolFault::TooManyValues(7),
                -32600,
                "Invalid Request: the message holds more than 7 JSON values",
                Some(json!({"maxMessageValues": 7})),
            ),
            (
                ProtocolFault::DuplicateMember,
                -32600,
                "Invalid Request: an object in the message repeats a member name",
                None,
            ),
            (ProtocolFault::MethodTooLong, -32601, "Method not found", None),
            (
                ProtocolFault::Batch,
                -32600,
                "Invalid Request: JSON-RPC batches are not supported; send one message per request",
                None,
            ),
            (ProtocolFault::NotJson, -32700, "Parse error: the message is not valid JSON", None),
            (ProtocolFault::IdInProgress, -32600, "A request with this id is already in progress", None),
            (
                ProtocolFault::TooManyInProgress(3),
                -32600,
                "Invalid Request: 3 requests are already in progress; send it again once one is answered",
                Some(json!({"maxRequestsInFlight": 3})),
            ),
            (
                ProtocolFault::MessageTooLarge(64),
                -32600,
                "Invalid Request: the message exceeds 64 bytes",
                Some(json!({"maxMessageBytes": 64})),
            ),
            (ProtocolFault::NotAnObject, -32600, "Invalid Request: expected a JSON-RPC 2.0 object", None),
            (ProtocolFault::NotJsonRpc, -32600, "Invalid Request: not a valid JSON-RPC 2.0 message", None),
            (
                ProtocolFault::UnreadableResponse,
                -32600,
                "Invalid Request: the client's response could not be read",
                None,
            ),
            (ProtocolFault::InvalidParams("tools/call".into()), -32602, "Invalid params for method `tools/call`", None),
            (ProtocolFault::UnknownMethod("x/y".into()), -32601, "Method not found: x/y", None),
            (ProtocolFault::TasksNotOffered, -32601, "Method not found: the tasks extension is not offered", None),
            (ProtocolFault::AlreadyInitialized, -32600, "Invalid Request: the session is already initialized", None),
            (ProtocolFault::InvalidMeta("meta says why".into()), -32602, "meta says why", None),
            (ProtocolFault::InvalidIdempotencyKey("key says why".into()), -32602, "key says why", None),
            (
                ProtocolFault::InvocationIdMismatch,
                -32602,
                "The Idempotency-Key header and _meta agent-surface/invocationId differ. Send one of them, or the same value in both.",
                None,
            ),
            (
                ProtocolFault::ConfirmAnswerNotElicitation,
                -32602,
                "inputResponses[\"agent-surface/confirm\"] must be an elicitation result",
                None,
            ),
            (ProtocolFault::StateRefused, -32602, "Invalid requestState: it does not belong to this call", None),
            (
                ProtocolFault::MissingCapability(Box::default()),
                -32021,
                "Missing required client capability",
                Some(json!({"requiredCapabilities": {}})),
            ),
            (ProtocolFault::UnknownTask("t-1".into()), -32602, "Unknown task: t-1", None),
            (ProtocolFault::TaskStoreFailed, -32603, "The task store is unavailable; try again later.", None),
            (
                ProtocolFault::StrictToolError { code: -32602, message: "Unknown tool: nope".into() },
                -32602,
                "Unknown tool: nope",
                None,
            ),
        ]
    }

    #[test]
    fn every_fault_is_answered_as_its_row_says() {
        for (fault, code, message, data) in table() {
            let error = fault.error();
            assert_eq!((error.code.0, error.message.as_ref(), error.data), (code, message, data), "{fault:?}");
        }
    }

    /// No two faults share a message: an agent (or a person reading a log) can tell them apart.
    #[test]
    fn no_two_faults_share_a_message() {
        let rows = table();
        let mut seen = std::collections::BTreeSet::new();
        for (fault, ..) in &rows {
            assert!(seen.insert(fault.error().message.to_string()), "{fault:?} repeats a message");
        }
    }

    /// The table is the only place an `ErrorData` is built: no other source file of the crate
    /// names one of its constructors.
    #[test]
    fn no_other_file_builds_an_error() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![src];
        let mut offenders = Vec::new();
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("fault.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let literal = code.contains("ErrorData {") && !code.contains("-> ErrorData {");
                if code.contains("ErrorData::") || literal {
                    offenders.push(format!("{}:{}: {code}", path.display(), n + 1));
                }
            }
        }
        assert!(offenders.is_empty(), "build the error from fault::ProtocolFault instead:\n{}", offenders.join("\n"));
    }
}
