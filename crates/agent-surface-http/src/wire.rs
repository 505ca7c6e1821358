//! The wire shapes: an `InvokeResult` as an HTTP response, and the protocol faults.
//!
//! Two result shapes, never confused (the Surface seed's "protocol failure versus action
//! failure"):
//!
//! - a **capability error** is a problem (`application/problem+json`) whose `type` is
//!   `urn:agent-surface:error:{CODE}` and whose body carries the payload's members (`code`,
//!   `message`, `retry`, `details`, …) verbatim, in wire order;
//! - a **protocol fault** is a problem whose `type` is `urn:agent-surface:protocol:{kind}` and
//!   which has no `code` member: the request never reached the pipeline.

use agent_surface_core::{ErrorPayload, InvokeResult, Retry, matrix};
use http::StatusCode;
use serde_json::{Map, Value};

/// The media type of every problem body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The media type of successes and snapshots.
pub const JSON: &str = "application/json";

/// The prefix of a capability error's problem `type`; the code follows (`urn:agent-surface:error:STALE_CAPABILITY`).
pub const ERROR_TYPE_PREFIX: &str = "urn:agent-surface:error:";

/// The prefix of a protocol fault's problem `type`; the kind follows (`urn:agent-surface:protocol:malformed-json`).
pub const PROTOCOL_TYPE_PREFIX: &str = "urn:agent-surface:protocol:";

/// The problem members the binding adds in front of a capability error's payload members. A
/// payload never uses these names.
pub const PROBLEM_MEMBERS: [&str; 5] = ["type", "title", "status", "detail", "invocationId"];

/// One result as the binding sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Encoded {
    /// The HTTP status: 200, or the matrix's analog for the code and details.
    pub status: StatusCode,
    /// `application/json` for a success, `application/problem+json` for an error.
    pub content_type: &'static str,
    /// `Retry-After` in whole seconds (rounded up), for `retry: after-delay`.
    pub retry_after: Option<u64>,
    /// The body.
    pub body: String,
}

/// The problem `title` of a code: its name in words (`STALE_CAPABILITY` → `Stale capability`).
fn title(code: &str) -> String {
    let words = code.to_ascii_lowercase().replace('_', " ");
    let mut chars = words.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

fn json_string(s: &str) -> String {
    Value::from(s).to_string()
}

/// The payload's JSON text in wire order (`code`, `message`, `retry`, `details`, …): the same
/// bytes every adapter sends.
pub fn payload_text(payload: &ErrorPayload) -> String {
    payload.to_wire_text()
}

/// The HTTP form of `result`.
///
/// A success is `200` with the `InvokeResult` JSON (`{"status":"ok","output":…,"invocationId"?}`).
/// An error is the matrix's status analog with a problem body: `type`, `title`, `status`,
/// `detail` (the payload's message), `invocationId` when the call carried one, then the
/// payload's own members exactly as core serializes them.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_http::wire::{encode, payload_text};
///
/// let payload = AgentSurfaceError::capability_not_found().into_payload();
/// let encoded = encode(&InvokeResult::error(payload.clone(), None));
/// assert_eq!(encoded.status, 404);
/// assert_eq!(encoded.content_type, "application/problem+json");
/// // The payload's members close the body, byte for byte.
/// assert!(encoded.body.ends_with(&payload_text(&payload)[1..]));
/// assert!(encoded.body.starts_with(r#"{"type":"urn:agent-surface:error:CAPABILITY_NOT_FOUND","#));
/// ```
pub fn encode(result: &InvokeResult) -> Encoded {
    match result {
        InvokeResult::Error { error, invocation_id } => {
            let code = error.code().as_str();
            let status = matrix::spec(error.code()).http_status.eval(error.details());
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut body = format!(
                "{{\"type\":{},\"title\":{},\"status\":{},\"detail\":{}",
                json_string(&format!("{ERROR_TYPE_PREFIX}{code}")),
                json_string(&title(code)),
                status.as_u16(),
                json_string(error.message()),
            );
            if let Some(id) = invocation_id {
                body.push_str(",\"invocationId\":");
                body.push_str(&json_string(id));
            }
            // The payload always has members (`code` at least): splice them in after a comma.
            let payload = payload_text(error);
            body.push(',');
            body.push_str(&payload[1..]);
            let retry_after = match error.retry() {
                Retry::AfterDelay => error.retry_after().map(|d| d.as_millis().div_ceil(1000) as u64),
                _ => None,
            };
            Encoded { status, content_type: PROBLEM_JSON, retry_after, body }
        }
        ok => Encoded {
            status: StatusCode::OK,
            content_type: JSON,
            retry_after: None,
            body: serde_json::to_string(ok).unwrap_or_else(|_| ok.to_json().to_string()),
        },
    }
}

/// Why a response could not be read back as an `InvokeResult`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The response is a protocol fault (its problem `type`), not a result.
    Protocol(String),
    /// The body does not have the binding's shape, or the payload fails the matrix checks.
    Malformed(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Protocol(kind) => write!(f, "protocol fault {kind}"),
            DecodeError::Malformed(why) => write!(f, "malformed response: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads a response (its status and body) back as the `InvokeResult` it carries. The inverse
/// of [`encode`]; the payload is parsed with the matrix checks.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_http::wire::{decode, encode};
///
/// let result = InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), Some("inv-1".into()));
/// let encoded = encode(&result);
/// assert_eq!(decode(encoded.status.as_u16(), &encoded.body).unwrap(), result);
/// ```
pub fn decode(status: u16, body: &str) -> Result<InvokeResult, DecodeError> {
    if status == 200 {
        return serde_json::from_str(body).map_err(|e| DecodeError::Malformed(e.to_string()));
    }
    let mut members: Map<String, Value> =
        serde_json::from_str(body).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    let kind = members.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    if let Some(kind) = kind.strip_prefix(PROTOCOL_TYPE_PREFIX) {
        return Err(DecodeError::Protocol(kind.to_string()));
    }
    if !kind.starts_with(ERROR_TYPE_PREFIX) {
        return Err(DecodeError::Malformed(format!("unexpected problem type {kind:?}")));
    }
    let invocation_id = match members.remove("invocationId") {
        Some(Value::String(id)) => Some(id),
        None => None,
        Some(_) => return Err(DecodeError::Malformed("invocationId is not a string".into())),
    };
    for name in PROBLEM_MEMBERS {
        members.remove(name);
    }
    let payload: ErrorPayload =
        serde_json::from_value(Value::Object(members)).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    Ok(InvokeResult::error(payload, invocation_id))
}

/// A fault of the exchange itself: the request never reached the pipeline. Each kind declares its
/// status, problem `type` suffix and fixed text here, where it is defined; nothing from the
/// request is echoed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolFault {
    /// The body is not JSON (syntax error, truncated, nested deeper than the parser allows, or
    /// not UTF-8).
    MalformedJson,
    /// The body is JSON but not an invoke request (not an object, wrong member types, unknown
    /// members, missing `capability`, a member name repeated within one object at any depth, or
    /// an `invocationId` that is not 1 to 255 printable ASCII characters).
    InvalidRequest,
    /// `Idempotency-Key` and the body's `invocationId` are both present and differ.
    InvocationIdMismatch,
    /// A header the binding reads has an invalid value: `Idempotency-Key` (not a valid key, or
    /// sent more than once), the consumer header, or `Host` (sent more than once).
    InvalidHeader,
    /// The body is not `application/json` in UTF-8 without a content coding: another media
    /// type, no or several `Content-Type` fields, a `charset` other than `utf-8`, or a
    /// `Content-Encoding` other than `identity` (answered with `Accept-Encoding: identity`).
    UnsupportedMediaType,
    /// The request's host (the absolute-form target's authority, else `Host`) is not in
    /// [`crate::HttpConfig::allowed_hosts`] (DNS-rebinding protection).
    HostNotAllowed,
    /// The body is larger than [`crate::HttpConfig::max_body_bytes`], or holds more JSON values
    /// than one per 16 bytes of it (parsed, it would take many times its size).
    BodyTooLarge,
    /// The body did not arrive within [`crate::HttpConfig::body_timeout`].
    RequestTimeout,
    /// No route at this path.
    NotFound,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// The server failed while answering (the invoke task ended abnormally, a snapshot could not
    /// be serialized, the task store failed, or a task record holds a payload this version cannot
    /// read). Logged at error level; nothing of the cause is sent.
    Internal,
    /// The authenticator refused the request at the transport: no access token, or one that is
    /// not valid for this resource (`401`, with the authenticator's `WWW-Authenticate`
    /// challenge). Only an authenticator that rejects (an OAuth resource server) produces it.
    Unauthorized,
    /// The access token is valid but lacks a scope the resource requires (`403`, with
    /// `WWW-Authenticate: Bearer error="insufficient_scope", scope=…`).
    InsufficientScope,
    /// The authenticator cannot check credentials now (its signing keys are unreachable):
    /// `503`.
    AuthUnavailable,
    /// No task with this id is visible to the caller: unknown, expired, or another principal's
    /// (the three are answered alike; see [`crate::asynchronous`]).
    TaskNotFound,
}

impl ProtocolFault {
    /// Every kind, in declaration order.
    pub const ALL: [ProtocolFault; 15] = [
        ProtocolFault::MalformedJson,
        ProtocolFault::InvalidRequest,
        ProtocolFault::InvocationIdMismatch,
        ProtocolFault::InvalidHeader,
        ProtocolFault::UnsupportedMediaType,
        ProtocolFault::HostNotAllowed,
        ProtocolFault::BodyTooLarge,
        ProtocolFault::RequestTimeout,
        ProtocolFault::NotFound,
        ProtocolFault::MethodNotAllowed,
        ProtocolFault::Internal,
        ProtocolFault::Unauthorized,
        ProtocolFault::InsufficientScope,
        ProtocolFault::AuthUnavailable,
        ProtocolFault::TaskNotFound,
    ];

    /// (status, kind, title, detail).
    const fn row(self) -> (StatusCode, &'static str, &'static str, &'static str) {
        match self {
            ProtocolFault::MalformedJson => (
                StatusCode::BAD_REQUEST,
                "malformed-json",
                "Malformed JSON",
                "The request body is not valid JSON. Send one JSON object.",
            ),
            ProtocolFault::InvalidRequest => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "Invalid invoke request",
                "The request body is not an invoke request. Send {\"capability\", \"input\"?, \"invocationId\"?, \"target\"?, \"surfaceId\"?, \"surfaceVersion\"?, \"toolVersion\"?, \"confirmationId\"?} with those types, no other members and no member twice; an invocationId has 1 to 255 printable ASCII characters.",
            ),
            ProtocolFault::InvocationIdMismatch => (
                StatusCode::BAD_REQUEST,
                "invocation-id-mismatch",
                "Invocation id mismatch",
                "The Idempotency-Key header and the body's invocationId differ. Send one of them, or the same value in both.",
            ),
            ProtocolFault::InvalidHeader => (
                StatusCode::BAD_REQUEST,
                "invalid-header",
                "Invalid header",
                "A header has an invalid value or is repeated. Idempotency-Key (at most one) is a token of 1 to 255 visible ASCII characters or a structured-field string of 1 to 255 printable ASCII characters; the consumer header takes 1 to 64 of [A-Za-z0-9._-]; send one Host.",
            ),
            ProtocolFault::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
                "Send the request body as application/json, in UTF-8, without a content coding.",
            ),
            ProtocolFault::HostNotAllowed => (
                StatusCode::FORBIDDEN,
                "host-not-allowed",
                "Host not allowed",
                "This server does not answer for this Host.",
            ),
            ProtocolFault::BodyTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "Request body too large",
                "The request body is larger than this server accepts. Send a smaller input.",
            ),
            ProtocolFault::RequestTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                "request-timeout",
                "Request timeout",
                "The request body did not arrive in time. Send the whole body promptly.",
            ),
            ProtocolFault::NotFound => (
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                "No route at this path. Use GET capabilities or POST invoke.",
            ),
            ProtocolFault::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                "This route does not take this method; see the Allow header.",
            ),
            ProtocolFault::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "The server failed to answer this request. For an invoke, send it again with the same Idempotency-Key to learn its outcome.",
            ),
            ProtocolFault::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                "This resource needs a valid access token, sent as Authorization: Bearer. The one sent, if any, is not valid here. Where WWW-Authenticate names resource metadata, an authorization server it lists issues them.",
            ),
            ProtocolFault::InsufficientScope => (
                StatusCode::FORBIDDEN,
                "insufficient-scope",
                "Insufficient scope",
                "The access token lacks a scope this resource requires (see WWW-Authenticate). Get a token with that scope.",
            ),
            ProtocolFault::AuthUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "auth-unavailable",
                "Authentication unavailable",
                "Credentials cannot be checked right now. Retry later.",
            ),
            ProtocolFault::TaskNotFound => (
                StatusCode::NOT_FOUND,
                "task-not-found",
                "Task not found",
                "No task with this id is visible to you: it is unknown, it has expired, or it is not yours. Its call may have run: to learn its outcome, send the request again with the same Idempotency-Key; without one, check the current state before calling again.",
            ),
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        self.row().0
    }

    /// The kind: the problem `type` after [`PROTOCOL_TYPE_PREFIX`].
    pub fn kind(self) -> &'static str {
        self.row().1
    }

    /// The problem body: `{type, title, status, detail}` and nothing else (no `code`).
    ///
    /// ```
    /// use agent_surface_http::wire::ProtocolFault;
    /// assert_eq!(
    ///     ProtocolFault::UnsupportedMediaType.body(),
    ///     r#"{"type":"urn:agent-surface:protocol:unsupported-media-type","title":"Unsupported media type","status":415,"detail":"Send the request body as application/json, in UTF-8, without a content coding."}"#
    /// );
    /// ```
    pub fn body(self) -> String {
        let (status, kind, title, detail) = self.row();
        format!(
            "{{\"type\":{},\"title\":{},\"status\":{},\"detail\":{}}}",
            json_string(&format!("{PROTOCOL_TYPE_PREFIX}{kind}")),
            json_string(title),
            status.as_u16(),
            json_string(detail),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_words() {
        assert_eq!(title("STALE_CAPABILITY"), "Stale capability");
        assert_eq!(title("TIMEOUT"), "Timeout");
    }

    #[test]
    fn protocol_fault_bodies_are_json_without_code() {
        for fault in ProtocolFault::ALL {
            let v: Value = serde_json::from_str(&fault.body()).unwrap();
            assert_eq!(v["status"], fault.status().as_u16());
            assert!(v.get("code").is_none());
            assert_eq!(decode(fault.status().as_u16(), &fault.body()), Err(DecodeError::Protocol(fault.kind().into())));
        }
    }
}
